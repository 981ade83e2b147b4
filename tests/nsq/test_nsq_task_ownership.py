"""The NSQ Reader and the emulators own their tasks: none outlives close(), closing
from another task ends the iteration, and a failing task surfaces."""

from __future__ import annotations

import asyncio
import socket

import pytest

from aioclients.nsq import Producer, Reader
from aioclients.testing import NsqdEmulator, NsqlookupdEmulator

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_no_reader_or_emulator_task_outlives_close() -> None:
    before = asyncio.all_tasks()
    async with NsqlookupdEmulator() as lookupd:
        nsqd = NsqdEmulator(lookupd_tcp_addresses=[lookupd.tcp_address], lookupd_ping_interval=0.05)
        async with nsqd:
            nsqd.create_topic("owned", "c")
            down = f"127.0.0.1:{_free_port()}"  # a reconnect loop for this one
            reader = Reader(
                "owned",
                "c",
                nsqd_tcp_addresses=[nsqd.tcp_address, down],
                lookupd_http_addresses=[lookupd.http_address],  # a poll loop
                lookupd_poll_interval=0.05,
                reconnect_delay=0.05,
                max_in_flight=5,
            )
            async with reader:
                async with Producer(nsqd.tcp_address) as producer:
                    await producer.publish("owned", b"one")
                msg = await asyncio.wait_for(reader.__anext__(), WAIT)
                await msg.finish()
                names = {t.get_name() for t in asyncio.all_tasks() - before}
                assert any(n.startswith("Reader(owned/c): reconnect") for n in names), names
                assert any(n.startswith("Reader(owned/c): poll") for n in names), names
            assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("Reader(")]
    assert asyncio.all_tasks() - before == set()


async def test_a_reader_closed_from_another_task_ends_the_iteration() -> None:
    async with NsqdEmulator() as nsqd:
        async with Reader("owned", "c", nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:
            got: list[object] = []

            async def consume() -> None:
                async for msg in reader:
                    got.append(msg)

            consumer = asyncio.get_running_loop().create_task(consume())
            await asyncio.sleep(0)
            await asyncio.get_running_loop().create_task(reader.close())
            await asyncio.wait_for(consumer, WAIT)  # ended, no error
            assert got == []


async def test_a_failing_reconnect_task_is_raised_from_async_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aioclients.nsq import _reader

    def broken(self: object) -> float:
        raise RuntimeError("a bug in the reconnect loop")

    async with NsqdEmulator() as nsqd:
        down = f"127.0.0.1:{_free_port()}"
        monkeypatch.setattr(_reader.Backoff, "next_delay", broken)
        async with Reader("owned", "c", nsqd_tcp_addresses=[nsqd.tcp_address, down]) as reader:
            with pytest.raises(RuntimeError, match="reconnect loop"):
                await asyncio.wait_for(reader.__anext__(), WAIT)
