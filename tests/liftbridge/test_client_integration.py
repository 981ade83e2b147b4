"""The Liftbridge client against the emulator (or a real Liftbridge v1.9).

Set ``AIOCLIENTS_TEST_LIFTBRIDGE`` (and ``AIOCLIENTS_TEST_NATS_URL``) to run these
against a real cluster; the tests that stop brokers then skip themselves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import nats
import pytest

from aioclients import InvalidArgumentError, LocalProtocolError
from aioclients.liftbridge import (
    AckPolicy,
    Client,
    IncorrectOffsetError,
    LiftbridgeClosedError,
    LiftbridgeConnectError,
    LiftbridgeTimeoutError,
    Message,
    NoSuchConsumerGroupError,
    NoSuchPartitionError,
    NoSuchStreamError,
    PartitionByKey,
    PartitionPausedError,
    ReadonlyPartitionError,
    StartPosition,
    StopPosition,
    StreamExistsError,
    Subscription,
    connect,
    new_message,
    unmarshal_ack,
)
from aioclients.testing import LiftbridgeCluster
from aioclients.testing._liftbridge_fixtures import ExternalLiftbridge, skip_without_cursors

Cluster = LiftbridgeCluster | ExternalLiftbridge
WAIT = 10.0
# A real cluster commits the first message of a new replicated partition only
# after the followers' first fetch: up to ~10 s (replica.max.idle.wait).
REPLICATED_WAIT = 25.0


@pytest.fixture
async def client(liftbridge_cluster: Cluster) -> AsyncIterator[Client]:
    c = await connect(liftbridge_cluster.addresses, resubscribe_wait_time=10.0)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def stream(client: Client, unique_name: str) -> AsyncIterator[str]:
    await client.create_stream(unique_name, unique_name)
    yield unique_name
    if not client.closed:
        try:
            await client.delete_stream(unique_name)
        except NoSuchStreamError:
            pass


async def take(sub: Subscription, n: int, *, wait: float = WAIT) -> list[Message]:
    out: list[Message] = []

    async def run() -> None:
        async for msg in sub:
            out.append(msg)
            if len(out) == n:
                return

    await asyncio.wait_for(run(), wait)
    return out


async def broker_count(client: Client) -> int:
    return len((await client.fetch_metadata()).brokers())


async def publish_values(client: Client, stream: str, values: list[bytes], **kw: object) -> None:
    for v in values:
        await client.publish(stream, v, **kw)  # type: ignore[arg-type]


# -- streams and metadata -------------------------------------------------------


async def test_create_stream_shows_in_metadata_and_twice_is_an_error(
    client: Client, unique_name: str
) -> None:
    await client.create_stream(unique_name, unique_name, partitions=3)
    md = await client.fetch_metadata()
    info = md.get_stream(unique_name)
    assert info is not None
    assert sorted(info.partitions) == [0, 1, 2]
    assert md.partition_counts_for_subject(unique_name) == {unique_name: 3}
    assert md.last_updated is not None
    assert md.brokers()
    with pytest.raises(StreamExistsError):
        await client.create_stream(unique_name, unique_name)
    await client.delete_stream(unique_name)
    assert (await client.fetch_metadata()).get_stream(unique_name) is None
    with pytest.raises(NoSuchStreamError):
        await client.delete_stream(unique_name)


async def test_create_stream_takes_every_option(client: Client, unique_name: str) -> None:
    await client.create_stream(
        unique_name,
        unique_name,
        group="g",
        replication_factor=1,
        partitions=2,
        retention_max_bytes=1 << 20,
        retention_max_messages=1000,
        retention_max_age=3600.0,
        cleaner_interval=60.0,
        segment_max_bytes=1 << 16,
        segment_max_age=600.0,
        compact_max_goroutines=2,
        compact_enabled=True,
        auto_pause_time=0.0,
        auto_pause_disable_if_subscribers=True,
        min_isr=1,
        optimistic_concurrency_control=False,
        encryption=False,
    )
    assert (await client.fetch_metadata()).partition_count(unique_name) == 2
    with pytest.raises(InvalidArgumentError, match="unknown stream option 'retention'"):
        await client.create_stream(unique_name + "x", unique_name + "x", retention=1)


async def test_fetch_partition_metadata(client: Client, stream: str) -> None:
    await client.publish(stream, b"a")
    info = await client.fetch_partition_metadata(stream, 0)
    assert info.id == 0
    assert info.leader
    assert info.newest_offset == 0
    with pytest.raises(NoSuchPartitionError):
        await client.fetch_partition_metadata(stream, 5)


# -- publishing ------------------------------------------------------------------


async def test_partition_metadata_of_a_paused_partition(client: Client, stream: str) -> None:
    # A paused partition's leader refuses FetchPartitionMetadata (Liftbridge v1.9
    # closes it); the client answers from that broker's FetchMetadata instead.
    await publish_values(client, stream, [b"a", b"b", b"c"])
    await client.pause_stream(stream)
    meta = await client.fetch_partition_metadata(stream, 0)
    assert meta.paused
    assert (meta.high_watermark, meta.newest_offset) == (2, 2)
    await client.publish(stream, b"d")  # resumes it
    meta = await client.fetch_partition_metadata(stream, 0)
    assert (meta.high_watermark, meta.newest_offset) == (3, 3)


async def test_subscribing_by_time_to_a_paused_partition_says_it_is_paused(
    client: Client, stream: str
) -> None:
    # Liftbridge v1.9 looks the time up in the closed log first and answers INTERNAL
    # "Failed to lookup offset for timestamp: ... segment has been closed".
    await publish_values(client, stream, [b"a", b"b"])
    await client.pause_stream(stream)
    for kw in ({"start_time": 1}, {"start_at": StartPosition.EARLIEST, "stop_time": 1}):
        with pytest.raises(PartitionPausedError):
            async with client.subscribe(stream, **kw):  # type: ignore[arg-type]
                pass
    sub = client.subscribe(stream, start_time=1, resume=True)
    async with sub:
        assert [m.value for m in await take(sub, 2)] == [b"a", b"b"]


async def test_publish_returns_acks_with_every_policy(client: Client, stream: str) -> None:
    ack = await client.publish(stream, b"v", key=b"k", headers={"h": b"1"}, correlation_id="c-1")
    assert ack is not None
    assert (ack.stream, ack.partition, ack.offset) == (stream, 0, 0)
    assert ack.correlation_id == "c-1"
    assert ack.ack_policy is AckPolicy.LEADER
    assert ack.commit_timestamp >= ack.reception_timestamp > 0
    all_ack = await client.publish(stream, b"v", ack_policy=AckPolicy.ALL)
    assert all_ack is not None
    assert all_ack.offset == 1
    assert all_ack.ack_policy is AckPolicy.ALL
    assert await client.publish(stream, b"v", ack_policy=AckPolicy.NONE) is None
    async with client.subscribe(stream, start_at=StartPosition.EARLIEST) as sub:
        msgs = await take(sub, 3)
    assert [m.offset for m in msgs] == [0, 1, 2]
    assert msgs[0].key == b"k"
    assert msgs[0].headers["h"] == b"1"
    assert msgs[0].value == b"v"


async def test_partitioners_and_explicit_partition(client: Client, unique_name: str) -> None:
    await client.create_stream(unique_name, unique_name, partitions=3)
    rr = [await client.publish(unique_name, b"x", partitioner="round_robin") for _ in range(6)]
    assert [a.partition for a in rr if a] == [0, 1, 2, 0, 1, 2]
    by_key = await client.publish(unique_name, b"x", key=b"foo", partitioner="key")
    assert by_key is not None
    assert by_key.partition == 0x8C736521 % 3  # crc32(b"foo") % 3
    assert by_key.msg_subject == (
        unique_name if by_key.partition == 0 else f"{unique_name}.{by_key.partition}"
    )
    explicit = await client.publish(unique_name, b"x", partition=2, partitioner=PartitionByKey())
    assert explicit is not None
    assert explicit.partition == 2
    with pytest.raises(NoSuchPartitionError):
        await client.publish(unique_name, b"x", partition=7)


async def test_publish_async_pipelines_within_the_window(
    liftbridge_cluster: Cluster, unique_name: str
) -> None:
    async with await connect(liftbridge_cluster.addresses, publish_async_window=8) as c:
        await c.create_stream(unique_name, unique_name)
        futures = []
        peak = 0
        for i in range(200):
            futures.append(await c.publish_async(unique_name, str(i).encode()))
            peak = max(peak, c._publisher.outstanding)
        acks = await asyncio.wait_for(asyncio.gather(*futures), WAIT)
        assert peak <= 8
        assert [a.offset for a in acks if a] == list(range(200))
        none = await c.publish_async(unique_name, b"n", ack_policy=AckPolicy.NONE)
        assert await none is None


async def test_publish_to_subject_and_the_envelope_helpers(
    client: Client, stream: str, liftbridge_cluster: Cluster
) -> None:
    ack = await client.publish_to_subject(stream, b"via subject", correlation_id="c9")
    assert ack is not None
    assert (ack.stream, ack.offset, ack.correlation_id) == (stream, 0, "c9")
    assert ack.partition is None
    # A plain NATS client publishes an envelope and reads the Ack envelope.
    nc = await nats.connect(liftbridge_cluster.nats_url)
    try:
        sub = await nc.subscribe(f"{stream}.acks")
        await nc.publish(
            stream, new_message(b"raw", key=b"k", ack_inbox=f"{stream}.acks", correlation_id="x")
        )
        reply = await sub.next_msg(timeout=WAIT)
        nats_ack = unmarshal_ack(reply.data)
        assert (nats_ack.offset, nats_ack.correlation_id) == (1, "x")
    finally:
        await nc.close()


async def test_publish_to_a_subject_without_stream_times_out(
    client: Client, unique_name: str
) -> None:
    with pytest.raises(LiftbridgeTimeoutError) as info:
        await client.publish_to_subject(unique_name + ".none", b"x", timeout=0.3)
    assert isinstance(info.value, TimeoutError)


async def test_expected_offset_with_optimistic_concurrency(
    client: Client, unique_name: str
) -> None:
    await client.create_stream(unique_name, unique_name, optimistic_concurrency_control=True)
    ack = await client.publish(unique_name, b"a", expected_offset=0)
    assert ack is not None
    assert ack.offset == 0
    with pytest.raises(IncorrectOffsetError):
        await client.publish(unique_name, b"b", expected_offset=5)


# -- subscribing: every start and stop position ----------------------------------------


async def test_start_positions(client: Client, stream: str) -> None:
    await publish_values(client, stream, [b"0", b"1", b"2"])
    async with client.subscribe(stream, start_at=StartPosition.EARLIEST) as sub:
        assert [m.offset for m in await take(sub, 3)] == [0, 1, 2]
    async with client.subscribe(stream, start_at=StartPosition.LATEST) as sub:
        assert [m.offset for m in await take(sub, 1)] == [2]
    async with client.subscribe(stream, start_offset=1) as sub:
        assert [m.offset for m in await take(sub, 2)] == [1, 2]
    async with client.subscribe(stream, start_at=StartPosition.OFFSET, start_offset=2) as sub:
        assert [m.value for m in await take(sub, 1)] == [b"2"]
    async with client.subscribe(stream) as sub:  # NEW_ONLY
        await client.publish(stream, b"3")
        assert [m.offset for m in await take(sub, 1)] == [3]


async def test_start_by_time(client: Client, stream: str) -> None:
    await client.publish(stream, b"old")
    await asyncio.sleep(0.05)  # a visible gap in broker timestamps, not a wait for an event
    cut = datetime.now(timezone.utc)
    await asyncio.sleep(0.05)
    await client.publish(stream, b"new")
    async with client.subscribe(stream, start_time=cut) as sub:
        assert [m.value for m in await take(sub, 1)] == [b"new"]
    ns = int(cut.timestamp() * 1e9)
    async with client.subscribe(stream, start_at=StartPosition.TIMESTAMP, start_time=ns) as sub:
        assert [m.value for m in await take(sub, 1)] == [b"new"]
    async with client.subscribe(stream, start_time_delta=timedelta(minutes=5)) as sub:
        assert [m.value for m in await take(sub, 2)] == [b"old", b"new"]
    async with client.subscribe(stream, start_time_delta=300.0) as sub:
        assert [m.value for m in await take(sub, 2)] == [b"old", b"new"]


async def test_stop_positions_end_the_iteration(client: Client, stream: str) -> None:
    await publish_values(client, stream, [b"0", b"1", b"2", b"3"])
    async with client.subscribe(stream, start_at=StartPosition.EARLIEST, stop_offset=1) as sub:
        got = await asyncio.wait_for(_collect(sub), WAIT)
    assert [m.offset for m in got] == [0, 1]
    async with client.subscribe(
        stream, start_at=StartPosition.EARLIEST, stop_at=StopPosition.LATEST
    ) as sub:
        got = await asyncio.wait_for(_collect(sub), WAIT)
    assert [m.offset for m in got] == [0, 1, 2, 3]
    async with client.subscribe(
        stream, start_offset=2, stop_time=datetime.now(timezone.utc)
    ) as sub:
        got = await asyncio.wait_for(_collect(sub), WAIT)
    assert [m.offset for m in got] == [2, 3]


async def test_reading_an_empty_partition_up_to_the_latest_reads_nothing(
    client: Client, stream: str
) -> None:
    # Liftbridge answers RESOURCE_EXHAUSTED "Stream is empty" to a stop at LATEST on an
    # empty partition; it was raised as a ReadonlyPartitionError.
    async with client.subscribe(
        stream, start_at=StartPosition.EARLIEST, stop_at=StopPosition.LATEST
    ) as sub:
        assert await asyncio.wait_for(_collect(sub), WAIT) == []
        assert await asyncio.wait_for(_collect(sub), WAIT) == []  # ended stays ended
    await publish_values(client, stream, [b"0"])
    async with client.subscribe(
        stream, start_at=StartPosition.EARLIEST, stop_at=StopPosition.LATEST
    ) as sub:
        assert [m.offset for m in await asyncio.wait_for(_collect(sub), WAIT)] == [0]


async def _collect(sub: Subscription) -> list[Message]:
    return [m async for m in sub]


async def test_subscribe_errors(client: Client, stream: str) -> None:
    with pytest.raises(NoSuchPartitionError):
        async with client.subscribe("no_such_stream_" + stream):
            pass
    with pytest.raises(NoSuchPartitionError):
        async with client.subscribe(stream, partition=3):
            pass


async def test_readonly_partition(client: Client, stream: str) -> None:
    await client.publish(stream, b"0")
    await client.set_stream_readonly(stream)
    with pytest.raises(ReadonlyPartitionError):
        await client.publish(stream, b"1")
    async with client.subscribe(stream, start_at=StartPosition.EARLIEST) as sub:
        assert [m.offset for m in await take(sub, 1)] == [0]
        with pytest.raises(ReadonlyPartitionError):
            await asyncio.wait_for(sub.__anext__(), WAIT)
    await client.set_stream_readonly(stream, readonly=False)
    ack = await client.publish(stream, b"1")
    assert ack is not None
    assert ack.offset == 1


async def test_pause_and_resume_by_publishing(client: Client, stream: str) -> None:
    await client.publish(stream, b"0")
    await client.pause_stream(stream, partitions=[0])
    md = await client.fetch_metadata()
    info = md.get_stream(stream)
    assert info is not None
    assert info.partitions[0].paused
    ack = await client.publish(stream, b"1")  # publishing resumes it
    assert ack is not None
    assert ack.offset == 1
    with pytest.raises(NoSuchPartitionError):
        await client.pause_stream("missing_" + stream)


# -- cursors and consumer groups --------------------------------------------------------------


async def test_cursors(client: Client, stream: str, liftbridge_cluster: Cluster) -> None:
    await skip_without_cursors(liftbridge_cluster.addresses)
    assert await client.fetch_cursor("c1", stream, 0) == -1
    await client.set_cursor("c1", stream, 0, 41)
    assert await client.fetch_cursor("c1", stream, 0) == 41
    await client.set_cursor("c1", stream, 0, 42)
    assert await client.fetch_cursor("c1", stream, 0) == 42
    assert await client.fetch_cursor("c2", stream, 0) == -1


async def test_consumer_group_calls(client: Client, stream: str, unique_name: str) -> None:
    join = await client.join_consumer_group(unique_name, "m1", [stream])
    assert join.coordinator
    # A real coordinator applies the join through Raft, a little later: until
    # then it says "consumer group does not exist". (client.consumer() waits.)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while True:
        try:
            epoch, assignments = await client.fetch_consumer_group_assignments(
                unique_name, "m1", join.epoch, coordinator=join.coordinator
            )
            break
        except NoSuchConsumerGroupError:
            assert loop.time() < deadline, "the coordinator never learnt of the join"
            await asyncio.sleep(0.05)
    assert epoch >= join.epoch
    assert assignments == {stream: [0]}
    await client.leave_consumer_group(unique_name, "m1")


async def test_a_missing_group_is_no_such_consumer_group(
    client: Client, stream: str, unique_name: str
) -> None:
    group = unique_name + "_none"
    md = await client.fetch_metadata()
    for broker in md.brokers():
        # Every broker, coordinator or not, answers NOT_FOUND "consumer group does
        # not exist" for a group it does not know.
        with pytest.raises(NoSuchConsumerGroupError) as info:
            await client.fetch_consumer_group_assignments(group, "m1", 0, coordinator=broker.id)
        assert info.value.code == "NOT_FOUND"
        assert isinstance(info.value, NoSuchStreamError)  # what it was before: still caught
    with pytest.raises(NoSuchConsumerGroupError) as info:
        await client.leave_consumer_group(group, "m1")
    assert info.value.code == "NOT_FOUND"
    coordinator = md.brokers()[0].id
    with pytest.raises(NoSuchConsumerGroupError) as info:
        await client.report_consumer_group_coordinator(group, "m1", coordinator, 0)
    assert info.value.code == "FAILED_PRECONDITION"
    # A missing stream is not a missing group.
    with pytest.raises(NoSuchStreamError) as missing:
        await client.join_consumer_group(group, "m1", [stream + "_nope"])
    assert not isinstance(missing.value, NoSuchConsumerGroupError)


# -- bad input and closing ------------------------------------------------------------------


async def test_joining_a_group_on_a_missing_stream_is_no_such_stream(
    client: Client, stream: str, unique_name: str
) -> None:
    missing = unique_name + "_nope"
    with pytest.raises(NoSuchStreamError):  # a new group
        await client.join_consumer_group(unique_name, "m1", [missing])
    await client.join_consumer_group(unique_name, "m1", [stream])
    with pytest.raises(NoSuchStreamError):  # an existing one
        await client.join_consumer_group(unique_name, "m2", [stream, missing])
    await client.leave_consumer_group(unique_name, "m1")


async def test_bad_input_fails_fast(client: Client, stream: str) -> None:
    with pytest.raises(InvalidArgumentError):
        await client.create_stream("", "x")
    with pytest.raises(InvalidArgumentError):
        await client.create_stream("a..b", "x")
    with pytest.raises(InvalidArgumentError):
        await client.create_stream("a", "")
    with pytest.raises(InvalidArgumentError):
        await client.create_stream("a", "x", partitions=0)
    with pytest.raises(InvalidArgumentError):
        await client.publish("", b"x")
    with pytest.raises(InvalidArgumentError):
        await client.publish(stream, "text")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await client.publish(stream, b"x", partition=-1)
    with pytest.raises(InvalidArgumentError):
        await client.publish(stream, b"x", partition=2**31)
    with pytest.raises(InvalidArgumentError):
        await client.publish(stream, b"x", partitioner="hash")
    with pytest.raises(InvalidArgumentError):
        await client.publish(stream, b"x", timeout=0)
    with pytest.raises(InvalidArgumentError):
        client.subscribe(stream, partition=-1)
    with pytest.raises(InvalidArgumentError):
        client.subscribe(stream, start_at=StartPosition.OFFSET)
    with pytest.raises(InvalidArgumentError):
        client.subscribe(stream, start_time=datetime(2020, 1, 1))  # naive
    with pytest.raises(InvalidArgumentError):
        client.subscribe(stream, start_offset=1, start_time_delta=1.0)
    with pytest.raises(NoSuchStreamError):
        await client.publish("unknown_" + stream, b"x")
    with pytest.raises(NoSuchStreamError):
        await client.publish("unknown_" + stream, b"x", partitioner="key")
    with pytest.raises(InvalidArgumentError):
        await client.set_cursor("c", stream, 0, -5)


async def test_calls_after_close_raise_closed_error(
    liftbridge_cluster: Cluster, unique_name: str
) -> None:
    c = await connect(liftbridge_cluster.addresses)
    await c.create_stream(unique_name, unique_name)
    broker = (await c.fetch_metadata()).brokers()[0].id
    sub = c.subscribe(unique_name)
    await sub.open()
    reader = asyncio.ensure_future(sub.__anext__())
    await asyncio.sleep(0)
    await c.close()
    await c.close()  # idempotent
    with pytest.raises(LiftbridgeClosedError):
        await asyncio.wait_for(reader, WAIT)
    for call in (
        c.publish(unique_name, b"x"),
        c.fetch_metadata(),
        c.create_stream("a", "b"),
        c.fetch_cursor("c", unique_name, 0),
        # A group member left running after its client closed must not go on
        # fetching its assignments (on new channels), which kept it in the group.
        c.fetch_consumer_group_assignments(unique_name, "m1", 0, coordinator=broker),
    ):
        with pytest.raises(LiftbridgeClosedError):
            await call
    with pytest.raises(LiftbridgeClosedError):
        c.subscribe(unique_name)
    async with await connect(liftbridge_cluster.addresses) as other:
        await other.delete_stream(unique_name)


async def test_connect_errors() -> None:
    with pytest.raises(InvalidArgumentError):
        await connect([])
    with pytest.raises(InvalidArgumentError):
        await connect("no-port")
    with pytest.raises(InvalidArgumentError, match="unknown connect option"):
        await connect("127.0.0.1:1", bogus=1)
    with pytest.raises(LiftbridgeConnectError):
        await connect("127.0.0.1:1", max_rpc_attempts=2, rpc_timeout=2.0)


# -- failover ----------------------------------------------------------------------------


@pytest.mark.fault
async def test_resilient_rpc_moves_to_another_broker(
    client: Client, liftbridge_cluster: Cluster, stream: str
) -> None:
    assert isinstance(liftbridge_cluster, LiftbridgeCluster) or pytest.skip("needs the emulator")
    await client.publish(stream, b"before")
    in_use = client._current
    assert in_use is not None
    await liftbridge_cluster.stop_broker(liftbridge_cluster.addresses.index(in_use))
    md = await client.fetch_metadata()  # the next call succeeds on another broker
    assert client._current != in_use
    assert md.get_stream(stream) is not None
    ack = await client.publish(stream, b"after")
    assert ack is not None
    assert ack.offset == 1


async def _leader_index(client: Client, cluster: LiftbridgeCluster, stream: str) -> int:
    md = await client.fetch_metadata()
    info = md.get_stream(stream)
    assert info is not None
    return cluster.broker_ids.index(info.partitions[0].leader)


async def _subscriber_across_leader_stop(
    client: Client, cluster: Cluster, unique_name: str, total: int
) -> None:
    """Publish ``total`` messages in acked batches while the partition leader stops;
    the subscriber must see every offset of the log once, in order."""
    assert isinstance(cluster, LiftbridgeCluster) or pytest.skip("needs the emulator")
    await client.create_stream(unique_name, unique_name, replication_factor=3)
    received: list[int] = []
    target: list[int] = []  # set once publishing is done: the log's length
    half = asyncio.Event()

    async def publish_all() -> None:
        batch = 250
        for start in range(0, total, batch):
            if start >= total // 2:
                half.set()
            todo = list(range(start, min(start + batch, total)))
            while todo:
                futures = [await client.publish_async(unique_name, b"%d" % i) for i in todo]
                results = await asyncio.gather(*futures, return_exceptions=True)
                # A message whose ack was lost with the broker may or may not be
                # stored: publish it again (the log may then hold it twice).
                todo = [i for i, r in zip(todo, results, strict=True) if isinstance(r, Exception)]
                for r in results:
                    if isinstance(r, Exception) and not isinstance(
                        r, (LiftbridgeConnectError, LiftbridgeTimeoutError)
                    ):
                        raise r

    async with client.subscribe(unique_name, start_at=StartPosition.EARLIEST) as sub:

        async def consume() -> None:
            async for msg in sub:
                received.append(msg.offset)
                if target and len(received) >= target[0]:
                    return

        consumer = asyncio.ensure_future(consume())
        publisher = asyncio.ensure_future(publish_all())
        await asyncio.wait_for(half.wait(), 60)
        await cluster.stop_broker(await _leader_index(client, cluster, unique_name))
        await asyncio.wait_for(publisher, 120)
        info = await client.fetch_partition_metadata(unique_name, 0)
        assert info.newest_offset + 1 >= total
        target.append(info.newest_offset + 1)
        if len(received) < target[0]:
            await asyncio.wait_for(consumer, 120)
        else:
            consumer.cancel()
        assert sub.statistics()["resubscribes"] >= 1
    assert received == list(range(target[0]))


@pytest.mark.fault
async def test_subscriber_survives_a_leader_stop(
    client: Client, liftbridge_cluster: Cluster, unique_name: str
) -> None:
    await _subscriber_across_leader_stop(client, liftbridge_cluster, unique_name, 400)


@pytest.mark.slow
@pytest.mark.fault
async def test_subscriber_survives_a_leader_stop_during_10k_messages(
    client: Client, liftbridge_cluster: Cluster, unique_name: str
) -> None:
    await _subscriber_across_leader_stop(client, liftbridge_cluster, unique_name, 10_000)


# -- the Subscribe connection pool ------------------------------------------------------------


async def _until(condition: object, timeout: float = WAIT) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():  # type: ignore[operator]
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_subscriptions_share_pooled_connections_that_expire_when_idle(
    liftbridge_cluster: Cluster, unique_name: str
) -> None:
    async with await connect(
        liftbridge_cluster.addresses, max_conns_per_broker=2, keepalive_time=0.3
    ) as c:
        await c.create_stream(unique_name, unique_name)
        await c.publish(unique_name, b"0")
        subs = [c.subscribe(unique_name, start_at=StartPosition.EARLIEST) for _ in range(5)]
        for sub in subs:
            await sub.open()
        stats = c.pool_statistics()
        assert list(stats.values()) == [2]  # five subscriptions, two connections to the leader
        for sub in subs:
            assert [m.offset for m in await take(sub, 1)] == [0]
        for sub in subs:
            await sub.aclose()
        assert c.pool_statistics() == stats  # returned, still open until idle long enough
        await _until(lambda: c.pool_statistics() == {})
        async with c.subscribe(unique_name, start_at=StartPosition.EARLIEST) as sub:
            assert [m.offset for m in await take(sub, 1)] == [0]
            assert list(c.pool_statistics().values()) == [1]


async def test_group_consumer_reads_its_partitions_and_commits_cursors(
    client: Client, unique_name: str, liftbridge_cluster: Cluster
) -> None:
    await skip_without_cursors(liftbridge_cluster.addresses)
    await client.create_stream(unique_name, unique_name, partitions=2)
    for p in (0, 1):
        for i in range(3):
            await client.publish(unique_name, b"%d-%d" % (p, i), partition=p)
    async with client.consumer(
        unique_name, [unique_name], auto_offset=StartPosition.EARLIEST, checkpoint_interval=None
    ) as member:
        assert member.assignments == {unique_name: [0, 1]}
        got: list[tuple[int, int]] = []

        async def read(n: int) -> None:
            async for msg in member:
                got.append((msg.partition, msg.offset))
                if len(got) == n:
                    return

        await asyncio.wait_for(read(6), WAIT)
        assert sorted(got) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
        await member.checkpoint()
    cursor_id = f"__group:{unique_name}"
    assert await client.fetch_cursor(cursor_id, unique_name, 0) == 2
    assert await client.fetch_cursor(cursor_id, unique_name, 1) == 2
    # A new member of the group resumes after the committed cursors.
    await client.publish(unique_name, b"new", partition=1)
    async with client.consumer(unique_name, [unique_name], checkpoint_interval=None) as member:
        msg = await asyncio.wait_for(member.__anext__(), WAIT)
        assert (msg.partition, msg.offset, msg.value) == (1, 3, b"new")


async def test_a_member_does_not_deliver_what_it_queued_from_a_partition_it_lost(
    client: Client, unique_name: str, liftbridge_cluster: Cluster
) -> None:
    # The only member queues both partitions' messages; a second member then
    # takes one partition and reads it from the group's cursor. What the first
    # had queued of it must not reach its reader too (each message to one
    # member), nor move that partition's cursor later.
    await skip_without_cursors(liftbridge_cluster.addresses)
    await client.create_stream(unique_name, unique_name, partitions=2)
    for p in (0, 1):
        for i in range(3):
            await client.publish(unique_name, b"%d-%d" % (p, i), partition=p)
    group = unique_name + "_g"
    options: dict[str, Any] = {
        "fetch_interval": 0.1,
        "checkpoint_interval": None,
        "auto_offset": StartPosition.EARLIEST,
    }
    loop = asyncio.get_running_loop()
    async with client.consumer(group, [unique_name], consumer_id="a", **options) as a:
        deadline = loop.time() + WAIT
        while a._queue.qsize() < 6:  # everything queued, nothing read yet
            assert loop.time() < deadline, a._queue.qsize()
            await asyncio.sleep(0.02)
        async with client.consumer(group, [unique_name], consumer_id="b", **options) as b:
            deadline = loop.time() + 2 * WAIT
            while len(a.assignments.get(unique_name, [])) != 1 or not b.assignments:
                assert loop.time() < deadline, (a.assignments, b.assignments)
                await asyncio.sleep(0.02)
            (kept,) = a.assignments[unique_name]
            await client.publish(unique_name, b"end", partition=kept)
            got_a: list[Message] = []
            while not got_a or got_a[-1].value != b"end":
                got_a.append(await asyncio.wait_for(a.__anext__(), WAIT))
            got_b = [await asyncio.wait_for(b.__anext__(), WAIT) for _ in range(3)]
            assert [(m.partition, m.offset) for m in got_a] == [(kept, o) for o in range(4)]
            assert [(m.partition, m.offset) for m in got_b] == [(1 - kept, o) for o in range(3)]
            await a.checkpoint()
    cursor_id = f"__group:{group}"
    assert await client.fetch_cursor(cursor_id, unique_name, 1 - kept) == 2  # b's, on close


async def test_publish_async_errors_arrive_on_the_future(client: Client, stream: str) -> None:
    future = await client.publish_async("missing_" + stream, b"x", partition=0)
    with pytest.raises(NoSuchStreamError):
        await asyncio.wait_for(future, WAIT)
    ok = await client.publish_async(stream, b"x")
    ack = await asyncio.wait_for(ok, WAIT)
    assert ack is not None
    assert ack.offset == 0


async def test_publish_async_over_the_nats_payload_limit_fails_that_message_only(
    client: Client, stream: str
) -> None:
    from aioclients.liftbridge import LiftbridgeServerError

    first = await client.publish_async(stream, b"a")
    big = await client.publish_async(stream, b"x" * (2 << 20))  # NATS takes 1 MiB
    last = await client.publish_async(stream, b"b")
    with pytest.raises(LiftbridgeServerError, match="maximum payload exceeded"):
        await asyncio.wait_for(big, WAIT)
    acks = [await asyncio.wait_for(f, WAIT) for f in (first, last)]
    assert [a.offset for a in acks if a is not None] == [0, 1]


@pytest.mark.fault
@pytest.mark.parametrize("liftbridge_cluster", [1], indirect=True)
async def test_subscription_gives_up_after_resubscribe_wait_time(
    liftbridge_cluster: Cluster, unique_name: str
) -> None:
    assert isinstance(liftbridge_cluster, LiftbridgeCluster) or pytest.skip("needs the emulator")
    from aioclients.liftbridge import SubscriptionLostError

    async with await connect(liftbridge_cluster.addresses, resubscribe_wait_time=0.5) as c:
        await c.create_stream(unique_name, unique_name)
        await c.publish(unique_name, b"0")
        async with c.subscribe(unique_name, start_at=StartPosition.EARLIEST) as sub:
            assert [m.offset for m in await take(sub, 1)] == [0]
            await liftbridge_cluster.stop_broker(0)
            with pytest.raises(SubscriptionLostError) as info:
                await asyncio.wait_for(sub.__anext__(), WAIT)
            assert info.value.last_offset == 0
            assert "resubscribe from offset 1" in str(info.value)


async def test_a_message_over_the_size_limit_is_a_clear_error(
    liftbridge_cluster: Cluster, unique_name: str
) -> None:
    from aioclients.liftbridge import LiftbridgeServerError

    options = [("grpc.max_send_message_length", 4096)]
    async with await connect(liftbridge_cluster.addresses, grpc_options=options) as c:
        await c.create_stream(unique_name, unique_name)
        with pytest.raises(LiftbridgeServerError, match="too large") as info:
            await c.publish(unique_name, b"x" * 10_000)
        assert not isinstance(info.value, ReadonlyPartitionError)
        ack = await c.publish(unique_name, b"x" * 100)
        assert ack is not None
        assert ack.offset == 0


async def test_pausing_ends_a_subscription_and_resume_reopens(client: Client, stream: str) -> None:
    from aioclients.liftbridge import PartitionPausedError

    await client.publish(stream, b"0")
    async with client.subscribe(stream, start_at=StartPosition.EARLIEST) as sub:
        assert [m.offset for m in await take(sub, 1)] == [0]
        await client.pause_stream(stream)
        with pytest.raises(PartitionPausedError):
            await asyncio.wait_for(sub.__anext__(), WAIT)
    with pytest.raises(PartitionPausedError, match="resume=True"):
        async with client.subscribe(stream, start_at=StartPosition.EARLIEST):
            pass
    async with client.subscribe(stream, start_at=StartPosition.EARLIEST, resume=True) as sub:
        assert [m.offset for m in await take(sub, 1)] == [0]


@pytest.mark.fault
async def test_subscription_follows_a_leader_change_without_a_broker_stop(
    client: Client, liftbridge_cluster: Cluster, unique_name: str
) -> None:
    assert isinstance(liftbridge_cluster, LiftbridgeCluster) or pytest.skip("needs the emulator")
    await client.create_stream(unique_name, unique_name, replication_factor=3)
    await publish_values(client, unique_name, [b"0", b"1"])
    async with client.subscribe(unique_name, start_at=StartPosition.EARLIEST) as sub:
        assert [m.offset for m in await take(sub, 2)] == [0, 1]
        # Move leadership inside the emulator, as a controller would (no public API for it).
        part = liftbridge_cluster._state.get_partition(unique_name, 0)
        assert part is not None
        part.leader = next(b for b in liftbridge_cluster.broker_ids if b != part.leader)
        part.leader_epoch += 1
        await liftbridge_cluster.leadership_changed()
        await publish_values(client, unique_name, [b"2", b"3"])
        assert [m.offset for m in await take(sub, 2)] == [2, 3]
        assert sub.statistics()["resubscribes"] == 1


@pytest.mark.slow  # up to ~10 s on a real cluster
async def test_read_from_an_isr_replica(client: Client, unique_name: str) -> None:
    if await broker_count(client) < 3:
        pytest.skip("needs a cluster of at least 3 brokers (replication factor 3)")
    await client.create_stream(unique_name, unique_name, replication_factor=3)
    await publish_values(client, unique_name, [b"0", b"1"])
    async with client.subscribe(
        unique_name, start_at=StartPosition.EARLIEST, read_isr_replica=True
    ) as sub:
        assert [m.value for m in await take(sub, 2, wait=REPLICATED_WAIT)] == [b"0", b"1"]


@pytest.mark.slow  # up to ~10 s on a real cluster
async def test_an_all_ack_on_a_new_replicated_partition(client: Client, unique_name: str) -> None:
    replicas = min(3, await broker_count(client))
    if replicas < 2:
        pytest.skip("needs a cluster of at least 2 brokers (a replicated partition)")
    await client.create_stream(unique_name, unique_name, replication_factor=replicas)
    ack = await client.publish(unique_name, b"0", ack_policy=AckPolicy.ALL, timeout=REPLICATED_WAIT)
    assert ack is not None
    assert ack.offset == 0


# -- what a real cluster does a little later (Raft) -----------------------------------------


async def test_publish_right_after_create_and_delete(client: Client, unique_name: str) -> None:
    for _ in range(3):
        await client.create_stream(unique_name, unique_name, partitions=2)
        acks = [await client.publish(unique_name, b"x", partition=p) for p in (0, 1)]
        assert [a.offset for a in acks if a is not None] == [0, 0]
        await client.delete_stream(unique_name)
        with pytest.raises((NoSuchStreamError, NoSuchPartitionError)):
            await client.publish(unique_name, b"y", partition=0)


async def test_readonly_flips_are_seen_by_the_next_publish(client: Client, stream: str) -> None:
    for i in range(3):
        await client.set_stream_readonly(stream)
        with pytest.raises(ReadonlyPartitionError):
            await client.publish(stream, b"refused")
        await client.set_stream_readonly(stream, readonly=False)
        ack = await client.publish(stream, b"ok")
        assert ack is not None
        assert ack.offset == i


async def test_two_members_join_a_new_group_at_once(client: Client, unique_name: str) -> None:
    await client.create_stream(unique_name, unique_name, partitions=2)
    group = unique_name + "_g"
    joins = await asyncio.gather(
        client.join_consumer_group(group, "m1", [unique_name]),
        client.join_consumer_group(group, "m2", [unique_name]),
    )
    assert joins[0].coordinator == joins[1].coordinator
    for member in ("m1", "m2"):
        await client.leave_consumer_group(group, member)


async def test_two_consumers_start_at_once_and_share_the_partitions(
    client: Client, unique_name: str, liftbridge_cluster: Cluster
) -> None:
    await skip_without_cursors(liftbridge_cluster.addresses)
    await client.create_stream(unique_name, unique_name, partitions=2)
    group = unique_name + "_g"
    c1 = client.consumer(group, [unique_name], consumer_id="m1", fetch_interval=0.2)
    c2 = client.consumer(group, [unique_name], consumer_id="m2", fetch_interval=0.2)
    await asyncio.wait_for(asyncio.gather(c1.__aenter__(), c2.__aenter__()), 2 * WAIT)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * WAIT
        # Both end up with one partition each once they have seen the last epoch.
        while sorted(p for c in (c1, c2) for p in c.assignments.get(unique_name, [])) != [
            0,
            1,
        ] or not (c1.assignments and c2.assignments):
            assert loop.time() < deadline, (c1.assignments, c2.assignments)
            await asyncio.sleep(0.05)
    finally:
        await c1.aclose()
        await c2.aclose()


async def test_a_start_offset_past_the_end_starts_there(client: Client, stream: str) -> None:
    # A real broker asked to start past the end starts at its next message
    # (offset 1 here); the client drops what lies before the offset asked for.
    await client.publish(stream, b"0")
    async with client.subscribe(stream, start_offset=3) as sub:
        await publish_values(client, stream, [b"1", b"2", b"3", b"4"])
        assert [m.offset for m in await take(sub, 2)] == [3, 4]


async def test_tls_with_an_ssl_context(nats_server: object, unique_name: str) -> None:
    import ssl

    import grpc
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    server_creds = grpc.ssl_server_credentials(
        [(cert.private_key_pem.bytes(), b"".join(p.bytes() for p in cert.cert_chain_pems))]
    )
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(ctx)
    url = nats_server.url  # type: ignore[attr-defined]
    async with LiftbridgeCluster(1, nats_url=url, server_credentials=server_creds) as cluster:
        async with await connect(cluster.addresses, tls=ctx) as c:
            await c.create_stream(unique_name, unique_name)
            ack = await c.publish(unique_name, b"secret")
            assert ack is not None
            async with c.subscribe(unique_name, start_at=StartPosition.EARLIEST) as sub:
                assert [m.value for m in await take(sub, 1)] == [b"secret"]
        # Without the CA the handshake fails: no broker is reachable.
        other = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        with pytest.raises(LiftbridgeConnectError):
            await connect(cluster.addresses, tls=other, max_rpc_attempts=2, rpc_timeout=3.0)


@pytest.mark.parametrize("transport", ["http2", "grpc"])
async def test_both_stream_transports_subscribe_and_publish_async(
    liftbridge_cluster: Cluster, unique_name: str, transport: str
) -> None:
    # The default runs Subscribe/PublishAsync on our HTTP/2 code; "grpc" keeps
    # them on grpc.aio (the path taken with grpc.ChannelCredentials).
    from aioclients.liftbridge._io._h2 import Http2Channel

    async with await connect(liftbridge_cluster.addresses, stream_transport=transport) as c:
        await c.create_stream(unique_name, unique_name)
        futures = [await c.publish_async(unique_name, b"%d" % i) for i in range(50)]
        acks = await asyncio.wait_for(asyncio.gather(*futures), WAIT)
        assert [a.offset for a in acks if a] == list(range(50))
        async with c.subscribe(unique_name, start_at=StartPosition.EARLIEST) as sub:
            got = await take(sub, 50)
            assert [m.value for m in got] == [b"%d" % i for i in range(50)]
            channel = sub._channel
        uses_h2 = isinstance(channel, Http2Channel)
        assert uses_h2 is (transport == "http2")
        assert c._stream_channels  # PublishAsync's channel
        assert all(isinstance(ch, Http2Channel) is uses_h2 for ch in c._stream_channels.values())


@pytest.mark.parametrize("transport", ["http2", "grpc"])
async def test_publish_runs_on_the_stream_channel(
    liftbridge_cluster: Cluster, unique_name: str, transport: str
) -> None:
    # Publish (one unary call per message) takes the broker's PublishAsync
    # channel: our HTTP/2 code by default, grpc.aio with "grpc".
    from aioclients.liftbridge._io._h2 import Http2Channel

    async with await connect(liftbridge_cluster.addresses, stream_transport=transport) as c:
        await c.create_stream(unique_name, unique_name)
        assert not c._stream_channels
        acks = [await c.publish(unique_name, b"%d" % i) for i in range(3)]
        assert [a.offset for a in acks if a] == [0, 1, 2]
        assert c._stream_channels
        uses_h2 = transport == "http2"
        assert all(isinstance(ch, Http2Channel) is uses_h2 for ch in c._stream_channels.values())


@pytest.mark.parametrize("transport", ["http2", "grpc"])
async def test_cursors_and_partition_metadata_run_on_the_stream_channel(
    liftbridge_cluster: Cluster, unique_name: str, transport: str
) -> None:
    # Like publish: the cursor calls (a group consumer's commits) and
    # FetchPartitionMetadata go to the leader over its stream channel.
    from aioclients.liftbridge._io._h2 import Http2Channel

    async with await connect(liftbridge_cluster.addresses, stream_transport=transport) as c:
        await c.create_stream(unique_name, unique_name)
        assert not c._stream_channels
        info = await c.fetch_partition_metadata(unique_name, 0)
        assert info.id == 0
        assert c._stream_channels
        await c.set_cursor("reader", unique_name, 0, 41)
        assert await c.fetch_cursor("reader", unique_name, 0) == 41
        uses_h2 = transport == "http2"
        assert all(isinstance(ch, Http2Channel) is uses_h2 for ch in c._stream_channels.values())


async def test_stream_transport_is_checked(liftbridge_cluster: Cluster) -> None:
    import grpc

    with pytest.raises(InvalidArgumentError, match="stream_transport"):
        await connect(liftbridge_cluster.addresses, stream_transport="quic")
    creds = grpc.ssl_channel_credentials()
    with pytest.raises(InvalidArgumentError, match="cannot be read back"):
        await connect(liftbridge_cluster.addresses, tls=creds, stream_transport="http2")


# -- what a stopped subscriber buffers -------------------------------------------------------

STREAM_WINDOW = 4 * 1024 * 1024  # the HTTP/2 stream window of the client's own transport


def _buffered(sub: Subscription) -> tuple[int, int]:
    """(bytes the stopped subscriber holds, what the broker may still send), for the
    client's own HTTP/2 transport: queued messages with their 5-byte prefixes and
    the part of a message still arriving."""
    inner = sub._call._call
    conn = inner._conn
    stream = conn.h2._streams[inner._stream_id]
    queued = sum(len(m) + 5 for m in inner._queue)
    return queued + len(stream.partial), stream.recv_window


async def _fill_while_stopped(client: Client, stream: str, sizes: list[int]) -> int:
    """Publish messages of ``sizes``; a subscriber reads one and stops. Returns what it
    buffers once the broker cannot send more (its stream window is used up)."""
    futures = [await client.publish_async(stream, bytes(n)) for n in sizes]
    await asyncio.wait_for(asyncio.gather(*futures), 30)
    async with client.subscribe(stream, start_at=StartPosition.EARLIEST) as sub:
        first = await asyncio.wait_for(sub.__anext__(), WAIT)
        assert first.offset == 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while True:  # until the window is used up: then the broker must stop
            buffered, window = _buffered(sub)
            if window == 0:
                return buffered
            assert loop.time() < deadline, f"the window never filled ({buffered}, {window})"
            await asyncio.sleep(0.01)


async def test_a_stopped_subscriber_buffers_at_most_the_stream_window(
    client: Client, stream: str
) -> None:
    # 6 MiB of 16 KiB messages: more than the window.
    buffered = await _fill_while_stopped(client, stream, [16 * 1024] * 384)
    assert STREAM_WINDOW - 64 * 1024 < buffered <= STREAM_WINDOW


async def test_a_stopped_subscriber_buffers_the_window_plus_one_message_that_did_not_fit(
    client: Client, stream: str
) -> None:
    # 3.75 MiB of small messages, then one of 900 KiB that does not fit in what
    # is left of the window: it is let in whole (or the stream would stall).
    big = 900 * 1024
    sizes = [16 * 1024] * 240 + [big] + [16 * 1024] * 64
    buffered = await _fill_while_stopped(client, stream, sizes)
    assert STREAM_WINDOW < buffered <= STREAM_WINDOW + big + 5 + 1024  # + one envelope


async def test_a_client_used_on_another_event_loop_says_so_at_once(
    client: Client, stream: str
) -> None:
    # Connected in one asyncio.run and used in the next, it raised RuntimeError("Event
    # loop is closed") from grpc, with a "coroutine was never awaited" warning.
    def on_another_loop(call: Callable[[], Awaitable[object]]) -> BaseException | None:
        async def main() -> None:
            await call()

        try:
            asyncio.run(main())
        except BaseException as exc:  # checked on the test's loop
            return exc
        return None

    for call in (client.fetch_metadata, lambda: client.publish(stream, b"x")):
        error = await asyncio.to_thread(on_another_loop, call)
        assert isinstance(error, LocalProtocolError), repr(error)
        assert "connected on another event loop" in str(error)
    await client.publish(stream, b"still usable on its own loop")


@pytest.mark.parametrize(
    ("options", "deadline"),
    [
        ({}, 25.0),  # the default: room for a resumed __cursors partition (~9 s)
        ({"rpc_timeout": 0.5}, 0.5),  # a caller's own deadline holds for cursors too
        ({"rpc_timeout": 0.5, "cursor_timeout": 40.0}, 40.0),
        ({"cursor_timeout": 3.0}, 3.0),
    ],
)
async def test_set_cursor_deadline_follows_the_connect_options(
    liftbridge_cluster: Cluster, options: dict[str, float], deadline: float
) -> None:
    async with await connect(liftbridge_cluster.addresses, **options) as c:
        assert c._brokers.cursor_timeout == deadline


async def test_a_bad_cursor_timeout_is_refused(liftbridge_cluster: Cluster) -> None:
    with pytest.raises(InvalidArgumentError, match="cursor_timeout"):
        await connect(liftbridge_cluster.addresses, cursor_timeout=-1)
