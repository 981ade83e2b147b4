"""The Liftbridge emulator lags where a real v1.9.0 cluster lags (issue 12, REPORT.md L1-L7).

Driven through the raw generated stubs, against an emulator of 3 brokers with
``metadata_delay`` and ``replica_max_idle_wait`` set, or against the real
cluster named by ``AIOCLIENTS_TEST_LIFTBRIDGE`` (and ``AIOCLIENTS_TEST_NATS_URL``).
A real cluster's lag is a few milliseconds and varies, so what only shows inside
the lag ("right after create, another broker does not know the stream") is
asserted on the emulator only, where it is certain; what holds afterwards (every
broker catches up; the texts and codes; the high watermark) is asserted on both.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._pb import api_pb2_grpc as pbg
from aioclients.testing import LiftbridgeCluster
from aioclients.testing._liftbridge_fixtures import LIFTBRIDGE_ENV

TIMEOUT = 10.0
FIRST_REPLICATED = 25.0  # replica.max.idle.wait is 10 s on a real server
LAG = 0.5  # the emulator's metadata_delay here
IDLE = 0.5  # the emulator's replica_max_idle_wait here


class Cluster:
    """Stubs for every broker, by broker id."""

    def __init__(self, addresses: list[str], emulated: bool) -> None:
        self.emulated = emulated
        self.addresses = addresses
        self._channels = [grpc.aio.insecure_channel(a) for a in addresses]
        self.stubs = [pbg.APIStub(ch) for ch in self._channels]
        self.by_id: dict[str, pbg.APIStub] = {}

    async def start(self) -> None:
        md = await self.stubs[0].FetchMetadata(pb.FetchMetadataRequest(), timeout=TIMEOUT)
        ids = {f"{b.host}:{b.port}": b.id for b in md.brokers}
        for address, stub in zip(self.addresses, self.stubs, strict=True):
            self.by_id[ids.get(address, address)] = stub

    async def close(self) -> None:
        for ch in self._channels:
            await ch.close()

    async def partition(
        self, stub: pbg.APIStub, stream: str, partition: int = 0
    ) -> pb.PartitionMetadata | None:
        md = await stub.FetchMetadata(pb.FetchMetadataRequest(streams=[stream]), timeout=TIMEOUT)
        sm = md.streamMetadata[0]
        if sm.error == pb.StreamMetadata.UNKNOWN_STREAM:
            return None
        return sm.partitions[partition]

    async def leader(self, stream: str, partition: int = 0) -> tuple[str, pbg.APIStub]:
        async def known() -> pb.PartitionMetadata | None:
            return await self.partition(self.stubs[0], stream, partition)

        p = await eventually(known)
        return p.leader, self.by_id[p.leader]


@pytest.fixture
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    external = os.environ.get(LIFTBRIDGE_ENV)
    if external:
        c = Cluster([a.strip() for a in external.split(",") if a.strip()], emulated=False)
        try:
            await c.start()
            yield c
        finally:
            await c.close()
        return
    nats = request.getfixturevalue("nats_server")
    async with LiftbridgeCluster(
        3, nats_url=nats.url, metadata_delay=LAG, replica_max_idle_wait=IDLE
    ) as emulator:
        c = Cluster(emulator.addresses, emulated=True)
        try:
            await c.start()
            yield c
        finally:
            await c.close()


def within_lag(t0: float) -> bool:
    """Whether less than the emulator's lag passed since ``t0`` (loop time): only then
    is a lagging answer certain (a busy machine may take longer between two calls)."""
    return asyncio.get_running_loop().time() - t0 < LAG * 0.9


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = TIMEOUT) -> Any:
    """Poll ``check`` until it returns something truthy; that value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert loop.time() < deadline, f"not within {timeout}s: {check}"
        await asyncio.sleep(0.02)


