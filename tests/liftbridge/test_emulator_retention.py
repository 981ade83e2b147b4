"""Retention and compaction end to end, on the emulator and on a real Liftbridge alike:
nothing goes until a segment rolls and the partition's cleaner ticks; then whole
segments go, offsets stay, and readers asking for a removed offset start at the oldest
kept one (the rules themselves are tested on the pure log in test_emulator_log.py).

Liftbridge v1.9.0 can crash (SIGBUS in the index of a segment) when its cleaner rolls a
full segment while a publish rolls it too: both create the same segment file and the
loser deletes it under the winner. One-message segments are full all the time, so
these tests publish before the cleaner first ticks (``CLEANER`` after the stream is
created) and let it work afterwards."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import pytest

from aioclients import liftbridge
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._pb import api_pb2_grpc as pbg
from aioclients.testing import LiftbridgeCluster, NatsServer
from aioclients.testing._liftbridge_fixtures import (
    ExternalLiftbridge,
    oldest_offset,
    wait_for_oldest,
)
from aioclients.testing._liftbridge_log import record_size

Cluster = LiftbridgeCluster | ExternalLiftbridge
TIMEOUT = 10.0
#: the cleaner interval of these streams (s): their publishing ends before its first tick
CLEANER = 1.0


@pytest.fixture
async def client(liftbridge_cluster: Cluster) -> liftbridge.Client:
    async with await liftbridge.connect(liftbridge_cluster.addresses) as c:
        yield c  # type: ignore[misc]


async def _offsets(
    client: liftbridge.Client, stream: str, stop_offset: int = 24, **start: object
) -> list[int]:
    got: list[int] = []
    async with client.subscribe(stream, stop_offset=stop_offset, **start) as sub:  # type: ignore[arg-type]

        async def run() -> None:
            async for msg in sub:
                got.append(msg.offset)

        await asyncio.wait_for(run(), TIMEOUT)
    return got


async def _publish(client: liftbridge.Client, stream: str, count: int, **kw: object) -> None:
    for i in range(count):
        await client.publish(stream, f"m{i}".encode(), **kw)  # type: ignore[arg-type]


async def test_retention_max_messages_drops_whole_segments_when_the_cleaner_runs(
    client: liftbridge.Client, unique_name: str
) -> None:
    # Segments of 1 byte: each message rolls a segment of its own, so the cleaner
    # trims to the message.
    await client.create_stream(
        unique_name,
        unique_name,
        retention_max_messages=10,
        segment_max_bytes=1,
        cleaner_interval=CLEANER,
    )
    await _publish(client, unique_name, 25)
    meta = await client.fetch_partition_metadata(unique_name, 0)
    assert meta.high_watermark == 24, "offsets are never reused"
    assert await wait_for_oldest(client, unique_name, at_least=15) == 15
    assert await _offsets(client, unique_name, start_at=liftbridge.StartPosition.EARLIEST) == list(
        range(15, 25)
    )
    below = await _offsets(client, unique_name, start_offset=3)
    assert below == list(range(15, 25)), "a trimmed start offset starts at the oldest kept"
    await client.delete_stream(unique_name)


@pytest.mark.parametrize(("extra", "oldest"), [(0, 8), (1, 9)])
async def test_segments_fill_up_by_the_bytes_the_server_writes(
    client: liftbridge.Client, unique_name: str, extra: int, oldest: int
) -> None:
    # Segments of exactly two messages' bytes hold two: [0 1] ... [8 9], then a new
    # active one; one byte more holds three: [0-2] [3-5] [6-8] [9]. Keeping 3 messages
    # leaves 8.. and 9.. respectively: an emulator that counted a byte more or less
    # per message would get the other.
    size = record_size(b"", b"v00", {"subject": unique_name.encode(), "reply": b""})
    await client.create_stream(
        unique_name,
        unique_name,
        retention_max_messages=3,
        segment_max_bytes=2 * size + extra,
        cleaner_interval=CLEANER,
    )
    for i in range(10):
        await client.publish(unique_name, b"v%02d" % i)
    assert await wait_for_oldest(client, unique_name, at_least=8) == oldest
    await client.delete_stream(unique_name)


async def test_nothing_is_removed_before_the_cleaner_runs(
    client: liftbridge.Client, unique_name: str
) -> None:
    # A cleaner that ticks once an hour: the log keeps everything until then, whatever
    # the limit (the emulator used to trim at once).
    await client.create_stream(
        unique_name,
        unique_name,
        retention_max_messages=5,
        segment_max_bytes=1,
        cleaner_interval=3600,
    )
    await _publish(client, unique_name, 25)
    assert await _offsets(client, unique_name, start_at=liftbridge.StartPosition.EARLIEST) == list(
        range(25)
    )
    assert await oldest_offset(client, unique_name) == 0
    await client.delete_stream(unique_name)


async def test_a_stop_offset_retention_removed_ends_the_subscription(
    client: liftbridge.Client, unique_name: str
) -> None:
    # The broker stops only at the stop offset itself: a reader that starts below the
    # oldest offset (and so at it) passes a removed stop offset by and reads on. The
    # client ends the subscription there instead of handing over offsets past it.
    await client.create_stream(
        unique_name,
        unique_name,
        retention_max_messages=10,
        segment_max_bytes=1,
        cleaner_interval=CLEANER,
    )
    await _publish(client, unique_name, 25)
    await wait_for_oldest(client, unique_name, at_least=15)
    assert await _offsets(client, unique_name, start_offset=3, stop_offset=5) == []
    await client.delete_stream(unique_name)


async def test_a_reader_behind_retention_fails_with_segment_deleted(
    client: liftbridge.Client, unique_name: str
) -> None:
    # A reader that does not read holds its place in a segment (gRPC flow control
    # holds the broker back); the cleaner deletes that segment under it, and its next
    # read fails. Big messages fill the flow-control window quickly.
    await client.create_stream(
        unique_name,
        unique_name,
        retention_max_messages=1,
        segment_max_bytes=1,
        cleaner_interval=4 * CLEANER,  # 23 MB take a while on a busy machine
    )
    big = b"x" * 1_000_000
    for _ in range(23):
        await client.publish(unique_name, big)
    sub = client.subscribe(unique_name, start_at=liftbridge.StartPosition.EARLIEST)
    async with sub:
        first = await asyncio.wait_for(sub.__anext__(), TIMEOUT)
        assert first.offset == 0
        await wait_for_oldest(client, unique_name, at_least=22)
        read: list[int] = []

        async def drain() -> None:
            async for msg in sub:
                read.append(msg.offset)

        with pytest.raises(liftbridge.SegmentDeletedError, match="subscribe again") as info:
            await asyncio.wait_for(drain(), TIMEOUT)
        assert all(offset < 22 for offset in read), "the deleted segments are not read"
        assert info.value.last_offset is not None
        assert info.value.last_offset < 22
    await client.delete_stream(unique_name)


async def test_compaction_keeps_the_newest_message_of_each_key(
    client: liftbridge.Client, unique_name: str
) -> None:
    await client.create_stream(
        unique_name,
        unique_name,
        compact_enabled=True,
        segment_max_bytes=1,
        cleaner_interval=CLEANER,
    )
    keys = [b"a", b"b", b"a", None, b"b", b"a", b"c", None, b"a", b"c", b"b"]
    for i, key in enumerate(keys):
        await client.publish(unique_name, b"%d" % i, key=key)
    last = len(keys) - 1
    newest = {k: i for i, k in enumerate(keys) if k is not None}
    # Kept: the newest of each key, every message without one, and the active segment's.
    expected = sorted({*newest.values(), *(i for i, k in enumerate(keys) if k is None), last})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        try:
            got = await _offsets(
                client, unique_name, stop_offset=last, start_at=liftbridge.StartPosition.EARLIEST
            )
        except liftbridge.SegmentDeletedError:
            # This look met a cleaner tick: the segment it read was replaced by its
            # compacted one. The error says to subscribe again from the start; a
            # stalled (busy) loop stretches a look over a tick often enough.
            got = []
        if got == expected or loop.time() > deadline:
            break
        await asyncio.sleep(0.05)  # the next look: the cleaner ticks on its own clock
    assert got == expected
    await client.delete_stream(unique_name)


async def test_a_subscribe_while_the_cleaner_works_is_asked_again(
    nats_server: NatsServer, unique_name: str
) -> None:
    # While a clean is in progress the broker still hands out the old segments, closed:
    # a reader opened on one gets INTERNAL "segment has been closed", like a paused
    # partition's. The emulator holds that window for clean_duration per segment; the
    # client asks again (the partition's metadata does not say paused).
    async with (
        LiftbridgeCluster(1, nats_url=nats_server.url, clean_duration=0.3) as cluster,
        await liftbridge.connect(cluster.addresses) as client,
    ):
        await client.create_stream(
            unique_name,
            unique_name,
            retention_max_messages=1,
            segment_max_bytes=1,
            cleaner_interval=0.2,
        )
        for i in range(5):
            await client.publish(unique_name, b"%d" % i)
        log = cluster._state.streams[unique_name].partitions[0].log
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while not (log.cleaning and log.touched == 4):  # [0] [1] [2] [3] go, [4] stays
            assert loop.time() < deadline, "the cleaner did not delete the four segments"
            await asyncio.sleep(0.01)  # the cleaner ticks on its own clock
        async with grpc.aio.insecure_channel(cluster.addresses[0]) as channel:
            call = pbg.APIStub(channel).Subscribe(
                pb.SubscribeRequest(stream=unique_name, startPosition=pb.EARLIEST)
            )
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await asyncio.wait_for(call.read(), TIMEOUT)
        assert info.value.code() is grpc.StatusCode.INTERNAL
        assert info.value.details() == "Failed to create stream reader: segment has been closed"
        assert log.cleaning, "still within the window"
        got = await _offsets(
            client, unique_name, stop_offset=4, start_at=liftbridge.StartPosition.EARLIEST
        )
        assert got == [4]
