"""NSQ against hostile servers: an nsqd (TCP and HTTP) or nsqlookupd that never
answers, answers garbage, announces a frame of 2 GB, or sends an answer that never
ends. Each call ends within its bound with an aioclients error, memory stays bounded
(the oversized answer is refused, not buffered), and the auth secret and URL
credentials appear in no error and no log record."""

from __future__ import annotations

import asyncio
import logging
import struct

import aiohttp
import pytest

from aioclients import AioClientsError, OperationTimeoutError
from aioclients.nsq import HTTPProducer, NSQConnectError, NSQProtocolError, Producer, Reader
from aioclients.nsq._io._lookupd import MAX_LOOKUP_ANSWER, query_lookupd
from tests.nsq.fake_nsqd import FakeNsqd, frame

SECRET = "nsq-Auth-S3cret"
URL_PASSWORD = "url-Pw-S3cret"
#: generous bound for a call that must end on its own
BOUND = 10.0


def assert_no_secret(text: str) -> None:
    assert SECRET not in text, text
    assert URL_PASSWORD not in text, text


def assert_logs_hold_no_secret(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        assert_no_secret(record.getMessage())


AUTH_IDENTIFY = {"max_rdy_count": 2500, "version": "1.3.0", "auth_required": True}


def hostile(answer: bytes) -> FakeNsqd:
    """An nsqd that shakes hands (IDENTIFY, AUTH), then answers PUB with ``answer``."""

    def on_command(fake: FakeNsqd, command: bytes, body: bytes | None) -> bytes | None:
        if command.startswith((b"PUB", b"MPUB", b"DPUB")):
            return answer
        return fake.default_answer(command, body)

    return FakeNsqd(identify_answer=AUTH_IDENTIFY, on_command=on_command)


@pytest.mark.parametrize(
    "answer",
    [
        struct.pack(">II", 2**31, 0) + b"x" * 1024,  # a response frame of 2 GB announced
        struct.pack(">II", 0xFFFFFFFF, 2) + bytes(26),  # a message frame of 4 GB announced
        b"HTTP/1.1 400 Bad Request\r\n\r\n",  # garbage: not NSQ at all
        frame(1, b"E_INVALID " + SECRET.encode()),  # an error quoting the secret back
        struct.pack(">II", 2, 0),  # a frame shorter than its own type
    ],
    ids=["response-2GB", "message-4GB", "garbage", "error-echoing-secret", "truncated"],
)
async def test_producer_publish_against_a_hostile_answer_fails_typed(
    answer: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with hostile(answer) as fake:
        async with Producer(fake.address, auth_secret=SECRET, timeout=60.0) as producer:
            with pytest.raises(AioClientsError) as info:
                # timeout=60: only refusing the answer ends the call within BOUND
                await asyncio.wait_for(producer.publish("t", b"x"), BOUND)
            assert not isinstance(info.value, TimeoutError)
            text = str(info.value)
    assert_no_secret(text)  # also where nsqd's own error quoted it
    assert_logs_hold_no_secret(caplog)


async def test_producer_against_a_silent_nsqd_times_out_and_cancel_cancels(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with FakeNsqd(silent=True) as fake:
        producer = Producer(fake.address, auth_secret=SECRET, connect_timeout=0.2, timeout=0.2)
        with pytest.raises(AioClientsError) as info:
            await asyncio.wait_for(producer.publish("t", b"x"), BOUND)
        assert_no_secret(str(info.value))
        await producer.close()
    async with hostile(b"") as fake:  # answers the handshake, never a PUB
        async with Producer(fake.address, auth_secret=SECRET, timeout=60.0) as producer:
            await producer.connect()
            before = asyncio.all_tasks()
            call = asyncio.ensure_future(producer.publish("t", b"x"))
            await fake.wait_for(lambda c: any(x.startswith(b"PUB") for x in c))
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(call, BOUND)
            assert asyncio.all_tasks() <= before | {asyncio.current_task()}
    assert_logs_hold_no_secret(caplog)


async def test_producer_against_an_nsqd_that_stops_reading_times_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    stop = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        fake = FakeNsqd(identify_answer=AUTH_IDENTIFY)
        await reader.readexactly(4)
        for _ in range(2):  # IDENTIFY, AUTH
            command = (await reader.readline()).rstrip(b"\n")
            (size,) = struct.unpack(">I", await reader.readexactly(4))
            body = await reader.readexactly(size)
            writer.write(fake.default_answer(command, body) or b"")
        await stop.wait()  # and read nothing more: our writes back up
        writer.transport.abort()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with Producer(f"127.0.0.1:{port}", auth_secret=SECRET, timeout=0.3) as producer:
            body = b"x" * (1024 * 1024 - 64)

            async def publish_until_stuck() -> None:
                for _ in range(64):  # more than the socket buffers hold
                    await producer.publish("t", body)

            with pytest.raises(OperationTimeoutError) as info:
                await asyncio.wait_for(publish_until_stuck(), BOUND)
            assert_no_secret(str(info.value))
    finally:
        stop.set()
        server.close()
        await server.wait_closed()
    assert_logs_hold_no_secret(caplog)


# ---- HTTP: nsqlookupd and nsqd's HTTP API ---------------------------------------------------


class EndlessHttp:
    """An HTTP server whose 200 answer has no length and does not end: ``flood`` bytes,
    then silence with the connection open (so a client that buffers the whole body
    waits for its timeout, and holds what came)."""

    def __init__(self, flood: int) -> None:
        self.flood = flood
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def address(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
            writer.write(b'{"producers": [' + b" " * self.flood)
            await writer.drain()
            await reader.read()  # until the client goes
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.transport.abort()

    async def __aenter__(self) -> EndlessHttp:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        await self._server.wait_closed()


async def test_an_nsqlookupd_answer_that_never_ends_is_refused_past_the_limit() -> None:
    async with EndlessHttp(2 * MAX_LOOKUP_ANSWER) as lookupd, aiohttp.ClientSession() as session:
        url = f"http://u:{URL_PASSWORD}@{lookupd.address}"
        with pytest.raises(NSQProtocolError) as info:
            # timeout=60: only refusing the answer ends the call within BOUND
            await asyncio.wait_for(query_lookupd(session, url, "t", 60.0), BOUND)
    assert "larger than" in str(info.value)
    assert_no_secret(str(info.value))


async def test_an_nsqd_http_answer_that_never_ends_is_refused_past_the_limit() -> None:
    async with EndlessHttp(1024 * 1024) as nsqd:
        producer = HTTPProducer(f"http://u:{URL_PASSWORD}@{nsqd.address}", timeout=60.0)
        try:
            with pytest.raises(NSQProtocolError) as info:
                await asyncio.wait_for(producer.publish("t", b"x"), BOUND)
        finally:
            await producer.close()
    assert "larger than" in str(info.value)
    assert_no_secret(str(info.value))


@pytest.mark.parametrize(
    "answer",
    [
        struct.pack(">II", 2**31, 0) + b"x" * 1024,
        b"HTTP/1.1 400 Bad Request\r\n\r\n",
        struct.pack(">II", 2, 0),
    ],
    ids=["response-2GB", "garbage", "truncated"],
)
async def test_reader_start_against_a_hostile_answer_to_sub_fails_typed(
    answer: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    def on_command(fake: FakeNsqd, command: bytes, body: bytes | None) -> bytes | None:
        if command.startswith(b"SUB"):
            return answer
        return fake.default_answer(command, body)

    async with FakeNsqd(identify_answer=AUTH_IDENTIFY, on_command=on_command) as fake:
        # connect_timeout=60: only refusing the answer ends start() within BOUND
        reader = Reader(
            "t", "c", nsqd_tcp_addresses=[fake.address], auth_secret=SECRET, connect_timeout=60
        )
        try:
            with pytest.raises(AioClientsError) as info:
                await asyncio.wait_for(reader.start(), BOUND)
            assert not isinstance(info.value, TimeoutError)
            assert_no_secret(str(info.value))
        finally:
            await reader.close()
    assert_logs_hold_no_secret(caplog)


async def test_reader_start_against_an_nsqlookupd_answer_that_never_ends_fails_typed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with EndlessHttp(2 * MAX_LOOKUP_ANSWER) as lookupd:
        reader = Reader(
            "t",
            "c",
            lookupd_http_addresses=[f"http://u:{URL_PASSWORD}@{lookupd.address}"],
            connect_timeout=60,  # only refusing the answer ends start() within BOUND
        )
        try:
            with pytest.raises(NSQConnectError, match="larger than") as info:
                await asyncio.wait_for(reader.start(), BOUND)
            assert_no_secret(str(info.value))
        finally:
            await reader.close()
    assert_logs_hold_no_secret(caplog)


@pytest.mark.parametrize("method", ["mpublish", "dpublish"])
async def test_mpublish_and_dpublish_refuse_a_2gb_answer(method: str) -> None:
    async with hostile(struct.pack(">II", 2**31, 0)) as fake:
        async with Producer(fake.address, auth_secret=SECRET, timeout=60.0) as producer:
            call = (
                producer.mpublish("t", [b"a", b"b"])
                if method == "mpublish"
                else producer.dpublish("t", b"x", 1.0)
            )
            with pytest.raises(AioClientsError) as info:
                await asyncio.wait_for(call, BOUND)
            assert not isinstance(info.value, TimeoutError)
            assert_no_secret(str(info.value))
