"""Adversarial tests of publishing: cancellation, back-pressure under concurrency,
bad input and odd replies, against a real nats-server.

Acks that never come are produced without stopping the server: a plain NATS
subscriber on a "black hole" subject receives the publish and never answers, so
the ack can only time out.
"""

from __future__ import annotations

import array
import asyncio
import math
from collections.abc import AsyncIterator
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg as NatsMsg
from support import PROBE, Server, WaitFor, until_visible

from aioclients import InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream import (
    APITimeoutError,
    JetStream,
    MaxPayloadError,
    PubAck,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def subject(js: JetStream, unique_name: str) -> str:
    """A subject stored by a fresh stream named ``unique_name``."""
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    return f"{unique_name}.events"


@pytest.fixture
async def other_nc(nats_server: Server) -> AsyncIterator[NATS]:
    """A second, plain nats-py connection (black holes, echo services)."""
    nc = await nats.connect(nats_server.url)
    try:
        yield nc
    finally:
        await nc.close()


@pytest.fixture
async def hole(js: JetStream, other_nc: NATS, unique_name: str) -> str:
    """A subject with a listener that never replies: publish acks to it never arrive."""
    name = f"hole_{unique_name}"

    async def only_probes(msg: NatsMsg) -> None:
        if msg.data == PROBE:
            await other_nc.publish(msg.reply, b"")

    await other_nc.subscribe(name, cb=only_probes)
    await other_nc.flush()
    await until_visible(js.nc, name)
    return name


async def _messages(js: JetStream, stream: str) -> int:
    return (await js.stream_info(stream)).state.messages


async def _settle(times: int = 5) -> None:
    """Let ready tasks run until they block (no I/O involved)."""
    for _ in range(times):
        await asyncio.sleep(0)


# -- cancellation ------------------------------------------------------------------------------


async def test_cancelled_publish_frees_its_slot_by_the_deadline(
    js: JetStream, subject: str, hole: str, unique_name: str, wait_for: WaitFor
) -> None:
    ctx = JetStream(js.nc, timeout=0.5, max_pending=4)
    try:
        await ctx.publish(subject, b"warm-up")  # opens the ack subscription
        subs = len(js.nc._subs)

        task = asyncio.ensure_future(ctx.publish(hole, b"never acked"))

        async def one_pending() -> bool:
            return ctx.publish_async_pending == 1

        await wait_for(one_pending, timeout=2, what="the publish to be sent")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        async def none_pending() -> bool:
            return ctx.publish_async_pending == 0

        await wait_for(none_pending, timeout=3, what="the cancelled publish to leave the window")
        assert len(js.nc._subs) == subs
        ack = await ctx.publish(subject, b"after")
        assert (ack.stream, ack.seq) == (unique_name, 2)
    finally:
        await ctx.close()


async def test_cancelling_publish_async_while_it_waits_for_room_sends_nothing(
    js: JetStream, subject: str, hole: str, unique_name: str, wait_for: WaitFor
) -> None:
    # Only the black-holed acks time out soon; a loaded machine's acks may be slow.
    ctx = JetStream(js.nc, timeout=10.0, max_pending=2)
    try:
        blockers = [await ctx.publish_async(hole, b"x", timeout=0.5) for _ in range(2)]
        subs = len(js.nc._subs)
        waiting = [asyncio.ensure_future(ctx.publish_async(subject, b"w%d" % i)) for i in range(6)]
        await _settle()
        assert not any(t.done() for t in waiting), "the window is full, they must wait"
        assert ctx.publish_async_pending == 2

        for t in waiting[::2]:
            t.cancel()
        for t in waiting[::2]:
            with pytest.raises(asyncio.CancelledError):
                await t

        # The black-holed acks time out; the three survivors then get room, in turn.
        for blocker in blockers:
            with pytest.raises(APITimeoutError):
                await asyncio.wait_for(blocker, 5)
        futures = [await asyncio.wait_for(t, 5) for t in waiting[1::2]]
        acks = await asyncio.wait_for(asyncio.gather(*futures), 5)
        assert sorted(a.seq for a in acks) == [1, 2, 3]

        async def none_pending() -> bool:
            return ctx.publish_async_pending == 0

        await wait_for(none_pending, timeout=3, what="the window to drain")
        assert len(js.nc._subs) == subs
    finally:
        await ctx.close()
    # The cancelled calls sent nothing.
    assert await _messages(js, unique_name) == 3
    stream = await js.stream(unique_name)
    stored = {(await stream.get_msg(seq)).data for seq in (1, 2, 3)}
    assert stored == {b"w1", b"w3", b"w5"}


async def test_publish_async_cancelled_right_after_its_wake_up_passes_the_room_on(
    js: JetStream, subject: str, hole: str, unique_name: str
) -> None:
    ctx = JetStream(js.nc, timeout=5.0, max_pending=1)
    try:
        blocker = await ctx.publish_async(hole, b"x", timeout=0.3)
        first = asyncio.ensure_future(ctx.publish_async(subject, b"first"))
        second = asyncio.ensure_future(ctx.publish_async(subject, b"second"))
        await _settle()
        assert not first.done()
        assert not second.done()
        # The blocker's done-callbacks run before ``first`` resumes from its wake-up:
        # cancel it exactly then, when it has been handed the room but not used it.
        blocker.add_done_callback(lambda _: first.cancel())

        with pytest.raises(APITimeoutError):
            await blocker
        with pytest.raises(asyncio.CancelledError):
            await first
        ack = await asyncio.wait_for(await asyncio.wait_for(second, 3), 3)
        assert ack.seq == 1
        assert ctx.publish_async_pending == 0
    finally:
        await ctx.close()
    assert await _messages(js, unique_name) == 1


async def test_cancelling_publish_async_complete_keeps_the_acks(
    js: JetStream, subject: str, hole: str
) -> None:
    ctx = JetStream(js.nc, timeout=0.5)
    try:
        lost = await ctx.publish_async(hole, b"x")
        waiter = asyncio.ensure_future(ctx.publish_async_complete())
        await _settle()
        assert not waiter.done()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert ctx.publish_async_pending == 1
        kept = await ctx.publish_async(subject, b"y")
        await asyncio.wait_for(ctx.publish_async_complete(), 3)
        assert ctx.publish_async_pending == 0
        assert (await kept).seq == 1
        with pytest.raises(APITimeoutError):
            await lost
    finally:
        await ctx.close()


# -- concurrency -------------------------------------------------------------------------------


async def test_many_publishers_respect_a_small_window_and_all_finish(
    js: JetStream, subject: str, unique_name: str
) -> None:
    ctx = JetStream(js.nc, max_pending=3)
    peak = 0
    acks: list[PubAck] = []

    def sample() -> None:
        nonlocal peak
        peak = max(peak, ctx.publish_async_pending)
        assert ctx.publish_async_pending <= 3

    async def worker(n: int) -> None:
        futures = []
        for i in range(25):
            if i % 5 == 4:
                acks.append(await ctx.publish(subject, b"s%d-%d" % (n, i)))
            else:
                futures.append(await ctx.publish_async(subject, b"a%d-%d" % (n, i)))
            sample()
        acks.extend(await asyncio.gather(*futures))

    stop = asyncio.Event()

    async def monitor() -> None:
        while not stop.is_set():
            sample()
            await asyncio.sleep(0)

    watcher = asyncio.ensure_future(monitor())
    try:
        await asyncio.wait_for(asyncio.gather(*(worker(n) for n in range(20))), 30)
    finally:
        stop.set()
        await watcher
        await ctx.close()

    assert peak == 3
    assert sorted(a.seq for a in acks) == list(range(1, 501))
    assert ctx.publish_async_pending == 0
    assert await _messages(js, unique_name) == 500


async def test_a_waiting_publisher_is_not_starved_by_a_publish_loop(
    js: JetStream, subject: str
) -> None:
    ctx = JetStream(js.nc, max_pending=1)
    events: list[str] = []

    async def hog() -> None:
        for i in range(100):
            await ctx.publish(subject, b"hog%d" % i)
            events.append("hog")

    async def victim() -> None:
        await asyncio.sleep(0)  # the hog takes the only slot first
        future = await ctx.publish_async(subject, b"victim")
        events.append("victim")
        await future

    try:
        await asyncio.wait_for(asyncio.gather(hog(), victim()), 30)
    finally:
        await ctx.close()
    # FIFO hand-off would let the victim in after about one hog publish.
    assert events.index("victim") < 10, f"victim waited for {events.index('victim')} publishes"


def _oversized(ctx: JetStream) -> bytes:
    return b"x" * (ctx.nc.max_payload + 1)


@pytest.mark.parametrize(
    ("payload", "headers", "error"),
    [
        ("not bytes", None, InvalidArgumentError),
        (b"x", {"Bad": "line\r\nbreak"}, InvalidArgumentError),
        (None, None, MaxPayloadError),
    ],
    ids=["str-payload", "bad-header-value", "too-large"],
)
async def test_a_waiter_that_fails_validation_does_not_strand_the_next_waiter(
    js: JetStream,
    subject: str,
    hole: str,
    payload: Any,
    headers: dict[str, str] | None,
    error: type[Exception],
) -> None:
    ctx = JetStream(js.nc, timeout=0.3, max_pending=1)
    good: asyncio.Future[asyncio.Future[PubAck]] | None = None
    try:
        blocker = await ctx.publish_async(hole, b"x")
        if payload is None:
            payload = _oversized(ctx)
        good = asyncio.ensure_future(ctx.publish_async(subject, b"good"))
        await _settle()
        assert not good.done()  # waiting for the only slot
        # Bad input fails at once, before queueing for room, so it never holds a slot.
        with pytest.raises(error):
            await asyncio.wait_for(ctx.publish_async(subject, payload, headers=headers), 0.1)

        with pytest.raises(APITimeoutError):
            await blocker  # frees the only slot
        # The slot is free (nothing is outstanding), so ``good`` must get it.
        assert ctx.publish_async_pending == 0
        ack = await asyncio.wait_for(await asyncio.wait_for(good, 1), 1)
        assert ack.seq == 1
    finally:
        if good is not None and not good.done():
            good.cancel()
        await ctx.close()


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"subject": 123},
        {"subject": None},
        {"subject": b"bytes.subject"},
        {"subject": "a\u00a0b"},
        {"payload": "text"},
        {"payload": 7},
        {"headers": {"": "x"}},
        {"headers": {"Bad Key": "x"}},
        {"headers": {"Ünï": "x"}},
        {"headers": {1: "x"}},
        {"headers": {"K": None}},
        {"headers": {"K": 1}},
        {"headers": {"K": ["a", 2]}},
        {"headers": {"K": "a\nb"}},
        {"msg_id": ""},
        {"msg_id": "a\r\nb"},
        {"msg_id": 5},
        {"expected_stream": 5},
        {"expected_last_seq": -1},
        {"expected_last_subject_seq": -1},
        {"timeout": 0},
        {"timeout": -1.5},
    ],
    ids=repr,
)
async def test_bad_publish_arguments_raise_invalid_argument(
    js: JetStream, subject: str, unique_name: str, kwargs: dict[str, Any]
) -> None:
    args: dict[str, Any] = {"subject": subject, "payload": b"x", **kwargs}
    for call in (js.publish, js.publish_async):
        with pytest.raises(InvalidArgumentError):
            await asyncio.wait_for(call(**args), 3)
    assert js.publish_async_pending == 0
    assert (await js.publish(subject, b"ok")).seq == 1
    assert await _messages(js, unique_name) == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"headers": "Key: value"},
        {"headers": 5},
        {"expected_last_seq": "5"},
        {"expected_last_subject_seq": "5"},
        {"timeout": "1"},
    ],
    ids=[
        "headers-str",
        "headers-int",
        "expected_last_seq-str",
        "expected_last_subject_seq-str",
        "timeout-str",
    ],
)
async def test_wrong_typed_publish_arguments_raise_invalid_argument(
    js: JetStream, subject: str, kwargs: dict[str, Any]
) -> None:
    args: dict[str, Any] = {"subject": subject, "payload": b"x", **kwargs}
    with pytest.raises(InvalidArgumentError):
        await asyncio.wait_for(js.publish(**args), 3)


