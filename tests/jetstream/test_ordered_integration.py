"""Ordered consumers (ADR-17) on a real nats-server: order, gaps, deletion, restarts."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from consume_support import publish_many, snoop_pulls
from support import Server, WaitFor

from aioclients._errors import InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream import (
    ConsumerReset,
    JetStream,
    NoMessagesError,
    OrderedConsumer,
    StreamNotFoundError,
    connect,
)
from aioclients.jetstream._protocol._ordered import ack_sequences
from aioclients.jetstream._protocol._wire import MSG
from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer

pytestmark = pytest.mark.timeout(60)


async def _read(oc_stream: AsyncIterator[object], count: int, timeout: float = 10.0) -> list[int]:
    seqs: list[int] = []

    async def run() -> None:
        async for msg in oc_stream:
            seqs.append(msg.metadata.sequence.stream)  # type: ignore[attr-defined]
            if len(seqs) == count:
                return

    await asyncio.wait_for(run(), timeout)
    return seqs


async def test_consume_reads_the_stream_in_order_without_acks(
    js: JetStream, unique_name: str
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 30)
    await publish_many(js, f"{unique_name}.b", 30)
    oc = await stream.ordered_consumer(filter_subjects=[f"{unique_name}.b"])
    assert isinstance(oc, OrderedConsumer)
    info = await js.consumer_info(unique_name, oc.name or "")
    assert info.config["ack_policy"] == "none"
    assert info.config["max_deliver"] == 1
    assert info.config["mem_storage"] is True
    async with oc.consume(max_messages=7) as messages:
        assert await _read(messages, 30) == list(range(31, 61))
    assert oc.resets == 0


async def test_an_ordered_consume_paces_the_read_loop_and_a_plain_one_does_not(
    js: JetStream, unique_name: str
) -> None:
    # While an ordered consume reads, the connection's read loop hands it each
    # 32 KiB read before parsing the next (see FastParser.parse); consume() keeps
    # the read loop as it was; neither leaves its mark after it ends.
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 5)
    nc = js._transport.nc
    oc = await stream.ordered_consumer()
    async with oc.consume(max_messages=10) as messages:
        assert await _read(messages, 5) == [1, 2, 3, 4, 5]
        assert len(nc._paced) == 1
    assert nc._paced == {}
    plain = await stream.create_consumer(ack_policy="none")
    async with plain.consume(max_messages=10) as plain_messages:
        assert len(await _read(plain_messages, 5)) == 5
        assert nc._paced == {}


async def test_fetch_and_next_continue_where_the_last_call_stopped(
    js: JetStream, unique_name: str
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 10)
    oc = await js.ordered_consumer(unique_name, opt_start_seq=3)
    async with oc.fetch(4, expires=2) as batch:
        assert [m.metadata.sequence.stream async for m in batch] == [3, 4, 5, 6]
    assert (await oc.next(expires=2)).metadata.sequence.stream == 7
    async with oc.fetch(10, expires=1) as batch:
        assert [m.metadata.sequence.stream async for m in batch] == [8, 9, 10]
    with pytest.raises(NoMessagesError):
        await oc.next(expires=1)
    await oc.close()


async def test_next_with_the_shortest_expiry_pulls_with_the_given_heartbeat(
    js: JetStream, nats_server: Server, unique_name: str
) -> None:
    # expires=1 is the least next() accepts: it must still pull (not give up before
    # the first pull because a moment has passed), and idle_heartbeat goes with it.
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 1)
    oc = await js.ordered_consumer(unique_name)
    async with snoop_pulls(js, nats_server.url, unique_name, oc.name or "") as snoop:
        msg = await oc.next(expires=1, idle_heartbeat=0.5)
        assert msg.metadata.sequence.stream == 1
        await snoop.wait_count(1)
    assert snoop.bodies[0]["expires"] == 1_000_000_000
    assert snoop.bodies[0]["idle_heartbeat"] == 500_000_000
    await oc.close()


async def test_consumer_deleted_mid_stream_is_replaced_and_nothing_is_skipped(
    js: JetStream, unique_name: str, wait_for: WaitFor
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 200)
    events: list[object] = []
    oc = await stream.ordered_consumer(on_event=events.append)
    first = oc.name
    seqs: list[int] = []
    async with oc.consume(max_messages=10, expires=2, idle_heartbeat=0.5) as messages:
        async for msg in messages:
            seqs.append(msg.metadata.sequence.stream)
            if len(seqs) == 50:
                await js.delete_consumer(unique_name, first or "")
            if len(seqs) == 200:
                break
    assert seqs == list(range(1, 201))
    resets = [e for e in events if isinstance(e, ConsumerReset)]
    # Seen as a 409 to a waiting pull, or (nats-server 2.11+ sends none) as silence.
    assert resets
    assert resets[0].reason in ("deleted", "heartbeat")
    # It resumed right after the last message it had yielded.
    assert 51 <= resets[0].next_seq <= 61
    assert oc.name != first


async def test_a_gap_in_consumer_sequences_resets_from_the_last_stream_sequence(
    js: JetStream, unique_name: str
) -> None:
    """A message lost between server and client: the next one's consumer sequence
    jumps; the ordered consumer must go back for the lost one."""
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 20)
    events: list[object] = []
    oc = await stream.ordered_consumer(on_event=events.append)
    async with oc.consume(max_messages=5) as messages:
        inner = messages._inner
        assert inner is not None
        assert inner._sub is not None
        # consume() takes its deliveries a run at a time, undecoded (see
        # NatsTransport.subscribe_runs): (MSG, subject, sid, reply, header, payload)
        handlers = js.nc._run_handlers  # type: ignore[attr-defined]
        sid = inner._sub._sub._id
        # Its reads as columns come as frames instead (a run handler sees them all).
        js.nc._deliveries_handlers.pop(sid)  # type: ignore[attr-defined]
        js.nc._header_deliveries_handlers.pop(sid)  # type: ignore[attr-defined]
        original = handlers[sid]
        dropped: list[str] = []

        def lossy(frames: list[tuple[Any, ...]]) -> None:
            kept = []
            for frame in frames:
                text = frame[3].decode()
                if not dropped and text.startswith("$JS.ACK") and ack_sequences(text)[0] == 8:
                    dropped.append(text)  # lose stream sequence 8 on the way in
                    continue
                kept.append(frame)
            if kept:
                original(kept)

        handlers[sid] = lossy
        seqs = await _read(messages, 20)
    assert seqs == list(range(1, 21))
    assert dropped
    assert next(e for e in events if isinstance(e, ConsumerReset)) == ConsumerReset(8, "gap")


async def test_missing_stream_is_reported_at_once(js: JetStream, unique_name: str) -> None:
    with pytest.raises(StreamNotFoundError):
        await js.ordered_consumer(unique_name)


@pytest.fixture
async def private(nats_server_private: Server) -> AsyncIterator[tuple[NatsServer, JetStream]]:
    if isinstance(nats_server_private, ExternalServer):
        pytest.skip("restarts the server; cannot do that to an external one")
    ctx = await connect(
        nats_server_private.url, timeout=1.5, reconnect_time_wait=0.1, max_reconnect_attempts=-1
    )
    try:
        yield nats_server_private, ctx
    finally:
        nats_server_private.start()
        await ctx.close()


@pytest.mark.fault
async def test_server_restart_mid_stream_resumes_in_order(
    private: tuple[NatsServer, JetStream],
) -> None:
    server, js = private
    stream = await js.create_stream("S", subjects=["s.>"], storage="file")
    await publish_many(js, "s.a", 2000)
    events: list[object] = []
    oc = await stream.ordered_consumer(on_event=events.append)
    seqs: list[int] = []
    async with oc.consume(max_messages=50, expires=2) as messages:

        async def run() -> None:
            async for msg in messages:
                seqs.append(msg.metadata.sequence.stream)
                if len(seqs) == 500:
                    await asyncio.get_running_loop().run_in_executor(None, server.restart)
                if len(seqs) == 2000:
                    return

        await asyncio.wait_for(run(), 45)
    assert seqs == list(range(1, 2001))
    assert any(isinstance(e, ConsumerReset) for e in events)
    with contextlib.suppress(Exception):
        await oc.close()


async def test_leaving_a_bare_async_for_deletes_the_consumer(
    js: JetStream, unique_name: str, wait_for: WaitFor
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 20)
    oc = await stream.ordered_consumer()
    seen = 0
    async for _ in oc.consume(max_messages=5):  # no ``async with``
        seen += 1
        if seen == 3:
            break

    async def no_consumers() -> bool:
        return [n async for n in stream.consumer_names()] == []

    await wait_for(no_consumers, timeout=5, what="the ordered consumer's deletion")
    # It can be read again, from where it stopped.
    async with oc.consume() as messages:
        assert await _read(messages, 1) == [4]


async def test_on_event_must_be_a_plain_function(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])

    async def handler(event: object) -> None:
        pass

    with pytest.raises(InvalidArgumentError, match="plain function"):
        await stream.ordered_consumer(on_event=handler)
    oc = await stream.ordered_consumer()
    with pytest.raises(InvalidArgumentError, match="plain function"):
        oc.consume(on_event=handler)
    await oc.close()
    assert [n async for n in stream.consumer_names()] == []


async def test_a_fetch_that_meets_a_gap_ends_early_and_the_next_one_resumes(
    js: JetStream, unique_name: str
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 10)
    events: list[object] = []
    oc = await stream.ordered_consumer(on_event=events.append)
    async with oc.fetch(10, expires=2) as batch:
        inner = batch._inner
        assert inner is not None
        assert inner._sub is not None
        handlers = js.nc._raw_handlers  # type: ignore[attr-defined]
        sid = inner._sub._sub._id
        original = handlers[sid]

        def lossy(subject: str, reply: str, data: bytes, header: bytes | None) -> None:
            if reply.startswith("$JS.ACK") and ack_sequences(reply)[0] == 4:
                return  # stream sequence 4 is lost on the way in
            original(subject, reply, data, header)

        handlers[sid] = lossy
        first = [m.metadata.sequence.stream async for m in batch]
    assert first == [1, 2, 3]
    assert batch.reset
    assert events == [ConsumerReset(4, "gap")]
    async with oc.fetch(10, expires=1) as batch:
        assert [m.metadata.sequence.stream async for m in batch] == list(range(4, 11))
    await oc.close()


async def test_last_stream_seq_counts_what_was_handed_out_not_what_is_buffered(
    js: JetStream, unique_name: str
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 20)
    oc = await stream.ordered_consumer()
    async with oc.consume(max_messages=50) as messages:
        assert await _read(messages, 3) == [1, 2, 3]
        assert oc.last_stream_seq == 3
    async with oc.consume() as messages:
        assert await _read(messages, 2) == [4, 5]


async def test_consume_by_bytes_pulls_more_as_the_bytes_are_taken(
    js: JetStream, unique_name: str
) -> None:
    """max_bytes smaller than the stream: the buffer must count the bytes it took
    for the next pulls to come."""
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 60)
    oc = await stream.ordered_consumer()
    async with oc.consume(max_bytes=2000) as messages:
        assert await _read(messages, 60) == list(range(1, 61))
        stats = messages.statistics()
        assert stats is not None
        assert stats.pulls > 1


async def test_a_delivery_without_an_ack_subject_fails_the_iteration(
    js: JetStream, unique_name: str
) -> None:
    """The order check needs the ack subject: a message without one is a protocol
    error raised to the reader, not silently skipped."""
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 5)
    oc = await stream.ordered_consumer()
    async with oc.consume(max_messages=10) as messages:
        assert await _read(messages, 5) == [1, 2, 3, 4, 5]
        inner = messages._inner
        assert inner is not None
        assert inner._sub is not None
        handler = js.nc._run_handlers[inner._sub._sub._id]  # type: ignore[attr-defined]
        handler([(MSG, f"{unique_name}.a".encode(), 0, b"not.an.ack.subject", None, b"x")])
        with pytest.raises(RemoteProtocolError, match="not a JetStream ack subject"):
            await asyncio.wait_for(messages.__anext__(), 5)


@pytest.mark.parametrize("meta", [True, False])
async def test_ordered_items_hand_make_the_pending_count_and_time_unless_told_not_to(
    js: JetStream, unique_name: str, meta: bool
) -> None:
    # keys() reads with meta=False: it uses neither number, and their parsing was a
    # few percent of its read loop.
    from aioclients.jetstream._ordered import OrderedItems, ordered_consume_options

    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 3)
    oc = await stream.ordered_consumer()
    made: list[tuple[str, int, int, int]] = []

    def make(
        subject: str,
        reply: bytes,
        data: bytes,
        header: bytes | None,
        sseq: int,
        pending: int,
        ts: int,
    ) -> int:
        made.append((subject, sseq, pending, ts))
        return sseq

    items = OrderedItems(oc, ordered_consume_options(max_messages=10), make, meta=meta)
    async with items:
        got: list[int] = []
        while len(got) < 3:
            await asyncio.wait_for(items.fill(), 10)
            got.extend(items.ready)
            items.ready.clear()
    assert got == [1, 2, 3]
    assert [(subject, sseq) for subject, sseq, _, _ in made] == [
        (f"{unique_name}.a", 1),
        (f"{unique_name}.a", 2),
        (f"{unique_name}.a", 3),
    ]
    if meta:
        assert [pending for _, _, pending, _ in made] == [2, 1, 0]
        assert all(ts > 0 for _, _, _, ts in made)
    else:
        assert [(pending, ts) for _, _, pending, ts in made] == [(0, 0)] * 3
