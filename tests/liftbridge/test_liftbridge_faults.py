"""The Liftbridge client through a FaultProxy: frozen, reset and refused connections.

A one-broker emulated cluster sits behind ``FaultProxy`` and advertises the
proxy's address in its metadata, so every call of the client (ordinary RPCs,
Subscribe, PublishAsync) goes through the proxy. Each fault must end every call
within its bound with a typed error (or let it succeed); a subscription must
come back after the fault and deliver every offset once, in order; no publish
that was acked may be missing from the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from aioclients.liftbridge import (
    Client,
    LiftbridgeConnectError,
    LiftbridgeError,
    LiftbridgeTimeoutError,
    StartPosition,
    connect,
)
from aioclients.testing import FaultProxy, LiftbridgeCluster, NatsServer

pytestmark = pytest.mark.fault

RPC_TIMEOUT = 1.5
ACK_WAIT = 1.5
SLACK = 1.5  # scheduling on a busy 2-core machine


@dataclass
class Setup:
    cluster: LiftbridgeCluster
    proxy: FaultProxy
    client: Client


@pytest.fixture
async def proxied(nats_server: NatsServer) -> AsyncIterator[Setup]:
    async with LiftbridgeCluster(1, nats_url=nats_server.url) as cluster:
        async with FaultProxy(cluster.addresses[0]) as proxy:
            cluster.advertise(0, proxy.address)
            client = await connect(
                [proxy.address],
                rpc_timeout=RPC_TIMEOUT,
                ack_wait_time=ACK_WAIT,
                resubscribe_wait_time=20.0,
                max_rpc_attempts=3,
            )
            try:
                assert [b.address for b in (await client.fetch_metadata()).brokers()] == [
                    proxy.address
                ]
                yield Setup(cluster, proxy, client)
            finally:
                proxy.thaw()
                proxy.refuse(False)
                await asyncio.wait_for(client.close(), 15)


async def bounded(seconds: float, coro: object) -> float:
    """Await ``coro`` (it must raise a LiftbridgeError); returns how long it took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(LiftbridgeError):
        await asyncio.wait_for(coro, seconds + 10)  # type: ignore[arg-type]
    took = loop.time() - start
    assert took <= seconds, f"took {took:.2f}s, bound {seconds}s"
    return took


async def test_unary_calls_through_freeze_reset_and_refuse(proxied: Setup) -> None:
    client, proxy = proxied.client, proxied.proxy
    await client.create_stream("f.unary", "f-unary")
    assert (await client.publish("f-unary", b"before")).offset == 0  # type: ignore[union-attr]

    proxy.freeze()  # a broker that stopped answering
    with pytest.raises(LiftbridgeTimeoutError):
        await asyncio.wait_for(client.fetch_metadata(), RPC_TIMEOUT + SLACK)
    await bounded(
        ACK_WAIT + SLACK, client.publish("f-unary", b"frozen", partition=0, timeout=ACK_WAIT)
    )
    proxy.thaw()
    ack = await asyncio.wait_for(client.publish("f-unary", b"thawed"), RPC_TIMEOUT + SLACK)
    assert ack is not None

    proxy.reset()  # the connection under the channel dies; the next call reconnects
    ack = await asyncio.wait_for(client.publish("f-unary", b"after reset"), 3 * RPC_TIMEOUT)
    assert ack is not None

    proxy.refuse(True)
    proxy.reset()
    # Every attempt is refused: a typed connect error after max_rpc_attempts (the
    # client keeps trying for a while, as it would during a broker restart).
    loop = asyncio.get_running_loop()
    until = loop.time() + 2.5
    while loop.time() < until:
        with pytest.raises(LiftbridgeConnectError):
            await asyncio.wait_for(client.fetch_metadata(), 3 * (RPC_TIMEOUT + 0.5) + SLACK)
    # Back: the very next call gets through (no reconnect backoff left over from
    # the refused attempts).
    proxy.refuse(False)
    md = await asyncio.wait_for(client.fetch_metadata(), RPC_TIMEOUT + SLACK)
    assert md.get_stream("f-unary") is not None


async def publish_until_acked(client: Client, stream: str, value: bytes) -> None:
    for _ in range(10):
        try:
            await (await client.publish_async(stream, value))
            return
        except (LiftbridgeConnectError, LiftbridgeTimeoutError):
            await asyncio.sleep(0.1)
    raise AssertionError(f"{value!r} was never acked")


async def _read_offsets(
    client: Client, stream: str, upto: int, seen: list[int], stats: dict[str, int]
) -> None:
    async with client.subscribe(stream, start_at=StartPosition.EARLIEST) as sub:
        async for msg in sub:
            seen.append(msg.offset)
            if msg.offset >= upto:
                stats.update(sub.statistics())
                return


