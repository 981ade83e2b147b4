"""Scripted broker stubs for the Liftbridge client's unit tests (imported, not a conftest).

Every broker's stub takes the next scripted outcome (an error or a response) from one
shared list, so a test states exactly what the cluster answers, call by call, and reads
back which broker was asked what.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import grpc
import grpc.aio

from aioclients.liftbridge._client import Client
from aioclients.liftbridge._io._grpc import ChannelFactory
from aioclients.liftbridge._pb import api_pb2 as pb

#: the broker addresses of :func:`make_client`
ADDRESSES = ("a:1", "b:2")


class RpcError(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class Brokers:
    """Every broker's stub: a call takes the next scripted outcome (an error or a
    response) from one shared list; with the list empty it answers ``defaults``."""

    def __init__(self, outcomes: list[Any], defaults: dict[str, Any] | None = None) -> None:
        self.outcomes = outcomes
        self.defaults = defaults or {}
        self.log: list[tuple[str, str]] = []  # (broker, method) per call
        self.timeouts: list[float | None] = []  # the deadline of each call in log
        self.calls = asyncio.Event()

    def stub(self, name: str) -> Any:
        brokers = self

        class Stub:
            def __getattr__(self, method: str) -> Any:
                async def call(request: Any, *, timeout: float | None = None) -> Any:
                    brokers.log.append((name, method))
                    brokers.timeouts.append(timeout)
                    brokers.calls.set()
                    if brokers.outcomes:
                        outcome = brokers.outcomes.pop(0)
                    else:
                        outcome = brokers.defaults[method]
                    if isinstance(outcome, BaseException):
                        raise outcome
                    return outcome

                return call

        return Stub()

    def methods(self) -> list[str]:
        return [m for _, m in self.log]


def make_client(*, jitter: float) -> Client:
    """A client of two brokers whose calls go to :func:`script`'s stubs."""
    client = Client(
        list(ADDRESSES),
        factory=ChannelFactory(None),
        resubscribe_wait_time=1.0,
        ack_wait_time=1.0,
        max_conns_per_broker=1,
        keepalive_time=1.0,
        max_rpc_attempts=4,
        rng=random.Random(3),
    )
    client._jitter = lambda: jitter  # type: ignore[method-assign]
    return client


def script(client: Client, outcomes: list[Any], defaults: dict[str, Any] | None = None) -> Brokers:
    """Route every call of ``client`` to scripted stubs answering ``outcomes`` in turn."""
    brokers = Brokers(outcomes, defaults)
    stubs = {a: brokers.stub(a) for a in ADDRESSES}
    client._channel = lambda address: address  # type: ignore[assignment, method-assign, return-value]
    client._brokers.stream_channel = lambda address: address  # type: ignore[method-assign]
    client._stub_for = lambda channel: stubs[channel]  # type: ignore[method-assign, index]
    return brokers


def publish_ok(offset: int) -> pb.PublishResponse:
    return pb.PublishResponse(ack=pb.Ack(stream="s", partitionSubject="s", offset=offset))
