"""ADR-42 priority groups end to end: pinned_client (pin, unpin, failover), overflow
(min_pending / min_ack_pending), prioritized, and the client-side checks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from consume_support import next_event, publish_many, snoop_pulls, until_pull_waiting
from support import Server, WaitFor

from aioclients import InvalidArgumentError
from aioclients.jetstream import (
    ConsumeEvent,
    Consumer,
    JetStream,
    MessageStream,
    Pinned,
    Stream,
    Unpinned,
    connect,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def stream(js: JetStream, unique_name: str) -> Stream:
    return await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])


@pytest.fixture
async def js2(nats_server: Server) -> AsyncIterator[JetStream]:
    """A second connection: another client of the same consumer."""
    ctx = await connect(nats_server.url)
    try:
        yield ctx
    finally:
        await ctx.close()


@dataclass
class Client:
    """One consuming client: its stream, the messages it got and its events."""

    name: str
    stream: MessageStream
    seqs: list[int] = field(default_factory=list)
    events: asyncio.Queue[ConsumeEvent] = field(default_factory=asyncio.Queue)
    got: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        async for msg in self.stream:
            self.seqs.append(msg.metadata.sequence.stream)
            self.got.set()
            await msg.ack()
            async with self.changed:
                self.changed.notify_all()


async def _start(name: str, consumer: Consumer, **options: object) -> Client:
    client: Client
    events: asyncio.Queue[ConsumeEvent] = asyncio.Queue()
    messages = consumer.consume(on_event=events.put_nowait, **options)  # type: ignore[arg-type]
    client = Client(name, messages, events=events)
    await messages.__aenter__()
    client.task = asyncio.ensure_future(client.run())
    return client


async def _finish(*clients: Client) -> None:
    for c in clients:
        c.stream.stop()
    for c in clients:
        assert c.task is not None
        await asyncio.wait_for(c.task, 5)


async def _pinned_pair(
    js: JetStream, js2: JetStream, stream: Stream, priority_timeout: float = 30
) -> tuple[Consumer, Client, Client]:
    consumer = await js.create_consumer(
        stream.name,
        durable_name="pc",
        priority_groups=["g"],
        priority_policy="pinned_client",
        priority_timeout=priority_timeout,
    )
    other = await js2.consumer(stream.name, "pc")
    a = await _start("a", consumer, group="g", expires=4)
    b = await _start("b", other, group="g", expires=4)
    return consumer, a, b


async def _until(total: int, *clients: Client, timeout: float = 10) -> None:
    """Wait until the clients received ``total`` messages between them."""
    async with asyncio.timeout(timeout):
        while sum(len(c.seqs) for c in clients) < total:
            waits = [asyncio.ensure_future(_changed(c)) for c in clients]
            try:
                await asyncio.wait(waits, timeout=0.2, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()


async def _changed(client: Client) -> None:
    async with client.changed:
        await client.changed.wait()


# -- pinned_client ---------------------------------------------------------------------------


async def test_only_the_pinned_client_receives(
    js: JetStream, js2: JetStream, stream: Stream
) -> None:
    consumer, a, b = await _pinned_pair(js, js2, stream)
    try:
        await publish_many(js, f"{stream.name}.a", 20)
        await _until(20, a, b)
        holder, idle = (a, b) if a.seqs else (b, a)
        assert holder.seqs == list(range(1, 21))
        assert idle.seqs == []
        assert idle.stream.statistics().received == 0
        pinned = await next_event(holder.events, Pinned, timeout=1)
        assert pinned.pin_id
        assert holder.stream.pin_id == pinned.pin_id
        assert idle.stream.pin_id is None
        # a second batch goes to the same client (it still holds the pin)
        await publish_many(js, f"{stream.name}.a", 10)
        await _until(30, a, b)
        assert holder.seqs == list(range(1, 31))
        assert idle.seqs == []
        assert holder.stream.pin_id == pinned.pin_id
        info = await consumer.info()
        assert info.priority_groups is not None
        assert info.priority_groups[0]["group"] == "g"
        assert info.priority_groups[0].get("pinned_client_id") == pinned.pin_id
    finally:
        await _finish(a, b)


async def test_later_pulls_carry_the_pin_id(
    js: JetStream, js2: JetStream, nats_server: Server, stream: Stream
) -> None:
    consumer = await js.create_consumer(
        stream.name, durable_name="pc", priority_groups=["g"], priority_policy="pinned_client"
    )
    async with snoop_pulls(js, nats_server.url, stream.name, consumer.name) as snoop:
        a = await _start("a", consumer, group="g", max_messages=4, expires=4)
        try:
            await publish_many(js, f"{stream.name}.a", 12)
            await _until(12, a)
            pin = a.stream.pin_id
            assert pin is not None
            await snoop.wait_count(a.stream.statistics().pulls)
        finally:
            await _finish(a)
    assert "id" not in snoop.bodies[0]
    assert all(body["group"] == "g" for body in snoop.bodies)
    later = snoop.bodies[1:]
    assert later, "expected refill pulls after the first"
    assert all(body.get("id") == pin for body in later), snoop.bodies


async def test_unpin_moves_the_pin(js: JetStream, js2: JetStream, stream: Stream) -> None:
    consumer, a, b = await _pinned_pair(js, js2, stream)
    try:
        await publish_many(js, f"{stream.name}.a", 5)
        await _until(5, a, b)
        old, new = (a, b) if a.seqs else (b, a)
        first_pin = (await next_event(old.events, Pinned, timeout=1)).pin_id

        await consumer.unpin("g")
        await publish_many(js, f"{stream.name}.a", 5)
        await _until(10, a, b)

        # the old holder's pulls carry the old id: the server answers them with
        # 423 (Unpinned) and pins the client whose pull has no id
        await next_event(old.events, Unpinned, timeout=5)
        assert old.stream.pin_id is None
        second = await next_event(new.events, Pinned, timeout=5)
        assert second.pin_id != first_pin
        assert new.stream.pin_id == second.pin_id
        assert old.seqs == [1, 2, 3, 4, 5]
        assert new.seqs == [6, 7, 8, 9, 10]
    finally:
        await _finish(a, b)


async def test_priority_timeout_failover_when_pinned_client_stops(
    js: JetStream, js2: JetStream, stream: Stream
) -> None:
    _, a, b = await _pinned_pair(js, js2, stream, priority_timeout=1.5)
    try:
        await publish_many(js, f"{stream.name}.a", 3)
        await _until(3, a, b)
        old, new = (a, b) if a.seqs else (b, a)
        first_pin = old.stream.pin_id
        assert first_pin is not None

        loop = asyncio.get_running_loop()
        old.stream.stop()  # stops pulling; the server unpins it after priority_timeout
        stopped_at = loop.time()
        await js.nc.flush()
        await js2.nc.flush()
        await publish_many(js, f"{stream.name}.a", 3)
        pinned = await next_event(new.events, Pinned, timeout=10)
        waited = loop.time() - stopped_at
        assert pinned.pin_id != first_pin
        await _until(6, new, old)
        assert new.seqs == [4, 5, 6]
        # the failover waits for priority_timeout (not before; generous upper bound)
        assert 1.0 <= waited < 8, waited
    finally:
        await _finish(a, b)


async def test_consume_without_group_on_pinned_consumer_is_invalid(
    js: JetStream, stream: Stream
) -> None:
    consumer = await js.create_consumer(
        stream.name, durable_name="pc", priority_groups=["g"], priority_policy="pinned_client"
    )
    with pytest.raises(InvalidArgumentError, match="group"):
        async with consumer.consume(expires=2):
            pass


# -- overflow --------------------------------------------------------------------------------


async def test_overflow_min_pending_served_only_when_backlog_is_deep(
    js: JetStream, stream: Stream, wait_for: WaitFor
) -> None:
    consumer = await js.create_consumer(
        stream.name, durable_name="ov", priority_groups=["g"], priority_policy="overflow"
    )
    a = await _start("a", consumer, group="g", min_pending=5, expires=4)
    try:
        await publish_many(js, f"{stream.name}.a", 4)

        async def backlog(n: int) -> bool:
            return (await consumer.info()).num_pending == n

        # the consumer's pending count follows the stream with a small lag
        await wait_for(lambda: backlog(4), timeout=5, what="backlog of 4")
        await until_pull_waiting(consumer)  # a's pull is open on the server
        # bounded window, proving something does NOT happen: the open pull stays
        # unserved while the backlog is 4 (< 5). A servable pull is answered within
        # milliseconds; 1 s is far beyond that and short of the 4 s pull expiry
        await asyncio.sleep(1.0)
        assert a.seqs == []
        await js.publish(f"{stream.name}.a", b"fifth")
        await asyncio.wait_for(a.got.wait(), 5)
        assert a.seqs[0] == 1

        # served one at a time while >= 5 are pending: the backlog settles at 4
        await wait_for(lambda: backlog(4), timeout=5, what="backlog of 4 again")
        assert a.seqs == [1]
    finally:
        await _finish(a)


async def test_overflow_without_thresholds_is_served_at_once(js: JetStream, stream: Stream) -> None:
    consumer = await js.create_consumer(
        stream.name, durable_name="ov", priority_groups=["g"], priority_policy="overflow"
    )
    await publish_many(js, f"{stream.name}.a", 2)
    async with consumer.fetch(2, expires=5, group="g") as batch:
        got = [m.metadata.sequence.stream async for m in batch]
    assert got == [1, 2]


async def test_overflow_fetch_with_min_pending_ends_empty_when_backlog_is_short(
    js: JetStream, stream: Stream
) -> None:
    consumer = await js.create_consumer(
        stream.name, durable_name="ov", priority_groups=["g"], priority_policy="overflow"
    )
    await publish_many(js, f"{stream.name}.a", 2)
    async with consumer.fetch(2, expires=1, group="g", min_pending=3) as batch:
        assert [m async for m in batch] == []
    async with consumer.fetch(2, expires=1, group="g", min_pending=2) as batch:
        assert [m.metadata.sequence.stream async for m in batch] == [1]
        # after one delivery only 1 is pending (< 2): the rest stays for others


async def test_overflow_min_ack_pending(js: JetStream, stream: Stream) -> None:
    consumer = await js.create_consumer(
        stream.name, durable_name="ov", priority_groups=["g"], priority_policy="overflow"
    )
    await publish_many(js, f"{stream.name}.a", 5)
    # nothing is awaiting an ack yet: a pull wanting 2 unacked is not served
    async with consumer.fetch(1, expires=1, group="g", min_ack_pending=2) as batch:
        assert [m async for m in batch] == []
    held = [await consumer.next(expires=5, group="g") for _ in range(2)]
    msg = await consumer.next(expires=5, group="g", min_ack_pending=2)
    assert msg.metadata.sequence.stream == 3
    for m in (*held, msg):
        await m.ack()


# -- prioritized -----------------------------------------------------------------------------


async def test_prioritized_serves_the_lowest_priority_number_first(
    js: JetStream, js2: JetStream, stream: Stream, wait_for: WaitFor
) -> None:
    consumer = await js.create_consumer(
        stream.name, durable_name="pr", priority_groups=["g"], priority_policy="prioritized"
    )
    other = await js2.consumer(stream.name, "pr")
    low = await _start("low", consumer, group="g", priority=1, expires=4)
    high = await _start("high", other, group="g", priority=0, expires=4)
    try:

        async def waiting(n: int) -> bool:
            return (await consumer.info()).num_waiting == n

        # both pulls must be waiting on the server before the messages come
        await wait_for(lambda: waiting(2), timeout=10, what="two waiting pulls")
        await publish_many(js, f"{stream.name}.a", 5)
        await _until(5, low, high)
        assert high.seqs == [1, 2, 3, 4, 5]
        assert low.seqs == []
        high.stream.stop()
        # its pull may still wait on the server: make sure the server has seen
        # the unsubscribe (another connection) and dropped that pull before the
        # next messages come
        await js2.nc.flush()
        await wait_for(lambda: waiting(1), timeout=10, what="only the low pull waiting")
        await publish_many(js, f"{stream.name}.a", 2)
        try:
            await _until(7, low, high)
        except TimeoutError:
            info = await consumer.info()
            pytest.fail(f"low={low.seqs} high={high.seqs} {low.stream.statistics()} {info.raw}")
        assert low.seqs == [6, 7]
    finally:
        await _finish(low, high)


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("group", ["", "a" * 17, "has space", "dot.ted", "star*", "ü", 7])
async def test_bad_group_names(js: JetStream, stream: Stream, group: object) -> None:
    consumer = await js.create_consumer(
        stream.name, durable_name="ov", priority_groups=["g"], priority_policy="overflow"
    )
    with pytest.raises(InvalidArgumentError):
        consumer.consume(group=group)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        consumer.fetch(1, group=group)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await consumer.next(group=group)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await consumer.unpin(group)  # type: ignore[arg-type]


async def test_group_on_consumer_without_priority_groups(js: JetStream, stream: Stream) -> None:
    consumer = await js.create_consumer(stream.name, durable_name="plain")
    with pytest.raises(InvalidArgumentError, match="no priority groups"):
        async with consumer.consume(group="g", expires=2):
            pass
    with pytest.raises(InvalidArgumentError, match="no priority groups"):
        await consumer.next(group="g", expires=1)


async def test_unknown_group(js: JetStream, stream: Stream) -> None:
    consumer = await js.create_consumer(
        stream.name, durable_name="ov", priority_groups=["g"], priority_policy="overflow"
    )
    with pytest.raises(InvalidArgumentError, match="not a priority group"):
        await consumer.next(group="other", expires=1)


async def test_priority_fields_need_a_group(js: JetStream, stream: Stream) -> None:
    consumer = await js.create_consumer(stream.name, durable_name="plain")
    for kwargs in ({"min_pending": 1}, {"min_ack_pending": 1}, {"priority": 1}):
        with pytest.raises(InvalidArgumentError, match="group"):
            consumer.consume(**kwargs)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="group"):
            consumer.fetch(1, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [{"priority": 10}, {"priority": -1}, {"min_pending": -1}, {"min_ack_pending": -1}],
)
async def test_out_of_range_priority_fields(
    js: JetStream, stream: Stream, kwargs: dict[str, int]
) -> None:
    consumer = await js.create_consumer(
        stream.name, durable_name="ov", priority_groups=["g"], priority_policy="overflow"
    )
    with pytest.raises(InvalidArgumentError):
        consumer.consume(group="g", **kwargs)  # type: ignore[arg-type]