async def test_nan_timeout_is_rejected_instead_of_never_expiring(js: JetStream, hole: str) -> None:
    ctx = JetStream(js.nc, timeout=0.3)
    try:
        with pytest.raises(InvalidArgumentError, match="timeout"):
            await asyncio.wait_for(ctx.publish(hole, b"x", timeout=math.nan), 1.5)
        with pytest.raises(InvalidArgumentError, match="timeout"):
            await ctx.publish_async_complete(timeout=math.nan)
        assert ctx.publish_async_pending == 0
    finally:
        await ctx.close()


async def test_a_strided_memoryview_is_published_as_its_bytes(
    js: JetStream, subject: str, unique_name: str
) -> None:
    view = memoryview(b"abcdef")[::2]
    ack = await js.publish(subject, view)
    stored = await (await js.stream(unique_name)).get_msg(ack.seq)
    assert stored.data == b"ace"


async def test_an_infinite_timeout_is_accepted(js: JetStream, subject: str) -> None:
    ack = await js.publish(subject, b"x", timeout=math.inf)
    assert ack.seq == 1
    assert js.publish_async_pending == 0


async def test_memoryview_of_wide_items_does_not_corrupt_the_connection(
    nats_server: Server, js: JetStream, subject: str
) -> None:
    from aioclients.jetstream import connect

    ctx = await connect(nats_server.url, timeout=0.5)
    try:
        view = memoryview(array.array("i", [1, 2, 3]))
        try:
            ack = await ctx.publish(subject, view)
        except InvalidArgumentError:
            pass  # refusing it is fine too
        else:
            stored = await (await js.stream(ack.stream)).get_msg(ack.seq)
            assert stored.data == view.tobytes()
        assert not ctx.nc.is_closed, "one odd payload closed the whole connection"
        assert (await ctx.publish(subject, b"after")).stream == subject.split(".")[0]
    finally:
        await ctx.close()


