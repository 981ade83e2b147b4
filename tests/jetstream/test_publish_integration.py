"""Publishing with acknowledgements, expectations, back-pressure and lifecycle,
against a real nats-server."""

from __future__ import annotations

import asyncio
import gc
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import nats
import pytest
from support import RetryLog, Server, retry_log

from aioclients import AioClientsError, InvalidArgumentError
from aioclients.jetstream import (
    APITimeoutError,
    JetStream,
    JetStreamConnectError,
    JetStreamError,
    JetStreamNotEnabledError,
    MaxPayloadError,
    NoStreamResponseError,
    PubAck,
    WrongExpectedStreamError,
    WrongLastMsgIdError,
    WrongLastSequenceError,
    connect,
)
from aioclients.jetstream import _api as jetstream_api
from aioclients.jetstream._publisher import PUBLISH_RETRY_ATTEMPTS
from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def subject(js: JetStream, unique_name: str) -> str:
    """A subject stored by a fresh stream named ``unique_name``."""
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    return f"{unique_name}.events"


async def _messages(js: JetStream, stream: str) -> int:
    return (await js.stream_info(stream)).state.messages


def _assert_closed_error(exc: BaseException) -> None:
    assert type(exc).__name__.endswith("ClosedError"), repr(exc)
    assert isinstance(exc, AioClientsError)


# -- acks and de-duplication -----------------------------------------------------------------


async def test_publish_returns_pub_ack(js: JetStream, unique_name: str, subject: str) -> None:
    first = await js.publish(subject, b"one")
    second = await js.publish(subject, b"two")

    assert isinstance(first, PubAck)
    assert (first.stream, first.seq, first.duplicate) == (unique_name, 1, False)
    assert (second.stream, second.seq, second.duplicate) == (unique_name, 2, False)
    stream = await js.stream(unique_name)
    assert (await stream.get_msg(2)).data == b"two"


async def test_publish_empty_payload(js: JetStream, unique_name: str, subject: str) -> None:
    ack = await js.publish(subject)
    msg = await (await js.stream(unique_name)).get_msg(ack.seq)
    assert msg.data == b""


async def test_msg_id_is_deduplicated_within_the_window(
    js: JetStream, unique_name: str, subject: str
) -> None:
    first = await js.publish(subject, b"x", msg_id="order-1")
    second = await js.publish(subject, b"x", msg_id="order-1")
    other = await js.publish(subject, b"y", msg_id="order-2")

    assert first.duplicate is False
    assert second.duplicate is True
    assert second.seq == first.seq
    assert other.duplicate is False
    assert other.seq == first.seq + 1
    assert await _messages(js, unique_name) == 2
    stored = await (await js.stream(unique_name)).get_msg(first.seq)
    assert stored.headers == {"Nats-Msg-Id": "order-1"}


async def test_msg_id_is_accepted_again_after_the_window(js: JetStream, unique_name: str) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], duplicate_window=0.5)
    subject = f"{unique_name}.x"
    first = await js.publish(subject, b"x", msg_id="again")
    assert (await js.publish(subject, b"x", msg_id="again")).duplicate is True

    # The window is time-based: keep publishing the same id until the server forgets it.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10.0
    while True:
        ack = await js.publish(subject, b"x", msg_id="again")
        if not ack.duplicate:
            break
        assert ack.seq == first.seq
        assert loop.time() < deadline, "msg_id still a duplicate 10 s after a 0.5 s window"
        await asyncio.sleep(0.05)

    assert ack.seq == first.seq + 1
    assert await _messages(js, unique_name) == 2


# -- expectations ----------------------------------------------------------------------------


async def test_expected_stream(js: JetStream, unique_name: str, subject: str) -> None:
    with pytest.raises(WrongExpectedStreamError) as excinfo:
        await js.publish(subject, b"x", expected_stream="SOMETHING_ELSE")
    assert isinstance(excinfo.value, JetStreamError)
    assert excinfo.value.err_code == 10060
    assert await _messages(js, unique_name) == 0

    ack = await js.publish(subject, b"x", expected_stream=unique_name)
    assert ack.seq == 1


