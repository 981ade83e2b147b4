"""Consumer pause, resume and reset, and finding a stream by subject.

- Pause and resume (nats-server 2.11, JetStream API level 1):
  ``$JS.API.CONSUMER.PAUSE.<stream>.<consumer>`` with ``{"pause_until": RFC 3339}``
  pauses until then; an empty object resumes. The answer is
  ``{"paused", "pause_until", "pause_remaining"}`` (nanoseconds). A paused
  consumer keeps its pulls waiting and its push subscription quiet; the server
  still sends idle heartbeats.
- Reset (nats-server 2.14, API level 4, nats.go ``ResetConsumer`` /
  ``ResetConsumerToSequence``): ``$JS.API.CONSUMER.RESET.<stream>.<consumer>``,
  an empty body goes back to the ack floor + 1, ``{"seq": n}`` to ``n``; the
  answer is the consumer's info plus ``reset_seq``. The consumer itself listens
  on that subject, so a request for a consumer that does not exist is answered
  by nobody (not even with "no responders": the server's ``$JS.API.>``
  subscription takes it and drops it). The request is raced with a
  consumer-info, whose "not found" ends it at once.
- ``STREAM.NAMES`` with a subject: the stream that stores it.

Every request that needs a level checks it first (``JetStreamApi.require``,
ADR-44), so an older server raises ``ServerTooOldError`` naming the feature
instead of leaving a request unanswered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from aioclients._core._checks import check_int
from aioclients._errors import InvalidArgumentError
from aioclients.jetstream._api import JetStreamApi
from aioclients.jetstream._errors import APITimeoutError, StreamNotFoundError
from aioclients.jetstream._models import ConsumerInfo, ConsumerPause
from aioclients.jetstream._protocol._names import (
    validate_consumer_name,
    validate_filter_subject,
    validate_stream_name,
)
from aioclients.jetstream._protocol._time import format_rfc3339

__all__ = (
    "PAUSE_LEVEL",
    "RESET_LEVEL",
    "pause_consumer",
    "reset_consumer",
    "resume_consumer",
    "stream_name_by_subject",
)

#: JetStream API levels (ADR-44): pause came with nats-server 2.11, reset with 2.14.
PAUSE_LEVEL = 1
RESET_LEVEL = 4


def pause_until_wire(until: object) -> str:
    """``until`` (an aware ``datetime``) as the server's RFC 3339.

    Raises:
        InvalidArgumentError: not a datetime, or a naive one.
    """
    if not isinstance(until, datetime):
        raise InvalidArgumentError(f"until must be an aware datetime, got {type(until).__name__}")
    if until.tzinfo is None or until.utcoffset() is None:
        raise InvalidArgumentError(
            "until must be timezone-aware, e.g. datetime.now(timezone.utc) + "
            "timedelta(minutes=5); a naive datetime is ambiguous"
        )
    return format_rfc3339(until)


async def pause_consumer(
    api: JetStreamApi, stream: str, name: str, until: datetime
) -> ConsumerPause:
    """Pause ``stream``/``name`` until ``until`` (a time in the past resumes it).

    Raises:
        InvalidArgumentError: a naive or non-datetime ``until``, bad names.
        ConsumerNotFoundError: no such consumer.
        ServerTooOldError: nats-server before 2.11.
    """
    body = {"pause_until": pause_until_wire(until)}
    return await _pause(api, stream, name, body, "consumer pause")


async def resume_consumer(api: JetStreamApi, stream: str, name: str) -> ConsumerPause:
    """End a pause of ``stream``/``name`` now (a consumer not paused stays so)."""
    return await _pause(api, stream, name, {}, "consumer resume")


async def _pause(
    api: JetStreamApi, stream: str, name: str, body: Mapping[str, Any], feature: str
) -> ConsumerPause:
    validate_stream_name(stream)
    validate_consumer_name(name)
    await api.require(feature, level=PAUSE_LEVEL)
    data = await api.request(
        f"CONSUMER.PAUSE.{stream}.{name}", body, level=PAUSE_LEVEL, feature=feature
    )
    return ConsumerPause.from_json(data)


async def reset_consumer(
    api: JetStreamApi, stream: str, name: str, seq: int | None = None
) -> ConsumerInfo:
    """Reset where ``stream``/``name`` delivers from: the ack floor + 1, or ``seq``.

    Raises:
        ConsumerNotFoundError: no such consumer (at once, never a timeout).
        StreamNotFoundError: no such stream.
        JetStreamError: the server refused the reset (err_code 10204: ``seq`` does
            not fit the consumer's deliver policy).
        ServerTooOldError: nats-server before 2.14.
    """
    validate_stream_name(stream)
    validate_consumer_name(name)
    body: dict[str, Any] | None = None
    if seq is not None:
        body = {"seq": check_int("seq", seq, minimum=1)}
    feature = "consumer reset"
    await api.require(feature, level=RESET_LEVEL)
    reset = asyncio.ensure_future(
        api.request(f"CONSUMER.RESET.{stream}.{name}", body, level=RESET_LEVEL, feature=feature)
    )
    exists = asyncio.ensure_future(api.consumer_info(stream, name))
    try:
        await asyncio.wait({reset, exists}, return_when=asyncio.FIRST_COMPLETED)
        if not reset.done():
            exists.result()  # not found: raises, and the reset is abandoned below
        try:
            data = await reset
        except APITimeoutError:
            # Deleted while we waited? Then say so rather than time out.
            await api.consumer_info(stream, name)
            raise
        return ConsumerInfo.from_json(data)
    finally:
        unfinished = [task for task in (reset, exists) if not task.done()]
        for task in unfinished:
            task.cancel()
        if unfinished:
            await asyncio.wait(unfinished)
        for task in (reset, exists):  # retrieved: no "exception never retrieved" log
            if not task.cancelled():
                task.exception()


async def stream_name_by_subject(api: JetStreamApi, subject: str) -> str:
    """The name of the stream that stores ``subject``.

    Raises:
        StreamNotFoundError: no stream does.
        InvalidArgumentError: not a valid subject.
    """
    if not isinstance(subject, str):
        raise InvalidArgumentError(f"subject must be a str, got {type(subject).__name__}")
    validate_filter_subject(subject)
    data = await api.request("STREAM.NAMES", {"offset": 0, "subject": subject})
    names = data.get("streams") or []
    if names:
        return str(names[0])
    raise StreamNotFoundError(f"no stream stores subject {subject!r}", code=404, err_code=10059)
