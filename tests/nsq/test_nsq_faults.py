"""Reader and Producer against nsqd behind a FaultProxy that freezes, resets and
refuses mid-operation: every call ends within its bound with a typed error, a
frozen nsqd is detected by its missing heartbeats, and no message is lost or
finished twice.

These keep their own NsqdEmulator even when AIOCLIENTS_TEST_NSQD_* name a real nsqd:
they need heartbeats and msg timeouts below nsqd's 1 s minimums to stay fast
(``min_heartbeat_interval`` / ``min_msg_timeout``, emulator-only settings)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from aioclients import ConnectError, OperationTimeoutError
from aioclients.nsq import Message, NSQConnectError, Producer, Reader
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


# ---- Reader ---------------------------------------------------------------------------

BODIES = [b"m%02d" % i for i in range(20)]


def channel_stats(nsqd: NsqdEmulator, channel: str = "ch") -> dict[str, Any]:
    [stats] = [c for c in topic_stats(nsqd)["channels"] if c["channel_name"] == channel]
    return stats  # type: ignore[no-any-return]


async def until(predicate: Callable[[], bool], seconds: float, what: str) -> float:
    """Poll ``predicate`` every 10 ms; fail after ``seconds``; return the time it took."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > seconds:
            raise AssertionError(f"{what}: not within {seconds}s")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


def fault_reader(proxy: FaultProxy) -> Reader:
    return Reader(
        TOPIC,
        "ch",
        nsqd_tcp_addresses=[proxy.address],
        max_in_flight=4,
        heartbeat_interval=0.3,  # a silent nsqd is detected within 2 x 0.3 + 0.3 s
        msg_timeout=0.5,  # what the frozen link held comes back soon
        reconnect_delay=0.05,
        max_reconnect_delay=0.2,
        connect_timeout=0.5,
        max_backoff_duration=0,
    )


async def finish_some(reader: Reader, n: int, finished: list[bytes]) -> None:
    for _ in range(n):
        msg = await asyncio.wait_for(reader.__anext__(), 5)
        await msg.finish()
        finished.append(msg.body)


async def finish_the_rest(reader: Reader, finished: list[bytes]) -> list[Message]:
    """Finish every message until each body has been finished; return them."""
    seen = []
    while set(finished) != set(BODIES):
        msg = await asyncio.wait_for(reader.__anext__(), 10)
        seen.append(msg)
        await msg.finish()
        finished.append(msg.body)
    return seen


async def fins_reached_nsqd(nsqd: NsqdEmulator, n: int) -> None:
    def done() -> bool:
        clients = channel_stats(nsqd)["clients"]
        return sum(c["finish_count"] for c in clients) >= n

    await until(done, 5, "FINs at nsqd")


def assert_all_finished_once(nsqd: NsqdEmulator, finished: list[bytes], log: str) -> None:
    assert sorted(finished) == BODIES  # none lost, none finished twice
    stats = channel_stats(nsqd)
    assert (stats["depth"], stats["in_flight_count"], stats["deferred_count"]) == (0, 0, 0)
    assert "E_FIN_FAILED" not in log


async def test_reader_detects_a_frozen_nsqd_by_heartbeats_and_loses_nothing(
    nsqd: NsqdEmulator, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aioclients")
    nsqd.publish(TOPIC, *BODIES)
    finished: list[bytes] = []
    async with fault_reader(proxy) as reader:
        await finish_some(reader, 6, finished)
        await fins_reached_nsqd(nsqd, 6)
        held = await asyncio.wait_for(reader.__anext__(), 5)  # in the application's hands
        proxy.freeze()
        detected = await until(
            lambda: not reader.statistics().connections, 5, "the frozen link dropped"
        )
        assert detected < 3.0
        await held.finish()  # on the dead link: nothing sent (not counted); nsqd re-delivers it
        proxy.thaw()
        again = await finish_the_rest(reader, finished)
        assert len(reader.statistics().connections) == 1
    assert "heartbeats stopped" in caplog.text
    assert [m.attempts for m in again if m.body == held.body] == [2]
    assert_all_finished_once(nsqd, finished, caplog.text)


async def test_reader_survives_reset_and_refusal_and_loses_nothing(
    nsqd: NsqdEmulator, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aioclients")
    nsqd.publish(TOPIC, *BODIES)
    finished: list[bytes] = []
    async with fault_reader(proxy) as reader:
        await finish_some(reader, 5, finished)
        await fins_reached_nsqd(nsqd, 5)
        proxy.refuse()
        assert proxy.reset() == 1
        await until(lambda: "reconnect to nsqd" in caplog.text, 5, "a refused reconnect")
        assert not reader.statistics().connections
        proxy.refuse(False)
        await finish_the_rest(reader, finished)
    assert_all_finished_once(nsqd, finished, caplog.text)
