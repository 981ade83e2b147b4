"""Multi-megabyte messages through our frame scanner, end to end on a real server."""

from __future__ import annotations

import pytest

from aioclients.jetstream import connect
from aioclients.testing import NatsServer


@pytest.mark.usefixtures("own_server_allowed")
async def test_megabyte_messages_arrive_whole_through_fetch_and_direct_get() -> None:
    payload = bytes(range(256)) * 4096 * 3  # 3 MiB, arriving in many reads
    async with NatsServer(config="max_payload: 8388608") as server:
        async with await connect(server.url) as js:
            stream = await js.create_stream(
                "BIG", subjects=["big.>"], max_msg_size=8 * 1024 * 1024, allow_direct=True
            )
            for i in range(3):
                await js.publish("big.x", payload + bytes([i]))
            consumer = await stream.create_consumer(durable_name="d", ack_policy="explicit")
            async with consumer.fetch(3, expires=5) as batch:
                got = [msg async for msg in batch]
            assert [m.data[-1] for m in got] == [0, 1, 2]
            assert all(m.data[:-1] == payload for m in got)
            direct = await stream.direct_get(seq=2)
            assert direct.data == payload + b"\x01"