async def test_bytearray_and_byte_memoryview_payloads(js: JetStream, subject: str) -> None:
    stream = await js.stream(subject.split(".")[0])
    a = await js.publish(subject, bytearray(b"from bytearray"))
    b = await js.publish(subject, memoryview(b"xfrom memoryviewx")[1:-1])
    assert (await stream.get_msg(a.seq)).data == b"from bytearray"
    assert (await stream.get_msg(b.seq)).data == b"from memoryview"


async def test_odd_but_valid_headers_round_trip(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    headers: dict[str, str | list[str]] = {
        "X-Unicode": "héllo wörld ✓",
        "X-Empty": "",
        "X-Many": ["1", "2", "3"],
        "!#$%&'*+-.^_`|~": "token chars",
        "X-Colon": "a: b: c",
    }
    ack = await js.publish(f"{unique_name}.ü.✓", b"payload", headers=headers)
    leader = await stream.get_msg(ack.seq)
    direct = await stream.direct_get(ack.seq)
    for got in (leader, direct):
        assert got.subject == f"{unique_name}.ü.✓"
        assert got.headers == headers


# -- odd replies -------------------------------------------------------------------------------


@pytest.fixture
async def echo(js: JetStream, other_nc: NATS, unique_name: str) -> str:
    """A core-NATS service (not a stream) that answers every request with its payload."""
    name = f"echo_{unique_name}"

    async def reply(msg: NatsMsg) -> None:
        await other_nc.publish(msg.reply, msg.data)

    await other_nc.subscribe(name, cb=reply)
    await other_nc.flush()
    await until_visible(js.nc, name)
    return name


@pytest.mark.parametrize("payload", [b"hello", b"{}", b'{"seq":1}'], ids=repr)
async def test_publishing_to_a_non_stream_responder_raises_a_protocol_error(
    js: JetStream, echo: str, payload: bytes
) -> None:
    with pytest.raises(RemoteProtocolError):
        await asyncio.wait_for(js.publish(echo, payload), 3)
    assert js.publish_async_pending == 0


@pytest.mark.parametrize("payload", [b"123", b"null", b"[1]", b'"text"', b'{"error":"x"}'])
async def test_a_non_object_json_reply_raises_a_protocol_error(
    js: JetStream, echo: str, payload: bytes
) -> None:
    with pytest.raises(RemoteProtocolError):
        await asyncio.wait_for(js.publish(echo, payload), 3)
