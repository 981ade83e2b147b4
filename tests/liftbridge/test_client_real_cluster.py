"""What a real Liftbridge cluster answers that the emulator did not (scripted stubs).

A real cluster applies metadata changes through Raft, broker by broker, so a
broker may answer from its old state for some ms; a paused partition's Subscribe
fails with texts of its own; two members creating a group race; a broker asked
to start past the end starts at its next message. Each test scripts the brokers'
answers and checks that the client copes without retries by the user.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
from scripted_brokers import RpcError, make_client, publish_ok, script

import aioclients.liftbridge as lb
from aioclients.liftbridge._client import Client
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._protocol._resubscribe import Resubscriber
from aioclients.liftbridge._subscription import _CLEANER_RETRIES

WAIT = 5.0


def metadata(
    *, stream: str | None = "s", paused: bool = False, readonly: bool = False, leader: str = "a"
) -> pb.FetchMetadataResponse:
    resp = pb.FetchMetadataResponse(
        brokers=[pb.Broker(id="a", host="a", port=1), pb.Broker(id="b", host="b", port=2)]
    )
    if stream is not None:
        md = resp.streamMetadata.add(name=stream, subject=stream)
        md.partitions[0].CopyFrom(
            pb.PartitionMetadata(
                id=0, leader=leader, replicas=["a"], isr=["a"], paused=paused, readonly=readonly
            )
        )
    return resp


def not_found(details: str) -> RpcError:
    return RpcError(grpc.StatusCode.NOT_FOUND, details)


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    c = make_client(jitter=0.001)
    yield c
    await c.close()


# -- publish right after create_stream (P5) ---------------------------------------------


async def test_a_publish_answered_not_found_is_repeated_while_the_metadata_lists_the_stream(
    client: Client,
) -> None:
    # The broker asked had not applied the CreateStream yet: NOT_FOUND means
    # nothing was stored, so a second send cannot duplicate the message.
    brokers = script(client, [not_found("no such stream: s"), metadata(), publish_ok(0)])
    ack = await asyncio.wait_for(client.publish("s", b"v", partition=0), WAIT)
    assert ack is not None
    assert ack.offset == 0
    assert brokers.methods() == ["Publish", "FetchMetadata", "Publish"]


async def test_a_publish_to_a_stream_nobody_lists_fails_at_once(client: Client) -> None:
    brokers = script(client, [not_found("no such stream: s"), metadata(stream=None)])
    with pytest.raises(lb.NoSuchStreamError):
        await asyncio.wait_for(client.publish("s", b"v", partition=0), WAIT)
    assert brokers.methods() == ["Publish", "FetchMetadata"]


async def test_a_publish_is_still_not_repeated_after_it_broke_in_flight(client: Client) -> None:
    brokers = script(client, [RpcError(grpc.StatusCode.CANCELLED, "Cancelled"), publish_ok(1)])
    with pytest.raises(lb.LiftbridgeConnectError):
        await asyncio.wait_for(client.publish("s", b"v", partition=0), WAIT)
    assert brokers.methods() == ["Publish"]


async def test_an_all_ack_timeout_says_to_raise_ack_wait_time(client: Client) -> None:
    script(client, [RpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")])
    with pytest.raises(lb.LiftbridgeTimeoutError, match=r"replica\.max\.idle\.wait"):
        await client.publish("s", b"v", partition=0, ack_policy=lb.AckPolicy.ALL)


# -- stream changes return once every broker shows them (L2) -----------------------------


async def test_create_stream_returns_once_every_broker_lists_the_stream(client: Client) -> None:
    created = pb.CreateStreamResponse()
    brokers = script(
        client, [created, metadata(stream=None), metadata(), metadata()], {"FetchMetadata": None}
    )
    await asyncio.wait_for(client.create_stream("s", "s"), WAIT)
    # a:1 did not list it at first: asked again; b:2 listed it at once
    assert brokers.methods() == ["CreateStream", "FetchMetadata", "FetchMetadata", "FetchMetadata"]
    assert brokers.outcomes == []


async def test_delete_stream_returns_once_no_broker_lists_the_stream(client: Client) -> None:
    gone = metadata(stream=None)
    brokers = script(client, [pb.DeleteStreamResponse(), metadata(), gone, gone])
    await asyncio.wait_for(client.delete_stream("s"), WAIT)
    assert brokers.methods().count("FetchMetadata") == 3
    assert brokers.outcomes == []


async def test_set_stream_readonly_false_returns_once_every_broker_shows_it(
    client: Client,
) -> None:
    # A publish sent to a broker that still had the partition readonly was
    # dropped without an ack (Liftbridge 1.9): wait until none has.
    brokers = script(
        client,
        [
            pb.SetStreamReadonlyResponse(),
            metadata(readonly=True),
            metadata(readonly=False),
            metadata(readonly=False),
        ],
    )
    await asyncio.wait_for(client.set_stream_readonly("s", readonly=False), WAIT)
    assert brokers.methods().count("FetchMetadata") == 3
    assert brokers.outcomes == []


async def test_pause_stream_returns_once_every_broker_shows_it(client: Client) -> None:
    brokers = script(
        client,
        [
            pb.PauseStreamResponse(),
            metadata(paused=False),
            metadata(paused=True),
            metadata(paused=True),
        ],
    )
    await asyncio.wait_for(client.pause_stream("s"), WAIT)
    assert brokers.outcomes == []


async def test_a_broker_that_does_not_answer_is_not_waited_for(client: Client) -> None:
    # Asked once more (on a new channel: the first failure may be an old channel's
    # reconnect backoff), then skipped.
    down = RpcError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")
    brokers = script(client, [pb.CreateStreamResponse(), down, metadata(), down])
    await asyncio.wait_for(client.create_stream("s", "s"), WAIT)
    assert brokers.outcomes == []
    asked = [b for b, m in brokers.log if m == "FetchMetadata"]
    assert len(asked) == 3
    assert asked[0] == asked[2] != asked[1]


async def test_a_call_with_no_metadata_leader_yet_is_asked_again(client: Client) -> None:
    # A fresh cluster (or one electing a new metadata leader) has nobody to
    # forward CreateStream to: "nats: no responders available for request".
    no_leader = RpcError(grpc.StatusCode.INTERNAL, "nats: no responders available for request")
    brokers = script(client, [no_leader, pb.CreateStreamResponse(), metadata(), metadata()])
    await asyncio.wait_for(client.create_stream("s", "s"), WAIT)
    assert brokers.methods()[:2] == ["CreateStream", "CreateStream"]


# -- FetchMetadata while a broker is down -------------------------------------------------


async def test_fetch_metadata_puts_no_deadline_on_the_wire(client: Client) -> None:
    # A broker whose cache of the cluster's brokers is stale asks every peer and
    # waits for all of them until the call's deadline (3 s without one): with a
    # peer down, a deadline of rpc_timeout made every such call fail at that
    # deadline (measured on v1.9.0: DEADLINE_EXCEEDED at 10 s; 3.3 s and the live
    # brokers without a deadline).
    brokers = script(client, [metadata(), pb.CreateStreamResponse(), metadata(), metadata()])
    await client.fetch_metadata()
    await client.create_stream("s", "s")  # waits for every broker's FetchMetadata
    deadlines = list(zip(brokers.methods(), brokers.timeouts, strict=True))
    assert deadlines == [
        ("FetchMetadata", None),
        ("CreateStream", 10.0),
        ("FetchMetadata", None),
        ("FetchMetadata", None),
    ]


async def test_a_fetch_metadata_without_answer_still_ends_at_rpc_timeout(client: Client) -> None:
    class Silent:
        async def FetchMetadata(self, request: Any) -> Any:
            await asyncio.Event().wait()

    script(client, [])
    client._stub_for = lambda channel: Silent()  # type: ignore[method-assign, assignment]
    client._brokers.rpc_timeout = 0.05
    with pytest.raises(lb.LiftbridgeTimeoutError):
        await asyncio.wait_for(client.fetch_metadata(), WAIT)


# -- cursors ----------------------------------------------------------------------------


async def test_set_cursor_waits_for_a_resumed_cursors_partition(client: Client) -> None:
    # The broker stores a cursor with an ALL ack in __cursors, which pauses after a
    # minute idle; the first cursor after it resumes waits for the followers' idle
    # fetch (up to 10 s; 9.1-9.4 s measured on v1.9.0): the default rpc_timeout of
    # 10 s would cut it off.
    assert client._brokers.rpc_timeout == 10.0
    cursors = metadata(stream="__cursors")
    brokers = script(client, [cursors, pb.SetCursorResponse(), pb.FetchCursorResponse(offset=3)])
    await client.set_cursor("c", "s", 0, 3)
    assert await client.fetch_cursor("c", "s", 0) == 3
    deadlines = dict(zip(brokers.methods(), brokers.timeouts, strict=True))
    assert deadlines["SetCursor"] is not None
    assert deadlines["SetCursor"] >= 20.0
    assert deadlines["FetchCursor"] == 10.0  # a read resumes nothing: the usual deadline


# -- consumer groups (P2, P2b, P3, P4) ------------------------------------------------------


def joined(epoch: int, *, coordinator_timeout: float = 15.0) -> pb.JoinConsumerGroupResponse:
    return pb.JoinConsumerGroupResponse(
        coordinator="a",
        epoch=epoch,
        consumerTimeout=int(15e9),
        coordinatorTimeout=int(coordinator_timeout * 1e9),
    )


def group_metadata(epoch: int) -> pb.FetchMetadataResponse:
    resp = metadata()
    resp.groupMetadata.add(groupId="g", coordinator="a", epoch=epoch)
    return resp


def assignments(epoch: int) -> pb.FetchConsumerGroupAssignmentsResponse:
    return pb.FetchConsumerGroupAssignmentsResponse(epoch=epoch)


async def test_a_join_that_lost_the_race_to_create_the_group_joins_it(client: Client) -> None:
    lost = RpcError(grpc.StatusCode.FAILED_PRECONDITION, "consumer group already exists")
    brokers = script(client, [lost, joined(245)])
    join = await asyncio.wait_for(client.join_consumer_group("g", "m2", ["s"]), WAIT)
    assert join.epoch == 245
    assert brokers.methods() == ["JoinConsumerGroup", "JoinConsumerGroup"]


async def test_the_first_assignments_fetch_waits_for_the_coordinator_to_know_the_group(
    client: Client,
) -> None:
    client._metadata.update(metadata(), now=0.0)
    brokers = script(
        client,
        [
            joined(0),
            not_found("consumer group does not exist"),  # the join not applied there yet
            group_metadata(0),
            assignments(0),
        ],
        {"LeaveConsumerGroup": pb.LeaveConsumerGroupResponse()},
    )
    async with client.consumer("g", ["s"], consumer_id="m1", checkpoint_interval=None) as c:
        assert c.epoch == 0
    assert brokers.methods()[:4] == [
        "JoinConsumerGroup",
        "FetchConsumerGroupAssignments",
        "FetchMetadata",
        "FetchConsumerGroupAssignments",
    ]


async def test_a_new_epoch_is_read_from_the_metadata_without_rejoining_or_reporting(
    client: Client,
) -> None:
    client._metadata.update(metadata(), now=0.0)
    epoch_differs = RpcError(
        grpc.StatusCode.FAILED_PRECONDITION,
        "client-provided group epoch differs from broker group epoch",
    )
    brokers = script(
        client,
        [joined(0), assignments(0), epoch_differs, group_metadata(312)],
        {
            "FetchConsumerGroupAssignments": assignments(312),
            "LeaveConsumerGroup": pb.LeaveConsumerGroupResponse(),
        },
    )
    async with client.consumer(
        "g", ["s"], consumer_id="m1", checkpoint_interval=None, fetch_interval=0.01
    ) as c:
        async with asyncio.timeout(WAIT):
            while c.epoch != 312 or "FetchMetadata" not in brokers.methods():
                brokers.calls.clear()
                await brokers.calls.wait()
    assert "JoinConsumerGroup" not in brokers.methods()[1:]
    assert "ReportConsumerGroupCoordinator" not in brokers.methods()


async def test_a_member_whose_group_was_deleted_joins_again(client: Client) -> None:
    # The only member was silent past the consumer timeout: the coordinator
    # evicted it, which deleted the group. Every fetch then answers "consumer
    # group does not exist", and the group's metadata says UNKNOWN_GROUP.
    client._metadata.update(metadata(), now=0.0)
    unknown = metadata()
    unknown.groupMetadata.add(groupId="g", error=pb.ConsumerGroupMetadata.UNKNOWN_GROUP)
    brokers = script(
        client,
        [
            joined(0),
            assignments(0),
            not_found("consumer group does not exist"),
            unknown,
            joined(7),
        ],
        {
            "FetchConsumerGroupAssignments": assignments(7),
            "LeaveConsumerGroup": pb.LeaveConsumerGroupResponse(),
        },
    )
    async with client.consumer(
        "g", ["s"], consumer_id="m1", checkpoint_interval=None, fetch_interval=0.01
    ) as c:
        async with asyncio.timeout(WAIT):
            while c.epoch != 7:
                brokers.calls.clear()
                await brokers.calls.wait()
    assert brokers.methods()[:5] == [
        "JoinConsumerGroup",
        "FetchConsumerGroupAssignments",
        "FetchConsumerGroupAssignments",
        "FetchMetadata",
        "JoinConsumerGroup",
    ]


async def test_the_coordinator_is_reported_only_after_coordinator_timeout_without_answer(
    client: Client,
) -> None:
    client._metadata.update(metadata(), now=0.0)
    down = RpcError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")
    brokers = script(
        client,
        [joined(0, coordinator_timeout=0.3), assignments(0)],
        {
            "FetchConsumerGroupAssignments": down,
            "FetchMetadata": group_metadata(0),
            "ReportConsumerGroupCoordinator": pb.ReportConsumerGroupCoordinatorResponse(),
            "LeaveConsumerGroup": pb.LeaveConsumerGroupResponse(),
        },
    )
    loop = asyncio.get_running_loop()
    async with client.consumer(
        "g", ["s"], consumer_id="m1", checkpoint_interval=None, fetch_interval=0.02
    ):
        started = loop.time()
        async with asyncio.timeout(WAIT):
            while "ReportConsumerGroupCoordinator" not in brokers.methods():
                brokers.calls.clear()
                await brokers.calls.wait()
        assert loop.time() - started >= 0.25
        failed_fetches = brokers.methods().count("FetchConsumerGroupAssignments") - 1
        assert failed_fetches >= 3  # retried several times before reporting
    assert brokers.methods().count("ReportConsumerGroupCoordinator") == 1


# -- subscribing (P1, P7) ------------------------------------------------------------------


class FakeCall:
    def __init__(self, reads: list[Any]) -> None:
        self.reads = reads
        self.cancelled = False

    async def read(self) -> Any:
        if not self.reads:
            await asyncio.Event().wait()
        item = self.reads.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> bool:
        self.cancelled = True
        return True


def script_subscribe(client: Client, calls: list[FakeCall], *, paused: bool = True) -> None:
    """Subscribe calls answer from ``calls``; the partition's metadata says ``paused``."""
    client._metadata.update(metadata(), now=0.0)

    class Stub:
        def Subscribe(self, request: Any) -> FakeCall:
            return calls.pop(0)

        async def FetchPartitionMetadata(self, request: Any, *, timeout: float) -> Any:
            return pb.FetchPartitionMetadataResponse(
                metadata=pb.PartitionMetadata(id=request.partition, paused=paused)
            )

    async def acquire(address: str) -> Any:
        return address

    client._acquire_subscribe_channel = acquire  # type: ignore[method-assign, assignment]
    client._release_subscribe_channel = lambda address, channel: None  # type: ignore[method-assign]
    client._stub_for = lambda channel: Stub()  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("code", "details"),
    [
        (grpc.StatusCode.INTERNAL, "Failed to create stream reader: segment has been closed"),
        (grpc.StatusCode.INTERNAL, "Failed to create stream reader: commit log closed"),
        (grpc.StatusCode.FAILED_PRECONDITION, "commit log was closed"),
    ],
)
async def test_subscribing_to_a_paused_partition_says_to_resume(
    client: Client, code: grpc.StatusCode, details: str
) -> None:
    # "segment has been closed" is also the cleaner at work: asked again a few times.
    answers = 1 + (_CLEANER_RETRIES if "segment has been closed" in details else 0)
    client._refresh_metadata = lambda: asyncio.sleep(0)  # type: ignore[method-assign, assignment, return-value]
    script_subscribe(client, [FakeCall([RpcError(code, details)]) for _ in range(answers)])
    sub = client.subscribe("s")
    with pytest.raises(lb.PartitionPausedError, match=r"resume=True"):
        await asyncio.wait_for(sub.open(), WAIT)


