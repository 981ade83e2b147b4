"""Per-message options of a JetStream publish: TTLs (ADR-43) and counters (ADR-49).

- ``Nats-TTL``: how long the stream keeps one message, as a Go duration
  (``1.5s``, ``1m0s``: what Go's ``time.Duration.String`` writes, as nats.go
  sends it) or ``never``. The server takes nothing under one second
  (error 10165), and only on streams with ``allow_msg_ttl`` (10166).
- ``Nats-Incr``: the increment of a counter stream's subject (a decimal integer
  of any size, with a sign). The server answers with the new total as a string
  (``{"stream":..,"seq":..,"val":"42"}``) and stores ``{"val":"42"}``.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import math
import re
from datetime import timedelta

from aioclients._errors import InvalidArgumentError, RemoteProtocolError

__all__ = (
    "COUNTER_FEATURE",
    "COUNTER_VERSION",
    "INCR_HEADER",
    "MARKER_REASON_HEADER",
    "TTL_FEATURE",
    "TTL_HEADER",
    "TTL_VERSION",
    "counter_value_of",
    "format_duration",
    "format_go_duration",
    "format_increment",
    "format_ttl",
    "parse_counter_value",
)

TTL_HEADER = "Nats-TTL"
INCR_HEADER = "Nats-Incr"
MARKER_REASON_HEADER = "Nats-Marker-Reason"

#: What a TTL publish needs: the server ignores ``Nats-TTL`` before 2.11.
TTL_FEATURE = "per-message TTL (ADR-43)"
TTL_VERSION = (2, 11, 0)
#: What a counter increment needs: streams count from nats-server 2.12.
COUNTER_FEATURE = "message counters (ADR-49)"
COUNTER_VERSION = (2, 12, 0)

#: The largest Go duration (int64 nanoseconds).
_MAX_NS = 2**63 - 1
_NS_PER_S = 1_000_000_000
_VALUE = re.compile(r"[+-]?[0-9]+")


def format_go_duration(ns: int) -> str:
    """``ns`` nanoseconds (an int64) as Go's ``time.Duration.String`` writes them:
    hours, minutes and seconds (``1h0m0s``, ``1m30.5s``, ``2s``), leading zero
    units left out, the seconds' fraction with no trailing zeros; under a second
    the largest unit whose leading digit is not zero (``1.5ms``, ``2µs``, ``7ns``);
    ``0s`` for zero, a ``-`` in front of a negative one.

    Raises:
        ValueError: outside Go's int64 range.
    """
    if not -(2**63) <= ns <= _MAX_NS:
        raise ValueError(f"{ns} ns is outside a Go duration's range")
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = -ns if ns < 0 else ns
    if u < _NS_PER_S:
        if u < 1000:
            return f"{sign}{u}ns"
        whole, frac, width, unit = (
            (*divmod(u, 1000), 3, "µs") if u < 1_000_000 else (*divmod(u, 1_000_000), 6, "ms")
        )
        return f"{sign}{whole}{_fraction(frac, width)}{unit}"
    seconds, frac = divmod(u, _NS_PER_S)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    text = f"{seconds}{_fraction(frac, 9)}s"
    if minutes or hours:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


def _fraction(value: int, width: int) -> str:
    """``.`` and the ``width``-digit fraction ``value`` without its trailing zeros
    (nothing for zero)."""
    return f".{value:0{width}d}".rstrip("0") if value else ""


def format_duration(value: object, *, name: str, allow_never: bool) -> str:
    """``value`` (seconds as int/float/timedelta, at least 1, or ``"never"`` where
    ``allow_never``) as the Go duration the server's headers take (``Nats-TTL``,
    ``Nats-Schedule-TTL``, ``@every``), written as nats.go writes it
    (:func:`format_go_duration`: ``2s``, ``1.5s``, ``1m30s``, ``1h0m0s``). A float
    is taken to the nearest nanosecond.

    Raises:
        InvalidArgumentError: not a number of seconds >= 1 (or ``"never"``).
    """
    if allow_never and value == "never" and isinstance(value, str):
        return "never"
    if isinstance(value, timedelta):
        ns = (value.days * 86_400 + value.seconds) * _NS_PER_S + value.microseconds * 1000
    elif isinstance(value, int) and not isinstance(value, bool):
        ns = value * _NS_PER_S
    elif isinstance(value, float) and math.isfinite(value):
        ns = round(value * _NS_PER_S)
    else:
        also = " or 'never'" if allow_never else ""
        raise InvalidArgumentError(
            f"{name} must be a number of seconds >= 1{also}, got {value!r:.40}"
        )
    if ns < _NS_PER_S:
        raise InvalidArgumentError(
            f"{name} must be a number of seconds >= 1 (at least 1 second is the server's "
            f"minimum), got {value!r:.40}"
        )
    if ns > _MAX_NS:
        raise InvalidArgumentError(f"{name} is too long for the server (about 292 years at most)")
    return format_go_duration(ns)


def format_ttl(ttl: object, *, name: str = "ttl") -> str:
    """``ttl`` as ``Nats-TTL`` takes it: :func:`format_duration`, ``"never"`` allowed."""
    return format_duration(ttl, name=name, allow_never=True)


def format_increment(delta: object) -> str:
    """A counter increment as ``Nats-Incr`` takes it (``+5``, ``-3``, ``0``).

    Raises:
        InvalidArgumentError: not an int (a bool is not one either).
    """
    if not isinstance(delta, int) or isinstance(delta, bool):
        raise InvalidArgumentError(f"delta must be an int, got {delta!r:.40}")
    return f"+{delta}" if delta > 0 else str(delta)


def parse_counter_value(text: object, *, what: str) -> int:
    """The integer of a counter's ``val`` string (any size).

    Raises:
        RemoteProtocolError: not a decimal integer.
    """
    if not isinstance(text, str) or not _VALUE.fullmatch(text):
        raise RemoteProtocolError(f"{what} carries no counter value: {text!r:.60}")
    return int(text)


def counter_value_of(payload: bytes, *, what: str) -> int:
    """The total stored in a counter message (``{"val":"42"}``).

    Raises:
        RemoteProtocolError: the payload is not a counter's.
    """
    try:
        data = json.loads(payload)
    except ValueError:
        raise RemoteProtocolError(f"{what} is not a counter message: {payload[:60]!r}") from None
    if not isinstance(data, dict):
        raise RemoteProtocolError(f"{what} is not a counter message: {payload[:60]!r}")
    return parse_counter_value(data.get("val"), what=what)
