"""Killing one of two nsqd under a lookupd-discovered Reader: nothing is lost.

With ``AIOCLIENTS_TEST_NSQ_BIN_DIR`` naming real nsqd / nsqlookupd binaries (run by
hand, e.g. ``AIOCLIENTS_TEST_NSQ_BIN_DIR=/opt/nsq/bin``) the test starts its own
nsqlookupd and two nsqd on free loopback ports with temporary data directories and
SIGKILLs one. Without it, it runs on the emulators, where ``NsqdEmulator.stop()``
stands in for the kill (it keeps the messages, as a restart on the same data does).

nsqd keeps messages on disk only with ``--mem-queue-size=0``, and its disk queue
writes its read and write positions only at a sync (every ``--sync-every`` reads or
writes, every ``--sync-timeout``, at a clean exit). After a SIGKILL it resumes from
the last sync: messages written since are lost (measured: with no sync at all the
data directory comes back empty), messages read since come back, and messages in
flight that were read before it are lost. So the real nsqd here syncs only at a
clean exit, done once after the publishing: after the SIGKILL it redelivers
everything read since, finished or not, which is nsqd's at-least-once contract (a
finished message may come back; none is lost).
"""

from __future__ import annotations

import asyncio
import collections
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from aioclients.nsq import Message, Producer, Reader
from aioclients.testing import NsqdEmulator, NsqlookupdEmulator
from tests.nsq.nsq_processes import (
    BIN_DIR_ENV,
    ServerProcess,
    nsq_bin_dir,
    nsqd_process,
    nsqlookupd_process,
)

WaitFor = Callable[..., Awaitable[None]]


@dataclass
class Pair:
    """nsqlookupd + two nsqd; the second can be killed and started again."""

    real: bool
    lookupd_http: str
    nsqd_tcp: list[str]
    kill_second: Callable[[], Awaitable[None]]
    restart_second: Callable[[], Awaitable[None]]
    clean_restart_second: Callable[[], Awaitable[None]]


# The real nsqd: messages on disk only, the read position written at a clean exit only.
_NSQD_DISK_ONLY = ("--mem-queue-size=0", "--sync-every=1000000000", "--sync-timeout=24h")


async def _nothing() -> None:
    pass


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    bin_dir = nsq_bin_dir()
    if bin_dir is None:
        async with (
            NsqlookupdEmulator() as lookupd,
            NsqdEmulator() as first,
            NsqdEmulator() as second,
        ):
            first.add_lookupd(lookupd.tcp_address)
            second.add_lookupd(lookupd.tcp_address)
            yield Pair(
                False,
                lookupd.http_address,
                [first.tcp_address, second.tcp_address],
                second.stop,
                second.start,
                _nothing,
            )
        return
    for name in ("nsqd", "nsqlookupd"):
        if not (bin_dir / name).is_file():
            pytest.skip(f"{BIN_DIR_ENV}={bin_dir} has no {name} binary")
    with tempfile.TemporaryDirectory(prefix="aioclients-nsq-") as tmp:
        work = Path(tmp)
        lookupd, lookupd_tcp, lookupd_http = nsqlookupd_process(bin_dir, work)
        first, tcp1, _ = nsqd_process(bin_dir, work, "nsqd1", lookupd_tcp, *_NSQD_DISK_ONLY)
        second, tcp2, _ = nsqd_process(bin_dir, work, "nsqd2", lookupd_tcp, *_NSQD_DISK_ONLY)
        servers: list[ServerProcess] = [lookupd, first, second]
        try:
            for server in servers:
                await server.start()

            async def clean_restart() -> None:
                await second.stop()
                await second.start()

            yield Pair(True, lookupd_http, [tcp1, tcp2], second.kill, second.start, clean_restart)
        finally:
            for server in reversed(servers):
                await server.kill()


@pytest.mark.fault
async def test_kill_one_of_two_nsqd_during_a_discovered_readers_consume(
    pair: Pair, wait_for: WaitFor
) -> None:
    topic, per_server = "killed", 300
    bodies = [[b"%d-%04d" % (s, i) for i in range(per_server)] for s in (0, 1)]
    for address, batch in zip(pair.nsqd_tcp, bodies, strict=True):
        async with Producer(address) as producer:
            await producer.mpublish(topic, batch)
    # Real nsqd: a clean restart writes the disk queue's positions (see the module
    # docstring), so its data directory holds everything it was given from here on.
    await pair.clean_restart_second()

    finished: collections.Counter[bytes] = collections.Counter()
    held: list[Message] = []
    killed = asyncio.Event()
    from_second = 0
    async with Reader(
        topic,
        "ch",
        lookupd_http_addresses=[pair.lookupd_http],
        max_in_flight=10,
        lookupd_poll_interval=0.3,
        lookupd_poll_jitter=0.0,
    ) as reader:

        async def consume() -> None:
            nonlocal from_second
            async for msg in reader:
                if msg.body.startswith(b"1-") and not killed.is_set():
                    from_second += 1
                    if from_second > 50:  # hold a few: in flight when the nsqd dies
                        held.append(msg)
                        if len(held) == 3:
                            killed.set()
                        continue
                await msg.finish()
                finished[msg.body] += 1

        consumer = asyncio.create_task(consume())
        try:
            await asyncio.wait_for(killed.wait(), 20)
            await pair.kill_second()

            async def first_drained() -> bool:
                return all(finished[b] for b in bodies[0])

            await wait_for(first_drained, timeout=20, what="the surviving nsqd's messages")

            async def one_connection() -> bool:
                return len(reader.statistics().connections) == 1

            await wait_for(one_connection, timeout=10, what="the killed nsqd dropped")
            await pair.restart_second()

            async def second_drained() -> bool:
                return all(finished[b] for b in bodies[1])

            await wait_for(second_drained, timeout=30, what="the killed nsqd's messages")
        finally:
            consumer.cancel()
            with pytest.raises(asyncio.CancelledError):
                await consumer

    assert all(finished[b] == 1 for b in bodies[0]), "the surviving nsqd's: exactly once"
    assert all(finished[b] >= 1 for b in bodies[1]), "the killed nsqd's: none lost"
    assert all(finished[m.body] >= 1 for m in held), "held at the kill: redelivered"
    if not pair.real:
        # The emulator keeps what was finished: only messages in flight at the stop (held,
        # or with a FIN not yet read by the server) may come back, so at most RDY of them.
        assert sum(finished[b] - 1 for b in bodies[1]) <= 10