@pytest.mark.parametrize(("paused", "closed_answers"), [(False, 12), (True, _CLEANER_RETRIES)])
async def test_a_segment_closed_by_the_cleaner_is_asked_again(
    client: Client, paused: bool, closed_answers: int
) -> None:
    # While the cleaner deletes or compacts segments, Liftbridge 1.9 opens readers on
    # the old segment list: INTERNAL "segment has been closed", a paused partition's
    # answer. A partition whose metadata says it is not paused is asked again (a
    # compacted stream answers so most of the time); one that says paused (which
    # Liftbridge keeps saying once it was) a few times.
    closed = RpcError(
        grpc.StatusCode.INTERNAL, "Failed to create stream reader: segment has been closed"
    )
    calls = [FakeCall([closed]) for _ in range(closed_answers)]
    calls.append(FakeCall([pb.Message(), pb.Message(offset=7, value=b"x")]))
    client._refresh_metadata = lambda: asyncio.sleep(0)  # type: ignore[method-assign, assignment, return-value]
    script_subscribe(client, calls, paused=paused)
    async with asyncio.timeout(WAIT):
        async with client.subscribe("s") as sub:
            msg = await sub.__anext__()
    assert msg.offset == 7
    assert calls == []


async def test_closed_segments_answered_too_often_on_a_paused_partition_mean_paused(
    client: Client,
) -> None:
    closed = RpcError(
        grpc.StatusCode.INTERNAL, "Failed to create stream reader: segment has been closed"
    )
    calls = [FakeCall([closed]) for _ in range(_CLEANER_RETRIES + 1)]
    client._refresh_metadata = lambda: asyncio.sleep(0)  # type: ignore[method-assign, assignment, return-value]
    script_subscribe(client, calls, paused=True)
    with pytest.raises(lb.PartitionPausedError, match=r"resume=True"):
        await asyncio.wait_for(client.subscribe("s").open(), WAIT)
    assert calls == []


