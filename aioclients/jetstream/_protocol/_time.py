"""Server timestamps.

The server writes RFC 3339 with nanoseconds (``2024-01-02T03:04:05.123456789Z``)
in JSON and in ``Nats-Time-Stamp``; servers before 2.10 wrote Go's
``time.String()`` form (``2022-08-06 00:29:27.587861324 +0000 UTC``) in the
header. Python's datetime holds microseconds, so extra digits are truncated.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from aioclients._errors import RemoteProtocolError

__all__ = ("format_rfc3339", "parse_server_time")

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"\s*(Z|[+-]\d{2}:?\d{2})(?:\s+\w+)?$"
)


def parse_server_time(text: str) -> datetime:
    """Parse a server timestamp into an aware UTC datetime."""
    # Fast path for what current servers send: "2024-01-02T03:04:05.123456789Z".
    if len(text) > 20 and text[-1] == "Z" and text[10] == "T" and text[19] == ".":
        frac = text[20:-1]
        if frac.isdigit():
            try:
                return datetime.fromisoformat(f"{text[:19]}.{frac[:6]:0<6}+00:00")
            except ValueError:
                pass  # fall through to the general parser and its error
    m = _RFC3339.match(text.strip())
    if not m:
        raise RemoteProtocolError(f"unparseable server timestamp {text!r}")
    year, month, day, hour, minute, second, frac, tz = m.groups()
    micros = int((frac or "0")[:6].ljust(6, "0"))
    if tz == "Z":
        offset = timedelta(0)
    else:
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    local = datetime(
        int(year),
        int(month),
        int(day),
        int(hour),
        int(minute),
        int(second),
        micros,
        tzinfo=timezone(offset),
    )
    return local.astimezone(timezone.utc)


def format_rfc3339(value: datetime) -> str:
    """Format an aware datetime as RFC 3339 in UTC (what the server's JSON expects)."""
    if value.tzinfo is None:
        raise ValueError("datetime must be timezone-aware (e.g. datetime.now(timezone.utc))")
    v = value.astimezone(timezone.utc)
    # Not strftime: it does not zero-pad years below 1000 on every platform.
    return (
        f"{v.year:04d}-{v.month:02d}-{v.day:02d}T"
        f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}.{v.microsecond:06d}Z"
    )
