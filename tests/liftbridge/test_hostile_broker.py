"""Liftbridge against a hostile broker: one that accepts and never answers, stops
reading, answers bytes that are not HTTP/2, announces an HTTP/2 frame of 16 MB or a
gRPC message of 4 GB. The cluster's metadata comes from a small real gRPC service in
this file, which names the hostile broker as the leader of every partition, so each
public call reaches it: connect and fetch_metadata (``grpc.aio``), create_stream and
the cursors (``grpc.aio``, to the leader), publish, publish_async and subscribe (the
client's own HTTP/2). Each ends within its bound with an aioclients error, a
cancelled call leaves nothing running, and an oversized frame is refused, not
buffered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import hpack
import pytest

from aioclients import AioClientsError
from aioclients.liftbridge import Client, LiftbridgeError, connect
from aioclients.liftbridge._pb import api_pb2 as pb

#: generous bound for a call that must end on its own
BOUND = 10.0

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(
    kind: int, flags: int, stream: int, payload: bytes, length: int | None = None
) -> bytes:
    size = len(payload) if length is None else length
    return size.to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


SETTINGS = h2_frame(4, 0, 0, b"")
SETTINGS_ACK = h2_frame(4, 1, 0, b"")


async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while await reader.read(65536):
        pass


async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n" + bytes(range(256)) * 16)
    while await reader.read(65536):
        pass


async def huge_frame(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readexactly(len(_PREFACE))
    # a DATA frame announced at 16 MB, then more for as long as the client reads
    writer.write(SETTINGS + h2_frame(0, 0, 1, b"", length=0xFFFFFF))
    chunk = bytes(65536)
    while True:
        writer.write(chunk)
        await writer.drain()


async def huge_grpc_message(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A proper HTTP/2 answer on the first stream, whose gRPC message is announced at
    4 GB (then more, for as long as the client reads)."""
    await reader.readexactly(len(_PREFACE))
    writer.write(SETTINGS + SETTINGS_ACK)
    headers = hpack.Encoder().encode([(":status", "200"), ("content-type", "application/grpc")])
    writer.write(h2_frame(1, 4, 1, headers))  # END_HEADERS
    writer.write(h2_frame(0, 0, 1, b"\x00" + (2**32 - 1).to_bytes(4, "big") + bytes(1024)))
    chunk = h2_frame(0, 0, 1, bytes(16384))
    while True:
        writer.write(chunk)
        await writer.drain()


