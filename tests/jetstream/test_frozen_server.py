"""A server that stops reading (SIGSTOP): every call ends within its timeout with a
typed error, a cancel cancels, close() is bounded, and the stale connection is
detected and replaced. Each test owns its server.

The connection is first "jammed": big publishes fill the socket and the client's
pending buffer, so that every later write has to wait for a server that never
reads. nats-py waited for that without a bound (and swallowed cancellation).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from consume_support import next_event

from aioclients import AioClientsError
from aioclients.jetstream import (
    APITimeoutError,
    ConsumeEvent,
    Disconnected,
    JetStream,
    Msg,
    Reconnected,
    connect,
)
from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer

pytestmark = [pytest.mark.timeout(60), pytest.mark.fault]

TIMEOUT = 1.0
#: scheduling slack on a busy 2-core machine
MARGIN = 1.5
BIG = b"x" * (512 * 1024)


@pytest.fixture
async def frozen(
    nats_server_private: NatsServer | ExternalServer,
) -> AsyncIterator[tuple[NatsServer, JetStream]]:
    server = nats_server_private
    if isinstance(server, ExternalServer):
        pytest.skip("pauses the server; cannot do that to an external one")
    js = await connect(server.url, timeout=TIMEOUT, reconnect_time_wait=0.1)
    try:
        await js.create_stream("S", subjects=["s.>"], allow_direct=True, max_bytes=1 << 30)
        yield server, js
    finally:
        server.resume()
        await asyncio.wait_for(js.close(), 2 * TIMEOUT + MARGIN)


async def bounded(call: Awaitable[object], limit: float = TIMEOUT + MARGIN) -> object:
    """The call's result or exception, failing the test if it takes longer than ``limit``."""
    start = time.monotonic()
    task = asyncio.ensure_future(call)
    done, _ = await asyncio.wait({task}, timeout=limit + 5)
    if not done:
        task.cancel()
        raise AssertionError(f"the call did not end within {limit + 5}s")
    exc = task.exception()
    result: object = task.result() if exc is None else exc
    elapsed = time.monotonic() - start
    assert elapsed < limit, f"the call took {elapsed:.2f}s (bound {limit}s): {result!r}"
    return result


async def jam(js: JetStream) -> list[asyncio.Future[object]]:
    """Publish big payloads until a publish cannot be written: the server does not read."""
    acks: list[asyncio.Future[object]] = []
    for _ in range(200):  # 100 MB: far more than any socket buffers
        outcome = await bounded(js.publish_async("s.big", BIG, timeout=TIMEOUT))
        if isinstance(outcome, asyncio.Future):
            acks.append(outcome)
            continue
        assert isinstance(outcome, APITimeoutError), repr(outcome)
        assert isinstance(outcome, TimeoutError)
        assert "not reading" in str(outcome)
        # the public class itself: a traceback names aioclients.jetstream, pickle works
        assert type(outcome) is APITimeoutError, type(outcome)
        return acks
    raise AssertionError("200 big publishes to a frozen server were all accepted")


async def settle(acks: list[asyncio.Future[object]]) -> None:
    """Every ack of the jam fails typed by its deadline."""
    results = await asyncio.wait_for(
        asyncio.gather(*acks, return_exceptions=True), TIMEOUT + MARGIN
    )
    for result in results:
        assert isinstance(result, AioClientsError), repr(result)


async def test_publish_async_of_big_payloads_ends_in_time_with_a_typed_error(
    frozen: tuple[NatsServer, JetStream],
) -> None:
    server, js = frozen
    server.pause()
    acks = await jam(js)  # every call bounded; the last raised APITimeoutError
    assert len(acks) >= 1
    # the connection stays jammed: the next one fails the same way, in time
    again = await bounded(js.publish_async("s.big", BIG, timeout=TIMEOUT))
    assert isinstance(again, APITimeoutError), repr(again)
    await settle(acks)


async def test_calls_on_a_jammed_connection_end_in_time_with_typed_errors(
    frozen: tuple[NatsServer, JetStream],
) -> None:
    server, js = frozen
    stream = await js.stream("S")
    await js.publish("s.a", b"one")
    consumer = await js.create_consumer("S", durable_name="c", ack_wait=30)
    msg = await consumer.next(expires=5)
    server.pause()
    acks = await jam(js)
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "publish": lambda: js.publish("s.a", b"two", timeout=TIMEOUT),
        "api request": js.account_info,
        "ack_sync": lambda: msg.ack_sync(timeout=TIMEOUT),
        "direct_get": lambda: stream.direct_get(1),
        "direct_get_batch": lambda: stream.direct_get_batch(batch=2).__anext__(),
        "next": lambda: consumer.next(expires=TIMEOUT),
    }
    for what, call in calls.items():
        # A pull's own client deadline is a little above its expiry.
        limit = TIMEOUT + MARGIN + (2 if what == "next" else 0)
        outcome = await bounded(call(), limit)
        assert isinstance(outcome, AioClientsError), f"{what}: {outcome!r}"
        assert isinstance(outcome, TimeoutError), f"{what}: {outcome!r}"
    assert not msg.acked
    await settle(acks)


