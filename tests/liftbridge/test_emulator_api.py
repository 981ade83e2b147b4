"""The Liftbridge emulator driven through the raw generated stubs and nats-py.

These tests pin the server behaviour the client relies on; they run against the
emulator, or against a real Liftbridge v1.9 when ``AIOCLIENTS_TEST_LIFTBRIDGE``
(and ``AIOCLIENTS_TEST_NATS_URL``) are set. Tests that stop brokers skip then.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import nats
import pytest

from aioclients import InvalidArgumentError
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._pb import api_pb2_grpc as pbg
from aioclients.testing import LiftbridgeCluster
from aioclients.testing._liftbridge_broker import settle
from aioclients.testing._liftbridge_fixtures import ExternalLiftbridge, skip_without_cursors

Cluster = LiftbridgeCluster | ExternalLiftbridge
TIMEOUT = 10.0  # generous: the suite shares 2 cores with other work
# A real cluster commits the first message of a new replicated partition only
# after the followers' first fetch: up to ~10 s (replica.max.idle.wait).
REPLICATED_WAIT = 25.0
MAGIC = b"\xb9\x0e\x43\xb4"


class Brokers:
    """Channels to every broker of the cluster, by broker id (from FetchMetadata)."""

    def __init__(self, cluster: Cluster, *, entry: str | None = None) -> None:
        self.cluster = cluster
        self.entry = entry or cluster.addresses[0]  # the broker asked for metadata
        self._channels: dict[str, grpc.aio.Channel] = {}

    def stub(self, address: str) -> pbg.APIStub:
        if address not in self._channels:
            self._channels[address] = grpc.aio.insecure_channel(address)
        return pbg.APIStub(self._channels[address])

    @property
    def any(self) -> pbg.APIStub:
        return self.stub(self.entry)

    async def metadata(self, *streams: str) -> pb.FetchMetadataResponse:
        return await self.any.FetchMetadata(
            pb.FetchMetadataRequest(streams=list(streams)), timeout=TIMEOUT
        )

    async def addresses(self) -> dict[str, str]:
        md = await self.metadata()
        return {b.id: f"{b.host}:{b.port}" for b in md.brokers}

    @property
    def external(self) -> bool:
        return isinstance(self.cluster, ExternalLiftbridge)

    async def partition(self, stream: str, partition: int = 0) -> pb.PartitionMetadata:
        """The partition as its leader sees it: a real broker reports its own log's
        high watermark and newest offset (-1 on a broker that has no replica)."""
        md = await self.metadata(stream)
        p = md.streamMetadata[0].partitions[partition]
        address = (await self.addresses()).get(p.leader)
        if address is None or address == self.entry:
            return p
        md = await self.stub(address).FetchMetadata(
            pb.FetchMetadataRequest(streams=[stream]), timeout=TIMEOUT
        )
        return md.streamMetadata[0].partitions[partition]

    async def until_every_broker(
        self, stream: str, shows: Callable[[pb.StreamMetadata | None], bool]
    ) -> None:
        """Wait (bounded) until every broker's metadata ``shows`` a change: a real
        cluster applies metadata changes through Raft, broker by broker."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        for address in sorted(set(self.cluster.addresses) | set((await self.addresses()).values())):
            while True:
                md = await self.stub(address).FetchMetadata(
                    pb.FetchMetadataRequest(streams=[stream]), timeout=TIMEOUT
                )
                found = [m for m in md.streamMetadata if m.name == stream and m.error == 0]
                if shows(found[0] if found else None):
                    break
                assert loop.time() < deadline, f"broker {address} did not show the change"
                await asyncio.sleep(0.02)

    async def leader(self, stream: str, partition: int = 0) -> pbg.APIStub:
        p = await self.partition(stream, partition)
        return self.stub((await self.addresses())[p.leader])

    async def follower(self, stream: str, partition: int = 0) -> pbg.APIStub:
        p = await self.partition(stream, partition)
        others = [a for b, a in (await self.addresses()).items() if b != p.leader]
        if not others:
            pytest.skip("needs a cluster of at least 2 brokers")
        return self.stub(others[0])

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()


@pytest.fixture
async def lb(liftbridge_cluster: Cluster) -> AsyncIterator[Brokers]:
    brokers = Brokers(liftbridge_cluster)
    try:
        yield brokers
    finally:
        await brokers.close()


@pytest.fixture
async def nc(liftbridge_cluster: Cluster) -> AsyncIterator[Any]:
    conn = await nats.connect(liftbridge_cluster.nats_url)
    try:
        yield conn
    finally:
        await conn.close()


async def create(lb: Brokers, name: str, subject: str | None = None, **kw: Any) -> None:
    req = pb.CreateStreamRequest(subject=subject or f"{name}.subj", name=name, **kw)
    await lb.any.CreateStream(req, timeout=TIMEOUT)
    await lb.until_every_broker(
        name, lambda md: md is not None and all(p.leader for p in md.partitions.values())
    )


def every_partition(field: str, value: bool) -> Callable[[pb.StreamMetadata | None], bool]:
    return lambda md: (
        md is not None and all(getattr(p, field) == value for p in md.partitions.values())
    )


async def publish(lb: Brokers, stream: str, *values: bytes, partition: int = 0) -> list[pb.Ack]:
    acks = []
    for v in values:
        resp = await lb.any.Publish(
            pb.PublishRequest(stream=stream, partition=partition, value=v), timeout=TIMEOUT
        )
        acks.append(resp.ack)
    return acks


class Sub:
    """A Subscribe call whose confirmation (the empty first message) has been read."""

    def __init__(self, call: Any) -> None:
        self.call = call

    async def take(self, n: int, *, timeout: float = TIMEOUT) -> list[pb.Message]:
        async def read() -> list[pb.Message]:
            return [await self.call.read() for _ in range(n)]

        msgs = await asyncio.wait_for(read(), timeout)
        assert all(isinstance(m, pb.Message) for m in msgs), msgs
        return msgs

    async def status(self) -> grpc.StatusCode:
        """Read until the call ends; its status code."""

        async def drain() -> grpc.StatusCode:
            while True:
                item = await self.call.read()
                if item is grpc.aio.EOF:
                    return await self.call.code()  # type: ignore[no-any-return]

        try:
            return await asyncio.wait_for(drain(), TIMEOUT)
        except grpc.aio.AioRpcError as e:
            return e.code()


async def subscribe(stub: pbg.APIStub, **kw: Any) -> Sub:
    call = stub.Subscribe(pb.SubscribeRequest(**kw))
    first = await asyncio.wait_for(call.read(), TIMEOUT)
    assert first == pb.Message(), "the first message confirms the subscription and is empty"
    return Sub(call)


