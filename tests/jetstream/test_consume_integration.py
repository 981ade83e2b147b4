"""Pull consumption (ADR-37 Fetch / Next / Consume) and Msg acks against a real nats-server."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

import pytest
from consume_support import next_event, publish_many, snoop_pulls, until_pull_waiting
from support import Server, WaitFor

from aioclients import InvalidArgumentError
from aioclients.jetstream import (
    ConsumeEvent,
    Consumer,
    ConsumerDeletedError,
    ConsumeStatistics,
    FetchResult,
    JetStream,
    JetStreamError,
    MessageAlreadyAckedError,
    MessageStream,
    Msg,
    NoMessagesError,
    StatusWarning,
    Stream,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def stream(js: JetStream, unique_name: str) -> Stream:
    return await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])


@pytest.fixture
async def consumer(js: JetStream, stream: Stream) -> Consumer:
    return await js.create_consumer(stream.name, durable_name="c", ack_policy="explicit")


def _size(msg: Msg) -> int:
    """A message's size as the server counts it against max_bytes (no headers here)."""
    return len(msg.subject) + len(msg.reply) + len(msg.data)


# -- consume ---------------------------------------------------------------------------------


async def test_consume_10k_with_explicit_acks_none_lost_or_repeated(
    js: JetStream, stream: Stream, consumer: Consumer, wait_for: WaitFor
) -> None:
    total = 10_000
    await publish_many(js, f"{stream.name}.a", total)
    seqs: list[int] = []
    async with consumer.consume(max_messages=300) as messages:
        assert isinstance(messages, MessageStream)
        async for msg in messages:
            seqs.append(msg.metadata.sequence.stream)
            await msg.ack()
            if len(seqs) == total:
                break
        stats = messages.statistics()
    assert len(seqs) == total
    assert set(seqs) == set(range(1, total + 1))  # none lost, none repeated
    assert seqs == sorted(seqs)  # one consumer, no redelivery: stream order
    assert stats.delivered == total
    assert stats.pulls > 1  # the buffer was refilled, not one huge pull

    # the last ack is on its way: the server records them all
    async def all_acked() -> bool:
        return (await consumer.info()).num_ack_pending == 0

    await wait_for(all_acked, timeout=5, what="no acks pending")
    info = await consumer.info()
    assert info.num_ack_pending == 0
    assert info.num_pending == 0
    assert info.num_redelivered == 0
    assert info.ack_floor.stream_seq == total


async def test_consume_max_bytes_pulls_carry_max_bytes_and_all_messages_arrive(
    js: JetStream, nats_server: Server, stream: Stream, consumer: Consumer
) -> None:
    total = 300
    payload = b"p" * 200
    await publish_many(js, f"{stream.name}.a", total, payload)
    seqs: set[int] = set()
    limit = 4096
    async with snoop_pulls(js, nats_server.url, stream.name, consumer.name) as snoop:
        async with consumer.consume(max_bytes=limit) as messages:
            async for msg in messages:
                seqs.add(msg.metadata.sequence.stream)
                assert _size(msg) < limit
                await msg.ack()
                # never more than the byte limit held by the client
                assert messages.statistics().buffered_bytes <= limit
                if len(seqs) == total:
                    break
            stats = messages.statistics()
        await snoop.wait_count(stats.pulls)
    assert seqs == set(range(1, total + 1))
    assert all("max_bytes" in b for b in snoop.bodies), snoop.bodies
    assert all(0 < b["max_bytes"] <= limit for b in snoop.bodies), snoop.bodies
    # ~260 bytes a message: the bytes, not the (large) batch, bounded each pull,
    # so it took many pulls to move 300 messages through a 4 KiB buffer.
    assert len(snoop.bodies) >= total * 260 // limit
    assert stats.pulls == len(snoop.bodies)


