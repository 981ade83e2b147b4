"""Reader and Producer against nsqd behind a FaultProxy that freezes, resets and
refuses mid-operation: every call ends within its bound with a typed error, a
frozen nsqd is detected by its missing heartbeats, and no message is lost or
finished twice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aioclients import ConnectError, OperationTimeoutError
from aioclients.nsq import NSQConnectError, Producer, Reader
from aioclients.testing import FaultProxy
from aioclients.testing.nsqd import NsqdEmulator

pytestmark = pytest.mark.fault

TOPIC = "faults"


@pytest.fixture
async def nsqd() -> AsyncIterator[NsqdEmulator]:
    # short heartbeats and timeouts, so that failures show within a second
    async with NsqdEmulator(min_heartbeat_interval=0.05, min_msg_timeout=0.2) as emulator:
        yield emulator


@pytest.fixture
async def proxy(nsqd: NsqdEmulator) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(nsqd.tcp_address, connect_timeout=1.0) as fault_proxy:
        yield fault_proxy


async def within(seconds: float, awaitable: object) -> float:
    """Await, failing the test past ``seconds``; return the time it took."""
    start = time.monotonic()
    await asyncio.wait_for(awaitable, seconds)  # type: ignore[arg-type]
    return time.monotonic() - start


def topic_stats(nsqd: NsqdEmulator) -> dict[str, Any]:
    [topic] = nsqd.stats(TOPIC)["topics"]
    return topic  # type: ignore[no-any-return]


async def published(nsqd: NsqdEmulator) -> list[bytes]:
    """Every body the topic received, read straight from nsqd (no proxy)."""
    count = topic_stats(nsqd)["message_count"]
    bodies = []
    async with Reader(
        TOPIC, "check", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=100
    ) as reader:
        while len(bodies) < count:
            msg = await asyncio.wait_for(reader.__anext__(), 5)
            bodies.append(msg.body)
            await msg.finish()
    return bodies


# ---- Producer -------------------------------------------------------------------------


async def test_producer_on_a_frozen_nsqd_times_out_then_recovers(
    nsqd: NsqdEmulator, proxy: FaultProxy
) -> None:
    async with Producer(proxy.address, timeout=0.5, connect_timeout=0.5) as producer:
        await producer.publish(TOPIC, b"before")
        proxy.freeze()
        start = time.monotonic()
        with pytest.raises(OperationTimeoutError):
            await asyncio.wait_for(producer.publish(TOPIC, b"frozen"), 3)
        with pytest.raises(ConnectError):  # reconnecting meets the frozen handshake
            await asyncio.wait_for(producer.publish(TOPIC, b"frozen-again"), 3)
        assert time.monotonic() - start < 2.5  # 0.5 s + 0.5 s, with scheduling slack
        proxy.thaw()
        await within(5, producer.publish(TOPIC, b"after"))
    bodies = await published(nsqd)
    assert bodies.count(b"before") == bodies.count(b"after") == 1
    assert bodies.count(b"frozen") <= 1  # timed out: it may or may not have been published
    assert b"frozen-again" not in bodies  # never got past the handshake


async def test_producer_reset_mid_publish_is_a_connect_error_then_recovers(
    nsqd: NsqdEmulator, proxy: FaultProxy
) -> None:
    async with Producer(proxy.address, timeout=5, connect_timeout=1) as producer:
        await producer.publish(TOPIC, b"one")
        proxy.freeze()  # so that the reset lands while the publish waits
        pending = asyncio.ensure_future(producer.publish(TOPIC, b"two"))
        await asyncio.sleep(0.05)  # let it be written into the frozen proxy
        assert not pending.done()
        assert proxy.reset() == 1
        proxy.thaw()
        with pytest.raises(NSQConnectError, match="may or may not have been published"):
            await asyncio.wait_for(pending, 2)
        await within(5, producer.publish(TOPIC, b"three"))
    bodies = await published(nsqd)
    assert bodies.count(b"one") == bodies.count(b"three") == 1


async def test_producer_refused_is_a_connect_error_then_recovers(proxy: FaultProxy) -> None:
    async with Producer(proxy.address, timeout=2, connect_timeout=1) as producer:
        await producer.publish(TOPIC, b"one")
        proxy.refuse()
        proxy.reset()
        # the reset is seen either on this publish (lost) or before it (refused)
        with pytest.raises(NSQConnectError):
            await asyncio.wait_for(producer.publish(TOPIC, b"two"), 3)
        with pytest.raises(NSQConnectError, match="could not connect"):
            await asyncio.wait_for(producer.publish(TOPIC, b"two-again"), 3)
        proxy.refuse(False)
        await within(5, producer.publish(TOPIC, b"three"))