async def rpc_error(aw: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await aw
    return info.value


def needs_brokers(c: Cluster, n: int) -> None:
    if len(c.stubs) < n:
        pytest.skip(f"needs a cluster of at least {n} brokers")


async def create(c: Cluster, name: str, **kw: Any) -> None:
    await c.stubs[0].CreateStream(
        pb.CreateStreamRequest(subject=f"{name}.subj", name=name, **kw), timeout=TIMEOUT
    )


def lagging(c: Cluster, stream_leaders: set[str]) -> list[pbg.APIStub]:
    """The emulator's brokers that apply metadata late for a stream: neither the
    metadata leader (broker-0) nor a leader of one of its partitions."""
    return [s for b, s in c.by_id.items() if b != "broker-0" and b not in stream_leaders]


# -- L2: metadata reaches the other brokers late --------------------------------------------


async def test_a_new_stream_reaches_the_other_brokers_late(
    cluster: Cluster, unique_name: str
) -> None:
    needs_brokers(cluster, 3)
    t0 = asyncio.get_running_loop().time()
    await create(cluster, unique_name)
    leader, _ = await cluster.leader(unique_name)
    if cluster.emulated:
        (late, *_) = lagging(cluster, {leader})
        p = await cluster.partition(late, unique_name)
        if within_lag(t0):
            assert p is None
        try:
            await late.Publish(pb.PublishRequest(stream=unique_name, value=b"x"), timeout=TIMEOUT)
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND  # noqa: PT017
            assert e.details() == f"no such stream: {unique_name}"  # noqa: PT017
        else:
            assert not within_lag(t0), "a lagging broker knew the new stream"
    for stub in cluster.stubs:  # every broker knows it soon after

        async def known(stub: pbg.APIStub = stub) -> Any:
            return await cluster.partition(stub, unique_name)

        await eventually(known)
    for stub in cluster.stubs:
        resp = await stub.Publish(pb.PublishRequest(stream=unique_name, value=b"x"), timeout=5)
        assert resp.ack.stream == unique_name


async def test_a_deleted_stream_stays_a_while_on_the_other_brokers(
    cluster: Cluster, unique_name: str
) -> None:
    needs_brokers(cluster, 3)
    await create(cluster, unique_name)
    leader, _ = await cluster.leader(unique_name)
    for stub in cluster.stubs:

        async def known(stub: pbg.APIStub = stub) -> Any:
            return await cluster.partition(stub, unique_name)

        await eventually(known)
    t0 = asyncio.get_running_loop().time()
    await cluster.stubs[0].DeleteStream(pb.DeleteStreamRequest(name=unique_name), timeout=TIMEOUT)
    if cluster.emulated:
        (late, *_) = lagging(cluster, set())
        p = await cluster.partition(late, unique_name)
        if within_lag(t0):
            assert p is not None
        # The partition leader, lagging too, still takes a publish.
        if leader != "broker-0" and within_lag(t0 + LAG / 3):
            resp = await cluster.by_id[leader].Publish(
                pb.PublishRequest(stream=unique_name, value=b"late"), timeout=TIMEOUT
            )
            assert resp.ack.offset == 0
    for stub in cluster.stubs:

        async def gone(stub: pbg.APIStub = stub) -> bool:
            return await cluster.partition(stub, unique_name) is None

        await eventually(gone)


async def test_pause_reaches_the_other_brokers_late_and_paused_then_sticks(
    cluster: Cluster, unique_name: str
) -> None:
    """L2 and L3: right after a pause a lagging broker says not paused; once every
    broker has it, ``paused`` stays true even after a publish resumed the partition."""
    needs_brokers(cluster, 3)
    await create(cluster, unique_name)
    _, leader_stub = await cluster.leader(unique_name)
    for stub in cluster.stubs:

        async def known(stub: pbg.APIStub = stub) -> Any:
            return await cluster.partition(stub, unique_name)

        await eventually(known)
    t0 = asyncio.get_running_loop().time()
    await cluster.stubs[0].PauseStream(pb.PauseStreamRequest(name=unique_name), timeout=TIMEOUT)
    if cluster.emulated:
        (late, *_) = lagging(cluster, set())
        p = await cluster.partition(late, unique_name)
        assert p is not None
        if within_lag(t0):
            assert not p.paused
    for stub in cluster.stubs:

        async def paused(stub: pbg.APIStub = stub) -> bool:
            p = await cluster.partition(stub, unique_name)
            return p is not None and p.paused

        await eventually(paused)
    resp = await leader_stub.Publish(
        pb.PublishRequest(stream=unique_name, value=b"resumes"), timeout=TIMEOUT
    )
    assert resp.ack.offset == 0
    sub = leader_stub.Subscribe(pb.SubscribeRequest(stream=unique_name, startPosition=pb.EARLIEST))
    try:
        first = await asyncio.wait_for(sub.read(), TIMEOUT)
        assert first == pb.Message()  # the confirmation
        msg = await asyncio.wait_for(sub.read(), TIMEOUT)
        assert msg.value == b"resumes"  # resumed...
    finally:
        sub.cancel()
    for stub in cluster.stubs:  # ...but every broker still says paused
        p = await cluster.partition(stub, unique_name)
        assert p is not None
        assert p.paused


async def test_readonly_reaches_the_partition_leader_late(
    cluster: Cluster, unique_name: str
) -> None:
    """C9: right after readonly=False the lagging leader drops a publish without an ack."""
    await create(cluster, unique_name)
    leader, leader_stub = await cluster.leader(unique_name)
    if cluster.emulated and leader == "broker-0":
        pytest.skip("the partition landed on the metadata leader, which does not lag")
    t0 = 0.0
    for ro in (True, False):
        t0 = asyncio.get_running_loop().time()
        await cluster.stubs[0].SetStreamReadonly(
            pb.SetStreamReadonlyRequest(name=unique_name, readonly=ro), timeout=TIMEOUT
        )
        if ro:

            async def readonly() -> bool:
                p = await cluster.partition(leader_stub, unique_name)
                return p is not None and p.readonly

            await eventually(readonly)
    if cluster.emulated and within_lag(t0 + LAG / 2):
        # broker-0 has applied readonly=False (it lets the publish through), the
        # partition leader not yet: the message is dropped, no ack comes.
        err = await rpc_error(
            cluster.stubs[0].Publish(
                pb.PublishRequest(stream=unique_name, value=b"x"), timeout=LAG / 2
            )
        )
        assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED

    async def accepted() -> Any:
        try:
            return await cluster.stubs[0].Publish(
                pb.PublishRequest(stream=unique_name, value=b"y"), timeout=1.0
            )
        except grpc.aio.AioRpcError as e:
            if e.code() not in (
                grpc.StatusCode.FAILED_PRECONDITION,
                grpc.StatusCode.DEADLINE_EXCEEDED,
            ):
                raise
            return None

    resp = await eventually(accepted)
    assert resp.ack.offset == 0  # nothing refused or dropped was stored


# -- L4: offsets in FetchMetadata are the answering broker's --------------------------------


async def test_metadata_offsets_are_the_answering_brokers_own(
    cluster: Cluster, unique_name: str
) -> None:
    needs_brokers(cluster, 2)
    await create(cluster, unique_name)  # replication factor 1
    leader, leader_stub = await cluster.leader(unique_name)
    resp = await leader_stub.Publish(pb.PublishRequest(stream=unique_name, value=b"a"), timeout=5)
    assert resp.ack.offset == 0
    p = await cluster.partition(leader_stub, unique_name)
    assert p is not None
    assert (p.highWatermark, p.newestOffset) == (0, 0)
    other = next(s for b, s in cluster.by_id.items() if b != leader)

    async def known() -> Any:
        return await cluster.partition(other, unique_name)

    p = await eventually(known)
    assert (p.highWatermark, p.newestOffset) == (-1, -1)  # holds no replica


# -- L1: the high watermark of a replicated partition moves on the followers' fetch ---------


async def test_first_message_of_a_replicated_partition_waits_for_the_followers_fetch(
    cluster: Cluster, unique_name: str
) -> None:
    needs_brokers(cluster, 2)
    await create(cluster, unique_name, replicationFactor=2)
    _, leader_stub = await cluster.leader(unique_name)
    loop = asyncio.get_running_loop()
    sub = leader_stub.Subscribe(pb.SubscribeRequest(stream=unique_name, startPosition=pb.EARLIEST))
    try:
        assert await asyncio.wait_for(sub.read(), TIMEOUT) == pb.Message()
        start = loop.time()
        resp = await leader_stub.Publish(
            pb.PublishRequest(stream=unique_name, value=b"first", ackPolicy=pb.LEADER), timeout=5
        )
        acked = loop.time() - start
        assert resp.ack.offset == 0
        msg = await asyncio.wait_for(sub.read(), FIRST_REPLICATED)
        seen = loop.time() - start
        assert msg.value == b"first"
        if cluster.emulated:
            assert acked < IDLE / 2  # the leader acks at once...
            assert seen >= IDLE * 0.5  # ...readers wait for the followers' idle fetch
        # Later messages: the leader wakes the followers, no idle wait; an ALL ack
        # comes once they have it.
        start = loop.time()
        resp = await leader_stub.Publish(
            pb.PublishRequest(stream=unique_name, value=b"second", ackPolicy=pb.ALL),
            timeout=FIRST_REPLICATED,
        )
        assert resp.ack.offset == 1
        msg = await asyncio.wait_for(sub.read(), TIMEOUT)
        assert msg.value == b"second"
        if cluster.emulated:
            assert loop.time() - start < IDLE / 2
    finally:
        sub.cancel()
    # A follower learns the high watermark on its next fetch.
    p = await cluster.partition(leader_stub, unique_name)
    assert p is not None
    follower = next(r for r in p.replicas if r != p.leader)

    async def caught_up() -> bool:
        fp = await cluster.partition(cluster.by_id[follower], unique_name)
        return fp is not None and fp.highWatermark == 1 and fp.newestOffset == 1

    await eventually(caught_up, FIRST_REPLICATED)


async def test_ack_all_on_a_new_replicated_partition_waits_for_the_followers(
    cluster: Cluster, unique_name: str
) -> None:
    needs_brokers(cluster, 2)
    await create(cluster, unique_name, replicationFactor=2)
    _, leader_stub = await cluster.leader(unique_name)
    loop = asyncio.get_running_loop()
    start = loop.time()
    resp = await leader_stub.Publish(
        pb.PublishRequest(stream=unique_name, value=b"a", ackPolicy=pb.ALL),
        timeout=FIRST_REPLICATED,
    )
    assert resp.ack.offset == 0
    if cluster.emulated:
        assert loop.time() - start >= IDLE * 0.5


# -- L5, L6: subscribing --------------------------------------------------------------------


async def test_subscribe_past_the_high_watermark_gets_the_next_message(
    cluster: Cluster, unique_name: str
) -> None:
    await create(cluster, unique_name)
    _, leader_stub = await cluster.leader(unique_name)
    for i in range(5):
        resp = await leader_stub.Publish(
            pb.PublishRequest(stream=unique_name, value=b"%d" % i), timeout=5
        )
        assert resp.ack.offset == i
    sub = leader_stub.Subscribe(
        pb.SubscribeRequest(stream=unique_name, startPosition=pb.OFFSET, startOffset=100)
    )
    try:
        assert await asyncio.wait_for(sub.read(), TIMEOUT) == pb.Message()
        for v in (b"5", b"6"):
            await leader_stub.Publish(pb.PublishRequest(stream=unique_name, value=v), timeout=5)
        msgs = [await asyncio.wait_for(sub.read(), TIMEOUT) for _ in range(2)]
        assert [(m.offset, m.value) for m in msgs] == [(5, b"5"), (6, b"6")]
    finally:
        sub.cancel()


async def _paused(cluster: Cluster, stub: pbg.APIStub, name: str) -> None:
    """Pause ``name`` and wait until its leader (``stub``) has applied it."""
    await cluster.stubs[0].PauseStream(pb.PauseStreamRequest(name=name), timeout=TIMEOUT)

    async def paused() -> bool:
        p = await cluster.partition(stub, name)
        return p is not None and p.paused

    await eventually(paused)


async def _subscribe_outcome(stub: pbg.APIStub, name: str, **request: Any) -> tuple[bool, Any, str]:
    """(confirmed?, status code, details) of a Subscribe (EARLIEST unless ``request``
    says otherwise) that must fail."""
    call = stub.Subscribe(
        pb.SubscribeRequest(stream=name, **({"startPosition": pb.EARLIEST} | request))
    )
    confirmed = False
    try:
        while True:
            item = await asyncio.wait_for(call.read(), TIMEOUT)
            assert item is not grpc.aio.EOF, "a subscription to a paused partition ended cleanly"
            assert item == pb.Message(), "a paused partition delivered a message"
            confirmed = True
    except grpc.aio.AioRpcError as e:
        return confirmed, e.code(), e.details() or ""
    finally:
        call.cancel()


async def test_subscribe_to_a_paused_partition(cluster: Cluster, unique_name: str) -> None:
    """L5: no paused check in Subscribe; the reader meets the closed log."""
    full, empty = f"{unique_name}_f", f"{unique_name}_e"
    await create(cluster, full)
    await create(cluster, empty)
    _, full_stub = await cluster.leader(full)
    _, empty_stub = await cluster.leader(empty)
    await full_stub.Publish(pb.PublishRequest(stream=full, value=b"a"), timeout=5)
    await _paused(cluster, full_stub, full)
    await _paused(cluster, empty_stub, empty)
    closed_now = (
        False,
        grpc.StatusCode.INTERNAL,
        "Failed to create stream reader: segment has been closed",
    )
    closed_later = (True, grpc.StatusCode.FAILED_PRECONDITION, "commit log was closed")
    outcome = await _subscribe_outcome(full_stub, full)
    # A reader that needs a segment fails at once (the real single node; the real
    # cluster answers the second way while the high watermark is behind).
    assert outcome in (closed_now, closed_later)
    if cluster.emulated:
        assert outcome == closed_now
    # A reader with nothing to read yet is confirmed, then ends.
    assert await _subscribe_outcome(empty_stub, empty) == closed_later
    # Start and stop offsets are looked up first: by time, the lookup meets the
    # closed log (empty or not); then the stop is checked against the start.
    lookup_failed = (
        False,
        grpc.StatusCode.INTERNAL,
        "Failed to lookup offset for timestamp: "
        "failed to find log segment for timestamp: segment has been closed",
    )
    for stub, name in ((full_stub, full), (empty_stub, empty)):
        by_time = {"startPosition": pb.TIMESTAMP, "startTimestamp": 1}
        assert await _subscribe_outcome(stub, name, **by_time) == lookup_failed
        stop_time = {"stopPosition": pb.STOP_TIMESTAMP, "stopTimestamp": time.time_ns()}
        assert await _subscribe_outcome(stub, name, **stop_time) == lookup_failed
        backwards = {
            "startPosition": pb.OFFSET,
            "startOffset": 2,
            "stopPosition": pb.STOP_OFFSET,
            "stopOffset": 1,
        }
        outcome = await _subscribe_outcome(stub, name, **backwards)
        assert outcome[:2] == (False, grpc.StatusCode.INVALID_ARGUMENT)


async def test_pausing_ends_an_open_subscription(cluster: Cluster, unique_name: str) -> None:
    await create(cluster, unique_name)
    _, stub = await cluster.leader(unique_name)
    call = stub.Subscribe(pb.SubscribeRequest(stream=unique_name, startPosition=pb.EARLIEST))
    try:
        assert await asyncio.wait_for(call.read(), TIMEOUT) == pb.Message()
        await cluster.stubs[0].PauseStream(pb.PauseStreamRequest(name=unique_name), timeout=TIMEOUT)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(call.read(), TIMEOUT)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert info.value.details() == "commit log was closed"
    finally:
        call.cancel()


# -- L7: consumer groups --------------------------------------------------------------------


async def test_concurrent_joins_of_a_new_group(cluster: Cluster, unique_name: str) -> None:
    await create(cluster, unique_name, partitions=2)
    group = f"g_{unique_name}"

    async def join(consumer: str) -> Any:
        return await cluster.stubs[0].JoinConsumerGroup(
            pb.JoinConsumerGroupRequest(groupId=group, consumerId=consumer, streams=[unique_name]),
            timeout=TIMEOUT,
        )

    results = await asyncio.gather(join("a"), join("b"), return_exceptions=True)
    failed = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    joined = [r for r in results if not isinstance(r, BaseException)]
    assert len(failed) + len(joined) == 2
    for e in failed:  # the member that lost the race to create the group
        assert e.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert e.details() == "consumer group already exists"
    if cluster.emulated:
        assert len(failed) == 1
    # A new group's epoch is 0; later ones are indexes in the metadata log.
    epochs = sorted(r.epoch for r in joined)
    assert epochs[0] == 0
    if len(failed) == 1:
        loser = "ab"[results.index(failed[0])]
        retried = await join(loser)  # the group exists now: an ordinary join
        assert retried.epoch > 0
    else:
        assert epochs[1] > 0


async def test_the_coordinator_learns_a_join_late(cluster: Cluster, unique_name: str) -> None:
    await create(cluster, unique_name)
    group = f"g_{unique_name}"
    t0 = asyncio.get_running_loop().time()
    join = await cluster.stubs[0].JoinConsumerGroup(
        pb.JoinConsumerGroupRequest(groupId=group, consumerId="a", streams=[unique_name]),
        timeout=TIMEOUT,
    )
    assert join.epoch == 0
    if cluster.emulated:
        # As most often on a real cluster, the coordinator is not the metadata
        # leader: it learns of the group late.
        assert join.coordinator != "broker-0"
    coordinator = cluster.by_id[join.coordinator]
    request = pb.FetchConsumerGroupAssignmentsRequest(groupId=group, consumerId="a", epoch=0)
    if cluster.emulated and join.coordinator != "broker-0" and within_lag(t0 + LAG / 3):
        err = await rpc_error(coordinator.FetchConsumerGroupAssignments(request, timeout=TIMEOUT))
        assert err.code() == grpc.StatusCode.NOT_FOUND
        assert err.details() == "consumer group does not exist"

    async def assigned() -> Any:
        try:
            return await coordinator.FetchConsumerGroupAssignments(request, timeout=TIMEOUT)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.NOT_FOUND:
                raise
            return None

    resp = await eventually(assigned)
    assert resp.epoch == 0
    assert [(a.stream, list(a.partitions)) for a in resp.assignments] == [(unique_name, [0])]
    # A second member: a new epoch, which the coordinator may answer late.
    t0 = asyncio.get_running_loop().time()
    second = await cluster.stubs[0].JoinConsumerGroup(
        pb.JoinConsumerGroupRequest(groupId=group, consumerId="b", streams=[unique_name]),
        timeout=TIMEOUT,
    )
    assert second.epoch > 0
    if cluster.emulated and join.coordinator != "broker-0" and within_lag(t0 + LAG / 3):
        old = await coordinator.FetchConsumerGroupAssignments(request, timeout=TIMEOUT)
        assert old.epoch == 0  # still the previous epoch

    async def moved_on() -> Any:
        try:
            await coordinator.FetchConsumerGroupAssignments(request, timeout=TIMEOUT)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            return e.details()
        return None

    details = await eventually(moved_on)
    assert details == "client-provided group epoch differs from broker group epoch"