async def rpc_error(coro: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await coro
    return info.value


# -- streams and metadata ------------------------------------------------------


async def test_create_stream_metadata_and_errors(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name, subject=f"{unique_name}.s", partitions=3)
    md = await lb.metadata(unique_name)
    (stream,) = md.streamMetadata
    assert stream.name == unique_name
    assert stream.subject == f"{unique_name}.s"
    assert stream.error == pb.StreamMetadata.OK
    assert sorted(stream.partitions) == [0, 1, 2]
    broker_ids = {b.id for b in md.brokers}
    for pid, p in stream.partitions.items():
        assert p.id == pid
        assert p.leader in broker_ids
        assert list(p.replicas) == [p.leader]
        assert list(p.isr) == [p.leader]
        assert p.newestOffset == -1
        assert p.highWatermark == -1
    assert stream.creationTimestamp > 0

    err = await rpc_error(create(lb, unique_name, subject="other"))
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS
    for bad in (
        pb.CreateStreamRequest(subject="x"),
        pb.CreateStreamRequest(name="n", subject="a..b"),
    ):
        err = await rpc_error(lb.any.CreateStream(bad, timeout=TIMEOUT))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT

    unknown = (await lb.metadata(unique_name + "_nope")).streamMetadata[0]
    assert unknown.error == pb.StreamMetadata.UNKNOWN_STREAM

    await lb.any.DeleteStream(pb.DeleteStreamRequest(name=unique_name), timeout=TIMEOUT)
    err = await rpc_error(lb.any.DeleteStream(pb.DeleteStreamRequest(name=unique_name)))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    # The broker that refused the second delete has applied the first; the others
    # apply it through Raft a little later.
    await lb.until_every_broker(unique_name, lambda md: md is None)
    assert (await lb.metadata(unique_name)).streamMetadata[0].error == (
        pb.StreamMetadata.UNKNOWN_STREAM
    )


async def test_replication_factor_all_and_too_large(lb: Brokers, unique_name: str) -> None:
    n = len((await lb.metadata()).brokers)
    await create(lb, unique_name, replicationFactor=-1)
    p = await lb.partition(unique_name)
    assert sorted(p.replicas) == sorted(b.id for b in (await lb.metadata()).brokers)
    assert len(p.isr) == n
    err = await rpc_error(create(lb, unique_name + "_big", replicationFactor=n + 1))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_partition_metadata_from_leader_only(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name)
    await publish(lb, unique_name, b"a", b"b")
    leader = await lb.leader(unique_name)
    resp = await leader.FetchPartitionMetadata(
        pb.FetchPartitionMetadataRequest(stream=unique_name, partition=0), timeout=TIMEOUT
    )
    assert resp.metadata.newestOffset == 1
    assert resp.metadata.highWatermark == 1
    assert resp.metadata.messagesReceivedTimestamps.latestTimestamp > 0
    follower = await lb.follower(unique_name)
    err = await rpc_error(
        follower.FetchPartitionMetadata(
            pb.FetchPartitionMetadataRequest(stream=unique_name, partition=0), timeout=TIMEOUT
        )
    )
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    err = await rpc_error(
        leader.FetchPartitionMetadata(
            pb.FetchPartitionMetadataRequest(stream=unique_name, partition=7), timeout=TIMEOUT
        )
    )
    assert err.code() == grpc.StatusCode.NOT_FOUND


# -- publishing ------------------------------------------------------------------


async def test_publish_acks_offsets_and_fields(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name, subject=f"{unique_name}.s", partitions=2)
    resp = await lb.any.Publish(
        pb.PublishRequest(
            stream=unique_name,
            key=b"k",
            value=b"v0",
            headers={"h": b"1"},
            correlationId="c-1",
            ackPolicy=pb.LEADER,
        ),
        timeout=TIMEOUT,
    )
    ack = resp.ack
    assert ack.stream == unique_name
    assert ack.offset == 0
    assert ack.correlationId == "c-1"
    assert ack.partitionSubject == f"{unique_name}.s"
    assert ack.msgSubject == f"{unique_name}.s"
    assert ack.ackPolicy == pb.LEADER
    assert ack.ackError == pb.Ack.OK
    assert 0 < ack.receptionTimestamp <= ack.commitTimestamp
    acks = await publish(lb, unique_name, b"v1", b"v2")
    assert [a.offset for a in acks] == [1, 2]
    # Partition n lives on the NATS subject "<subject>.n" and counts its own offsets.
    (ack1,) = await publish(lb, unique_name, b"p1", partition=1)
    assert ack1.offset == 0
    assert ack1.msgSubject == f"{unique_name}.s.1"
    all_ack = await lb.any.Publish(
        pb.PublishRequest(stream=unique_name, value=b"v3", ackPolicy=pb.ALL), timeout=TIMEOUT
    )
    assert all_ack.ack.offset == 3

    sub = await subscribe(
        await lb.leader(unique_name), stream=unique_name, startPosition=pb.EARLIEST
    )
    msgs = await sub.take(4)
    assert [m.offset for m in msgs] == [0, 1, 2, 3]
    first = msgs[0]
    assert (first.key, first.value, first.stream, first.partition) == (b"k", b"v0", unique_name, 0)
    assert first.subject == f"{unique_name}.s"
    assert first.headers["h"] == b"1"
    assert first.headers["subject"] == f"{unique_name}.s".encode()
    assert first.timestamp == ack.receptionTimestamp
    sub.call.cancel()


async def test_publish_without_ack(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name)
    sub = await subscribe(await lb.leader(unique_name), stream=unique_name)
    none = await lb.any.Publish(
        pb.PublishRequest(stream=unique_name, value=b"a", ackPolicy=pb.NONE), timeout=TIMEOUT
    )
    assert not none.HasField("ack")
    # Without a deadline the server does not wait for the ack, whatever the policy.
    no_deadline = await lb.any.Publish(pb.PublishRequest(stream=unique_name, value=b"b"))
    assert not no_deadline.HasField("ack")
    assert [m.value for m in await sub.take(2)] == [b"a", b"b"]
    sub.call.cancel()


async def test_publish_errors(lb: Brokers, unique_name: str) -> None:
    err = await rpc_error(lb.any.Publish(pb.PublishRequest(stream=unique_name), timeout=TIMEOUT))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    await create(lb, unique_name)
    err = await rpc_error(
        lb.any.Publish(pb.PublishRequest(stream=unique_name, partition=3), timeout=TIMEOUT)
    )
    assert err.code() == grpc.StatusCode.NOT_FOUND
    err = await rpc_error(lb.any.Publish(pb.PublishRequest(), timeout=TIMEOUT))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_publish_over_the_nats_payload_limit_fails_cleanly(
    lb: Brokers, nc: Any, unique_name: str
) -> None:
    if nc.max_payload > 3 * 1024 * 1024:
        pytest.skip("gRPC's 4 MiB message limit would refuse the request first")
    await create(lb, unique_name)
    big = b"x" * (nc.max_payload + 1)
    err = await rpc_error(
        lb.any.Publish(pb.PublishRequest(stream=unique_name, value=big), timeout=TIMEOUT)
    )
    # A plain Go error, not a status: gRPC's UNKNOWN.
    assert err.code() == grpc.StatusCode.UNKNOWN
    assert err.details() == "failed to publish to NATS: nats: maximum payload exceeded"
    (ack,) = await publish(lb, unique_name, b"small")  # the broker still works
    assert ack.offset == 0


async def test_publish_async_over_the_nats_payload_limit_fails_that_message_only(
    lb: Brokers, nc: Any, unique_name: str
) -> None:
    if nc.max_payload > 3 * 1024 * 1024:
        pytest.skip("gRPC's 4 MiB message limit would refuse the request first")
    await create(lb, unique_name)
    big = b"x" * (nc.max_payload + 1)
    values = {"a": b"a", "big": big, "b": b"b"}

    async def requests() -> AsyncIterator[pb.PublishRequest]:
        for cid, value in values.items():
            yield pb.PublishRequest(stream=unique_name, value=value, correlationId=cid)

    call = lb.any.PublishAsync(requests(), timeout=TIMEOUT)
    by_id: dict[str, pb.PublishResponse] = {}
    async for r in call:
        by_id[r.correlationId] = r
        if len(by_id) == len(values):
            break  # the session would wait for an ack of the big one: its timeout
    call.cancel()
    assert by_id["big"].asyncError.code == pb.PublishAsyncError.INTERNAL
    assert "maximum payload exceeded" in by_id["big"].asyncError.message
    assert sorted((by_id["a"].ack.offset, by_id["b"].ack.offset)) == [0, 1]


async def test_publish_to_ack_inbox_sends_enveloped_ack(
    lb: Brokers, nc: Any, unique_name: str
) -> None:
    await create(lb, unique_name)
    inbox = f"{unique_name}.acks"
    sub = await nc.subscribe(inbox)
    await settle(nc)  # nats-py's flush() can return before the SUB is sent
    resp = await lb.any.Publish(
        pb.PublishRequest(stream=unique_name, value=b"x", ackInbox=inbox, correlationId="cid"),
        timeout=TIMEOUT,
    )
    assert resp.ack.ackInbox == inbox
    raw = (await sub.next_msg(timeout=TIMEOUT)).data
    assert raw[:4] == MAGIC
    assert raw[4] == 0
    assert raw[7] == 1
    ack = pb.Ack.FromString(raw[raw[5] :])
    assert (ack.offset, ack.correlationId, ack.stream) == (0, "cid", unique_name)


async def test_messages_published_on_nats_land_in_the_log(
    lb: Brokers, nc: Any, unique_name: str
) -> None:
    subject = f"{unique_name}.s"
    await create(lb, unique_name, subject=subject)
    sub = await subscribe(await lb.leader(unique_name), stream=unique_name)
    acks = await nc.subscribe(f"{unique_name}.acks")
    await settle(nc)
    # A raw payload, an envelope, and an envelope with a CRC-32C (flag bit 0).
    await nc.publish(subject, b"raw bytes", reply="the.reply")
    msg = pb.Message(
        key=b"k", value=b"enveloped", ackInbox=f"{unique_name}.acks", correlationId="c"
    ).SerializeToString()
    await nc.publish(subject, MAGIC + bytes((0, 8, 0, 0)) + msg)
    crc = struct.pack(">I", _crc32c(msg))
    await nc.publish(subject, MAGIC + bytes((0, 12, 1, 0)) + crc + msg)
    bad_crc = struct.pack(">I", _crc32c(msg) ^ 1)
    await nc.publish(subject, MAGIC + bytes((0, 12, 1, 0)) + bad_crc + msg)
    got = await sub.take(4)
    assert got[0].value == b"raw bytes"
    assert got[0].key == b""
    assert got[0].subject == subject
    assert got[0].replySubject == "the.reply"
    assert (got[1].key, got[1].value) == (b"k", b"enveloped")
    assert (got[2].key, got[2].value) == (b"k", b"enveloped")
    # A corrupt envelope is not an envelope: stored raw, whole.
    assert got[3].value == MAGIC + bytes((0, 12, 1, 0)) + bad_crc + msg
    for expected in (1, 2):
        raw = (await acks.next_msg(timeout=TIMEOUT)).data
        assert pb.Ack.FromString(raw[8:]).offset == expected
    sub.call.cancel()


async def test_publish_to_subject(lb: Brokers, unique_name: str) -> None:
    subject = f"{unique_name}.s"
    await create(lb, unique_name, subject=subject)
    resp = await lb.any.PublishToSubject(
        pb.PublishToSubjectRequest(subject=subject, value=b"v", correlationId="z"),
        timeout=TIMEOUT,
    )
    assert (resp.ack.offset, resp.ack.correlationId, resp.ack.stream) == (0, "z", unique_name)


async def test_publish_async_correlates_acks_and_errors(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name)

    async def requests() -> AsyncIterator[pb.PublishRequest]:
        for i in range(20):
            yield pb.PublishRequest(stream=unique_name, value=b"%d" % i, correlationId=f"c{i}")
        yield pb.PublishRequest(stream=unique_name + "_nope", correlationId="bad")
        yield pb.PublishRequest(stream=unique_name, value=b"n", ackPolicy=pb.NONE)

    call = lb.any.PublishAsync(requests(), timeout=TIMEOUT)
    responses = [r async for r in call]
    assert await call.code() == grpc.StatusCode.OK
    by_id = {r.correlationId: r for r in responses}
    assert len(responses) == 21  # no response for the NONE policy
    assert sorted(by_id[f"c{i}"].ack.offset for i in range(20)) == list(range(20))
    assert by_id["c7"].ack.correlationId == "c7"
    assert by_id["bad"].asyncError.code == pb.PublishAsyncError.NOT_FOUND


async def test_publish_async_burst_keeps_order(lb: Brokers, unique_name: str) -> None:
    # Enough 1 KiB messages that the broker writes them to NATS in several bursts.
    await create(lb, unique_name)
    n = 300
    value = b"x" * 1024

    async def requests() -> AsyncIterator[pb.PublishRequest]:
        for i in range(n):
            yield pb.PublishRequest(stream=unique_name, value=value, correlationId=f"c{i}")

    call = lb.any.PublishAsync(requests(), timeout=TIMEOUT)
    responses = [r async for r in call]
    assert await call.code() == grpc.StatusCode.OK
    assert [(r.correlationId, r.ack.offset) for r in responses] == [(f"c{i}", i) for i in range(n)]


# -- subscribing -----------------------------------------------------------------


async def test_start_positions(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name)
    acks = await publish(lb, unique_name, *[b"m%d" % i for i in range(5)])
    leader = await lb.leader(unique_name)

    async def offsets(n: int, **kw: Any) -> list[int]:
        sub = await subscribe(leader, stream=unique_name, **kw)
        got = [m.offset for m in await sub.take(n)]
        sub.call.cancel()
        return got

    assert await offsets(5, startPosition=pb.EARLIEST) == [0, 1, 2, 3, 4]
    assert await offsets(3, startPosition=pb.OFFSET, startOffset=2) == [2, 3, 4]
    assert await offsets(1, startPosition=pb.LATEST) == [4]
    ts = acks[3].receptionTimestamp
    assert await offsets(2, startPosition=pb.TIMESTAMP, startTimestamp=ts) == [3, 4]
    new_only = await subscribe(leader, stream=unique_name, startPosition=pb.NEW_ONLY)
    await publish(lb, unique_name, b"after")
    (m,) = await new_only.take(1)
    assert (m.offset, m.value) == (5, b"after")
    new_only.call.cancel()


async def test_start_positions_on_an_empty_partition(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name)
    leader = await lb.leader(unique_name)
    for position in (pb.EARLIEST, pb.LATEST, pb.NEW_ONLY):
        sub = await subscribe(leader, stream=unique_name, startPosition=position)
        await publish(lb, unique_name, b"x")
        (m,) = await sub.take(1)
        sub.call.cancel()
        # Every subscription starts at offset 0 of the empty log, then sees later ones.
        assert m.offset == 0 or position != pb.EARLIEST
        assert m.value == b"x"


async def test_stop_positions(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name)
    acks = await publish(lb, unique_name, *[b"m%d" % i for i in range(5)])
    leader = await lb.leader(unique_name)

    sub = await subscribe(
        leader,
        stream=unique_name,
        startPosition=pb.EARLIEST,
        stopPosition=pb.STOP_OFFSET,
        stopOffset=2,
    )
    assert [m.offset for m in await sub.take(3)] == [0, 1, 2]
    assert await sub.status() == grpc.StatusCode.RESOURCE_EXHAUSTED

    sub = await subscribe(
        leader,
        stream=unique_name,
        startPosition=pb.OFFSET,
        startOffset=3,
        stopPosition=pb.STOP_LATEST,
    )
    await publish(lb, unique_name, b"later")
    assert [m.offset for m in await sub.take(2)] == [3, 4]
    assert await sub.status() == grpc.StatusCode.RESOURCE_EXHAUSTED

    ts = acks[1].receptionTimestamp
    sub = await subscribe(
        leader,
        stream=unique_name,
        startPosition=pb.EARLIEST,
        stopPosition=pb.STOP_TIMESTAMP,
        stopTimestamp=ts,
    )
    assert [m.offset for m in await sub.take(2)] == [0, 1]
    assert await sub.status() == grpc.StatusCode.RESOURCE_EXHAUSTED

    call = leader.Subscribe(
        pb.SubscribeRequest(
            stream=unique_name,
            startPosition=pb.OFFSET,
            startOffset=4,
            stopPosition=pb.STOP_OFFSET,
            stopOffset=1,
        )
    )
    assert await Sub(call).status() == grpc.StatusCode.INVALID_ARGUMENT


async def test_stop_latest_on_an_empty_partition(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name)
    call = (await lb.leader(unique_name)).Subscribe(
        pb.SubscribeRequest(stream=unique_name, stopPosition=pb.STOP_LATEST)
    )
    assert await Sub(call).status() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_subscribe_not_found_and_not_leader(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name)
    leader = await lb.leader(unique_name)
    for req in (
        pb.SubscribeRequest(stream=unique_name + "_nope"),
        pb.SubscribeRequest(stream=unique_name, partition=1),
    ):
        assert await Sub(leader.Subscribe(req)).status() == grpc.StatusCode.NOT_FOUND
    follower = await lb.follower(unique_name)
    call = follower.Subscribe(pb.SubscribeRequest(stream=unique_name))
    assert await Sub(call).status() == grpc.StatusCode.FAILED_PRECONDITION


async def test_deleting_a_stream_ends_its_subscriptions(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name)
    sub = await subscribe(await lb.leader(unique_name), stream=unique_name)
    await lb.any.DeleteStream(pb.DeleteStreamRequest(name=unique_name), timeout=TIMEOUT)
    assert await sub.status() == grpc.StatusCode.NOT_FOUND


# -- readonly and pause ------------------------------------------------------------


async def test_readonly(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name)
    await publish(lb, unique_name, b"a", b"b")
    leader = await lb.leader(unique_name)
    tail = await subscribe(leader, stream=unique_name, startPosition=pb.EARLIEST)
    assert len(await tail.take(2)) == 2
    await lb.any.SetStreamReadonly(
        pb.SetStreamReadonlyRequest(name=unique_name, readonly=True), timeout=TIMEOUT
    )
    await lb.until_every_broker(unique_name, every_partition("readonly", True))
    # A subscriber waiting at the end of the log is told the partition ended.
    assert await tail.status() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (await lb.partition(unique_name)).readonly
    err = await rpc_error(publish(lb, unique_name, b"c"))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    # A new subscriber reads to the end and stops there.
    sub = await subscribe(leader, stream=unique_name, startPosition=pb.EARLIEST)
    assert [m.value for m in await sub.take(2)] == [b"a", b"b"]
    assert await sub.status() == grpc.StatusCode.RESOURCE_EXHAUSTED

    await lb.any.SetStreamReadonly(
        pb.SetStreamReadonlyRequest(name=unique_name, readonly=False), timeout=TIMEOUT
    )
    # (a real broker that still has it readonly drops a publish without an ack)
    await lb.until_every_broker(unique_name, every_partition("readonly", False))
    (ack,) = await publish(lb, unique_name, b"c")
    assert ack.offset == 2


async def test_pause_and_resume_on_publish(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name, partitions=2)
    await publish(lb, unique_name, b"a")
    leader = await lb.leader(unique_name)
    sub = await subscribe(leader, stream=unique_name, startPosition=pb.EARLIEST)
    await sub.take(1)
    await lb.any.PauseStream(pb.PauseStreamRequest(name=unique_name), timeout=TIMEOUT)
    assert await sub.status() == grpc.StatusCode.FAILED_PRECONDITION
    await lb.until_every_broker(unique_name, every_partition("paused", True))
    # Publishing to a paused partition resumes it (only it, without resumeAll).
    (ack,) = await publish(lb, unique_name, b"b")
    assert ack.offset == 1
    md = (await lb.metadata(unique_name)).streamMetadata[0]
    # Liftbridge 1.9 reports paused=true forever once a partition was paused (the
    # flag is never cleared on resume); the emulator does the same.
    assert md.partitions[0].paused
    assert md.partitions[1].paused
    assert md.partitions[0].pauseTimestamps.latestTimestamp > 0

    await lb.any.PauseStream(
        pb.PauseStreamRequest(name=unique_name, partitions=[0, 1], resumeAll=True),
        timeout=TIMEOUT,
    )
    await lb.until_every_broker(unique_name, every_partition("paused", True))
    await publish(lb, unique_name, b"c", partition=1)
    # (the paused flag cannot tell on a real server; partition 0 takes messages)
    (ack,) = await publish(lb, unique_name, b"d", partition=0)
    assert ack.offset == 2
    md = (await lb.metadata(unique_name)).streamMetadata[0]
    assert md.partitions[0].paused  # sticky, as on Liftbridge 1.9
    assert md.partitions[1].paused
    # Subscribing with resume=True to a paused partition resumes it.
    await lb.any.PauseStream(pb.PauseStreamRequest(name=unique_name), timeout=TIMEOUT)
    await lb.until_every_broker(unique_name, every_partition("paused", True))
    sub = await subscribe(leader, stream=unique_name, startPosition=pb.EARLIEST, resume=True)
    assert [m.value for m in await sub.take(2)] == [b"a", b"b"]
    sub.call.cancel()
    err = await rpc_error(
        lb.any.PauseStream(pb.PauseStreamRequest(name=unique_name + "_nope"), timeout=TIMEOUT)
    )
    assert err.code() == grpc.StatusCode.NOT_FOUND


async def test_a_paused_partition_refuses_partition_metadata(lb: Brokers, unique_name: str) -> None:
    # Pausing closes the partition on its leader (Liftbridge v1.9), which then
    # refuses FetchPartitionMetadata as a broker that does not lead it does; its
    # FetchMetadata still shows the partition, paused, with its offsets.
    await create(lb, unique_name)
    await publish(lb, unique_name, b"a", b"b")
    leader = await lb.leader(unique_name)
    req = pb.FetchPartitionMetadataRequest(stream=unique_name, partition=0)
    assert (await leader.FetchPartitionMetadata(req, timeout=TIMEOUT)).metadata.highWatermark == 1
    await lb.any.PauseStream(pb.PauseStreamRequest(name=unique_name), timeout=TIMEOUT)
    await lb.until_every_broker(unique_name, every_partition("paused", True))
    err = await rpc_error(leader.FetchPartitionMetadata(req, timeout=TIMEOUT))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    p = await lb.partition(unique_name)
    assert p.paused
    assert (p.highWatermark, p.newestOffset) == (1, 1)
    (ack,) = await publish(lb, unique_name, b"c")  # resumes it: its leader answers again
    assert ack.offset == 2
    leader = await lb.leader(unique_name)
    assert (await leader.FetchPartitionMetadata(req, timeout=TIMEOUT)).metadata.highWatermark == 2


# -- cursors -----------------------------------------------------------------------


async def test_cursors(lb: Brokers, unique_name: str) -> None:
    await skip_without_cursors(lb.cluster.addresses)
    await create(lb, unique_name)
    addresses = await lb.addresses()
    fetch = pb.FetchCursorRequest(stream=unique_name, partition=0, cursorId="c1")
    # Cursor requests go to the leader of the __cursors partition; others refuse.
    results, refusals = {}, []
    for broker, address in addresses.items():
        try:
            results[broker] = await lb.stub(address).FetchCursor(fetch, timeout=TIMEOUT)
        except grpc.aio.AioRpcError as e:
            refusals.append(e.code())
    assert len(results) == 1
    assert refusals == [grpc.StatusCode.FAILED_PRECONDITION] * (len(addresses) - 1)
    ((owner, first),) = results.items()
    assert first.offset == -1
    stub = lb.stub(addresses[owner])
    await stub.SetCursor(
        pb.SetCursorRequest(stream=unique_name, partition=0, cursorId="c1", offset=41),
        timeout=TIMEOUT,
    )
    await stub.SetCursor(
        pb.SetCursorRequest(stream=unique_name, partition=0, cursorId="c1", offset=42),
        timeout=TIMEOUT,
    )
    assert (await stub.FetchCursor(fetch, timeout=TIMEOUT)).offset == 42
    err = await rpc_error(stub.SetCursor(pb.SetCursorRequest(stream=unique_name), timeout=TIMEOUT))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


# -- consumer groups ---------------------------------------------------------------


async def test_consumer_groups(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name, partitions=4)
    group = unique_name + "_g"
    a = await lb.any.JoinConsumerGroup(
        pb.JoinConsumerGroupRequest(groupId=group, consumerId="a", streams=[unique_name]),
        timeout=TIMEOUT,
    )
    b = await lb.any.JoinConsumerGroup(
        pb.JoinConsumerGroupRequest(groupId=group, consumerId="b", streams=[unique_name]),
        timeout=TIMEOUT,
    )
    assert b.coordinator == a.coordinator
    assert b.epoch > a.epoch
    assert b.consumerTimeout > 0
    assert b.coordinatorTimeout > 0
    coordinator = lb.stub((await lb.addresses())[b.coordinator])

    loop = asyncio.get_running_loop()

    async def assigned(consumer: str, epoch: int) -> list[int]:
        # A real coordinator applies joins through Raft: until then it answers
        # NOT_FOUND or the previous epoch. Ask again, bounded.
        deadline = loop.time() + TIMEOUT
        while True:
            try:
                resp = await coordinator.FetchConsumerGroupAssignments(
                    pb.FetchConsumerGroupAssignmentsRequest(
                        groupId=group, consumerId=consumer, epoch=epoch
                    ),
                    timeout=TIMEOUT,
                )
                if resp.epoch == epoch:
                    return sorted(p for asg in resp.assignments for p in asg.partitions)
            except grpc.aio.AioRpcError as e:
                if e.code() not in (
                    grpc.StatusCode.NOT_FOUND,
                    grpc.StatusCode.FAILED_PRECONDITION,
                ):
                    raise
            assert loop.time() < deadline, f"no assignments for epoch {epoch}"
            await asyncio.sleep(0.05)

    async def group_metadata(changed: Callable[[Any], bool]) -> Any:
        deadline = loop.time() + TIMEOUT
        while True:
            md = await coordinator.FetchMetadata(
                pb.FetchMetadataRequest(groups=[group]), timeout=TIMEOUT
            )
            if changed(md.groupMetadata[0]):
                return md.groupMetadata[0]
            assert loop.time() < deadline, "the group metadata did not change"
            await asyncio.sleep(0.05)

    pa, pb_ = await assigned("a", b.epoch), await assigned("b", b.epoch)
    assert sorted(pa + pb_) == [0, 1, 2, 3]
    assert len(pa) == len(pb_) == 2
    err = await rpc_error(
        coordinator.FetchConsumerGroupAssignments(
            pb.FetchConsumerGroupAssignmentsRequest(groupId=group, consumerId="a", epoch=a.epoch),
            timeout=TIMEOUT,
        )
    )
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION  # stale epoch
    md = await group_metadata(lambda g: g.epoch == b.epoch)
    assert md.coordinator == b.coordinator

    await lb.any.LeaveConsumerGroup(
        pb.LeaveConsumerGroupRequest(groupId=group, consumerId="b"), timeout=TIMEOUT
    )
    md = await group_metadata(lambda g: g.epoch != b.epoch)
    assert await assigned("a", md.epoch) == [0, 1, 2, 3]


async def test_consumer_group_refusals(lb: Brokers, unique_name: str) -> None:
    # Liftbridge v1.9 refuses a join or a leave with FAILED_PRECONDITION, except a
    # leave of a group that does not exist (NOT_FOUND).
    await create(lb, unique_name)
    group, missing = unique_name + "_g", unique_name + "_nope"

    async def join(consumer: str, *streams: str) -> Any:
        return await lb.any.JoinConsumerGroup(
            pb.JoinConsumerGroupRequest(groupId=group, consumerId=consumer, streams=streams),
            timeout=TIMEOUT,
        )

    async def leave(consumer: str, group_id: str = group) -> Any:
        return await lb.any.LeaveConsumerGroup(
            pb.LeaveConsumerGroupRequest(groupId=group_id, consumerId=consumer), timeout=TIMEOUT
        )

    err = await rpc_error(join("a", missing))  # a new group
    assert (err.code(), err.details()) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "stream does not exist",
    )
    await join("a", unique_name)
    err = await rpc_error(join("a", unique_name))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already a member" in (err.details() or "")
    err = await rpc_error(join("b", unique_name, missing))  # an existing group
    assert (err.code(), err.details()) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "stream does not exist",
    )
    err = await rpc_error(leave("b"))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "not a member" in (err.details() or "")
    await leave("a")  # the last member: the group goes
    err = await rpc_error(leave("a", missing))
    assert err.code() == grpc.StatusCode.NOT_FOUND


