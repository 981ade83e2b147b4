"""Scheduled messages (ADR-51): the headers of a schedule, checked before sending.

A schedule is one message on its own subject, in a stream with
``allow_msg_schedules``; the server publishes its payload (and its other
headers) to ``Nats-Schedule-Target``, a subject of the same stream, when the
schedule says:

- ``@at <RFC 3339>``: once (at once if that time has passed), then the
  schedule message is removed (nats-server 2.12);
- ``@every <Go duration>``: every interval, at least one second (2.14);
- a 6-field cron (seconds minutes hours day-of-month month day-of-week) or
  ``@yearly`` / ``@annually`` / ``@monthly`` / ``@weekly`` / ``@daily`` /
  ``@midnight`` / ``@hourly`` (2.14), in UTC unless ``Nats-Schedule-Time-Zone``
  names an IANA zone (2.14, cron only).

``Nats-Schedule-Source`` (2.14, any pattern) samples a subject of the same stream:
when the schedule fires it publishes that subject's last message (its payload and
headers) instead of its own, and its own when the subject holds none. A literal
subject, other than the target and the schedule's own.

``Nats-Schedule-TTL`` sets the TTL (``Nats-TTL``) of the messages the schedule
produces (the stream needs ``allow_msg_ttl``); like ``Nats-TTL`` it is a Go
duration of at least one second, or ``never``.

The server only says "pattern is invalid" or "target is invalid"; the checks
here say which argument is wrong and why, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from aioclients._errors import InvalidArgumentError
from aioclients.jetstream._protocol._level import Version
from aioclients.jetstream._protocol._msgopts import format_duration
from aioclients.jetstream._protocol._names import validate_publish_subject

__all__ = (
    "PREDEFINED_SCHEDULES",
    "SCHEDULE",
    "SCHEDULE_SOURCE",
    "SCHEDULE_TARGET",
    "SCHEDULE_TIME_ZONE",
    "SCHEDULE_TTL",
    "Schedule",
    "build_schedule",
    "format_at",
)

SCHEDULE = "Nats-Schedule"
SCHEDULE_TARGET = "Nats-Schedule-Target"
SCHEDULE_SOURCE = "Nats-Schedule-Source"
SCHEDULE_TTL = "Nats-Schedule-TTL"
SCHEDULE_TIME_ZONE = "Nats-Schedule-Time-Zone"

#: The named schedules the server knows besides 6-field cron text.
PREDEFINED_SCHEDULES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)

#: ``@at`` schedules: nats-server 2.12; the rest (and time zones): 2.14.
AT_VERSION: Version = (2, 12, 0)
CRON_VERSION: Version = (2, 14, 0)

_CRON_FIELDS = ("seconds", "minutes", "hours", "day of month", "month", "day of week")
_CRON_CHARS = frozenset("0123456789*,-/?abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A checked schedule: its headers and the server version it needs."""

    headers: dict[str, str | list[str]]
    version: Version
    what: str


def format_at(when: object) -> str:
    """``@at`` time: RFC 3339 in UTC to the second, rounded up (never before ``when``)."""
    if not isinstance(when, datetime):
        raise InvalidArgumentError(f"at must be an aware datetime, got {type(when).__name__}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise InvalidArgumentError(
            "at must be an aware datetime (e.g. datetime.now(timezone.utc) + "
            "timedelta(minutes=5)); a naive one has no defined instant"
        )
    utc = when.astimezone(timezone.utc)
    if utc.microsecond:
        utc = utc.replace(microsecond=0) + timedelta(seconds=1)
    if utc < _EPOCH:
        raise InvalidArgumentError(f"at must be after 1970, got {when.isoformat()}")
    return (
        f"@at {utc.year:04d}-{utc.month:02d}-{utc.day:02d}T"
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}Z"
    )


def _cron(text: object) -> str:
    if not isinstance(text, str):
        raise InvalidArgumentError(f"cron must be a str, got {type(text).__name__}")
    stripped = text.strip()
    if stripped.lower() in PREDEFINED_SCHEDULES:
        return stripped.lower()
    if stripped.startswith("@"):
        raise InvalidArgumentError(
            f"cron {text!r} is not a cron; use at= for @at, every= for @every, or one of "
            f"{', '.join(sorted(PREDEFINED_SCHEDULES))}"
        )
    fields = stripped.split()
    if len(fields) != len(_CRON_FIELDS):
        raise InvalidArgumentError(
            f"cron must have 6 fields ({' '.join(_CRON_FIELDS)}), got {len(fields)} in "
            f"{text!r}; a 5-field crontab line needs a seconds field first, e.g. "
            f"'0 {stripped}'"
        )
    for name, field in zip(_CRON_FIELDS, fields, strict=True):
        if not set(field) <= _CRON_CHARS:
            raise InvalidArgumentError(f"cron field {name} {field!r} has characters cron lacks")
    return " ".join(fields)