async def test_a_stop_offset_the_broker_passes_by_ends_the_subscription(client: Client) -> None:
    # A broker stops only at the stop offset itself; retention removed it, so the
    # stream goes on past it.
    call = FakeCall([pb.Message()] + [pb.Message(offset=o) for o in (3, 4, 9, 10)])
    script_subscribe(client, [call])
    async with asyncio.timeout(WAIT):
        async with client.subscribe("s", start_offset=3, stop_offset=5) as sub:
            got = [msg.offset async for msg in sub]
    assert got == [3, 4]


@pytest.mark.parametrize(
    ("details", "last"),
    [
        ("failed to read message headers: segment has been closed", 4),
        ("failed to reinitialize reader: segment has been closed", None),
    ],
)
async def test_a_reader_behind_retention_gets_segment_deleted(
    client: Client, details: str, last: int | None
) -> None:
    reads: list[Any] = [pb.Message()]
    if last is not None:
        reads.append(pb.Message(offset=last))
    reads.append(RpcError(grpc.StatusCode.UNKNOWN, details))
    script_subscribe(client, [FakeCall(reads)])
    async with asyncio.timeout(WAIT):
        async with client.subscribe("s") as sub:
            with pytest.raises(lb.SegmentDeletedError, match="subscribe again") as info:
                _ = [msg.offset async for msg in sub]
    assert info.value.last_offset == last
    assert info.value.code == "UNKNOWN"