async def stops_reading(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readexactly(len(_PREFACE))
    writer.write(SETTINGS + SETTINGS_ACK)
    await asyncio.Event().wait()  # and read nothing more: the client's writes back up


class Hostile:
    """A loopback TCP server running ``script`` per connection."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.accepted = asyncio.Event()

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.accepted.set()
        try:
            await self.script(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    async def __aenter__(self) -> Hostile:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()


class Metadata:
    """A real gRPC FetchMetadata service (the seed of connect) whose cluster is one
    broker, ``bad`` (the hostile server), leader of streams ``s`` and ``__cursors``."""

    def __init__(self, bad_port: int) -> None:
        self.bad_port = bad_port
        self.server = grpc.aio.server()
        self.port = 0

    def answer(self) -> pb.FetchMetadataResponse:
        partition = pb.PartitionMetadata(id=0, leader="bad", replicas=["bad"], isr=["bad"])
        return pb.FetchMetadataResponse(
            # only the hostile broker: every call after connect goes to it
            brokers=[pb.Broker(id="bad", host="127.0.0.1", port=self.bad_port)],
            streamMetadata=[
                pb.StreamMetadata(name=name, subject=name, partitions={0: partition})
                for name in ("s", "__cursors")
            ],
        )

    async def __aenter__(self) -> Metadata:
        async def fetch(request: Any, context: Any) -> pb.FetchMetadataResponse:
            return self.answer()

        async def partition(request: Any, context: Any) -> pb.FetchPartitionMetadataResponse:
            return pb.FetchPartitionMetadataResponse(
                metadata=self.answer().streamMetadata[0].partitions[0]
            )

        handler = grpc.method_handlers_generic_handler(
            "proto.API",
            {
                "FetchMetadata": grpc.unary_unary_rpc_method_handler(
                    fetch,
                    request_deserializer=pb.FetchMetadataRequest.FromString,
                    response_serializer=pb.FetchMetadataResponse.SerializeToString,
                ),
                "FetchPartitionMetadata": grpc.unary_unary_rpc_method_handler(
                    partition,
                    request_deserializer=pb.FetchPartitionMetadataRequest.FromString,
                    response_serializer=pb.FetchPartitionMetadataResponse.SerializeToString,
                ),
            },
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop(None)


def quick_connect(port: int, **options: Any) -> Awaitable[Client]:
    defaults: dict[str, Any] = {
        "rpc_timeout": 0.3,
        "max_rpc_attempts": 1,
        "ack_wait_time": 0.3,
        "resubscribe_wait_time": 0.0,
    }
    return connect(f"127.0.0.1:{port}", **{**defaults, **options})


async def leader_only_client(meta: Metadata, **options: Any) -> Client:
    """A client connected through ``meta``, which then stops: the client's calls go
    to the hostile broker (after one refused attempt on the seed)."""
    client = await asyncio.wait_for(
        quick_connect(meta.port, **{"max_rpc_attempts": 2, **options}), BOUND
    )
    await meta.server.stop(None)
    return client


SCRIPTS = [never_answer, garbage, huge_frame, huge_grpc_message, stops_reading]


@pytest.mark.parametrize("script", SCRIPTS)
async def test_connect_to_a_hostile_broker_fails_typed_within_its_timeout(script: Script) -> None:
    async with Hostile(script) as bad:
        with pytest.raises(LiftbridgeError):
            await asyncio.wait_for(quick_connect(bad.port), BOUND)


async def test_cancelling_connect_to_a_silent_broker_cancels() -> None:
    async with Hostile(never_answer) as bad:
        before = asyncio.all_tasks()
        call = asyncio.ensure_future(quick_connect(bad.port, rpc_timeout=60.0))
        await asyncio.wait_for(bad.accepted.wait(), BOUND)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(call, BOUND)
        # (gRPC's core keeps a connection that never finished its HTTP/2 handshake
        # for up to 20 s after its channel closed; that is no task of ours)
        await asyncio.sleep(0)
        assert asyncio.all_tasks() - bad._tasks <= before | {asyncio.current_task()}


@pytest.mark.parametrize("what", ["subscribe", "publish"])
async def test_cancelling_a_call_on_a_silent_leader_closes_its_connection(what: str) -> None:
    async with Hostile(never_answer) as bad, Metadata(bad.port) as meta:
        client = await leader_only_client(meta, rpc_timeout=60.0, ack_wait_time=60.0)
        try:
            before = asyncio.all_tasks()

            async def subscribe() -> None:
                async with client.subscribe("s"):
                    pass

            call = asyncio.ensure_future(
                subscribe() if what == "subscribe" else client.publish("s", b"x")
            )
            await asyncio.wait_for(bad.accepted.wait(), BOUND)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(call, BOUND)
        finally:
            await asyncio.wait_for(client.close(), BOUND)
        # closed: the leader's connection is gone and no task of the call is left
        await asyncio.wait_for(asyncio.gather(*bad._tasks), BOUND)
        assert asyncio.all_tasks() <= before | {asyncio.current_task()}


@pytest.fixture(params=SCRIPTS)
async def client_of_a_hostile_leader(request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    async with Hostile(request.param) as bad, Metadata(bad.port) as meta:
        # A long timeout where the broker announces too much: only refusing it ends
        # the call within BOUND.
        floods = request.param in (huge_frame, huge_grpc_message)
        wait = 60.0 if floods else 0.3
        client = await leader_only_client(meta, rpc_timeout=wait, ack_wait_time=wait)
        try:
            yield client
        finally:
            await asyncio.wait_for(client.close(), BOUND)


def assert_refused_if_flooded(request: pytest.FixtureRequest, error: BaseException) -> None:
    script = request.node.callspec.params["client_of_a_hostile_leader"]
    if script in (huge_frame, huge_grpc_message):
        assert not isinstance(error, TimeoutError), error
    if script is huge_grpc_message and "larger than max" in str(error):
        assert "broker sent a message larger" in str(error)


CALLS: dict[str, Callable[[Client], Awaitable[Any]]] = {
    # more than an HTTP/2 window: a broker that does not read holds it back
    "publish": lambda client: client.publish("s", bytes(256 * 1024)),
    "set_cursor": lambda client: client.set_cursor("c", "s", 0, 5),
    "fetch_cursor": lambda client: client.fetch_cursor("c", "s", 0),
    "create_stream": lambda client: client.create_stream("s2", "s2"),
    "fetch_metadata": lambda client: client.fetch_metadata(),
}


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_calls_to_a_hostile_leader_fail_typed_within_their_timeouts(
    client_of_a_hostile_leader: Client, call: str, request: pytest.FixtureRequest
) -> None:
    with pytest.raises(AioClientsError) as info:
        await asyncio.wait_for(CALLS[call](client_of_a_hostile_leader), BOUND)
    assert_refused_if_flooded(request, info.value)


async def test_publish_async_to_a_hostile_leader_fails_its_future(
    client_of_a_hostile_leader: Client, request: pytest.FixtureRequest
) -> None:
    client = client_of_a_hostile_leader

    async def publish_and_wait() -> None:
        future = await client.publish_async("s", b"x")
        await future

    with pytest.raises(AioClientsError) as info:
        await asyncio.wait_for(publish_and_wait(), BOUND)
    assert_refused_if_flooded(request, info.value)


async def test_subscribe_to_a_hostile_leader_fails_typed(
    client_of_a_hostile_leader: Client, request: pytest.FixtureRequest
) -> None:
    client = client_of_a_hostile_leader

    async def subscribe_and_read() -> None:
        async with client.subscribe("s") as sub:
            async for _ in sub:
                pass

    with pytest.raises(AioClientsError) as info:
        await asyncio.wait_for(subscribe_and_read(), BOUND)
    assert_refused_if_flooded(request, info.value)