async def _wait(cond: object, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():  # type: ignore[operator]
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("fault", ["freeze-reset-thaw", "reset", "refuse-reset"])
async def test_subscribe_comes_back_after_a_fault_with_every_offset_once_in_order(
    proxied: Setup, fault: str
) -> None:
    client, proxy = proxied.client, proxied.proxy
    await client.create_stream("f.sub", "f-sub")
    # Before any fault: the acks get the whole 10 s, not the fault phase's ACK_WAIT
    # (a bound on how long a fault may hold a call, which a busy machine's first
    # publishes through the proxy can take without any fault).
    futures = [await client.publish_async("f-sub", b"%d" % i, timeout=10) for i in range(100)]
    await asyncio.wait_for(asyncio.gather(*futures), 10)
    seen: list[int] = []
    stats: dict[str, int] = {}
    reader = asyncio.create_task(_read_offsets(client, "f-sub", 199, seen, stats))
    try:
        await _wait(lambda: len(seen) >= 100, 10, "the first 100 messages")
        if fault == "freeze-reset-thaw":
            proxy.freeze()
            proxy.reset()  # the subscription's connection dies while the broker is frozen
            await asyncio.sleep(0.5)  # resubscribe attempts meet the frozen proxy
            proxy.thaw()
        elif fault == "reset":
            proxy.reset()
        else:
            proxy.refuse(True)
            proxy.reset()
            await asyncio.sleep(0.5)  # resubscribe attempts are refused
            proxy.refuse(False)
        # The fault may also have broken the PublishAsync stream: a message whose
        # future failed is sent again (the subscriber checks offsets, not values).
        for i in range(100, 200):
            await asyncio.wait_for(publish_until_acked(client, "f-sub", b"%d" % i), 20)
        await asyncio.wait_for(reader, 20)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    assert seen == list(range(200))
    assert stats["resubscribes"] >= 1  # the fault broke the stream; it came back


async def test_publish_async_through_faults_loses_no_acked_message(proxied: Setup) -> None:
    client, proxy = proxied.client, proxied.proxy
    await client.create_stream("f.pub", "f-pub")
    loop = asyncio.get_running_loop()
    acked: dict[bytes, int] = {}
    failed: list[BaseException] = []
    pending: list[tuple[bytes, float, asyncio.Future[object]]] = []

    async def settle() -> None:
        for value, sent, fut in pending:
            try:
                ack = await asyncio.wait_for(fut, ACK_WAIT + SLACK)
            except LiftbridgeError as exc:
                failed.append(exc)
            else:
                acked[value] = ack.offset  # type: ignore[attr-defined]
            # Each future is settled within its own deadline.
            assert loop.time() - sent <= ACK_WAIT + SLACK + 1.0
        pending.clear()

    faults = [proxy.reset, proxy.freeze, proxy.thaw, proxy.reset]
    for round_no in range(5):
        for i in range(40):
            value = b"%d-%d" % (round_no, i)
            try:
                fut = await asyncio.wait_for(client.publish_async("f-pub", value), ACK_WAIT + SLACK)
            except LiftbridgeError as exc:
                failed.append(exc)
                continue
            pending.append((value, loop.time(), fut))  # type: ignore[arg-type]
            if i == 20 and round_no < len(faults):
                faults[round_no]()
        await settle()
        proxy.thaw()
    assert acked, "nothing was acked at all"
    assert all(isinstance(e, LiftbridgeError) for e in failed)
    # Every acked message is in the stream, at the offset its ack named.
    stored: dict[int, bytes] = {}
    async with client.subscribe("f-pub", start_at=StartPosition.EARLIEST) as sub:
        last = max(acked.values())
        async for msg in sub:
            stored[msg.offset] = msg.value
            if msg.offset >= last:
                break
    for value, offset in acked.items():
        assert stored.get(offset) == value, f"acked {value!r} at {offset} is not stored"


async def test_publish_async_into_a_frozen_broker_ends_within_its_bound(proxied: Setup) -> None:
    # Large messages into a broker that stopped reading: the socket backs up and
    # publish_async waits for room; that wait, too, ends by the ack deadline.
    client, proxy = proxied.client, proxied.proxy
    await client.create_stream("f.frozen", "f-frozen")
    proxy.freeze()
    loop = asyncio.get_running_loop()
    futures = []
    outcomes: list[str] = []
    for _ in range(40):
        start = loop.time()
        try:
            futures.append(
                await asyncio.wait_for(client.publish_async("f-frozen", bytes(256 * 1024)), 30)
            )
            outcomes.append("written")
        except LiftbridgeError as exc:
            outcomes.append(type(exc).__name__)
        assert loop.time() - start <= ACK_WAIT + SLACK, outcomes
        if outcomes.count("LiftbridgeTimeoutError") == 2:
            break
    assert "LiftbridgeTimeoutError" in outcomes, outcomes  # the socket did back up
    for fut in futures:
        with contextlib.suppress(LiftbridgeError):
            await asyncio.wait_for(fut, ACK_WAIT + SLACK)
    proxy.thaw()
