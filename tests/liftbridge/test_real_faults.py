"""Kill the leader of a replicated partition (RF=3) under load: nothing acked is lost.

Each test runs twice: against a real 3-node Liftbridge cluster started from the
binary named by ``AIOCLIENTS_TEST_LIFTBRIDGE_BIN`` (killed with SIGKILL, run by
hand: CI has no binary and skips it), and against the emulator, whose
``stop_broker`` is the equivalent (so CI runs that one). The real cluster gets a
short ``replica.max.leader.timeout`` so that the followers report the dead leader
in 3 s rather than 15 s, and fetch at least every second (replica.max.idle.wait).

    AIOCLIENTS_TEST_LIFTBRIDGE_BIN=/path/to/liftbridge pytest tests/liftbridge/test_real_faults.py
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aioclients.liftbridge import (
    Ack,
    AckPolicy,
    Client,
    LiftbridgeError,
    StartPosition,
    StopPosition,
    connect,
)
from aioclients.testing import LiftbridgeCluster, NatsServer
from aioclients.testing.liftbridge_process import LiftbridgeProcessCluster

pytestmark = pytest.mark.fault

BIN_ENV = "AIOCLIENTS_TEST_LIFTBRIDGE_BIN"
# The first message of a new replicated partition waits for the followers'
# first fetch (replica.max.idle.wait); a failover needs the leader timeout
# plus a controller decision.
FIRST_WAIT = 25.0
FAILOVER_WAIT = 40.0

Cluster = LiftbridgeCluster | LiftbridgeProcessCluster


@pytest.fixture(params=[pytest.param("real", marks=pytest.mark.slow), "emulator"])
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    if request.param == "emulator":
        nats = request.getfixturevalue("nats_server")
        async with LiftbridgeCluster(3, nats_url=nats.url) as emulated:
            yield emulated
        return
    binary = os.environ.get(BIN_ENV)
    if not binary:
        pytest.skip(f"set {BIN_ENV} to a liftbridge v1.9 binary to kill real brokers")
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{BIN_ENV}={binary!r} is not an executable file")
    async with NatsServer(jetstream=False) as nats:
        async with LiftbridgeProcessCluster(
            binary,
            3,
            nats_url=nats.url,
            # Followers fetch at least every second (idle wait), drop out of the
            # ISR after 6 s without fetching, and report a silent leader after 3 s.
            # (The lag time must exceed the idle wait, or idle followers leave
            # the ISR and a dead leader has no successor: "No ISR candidates".)
            settings={
                "replica.max.idle.wait": "1s",
                "replica.max.lag.time": "6s",
                "replica.max.leader.timeout": "3s",
            },
        ) as real:
            yield real


async def ready_client(cluster: Cluster) -> Client:
    """A client once the cluster's metadata lists all 3 brokers (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FIRST_WAIT
    client = await connect(cluster.addresses, resubscribe_wait_time=FAILOVER_WAIT)
    try:
        while len((await client.fetch_metadata()).brokers()) < 3:
            assert loop.time() < deadline, "the cluster did not form"
            await asyncio.sleep(0.2)
        # ... and once it has a metadata leader (a fresh cluster elects one)
        probe = f"probe_{id(client):x}"
        while True:
            try:
                await client.create_stream(probe, probe)
                break
            except LiftbridgeError as exc:
                if loop.time() >= deadline:
                    pytest.fail(f"the cluster has no metadata leader: {exc!r}")
                await asyncio.sleep(0.2)
        await client.delete_stream(probe)
    except BaseException:
        await client.close()
        raise
    return client


async def replicated_stream(client: Client, name: str) -> None:
    # min_isr=2: an ALL ack then means at least two brokers have the message.
    await client.create_stream(name, name, replication_factor=3, min_isr=2)
    # The first message of a new RF=3 partition commits only after the
    # followers' first fetch: publish it before the clock starts.
    await client.publish(name, b"first", ack_policy=AckPolicy.ALL, timeout=FIRST_WAIT)


async def leader_index(client: Client, cluster: Cluster, name: str) -> int:
    md = await client.fetch_metadata()
    info = md.get_stream(name)
    assert info is not None
    broker = md.broker(info.partitions[0].leader)
    assert broker is not None
    return cluster.addresses.index(broker.address)


