"""A refused connection names the address and says what to start."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from aioclients.nsq import HTTPProducer, NSQConnectError, NSQProtocolError, Producer, Reader


@pytest.fixture
def refused_address() -> Iterator[str]:
    """A loopback address that refuses connections: bound (so nobody else takes the port)
    but not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


async def test_producer(refused_address: str) -> None:
    with pytest.raises(NSQConnectError) as info:
        async with Producer(refused_address) as producer:
            await producer.publish("t", b"x")
    assert str(info.value) == (
        f"could not connect to nsqd at {refused_address} (connection refused): start one "
        "with `aioclients-servers` or `nsqd`, or check that this is its TCP address"
    )


async def test_http_producer(refused_address: str) -> None:
    async with HTTPProducer(refused_address) as producer:
        with pytest.raises(NSQConnectError) as info:
            await producer.publish("t", b"x")
    assert str(info.value) == (
        f"nsqd HTTP API at http://{refused_address} unreachable (connection refused): "
        "start nsqd with `aioclients-servers` or `nsqd`, or check that this is its HTTP "
        "address"
    )


async def test_reader_through_nsqlookupd(refused_address: str) -> None:
    with pytest.raises(NSQConnectError) as info:
        async with Reader("t", "c", lookupd_http_addresses=[refused_address]):
            pass
    assert str(info.value) == (
        f"no nsqlookupd answered: nsqlookupd http://{refused_address} unreachable "
        "(connection refused): start one with `aioclients-servers` or `nsqlookupd`, or check "
        "that this is its HTTP address"
    )


async def test_a_server_that_speaks_first_is_named_by_what_it_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # nats-server greets with INFO before the client says anything. When the greeting
    # was read before open() started the protocol core, the error was "start() in
    # state closed, expected init": that race is made certain here.
    writers: list[asyncio.StreamWriter] = []

    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        writer.write(b'INFO {"server_id":"NX","version":"2.11.0"}\r\n')
        await reader.read()  # until the client drops the connection
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    server = await asyncio.start_server(greet, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    connect = loop.create_connection

    async def greeting_read_first(factory: Any, host: str, port: int) -> Any:
        heard = asyncio.Event()

        def spy() -> Any:
            protocol = factory()
            received = protocol.data_received

            def data_received(data: bytes) -> None:
                received(data)
                heard.set()

            protocol.data_received = data_received
            return protocol

        result = await connect(spy, host, port)
        await heard.wait()
        return result

    monkeypatch.setattr(loop, "create_connection", greeting_read_first)
    async with server:
        with pytest.raises(NSQProtocolError) as info:
            async with Producer(f"127.0.0.1:{port}") as producer:
                await producer.publish("t", b"x")
    for writer in writers:
        writer.transport.abort()
    assert 'the server answered with text (\'INFO {"server_id":"NX"' in str(info.value)


@pytest.fixture
async def tcp_port_address() -> AsyncIterator[str]:
    """A server answering as an nsqd or nsqlookupd TCP port answers an HTTP request."""

    writers: list[asyncio.StreamWriter] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.read(1)
        writer.write(b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL")
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    for writer in writers:  # a handler still running when the test ended
        writer.transport.abort()


async def test_http_producer_on_a_tcp_port(tcp_port_address: str) -> None:
    # Was aiohttp's repr: the whole request, its headers, and "Bad status line".
    async with HTTPProducer(tcp_port_address) as producer:
        with pytest.raises(NSQConnectError) as info:
            await producer.publish("t", b"x")
    assert str(info.value) == (
        f"nsqd HTTP API at http://{tcp_port_address} unreachable: it does not answer "
        "HTTP: is this nsqd's HTTP port (4151 by default), not its TCP port?"
    )


async def test_reader_with_an_nsqlookupd_tcp_port(tcp_port_address: str) -> None:
    with pytest.raises(NSQConnectError) as info:
        async with Reader("t", "c", lookupd_http_addresses=[tcp_port_address]):
            pass
    assert str(info.value) == (
        f"no nsqlookupd answered: nsqlookupd http://{tcp_port_address} unreachable: it "
        "does not answer HTTP: is this nsqlookupd's HTTP port (4161 by default), not its "
        "TCP port?"
    )
