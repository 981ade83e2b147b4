"""Pull consumption through server faults: restarts, a frozen (SIGSTOP) server, and a
consumer that disappears while the client is away. Each test owns its server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import nats
import pytest
from consume_support import next_event, publish_many, until_pull_waiting
from support import Server, WaitFor

from aioclients.jetstream import (
    APITimeoutError,
    ConsumeEvent,
    Consumer,
    ConsumerDeletedError,
    Disconnected,
    HeartbeatMissed,
    JetStream,
    JetStreamClosedError,
    Msg,
    NoHeartbeatError,
    Reconnected,
    connect,
)
from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer

pytestmark = [pytest.mark.timeout(90), pytest.mark.fault]


@pytest.fixture
async def private(nats_server_private: Server) -> AsyncIterator[tuple[NatsServer, JetStream]]:
    if isinstance(nats_server_private, ExternalServer):
        pytest.skip("stops or pauses the server; cannot do that to an external one")
    ctx = await connect(
        nats_server_private.url, timeout=1.5, reconnect_time_wait=0.1, max_reconnect_attempts=-1
    )
    try:
        yield nats_server_private, ctx
    finally:
        nats_server_private.resume()
        nats_server_private.start()
        await ctx.close()


async def _file_stream_consumer(js: JetStream, *, ack_wait: float = 2.0) -> Consumer:
    await js.create_stream("S", subjects=["s.>"], storage="file")
    return await js.create_consumer("S", durable_name="c", ack_wait=ack_wait)


@pytest.mark.parametrize("limit", [{"max_messages": 200}, {"max_bytes": 16_384}])
async def test_restart_mid_consume_loses_nothing(
    private: tuple[NatsServer, JetStream], wait_for: WaitFor, limit: dict[str, int]
) -> None:
    server, js = private
    total = 3000
    consumer = await _file_stream_consumer(js)
    await publish_many(js, "s.a", total)
    events: list[ConsumeEvent] = []
    seen: set[int] = set()
    deliveries = 0

    async def run(messages: AsyncIterator[Msg]) -> None:
        nonlocal deliveries
        async for msg in messages:
            deliveries += 1
            seen.add(msg.metadata.sequence.stream)
            with contextlib.suppress(Exception):  # an ack may fail while disconnected
                await msg.ack()

    async with consumer.consume(expires=2, on_event=events.append, **limit) as messages:  # type: ignore[arg-type]
        task = asyncio.ensure_future(run(messages))

        async def some_seen() -> bool:
            return len(seen) >= 500

        await wait_for(some_seen, timeout=20, what="500 messages before the restart")
        await asyncio.to_thread(server.restart)

        async def all_done() -> bool:
            if len(seen) < total:
                return False
            try:
                info = await consumer.info()
            except Exception:
                return False
            return info.num_pending == 0 and info.num_ack_pending == 0

        await wait_for(all_done, timeout=40, what="every message consumed and acked")

        # The consumer may have taken every message before the server went
        # down; its recovery (consumer lookup, retried while JetStream starts)
        # can then still be under way when the check above passes.
        async def recovered() -> bool:
            return Reconnected in [type(e) for e in events]

        await wait_for(recovered, timeout=20, what="the consume to recover after the restart")
        assert not task.done(), task
        stats = messages.statistics()
        messages.stop()
        await asyncio.wait_for(task, 5)
    assert seen == set(range(1, total + 1))
    assert deliveries >= total  # redeliveries allowed, nothing missing
    kinds = [type(e) for e in events]
    assert Disconnected in kinds
    assert Reconnected in kinds
    assert kinds.index(Disconnected) < kinds.index(Reconnected)
    assert stats.reconnects >= 1


async def test_memory_consumer_gone_after_restart_raises_consumer_deleted(
    private: tuple[NatsServer, JetStream],
) -> None:
    # A memory stream (and its consumer) does not survive a restart; after the
    # reconnect the stream checks the consumer and ends with ConsumerDeletedError.
    server, js = private
    await js.create_stream("M", subjects=["m.>"], storage="memory")
    consumer = await js.create_consumer("M", durable_name="c")
    events: list[ConsumeEvent] = []
    async with consumer.consume(expires=2, on_event=events.append) as messages:
        task = asyncio.ensure_future(messages.__anext__())
        await until_pull_waiting(consumer)  # the first pull is open on the server
        assert not task.done()
        await asyncio.to_thread(server.restart)
        # the recovery retries with a backoff capped at 2 s: 8 s is plenty
        with pytest.raises(ConsumerDeletedError):
            await asyncio.wait_for(task, 8)
    assert Disconnected in [type(e) for e in events]


async def test_consumer_deleted_right_after_reconnect_raises_consumer_deleted(
    private: tuple[NatsServer, JetStream], wait_for: WaitFor
) -> None:
    # Delete once the stream has re-pulled after the restart: the waiting pull is
    # answered with 409 Consumer Deleted. (Deleting between the recovery's info
    # check and its pull gets 503 answers instead: that path is covered by
    # test_consume_on_deleted_consumer_ends in test_consume_adversarial.py.)
    server, js = private
    consumer = await _file_stream_consumer(js)
    events: asyncio.Queue[ConsumeEvent] = asyncio.Queue()
    async with consumer.consume(expires=2, on_event=events.put_nowait) as messages:
        task = asyncio.ensure_future(messages.__anext__())
        await until_pull_waiting(consumer)  # the first pull is open on the server
        assert not task.done()
        await asyncio.to_thread(server.restart)
        await next_event(events, Reconnected, timeout=15)

        async def pull_waiting() -> bool:
            return (await consumer.info()).num_waiting >= 1

        # the server holds the new pull (or a re-pull after a missed heartbeat)
        await wait_for(pull_waiting, timeout=10, what="the pull after the reconnect")
        await js.delete_consumer("S", "c")
        with pytest.raises(ConsumerDeletedError):
            await asyncio.wait_for(task, 10)


async def test_paused_server_reports_heartbeat_missed_then_recovers(
    private: tuple[NatsServer, JetStream],
) -> None:
    server, js = private
    consumer = await _file_stream_consumer(js)
    events: asyncio.Queue[ConsumeEvent] = asyncio.Queue()
    async with consumer.consume(
        max_messages=10, expires=2, idle_heartbeat=0.5, on_event=events.put_nowait
    ) as messages:
        await js.publish("s.a", b"before")
        first = await asyncio.wait_for(messages.__anext__(), 10)
        assert first.data == b"before"
        await first.ack()
        server.pause()
        try:
            # two 0.5 s heartbeats missed: reported within ~1 s
            await next_event(events, HeartbeatMissed, timeout=5)
        finally:
            server.resume()
        assert messages.statistics().heartbeats_missed >= 1
        await js.publish("s.a", b"after")
        msg = await asyncio.wait_for(messages.__anext__(), 15)
        assert msg.data == b"after"
        await msg.ack()


async def test_fetch_with_heartbeat_on_paused_server_raises_no_heartbeat(
    private: tuple[NatsServer, JetStream],
) -> None:
    server, js = private
    consumer = await _file_stream_consumer(js)
    loop = asyncio.get_running_loop()
    async with consumer.fetch(5, expires=10, idle_heartbeat=0.5) as batch:
        await until_pull_waiting(consumer)  # the pull reached the server
        server.pause()
        start = loop.time()
        try:
            with pytest.raises(NoHeartbeatError):
                async for _ in batch:
                    pass
        finally:
            server.resume()
        assert loop.time() - start < 5  # the heartbeat check, not the 10 s expiry


async def test_close_while_disconnected_ends_iteration(
    private: tuple[NatsServer, JetStream],
) -> None:
    server, js = private
    consumer = await _file_stream_consumer(js)
    events: asyncio.Queue[ConsumeEvent] = asyncio.Queue()
    async with consumer.consume(expires=2, on_event=events.put_nowait) as messages:
        task = asyncio.ensure_future(messages.__anext__())
        await asyncio.to_thread(server.stop)
        await next_event(events, Disconnected, timeout=10)
        await js.close()
        with pytest.raises(JetStreamClosedError):
            await asyncio.wait_for(task, 5)


async def test_ack_sync_on_paused_server_times_out_and_can_be_retried(
    private: tuple[NatsServer, JetStream],
) -> None:
    server, js = private
    consumer = await _file_stream_consumer(js, ack_wait=30)
    await js.publish("s.a", b"one")
    msg = await consumer.next(expires=5)
    server.pause()
    try:
        with pytest.raises(APITimeoutError) as info:
            await msg.ack_sync(timeout=0.5)
        assert isinstance(info.value, TimeoutError)
        assert not msg.acked  # unconfirmed: the caller may try again
    finally:
        server.resume()
    await msg.ack_sync(timeout=5)
    assert msg.acked
    assert (await consumer.info()).num_ack_pending == 0


async def test_fetch_on_paused_server_ends_by_the_client_deadline(
    private: tuple[NatsServer, JetStream],
) -> None:
    # No heartbeats requested: only the client-side deadline (a little above
    # expires) can end the fetch while the server says nothing.
    server, js = private
    consumer = await _file_stream_consumer(js)
    loop = asyncio.get_running_loop()
    async with consumer.fetch(5, expires=1) as batch:
        # the pull reached the server (seen well within its 1 s expiry)
        await until_pull_waiting(consumer, timeout=0.8)
        server.pause()
        start = loop.time()
        try:
            got = [m async for m in batch]
        finally:
            server.resume()
    assert got == []
    assert loop.time() - start < 4


async def test_restart_ends_a_pending_fetch_promptly(
    private: tuple[NatsServer, JetStream],
) -> None:
    server, js = private
    consumer = await _file_stream_consumer(js)
    loop = asyncio.get_running_loop()
    async with consumer.fetch(5, expires=30) as batch:
        task = asyncio.ensure_future(batch.__anext__())
        await until_pull_waiting(consumer)  # the pull reached the server
        assert not task.done()
        await asyncio.to_thread(server.restart)
        start = loop.time()
        # the pull died with the old connection: the fetch ends instead of
        # waiting out its 30 s expiry
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(task, 10)
    assert loop.time() - start < 10


async def test_consume_on_a_caller_owned_connection_keeps_its_callbacks(
    nats_server_private: Server,
) -> None:
    # JetStream(nc) chains its disconnect/reconnect handling in front of the
    # caller's callbacks: both the stream's events and the caller's callbacks fire.
    if isinstance(nats_server_private, ExternalServer):
        pytest.skip("restarts the server; cannot restart an external one")
    server = nats_server_private
    calls: list[str] = []

    async def on_disconnected() -> None:
        calls.append("disconnected")

    async def on_reconnected() -> None:
        calls.append("reconnected")

    nc = await nats.connect(
        server.url,
        reconnect_time_wait=0.1,
        max_reconnect_attempts=-1,
        disconnected_cb=on_disconnected,
        reconnected_cb=on_reconnected,
    )
    try:
        js = JetStream(nc, timeout=1.5)
        consumer = await _file_stream_consumer(js)
        events: asyncio.Queue[ConsumeEvent] = asyncio.Queue()
        async with consumer.consume(expires=2, on_event=events.put_nowait) as messages:
            await asyncio.to_thread(server.restart)
            await next_event(events, Reconnected, timeout=15)
            await js.publish("s.a", b"after")
            msg = await asyncio.wait_for(messages.__anext__(), 10)
            assert msg.data == b"after"
            await msg.ack()
        assert "disconnected" in calls
        assert "reconnected" in calls
        await js.close()
        assert not nc.is_closed  # the caller owns it
    finally:
        server.start()
        await nc.close()
