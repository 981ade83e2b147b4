"""Push consumers (nats.go CreatePushConsumer) against a real nats-server: durable
and ephemeral, flow control, heartbeats, pause, deletion, queue groups, cancel."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone

import pytest
from consume_support import publish_many

from aioclients import InvalidArgumentError
from aioclients.jetstream import (
    ConsumerDeletedError,
    ConsumerNotFoundError,
    HeartbeatMissed,
    JetStream,
    JetStreamError,
    MessageStream,
    Msg,
    PushConsumer,
    StatusWarning,
    Stream,
)

pytestmark = pytest.mark.timeout(60)

WaitFor = Callable[..., Awaitable[None]]


@pytest.fixture
async def stream(js: JetStream, unique_name: str) -> Stream:
    return await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])


async def take(messages: MessageStream, count: int, *, ack: bool = True) -> list[Msg]:
    out: list[Msg] = []
    async for msg in messages:
        out.append(msg)
        if ack:
            await msg.ack()
        if len(out) == count:
            break
    return out


async def test_durable_push_consumer_delivers_and_acks(
    js: JetStream, stream: Stream, wait_for: WaitFor
) -> None:
    await publish_many(js, f"{stream.name}.a", 50)
    deliver = f"{stream.name}_deliver"
    consumer = await js.create_push_consumer(stream.name, durable_name="p", deliver_subject=deliver)
    assert isinstance(consumer, PushConsumer)
    assert consumer.deliver_subject == deliver
    config = consumer.cached_info.config
    assert (config.flow_control, config.idle_heartbeat) == (True, 5.0)  # the defaults
    events: list[object] = []
    async with consumer.consume(on_event=events.append) as messages:
        assert isinstance(messages, MessageStream)
        got = await asyncio.wait_for(take(messages, 50), 10)
        stats = messages.statistics()
    assert [m.data for m in got] == [b"x-%d" % i for i in range(50)]
    assert [m.metadata.sequence.stream for m in got] == list(range(1, 51))
    assert (stats.received, stats.delivered, stats.pulls) == (50, 50, 0)

    async def all_acked() -> bool:  # acks are not waited for: they are on their way
        info = await consumer.info()
        return info.ack_floor.stream_seq == 50 and info.num_ack_pending == 0

    await wait_for(all_acked, timeout=10, what="every ack")
    assert events == []
    # Looked up again, by name.
    again = await js.push_consumer(stream.name, "p")
    assert again.deliver_subject == deliver


async def test_ephemeral_push_consumer_gets_a_fresh_inbox(js: JetStream, stream: Stream) -> None:
    await publish_many(js, f"{stream.name}.a", 5)
    consumer = await js.create_push_consumer(stream.name, ack_policy="none")
    assert consumer.deliver_subject.startswith("_INBOX.")
    assert "durable_name" not in consumer.cached_info.config
    async with consumer.consume() as messages:
        got = await asyncio.wait_for(take(messages, 5, ack=False), 10)
    assert [m.data for m in got] == [b"x-%d" % i for i in range(5)]


async def test_a_second_consume_of_one_consumer_is_refused(js: JetStream, stream: Stream) -> None:
    await publish_many(js, f"{stream.name}.a", 4)
    consumer = await js.create_push_consumer(stream.name, ack_policy="none")
    async with consumer.consume() as first:
        assert [m.data for m in await asyncio.wait_for(take(first, 2, ack=False), 10)] == [
            b"x-0",
            b"x-1",
        ]
        with pytest.raises(JetStreamError, match="being consumed already"):
            async with consumer.consume() as second:
                await asyncio.wait_for(second.__anext__(), 5)
        # The refused one took nothing from the first.
        got = await asyncio.wait_for(take(first, 2, ack=False), 10)
        assert [m.data for m in got] == [b"x-2", b"x-3"]
    # Once the first has stopped, the consumer can be consumed again.
    await publish_many(js, f"{stream.name}.b", 1)
    async with consumer.consume() as again:
        (msg,) = await asyncio.wait_for(take(again, 1, ack=False), 10)
    assert msg.subject == f"{stream.name}.b"


async def test_lookups_and_create_or_update(js: JetStream, stream: Stream) -> None:
    await js.create_consumer(stream.name, durable_name="pull")
    with pytest.raises(InvalidArgumentError, match="pull consumer"):
        await js.push_consumer(stream.name, "pull")
    with pytest.raises(ConsumerNotFoundError):
        await js.push_consumer(stream.name, "nope")
    first = await js.create_or_update_push_consumer(stream.name, durable_name="p")
    # A pull lookup of a push consumer says so, rather than pulls the server refuses.
    with pytest.raises(InvalidArgumentError, match="push consumer"):
        await js.consumer(stream.name, "p")
    with pytest.raises(InvalidArgumentError, match="push consumer"):
        await stream.consumer("p")
    # The stream's own handles reach the same consumers.
    assert (await stream.push_consumer("p")).deliver_subject == first.deliver_subject
    with pytest.raises(InvalidArgumentError, match="pull consumer"):
        await stream.push_consumer("pull")
    other = await stream.create_push_consumer(durable_name="q", deliver_subject="q.here")
    assert other.deliver_subject == "q.here"
    updated = await stream.create_or_update_push_consumer(durable_name="q", description="d")
    assert updated.deliver_subject == "q.here"
    assert updated.cached_info.config.description == "d"
    # Updated without a deliver subject: it keeps its own.
    second = await js.create_or_update_push_consumer(
        stream.name, durable_name="p", description="changed"
    )
    assert second.deliver_subject == first.deliver_subject
    assert second.cached_info.config.description == "changed"
    # Created again with the same settings: the same consumer.
    third = await js.create_push_consumer(stream.name, durable_name="p", description="changed")
    assert third.deliver_subject == first.deliver_subject
    with pytest.raises(InvalidArgumentError):
        await js.create_push_consumer(stream.name, deliver_subject="bad.*")


async def test_flow_control_stops_the_server_while_the_buffer_is_full(
    js: JetStream, stream: Stream, wait_for: WaitFor
) -> None:
    # 8 MiB of messages, no acks to bound them: only flow control can.
    total = 2000
    await publish_many(js, f"{stream.name}.a", total, payload=b"x" * 4096)
    consumer = await js.create_push_consumer(
        stream.name, ack_policy="none", idle_heartbeat=0.5, flow_control=True
    )
    async with consumer.consume(max_messages=20) as messages:
        assert isinstance(messages.stalled_heartbeats, int)
        first = await asyncio.wait_for(take(messages, 1, ack=False), 10)
        assert first

        async def stalled() -> bool:
            # The server's heartbeat says it waits for our (held) reply.
            return messages.stalled_heartbeats > 0

        await wait_for(stalled, timeout=15, what="a stalled heartbeat")
        stats = messages.statistics()
        # The server stopped at its window (2 MiB at first), far below the 8 MiB.
        assert stats.buffered_messages < 1000
        assert stats.received < total
        assert messages.dropped == 0
        rest = await asyncio.wait_for(take(messages, total - 1, ack=False), 30)
        assert messages.flow_control_replies > 0
    seqs = [m.metadata.sequence.stream for m in first + rest]
    assert seqs == list(range(1, total + 1))


async def test_an_idle_push_consumer_reports_no_missed_heartbeat(
    js: JetStream, stream: Stream
) -> None:
    consumer = await js.create_push_consumer(stream.name, durable_name="p", idle_heartbeat=0.3)
    events: list[object] = []
    async with consumer.consume(on_event=events.append) as messages:
        reader = asyncio.ensure_future(take(messages, 1))
        done, _ = await asyncio.wait({reader}, timeout=2.0)  # about 6 intervals, idle
        assert not done
        await js.publish(f"{stream.name}.a", b"late")
        got = await asyncio.wait_for(reader, 10)
    assert [m.data for m in got] == [b"late"]
    assert events == []


async def test_a_paused_push_consumer_waits_then_delivers(js: JetStream, stream: Stream) -> None:
    await publish_many(js, f"{stream.name}.a", 10)
    consumer = await js.create_push_consumer(
        stream.name,
        durable_name="p",
        idle_heartbeat=0.3,
        pause_until=datetime.now(timezone.utc) + timedelta(minutes=5),
    )
    assert consumer.cached_info.paused
    events: list[object] = []
    async with consumer.consume(on_event=events.append) as messages:
        reader = asyncio.ensure_future(take(messages, 10))
        done, _ = await asyncio.wait({reader}, timeout=2.0)  # paused: several beats
        assert not done
        assert messages.statistics().received == 0
        assert (await consumer.resume()).paused is False
        got = await asyncio.wait_for(reader, 10)
    assert len(got) == 10
    assert not [e for e in events if isinstance(e, (HeartbeatMissed, StatusWarning))]


async def test_deleting_the_consumer_ends_the_iteration(
    js: JetStream, stream: Stream, caplog: pytest.LogCaptureFixture
) -> None:
    # The server tells a push subscriber nothing; the heartbeats stop, and the
    # missed heartbeat finds the consumer gone.
    caplog.set_level(logging.WARNING, logger="aioclients")
    consumer = await js.create_push_consumer(stream.name, durable_name="p", idle_heartbeat=0.3)
    events: list[object] = []
    async with consumer.consume(on_event=events.append) as messages:
        reader = asyncio.ensure_future(take(messages, 1))
        await js.delete_consumer(stream.name, "p")
        with pytest.raises(ConsumerDeletedError):
            await asyncio.wait_for(reader, 10)
    assert any(isinstance(e, HeartbeatMissed) for e in events)
    # The log says what a push consumer does (it sends no pulls).
    missed = [r.getMessage() for r in caplog.records if "missed idle" in r.getMessage()]
    assert missed
    assert all(m.endswith("checking that the consumer still exists") for m in missed)


async def test_a_deliver_group_shares_the_messages(js: JetStream, stream: Stream) -> None:
    await publish_many(js, f"{stream.name}.a", 100)
    consumer = await js.create_push_consumer(stream.name, durable_name="q", deliver_group="workers")
    assert consumer.deliver_group == "workers"
    assert consumer.cached_info.config.get("flow_control") is None  # not with a group
    seen: list[int] = []
    done = asyncio.Event()

    async def worker() -> None:
        async with consumer.consume() as messages:
            async for msg in messages:
                seen.append(msg.metadata.sequence.stream)
                await msg.ack()
                if len(seen) >= 100:
                    done.set()
                if done.is_set():
                    return

    workers = [asyncio.ensure_future(worker()) for _ in range(2)]
    await asyncio.wait_for(done.wait(), 10)
    for w in workers:
        w.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    assert sorted(seen) == list(range(1, 101))


async def test_cancel_a_waiting_read_then_read_on(js: JetStream, stream: Stream) -> None:
    consumer = await js.create_push_consumer(stream.name, durable_name="p")
    async with consumer.consume() as messages:
        waiting = asyncio.ensure_future(messages.__anext__())
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await js.publish(f"{stream.name}.a", b"after")
        got = await asyncio.wait_for(take(messages, 1), 10)
    assert [m.data for m in got] == [b"after"]


async def test_drain_delivers_what_was_received(js: JetStream, stream: Stream) -> None:
    await publish_many(js, f"{stream.name}.a", 20)
    consumer = await js.create_push_consumer(stream.name, durable_name="p")
    async with consumer.consume() as messages:
        first = await asyncio.wait_for(take(messages, 1), 10)
        await messages.drain()
        rest = await asyncio.wait_for(take(messages, 100), 10)  # ends by itself
    assert len(first) + len(rest) <= 20
    assert [m.metadata.sequence.stream for m in first + rest] == list(
        range(1, len(first) + len(rest) + 1)
    )


async def test_without_flow_control_the_buffer_stays_bounded(
    js: JetStream, stream: Stream, wait_for: WaitFor
) -> None:
    # No flow control, no acks: nothing stops the server, so the client drops what
    # would grow the buffer beyond four times its size.
    await publish_many(js, f"{stream.name}.a", 500)
    consumer = await js.create_push_consumer(
        stream.name, durable_name="p", ack_policy="none", flow_control=False
    )
    async with consumer.consume(max_messages=10) as messages:

        async def dropped() -> bool:
            return messages.dropped > 0

        await wait_for(dropped, timeout=10, what="dropped messages")
        stats = messages.statistics()
        assert stats.buffered_messages <= 40
        assert stats.received + messages.dropped <= 500
        got = await asyncio.wait_for(take(messages, stats.buffered_messages, ack=False), 10)
    seqs = [m.metadata.sequence.stream for m in got]
    assert seqs == sorted(seqs)


async def test_info_says_when_a_push_consumer_is_bound(
    js: JetStream, stream: Stream, wait_for: WaitFor
) -> None:
    # nats.go's ConsumerInfo.PushBound and TimeStamp (the server's push_bound, ts).
    consumer = await js.create_push_consumer(
        stream.name, durable_name="b", deliver_subject=f"{stream.name}_b"
    )
    info = await consumer.info()
    assert info.push_bound is False
    assert info.ts is not None
    assert info.ts.tzinfo is not None
    async with consumer.consume():

        async def bound() -> bool:
            return (await consumer.info()).push_bound

        await wait_for(bound, timeout=10, what="push_bound")
    stream_info = await stream.info()
    assert stream_info.ts is not None
    assert stream_info.created is not None
    assert stream_info.ts >= stream_info.created
