"""Ordered consumers and KV watch through server faults: a restart under a watch,
and a 3-node cluster (routes on loopback) losing the stream leader mid-stream."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from consume_support import publish_many
from support import Server, nats_cluster, when_cluster_ready

from aioclients._errors import AioClientsError
from aioclients.jetstream import ConsumerReset, JetStream, KeyValueEntry, connect
from aioclients.testing import FaultProxy, NatsServer
from aioclients.testing.pytest_plugin import ExternalServer

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]


@pytest.fixture
async def private(nats_server_private: Server) -> AsyncIterator[tuple[NatsServer, JetStream]]:
    if isinstance(nats_server_private, ExternalServer):
        pytest.skip("restarts the server; cannot do that to an external one")
    ctx = await connect(
        nats_server_private.url, timeout=1.5, reconnect_time_wait=0.1, max_reconnect_attempts=-1
    )
    try:
        yield nats_server_private, ctx
    finally:
        nats_server_private.start()
        await ctx.close()


async def test_kv_watch_survives_a_server_restart(private: tuple[NatsServer, JetStream]) -> None:
    server, js = private
    kv = await js.create_key_value("cfg", history=5)
    for i in range(20):
        await kv.put(f"k{i}", b"before")
    events: list[object] = []
    async with kv.watch(on_event=events.append) as watcher:
        initial = [await asyncio.wait_for(watcher.__anext__(), 5) for _ in range(20)]
        assert watcher.initial_done.is_set()
        assert {e.key for e in initial} == {f"k{i}" for i in range(20)}
        await asyncio.to_thread(server.restart)

        async def put_after_restart() -> int:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while True:
                try:
                    return await kv.put("k3", b"after restart")
                except AioClientsError:
                    if loop.time() > deadline:
                        raise
                    await asyncio.sleep(0.1)  # JetStream is still starting

        revision = await put_after_restart()
        entry: KeyValueEntry = await asyncio.wait_for(watcher.__anext__(), 30)
        # Nothing repeated, nothing lost: the next entry is the change.
        assert (entry.key, entry.value, entry.revision) == ("k3", b"after restart", revision)
    assert any(isinstance(e, ConsumerReset) for e in events)


@pytest.mark.slow
async def test_cluster_stream_leader_stopped_mid_stream(own_server_allowed: None) -> None:
    async with nats_cluster() as servers:
        js = await connect(
            [s.url for s in servers],
            timeout=2.0,
            reconnect_time_wait=0.1,
            max_reconnect_attempts=-1,
        )
        try:
            stream = await when_cluster_ready(
                lambda: js.create_stream("R3", subjects=["r3.>"], num_replicas=3, storage="file")
            )
            loop = asyncio.get_running_loop()
            total = 3000
            await publish_many(js, "r3.a", total)
            events: list[object] = []
            oc = await stream.ordered_consumer(on_event=events.append)
            seqs: list[int] = []
            stopped = ""
            consumer_host = ""

            async def read() -> None:
                nonlocal stopped, consumer_host
                async with oc.consume(max_messages=100, expires=2, idle_heartbeat=0.5) as msgs:
                    async for msg in msgs:
                        seqs.append(msg.metadata.sequence.stream)
                        if len(seqs) == 500:
                            info = await stream.info()
                            assert info.cluster is not None
                            stopped = info.cluster["leader"]
                            cinfo = await js.consumer_info("R3", oc.name or "")
                            consumer_host = (cinfo.cluster or {}).get("leader", "")
                            leader = servers[int(stopped[1:])]
                            await asyncio.to_thread(leader.stop)
                        if len(seqs) == total:
                            return

            await asyncio.wait_for(read(), 90)
            assert seqs == list(range(1, total + 1))
            assert stopped
            if consumer_host == stopped:
                # The consumer went down with its server: it was replaced.
                assert any(isinstance(e, ConsumerReset) for e in events)
            deadline = loop.time() + 20
            while True:  # the remaining two elect a new leader
                try:
                    cluster = (await stream.info()).cluster
                except AioClientsError:
                    cluster = None
                if cluster is not None and cluster.get("leader") not in (None, stopped):
                    break
                assert loop.time() < deadline, "no new stream leader"
                await asyncio.sleep(0.2)
        finally:
            with contextlib.suppress(AioClientsError):
                await js.close()


@pytest.fixture
async def proxied(nats_server: Server) -> AsyncIterator[tuple[FaultProxy, JetStream]]:
    address = nats_server.url.removeprefix("nats://")
    async with FaultProxy(address) as proxy:
        ctx = await connect(
            f"nats://{proxy.address}",
            timeout=1.0,
            reconnect_time_wait=0.05,
            max_reconnect_attempts=-1,
        )
        try:
            yield proxy, ctx
        finally:
            proxy.thaw()
            await ctx.close()


async def test_kv_watch_survives_connection_resets(
    proxied: tuple[FaultProxy, JetStream], unique_name: str
) -> None:
    proxy, js = proxied
    bucket = unique_name.replace(".", "_")[-60:]
    kv = await js.create_key_value(bucket, history=2)
    try:
        for i in range(300):
            await kv.put(f"k{i}", b"v1")
        events: list[object] = []
        seen: list[KeyValueEntry] = []
        async with kv.watch(on_event=events.append) as watcher:
            while len(seen) < 300:
                seen.append(await asyncio.wait_for(watcher.__anext__(), 20))
                if len(seen) in (40, 170):
                    proxy.reset()  # the connection drops mid-watch
            assert watcher.initial_done.is_set()
            revisions = [e.revision for e in seen]
            assert revisions == sorted(set(revisions))  # in order, none twice
            assert {e.key for e in seen} == {f"k{i}" for i in range(300)}
            r = await kv.put("k5", b"v2")
            entry = await asyncio.wait_for(watcher.__anext__(), 20)
            assert (entry.key, entry.revision) == ("k5", r)
        resets = [e for e in events if isinstance(e, ConsumerReset)]
        assert resets
        # A drop while the snapshot is read also restarts the scan by sequence
        # ("snapshot", right after its "reconnect"); nothing else may reset it.
        reasons = [e.reason for e in resets]
        assert set(reasons) <= {"reconnect", "snapshot"}, reasons
        assert reasons[0] == "reconnect", reasons
    finally:
        with contextlib.suppress(AioClientsError):
            await js.delete_key_value(bucket)


async def test_ordered_consume_through_a_frozen_connection(
    proxied: tuple[FaultProxy, JetStream], unique_name: str
) -> None:
    """A connection that stops carrying anything (a hung path): two missed idle
    heartbeats replace the consumer, and once traffic flows again nothing is missing."""
    proxy, js = proxied
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    try:
        await publish_many(js, f"{unique_name}.a", 400)
        events: list[object] = []
        oc = await stream.ordered_consumer(on_event=events.append)
        seqs: list[int] = []
        loop = asyncio.get_running_loop()
        async with oc.consume(max_messages=20, expires=2, idle_heartbeat=0.5) as messages:

            async def read() -> None:
                async for msg in messages:
                    seqs.append(msg.metadata.sequence.stream)
                    if len(seqs) == 100:
                        proxy.freeze()
                        loop.call_later(2.5, proxy.thaw)
                    if len(seqs) == 400:
                        return

            await asyncio.wait_for(read(), 40)
        assert seqs == list(range(1, 401))
        assert any(isinstance(e, ConsumerReset) for e in events)
    finally:
        with contextlib.suppress(AioClientsError):
            await js.delete_stream(unique_name)