def build_schedule(
    subject: object,
    *,
    target: object,
    at: object = None,
    every: object = None,
    cron: object = None,
    time_zone: object = None,
    ttl: object = None,
    headers: Mapping[str, str | list[str]] | None = None,
    source: object = None,
) -> Schedule:
    """Check a schedule and build the headers of its message.

    Args:
        subject: the schedule's own subject (one schedule per subject).
        target: where the scheduled messages go (a subject of the same stream).
        at: an aware ``datetime`` (once).
        every: seconds (``float`` or ``timedelta``), at least 1.
        cron: 6-field cron text or a predefined ``@daily``-style name.
        time_zone: an IANA zone name for ``cron`` (default UTC).
        ttl: seconds (>= 1) or ``"never"``: the TTL of the produced messages.
        headers: more headers, passed on to the produced messages.
        source: a subject of the same stream whose last message each firing
            publishes instead of the schedule's own (nats.go ``WithScheduleSource``).

    Raises:
        InvalidArgumentError: not exactly one of ``at`` / ``every`` / ``cron``, a
            naive datetime, ``every`` below a second, a cron without 6 fields,
            ``time_zone`` without ``cron``, a target equal to the subject, ...
    """
    validate_publish_subject(subject)
    try:
        validate_publish_subject(target)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"target: {exc}") from None
    if target == subject:
        raise InvalidArgumentError(
            f"target must differ from the schedule's subject {subject!r}: the subject "
            "holds the schedule, the target receives the messages"
        )
    given = [
        name for name, value in (("at", at), ("every", every), ("cron", cron)) if value is not None
    ]
    if len(given) != 1:
        raise InvalidArgumentError(
            "give exactly one of at=, every= or cron=, got "
            + (" and ".join(given) if given else "none")
        )
    if at is not None:
        pattern, version, what = format_at(at), AT_VERSION, "an @at schedule"
    elif every is not None:
        pattern = f"@every {format_duration(every, name='every', allow_never=False)}"
        version, what = CRON_VERSION, "an @every schedule"
    else:
        pattern, version, what = _cron(cron), CRON_VERSION, "a cron schedule"
    out: dict[str, str | list[str]] = {}
    if headers is not None:
        if not isinstance(headers, Mapping):
            raise InvalidArgumentError(
                "headers must be a mapping of str to str or list[str], "
                f"got {type(headers).__name__}"
            )
        for name, value in headers.items():
            if isinstance(name, str) and name.lower().startswith("nats-schedule"):
                raise InvalidArgumentError(
                    f"header {name!r} is set by publish_schedule's arguments; use them"
                )
            out[name] = value
    out[SCHEDULE] = pattern
    out[SCHEDULE_TARGET] = target  # type: ignore[assignment]  # checked str above
    if source is not None:
        try:
            validate_publish_subject(source)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"source: {exc}") from None
        if source in (subject, target):
            raise InvalidArgumentError(
                f"source must differ from the schedule's subject and target, got {source!r}: "
                "it is the subject whose last message each firing publishes"
            )
        out[SCHEDULE_SOURCE] = source  # type: ignore[assignment]  # checked str above
        version, what = max(version, CRON_VERSION), f"{what} with a source"
    if time_zone is not None:
        if cron is None:
            raise InvalidArgumentError(
                "time_zone applies to cron schedules only (at= carries its own offset, "
                "every= counts from now)"
            )
        if (
            not isinstance(time_zone, str)
            or not time_zone.strip()
            or any(c.isspace() for c in time_zone)
        ):
            raise InvalidArgumentError(
                f"time_zone must be an IANA zone name such as 'Europe/Amsterdam', got {time_zone!r}"
            )
        out[SCHEDULE_TIME_ZONE] = time_zone
    if ttl is not None:
        out[SCHEDULE_TTL] = format_duration(ttl, name="ttl", allow_never=True)
    return Schedule(out, version, what)