async def test_not_leader_on_subscribe_is_still_retried(client: Client) -> None:
    not_leader = RpcError(grpc.StatusCode.FAILED_PRECONDITION, "Server not partition leader")
    second = FakeCall([pb.Message(), pb.Message(offset=0, value=b"x")])
    script_subscribe(client, [FakeCall([not_leader]), second])
    client._refresh_metadata = lambda: asyncio.sleep(0)  # type: ignore[method-assign, assignment, return-value]
    async with asyncio.timeout(WAIT):
        async with client.subscribe("s") as sub:
            msg = await sub.__anext__()
    assert msg.value == b"x"


async def test_offsets_below_start_offset_are_not_delivered(client: Client) -> None:
    # Asked to start at 100 on a partition whose end is 4, a real broker sends
    # its next message (offset 5) and on.
    call = FakeCall(
        [pb.Message()] + [pb.Message(offset=o, value=b"%d" % o) for o in (5, 99, 100, 101)]
    )
    script_subscribe(client, [call])
    async with asyncio.timeout(WAIT):
        async with client.subscribe("s", start_offset=100) as sub:
            got = [(await sub.__anext__()).offset, (await sub.__anext__()).offset]
    assert got == [100, 101]


def test_the_resubscriber_drops_offsets_below_the_start() -> None:
    res = Resubscriber(wait_time=1.0, rng=random.Random(1), start_offset=100)
    assert [res.on_message(o) for o in (5, 99, 100, 100, 101)] == [False, False, True, False, True]
    assert res.last_offset == 101
    plain = Resubscriber(wait_time=1.0, rng=random.Random(1))
    assert plain.on_message(0)
    assert not plain.on_message(0)
    assert plain.last_offset == 0
