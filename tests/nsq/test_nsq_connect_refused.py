"""A refused connection names the address and says what to start."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from aioclients.nsq import HTTPProducer, NSQConnectError, Producer, Reader


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
