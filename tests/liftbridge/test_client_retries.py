"""Which failed RPCs the client repeats on another broker (a scripted stub per broker).

The client guide's resilient RPC retries on UNAVAILABLE only, and warns to
"be mindful of which errors are retried for idempotency reasons": a publish
that failed after the broker may have stored the message (CANCELLED, a reset
stream) must not be sent again, or the stream gets a duplicate.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

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