async def test_report_coordinator_refusals(lb: Brokers, unique_name: str) -> None:
    # Liftbridge v1.9 checks a report's group, coordinator and epoch, and member:
    # each refusal is FAILED_PRECONDITION (a GroupConsumer only logs it).
    await create(lb, unique_name)
    group = unique_name + "_g"
    join = await lb.any.JoinConsumerGroup(
        pb.JoinConsumerGroupRequest(groupId=group, consumerId="a", streams=[unique_name]),
        timeout=TIMEOUT,
    )

    async def report(consumer: str, coordinator: str, group_id: str = group) -> Any:
        req = pb.ReportConsumerGroupCoordinatorRequest(
            groupId=group_id, consumerId=consumer, coordinator=coordinator, epoch=join.epoch
        )
        return await lb.any.ReportConsumerGroupCoordinator(req, timeout=TIMEOUT)

    err = await rpc_error(report("a", join.coordinator, group + "_nope"))
    assert (err.code(), err.details()) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        f"No such consumer group {group}_nope",
    )
    err = await rpc_error(report("a", join.coordinator + "_nope"))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "Coordinator generation mismatch" in (err.details() or "")
    err = await rpc_error(report("b", join.coordinator))
    assert (err.code(), err.details()) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        f"Consumer b is not a member of consumer group {group}",
    )
    await lb.any.LeaveConsumerGroup(
        pb.LeaveConsumerGroupRequest(groupId=group, consumerId="a"), timeout=TIMEOUT
    )


