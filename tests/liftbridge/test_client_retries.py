"""Which failed RPCs the client repeats on another broker (a scripted stub per broker).

The client guide's resilient RPC retries on UNAVAILABLE only, and warns to
"be mindful of which errors are retried for idempotency reasons": a publish
that failed after the broker may have stored the message (CANCELLED, a reset
stream) must not be sent again, or the stream gets a duplicate.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

import aioclients.liftbridge as lb
from aioclients.liftbridge._client import Client
from aioclients.liftbridge._io._grpc import ChannelFactory
from aioclients.liftbridge._pb import api_pb2 as pb


class _RpcError(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class ScriptedBroker:
    """A broker's stub; calls on any broker take the next scripted outcome (an error
    or a response) from one shared list and are recorded in one shared log."""

    def __init__(self, name: str, outcomes: list[Any], log: list[tuple[str, str]]) -> None:
        self.name = name
        self.outcomes = outcomes
        self.log = log

    def __getattr__(self, method: str) -> Any:
        async def call(request: Any, *, timeout: float | None = None) -> Any:
            self.log.append((self.name, method))
            outcome = self.outcomes.pop(0)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        return call


def publish_ok(offset: int) -> pb.PublishResponse:
    return pb.PublishResponse(ack=pb.Ack(stream="s", partitionSubject="s", offset=offset))


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    c = Client(
        ["a:1", "b:2"],
        factory=ChannelFactory(None),
        resubscribe_wait_time=1.0,
        ack_wait_time=1.0,
        max_conns_per_broker=1,
        keepalive_time=1.0,
        max_rpc_attempts=4,
        rng=random.Random(3),
    )
    c._jitter = lambda: 0.0  # type: ignore[method-assign]
    yield c
    await c.close()


def script(client: Client, outcomes: list[Any]) -> list[tuple[str, str]]:
    """Script the brokers; returns the log of (broker, method) calls."""
    log: list[tuple[str, str]] = []
    brokers = {a: ScriptedBroker(a, outcomes, log) for a in ("a:1", "b:2")}
    client._channel = lambda address: address  # type: ignore[assignment, method-assign, return-value]
    client._stub_for = lambda channel: brokers[channel]  # type: ignore[method-assign, index]
    return log


def methods(log: list[tuple[str, str]]) -> list[str]:
    return [method for _, method in log]


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
    failure = _RpcError(code, details)
    log = script(client, [failure, publish_ok(1)])
    with pytest.raises(lb.LiftbridgeConnectError) as info:
        await client.publish("s", b"v", partition=0)
    assert methods(log) == ["Publish"]  # once: the broker may have stored it
    text = str(info.value)
    assert "may or may not" in text
    assert code.name in text


async def test_a_publish_to_subject_that_broke_in_flight_is_not_sent_again(
    client: Client,
) -> None:
    failure = _RpcError(grpc.StatusCode.CANCELLED, "Cancelled")
    log = script(client, [failure, pb.PublishToSubjectResponse()])
    with pytest.raises(lb.LiftbridgeConnectError):
        await client.publish_to_subject("subj", b"v")
    assert methods(log) == ["PublishToSubject"]


async def test_a_publish_refused_as_unavailable_moves_to_the_next_broker(client: Client) -> None:
    refused = _RpcError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")
    log = script(client, [refused, publish_ok(7)])
    ack = await client.publish("s", b"v", partition=0)
    assert ack is not None
    assert ack.offset == 7
    assert methods(log) == ["Publish", "Publish"]
    assert log[0][0] != log[1][0]  # on the other broker


async def test_a_metadata_fetch_is_still_repeated_after_a_cancelled_call(client: Client) -> None:
    # Reading metadata twice is harmless: a call cancelled because another
    # call closed that broker's channel is repeated elsewhere, as before.
    cancelled = _RpcError(grpc.StatusCode.CANCELLED, "Cancelled")
    md = pb.FetchMetadataResponse(brokers=[pb.Broker(id="x", host="a", port=1)])
    log = script(client, [cancelled, md])
    await client.fetch_metadata()
    assert methods(log) == ["FetchMetadata", "FetchMetadata"]