async def test_expected_last_seq(js: JetStream, unique_name: str, subject: str) -> None:
    assert (await js.publish(subject, b"0", expected_last_seq=0)).seq == 1
    await js.publish(subject, b"1")

    with pytest.raises(WrongLastSequenceError) as excinfo:
        await js.publish(subject, b"x", expected_last_seq=1)
    assert excinfo.value.err_code == 10071
    assert await _messages(js, unique_name) == 2

    ack = await js.publish(subject, b"x", expected_last_seq=2)
    assert ack.seq == 3


async def test_expected_last_subject_seq(js: JetStream, unique_name: str) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    a, b = f"{unique_name}.a", f"{unique_name}.b"
    await js.publish(a, b"a1")  # 1
    await js.publish(b, b"b1")  # 2

    # The last message on `a` is 1, although the stream's last is 2.
    ack = await js.publish(a, b"a2", expected_last_subject_seq=1)
    assert ack.seq == 3

    with pytest.raises(WrongLastSequenceError):
        await js.publish(a, b"stale", expected_last_subject_seq=1)
    # 0 means "no message on this subject yet".
    assert (await js.publish(f"{unique_name}.c", b"c", expected_last_subject_seq=0)).seq == 4
    with pytest.raises(WrongLastSequenceError):
        await js.publish(f"{unique_name}.c", b"c", expected_last_subject_seq=0)
    assert await _messages(js, unique_name) == 4


async def test_expected_last_subject_seq_of_another_subject(
    js: JetStream, unique_name: str
) -> None:
    """nats.go's WithExpectLastSequenceForSubject: the check reads the last message
    of a subject filter (an aggregate's every event), not of the published one."""
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    order = f"{unique_name}.order.*"
    await js.publish(f"{unique_name}.order.created", b"1")  # 1
    await js.publish(f"{unique_name}.other", b"2")  # 2
    ack = await js.publish(
        f"{unique_name}.order.paid",
        b"3",
        expected_last_subject_seq=1,
        expected_last_subject_seq_subject=order,
    )
    assert ack.seq == 3
    stored = await (await js.stream(unique_name)).get_msg(3)
    assert stored.headers == {
        "Nats-Expected-Last-Subject-Sequence": "1",
        "Nats-Expected-Last-Subject-Sequence-Subject": order,
    }
    # A writer that saw the order at 1 is refused: the order moved on to 3, though
    # nothing was ever published on order.shipped itself.
    future = await js.publish_async(
        f"{unique_name}.order.shipped",
        b"stale",
        expected_last_subject_seq=1,
        expected_last_subject_seq_subject=order,
    )
    with pytest.raises(WrongLastSequenceError):
        await future
    with pytest.raises(InvalidArgumentError, match="needs expected_last_subject_seq"):
        await js.publish(f"{unique_name}.x", b"x", expected_last_subject_seq_subject=order)
    with pytest.raises(InvalidArgumentError, match="expected_last_subject_seq_subject"):
        await js.publish(
            f"{unique_name}.x",
            b"x",
            expected_last_subject_seq=0,
            expected_last_subject_seq_subject="a..b",
        )
    assert await _messages(js, unique_name) == 3


async def test_expected_last_msg_id(js: JetStream, unique_name: str, subject: str) -> None:
    await js.publish(subject, b"1", msg_id="m1")

    with pytest.raises(WrongLastMsgIdError) as excinfo:
        await js.publish(subject, b"2", msg_id="m2", expected_last_msg_id="m0")
    assert excinfo.value.err_code == 10070
    assert await _messages(js, unique_name) == 1

    ack = await js.publish(subject, b"2", msg_id="m2", expected_last_msg_id="m1")
    assert ack.seq == 2


async def test_publish_async_future_carries_expectation_errors(
    js: JetStream, unique_name: str, subject: str
) -> None:
    future = await js.publish_async(subject, b"x", expected_last_seq=5)
    with pytest.raises(WrongLastSequenceError):
        await future
    assert js.publish_async_pending == 0
    assert await _messages(js, unique_name) == 0


# -- refusals ----------------------------------------------------------------------------------


