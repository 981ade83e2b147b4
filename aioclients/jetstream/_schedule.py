"""Scheduled messages (ADR-51) over the ``$JS.API`` request layer.

A schedule is one publish whose headers
(:func:`aioclients.jetstream._protocol._schedule.build_schedule`) tell the
stream when to publish its payload to the target. The server ignores unknown
headers on a plain publish, so the server's version is checked before sending:
an old server would store the schedule as an ordinary message and never fire it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from aioclients.jetstream._api import JetStreamApi, check_timeout
from aioclients.jetstream._errors import JetStreamError
from aioclients.jetstream._models import PubAck
from aioclients.jetstream._protocol._schedule import build_schedule

__all__ = ("publish_schedule",)

# The server's refusals of a schedule, and what to do about each.
_HINTS: dict[int, str] = {
    10188: "the stream does not allow schedules; enable it with "
    "update_stream(name, allow_msg_schedules=True)",
    10189: "the server does not accept this schedule pattern",
    10190: "the target must be a subject of the same stream, without wildcards, "
    "other than the schedule's own subject",
    10191: "the TTL of scheduled messages needs allow_msg_ttl=True on the stream "
    "and at least 1 second",
    10203: "the source must be a subject of the same stream, without wildcards, "
    "other than the schedule's subject and its target",
    10223: "the time zone must be an IANA name the server knows, e.g. 'Europe/Amsterdam'",
}


async def publish_schedule(
    api: JetStreamApi,
    subject: str,
    payload: bytes = b"",
    *,
    target: str,
    at: datetime | None = None,
    every: float | timedelta | None = None,
    cron: str | None = None,
    time_zone: str | None = None,
    ttl: float | str | None = None,
    headers: Mapping[str, str | list[str]] | None = None,
    timeout: float | None = None,
    source: str | None = None,
) -> PubAck:
    """Store a schedule on ``subject``; see :meth:`JetStream.publish_schedule`."""
    api.check_not_closed()
    if timeout is not None:
        check_timeout(timeout)
    schedule = build_schedule(
        subject,
        target=target,
        at=at,
        every=every,
        cron=cron,
        time_zone=time_zone,
        ttl=ttl,
        headers=headers,
        source=source,
    )
    await api.require(f"a message schedule ({schedule.what})", version=schedule.version)
    try:
        return await api.publish(subject, payload, schedule.headers, timeout)
    except JetStreamError as exc:
        hint = _HINTS.get(exc.err_code or 0)
        if hint is None:
            raise
        raise type(exc)(
            f"schedule on {subject!r} refused: {exc.description}",
            code=exc.code,
            err_code=exc.err_code,
            hint=hint,
        ) from None