async def read_all(client: Client, name: str) -> dict[int, bytes]:
    """Every committed message of partition 0, from whichever broker leads it now."""
    out: dict[int, bytes] = {}

    async def run() -> None:
        async with client.subscribe(
            name, start_at=StartPosition.EARLIEST, stop_at=StopPosition.LATEST
        ) as sub:
            async for msg in sub:
                assert msg.offset not in out
                out[msg.offset] = msg.value

    await asyncio.wait_for(run(), FAILOVER_WAIT)
    return out


async def test_every_message_acked_by_all_replicas_survives_a_leader_kill(
    cluster: Cluster, unique_name: str
) -> None:
    client = await ready_client(cluster)
    try:
        await replicated_stream(client, unique_name)
        victim = await leader_index(client, cluster, unique_name)
        # Paced over ~12 s, so that the publishing spans the failover (a message
        # sent while the partition has no leader is never acked: it times out).
        total = 600
        pace = 0.02 if isinstance(cluster, LiftbridgeProcessCluster) else 0.001
        sent: list[tuple[bytes, asyncio.Future[Ack | None]]] = []
        refused = 0
        for i in range(total):
            if i == total // 4:
                await cluster.stop_broker(victim)
            await asyncio.sleep(pace)  # pacing, not waiting for anything
            value = b"m%d" % i
            try:
                future = await client.publish_async(
                    unique_name, value, ack_policy=AckPolicy.ALL, timeout=FAILOVER_WAIT / 2
                )
            except LiftbridgeError:
                refused += 1  # no broker took it (the old leader's connection broke)
                continue
            sent.append((value, future))
        results: list[Any] = await asyncio.gather(*(f for _, f in sent), return_exceptions=True)
        acked = {
            r.offset: value
            for (value, _), r in zip(sent, results, strict=True)
            if isinstance(r, Ack)
        }
        errors = {type(r).__name__ for r in results if isinstance(r, BaseException)}
        assert acked, f"nothing acked ({refused} refused, errors: {errors})"
        after_kill = {b"m%d" % i for i in range(total // 4, total)}
        assert after_kill & set(acked.values()), "nothing acked after the failover"
        log = await read_all(client, unique_name)
        lost = {o: v for o, v in acked.items() if log.get(o) != v}
        assert not lost, f"{len(lost)} acked messages not readable at their offsets"
        assert log[0] == b"first"
    finally:
        await client.close()


async def test_a_subscriber_sees_every_offset_once_and_in_order_across_a_leader_kill(
    cluster: Cluster, unique_name: str
) -> None:
    client = await ready_client(cluster)
    try:
        await replicated_stream(client, unique_name)
        victim = await leader_index(client, cluster, unique_name)
        offsets: list[int] = []
        some_read = asyncio.Event()
        arrived = asyncio.Event()
        last_acked = -1

        async def consume() -> None:
            async with client.subscribe(unique_name, start_at=StartPosition.EARLIEST) as sub:
                async for msg in sub:
                    offsets.append(msg.offset)
                    arrived.set()
                    if len(offsets) == 100:
                        some_read.set()

        async def produce() -> None:
            nonlocal last_acked
            loop = asyncio.get_running_loop()
            for i in range(400):
                deadline = loop.time() + FAILOVER_WAIT
                while True:  # until acked: a repeat after a timeout may store a duplicate
                    try:
                        ack = await client.publish(
                            unique_name, b"%d" % i, ack_policy=AckPolicy.ALL, timeout=5.0
                        )
                    except LiftbridgeError as exc:
                        if loop.time() >= deadline:
                            pytest.fail(f"no new leader took the publish: {exc!r}")
                        await asyncio.sleep(0.1)
                        continue
                    assert ack is not None
                    last_acked = max(last_acked, ack.offset)
                    break

        consumer = asyncio.create_task(consume())
        producer = asyncio.create_task(produce())
        try:
            await asyncio.wait_for(some_read.wait(), FAILOVER_WAIT)
            await cluster.stop_broker(victim)
            await asyncio.wait_for(producer, 3 * FAILOVER_WAIT)
            async with asyncio.timeout(FAILOVER_WAIT):
                while not offsets or offsets[-1] < last_acked:
                    assert not consumer.done(), consumer
                    arrived.clear()
                    await arrived.wait()
        finally:
            for task in (consumer, producer):
                task.cancel()
            await asyncio.gather(consumer, producer, return_exceptions=True)
        assert offsets == list(range(len(offsets)))  # each once, in order, no gap
        assert offsets[-1] >= last_acked
    finally:
        await client.close()