async def test_publish_without_a_stream_raises_no_stream_response(
    js: JetStream, unique_name: str
) -> None:
    start = time.monotonic()
    with pytest.raises(NoStreamResponseError) as excinfo:
        await js.publish(f"{unique_name}.nobody.stores.this", b"x")
    assert excinfo.value.code == 503
    assert time.monotonic() - start < js.timeout  # an answer, not a timeout

    future = await js.publish_async(f"{unique_name}.nobody.stores.this", b"x")
    with pytest.raises(NoStreamResponseError):
        await future


@pytest.mark.parametrize("bad", ["", "a.*", "a.>", ">", "a b", "a..b", ".a", "a.", "a\tb"])
async def test_invalid_subject_is_rejected(js: JetStream, bad: str) -> None:
    with pytest.raises(InvalidArgumentError):
        await js.publish(bad, b"x")
    with pytest.raises(InvalidArgumentError):
        await js.publish_async(bad, b"x")
    assert js.publish_async_pending == 0


@pytest.mark.parametrize("payload", ["text", None, 123, [b"x"]], ids=repr)
async def test_non_bytes_payload_is_rejected(
    js: JetStream, unique_name: str, subject: str, payload: object
) -> None:
    with pytest.raises(InvalidArgumentError):
        await js.publish(subject, payload)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await js.publish_async(subject, payload)  # type: ignore[arg-type]
    assert js.publish_async_pending == 0
    # The context is still usable and nothing was stored.
    assert (await js.publish(subject, b"ok")).seq == 1


async def test_max_payload_is_enforced_before_sending(own_server_allowed: None) -> None:
    async with NatsServer(config="max_payload: 1024") as server:
        async with await connect(server.url) as js:
            await js.create_stream("SMALL", subjects=["small.>"])
            assert js.nc.max_payload == 1024

            with pytest.raises(MaxPayloadError) as excinfo:
                await js.publish("small.x", b"x" * 2000)
            assert isinstance(excinfo.value, InvalidArgumentError)
            # Headers count too: 1000 bytes of payload fit, with 100 bytes of headers not.
            with pytest.raises(MaxPayloadError):
                await js.publish("small.x", b"x" * 1000, headers={"Pad": "p" * 100})
            with pytest.raises(MaxPayloadError):
                await js.publish_async("small.x", b"x" * 1025)
            assert js.publish_async_pending == 0

            # Nothing was sent: the server would have closed the connection for a
            # payload over its limit, and nothing was stored.
            ack = await js.publish("small.x", b"x" * 1000)
            assert ack.seq == 1
            assert js.nc.is_connected
            assert await _messages(js, "SMALL") == 1


# -- "no responders" tried again (ADR-22) ------------------------------------------------------


@pytest.fixture
def retries() -> Iterator[RetryLog]:
    with retry_log("aioclients.jetstream.publish") as handler:
        yield handler


async def test_a_publish_no_stream_took_is_sent_again_once_one_listens(
    js: JetStream, unique_name: str, retries: RetryLog
) -> None:
    # What a cluster does for a moment after a stream is created: no responders.
    task = asyncio.ensure_future(
        js.publish(f"{unique_name}.a", b"late", retry_attempts=20, retry_wait=0.5, timeout=30)
    )
    await asyncio.wait_for(retries.seen.wait(), 10)
    assert not task.done()
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    ack = await asyncio.wait_for(task, 30)
    assert (ack.stream, ack.seq) == (unique_name, 1)
    assert await _messages(js, unique_name) == 1  # stored once


async def test_no_responders_is_tried_retry_attempts_times_then_raised(
    js: JetStream, unique_name: str, retries: RetryLog
) -> None:
    subject = f"{unique_name}.nobody.stores.this"
    with pytest.raises(NoStreamResponseError):
        await js.publish(subject, b"x", retry_attempts=3, retry_wait=0.01)
    assert retries.count == 3

    with pytest.raises(NoStreamResponseError):
        await js.publish(subject, b"x", retry_attempts=0)
    assert retries.count == 3  # none more

    # The timeout bounds the retries too: 1 s apart within 2 s leaves room for one
    # (a second would go out at the deadline), however slow the machine, as long as
    # the two 503s take less than 1 s between them to come back.
    start = time.monotonic()
    with pytest.raises(NoStreamResponseError):
        await js.publish(subject, b"x", retry_attempts=10, retry_wait=1.0, timeout=2.0)
    assert time.monotonic() - start < 2.0 + 1.0  # scheduling slack
    assert retries.count == 4


