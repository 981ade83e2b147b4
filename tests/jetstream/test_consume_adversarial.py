"""Adversarial tests of pull consumption against a real nats-server: closing and
cancelling while iterating, misuse (no ``async with``, several readers, async
callbacks), consumers that do not exist, and bad arguments."""

from __future__ import annotations

import asyncio
import gc
import math
from typing import Any

import pytest
from consume_support import publish_many, until_pull_waiting
from support import WaitFor

from aioclients import AioClientsError, InvalidArgumentError
from aioclients.jetstream import (
    ConsumeEvent,
    Consumer,
    ConsumerDeletedError,
    JetStream,
    JetStreamClosedError,
    JetStreamError,
    MessageStream,
    Msg,
    NoMessagesError,
    Pinned,
    StatusWarning,
    Stream,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def stream(js: JetStream, unique_name: str) -> Stream:
    return await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])


@pytest.fixture
async def consumer(js: JetStream, stream: Stream) -> Consumer:
    return await js.create_consumer(stream.name, durable_name="c")


def _other_tasks() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()}


# -- closing the context ---------------------------------------------------------------------


async def test_close_while_blocked_in_iteration_raises_closed_promptly(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    async with consumer.consume(expires=30) as messages:
        task = asyncio.ensure_future(messages.__anext__())
        await until_pull_waiting(consumer)  # the iterator is blocked on an open pull
        assert not task.done()
        await js.close()
        with pytest.raises(JetStreamClosedError):
            await asyncio.wait_for(task, 2)
        # and it stays ended
        with pytest.raises(JetStreamClosedError):
            await messages.__anext__()


async def test_close_with_buffered_messages_ends_iteration(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 10)
    got: list[Msg] = []

    async def run() -> None:
        async with consumer.consume(max_messages=10) as messages:
            async for msg in messages:
                got.append(msg)
                if len(got) == 1:
                    await js.close()

    with pytest.raises(JetStreamClosedError):
        await asyncio.wait_for(run(), 5)
    assert len(got) == 1  # closing ends the iteration at once; the buffer is dropped


async def test_close_during_fetch_raises_closed(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    async with consumer.fetch(5, expires=30) as batch:
        task = asyncio.ensure_future(batch.__anext__())
        await until_pull_waiting(consumer)  # the fetch's pull is open on the server
        assert not task.done()
        await js.close()
        with pytest.raises(JetStreamClosedError):
            await asyncio.wait_for(task, 2)


async def test_next_during_close_raises_closed(js: JetStream, consumer: Consumer) -> None:
    task = asyncio.ensure_future(consumer.next(expires=30))
    await until_pull_waiting(consumer)  # next()'s pull is open on the server
    assert not task.done()
    await js.close()
    with pytest.raises(JetStreamClosedError):
        await asyncio.wait_for(task, 2)


async def test_consume_on_closed_context_raises_closed(js: JetStream, consumer: Consumer) -> None:
    await js.close()
    with pytest.raises(JetStreamClosedError):
        async with consumer.consume():
            pass
    with pytest.raises(JetStreamClosedError):
        await consumer.next(expires=1)


async def test_ack_after_close_raises_closed_error(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 1)
    msg = await consumer.next(expires=5)
    await js.close()
    with pytest.raises(AioClientsError) as info:
        await msg.ack()
    assert type(info.value).__name__.endswith("ClosedError"), repr(info.value)


# -- cancellation ----------------------------------------------------------------------------


async def test_cancel_blocked_async_for_leaves_nothing_running(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    before = _other_tasks()

    async def run() -> None:
        async with consumer.consume(max_messages=10, expires=30) as messages:
            async for msg in messages:
                await msg.ack()

    task = asyncio.ensure_future(run())
    await until_pull_waiting(consumer)  # the task is blocked on an open pull
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _other_tasks() <= before
    # the cancelled stream's subscription is gone: nothing steals new messages
    await publish_many(js, f"{stream.name}.a", 3)
    msg = await consumer.next(expires=5)
    assert msg.metadata.sequence.stream == 1


async def test_cancelled_anext_can_be_retried(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    async with consumer.consume(max_messages=10, expires=5) as messages:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(messages.__anext__(), 0.3)
        await js.publish(f"{stream.name}.a", b"after")
        msg = await asyncio.wait_for(messages.__anext__(), 5)
        assert msg.data == b"after"


async def test_cancel_next_leaves_nothing_behind(
    js: JetStream, stream: Stream, consumer: Consumer, wait_for: WaitFor
) -> None:
    before = _other_tasks()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(consumer.next(expires=30), 0.3)
    assert _other_tasks() <= before
    # the abandoned pull may still be open on the server until it expires, but
    # nobody listens for it any more: a new next() gets the message
    await publish_many(js, f"{stream.name}.a", 1)
    # the orphaned 30 s pull may take the message first (it is then redelivered
    # after ack_wait), so look at what the consumer counts rather than racing it;
    # its pending count follows the stream with a small lag

    async def counted() -> bool:
        info = await consumer.info()
        return info.num_ack_pending + info.num_pending == 1

    await wait_for(counted, timeout=5, what="the message counted by the consumer")


async def test_concurrent_next_calls_get_distinct_messages(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 30)
    msgs = await asyncio.gather(*(consumer.next(expires=5) for _ in range(30)))
    assert sorted(m.metadata.sequence.stream for m in msgs) == list(range(1, 31))


# -- misuse ----------------------------------------------------------------------------------


async def test_async_for_without_async_with_releases_on_break(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 1)
    async for msg in consumer.consume(max_messages=10, expires=30):
        await msg.ack_sync()
        break
    gc.collect()
    await publish_many(js, f"{stream.name}.a", 3)
    # nothing should be pulling any more: the next message is there for next()
    msg = await consumer.next(expires=2)
    assert msg.metadata.sequence.stream == 2


async def test_async_for_without_async_with_runs(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 5)
    messages = consumer.consume(max_messages=10)
    got = []
    async for msg in messages:
        got.append(msg.metadata.sequence.stream)
        await msg.ack()
        if len(got) == 5:
            messages.stop()
    assert got == [1, 2, 3, 4, 5]


async def test_two_tasks_iterating_one_stream(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    got: dict[int, list[int]] = {1: [], 2: []}
    all_in = asyncio.Event()
    async with consumer.consume(max_messages=10, expires=5) as messages:

        async def worker(n: int) -> None:
            async for msg in messages:
                got[n].append(msg.metadata.sequence.stream)
                if len(got[1]) + len(got[2]) == 20:
                    all_in.set()
                await msg.ack()
                # a turn of the loop (not a wait for a state): the other worker,
                # already woken, may take the next message meanwhile
                await asyncio.sleep(0)

        tasks = [asyncio.ensure_future(worker(n)) for n in (1, 2)]
        await until_pull_waiting(consumer)  # the stream's pull is open on the server...
        assert not any(t.done() for t in tasks)  # ...and both workers wait on it
        await publish_many(js, f"{stream.name}.a", 20)
        try:
            await asyncio.wait_for(all_in.wait(), 10)
        finally:
            messages.stop()
            _, pending = await asyncio.wait(tasks, timeout=2)
            for t in pending:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    assert not pending, "a worker still hangs after stop()"
    assert sorted(got[1] + got[2]) == list(range(1, 21))


async def test_stop_before_start_and_iterate_after_stop(consumer: Consumer) -> None:
    messages = consumer.consume()
    messages.stop()
    assert [m async for m in messages] == []
    await messages.aclose()


async def test_drain_wakes_a_blocked_iterator(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    async with consumer.consume(expires=30) as messages:
        task = asyncio.ensure_future(messages.__anext__())
        await until_pull_waiting(consumer)  # blocked on an open pull
        assert not task.done()
        await messages.drain()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(task, 5)
        await messages.drain()  # idempotent


async def test_on_event_exception_does_not_stop_consumption(
    js: JetStream, stream: Stream, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = await js.create_consumer(
        stream.name, durable_name="pc", priority_groups=["g"], priority_policy="pinned_client"
    )
    seen: list[ConsumeEvent] = []

    def explode(event: ConsumeEvent) -> None:
        seen.append(event)
        raise RuntimeError("callback bug")

    await publish_many(js, f"{stream.name}.a", 3)
    async with consumer.consume(group="g", on_event=explode) as messages:
        got = [await asyncio.wait_for(messages.__anext__(), 5) for _ in range(3)]
    assert [m.metadata.sequence.stream for m in got] == [1, 2, 3]
    assert [type(e) for e in seen] == [Pinned]
    assert "on_event callback failed" in caplog.text


async def test_async_on_event_is_rejected(consumer: Consumer) -> None:
    async def on_event(event: ConsumeEvent) -> None:
        pass

    with pytest.raises(InvalidArgumentError):
        consumer.consume(on_event=on_event)


@pytest.mark.parametrize("value", [1, "cb"])
async def test_non_callable_on_event(consumer: Consumer, value: object) -> None:
    with pytest.raises(InvalidArgumentError):
        consumer.consume(on_event=value)  # type: ignore[arg-type]


# -- a consumer that does not exist ----------------------------------------------------------


async def test_next_on_deleted_consumer_is_not_no_messages(consumer: Consumer) -> None:
    await consumer.delete()
    with pytest.raises(JetStreamError) as info:
        await consumer.next(expires=1)
    assert not isinstance(info.value, NoMessagesError), repr(info.value)


async def test_consume_on_deleted_consumer_ends(consumer: Consumer) -> None:
    await consumer.delete()
    events: list[ConsumeEvent] = []
    with pytest.raises((ConsumerDeletedError, JetStreamError)):
        async with consumer.consume(expires=1, on_event=events.append) as messages:
            await asyncio.wait_for(messages.__anext__(), 3)


async def test_consume_max_bytes_below_message_size_does_not_spin(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await js.publish(f"{stream.name}.a", b"x" * 200)
    events: list[ConsumeEvent] = []
    raised: BaseException | None = None
    async with consumer.consume(max_bytes=50, expires=5, on_event=events.append) as messages:
        try:
            await asyncio.wait_for(messages.__anext__(), 1)
        except asyncio.TimeoutError:
            pass
        except JetStreamError as exc:
            raised = exc
        pulls = messages.statistics().pulls
    # It can never deliver: say so (an error or a warning) and do not hammer the server.
    assert raised is not None or any(isinstance(e, StatusWarning) for e in events), events
    assert pulls < 20, f"{pulls} pulls in 1 s"


# -- bad input -------------------------------------------------------------------------------


BAD_EXPIRES = [0, 0.5, 0.999, -1, math.nan, True, "5", None]


@pytest.mark.parametrize("expires", BAD_EXPIRES)
async def test_bad_expires(consumer: Consumer, expires: object) -> None:
    with pytest.raises(InvalidArgumentError):
        consumer.consume(expires=expires)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        consumer.fetch(1, expires=expires)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await consumer.next(expires=expires)  # type: ignore[arg-type]


async def test_infinite_expires_is_invalid(consumer: Consumer) -> None:
    with pytest.raises(InvalidArgumentError):
        consumer.consume(expires=math.inf)


@pytest.mark.parametrize(
    ("expires", "idle_heartbeat"),
    [(2, 1.5), (4, 2.5), (10, 0.4), (10, 0), (100, 31), (5, math.nan), (5, "1")],
)
async def test_bad_idle_heartbeat(
    consumer: Consumer, expires: float, idle_heartbeat: object
) -> None:
    with pytest.raises(InvalidArgumentError):
        consumer.consume(expires=expires, idle_heartbeat=idle_heartbeat)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        consumer.fetch(1, expires=expires, idle_heartbeat=idle_heartbeat)  # type: ignore[arg-type]


async def test_idle_heartbeat_at_half_expires_is_fine(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 1)
    async with consumer.consume(expires=2, idle_heartbeat=1) as messages:
        msg = await asyncio.wait_for(messages.__anext__(), 5)
    assert msg.metadata.sequence.stream == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_messages": 10, "threshold_messages": 11},
        {"max_bytes": 1000, "threshold_bytes": 1001},
        {"max_messages": 10, "threshold_bytes": 5},
        {"max_bytes": 1000, "threshold_messages": 5},
        {"threshold_messages": 501},  # above the default max_messages
        {"threshold_messages": -1},
        {"max_messages": 0},
        {"max_messages": -5},
        {"max_messages": 1.5},
        {"max_messages": True},
        {"max_bytes": 0},
        {"max_bytes": "100"},
        {"max_messages": 10, "max_bytes": 1000},
    ],
)
async def test_bad_consume_limits(consumer: Consumer, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        consumer.consume(**kwargs)


@pytest.mark.parametrize(
    "kwargs", [{"max_messages": 0}, {"max_bytes": 0}, {"max_messages": 1, "max_bytes": 1}]
)
async def test_bad_fetch_limits(consumer: Consumer, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        consumer.fetch(**kwargs)


async def test_threshold_equal_to_limit_is_accepted(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 6)
    got = []
    async with consumer.consume(max_messages=3, threshold_messages=3) as messages:
        async for msg in messages:
            got.append(msg.metadata.sequence.stream)
            await msg.ack()
            if len(got) == 6:
                break
    assert got == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("delay", [-1, math.nan, math.inf, "1"])
async def test_bad_nak_delay(
    js: JetStream, stream: Stream, consumer: Consumer, delay: object
) -> None:
    await publish_many(js, f"{stream.name}.a", 1)
    msg = await consumer.next(expires=5)
    with pytest.raises(InvalidArgumentError):
        await msg.nak(delay=delay)  # type: ignore[arg-type]
    assert not msg.acked  # a refused nak does not use up the message
    await msg.ack()


@pytest.mark.parametrize("reason", ["a\r\nPUB x 1", "line\n", 5])
async def test_bad_term_reason(
    js: JetStream, stream: Stream, consumer: Consumer, reason: object
) -> None:
    await publish_many(js, f"{stream.name}.a", 1)
    msg = await consumer.next(expires=5)
    with pytest.raises(InvalidArgumentError):
        await msg.term(reason)  # type: ignore[arg-type]
    assert not msg.acked
    await msg.term("ok")


async def test_message_stream_type(consumer: Consumer) -> None:
    messages = consumer.consume()
    assert isinstance(messages, MessageStream)
    messages.stop()


async def test_bare_async_for_over_fetch_releases_on_break(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 1)
    async for msg in consumer.fetch(10, expires=30):
        await msg.ack_sync()
        break
    gc.collect()
    await publish_many(js, f"{stream.name}.a", 3)
    msg = await consumer.next(expires=2)
    assert msg.metadata.sequence.stream == 2


async def test_bare_async_for_left_by_an_exception_releases(
    js: JetStream, stream: Stream, consumer: Consumer
) -> None:
    await publish_many(js, f"{stream.name}.a", 1)

    async def body() -> None:
        async for msg in consumer.consume(max_messages=10, expires=30):
            await msg.ack_sync()
            raise ValueError("handler failed")

    with pytest.raises(ValueError, match="handler failed"):
        await body()
    gc.collect()
    await publish_many(js, f"{stream.name}.a", 3)
    msg = await consumer.next(expires=2)
    assert msg.metadata.sequence.stream == 2
