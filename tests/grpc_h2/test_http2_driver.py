"""The HTTP/2 channel end to end against real ``grpc.aio`` servers in-process.

The servers speak bytes (generic handlers without serializers), the client is
:class:`Http2Channel` unmocked. Conditions are awaited with timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import hpack
import pytest
import trustme

from aioclients._grpc_h2 import Http2Channel, stream_ssl_context
from aioclients._grpc_h2._protocol._http2 import PingAcked
from aioclients.liftbridge._errors import LiftbridgeConnectError
from aioclients.liftbridge._io._grpc import map_rpc_error

MiB = 1024 * 1024


async def wait_for(cond: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    """Poll a condition on the event loop until it holds (fails after ``timeout``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await asyncio.sleep(0.005)


class Service:
    """Handlers of the test service ``/t.T/<name>`` (requests and responses are bytes)."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.holding = asyncio.Event()
        self.produced = 0

    def _watch(self, context: Any) -> None:
        self.context = context

    async def unary(self, request: bytes, context: Any) -> bytes:
        if request.startswith(b"abort:"):
            _, code, details = request.split(b":", 2)
            await context.abort(grpc.StatusCode[code.decode()], details.decode())
        if request == b"sleep":
            self._watch(context)
            self.started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        return request

    async def count(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        """Stream ``n`` numbered messages of ``size`` bytes; ``n:size[:hold]``."""
        self._watch(context)
        parts = request.split(b":")
        n, size = int(parts[0]), int(parts[1])
        finished = False
        try:
            for i in range(n):
                self.produced += 1
                yield i.to_bytes(8, "big") + bytes(max(0, size - 8))
                if i == 0:
                    self.started.set()
            if len(parts) > 2:
                self.holding.set()
                await self.release.wait()
            finished = True
        finally:
            # Cancelled (CancelledError) or closed at a yield (GeneratorExit).
            if not finished:
                self.cancelled.set()

    async def echo(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        self._watch(context)
        try:
            async for request in requests:
                yield request
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def sink(self, requests: AsyncIterator[bytes], context: Any) -> bytes:
        """Read nothing until released, then count the request bytes."""
        self.started.set()
        await self.release.wait()
        total = 0
        async for request in requests:
            total += len(request)
        return str(total).encode()

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            "t.T",
            {
                "Unary": grpc.unary_unary_rpc_method_handler(self.unary),
                "Count": grpc.unary_stream_rpc_method_handler(self.count),
                "Echo": grpc.stream_stream_rpc_method_handler(self.echo),
                "Sink": grpc.stream_unary_rpc_method_handler(self.sink),
            },
        )


class Server:
    def __init__(
        self,
        service: Service,
        port: int = 0,
        credentials: Any = None,
        options: tuple[tuple[str, Any], ...] = (),
    ) -> None:
        self.service = service
        self.server = grpc.aio.server(
            options=(
                ("grpc.max_receive_message_length", 16 * MiB),
                ("grpc.max_send_message_length", 16 * MiB),
                *options,
            )
        )
        self.server.add_generic_rpc_handlers((service.handler(),))
        bind = f"127.0.0.1:{port}"
        if credentials is None:
            self.port = self.server.add_insecure_port(bind)
        else:
            self.port = self.server.add_secure_port(bind, credentials)
        assert self.port

    async def __aenter__(self) -> Server:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop(None)


# grpc's server grows its flow-control windows from bandwidth-delay estimates,
# which vary with the machine's load: a test that needs the server's window to
# close after a few MiB turns that off (windows stay at the 64 KiB default).
FIXED_WINDOWS = (("grpc.http2.bdp_probe", 0),)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with Server(Service()) as srv:
        yield srv


@pytest.fixture
async def channel(server: Server) -> AsyncIterator[Http2Channel]:
    ch = Http2Channel(f"127.0.0.1:{server.port}")
    yield ch
    await ch.close()


def unary(ch: Http2Channel) -> Callable[..., Awaitable[bytes]]:
    return ch.unary_unary("/t.T/Unary")


def count(ch: Http2Channel) -> Callable[..., Any]:
    return ch.unary_stream("/t.T/Count")


def echo(ch: Http2Channel) -> Callable[..., Any]:
    return ch.stream_stream("/t.T/Echo")


async def read_all(call: Any) -> list[bytes]:
    out = []
    while (msg := await call.read()) is not grpc.aio.EOF:
        out.append(msg)
    return out


def queued_bytes(call: Any) -> int:
    inner = getattr(call, "_call", call)
    return sum(len(m) for m in inner._queue)


# -- plain calls ------------------------------------------------------------------------------


async def test_unary(channel: Http2Channel) -> None:
    assert await unary(channel)(b"hello") == b"hello"
    assert await unary(channel)(b"") == b""
    conn = channel._conn
    assert await unary(channel)(b"again", timeout=5.0) == b"again"
    assert channel._conn is conn  # one connection for all calls


async def test_a_call_on_an_open_connection_starts_without_waiting(channel: Http2Channel) -> None:
    # Once connected, a call opens its stream at once, deadline or not: no task,
    # timer and turns of the loop per call (what a unary call mostly cost).
    assert await unary(channel)(b"connect") == b"connect"
    for timeout in (None, 5.0):
        call = echo(channel)(timeout=timeout)
        start = call._ensure_started()
        with pytest.raises(StopIteration):
            start.send(None)  # finished without suspending
        assert call._conn is channel._conn
        await call.done_writing()
        assert await read_all(call) == []
        assert await call.code() is grpc.StatusCode.OK
    # A deadline gone before the call started: DEADLINE_EXCEEDED, no stream opened.
    call = echo(channel)(timeout=0)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call.read()
    assert info.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert call._stream_id == 0
    assert await unary(channel)(b"after") == b"after"


async def calls_on_every_path(ch: Http2Channel, i: int) -> None:
    """Unary, server-streaming and bidi calls, with and without deadline and metadata."""
    timeout = None if i % 3 == 0 else 5.0 + i
    metadata = (("x-call", str(i)),) if i % 2 else None
    body = b"call %d" % i
    assert await unary(ch)(body, timeout=timeout, metadata=metadata) == body
    assert len(await read_all(count(ch)(b"2:8", timeout=timeout, metadata=metadata))) == 2
    call = echo(ch)(timeout=timeout, metadata=metadata)
    await call.write(body)
    await call.done_writing()
    assert await read_all(call) == [body]


@pytest.mark.parametrize("table_size", [0, 100, 4096])
async def test_requests_follow_the_server_hpack_table_size(table_size: int) -> None:
    """grpc's server decodes every request whatever header table it allows us
    (100 bytes: entries evicted all the time; 0: none at all)."""
    options = (("grpc.http2.hpack_table_size.decoder", table_size),)
    async with Server(Service(), options=options) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        try:
            for i in range(12):
                await calls_on_every_path(ch, i)
            assert ch._conn is not None
            assert ch._conn.h2._encoder.max_size == table_size
        finally:
            await ch.close()


async def test_each_new_connection_starts_a_new_header_table() -> None:
    """Connections replaced after GOAWAY: the next one's first request inserts again."""
    options = (("grpc.max_connection_age_ms", 200), ("grpc.max_connection_age_grace_ms", 10_000))
    async with Server(Service(), options=options) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        try:
            seen: list[object] = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            i = 0
            while len(seen) < 3:
                assert loop.time() < deadline, "the server never replaced the connection"
                await calls_on_every_path(ch, i)
                i += 1
                if ch._conn not in seen:
                    seen.append(ch._conn)
        finally:
            await ch.close()


async def test_server_streaming_10k_in_order(channel: Http2Channel) -> None:
    call = count(channel)(b"10000:20")
    got = await read_all(call)
    assert [int.from_bytes(m[:8], "big") for m in got] == list(range(10_000))
    assert all(len(m) == 20 for m in got)
    assert await call.code() is grpc.StatusCode.OK
    assert call.done()
    assert await call.read() is grpc.aio.EOF


async def test_code_before_read_sends_the_request(channel: Http2Channel) -> None:
    call = count(channel)(b"3:8")
    assert await asyncio.wait_for(call.code(), 5) is grpc.StatusCode.OK
    assert await call.details() == ""
    assert len(await read_all(call)) == 3


async def test_async_iteration(channel: Http2Channel) -> None:
    got = [m async for m in count(channel)(b"5:8")]
    assert [int.from_bytes(m, "big") for m in got] == [0, 1, 2, 3, 4]


async def test_bidi_pipelined_writes_in_order(channel: Http2Channel) -> None:
    call = echo(channel)()
    await call.write(b"first")  # opens the stream
    for i in range(2000):
        if not call.write_nowait(i.to_bytes(4, "big")):
            await call.write(i.to_bytes(4, "big"))
    await call.done_writing()
    got = await read_all(call)
    assert got[0] == b"first"
    assert [int.from_bytes(m, "big") for m in got[1:]] == list(range(2000))
    with pytest.raises(grpc.aio.UsageError):
        await call.write(b"late")


async def test_bidi_interleaved(channel: Http2Channel) -> None:
    call = echo(channel)()
    for i in range(50):
        await call.write(b"m%d" % i)
        assert await call.read() == b"m%d" % i
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF


@pytest.mark.parametrize(
    ("code", "details"),
    [
        ("NOT_FOUND", "no such stream"),
        ("INVALID_ARGUMENT", "bad: 100% wrong \u2713"),
        ("FAILED_PRECONDITION", "not the leader"),
        ("RESOURCE_EXHAUSTED", "end of partition"),
        ("INTERNAL", "commit log closed"),
        ("UNAVAILABLE", "x" * 5000),
    ],
)
async def test_status_and_details_from_abort(
    channel: Http2Channel, code: str, details: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await unary(channel)(f"abort:{code}:{details}".encode())
    assert info.value.code() is grpc.StatusCode[code]
    assert info.value.details() == details


async def test_unknown_method_is_unimplemented(channel: Http2Channel) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await channel.unary_unary("/t.T/Nope")(b"x")
    assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED


async def test_deadline_exceeded(server: Server, channel: Http2Channel) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await unary(channel)(b"sleep", timeout=0.3)
    assert info.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert 0.25 < loop.time() - start < 3.0
    await asyncio.wait_for(server.service.cancelled.wait(), 5)
    assert await unary(channel)(b"after") == b"after"


async def test_cancel_mid_stream(server: Server, channel: Http2Channel) -> None:
    call = count(channel)(b"100000:100")
    assert int.from_bytes((await call.read())[:8], "big") == 0
    await wait_for(lambda: queued_bytes(call) > 0, what="more messages buffered")
    assert call.cancel()
    assert not call.cancel()
    assert call.cancelled()
    assert call.done()
    # Buffered messages are dropped: read() reports the cancellation at once.
    with pytest.raises(asyncio.CancelledError):
        await call.read()
    await asyncio.wait_for(server.service.cancelled.wait(), 5)
    assert await unary(channel)(b"still fine") == b"still fine"


async def test_cancel_before_the_stream_opens(channel: Http2Channel) -> None:
    call = echo(channel)()
    assert call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call.read()
    assert await unary(channel)(b"ok") == b"ok"


async def test_cancelling_the_reading_task_leaves_the_channel_usable(
    channel: Http2Channel,
) -> None:
    call = echo(channel)()
    reader = asyncio.create_task(call.read())
    await wait_for(lambda: call._conn is not None, what="the stream to open")
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    call.cancel()
    assert await unary(channel)(b"ok") == b"ok"


async def test_code_and_read_can_wait_together(channel: Http2Channel) -> None:
    call = echo(channel)()
    await call.write(b"a")
    reader = asyncio.create_task(read_all(call))
    code = asyncio.create_task(call.code())
    await asyncio.sleep(0)
    await call.write(b"b")
    await call.done_writing()
    assert await asyncio.wait_for(reader, 5) == [b"a", b"b"]
    assert await asyncio.wait_for(code, 5) is grpc.StatusCode.OK
    assert await call.details() == ""


async def test_many_concurrent_streams_share_one_connection(channel: Http2Channel) -> None:
    assert await unary(channel)(b"warm") == b"warm"
    conn = channel._conn

    async def one(i: int) -> None:
        assert await unary(channel)(b"u%d" % i) == b"u%d" % i

    async def stream(i: int) -> None:
        got = await read_all(count(channel)(b"%d:16" % (100 + i)))
        assert len(got) == 100 + i

    async def bidi(i: int) -> None:
        call = echo(channel)()
        for j in range(20):
            await call.write(b"%d-%d" % (i, j))
        await call.done_writing()
        assert await read_all(call) == [b"%d-%d" % (i, j) for j in range(20)]

    await asyncio.wait_for(
        asyncio.gather(
            *(one(i) for i in range(200)),
            *(stream(i) for i in range(30)),
            *(bidi(i) for i in range(30)),
        ),
        30,
    )
    assert channel._conn is conn
    assert not channel._old


async def test_large_messages_both_ways(channel: Http2Channel) -> None:
    big = bytes(range(256)) * (3 * MiB // 256)
    assert await asyncio.wait_for(unary(channel)(big), 20) == big
    call = echo(channel)()
    await asyncio.wait_for(call.write(big), 20)
    await asyncio.wait_for(call.write(big[::-1]), 20)
    await call.done_writing()
    assert await asyncio.wait_for(read_all(call), 20) == [big, big[::-1]]


async def test_message_larger_than_the_stream_window(channel: Http2Channel) -> None:
    # 5 MiB does not fit in the 4 MiB receive window of a stream.
    call = count(channel)(b"3:%d" % (5 * MiB))
    got = await asyncio.wait_for(read_all(call), 20)
    assert [len(m) for m in got] == [5 * MiB] * 3


async def test_message_over_max_message_size(server: Server) -> None:
    ch = Http2Channel(f"127.0.0.1:{server.port}", max_message_size=1000)
    try:
        call = count(ch)(b"3:2000")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await read_all(call)
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await unary(ch)(b"small") == b"small"
    finally:
        await ch.close()


@pytest.mark.slow
async def test_a_reader_that_stops_holds_the_server_back(server: Server) -> None:
    ch = Http2Channel(f"127.0.0.1:{server.port}")
    try:
        size, n = 64 * 1024, 800  # 50 MiB
        call = count(ch)(b"%d:%d" % (n, size))
        assert int.from_bytes((await call.read())[:8], "big") == 0
        # The stream window (4 MiB) fills up, then nothing more arrives.
        await wait_for(lambda: queued_bytes(call) >= 3 * MiB, what="the window to fill")
        loop = asyncio.get_running_loop()
        until = loop.time() + 1.0
        peak = 0
        while loop.time() < until:
            peak = max(peak, queued_bytes(call))
            assert peak <= 4 * MiB + size, f"{peak} bytes buffered: flow control does not hold"
            await asyncio.sleep(0.01)
        assert server.service.produced < n
        rest = await asyncio.wait_for(read_all(call), 30)
        assert [int.from_bytes(m[:8], "big") for m in rest] == list(range(1, n))
    finally:
        await ch.close()


# -- broken connections -----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_connection_refused_is_unavailable_quickly() -> None:
    ch = Http2Channel(f"127.0.0.1:{free_port()}")
    try:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await unary(ch)(b"x")
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
        assert loop.time() - start < 2.0
        call = count(ch)(b"1:8")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.read()
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
        assert await call.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        await ch.close()


async def test_server_stopped_mid_stream_then_restarted() -> None:
    service = Service()
    srv = Server(service)
    port = srv.port
    await srv.server.start()
    ch = Http2Channel(f"127.0.0.1:{port}")
    try:
        call = count(ch)(b"2:8:hold")
        assert await call.read() is not grpc.aio.EOF
        await asyncio.wait_for(srv.server.stop(None), 10)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(read_all(call), 10)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE, info.value
        async with Server(Service(), port=port):
            assert await asyncio.wait_for(unary(ch)(b"back"), 10) == b"back"
    finally:
        await ch.close()
        # Stopped here too when the test fails before its stop (see
        # test_a_blocked_writer_learns_that_the_server_went_away).
        await asyncio.wait_for(srv.server.stop(None), 10)


async def test_goaway_from_graceful_stop_lets_the_call_finish() -> None:
    service = Service()
    srv = Server(service)
    port = srv.port
    await srv.server.start()
    ch = Http2Channel(f"127.0.0.1:{port}")
    try:
        call = count(ch)(b"3:8:hold")
        assert await call.read() is not grpc.aio.EOF
        conn = ch._conn
        assert conn is not None
        stopping = asyncio.create_task(srv.server.stop(10))
        await wait_for(lambda: conn.h2.goaway is not None, what="GOAWAY")
        service.release.set()
        assert len(await asyncio.wait_for(read_all(call), 10)) == 2
        assert await call.code() is grpc.StatusCode.OK
        await asyncio.wait_for(stopping, 10)
        await wait_for(lambda: conn.dead, what="the old connection to close")
        async with Server(Service(), port=port):
            assert await asyncio.wait_for(unary(ch)(b"new"), 10) == b"new"
            assert ch._conn is not conn
    finally:
        await ch.close()
        # Stopped here too when the test fails before its graceful stop ended.
        await asyncio.wait_for(srv.server.stop(None), 10)


async def test_goaway_from_max_connection_age_moves_to_a_new_connection() -> None:
    service = Service()
    options = (("grpc.max_connection_age_ms", 300), ("grpc.max_connection_age_grace_ms", 10_000))
    async with Server(service, options=options) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        try:
            call = count(ch)(b"3:8:hold")
            assert await call.read() is not grpc.aio.EOF
            old = ch._conn
            assert old is not None
            await wait_for(lambda: old.h2.goaway is not None, what="GOAWAY")
            assert await unary(ch)(b"on a new connection") == b"on a new connection"
            assert ch._conn is not old
            service.release.set()
            assert len(await read_all(call)) == 2
            await wait_for(lambda: old.dead, what="the old connection to close")
        finally:
            await ch.close()


async def test_keepalive_watchdog_drops_a_silent_server() -> None:
    received = bytearray()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                received.extend(data)
        writer.close()

    tcp = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = tcp.sockets[0].getsockname()[1]
    ch = Http2Channel(f"127.0.0.1:{port}", keepalive_time=0.2, keepalive_timeout=0.3)
    try:
        loop = asyncio.get_running_loop()
        start = loop.time()
        call = count(ch)(b"1:8")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(call.read(), 5)
        elapsed = loop.time() - start
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "keepalive" in (info.value.details() or "")
        assert 0.45 <= elapsed < 2.0
        assert bytes(received).startswith(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        assert b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" in received  # our PING
    finally:
        await ch.close()
        tcp.close()
        await tcp.wait_closed()


async def test_keepalive_pings_are_answered_by_a_live_server() -> None:
    lenient = (
        ("grpc.http2.min_ping_interval_without_data_ms", 1),
        ("grpc.http2.max_ping_strikes", 0),
    )
    async with Server(Service(), options=lenient) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}", keepalive_time=0.05, keepalive_timeout=1.0)
        try:
            call = count(ch)(b"2:8:hold")
            assert await call.read() is not grpc.aio.EOF
            conn = ch._conn
            assert conn is not None
            acks = 0
            receive = conn.h2.receive

            def counting(data: bytes) -> list[Any]:
                nonlocal acks
                events = receive(data)
                acks += sum(isinstance(e, PingAcked) for e in events)
                return events

            conn.h2.receive = counting  # type: ignore[method-assign]
            await wait_for(lambda: acks >= 4, what="four PING round trips")
            srv.service.release.set()
            assert len(await read_all(call)) == 1
            assert not conn.dead
            assert ch._conn is conn
        finally:
            await ch.close()


@pytest.mark.slow
async def test_no_keepalive_ping_while_the_server_keeps_sending() -> None:
    # gRPC keepalive pings only a silent connection: Go servers (Liftbridge's)
    # count pings while data flows against the client.
    lenient = (
        ("grpc.http2.min_ping_interval_without_data_ms", 1),
        ("grpc.http2.max_ping_strikes", 0),
    )
    async with Server(Service(), options=lenient) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}", keepalive_time=1.0, keepalive_timeout=5.0)
        try:
            call = echo(ch)()
            await call.write(b"first")
            assert await call.read() == b"first"
            conn = ch._conn
            assert conn is not None
            loop = asyncio.get_running_loop()
            pings: list[float] = []  # how long the link had been silent at each PING
            ping = conn.h2.ping

            def counting(payload: bytes) -> None:
                pings.append(loop.time() - conn._last_received)
                ping(payload)

            conn.h2.ping = counting  # type: ignore[method-assign]
            busy_until = loop.time() + 3.0  # three keepalive periods of steady traffic
            while loop.time() < busy_until:
                await call.write(b"tick")
                assert await asyncio.wait_for(call.read(), 5) == b"tick"
                await asyncio.sleep(0.02)
            # A PING goes out only after a full second of silence. On a machine
            # so loaded that this loop stalled that long, one is right.
            assert all(quiet >= 1.0 for quiet in pings), pings
            # Silent from now on: a PING goes out after keepalive_time.
            await wait_for(lambda: len(pings) >= 1, timeout=10, what="a PING on a quiet link")
            await call.done_writing()
            assert await read_all(call) == []
        finally:
            await ch.close()


async def test_too_many_pings_slows_keepalive_down() -> None:
    # A default gRPC server allows a PING without data every 5 minutes.
    async with Server(Service()) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}", keepalive_time=0.02, keepalive_timeout=1.0)
        try:
            call = count(ch)(b"2:8:hold")
            assert await call.read() is not grpc.aio.EOF
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await asyncio.wait_for(read_all(call), 10)
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
            assert ch._keepalive_time >= 0.04
            assert await unary(ch)(b"reconnects") == b"reconnects"
        finally:
            await ch.close()


async def test_write_waits_for_the_server_window_and_resumes() -> None:
    async with Server(Service(), options=FIXED_WINDOWS) as server:
        await _write_waits_for_the_server_window_and_resumes(server)


async def _write_waits_for_the_server_window_and_resumes(server: Server) -> None:
    ch = Http2Channel(f"127.0.0.1:{server.port}")
    try:
        call = ch.stream_stream("/t.T/Sink")()
        await call.write(b"first")
        await asyncio.wait_for(server.service.started.wait(), 5)
        chunk = bytes(MiB)
        writes = asyncio.create_task(write_all(call, [chunk] * 6))
        # The server reads nothing: its windows fill and write() must wait.
        await wait_for(
            lambda: call._conn is not None and call._conn.h2.blocked_bytes(call._stream_id) > MiB,
            what="request data held back by the server window",
        )
        assert not writes.done()
        assert not call.write_nowait(b"x")
        server.service.release.set()
        await asyncio.wait_for(writes, 10)
        await call.done_writing()
        assert await asyncio.wait_for(call.read(), 10) == str(5 + 6 * MiB).encode()
    finally:
        await ch.close()


async def silent_server() -> asyncio.Server:
    """A TCP server that reads and never answers."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass
        writer.close()

    return await asyncio.start_server(silent, "127.0.0.1", 0)


async def test_deadline_covers_connecting() -> None:
    tcp = await silent_server()
    port = tcp.sockets[0].getsockname()[1]
    ctx = ssl.create_default_context()
    ctx.set_alpn_protocols(["h2"])
    ch = Http2Channel(f"127.0.0.1:{port}", ssl_context=ctx, connect_timeout=30.0)
    try:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(unary(ch)(b"x", timeout=0.3), 10)
        assert info.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert loop.time() - start < 2.0
    finally:
        await ch.close()
        tcp.close()
        await tcp.wait_closed()


async def test_a_connection_at_its_stream_limit_is_closed_once_idle() -> None:
    service = Service()
    async with Server(service, options=(("grpc.max_concurrent_streams", 2),)) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        try:
            calls = [count(ch)(b"2:8:hold") for _ in range(2)]
            for call in calls:
                assert await call.read() is not grpc.aio.EOF
            first = ch._conn
            assert first is not None
            third = count(ch)(b"2:8:hold")
            assert await third.read() is not grpc.aio.EOF
            assert ch._conn is not first  # the limit moved it to a new connection
            service.release.set()
            for call in [*calls, third]:
                assert len(await asyncio.wait_for(read_all(call), 10)) == 1
            await wait_for(lambda: first.dead, what="the full connection to close when idle")
            assert ch._conn is not None
            assert not ch._conn.dead
            assert await unary(ch)(b"ok") == b"ok"
        finally:
            await ch.close()


async def write_all(call: Any, chunks: list[bytes]) -> None:
    for chunk in chunks:
        await call.write(chunk)


@pytest.mark.timeout(30)
async def test_a_task_cancelled_while_connecting_does_not_wedge_the_call() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass
        writer.close()

    tcp = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = tcp.sockets[0].getsockname()[1]
    ctx = ssl.create_default_context()
    ctx.set_alpn_protocols(["h2"])
    # The TLS handshake never completes: connecting hangs until connect_timeout.
    ch = Http2Channel(f"127.0.0.1:{port}", ssl_context=ctx, connect_timeout=1.0)
    try:
        call = echo(ch)()
        first = asyncio.create_task(call.read())
        second = asyncio.create_task(call.read())
        await wait_for(lambda: ch._connecting is not None, what="connecting")
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(second, 10)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "no answer" in (info.value.details() or "")
    finally:
        await ch.close()
        tcp.close()
        await tcp.wait_closed()


async def test_a_cancel_that_lands_as_the_connection_opens_is_not_lost(server: Server) -> None:
    # Before Python 3.12, asyncio.wait_for returns the result of what it waits for
    # when that is ready at the moment the caller is cancelled: the cancel was lost,
    # and the call went on to wait for its whole deadline.
    ch = Http2Channel(f"127.0.0.1:{server.port}")
    connect = ch._connection
    caller: asyncio.Task[bytes] | None = None

    async def connect_then_cancel_the_caller() -> Any:
        conn = await connect()
        assert caller is not None
        caller.cancel()  # the caller is cancelled just as its connection is ready
        return conn

    ch._connection = connect_then_cancel_the_caller  # type: ignore[method-assign]
    try:
        caller = asyncio.ensure_future(ch.unary_unary("/t.T/Unary")(b"x", timeout=60.0))
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(caller, 10)
        ch._connection = connect  # type: ignore[method-assign]
        assert await unary(ch)(b"after", timeout=5.0) == b"after"
    finally:
        await ch.close()


async def test_close_ends_open_calls(server: Server) -> None:
    ch = Http2Channel(f"127.0.0.1:{server.port}")
    call = count(ch)(b"2:8:hold")
    assert await call.read() is not grpc.aio.EOF
    await asyncio.wait_for(server.service.holding.wait(), 5)
    await ch.close()
    assert call.done()
    with pytest.raises(asyncio.CancelledError):
        await call.read()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await unary(ch)(b"x")
    assert info.value.code() is grpc.StatusCode.CANCELLED
    await asyncio.wait_for(server.service.cancelled.wait(), 5)


# -- TLS ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


async def tls_server(ca: trustme.CA) -> Server:
    cert = ca.issue_cert("localhost", "127.0.0.1")
    creds = grpc.ssl_server_credentials(
        [(cert.private_key_pem.bytes(), b"".join(p.bytes() for p in cert.cert_chain_pems))]
    )
    return Server(Service(), credentials=creds)


async def test_tls(ca: trustme.CA) -> None:
    srv = await tls_server(ca)
    async with srv:
        trusting = ssl.create_default_context()
        ca.configure_trust(trusting)
        ctx = stream_ssl_context(trusting)
        assert ctx is not None
        ch = Http2Channel(f"127.0.0.1:{srv.port}", ssl_context=ctx, server_hostname="localhost")
        try:
            assert await unary(ch)(b"secret") == b"secret"
            got = await read_all(count(ch)(b"1000:32"))
            assert len(got) == 1000
            conn = ch._conn
            assert conn is not None
            assert conn.transport is not None
            assert conn.transport.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
            # gRPC servers send no TLS close_notify: closing must not wait for one.
            await asyncio.wait_for(ch.close(), 5)
            assert conn.dead
        finally:
            await ch.close()


async def test_tls_with_the_wrong_ca_is_unavailable(ca: trustme.CA) -> None:
    srv = await tls_server(ca)
    async with srv:
        other = ssl.create_default_context()
        trustme.CA().configure_trust(other)
        ctx = stream_ssl_context(other)
        assert ctx is not None
        ch = Http2Channel(f"127.0.0.1:{srv.port}", ssl_context=ctx, server_hostname="localhost")
        try:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await asyncio.wait_for(unary(ch)(b"x"), 10)
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "TLS" in (info.value.details() or "")
        finally:
            await ch.close()


async def test_plaintext_client_against_a_tls_server_fails(ca: trustme.CA) -> None:
    srv = await tls_server(ca)
    async with srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        try:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await asyncio.wait_for(unary(ch)(b"x"), 10)
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
        finally:
            await ch.close()


# -- a scripted HTTP/2 server: misbehaviour gRPC servers do not produce on demand ------------


def h2_frame(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload


class ScriptedServer:
    """Accepts connections; ``on_request(conn_no, sid, encoder)`` says what to answer."""

    def __init__(self, on_request: Callable[[int, int, Any], bytes]) -> None:
        self.on_request = on_request
        self.connections = 0
        self.received: list[bytearray] = []
        self.server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> ScriptedServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn_no = self.connections
        seen = bytearray()
        self.received.append(seen)
        encoder = hpack.Encoder()
        try:
            preface = await reader.readexactly(24)
            seen += preface
            writer.write(h2_frame(4, 0, 0))
            while True:
                head = await reader.readexactly(9)
                payload = await reader.readexactly(int.from_bytes(head[:3], "big"))
                seen += head + payload
                kind, flags = head[3], head[4]
                sid = int.from_bytes(head[5:9], "big")
                if kind == 4 and not flags & 1:
                    writer.write(h2_frame(4, 1, 0))
                elif kind == 1:
                    writer.write(self.on_request(conn_no, sid, encoder))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def grpc_ok(sid: int, encoder: Any, payload: bytes = b"pong") -> bytes:
    return (
        h2_frame(
            1, 4, sid, encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
        )
        + h2_frame(0, 0, sid, b"\x00" + len(payload).to_bytes(4, "big") + payload)
        + h2_frame(1, 5, sid, encoder.encode([("grpc-status", "0")]))
    )


async def test_a_one_message_request_ends_with_its_data_frame() -> None:
    """Unary and server-streaming requests: END_STREAM on the message's DATA frame,
    no empty DATA frame after it."""
    async with ScriptedServer(lambda _, sid, encoder: grpc_ok(sid, encoder)) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        try:
            assert await unary(ch)(b"ping", timeout=5) == b"pong"
            assert await read_all(count(ch)(b"x", timeout=5)) == [b"pong"]

            def data_frames() -> list[tuple[int, int, bytes]]:
                wire = bytes(srv.received[0][24:])
                frames = []
                while len(wire) >= 9:
                    n = int.from_bytes(wire[:3], "big")
                    if wire[3] == 0:
                        frames.append((wire[4], int.from_bytes(wire[5:9], "big"), wire[9 : 9 + n]))
                    wire = wire[9 + n :]
                return frames

            await wait_for(lambda: len(data_frames()) >= 2, what="the requests' DATA")
            assert data_frames() == [
                (1, 1, b"\x00\x00\x00\x00\x04ping"),
                (1, 3, b"\x00\x00\x00\x00\x01x"),
            ]
        finally:
            await ch.close()


async def test_a_ping_answered_with_a_response_leaves_with_the_next_request() -> None:
    """A Go server PINGs as it reads each request (bandwidth probe); the ACK of a
    PING that came with the response is written with the next request, not alone."""

    def answer(_: int, sid: int, encoder: Any) -> bytes:
        return h2_frame(6, 0, 0, sid.to_bytes(8, "big")) + grpc_ok(sid, encoder)

    async with ScriptedServer(answer) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        try:
            assert await unary(ch)(b"ping", timeout=5) == b"pong"
            conn = ch._conn
            assert conn is not None
            writes: list[bytes] = []
            take = conn.h2.data_to_send

            def recording() -> bytes:
                data = take()
                if data:
                    writes.append(data)
                return data

            conn.h2.data_to_send = recording  # type: ignore[method-assign]
            for _ in range(3):
                assert await unary(ch)(b"ping", timeout=5) == b"pong"
            ping_ack = h2_frame(6, 1, 0, (1).to_bytes(8, "big"))
            assert writes[0].startswith(ping_ack)  # the first call's PING, ACKed
            assert len(writes) == 3  # each ACK went with the next call's request
            assert [w[len(ping_ack) + 3] for w in writes] == [1, 1, 1]  # then its HEADERS
        finally:
            await ch.close()


async def test_a_protocol_error_fails_the_calls_and_the_next_call_reconnects() -> None:
    def answer(conn_no: int, sid: int, encoder: Any) -> bytes:
        if conn_no == 1:
            return b"\x00\x40\x01\x00\x00\x00\x00\x00\x01"  # a 16385-byte frame: too large
        return grpc_ok(sid, encoder)

    async with ScriptedServer(answer) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        try:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await asyncio.wait_for(unary(ch)(b"ping"), 5)
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "protocol error" in (info.value.details() or "")
            # We said why before hanging up: GOAWAY with PROTOCOL_ERROR.
            await wait_for(
                lambda: bytes(srv.received[0]).endswith(
                    h2_frame(7, 0, 0, bytes(4) + (1).to_bytes(4, "big"))
                ),
                what="our GOAWAY",
            )
            assert await asyncio.wait_for(unary(ch)(b"ping"), 5) == b"pong"
            assert srv.connections == 2
        finally:
            await ch.close()


async def test_goaway_before_the_stream_was_processed_is_unavailable() -> None:
    def answer(conn_no: int, sid: int, encoder: Any) -> bytes:
        if conn_no == 1:
            return h2_frame(7, 0, 0, bytes(4) + bytes(4) + b"draining")  # last stream 0
        return grpc_ok(sid, encoder, b"second")

    async with ScriptedServer(answer) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        try:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await asyncio.wait_for(unary(ch)(b"x"), 5)
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "GOAWAY" in (info.value.details() or "")
            assert await asyncio.wait_for(unary(ch)(b"x"), 5) == b"second"
            assert srv.connections == 2
        finally:
            await ch.close()


@pytest.mark.parametrize(
    ("headers", "flags", "code"),
    [
        ([(":status", "503")], 5, grpc.StatusCode.UNAVAILABLE),
        ([(":status", "200"), ("content-type", "text/html")], 4, grpc.StatusCode.UNKNOWN),
        ([(":status", "200"), ("content-type", "text/html")], 5, grpc.StatusCode.INTERNAL),
        (
            [(":status", "200"), ("grpc-status", "7"), ("grpc-message", "nope")],
            5,
            grpc.StatusCode.PERMISSION_DENIED,
        ),
    ],
)
async def test_odd_responses_map_to_statuses(
    headers: list[tuple[str, str]], flags: int, code: grpc.StatusCode
) -> None:
    def answer(conn_no: int, sid: int, encoder: Any) -> bytes:
        return h2_frame(1, flags, sid, encoder.encode(headers))

    async with ScriptedServer(answer) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        try:
            call = count(ch)(b"1:8")
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await asyncio.wait_for(call.read(), 5)
            assert info.value.code() is code
            # The connection survives a failed call.
            assert srv.connections == 1
            assert ch._conn is not None
            assert not ch._conn.dead
        finally:
            await ch.close()


async def test_server_reset_stream_is_reported() -> None:
    def answer(conn_no: int, sid: int, encoder: Any) -> bytes:
        return h2_frame(3, 0, sid, (7).to_bytes(4, "big"))  # REFUSED_STREAM

    async with ScriptedServer(answer) as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        try:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await asyncio.wait_for(unary(ch)(b"x"), 5)
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "RST_STREAM" in (info.value.details() or "")
        finally:
            await ch.close()


async def test_tls_server_without_h2_alpn_is_unavailable(ca: trustme.CA) -> None:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    server_ctx.set_alpn_protocols(["http/1.1"])

    async def http1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await reader.read(65536)
        writer.close()

    tcp = await asyncio.start_server(http1, "127.0.0.1", 0, ssl=server_ctx)
    port = tcp.sockets[0].getsockname()[1]
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    ch = Http2Channel(
        f"127.0.0.1:{port}", ssl_context=stream_ssl_context(trusting), server_hostname="localhost"
    )
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(unary(ch)(b"x"), 10)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "ALPN h2" in (info.value.details() or "")
    finally:
        await ch.close()
        tcp.close()
        await tcp.wait_closed()


async def test_a_blocked_writer_learns_that_the_server_went_away() -> None:
    service = Service()
    srv = Server(service, options=FIXED_WINDOWS)
    await srv.server.start()
    ch = Http2Channel(f"127.0.0.1:{srv.port}")
    try:
        call = ch.stream_stream("/t.T/Sink")()
        await call.write(b"first")
        await asyncio.wait_for(service.started.wait(), 5)
        writes = asyncio.create_task(write_all(call, [bytes(MiB)] * 8))
        await wait_for(
            lambda: call._conn is not None and call._conn.h2.blocked_bytes(call._stream_id) > MiB,
            what="a writer held back by the server window",
        )
        await asyncio.wait_for(srv.server.stop(None), 10)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(writes, 10)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        await ch.close()
        # Stopped here too when the test fails early: a server left running is
        # shut down by its finalizer on a later test's (closed) loop.
        await asyncio.wait_for(srv.server.stop(None), 10)


class StalledServer:
    """Grants the largest windows, then never reads again (a broker that stopped reading).

    ``extra`` is written after the grants (e.g. a flood of PINGs, see ``flood``).
    """

    def __init__(self, flood: bytes = b"", flood_until: Callable[[], bool] | None = None) -> None:
        self.flood = flood
        self.flood_until = flood_until
        self.flooded = 0
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.read_now = asyncio.Event()
        self.received = bytearray()
        self.read_done = asyncio.Event()

    async def __aenter__(self) -> StalledServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.read_now.set()
        for writer in self.writers:
            writer.transport.abort()
        self.server.close()
        await self.server.wait_closed()

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        # Small kernel buffers: "stopped reading" shows after KiB, not after the
        # tens of MiB loopback autotuning would absorb.
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)
        big = (2**31 - 1).to_bytes(4, "big")
        writer.write(
            h2_frame(4, 0, 0, (4).to_bytes(2, "big") + big)  # INITIAL_WINDOW_SIZE 2**31-1
            + h2_frame(8, 0, 0, (2**31 - 1 - 65_535).to_bytes(4, "big"))
        )
        reading = asyncio.create_task(self._read_later(reader))
        try:
            while self.flood and not (self.flood_until is not None and self.flood_until()):
                # Flood without reading; drain only our own buffer.
                writer.write(self.flood)
                self.flooded += 1
                await asyncio.wait_for(writer.drain(), 10)
            await reading
        except (ConnectionError, TimeoutError):
            pass
        finally:
            reading.cancel()
            writer.transport.abort()

    async def _read_later(self, reader: asyncio.StreamReader) -> None:
        """Once ``read_now`` is set, read everything until the client hangs up."""
        try:
            await self.read_now.wait()
            while chunk := await asyncio.wait_for(reader.read(1 << 20), 10):
                self.received += chunk
        except (ConnectionError, TimeoutError):
            pass
        finally:
            self.read_done.set()


async def test_close_is_bounded_when_a_plaintext_server_stops_reading() -> None:
    async with StalledServer() as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        call = ch.stream_stream("/t.T/Sink")()
        writes = asyncio.create_task(write_all(call, [bytes(MiB)] * 32))
        try:
            await wait_for(
                lambda: call._conn is not None and call._conn._paused,
                what="the transport to pause: the server does not read",
            )
            conn = call._conn
            assert conn is not None
            assert conn.transport is not None
            # Whatever cannot be written is dropped after the close timeout.
            await asyncio.wait_for(ch.close(), 2.0 + 3.0)
            assert conn.dead
            assert conn.transport.is_closing()
        finally:
            writes.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await writes
            await asyncio.wait_for(ch.close(), 5)


def frames_in(data: bytes) -> list[tuple[int, int, int, bytes]]:
    out = []
    pos = 0
    while len(data) - pos >= 9:
        length = int.from_bytes(data[pos : pos + 3], "big")
        out.append(
            (
                data[pos + 3],
                data[pos + 4],
                int.from_bytes(data[pos + 5 : pos + 9], "big"),
                data[pos + 9 : pos + 9 + length],
            )
        )
        pos += 9 + length
    return out


async def test_a_ping_flood_from_a_server_that_does_not_read() -> None:
    # (A SETTINGS flood takes the same path in the core, tested byte by byte
    # there; over loopback its 9-byte frames make the kernel's buffer
    # accounting, not our code, set the pace.)
    flood_frame = h2_frame(6, 0, 0, b"12345678")
    conns: list[Any] = []
    srv = StalledServer(flood=flood_frame * 100, flood_until=lambda: bool(conns) and conns[0].dead)
    async with srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        call = count(ch)(b"1:8:hold")
        reading = asyncio.create_task(call.read())
        try:
            await wait_for(lambda: ch._conn is not None, what="the connection")
            conn = ch._conn
            assert conn is not None
            conns.append(conn)
            transport = conn.transport
            assert transport is not None
            most = 0

            def held() -> bool:
                nonlocal most
                most = max(most, transport.get_write_buffer_size() + len(conn.h2._out))
                return conn.dead

            await wait_for(held, 15, what="the flood to close the connection")
            # What we hold is capped: the paused transport's buffer (64 KiB high
            # water plus one read's replies) and at most 1000 queued replies.
            assert most < 1 * MiB, most
            assert srv.flooded * len(flood_frame) * 1000 > 2 * MiB  # it was a flood
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await asyncio.wait_for(reading, 5)
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "ENHANCE_YOUR_CALM" in (info.value.details() or "")
            # The library's error for it is the typed "broker unavailable".
            mapped = map_rpc_error(info.value, what="subscribe")
            assert isinstance(mapped, LiftbridgeConnectError)
            # The server, reading at last, gets our GOAWAY ENHANCE_YOUR_CALM.
            srv.read_now.set()
            await asyncio.wait_for(srv.read_done.wait(), 10)
            assert srv.received.startswith(b"PRI * HTTP/2.0")
            last = frames_in(bytes(srv.received[24:]))[-1]
            assert last == (7, 0, 0, bytes(4) + (0xB).to_bytes(4, "big"))
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await reading
            await asyncio.wait_for(ch.close(), 5)


async def test_a_write_cancelled_while_the_socket_is_backed_up_queues_nothing() -> None:
    async with StalledServer() as srv:
        ch = Http2Channel(f"127.0.0.1:{srv.port}")
        call = ch.stream_stream("/t.T/Sink")()
        try:
            while not (call._conn is not None and call._conn._paused):
                await asyncio.wait_for(call.write(bytes(MiB)), 5)
            conn = call._conn
            held = len(conn.h2._out) + conn.h2.blocked_bytes(call._stream_id)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(call.write(b"late" * 1000), 0.2)
            assert len(conn.h2._out) + conn.h2.blocked_bytes(call._stream_id) == held
        finally:
            await asyncio.wait_for(ch.close(), 5)