@pytest.mark.parametrize(
    "options",
    [
        {"retry_attempts": -1},
        {"retry_attempts": True},
        {"retry_attempts": 1.5},
        {"retry_wait": 0},
        {"retry_wait": -1.0},
        {"retry_wait": float("nan")},
        {"retry_wait": "1"},
    ],
)
async def test_bad_retry_options_are_refused_before_sending(
    js: JetStream, unique_name: str, options: dict[str, Any]
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    with pytest.raises(InvalidArgumentError, match="retry_"):
        await js.publish(f"{unique_name}.a", b"x", **options)
    assert await _messages(js, unique_name) == 0


async def test_a_key_value_put_is_sent_again_too(
    js: JetStream, unique_name: str, retries: RetryLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The defaults (twice, 250 ms apart) with more tries: room for a slow stream create.
    monkeypatch.setattr(jetstream_api, "PUBLISH_RETRY_ATTEMPTS", 40)
    bucket = unique_name.replace(".", "_")[-60:]
    kv = await js.create_key_value(bucket)
    await js.delete_stream(kv.stream.name)  # the handle stays; nothing stores its keys
    task = asyncio.ensure_future(kv.put("k", b"v"))
    await asyncio.wait_for(retries.seen.wait(), 10)
    await js.create_key_value(bucket)
    assert await asyncio.wait_for(task, 10) == 1
    assert (await kv.get("k")).value == b"v"


async def test_publish_async_sends_again_too_and_keeps_its_slot(
    js: JetStream, unique_name: str, retries: RetryLog
) -> None:
    ctx = JetStream(js.nc, max_pending=1)
    try:
        future = await ctx.publish_async(
            f"{unique_name}.a", b"late", retry_attempts=20, retry_wait=0.5, timeout=30
        )
        await asyncio.wait_for(retries.seen.wait(), 10)
        assert not future.done()
        assert ctx.publish_async_pending == 1  # its slot is held while it waits
        second = asyncio.ensure_future(ctx.publish_async(f"{unique_name}.b", b"next"))
        await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
        ack = await asyncio.wait_for(future, 30)
        assert (ack.stream, ack.seq) == (unique_name, 1)
        assert (await asyncio.wait_for(await second, 10)).seq == 2
        assert await _messages(js, unique_name) == 2  # each stored once
    finally:
        await ctx.close()


async def test_publish_async_no_responders_tries_and_bounds(
    js: JetStream, unique_name: str, retries: RetryLog
) -> None:
    subject = f"{unique_name}.nobody.stores.this"
    future = await js.publish_async(subject, b"x", retry_attempts=3, retry_wait=0.01)
    with pytest.raises(NoStreamResponseError):
        await asyncio.wait_for(future, 10)
    assert retries.count == 3

    future = await js.publish_async(subject, b"x", retry_attempts=0)
    with pytest.raises(NoStreamResponseError):
        await asyncio.wait_for(future, 10)
    assert retries.count == 3  # none more

    # The timeout bounds the tries: 1 s apart within 2 s leaves room for one, and the
    # answer is the stream's 503, not a timeout (see the test above for the numbers).
    future = await js.publish_async(subject, b"x", retry_attempts=10, retry_wait=1.0, timeout=2.0)
    with pytest.raises(NoStreamResponseError):
        await asyncio.wait_for(future, 10)
    assert retries.count == 4

    with pytest.raises(InvalidArgumentError, match="retry_attempts"):
        await js.publish_async(subject, b"x", retry_attempts=-1)
    assert js.publish_async_pending == 0


async def test_a_close_stops_a_publish_waiting_to_be_sent_again(
    js: JetStream, unique_name: str, retries: RetryLog
) -> None:
    ctx = JetStream(js.nc)
    subject = f"{unique_name}.a"
    future = await ctx.publish_async(subject, b"x", retry_attempts=5, retry_wait=0.5)
    await asyncio.wait_for(retries.seen.wait(), 10)
    await ctx.close()
    with pytest.raises(AioClientsError) as excinfo:
        await asyncio.wait_for(future, 10)
    _assert_closed_error(excinfo.value)
    # Nothing is sent after the close: its next try's timer is stopped.
    assert not ctx._acks._resends


async def test_object_store_chunks_are_not_sent_again(
    js: JetStream, unique_name: str, retries: RetryLog
) -> None:
    # A resend would store a chunk behind later ones: a put fails instead. The first
    # chunk alone, sent while no other is in flight and acked before the next goes, is
    # tried again as a publish is (a cluster's fresh bucket answers no responders).
    bucket = unique_name.replace(".", "_")[-40:]
    store = await js.create_object_store(bucket)
    # The stream keeps its meta subjects but no longer stores chunks.
    await js.update_stream(f"OBJ_{bucket}", subjects=[f"$O.{bucket}.M.>"])
    with pytest.raises(NoStreamResponseError):
        await store.put("a", b"x" * 100, chunk_size=10)
    # the first chunk's tries; no other chunk was sent
    assert retries.count == PUBLISH_RETRY_ATTEMPTS
    assert (await store.stream.info()).state.messages == 0


# -- publish_async and back-pressure -----------------------------------------------------------


async def test_publish_async_5000_messages(js: JetStream, unique_name: str, subject: str) -> None:
    futures = [await js.publish_async(subject, b"%d" % i) for i in range(5000)]

    await js.publish_async_complete(timeout=30)

    assert js.publish_async_pending == 0
    assert all(f.done() for f in futures)
    seqs = [f.result().seq for f in futures]
    assert seqs == list(range(1, 5001))
    assert all(f.result().stream == unique_name for f in futures)
    assert await _messages(js, unique_name) == 5000


async def test_publish_async_back_pressure(js: JetStream, unique_name: str, subject: str) -> None:
    bounded = JetStream(js.nc, max_pending=10)
    try:
        futures = []
        peak = 0
        for i in range(300):
            futures.append(await bounded.publish_async(subject, b"%d" % i))
            pending = bounded.publish_async_pending
            assert pending <= 10
            peak = max(peak, pending)
        await bounded.publish_async_complete(timeout=30)
    finally:
        await bounded.close()

    assert peak == 10  # the bound was reached, so publish_async did wait for room
    assert [f.result().seq for f in futures] == list(range(1, 301))
    assert await _messages(js, unique_name) == 300


async def test_publish_async_complete_with_nothing_outstanding(js: JetStream) -> None:
    await js.publish_async_complete(timeout=0.1)
    assert js.publish_async_pending == 0


# -- a paused server ---------------------------------------------------------------------------


@pytest.fixture
async def private_js(nats_server_private: Server, unique_name: str) -> AsyncIterator[JetStream]:
    """A context on the test's own server, with a stream on ``<unique_name>.>``."""
    if isinstance(nats_server_private, ExternalServer):
        pytest.skip("pauses the server; cannot pause an external one")
    ctx = await connect(nats_server_private.url)
    try:
        await ctx.create_stream(unique_name, subjects=[f"{unique_name}.>"])
        yield ctx
    finally:
        nats_server_private.resume()
        await ctx.close()


@pytest.mark.fault
async def test_publish_async_complete_times_out_when_acks_cannot_arrive(
    nats_server_private: NatsServer,
    private_js: JetStream,
    unique_name: str,
) -> None:
    subject = f"{unique_name}.x"
    assert (await private_js.publish(subject, b"before")).seq == 1
    nats_server_private.pause()
    try:
        futures = [await private_js.publish_async(subject, b"%d" % i) for i in range(3)]
        start = time.monotonic()
        with pytest.raises(TimeoutError) as excinfo:
            await private_js.publish_async_complete(timeout=0.5)
        elapsed = time.monotonic() - start
        assert isinstance(excinfo.value, AioClientsError)
        assert 0.4 <= elapsed < 3.0
        assert private_js.publish_async_pending == 3
        assert not any(f.done() for f in futures)
    finally:
        nats_server_private.resume()

    # Once the server runs again the acks arrive; nothing was lost.
    await private_js.publish_async_complete(timeout=10)
    assert [f.result().seq for f in futures] == [2, 3, 4]


@pytest.mark.fault
async def test_publish_async_future_fails_with_api_timeout(
    nats_server_private: NatsServer,
    private_js: JetStream,
    unique_name: str,
) -> None:
    subject = f"{unique_name}.x"
    await private_js.publish(subject, b"before")
    nats_server_private.pause()
    try:
        start = time.monotonic()
        future = await private_js.publish_async(subject, b"lost?", timeout=0.5)
        with pytest.raises(APITimeoutError) as excinfo:
            await future
        elapsed = time.monotonic() - start
        assert isinstance(excinfo.value, TimeoutError)
        assert 0.4 <= elapsed < 3.0
        assert private_js.publish_async_pending == 0  # the timed-out ack frees its slot

        with pytest.raises(APITimeoutError):
            await private_js.publish(subject, b"lost too?", timeout=0.3)
    finally:
        nats_server_private.resume()

    # The server stored both once it ran again; the late acks are ignored.
    ack = await private_js.publish(subject, b"after")
    assert ack.seq == 4
    assert private_js.publish_async_pending == 0


@pytest.mark.fault
async def test_close_fails_outstanding_acks(
    nats_server_private: NatsServer,
    private_js: JetStream,
    unique_name: str,
) -> None:
    ctx = JetStream(private_js.nc)
    nats_server_private.pause()
    try:
        future = await ctx.publish_async(f"{unique_name}.x", b"x")
        await ctx.close()
        with pytest.raises(AioClientsError) as excinfo:
            await future
        _assert_closed_error(excinfo.value)
    finally:
        nats_server_private.resume()
    assert ctx.publish_async_pending == 0


@pytest.mark.fault
async def test_close_while_publish_async_waits_for_room(
    nats_server_private: NatsServer,
    private_js: JetStream,
    unique_name: str,
) -> None:
    subject = f"{unique_name}.x"
    ctx = JetStream(private_js.nc, max_pending=1, timeout=1.0)
    assert (await ctx.publish(subject, b"0")).seq == 1
    nats_server_private.pause()
    try:
        first = await ctx.publish_async(subject, b"1")
        blocked = asyncio.ensure_future(ctx.publish_async(subject, b"2"))
        await asyncio.sleep(0)  # let it run until it waits for room
        assert not blocked.done()

        await ctx.close()

        first_error = first.exception()
        assert first_error is not None
        _assert_closed_error(first_error)
        outcome: BaseException | asyncio.Future[PubAck]
        try:
            outcome = await asyncio.wait_for(blocked, 5)
        except AioClientsError as exc:
            outcome = exc
        if isinstance(outcome, asyncio.Future):
            outcome.cancel()  # do not leave it pending
        assert isinstance(outcome, BaseException), (
            "publish_async returned a future after close() instead of raising"
        )
        _assert_closed_error(outcome)
    finally:
        nats_server_private.resume()

    # Only "0" and "1" were sent; nothing went out after close().
    assert (await private_js.publish(subject, b"after")).seq == 3


@pytest.mark.fault
async def test_timeout_timer_is_rearmed_for_later_publishes(
    nats_server_private: NatsServer,
    private_js: JetStream,
    unique_name: str,
) -> None:
    subject = f"{unique_name}.x"
    await private_js.publish(subject, b"0")
    nats_server_private.pause()
    try:
        long = await private_js.publish_async(subject, b"long", timeout=5.0)
        short = await private_js.publish_async(subject, b"short", timeout=0.3)
        with pytest.raises(APITimeoutError):
            await short
        assert not long.done()  # its own deadline is later
        later = await private_js.publish_async(subject, b"later", timeout=0.3)
        with pytest.raises(APITimeoutError):
            await asyncio.wait_for(later, 3)
    finally:
        nats_server_private.resume()
    assert (await long).seq == 2


# -- lifecycle ---------------------------------------------------------------------------------


async def test_calls_after_close_raise_closed_error(
    nats_server: Server, js: JetStream, subject: str, unique_name: str
) -> None:
    ctx = await connect(nats_server.url)
    await ctx.close()
    await ctx.close()  # idempotent

    assert ctx.closed
    assert ctx.nc.is_closed  # connect() owns its connection
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: ctx.publish(subject, b"x"),
        lambda: ctx.publish_async(subject, b"x"),
        lambda: ctx.create_stream(f"{unique_name}_new"),
        lambda: ctx.stream(unique_name),
        lambda: ctx.account_info(),
    ]
    for call in calls:
        with pytest.raises(AioClientsError) as excinfo:
            await call()
        _assert_closed_error(excinfo.value)
    assert await _messages(js, unique_name) == 0


def _unused_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_connect_to_unreachable_server_fails_fast() -> None:
    start = time.monotonic()
    with pytest.raises(JetStreamConnectError) as excinfo:
        await connect(f"nats://127.0.0.1:{_unused_port()}")
    elapsed = time.monotonic() - start

    assert elapsed < 15.0
    assert isinstance(excinfo.value, ConnectionError)
    assert isinstance(excinfo.value, AioClientsError)


@pytest.fixture
async def frozen_server(nats_server_private: Server) -> AsyncIterator[NatsServer]:
    """The test's own server, paused (SIGSTOP): it accepts TCP but never answers."""
    if isinstance(nats_server_private, ExternalServer):
        pytest.skip("pauses the server; cannot pause an external one")
    nats_server_private.pause()
    try:
        yield nats_server_private
    finally:
        nats_server_private.resume()


@pytest.mark.fault
async def test_connect_to_a_frozen_server_times_out(frozen_server: NatsServer) -> None:
    start = time.monotonic()
    with pytest.raises(JetStreamConnectError):
        await connect(frozen_server.url, timeout=1.0)
    assert time.monotonic() - start < 5.0


@pytest.mark.fault
async def test_connect_timeout_error_says_why(frozen_server: NatsServer) -> None:
    with pytest.raises(JetStreamConnectError) as excinfo:
        await connect(frozen_server.url, timeout=1.0)
    message = str(excinfo.value)
    assert not message.rstrip().endswith(":"), repr(message)
    assert "time" in message.lower(), repr(message)


async def test_connect_skips_an_unreachable_server_in_the_list(
    nats_server: Server, unique_name: str, subject: str
) -> None:
    urls = [f"nats://127.0.0.1:{_unused_port()}", nats_server.url]
    start = time.monotonic()
    async with await connect(urls, dont_randomize=True) as ctx:
        assert time.monotonic() - start < 10.0
        assert (await ctx.publish(subject, b"x")).stream == unique_name


async def test_async_with_waits_for_outstanding_acks(
    nats_server: Server, js: JetStream, unique_name: str, subject: str
) -> None:
    async with await connect(nats_server.url) as ctx:
        futures = [await ctx.publish_async(subject, b"%d" % i) for i in range(2000)]
        pending_at_exit = ctx.publish_async_pending

    assert pending_at_exit > 0  # acks were outstanding when the block ended
    assert ctx.closed
    assert all(f.done() for f in futures)
    # Had the exit not waited, the outstanding futures would hold JetStreamClosedError.
    assert [f.result().seq for f in futures] == list(range(1, 2001))
    assert await _messages(js, unique_name) == 2000


@pytest.mark.fault
async def test_async_with_waits_for_acks_of_a_paused_server(
    nats_server_private: NatsServer,
    private_js: JetStream,
    unique_name: str,
) -> None:
    loop = asyncio.get_running_loop()
    try:
        async with await connect(nats_server_private.url) as ctx:
            await ctx.publish(f"{unique_name}.x", b"first")  # the ack inbox is set up
            nats_server_private.pause()
            futures = [await ctx.publish_async(f"{unique_name}.x", b"%d" % i) for i in range(5)]
            assert ctx.publish_async_pending == 5
            loop.call_later(0.3, nats_server_private.resume)
            start = time.monotonic()
        elapsed = time.monotonic() - start
    finally:
        nats_server_private.resume()

    assert elapsed >= 0.2  # the exit waited for the server to come back
    assert [f.result().seq for f in futures] == [2, 3, 4, 5, 6]


async def test_caller_owned_connection_is_not_closed(
    nats_server: Server, unique_name: str, subject: str
) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        ctx = JetStream(nc)
        assert (await ctx.publish(subject, b"x")).seq == 1
        await ctx.close()

        assert ctx.closed
        assert not nc.is_closed
        assert nc.is_connected
        with pytest.raises(AioClientsError) as excinfo:
            await ctx.publish(subject, b"y")
        _assert_closed_error(excinfo.value)

        async with JetStream(nc) as again:
            assert (await again.publish(subject, b"z")).seq == 2
        assert nc.is_connected
        await nc.flush(timeout=5)
    finally:
        await nc.close()


async def test_caller_closing_the_connection_closes_the_context(
    nats_server: Server, unique_name: str, subject: str
) -> None:
    nc = await nats.connect(nats_server.url)
    ctx = JetStream(nc)
    await ctx.publish(subject, b"x")
    await nc.close()

    assert ctx.closed
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: ctx.publish(subject, b"x"),
        lambda: ctx.publish_async(subject, b"x"),
        lambda: ctx.stream(unique_name),
        lambda: ctx.account_info(),
    ]
    for call in calls:
        with pytest.raises(AioClientsError) as excinfo:
            await call()
        _assert_closed_error(excinfo.value)
    await ctx.close()


