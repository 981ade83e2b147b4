"""JetStream through a FaultProxy that freezes, resets and refuses connections mid-operation:
every call ends within its bound with a typed error, and a consume loop recovers
without losing a message whose publish was acknowledged."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from consume_support import next_event
from support import Server, skip_if_the_proxy_can_be_bypassed

from aioclients import AioClientsError
from aioclients.jetstream import (
    ConsumeEvent,
    Disconnected,
    JetStream,
    Msg,
    Reconnected,
    connect,
)
from aioclients.testing import FaultProxy

pytestmark = [pytest.mark.timeout(90), pytest.mark.fault]

TIMEOUT = 1.0
MARGIN = 1.5
BIG = b"x" * (512 * 1024)


@pytest.fixture
async def proxied(
    nats_server: Server, unique_name: str
) -> AsyncIterator[tuple[FaultProxy, JetStream, JetStream, str]]:
    """A proxy in front of the shared server, a context through it, a direct context for
    setup and checks, and a stream (allow_direct) named after the test."""
    async with FaultProxy(nats_server.url) as proxy:
        direct = await connect(nats_server.url, timeout=5)
        js = await connect(
            f"nats://{proxy.address}",
            timeout=TIMEOUT,
            reconnect_time_wait=0.1,
            max_reconnect_attempts=-1,
            ping_interval=0.5,
            max_outstanding_pings=2,
        )
        try:
            await direct.create_stream(
                unique_name, subjects=[f"{unique_name}.>"], allow_direct=True, max_bytes=1 << 30
            )
            skip_if_the_proxy_can_be_bypassed(js.nc)
            yield proxy, js, direct, unique_name
        finally:
            proxy.thaw()
            proxy.refuse(False)
            await asyncio.wait_for(js.close(), 2 * TIMEOUT + MARGIN)
            try:
                await direct.delete_stream(unique_name)
            finally:
                await direct.close()


async def _outcome(call: Awaitable[object], limit: float) -> object:
    """The call's result or exception; fails the test if it takes longer than ``limit``."""
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


def _calls(js: JetStream, name: str) -> dict[str, Callable[[], Awaitable[object]]]:
    async def stream_direct_get() -> object:
        return await (await js.stream(name)).direct_get(1)

    async def batch() -> object:
        stream = await js.stream(name)
        return [m async for m in stream.direct_get_batch(batch=2)]

    async def next_msg() -> object:
        consumer = await js.create_or_update_consumer(name, durable_name="c")
        return await consumer.next(expires=TIMEOUT)

    return {
        "publish_async big": lambda: js.publish_async(f"{name}.big", BIG, timeout=TIMEOUT),
        "publish": lambda: js.publish(f"{name}.a", b"x", timeout=TIMEOUT),
        "api request": js.account_info,
        "direct_get": stream_direct_get,
        "direct_get_batch": batch,
        "next": next_msg,
    }


#: calls made of two steps (a lookup, then the call) get two timeouts; a pull's client
#: deadline is a little above its expiry
_LIMITS = {"direct_get": 2, "direct_get_batch": 2, "next": 4}


async def _every_call_fails_typed_in_time(js: JetStream, name: str) -> None:
    for what, call in _calls(js, name).items():
        limit = _LIMITS.get(what, 1) * TIMEOUT + MARGIN
        # publish_async may be accepted before the socket fills: repeat until it is not
        for _ in range(100 if what == "publish_async big" else 1):
            outcome = await _outcome(call(), limit)
            if not isinstance(outcome, asyncio.Future):
                break
            outcome.add_done_callback(lambda f: f.exception())  # failure expected; seen
        assert isinstance(outcome, AioClientsError), f"{what}: {outcome!r}"


async def _jam(js: JetStream, name: str) -> list[asyncio.Future[object]]:
    """Big publishes until one cannot be written (the proxy is frozen): a full socket."""
    acks: list[asyncio.Future[object]] = []
    for _ in range(100):
        outcome = await _outcome(
            js.publish_async(f"{name}.big", BIG, timeout=TIMEOUT), TIMEOUT + MARGIN
        )
        if not isinstance(outcome, asyncio.Future):
            assert isinstance(outcome, AioClientsError), repr(outcome)
            return acks
        acks.append(outcome)
    raise AssertionError("100 big publishes through a frozen proxy were all accepted")


