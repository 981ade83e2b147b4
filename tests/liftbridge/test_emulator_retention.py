"""The Liftbridge emulator's retention limit (``retention_max_messages``): the oldest
messages go, offsets stay, and readers asking for a trimmed offset start at the oldest kept."""

from __future__ import annotations

import asyncio

from aioclients import liftbridge
from aioclients.testing import LiftbridgeCluster
from aioclients.testing._liftbridge_fixtures import ExternalLiftbridge

TIMEOUT = 10.0


async def _offsets(client: liftbridge.Client, stream: str, **start: object) -> list[int]:
    got: list[int] = []
    async with client.subscribe(stream, stop_offset=24, **start) as sub:  # type: ignore[arg-type]

        async def run() -> None:
            async for msg in sub:
                got.append(msg.offset)

        await asyncio.wait_for(run(), TIMEOUT)
    return got


async def test_retention_max_messages_trims_the_oldest(
    liftbridge_cluster: LiftbridgeCluster | ExternalLiftbridge, unique_name: str
) -> None:
    async with await liftbridge.connect(liftbridge_cluster.addresses) as client:
        # A real Liftbridge drops whole segments, when its cleaner runs: tiny segments and
        # a short cleaner interval make it trim to the message, soon (the emulator trims
        # at once).
        await client.create_stream(
            unique_name,
            unique_name,
            retention_max_messages=10,
            segment_max_bytes=64,
            cleaner_interval=0.1,
        )
        for i in range(25):
            await client.publish(unique_name, f"m{i}".encode())
        meta = await client.fetch_partition_metadata(unique_name, 0)
        assert meta.high_watermark == 24, "offsets are never reused"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while True:
            earliest = await _offsets(
                client, unique_name, start_at=liftbridge.StartPosition.EARLIEST
            )
            if earliest[0] >= 15 or loop.time() > deadline:
                break
            await asyncio.sleep(0.2)  # the real cleaner runs every 0.1 s
        assert earliest == list(range(15, 25))
        below = await _offsets(client, unique_name, start_offset=3)
        assert below == list(range(15, 25)), "a trimmed start offset starts at the oldest kept"
        await client.delete_stream(unique_name)