# -- domain and API prefix ---------------------------------------------------------------------


async def test_unknown_domain_is_not_enabled(js: JetStream) -> None:
    hub = JetStream(js.nc, domain="hub")
    assert hub.api_prefix == "$JS.hub.API"

    start = time.monotonic()
    with pytest.raises(JetStreamNotEnabledError) as excinfo:
        await hub.account_info()
    assert time.monotonic() - start < js.timeout  # no responders, not a timeout
    assert excinfo.value.code == 503


async def test_explicit_default_api_prefix(js: JetStream, unique_name: str) -> None:
    ctx = JetStream(js.nc, api_prefix="$JS.API")

    info = await ctx.account_info()

    assert info.limits is not None
    await ctx.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    assert (await ctx.publish(f"{unique_name}.x", b"x")).stream == unique_name


async def test_domain_and_api_prefix_together_are_invalid(js: JetStream) -> None:
    with pytest.raises(InvalidArgumentError):
        JetStream(js.nc, domain="hub", api_prefix="$JS.other.API")
    for bad in ("", "a.b", "a b", "*"):
        with pytest.raises(InvalidArgumentError):
            JetStream(js.nc, domain=bad)


def _connected_clients() -> list[nats.aio.client.Client]:
    return [o for o in gc.get_objects() if isinstance(o, nats.aio.client.Client) and o.is_connected]


async def test_connect_with_invalid_arguments_leaves_no_connection(nats_server: Server) -> None:
    before = _connected_clients()
    try:
        with pytest.raises(InvalidArgumentError):
            await connect(nats_server.url, domain="hub", api_prefix="$JS.other.API")
        leaked = [c for c in _connected_clients() if not any(c is b for b in before)]
        assert leaked == [], f"{len(leaked)} NATS connection(s) left open"
    finally:
        for client in _connected_clients():
            if not any(client is b for b in before):
                await client.close()


async def test_server_with_a_domain(own_server_allowed: None) -> None:
    async with NatsServer(config="jetstream { domain: hub }") as server:
        async with await connect(server.url, domain="hub") as hub:
            info = await hub.account_info()
            assert info.domain == "hub"
            await hub.create_stream("D", subjects=["d.>"])
            ack = await hub.publish("d.x", b"x")
            assert (ack.stream, ack.seq, ack.domain) == ("D", 1, "hub")
        async with await connect(server.url, domain="elsewhere") as other:
            with pytest.raises(JetStreamNotEnabledError):
                await other.account_info()