async def _recovered(js: JetStream, name: str) -> None:
    """Calls succeed again within a few seconds (after a reconnect, if one is due)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:
        try:
            await js.publish(f"{name}.a", b"back", timeout=2)
            return
        except AioClientsError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)  # poll interval of a bounded wait


async def test_freeze_mid_operation_every_call_ends_typed_then_thaw_recovers(
    proxied: tuple[FaultProxy, JetStream, JetStream, str],
) -> None:
    proxy, js, _, name = proxied
    await js.publish(f"{name}.a", b"one")
    proxy.freeze()
    await _every_call_fails_typed_in_time(js, name)
    proxy.thaw()
    await _recovered(js, name)


async def test_reset_mid_operation_every_call_ends_typed_then_recovers(
    proxied: tuple[FaultProxy, JetStream, JetStream, str],
) -> None:
    proxy, js, _, name = proxied
    await js.publish(f"{name}.a", b"one")
    # reset while a stream of big publishes is being written
    writer = asyncio.ensure_future(_every_call_fails_typed_in_time(js, name))
    proxy.freeze()  # hold the first publishes on the wire, so the reset cuts a write
    await asyncio.sleep(0)
    assert proxy.reset() >= 1
    proxy.refuse()  # and no reconnect until the calls have all failed
    try:
        await asyncio.wait_for(writer, 60)
    finally:
        proxy.refuse(False)
        proxy.thaw()
    await _recovered(js, name)


async def test_refused_reconnects_end_every_call_typed_then_recover(
    proxied: tuple[FaultProxy, JetStream, JetStream, str],
) -> None:
    proxy, js, _, name = proxied
    await js.publish(f"{name}.a", b"one")
    proxy.refuse()
    proxy.reset()
    await _every_call_fails_typed_in_time(js, name)
    proxy.refuse(False)
    await _recovered(js, name)


async def test_consume_recovers_after_a_freeze_and_loses_no_acked_publish(
    proxied: tuple[FaultProxy, JetStream, JetStream, str],
) -> None:
    proxy, js, direct, name = proxied
    total = 300
    consumer = await js.create_consumer(
        name, durable_name="c", ack_wait=3, filter_subject=f"{name}.m"
    )
    events: asyncio.Queue[ConsumeEvent] = asyncio.Queue()
    seen: set[bytes] = set()
    stored: set[bytes] = set()

    async def publish_all() -> None:
        # on the direct connection: only the consumer's connection freezes
        for i in range(total):
            data = b"m%d" % i
            await direct.publish(f"{name}.m", data, msg_id=data.decode())
            stored.add(data)
            if i == total // 3:
                proxy.freeze()  # mid-stream, with messages in flight to the consumer
            await asyncio.sleep(0.002)

    async with consumer.consume(
        max_messages=50, expires=2, idle_heartbeat=0.5, on_event=events.put_nowait
    ) as messages:
        publisher = asyncio.ensure_future(publish_all())
        try:
            await asyncio.wait_for(publisher, 30)
            # fill the frozen connection's socket, then wait for the pings to go
            # unanswered: the connection is given up on (a graceful close of a socket
            # with unsent bytes would wait for ever)
            acks = await _jam(js, name)
            await next_event(events, Disconnected, timeout=10)
            proxy.thaw()
            await next_event(events, Reconnected, timeout=20)
            await asyncio.wait_for(asyncio.gather(*acks, return_exceptions=True), 15)
            while len(seen) < total:
                msg: Msg = await asyncio.wait_for(messages.__anext__(), 15)
                seen.add(msg.data)
                await msg.ack()
        finally:
            proxy.thaw()
            if not publisher.done():
                publisher.cancel()
    assert seen == stored
    assert len(stored) == total
