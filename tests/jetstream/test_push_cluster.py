"""Push consumers through faults: connection resets, and a 3-node cluster (routes
on loopback) losing the stream leader while a durable push consumer delivers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from consume_support import publish_many
from support import Server, nats_cluster, when_cluster_ready

from aioclients._errors import AioClientsError
from aioclients.jetstream import JetStream, Reconnected, connect
from aioclients.testing import FaultProxy

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]


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


async def test_push_consume_goes_on_after_connection_resets(
    proxied: tuple[FaultProxy, JetStream], unique_name: str
) -> None:
    proxy, js = proxied
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 100)
    consumer = await js.create_push_consumer(
        unique_name, durable_name="p", idle_heartbeat=0.5, ack_wait=2.0
    )
    events: list[object] = []
    reconnected = asyncio.Event()

    def on_event(event: object) -> None:
        events.append(event)
        if isinstance(event, Reconnected):
            reconnected.set()

    acked: set[int] = set()
    async with consumer.consume(max_messages=50, on_event=on_event) as messages:

        async def read() -> None:
            async for msg in messages:
                await msg.ack()  # redeliveries too: an ack lost in the reset
                acked.add(msg.metadata.sequence.stream)
                if len(acked) == 100 and not events:
                    proxy.reset()  # the connection drops

        reader = asyncio.create_task(read())
        await asyncio.wait_for(reconnected.wait(), 20)
        # Published after the reconnect: delivered on the new connection.
        await publish_many(js, f"{unique_name}.a", 200)
        await asyncio.wait_for(_until_all_acked(consumer, 300), 30)
        assert not reader.done()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        assert messages.statistics().reconnects >= 1
    assert acked == set(range(1, 301))


async def _until_all_acked(consumer: object, total: int) -> None:
    while True:  # acks sent just before the end are on their way
        info = await consumer.info()  # type: ignore[attr-defined]
        if info.ack_floor.stream_seq == total:
            return
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_cluster_durable_push_consumer_survives_the_stream_leader_stopping(
    own_server_allowed: None,
) -> None:
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
            total = 1500
            await publish_many(js, "r3.a", total)
            consumer = await js.create_push_consumer(
                "R3", durable_name="p", idle_heartbeat=0.5, ack_wait=2.0
            )
            acked: set[int] = set()
            stopped = ""

            async def read() -> None:
                nonlocal stopped
                async with consumer.consume(max_messages=100) as messages:
                    async for msg in messages:
                        seq = msg.metadata.sequence.stream
                        if seq not in acked:
                            try:
                                await msg.ack_sync(timeout=2.0)
                            except AioClientsError:
                                continue  # redelivered after ack_wait
                            acked.add(seq)
                        if len(acked) == 300 and not stopped:
                            info = await stream.info()
                            assert info.cluster is not None
                            stopped = info.cluster["leader"]
                            await asyncio.to_thread(servers[int(stopped[1:])].stop)
                        if len(acked) == total:
                            return

            await asyncio.wait_for(read(), 90)
            assert stopped
            # Every message was delivered and acked; none acked was lost.
            assert acked == set(range(1, total + 1))
        finally:
            with contextlib.suppress(AioClientsError):
                await js.close()