async def test_the_coordinator_moves_once_most_members_reported_it(
    lb: Brokers, unique_name: str
) -> None:
    # Liftbridge v1.9 elects a new coordinator when more than half of the
    # members reported the current one (server/failover.go); one report of two
    # members changes nothing, so the second is still accepted.
    await create(lb, unique_name)
    group = unique_name + "_g"
    for member in ("a", "b"):
        join = await lb.any.JoinConsumerGroup(
            pb.JoinConsumerGroupRequest(groupId=group, consumerId=member, streams=[unique_name]),
            timeout=TIMEOUT,
        )
    for member in ("a", "b"):
        await lb.any.ReportConsumerGroupCoordinator(
            pb.ReportConsumerGroupCoordinatorRequest(
                groupId=group, consumerId=member, coordinator=join.coordinator, epoch=join.epoch
            ),
            timeout=TIMEOUT,
        )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while True:
        md = await lb.any.FetchMetadata(pb.FetchMetadataRequest(groups=[group]), timeout=TIMEOUT)
        (shown,) = md.groupMetadata
        if shown.coordinator and shown.coordinator != join.coordinator:
            break
        assert loop.time() < deadline, "the coordinator did not move"
        await asyncio.sleep(0.05)
    assert shown.epoch > join.epoch
    for member in ("a", "b"):
        await lb.any.LeaveConsumerGroup(
            pb.LeaveConsumerGroupRequest(groupId=group, consumerId=member), timeout=TIMEOUT
        )


