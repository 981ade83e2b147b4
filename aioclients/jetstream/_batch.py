"""Atomic batch publish (ADR-50) over the ``$JS.API`` request layer.

One call sends one batch: the first message as a request (the server answers
whether the batch is open), the messages in the middle pipelined without
replies (the transport's bounded write buffer is the only wait), and the commit
as a request whose pub ack tells where the batch went. The headers and the
answers are :mod:`aioclients.jetstream._protocol._batch`'s.

All or nothing holds on the server: until the commit arrives nothing of the
batch is visible, and a batch that is never committed is dropped after 10 s.
So every failure before the commit is sent leaves nothing stored, and is
reported as such; only a commit whose answer never comes leaves the outcome
unknown, and the error says so.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable

from aioclients._errors import ConnectError
from aioclients.jetstream._api import JetStreamApi, check_timeout
from aioclients.jetstream._errors import (
    APITimeoutError,
    BatchAbortedError,
    BatchTimeoutError,
    JetStreamClosedError,
)
from aioclients.jetstream._protocol._batch import (
    BATCH_COMMIT,
    BATCH_ID,
    BATCH_SEQUENCE,
    BatchAck,
    BatchMessage,
    check_sizes,
    collect_batch,
    middle_frames,
    open_reply_error,
    parse_batch_ack,
)

__all__ = ("BATCH_VERSION", "publish_batch")

log = logging.getLogger("aioclients.jetstream.batch")

#: Atomic batches came with nats-server 2.12 (ADR-50).
BATCH_VERSION = (2, 12, 0)


def _status(headers: object) -> str | None:
    if isinstance(headers, dict):
        status = headers.get("Status")
        return status if isinstance(status, str) else None
    return None


def _request_headers(
    batch_id: str, sequence: int, message: BatchMessage, *, commit: bool
) -> dict[str, str | list[str]]:
    headers: dict[str, str | list[str]] = dict(message.headers) if message.headers else {}
    headers[BATCH_ID] = batch_id
    headers[BATCH_SEQUENCE] = str(sequence)
    if commit:
        headers[BATCH_COMMIT] = "1"
    return headers


async def publish_batch(
    api: JetStreamApi, messages: Iterable[object], timeout: float | None = None
) -> BatchAck:
    """Publish ``messages`` as one atomic batch: all are stored, or none.

    Args:
        api: the request layer.
        messages: ``(subject, payload)`` or ``(subject, payload, headers)`` tuples,
            at most 1,000.
        timeout: seconds for the whole batch (default: the context's timeout).

    Raises:
        BatchAbortedError: the batch was not stored (the server's ``err_code``
            where it said why); ``BatchTimeoutError`` when time ran out.
        InvalidArgumentError: bad messages (nothing is sent).
        MaxPayloadError: a message is over the server's ``max_payload``.
        ServerTooOldError: the server is older than 2.12.
    """
    api.check_not_closed()
    budget = api.timeout if timeout is None else check_timeout(timeout)
    batch = collect_batch(messages)
    await api.require("atomic batch publish", version=BATCH_VERSION)
    batch_id = uuid.uuid4().hex
    first = batch[0]
    count = len(batch)
    check_sizes(batch_id, batch, api.nc.max_payload)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget
    stage = "the batch's first message" if count > 1 else "the batch's commit"
    try:
        first_headers = _request_headers(batch_id, 1, first, commit=count == 1)
        # ADR-22, as for publish: "no responders" is what a cluster answers for a
        # moment after the stream is created or while its leader changes. Nothing
        # was stored (the server holds no state of the batch), so the first message
        # is sent again, retry_attempts times, retry_wait apart, within the budget.
        left, wait = api.acks.retry_attempts, api.acks.retry_wait
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise APITimeoutError(f"no time left for {stage}")
            reply = await api.requests.request(
                first.subject, first.payload, remaining, stage, first_headers
            )
            if _status(reply.headers) != "503" or left <= 0:
                break
            if loop.time() + wait >= deadline:
                break
            left -= 1
            log.debug(
                "no stream answered the batch's first message to %r; trying again (%d left)",
                first.subject,
                left,
            )
            await asyncio.sleep(wait)
        if count == 1:
            return parse_batch_ack(reply.data, _status(reply.headers), batch_id)
        refusal = open_reply_error(reply.data, _status(reply.headers))
        if refusal is not None:
            raise refusal
        stage = "the batch's messages"
        send = api.transport.send
        for write in middle_frames(batch_id, batch):
            await send(write, deadline, stage)
        last = batch[-1]
        stage = "the batch's commit"
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise APITimeoutError(f"no time left for {stage}")
        reply = await api.requests.request(
            last.subject,
            last.payload,
            remaining,
            stage,
            _request_headers(batch_id, count, last, commit=True),
        )
    except BatchAbortedError:
        raise
    except APITimeoutError as exc:
        raise _timeout_error(stage, budget, batch_id) from exc
    except (JetStreamClosedError, ConnectError) as exc:
        raise BatchAbortedError(
            f"{_outcome(stage)}: the connection closed or dropped while sending {stage} ({exc})",
            hint="publish the batch again once connected",
        ) from exc
    return parse_batch_ack(reply.data, _status(reply.headers), batch_id)


def _outcome(stage: str) -> str:
    if stage == "the batch's commit":
        return "atomic batch may or may not be stored (whole, either way)"
    return "atomic batch not stored"


def _timeout_error(stage: str, budget: float, batch_id: str) -> BatchTimeoutError:
    if stage == "the batch's commit":
        return BatchTimeoutError(
            f"no answer to the commit of atomic batch {batch_id} within {budget}s: "
            "the batch may or may not be stored (whole, either way)",
            hint="look at the stream (its last sequence) before publishing it again",
        )
    return BatchTimeoutError(
        f"atomic batch not stored: {stage} did not get through within {budget}s, "
        "so the commit was never sent",
        hint="the server drops the uncommitted batch; publish it again",
    )