async def test_consume_pulls_carry_batch_expires_and_heartbeat(
    js: JetStream, nats_server: Server, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 3)
    async with snoop_pulls(js, nats_server.url, stream.name, consumer.name) as snoop:
        async with consumer.consume(max_messages=10, expires=4) as messages:
            got = [await messages.__anext__() for _ in range(3)]
            await snoop.wait_count(1)
    assert [m.data for m in got] == [b"x-0", b"x-1", b"x-2"]
    first = snoop.bodies[0]
    assert first["batch"] == 10
    assert first["expires"] == 4_000_000_000
    assert first["idle_heartbeat"] == 2_000_000_000  # default: half of expires
    assert "max_bytes" not in first


async def test_consume_delivers_messages_published_after_start(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    async with consumer.consume(max_messages=5, expires=2) as messages:
        it = messages.__aiter__()
        waiter = asyncio.ensure_future(it.__anext__())
        await until_pull_waiting(consumer)  # published only once a pull is open
        assert not waiter.done()
        await js.publish(f"{stream.name}.a", b"late")
        msg = await asyncio.wait_for(waiter, 10)
        assert msg.data == b"late"
        await msg.ack()


async def test_consume_across_pull_expiries(
    js: JetStream, stream: Stream, consumer: Consumer, wait_for: WaitFor
) -> None:
    # expires=1: the first pull expires before the message is published; the
    # stream re-pulls on its own and still gets it.
    async with consumer.consume(max_messages=5, expires=1) as messages:

        async def repulled() -> bool:
            return messages.statistics().pulls >= 2

        # an empty consumer re-pulls only after its pull expired (408)
        await wait_for(repulled, timeout=10, what="a fresh pull after the first expired")
        await until_pull_waiting(consumer)  # the fresh pull is open on the server
        await js.publish(f"{stream.name}.a", b"after-expiry")
        msg = await asyncio.wait_for(messages.__anext__(), 10)
        assert msg.data == b"after-expiry"


async def test_consume_max_messages_1_never_gets_stuck(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 20)
    got = []
    async with consumer.consume(max_messages=1, expires=2) as messages:
        async for msg in messages:
            got.append(msg.metadata.sequence.stream)
            await msg.ack()
            if len(got) == 20:
                break
    assert got == list(range(1, 21))


async def test_consume_threshold_controls_refill(
    js: JetStream, nats_server: Server, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 40)
    async with snoop_pulls(js, nats_server.url, stream.name, consumer.name) as snoop:
        async with consumer.consume(max_messages=10, threshold_messages=2) as messages:
            n = 0
            async for msg in messages:
                await msg.ack()
                n += 1
                if n == 40:
                    break
            await snoop.wait_count(messages.statistics().pulls)
    # refills happen only when 2 or fewer are outstanding: each asks for >= 8
    assert snoop.bodies[0]["batch"] == 10
    assert all(b["batch"] >= 8 for b in snoop.bodies), snoop.bodies


async def test_drain_stops_pulling_delivers_buffered_then_ends(
    js: JetStream, nats_server: Server, stream: Stream, consumer: Consumer, wait_for: WaitFor
) -> None:
    await publish_many(js, f"{stream.name}.a", 20)
    async with snoop_pulls(js, nats_server.url, stream.name, consumer.name) as snoop:
        async with consumer.consume(max_messages=10, expires=5) as messages:
            first = await messages.__anext__()
            await first.ack()

            # wait until the first pull's 10 messages are all buffered
            async def all_received() -> bool:
                return messages.statistics().received >= 10

            await wait_for(all_received, timeout=5, what="the first pull's 10 messages")
            assert messages.statistics().received == 10
            pulls_before = messages.statistics().pulls
            await snoop.wait_count(pulls_before)
            await messages.drain()
            rest = []
            async for msg in messages:
                rest.append(msg.metadata.sequence.stream)
                await msg.ack()
            stats = messages.statistics()
        # publish more; a drained stream must not pull them
        await publish_many(js, f"{stream.name}.a", 5)
        assert messages.statistics().pulls == pulls_before
        assert len(snoop.bodies) == pulls_before
    assert [first.metadata.sequence.stream, *rest] == list(range(1, 11))
    assert stats.delivered == 10
    assert stats.buffered_messages == 0

    async def left() -> bool:  # 10 left unpulled + 5 new (the count lags a little)
        return (await consumer.info()).num_pending == 15

    await wait_for(left, timeout=5, what="15 pending")


async def test_stop_ends_iteration_at_once(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 20)
    async with consumer.consume(max_messages=10) as messages:
        first = await messages.__anext__()
        messages.stop()
        rest = [m async for m in messages]
        assert rest == []
        with pytest.raises(StopAsyncIteration):
            await messages.__anext__()
        messages.stop()  # idempotent
    assert first.metadata.sequence.stream == 1


async def test_stop_from_another_task_wakes_a_blocked_iterator(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    async with consumer.consume(expires=5) as messages:

        async def collect() -> list[Msg]:
            return [m async for m in messages]

        task = asyncio.ensure_future(collect())
        await until_pull_waiting(consumer)  # the task is blocked on an open pull
        assert not task.done()
        messages.stop()
        assert await asyncio.wait_for(task, 2) == []


async def test_statistics_are_consistent(js: JetStream, stream: Stream, consumer: Consumer) -> None:
    await publish_many(js, f"{stream.name}.a", 30)
    async with consumer.consume(max_messages=20) as messages:
        assert isinstance(messages.statistics(), ConsumeStatistics)
        taken = 0
        async for msg in messages:
            await msg.ack()
            taken += 1
            s = messages.statistics()
            assert s.delivered == taken
            assert s.received >= s.delivered
            assert s.buffered_messages == s.received - s.delivered
            assert s.pending_messages >= 0
            assert s.pending_messages + s.buffered_messages <= 20
            assert s.pulls >= 1
            if taken == 30:
                break
        s = messages.statistics()
    assert s.delivered == 30
    assert s.heartbeats_missed == 0
    assert s.reconnects == 0


async def test_statistics_exact_after_takes_without_a_look_between(
    js: JetStream, stream: Stream, consumer: Consumer, wait_for: WaitFor
) -> None:
    # Buffered messages leave the iterator in a fast path that counts them at the
    # next look (statistics, a status, a pull): the counts must be exact then.
    await publish_many(js, f"{stream.name}.a", 50)
    async with consumer.consume(max_messages=100) as messages:

        async def all_received() -> bool:
            return messages.statistics().received == 50

        await wait_for(all_received, timeout=5, what="50 messages buffered")
        taken = [await messages.__anext__() for _ in range(7)]
        s = messages.statistics()
        assert (s.delivered, s.buffered_messages) == (7, 43)
        first_bytes = s.buffered_bytes
        taken += [await messages.__anext__() for _ in range(5)]
        s = messages.statistics()
        assert (s.delivered, s.buffered_messages) == (12, 38)
        sizes = [len(m.subject) + len(m.reply) + len(m.data) for m in taken]
        assert first_bytes - s.buffered_bytes == sum(sizes[7:])
        rest = [await messages.__anext__() for _ in range(38)]
        s = messages.statistics()
        assert (s.delivered, s.buffered_messages, s.buffered_bytes) == (50, 0, 0)
    assert [m.metadata.sequence.stream for m in taken + rest] == list(range(1, 51))


async def test_a_pull_due_while_buffered_messages_are_taken_goes_out_at_once(
    js: JetStream, stream: Stream, consumer: Consumer, wait_for: WaitFor
) -> None:
    # Taking buffered messages never gives the event loop a turn: a pull queued
    # for the client's flusher would wait until the buffer is drained, while the
    # server has nothing requested left to send.
    await publish_many(js, f"{stream.name}.a", 10)
    async with consumer.consume(max_messages=10) as messages:  # refill at 5

        async def all_received() -> bool:
            return messages.statistics().received == 10

        await wait_for(all_received, timeout=5, what="10 messages buffered")
        pulls = messages.statistics().pulls
        assert js.nc._pending_data_size == 0  # type: ignore[attr-defined]
        for _ in range(6):  # the take that leaves 4 buffered makes a pull due
            await messages.__anext__()
        assert js.nc._pending_data_size == 0, "the pull waits for the flusher"  # type: ignore[attr-defined]
        assert messages.statistics().pulls == pulls + 1
        await until_pull_waiting(consumer)  # the server has it


async def test_stop_after_fast_takes_ends_iteration_and_keeps_counts(
    js: JetStream, stream: Stream, consumer: Consumer, wait_for: WaitFor
) -> None:
    await publish_many(js, f"{stream.name}.a", 30)
    async with consumer.consume(max_messages=100) as messages:

        async def all_received() -> bool:
            return messages.statistics().received == 30

        await wait_for(all_received, timeout=5, what="30 messages buffered")
        for _ in range(4):
            await messages.__anext__()
        messages.stop()
        assert [m async for m in messages] == []
        assert messages.statistics().delivered == 4


async def test_delete_consumer_mid_consume_raises_consumer_deleted(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 5)
    got = []

    async def consume_all() -> None:
        async with consumer.consume(max_messages=10, expires=10) as messages:
            async for msg in messages:
                got.append(msg)
                await msg.ack()
                if len(got) == 5:
                    await consumer.delete()

    with pytest.raises(ConsumerDeletedError):
        await asyncio.wait_for(consume_all(), 10)
    assert len(got) == 5


async def test_delete_consumer_while_blocked_raises_promptly(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    async with consumer.consume(expires=30) as messages:
        task = asyncio.ensure_future(messages.__anext__())
        await until_pull_waiting(consumer)  # the iterator is blocked with a pull open
        assert not task.done()
        await consumer.delete()
        with pytest.raises(ConsumerDeletedError):
            await asyncio.wait_for(task, 5)


async def test_consume_events_callback_gets_nothing_on_a_quiet_run(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 3)
    events: asyncio.Queue[ConsumeEvent] = asyncio.Queue()
    async with consumer.consume(max_messages=5, on_event=events.put_nowait) as messages:
        for _ in range(3):
            await (await messages.__anext__()).ack()
        assert messages.pin_id is None
    assert events.empty()


# -- fetch -----------------------------------------------------------------------------------


async def test_fetch_ends_when_batch_delivered(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 5)
    loop = asyncio.get_running_loop()
    start = loop.time()
    batch = consumer.fetch(3, expires=10)
    assert isinstance(batch, FetchResult)
    async with batch:
        got = [m async for m in batch]
    assert [m.metadata.sequence.stream for m in got] == [1, 2, 3]
    assert loop.time() - start < 5  # did not wait for the expiry
    assert batch.statistics().delivered == 3


async def test_fetch_ends_at_expiry_with_fewer(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 2)
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with consumer.fetch(10, expires=1) as batch:
        got = [m async for m in batch]
    elapsed = loop.time() - start
    assert [m.data for m in got] == [b"x-0", b"x-1"]
    assert 0.8 <= elapsed < 4


async def test_fetch_on_empty_consumer_yields_nothing(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    async with consumer.fetch(5, expires=1) as batch:
        assert [m async for m in batch] == []


async def test_a_stalled_loop_is_not_a_missed_heartbeat(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    # The loop is held up for three heartbeat intervals (a blocking callback, or a
    # busy machine that did not run the process): the server's heartbeats came in
    # time and wait unread in the socket. The overdue heartbeat check must read them
    # before it decides, so the fetch ends at its expiry, empty, and does not fail
    # with NoHeartbeatError (as it did on both loops: a due timer ran before the
    # connection's read loop had parsed what came).
    async with consumer.fetch(5, expires=3, idle_heartbeat=0.5) as batch:
        await until_pull_waiting(consumer)  # the server sends heartbeats from now
        time.sleep(1.5)  # noqa: ASYNC251 (the stall itself, on the loop's thread)
        assert [m async for m in batch] == []
    assert batch.statistics().heartbeats_missed == 0


async def test_fetch_without_async_with(js: JetStream, stream: Stream, consumer: Consumer) -> None:
    await publish_many(js, f"{stream.name}.a", 2)
    got = [m.data async for m in consumer.fetch(2, expires=5)]
    assert got == [b"x-0", b"x-1"]


async def test_fetch_max_bytes(
    js: JetStream, nats_server: Server, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 20, b"p" * 100)
    limit = 1000
    async with snoop_pulls(js, nats_server.url, stream.name, consumer.name) as snoop:
        loop = asyncio.get_running_loop()
        start = loop.time()
        async with consumer.fetch(max_bytes=limit, expires=10) as batch:
            got = [m async for m in batch]
        elapsed = loop.time() - start
        await snoop.wait_count(1)
    assert snoop.bodies[0]["max_bytes"] == limit
    assert 1 <= len(got) < 20
    sizes = [_size(m) for m in got]
    assert sum(sizes) <= limit
    assert sum(sizes) + sizes[0] > limit  # one more would not have fit
    assert [m.metadata.sequence.stream for m in got] == list(range(1, len(got) + 1))
    assert elapsed < 5  # ended on the bytes, not the expiry


async def test_fetch_with_both_limits_is_invalid(consumer: Consumer) -> None:
    with pytest.raises(InvalidArgumentError):
        consumer.fetch(5, max_bytes=1000)
    with pytest.raises(InvalidArgumentError):
        consumer.consume(max_messages=5, max_bytes=1000)


# -- next ------------------------------------------------------------------------------------


async def test_next_returns_one_message(js: JetStream, stream: Stream, consumer: Consumer) -> None:
    await publish_many(js, f"{stream.name}.a", 2)
    first = await consumer.next(expires=5)
    second = await consumer.next(expires=5)
    assert (first.data, second.data) == (b"x-0", b"x-1")
    await first.ack()
    await second.ack()


async def test_next_on_empty_consumer_raises_no_messages(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(NoMessagesError) as info:
        await consumer.next(expires=1)
    assert isinstance(info.value, TimeoutError)
    assert 0.8 <= loop.time() - start < 4


async def test_next_and_fetch_on_pinned_client_consumer_are_invalid(
    js: JetStream, stream: Stream
) -> None:
    pinned = await js.create_consumer(
        stream.name,
        durable_name="pinned",
        priority_groups=["g"],
        priority_policy="pinned_client",
        priority_timeout=5,
    )
    with pytest.raises(InvalidArgumentError, match="pinned_client"):
        await pinned.next(expires=1, group="g")
    with pytest.raises(InvalidArgumentError, match="pinned_client"):
        pinned.fetch(1, expires=1, group="g")


# -- Msg -------------------------------------------------------------------------------------


async def test_metadata_matches(js: JetStream, stream: Stream, consumer: Consumer) -> None:
    before = datetime.now(timezone.utc)
    await publish_many(js, f"{stream.name}.a", 3)
    msg = await consumer.next(expires=5)
    md = msg.metadata
    assert md.stream == stream.name
    assert md.consumer == consumer.name
    assert md.sequence.stream == 1
    assert md.sequence.consumer == 1
    assert md.num_delivered == 1
    assert md.num_pending == 2
    assert md.timestamp.tzinfo is not None
    stored = await stream.get_msg(1)
    assert md.timestamp == stored.time
    assert abs((md.timestamp - before).total_seconds()) < 10
    assert msg.subject == f"{stream.name}.a"
    second = await consumer.next(expires=5)
    assert second.metadata.sequence == type(md.sequence)(2, 2)
    assert second.metadata.num_pending == 1


async def test_ack_twice_raises(js: JetStream, stream: Stream, consumer: Consumer) -> None:
    await publish_many(js, f"{stream.name}.a", 1)
    msg = await consumer.next(expires=5)
    assert not msg.acked
    await msg.ack()
    assert msg.acked
    with pytest.raises(MessageAlreadyAckedError):
        await msg.ack()
    with pytest.raises(MessageAlreadyAckedError):
        await msg.ack_sync()
    with pytest.raises(MessageAlreadyAckedError):
        await msg.nak()
    with pytest.raises(MessageAlreadyAckedError):
        await msg.term()
    with pytest.raises(MessageAlreadyAckedError):
        await msg.in_progress()


async def test_ack_sync_is_recorded_when_it_returns(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 1)
    msg = await consumer.next(expires=5)
    await msg.ack_sync()
    info = await consumer.info()
    assert info.num_ack_pending == 0
    assert info.ack_floor.stream_seq == 1
    with pytest.raises(MessageAlreadyAckedError):
        await msg.ack_sync()


async def test_nak_with_delay_redelivers_after_the_delay(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 1)
    msg = await consumer.next(expires=5)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await msg.nak(delay=1.0)
    again = await consumer.next(expires=5)
    elapsed = loop.time() - start
    assert again.metadata.sequence.stream == 1
    assert again.metadata.num_delivered == 2
    assert elapsed >= 0.9
    await again.ack_sync()


async def test_nak_without_delay_redelivers_at_once(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 1)
    msg = await consumer.next(expires=5)
    await msg.nak()
    again = await consumer.next(expires=5)
    assert again.metadata.sequence.stream == 1
    assert again.metadata.num_delivered == 2


async def test_in_progress_prevents_redelivery(js: JetStream, stream: Stream) -> None:
    consumer = await js.create_consumer(stream.name, durable_name="slow", ack_wait=1)
    await publish_many(js, f"{stream.name}.a", 1)
    msg = await consumer.next(expires=5)
    loop = asyncio.get_running_loop()
    start = loop.time()
    while loop.time() - start < 2.0:  # twice ack_wait
        await msg.in_progress()
        # pacing, not a wait for a state: report progress every 0.3 s, well inside
        # the 1 s ack_wait, for a window of twice ack_wait; without these reports
        # the message would be redelivered within it
        await asyncio.sleep(0.3)
    await msg.ack_sync()
    info = await consumer.info()
    assert info.num_redelivered == 0
    assert info.delivered.consumer_seq == 1
    assert info.num_ack_pending == 0


async def test_term_stops_redelivery(js: JetStream, stream: Stream) -> None:
    consumer = await js.create_consumer(stream.name, durable_name="t", ack_wait=1)
    await publish_many(js, f"{stream.name}.a", 1)
    msg = await consumer.next(expires=5)
    await msg.term("cannot parse")
    assert msg.acked
    # ack_wait is 1 s: a message that was not termed would come back within 2 s
    with pytest.raises(NoMessagesError):
        await consumer.next(expires=2)
    info = await consumer.info()
    assert info.num_ack_pending == 0
    assert info.num_redelivered == 0


async def test_unacked_message_is_redelivered_after_ack_wait(js: JetStream, stream: Stream) -> None:
    # The control for the in_progress / term tests: without them it does come back.
    consumer = await js.create_consumer(stream.name, durable_name="u", ack_wait=1)
    await publish_many(js, f"{stream.name}.a", 1)
    msg = await consumer.next(expires=5)
    again = await consumer.next(expires=5)
    assert again.metadata.sequence.stream == msg.metadata.sequence.stream
    assert again.metadata.num_delivered == 2


async def test_msg_headers(js: JetStream, stream: Stream, consumer: Consumer) -> None:
    await js.publish(f"{stream.name}.a", b"h", headers={"X-One": "1"})
    msg = await consumer.next(expires=5)
    assert msg.headers is not None
    assert msg.headers["X-One"] == "1"
    await msg.ack()


async def test_fetch_max_bytes_counts_headers_like_the_server(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    # Learn each message's size from a first look (a second consumer), then ask
    # for exactly three messages' worth: the server must agree on every byte.
    for i in range(6):
        await js.publish(f"{stream.name}.h", b"p" * (10 + i), headers={"X-N": "v" * (i + 1)})
    probe = await js.create_consumer(stream.name, durable_name="probe")
    async with probe.fetch(6, expires=5) as batch:
        looked = [m async for m in batch]
    assert all(m.headers for m in looked)
    # the reply subject differs per consumer (name), so size it for "c"
    sizes = [
        len(m.subject)
        + len(m.reply)
        - len("probe")
        + len("c")
        + len(m._header_block or b"")
        + len(m.data)
        for m in looked
    ]
    async with consumer.fetch(max_bytes=sum(sizes[:3]), expires=5) as batch:
        exact = [m async for m in batch]
    assert [m.metadata.sequence.stream for m in exact] == [1, 2, 3]
    for m in exact:
        await m.ack()
    async with consumer.fetch(max_bytes=sum(sizes[3:5]) - 1, expires=5) as batch:
        short = [m async for m in batch]
    assert [m.metadata.sequence.stream for m in short] == [4]


@pytest.mark.parametrize(
    ("config", "options", "text"),
    [
        ({"max_batch": 5}, {"max_messages": 10}, "Exceeded MaxRequestBatch"),
        ({"max_expires": 2}, {"expires": 5}, "Exceeded MaxRequestExpires"),
        ({"max_bytes": 1000}, {"max_bytes": 5000}, "Exceeded MaxRequestMaxBytes"),
    ],
)
async def test_consume_reports_server_limit_warnings(
    js: JetStream,
    stream: Stream,
    config: dict[str, int],
    options: dict[str, int],
    text: str,
) -> None:
    limited = await js.create_consumer(stream.name, durable_name="lim", **config)
    events: asyncio.Queue[ConsumeEvent] = asyncio.Queue()
    async with limited.consume(on_event=events.put_nowait, **options):  # type: ignore[arg-type]
        warning = await next_event(events, StatusWarning, timeout=5)
    assert warning.code == 409
    assert warning.description.startswith(text)


async def test_idle_consumer_with_heartbeats_reports_no_false_misses(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    # expires=2, idle_heartbeat=1: over 4.5 s the pulls expire and are renewed
    # and the server's heartbeats keep the stream alive; nothing is "missed".
    # (A miss is 2 s without a frame; shorter intervals made a loaded machine's
    # stalled event loop look like one.)
    events: list[ConsumeEvent] = []
    async with consumer.consume(
        max_messages=5, expires=2, idle_heartbeat=1, on_event=events.append
    ) as messages:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(messages.__anext__(), 4.5)
        stats = messages.statistics()
        await js.publish(f"{stream.name}.a", b"late")
        msg = await asyncio.wait_for(messages.__anext__(), 5)
    assert msg.data == b"late"
    assert events == []
    assert stats.heartbeats_missed == 0
    assert stats.pulls >= 2  # renewed after expiry


async def test_full_buffer_without_open_pull_is_not_a_missed_heartbeat(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 10)
    events: list[ConsumeEvent] = []
    async with consumer.consume(
        max_messages=5, expires=1, idle_heartbeat=0.5, on_event=events.append
    ) as messages:
        first = await asyncio.wait_for(messages.__anext__(), 5)
        # bounded window, proving something does NOT happen: a slow user holds a
        # full buffer for 3 heartbeat intervals; with no pull open the server sends
        # no heartbeats, and none may be "missed". 1.5 s is past the 2-interval
        # (1 s) miss threshold, so a check wrongly armed would have fired
        await asyncio.sleep(1.5)
        rest = [await asyncio.wait_for(messages.__anext__(), 5) for _ in range(9)]
        stats = messages.statistics()
    assert [m.metadata.sequence.stream for m in (first, *rest)] == list(range(1, 11))
    assert events == []
    assert stats.heartbeats_missed == 0


async def test_fetch_refused_by_a_server_limit_raises_saying_so(
    js: JetStream, stream: Stream
) -> None:
    limited = await js.create_consumer(stream.name, durable_name="lim", max_batch=5)

    async def drain_fetch() -> None:
        async with limited.fetch(10, expires=2) as batch:
            async for _ in batch:
                pass

    with pytest.raises(JetStreamError, match="Exceeded MaxRequestBatch") as info:
        await drain_fetch()
    assert "max_batch" in str(info.value)