# -- failover (emulator only) ------------------------------------------------------


@pytest.mark.fault
async def test_stop_broker_moves_leadership(
    liftbridge_cluster: Cluster, lb: Brokers, unique_name: str
) -> None:
    if isinstance(liftbridge_cluster, ExternalLiftbridge):
        pytest.skip("stops a broker: cannot with an external Liftbridge (see test_real_faults.py)")
    await create(lb, unique_name)
    await publish(lb, unique_name, b"a", b"b")
    p = await lb.partition(unique_name)
    addresses = await lb.addresses()
    old_address = addresses[p.leader]
    index = liftbridge_cluster.addresses.index(old_address)
    sub = await subscribe(lb.stub(old_address), stream=unique_name, startPosition=pb.EARLIEST)
    await sub.take(2)

    await liftbridge_cluster.stop_broker(index)
    assert await sub.status() == grpc.StatusCode.UNAVAILABLE
    survivors = [a for a in liftbridge_cluster.addresses if a != old_address]
    lb_other = Brokers(liftbridge_cluster, entry=survivors[0])
    try:
        md = await lb_other.stub(survivors[0]).FetchMetadata(
            pb.FetchMetadataRequest(streams=[unique_name]), timeout=TIMEOUT
        )
        assert p.leader not in {b.id for b in md.brokers}
        new = md.streamMetadata[0].partitions[0]
        assert new.leader != p.leader
        assert p.leader not in new.isr
        new_address = {b.id: f"{b.host}:{b.port}" for b in md.brokers}[new.leader]
        # The whole log is there on the new leader, which also takes new messages.
        await lb_other.stub(new_address).Publish(
            pb.PublishRequest(stream=unique_name, value=b"c"), timeout=TIMEOUT
        )
        sub = await subscribe(
            lb_other.stub(new_address), stream=unique_name, startPosition=pb.EARLIEST
        )
        assert [m.value for m in await sub.take(3)] == [b"a", b"b", b"c"]
        sub.call.cancel()
        err = await rpc_error(
            lb_other.stub(old_address).FetchMetadata(pb.FetchMetadataRequest(), timeout=1.0)
        )
        assert err.code() == grpc.StatusCode.UNAVAILABLE

        await liftbridge_cluster.start_broker(index)
        # Back on the same port (the channel that saw it down reconnects when asked to).
        md = await lb_other.stub(old_address).FetchMetadata(
            pb.FetchMetadataRequest(streams=[unique_name]), timeout=TIMEOUT, wait_for_ready=True
        )
        assert p.leader in {b.id for b in md.brokers}
        assert md.streamMetadata[0].partitions[0].leader == new.leader
    finally:
        await lb_other.close()