async def test_consume_on_a_jammed_connection_keeps_its_bounds(
    frozen: tuple[NatsServer, JetStream],
) -> None:
    server, js = frozen
    consumer = await js.create_consumer("S", durable_name="c")
    server.pause()
    acks = await jam(js)
    # Starting a consume subscribes, which on a jammed connection waited forever.
    async with consumer.consume(expires=1, idle_heartbeat=0.5) as messages:
        task = asyncio.ensure_future(messages.__anext__())
        done, _ = await asyncio.wait({task}, timeout=TIMEOUT + MARGIN)
        assert not done  # nothing to deliver: it waits, and...
        task.cancel()  # ...a cancel ends it
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, MARGIN)
    await settle(acks)


async def test_cancelling_a_blocked_publish_async_cancels_and_queues_nothing(
    frozen: tuple[NatsServer, JetStream],
) -> None:
    server, js = frozen
    server.pause()
    acks = await jam(js)
    await settle(acks)
    pending_before = js.nc.pending_data_size
    task = asyncio.ensure_future(js.publish_async("s.big", BIG, timeout=60))
    done, _ = await asyncio.wait({task}, timeout=0.5)
    assert not done  # blocked: the server does not read
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, MARGIN)
    assert js.nc.pending_data_size == pending_before  # the cancelled frame was not queued
    assert js.publish_async_pending == 0
    server.resume()
    # nothing left behind blocks the connection
    ack = await js.publish("s.a", b"after", timeout=10)
    assert ack.stream == "S"


async def test_cancelling_a_blocked_api_request_cancels(
    frozen: tuple[NatsServer, JetStream],
) -> None:
    server, js = frozen
    server.pause()
    await settle(await jam(js))
    task = asyncio.ensure_future(js._api("INFO", timeout=60))
    done, _ = await asyncio.wait({task}, timeout=0.5)
    assert not done
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, MARGIN)


async def test_close_on_a_jammed_connection_is_bounded(
    frozen: tuple[NatsServer, JetStream],
) -> None:
    server, js = frozen
    server.pause()
    acks = await jam(js)
    # bounded by the context's timeout twice: to flush, then to close the socket
    outcome = await bounded(js.close(), 2 * TIMEOUT + MARGIN)
    assert outcome is None
    assert js.closed
    await settle(acks)


async def test_a_frozen_server_is_detected_as_stale_and_replaced_after_it_thaws(
    nats_server_private: NatsServer | ExternalServer,
) -> None:
    server = nats_server_private
    if isinstance(server, ExternalServer):
        pytest.skip("pauses the server; cannot do that to an external one")
    js = await connect(
        server.url,
        timeout=TIMEOUT,
        reconnect_time_wait=0.1,
        max_reconnect_attempts=-1,
        ping_interval=0.5,
        max_outstanding_pings=1,
    )
    try:
        await js.create_stream("S", subjects=["s.>"], max_bytes=1 << 30)
        consumer = await js.create_consumer("S", durable_name="c")
        events: asyncio.Queue[ConsumeEvent] = asyncio.Queue()
        async with consumer.consume(expires=2, on_event=events.put_nowait) as messages:
            server.pause()
            try:
                acks = await jam(js)
                # unanswered PINGs: the connection is given up on, though its socket
                # still holds unsent bytes (closing it gracefully would wait forever)
                await next_event(events, Disconnected, timeout=10)
            finally:
                server.resume()
            await next_event(events, Reconnected, timeout=15)
            await settle(acks)
            await js.publish("s.a", b"after", timeout=10)
            got: Msg = await asyncio.wait_for(messages.__anext__(), 10)
            while got.data != b"after":  # jammed publishes may have been stored after all
                await got.ack()
                got = await asyncio.wait_for(messages.__anext__(), 10)
            await got.ack()
    finally:
        server.resume()
        await asyncio.wait_for(js.close(), 2 * TIMEOUT + MARGIN)


async def test_subscribing_on_a_jammed_connection_never_blocks_on_the_flush_queue(
    frozen: tuple[NatsServer, JetStream],
) -> None:
    # Every nats-py subscribe queues a flush request; with the flusher stuck on a server
    # that does not read, its queue (1024) fills and nats-py would wait for room forever.
    server, js = frozen
    server.pause()
    await settle(await jam(js))
    start = time.monotonic()
    for i in range(1100):
        outcome = await bounded(js.nc.subscribe(f"jammed.{i}"), MARGIN)
        assert not isinstance(outcome, BaseException), repr(outcome)
    assert time.monotonic() - start < 10
