"""Which failed RPCs the client repeats on another broker (a scripted stub per broker).

The client guide's resilient RPC retries on UNAVAILABLE only, and warns to
"be mindful of which errors are retried for idempotency reasons": a publish
that failed after the broker may have stored the message (CANCELLED, a reset
stream) must not be sent again, or the stream gets a duplicate.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from scripted_brokers import RpcError, make_client, publish_ok, script

import aioclients.liftbridge as lb
from aioclients.liftbridge._client import Client
from aioclients.liftbridge._pb import api_pb2 as pb


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    c = make_client(jitter=0.0)
    yield c
    await c.close()


@pytest.mark.parametrize(
    ("code", "details"),
    [
        (grpc.StatusCode.CANCELLED, "Cancelled"),
        (grpc.StatusCode.INTERNAL, "Received RST_STREAM with error code 2"),
        (grpc.StatusCode.INTERNAL, "Received http2 header with status: 502 from core"),
    ],
)
async def test_a_publish_that_broke_in_flight_is_not_sent_again(
    client: Client, code: grpc.StatusCode, details: str
) -> None:
    failure = RpcError(code, details)
    brokers = script(client, [failure, publish_ok(1)])
    with pytest.raises(lb.LiftbridgeConnectError) as info:
        await client.publish("s", b"v", partition=0)
    assert brokers.methods() == ["Publish"]  # once: the broker may have stored it
    text = str(info.value)
    assert "may or may not" in text
    assert code.name in text


async def test_a_publish_to_subject_that_broke_in_flight_is_not_sent_again(
    client: Client,
) -> None:
    failure = RpcError(grpc.StatusCode.CANCELLED, "Cancelled")
    brokers = script(client, [failure, pb.PublishToSubjectResponse()])
    with pytest.raises(lb.LiftbridgeConnectError):
        await client.publish_to_subject("subj", b"v")
    assert brokers.methods() == ["PublishToSubject"]


async def test_a_publish_refused_as_unavailable_moves_to_the_next_broker(client: Client) -> None:
    refused = RpcError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")
    brokers = script(client, [refused, publish_ok(7)])
    ack = await client.publish("s", b"v", partition=0)
    assert ack is not None
    assert ack.offset == 7
    assert brokers.methods() == ["Publish", "Publish"]
    assert brokers.log[0][0] != brokers.log[1][0]  # on the other broker


async def test_a_metadata_fetch_is_still_repeated_after_a_cancelled_call(client: Client) -> None:
    # Reading metadata twice is harmless: a call cancelled because another
    # call closed that broker's channel is repeated elsewhere, as before.
    cancelled = RpcError(grpc.StatusCode.CANCELLED, "Cancelled")
    md = pb.FetchMetadataResponse(brokers=[pb.Broker(id="x", host="a", port=1)])
    brokers = script(client, [cancelled, md])
    await client.fetch_metadata()
    assert brokers.methods() == ["FetchMetadata", "FetchMetadata"]


def _listed(created: int) -> pb.FetchMetadataResponse:
    partition = pb.PartitionMetadata(id=0, leader="x")
    stream = pb.StreamMetadata(name="s", creationTimestamp=created, partitions={0: partition})
    return pb.FetchMetadataResponse(streamMetadata=[stream])


async def test_create_stream_waits_until_no_broker_shows_a_deleted_stream_of_the_name(
    client: Client,
) -> None:
    # Right after a delete and a create of one name, a broker that has not applied
    # the delete lists the old stream (older creation time) and still stores, in the
    # old log, what is published on the subject: create_stream must not return yet.
    old, new = _listed(1), _listed(2)
    brokers = script(client, [pb.CreateStreamResponse(), old, new, new, new])
    await client.create_stream("s", "s")
    assert brokers.methods() == ["CreateStream"] + ["FetchMetadata"] * 4
    # Both brokers asked again once they disagreed, until both showed the new stream.
    assert [b for b, m in brokers.log if m == "FetchMetadata"] == ["a:1", "b:2", "a:1", "b:2"]


# -- channels in reconnect backoff ------------------------------------------------------


class _Channel:
    """A channel of :class:`_Backoff`: ``failing`` ones model gRPC's reconnect backoff
    (every call fails at once with UNAVAILABLE although the broker is back)."""

    def __init__(self, address: str, failing: bool) -> None:
        self.address = address
        self.failing = failing
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class _Backoff:
    """Channel factory and stubs: the first channel opened to each address in
    ``stale`` is in reconnect backoff; every later one reaches the broker, whose
    answers (per method) are ``answers``."""

    def __init__(self, stale: set[str], answers: dict[str, Any]) -> None:
        self.stale = set(stale)
        self.answers = answers
        self.opened: list[_Channel] = []
        self.log: list[tuple[str, str, bool]] = []  # (address, method, answered)
        self.calls = asyncio.Event()

    def open(self, address: str) -> _Channel:
        channel = _Channel(address, failing=address in self.stale)
        self.stale.discard(address)
        self.opened.append(channel)
        return channel

    def stub(self, channel: _Channel) -> Any:
        backoff = self

        class Stub:
            def __getattr__(self, method: str) -> Any:
                async def call(request: Any, *, timeout: float | None = None) -> Any:
                    backoff.log.append((channel.address, method, not channel.failing))
                    backoff.calls.set()
                    if channel.failing:
                        raise RpcError(
                            grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses"
                        )
                    return backoff.answers[method]

                return call

        return Stub()


def _with_backoff(client: Client, stale: set[str], answers: dict[str, Any]) -> _Backoff:
    backoff = _Backoff(stale, answers)
    client._brokers.factory = backoff  # type: ignore[assignment]
    client._brokers.stub_for = backoff.stub  # type: ignore[assignment, method-assign]
    return backoff


def _shows_s(resp: pb.FetchMetadataResponse) -> bool:
    return any(md.name == "s" for md in resp.streamMetadata)


async def test_settle_asks_a_broker_whose_channel_failed_again_on_a_new_channel(
    client: Client,
) -> None:
    # A broker restarted a moment ago is live, but the client's old channel to it
    # is in reconnect backoff: one failure must not count it as down.
    backoff = _with_backoff(client, {"b:2"}, {"FetchMetadata": _listed(1)})
    assert await client._brokers.settle("create_stream", ["s"], _shows_s)
    asked = [(a, ok) for a, m, ok in backoff.log if a == "b:2"]
    assert asked == [("b:2", False), ("b:2", True)]  # again, on a new channel: it answered
    assert client._brokers.channels["b:2"] is backoff.opened[-1]


async def test_settle_skips_a_broker_that_fails_on_a_new_channel_too(client: Client) -> None:
    backoff = _with_backoff(client, set(), {"FetchMetadata": _listed(1)})

    def open_down(address: str) -> _Channel:  # b is down: every channel to it fails
        channel = _Channel(address, failing=address == "b:2")
        backoff.opened.append(channel)
        return channel

    backoff.open = open_down  # type: ignore[method-assign]
    # Skipped after the second failure: settle() does not wait its 5 s for it.
    assert await asyncio.wait_for(client._brokers.settle("create_stream", ["s"], _shows_s), 2.0)
    assert [ok for a, _, ok in backoff.log if a == "b:2"] == [False, False]


async def test_an_assignments_fetch_that_failed_to_connect_uses_a_new_channel_next(
    client: Client,
) -> None:
    # The coordinator came back after a while down: the consumer's next fetch must
    # not go through the channel still in reconnect backoff (which would fail for
    # seconds, long enough to report a live coordinator).
    md = pb.FetchMetadataResponse(
        brokers=[pb.Broker(id="a", host="a", port=1), pb.Broker(id="b", host="b", port=2)]
    )
    client._metadata.update(md, now=0.0)
    backoff = _with_backoff(
        client,
        {"b:2"},
        {"FetchConsumerGroupAssignments": pb.FetchConsumerGroupAssignmentsResponse(epoch=4)},
    )
    with pytest.raises(lb.LiftbridgeConnectError):
        await client.fetch_consumer_group_assignments("g", "m1", 4, coordinator="b")
    epoch, _ = await client.fetch_consumer_group_assignments("g", "m1", 4, coordinator="b")
    assert epoch == 4
    assert [(a, ok) for a, _, ok in backoff.log] == [("b:2", False), ("b:2", True)]