@pytest.mark.fault
async def test_stopping_the_coordinator_broker_leaves_the_group_coordinator(
    liftbridge_cluster: Cluster, lb: Brokers, unique_name: str
) -> None:
    # Liftbridge v1.9 moves a group's coordinator only when the members report
    # it: a stopped coordinator stays the coordinator, and every assignments
    # fetch fails until then (UNAVAILABLE), as the members' reports need.
    if isinstance(liftbridge_cluster, ExternalLiftbridge):
        pytest.skip("stops a broker: cannot with an external Liftbridge (see test_real_faults.py)")
    await create(lb, unique_name)
    group = unique_name + "_g"
    join = await lb.any.JoinConsumerGroup(
        pb.JoinConsumerGroupRequest(groupId=group, consumerId="a", streams=[unique_name]),
        timeout=TIMEOUT,
    )
    index = liftbridge_cluster.broker_ids.index(join.coordinator)
    await liftbridge_cluster.stop_broker(index)
    # The first live broker leads the metadata: its view has no lag.
    survivor = next(a for i, a in enumerate(liftbridge_cluster.addresses) if i != index)
    lb_other = Brokers(liftbridge_cluster, entry=survivor)
    try:
        md = await lb_other.any.FetchMetadata(
            pb.FetchMetadataRequest(groups=[group]), timeout=TIMEOUT
        )
        assert [(g.coordinator, g.epoch) for g in md.groupMetadata] == [
            (join.coordinator, join.epoch)
        ]
        await lb_other.any.ReportConsumerGroupCoordinator(
            pb.ReportConsumerGroupCoordinatorRequest(
                groupId=group, consumerId="a", coordinator=join.coordinator, epoch=join.epoch
            ),
            timeout=TIMEOUT,
        )
        md = await lb_other.any.FetchMetadata(
            pb.FetchMetadataRequest(groups=[group]), timeout=TIMEOUT
        )
        (moved,) = md.groupMetadata
        assert moved.coordinator not in ("", join.coordinator)  # the only member reported
    finally:
        await lb_other.close()
        await liftbridge_cluster.start_broker(index)


@pytest.mark.fault
async def test_a_paused_partition_keeps_its_stopped_leader_until_resumed(
    liftbridge_cluster: Cluster, lb: Brokers, unique_name: str
) -> None:
    # Liftbridge v1.9.0 closes a paused partition on every replica: no follower
    # replicates, so none reports a dead leader, and the partition stays led by
    # it (seen for 25 s). A Subscribe with resume=True on a live in-sync replica
    # resumes it, and then a live broker takes over.
    if isinstance(liftbridge_cluster, ExternalLiftbridge):
        pytest.skip("stops a broker: cannot with an external Liftbridge (see test_real_faults.py)")
    await create(lb, unique_name, replicationFactor=3)
    await publish(lb, unique_name, b"a", b"b")
    await lb.any.PauseStream(pb.PauseStreamRequest(name=unique_name), timeout=TIMEOUT)
    await lb.until_every_broker(unique_name, every_partition("paused", True))
    p = await lb.partition(unique_name)
    addresses = await lb.addresses()
    index = liftbridge_cluster.addresses.index(addresses[p.leader])
    await liftbridge_cluster.stop_broker(index)
    replica = next(addresses[b] for b in p.isr if b != p.leader)
    lb_other = Brokers(liftbridge_cluster, entry=replica)
    try:
        md = await lb_other.metadata(unique_name)
        still = md.streamMetadata[0].partitions[0]
        assert (still.leader, sorted(still.isr)) == (p.leader, sorted(p.isr))
        sub = await subscribe(
            lb_other.stub(replica),
            stream=unique_name,
            startPosition=pb.EARLIEST,
            resume=True,
            readISRReplica=True,
        )
        assert [m.value for m in await sub.take(2)] == [b"a", b"b"]
        sub.call.cancel()
        md = await lb_other.metadata(unique_name)
        moved = md.streamMetadata[0].partitions[0]
        assert moved.leader not in ("", p.leader)
        assert p.leader not in moved.isr
    finally:
        await lb_other.close()
        await liftbridge_cluster.start_broker(index)


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


@pytest.mark.fault
async def test_no_message_lost_while_leadership_moves(
    liftbridge_cluster: Cluster, lb: Brokers, nc: Any, unique_name: str
) -> None:
    if isinstance(liftbridge_cluster, ExternalLiftbridge):
        pytest.skip("stops a broker: cannot with an external Liftbridge (see test_real_faults.py)")
    subject = f"{unique_name}.s"
    await create(lb, unique_name, subject=subject)
    p = await lb.partition(unique_name)
    leader_address = (await lb.addresses())[p.leader]
    index = liftbridge_cluster.addresses.index(leader_address)
    total = 3000
    half_sent = asyncio.Event()

    async def pump() -> None:
        for i in range(total):
            await nc.publish(subject, b"%d" % i)
            if i % 50 == 0:
                await asyncio.sleep(0)  # let the stop proceed between bursts
            if i == total // 4:
                half_sent.set()
        await nc.flush()

    publisher = asyncio.create_task(pump())
    await half_sent.wait()
    await liftbridge_cluster.stop_broker(index)
    await publisher
    alive = next(a for a in liftbridge_cluster.addresses if a != leader_address)
    survivors = Brokers(liftbridge_cluster, entry=alive)
    try:
        sub = await subscribe(
            await survivors.leader(unique_name), stream=unique_name, startPosition=pb.EARLIEST
        )
        msgs = await sub.take(total)
        assert [m.offset for m in msgs] == list(range(total))
        assert [m.value for m in msgs] == [b"%d" % i for i in range(total)]
        sub.call.cancel()
    finally:
        await survivors.close()


async def test_optimistic_concurrency_control(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name, optimisticConcurrencyControl=pb.NullableBool(value=True))
    ok = await lb.any.Publish(
        pb.PublishRequest(stream=unique_name, value=b"a", expectedOffset=0), timeout=TIMEOUT
    )
    assert ok.ack.offset == 0
    err = await rpc_error(
        lb.any.Publish(
            pb.PublishRequest(stream=unique_name, value=b"b", expectedOffset=0), timeout=TIMEOUT
        )
    )
    assert err.code() == grpc.StatusCode.UNKNOWN
    assert "incorrect expected offset" in (err.details() or "")
    err = await rpc_error(
        lb.any.Publish(
            pb.PublishRequest(stream=unique_name, value=b"c", ackPolicy=pb.NONE), timeout=TIMEOUT
        )
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    p = await lb.partition(unique_name)  # from the leader: offsets are per broker
    assert p.newestOffset == 0


@pytest.mark.slow  # up to ~10 s on a real cluster
async def test_read_isr_replica(lb: Brokers, unique_name: str) -> None:
    if len(await lb.addresses()) < 2:
        pytest.skip("needs a cluster of at least 2 brokers (replication factor 2)")
    await create(lb, unique_name, replicationFactor=2)
    await publish(lb, unique_name, b"a")
    p = await lb.partition(unique_name)
    (replica,) = [r for r in p.replicas if r != p.leader]
    stub = lb.stub((await lb.addresses())[replica])
    sub = await subscribe(stub, stream=unique_name, startPosition=pb.EARLIEST, readISRReplica=True)
    assert [m.value for m in await sub.take(1, timeout=REPLICATED_WAIT)] == [b"a"]
    sub.call.cancel()


async def test_streams_in_one_group_share_a_subject(lb: Brokers, nc: Any, unique_name: str) -> None:
    subject = f"{unique_name}.s"
    for name in ("a", "b"):
        await create(lb, f"{unique_name}_{name}", subject=subject, group="g")
    for i in range(50):
        await nc.publish(subject, b"%d" % i)
    await nc.flush()

    async def newest(name: str) -> int:
        return (await lb.partition(f"{unique_name}_{name}")).newestOffset

    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while (await newest("a")) + (await newest("b")) + 2 < 50:
        assert loop.time() < deadline, "messages did not arrive"
        await asyncio.sleep(0.02)
    # Each message went to exactly one stream of the queue group.
    assert (await newest("a")) + (await newest("b")) + 2 == 50


async def test_one_group_member_per_partition(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name)
    leader = await lb.leader(unique_name)

    def member(consumer: str, epoch: int) -> pb.Consumer:
        return pb.Consumer(groupId="g", consumerId=consumer, groupEpoch=epoch)

    first = await subscribe(leader, stream=unique_name, consumer=member("a", 1))
    # An older epoch cannot take the partition over.
    stale = leader.Subscribe(pb.SubscribeRequest(stream=unique_name, consumer=member("b", 0)))
    assert await Sub(stale).status() == grpc.StatusCode.FAILED_PRECONDITION
    # A newer epoch replaces the member, whose stream then ends cleanly.
    second = await subscribe(leader, stream=unique_name, consumer=member("b", 2))
    assert await first.status() == grpc.StatusCode.OK
    await publish(lb, unique_name, b"x")
    assert [m.value for m in await second.take(1)] == [b"x"]
    second.call.cancel()
    missing_id = leader.Subscribe(
        pb.SubscribeRequest(stream=unique_name, consumer=pb.Consumer(groupId="g"))
    )
    assert await Sub(missing_id).status() == grpc.StatusCode.INVALID_ARGUMENT


async def test_auto_pause_when_idle(lb: Brokers, unique_name: str) -> None:
    await create(lb, unique_name, autoPauseTime=pb.NullableInt64(value=300))
    await publish(lb, unique_name, b"a")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while not (await lb.partition(unique_name)).paused:
        assert loop.time() < deadline, "the idle partition was not auto-paused"
        await asyncio.sleep(0.05)
    # A real broker that has not applied the pause yet forwards the message to
    # NATS, where the paused leader no longer listens: no ack, a timeout. Only a
    # broker that knows of the pause resumes the partition.
    await lb.until_every_broker(unique_name, every_partition("paused", True))
    (ack,) = await publish(lb, unique_name, b"b")  # publishing resumes it
    assert ack.offset == 1
    # Liftbridge 1.9's paused flag stays true once set; the emulator's too.
    assert (await lb.partition(unique_name)).paused


async def test_tls(nats_server: Any, unique_name: str) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    creds = grpc.ssl_server_credentials(
        [(cert.private_key_pem.bytes(), b"".join(c.bytes() for c in cert.cert_chain_pems))]
    )
    async with LiftbridgeCluster(1, nats_url=nats_server.url, server_credentials=creds) as c:
        client_creds = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
        async with grpc.aio.secure_channel(c.addresses[0], client_creds) as channel:
            stub = pbg.APIStub(channel)
            md = await stub.FetchMetadata(pb.FetchMetadataRequest(), timeout=TIMEOUT)
            assert [b.id for b in md.brokers] == ["broker-0"]
        async with grpc.aio.insecure_channel(c.addresses[0]) as plain:
            with pytest.raises(grpc.aio.AioRpcError):
                await pbg.APIStub(plain).FetchMetadata(pb.FetchMetadataRequest(), timeout=2.0)


async def test_stop_and_start_broker_take_the_index_as_i_or_index() -> None:
    # The API contract writes stop_broker(i) / start_broker(i); index= is kept.
    async with LiftbridgeCluster(brokers=2) as cluster:
        await cluster.stop_broker(i=1)
        assert not cluster.is_running(1)
        await cluster.start_broker(index=1)
        assert cluster.is_running(1)
        await cluster.stop_broker(1)
        assert not cluster.is_running(1)
        await cluster.start_broker(i=1)
        assert cluster.is_running(1)
        for call in (cluster.stop_broker, cluster.start_broker):
            with pytest.raises(InvalidArgumentError):
                await call()
            with pytest.raises(InvalidArgumentError):
                await call(1, index=1)
