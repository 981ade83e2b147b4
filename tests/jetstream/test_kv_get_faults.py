"""``KeyValue.get`` through a FaultProxy: a frozen, jammed or reset connection ends
every get in time with a typed error, a cancel cancels and leaves nothing behind,
and gets work again after the reconnect (with replies again taken straight from
the new socket's read callback)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable
from datetime import datetime

import pytest
from support import Server, skip_if_the_proxy_can_be_bypassed

from aioclients import AioClientsError
from aioclients.jetstream import (
    APITimeoutError,
    JetStream,
    KeyDeletedError,
    KeyNotFoundError,
    KeyValue,
    connect,
)
from aioclients.jetstream._transport import FastParser
from aioclients.testing import FaultProxy

pytestmark = [pytest.mark.timeout(60), pytest.mark.fault]

TIMEOUT = 1.0
#: scheduling slack on a busy 2-core machine
MARGIN = 1.5
BIG = b"x" * (512 * 1024)


@pytest.fixture
async def proxied(
    nats_server: Server, unique_name: str
) -> AsyncIterator[tuple[FaultProxy, JetStream, KeyValue]]:
    """A bucket made on a direct connection; a context and its KeyValue through a proxy."""
    bucket = unique_name.replace(".", "_")[-60:]
    async with FaultProxy(nats_server.url) as proxy:
        direct = await connect(nats_server.url, timeout=5)
        js = await connect(
            f"nats://{proxy.address}",
            timeout=TIMEOUT,
            reconnect_time_wait=0.1,
            max_reconnect_attempts=-1,
            ping_interval=0.5,
            max_outstanding_pings=2,
        )
        try:
            mine = await direct.create_key_value(bucket, history=2, max_bytes=1 << 30)
            await mine.put("a", b"one")
            await mine.put("gone", b"x")
            await mine.delete("gone")
            yield proxy, js, await js.key_value(bucket)
        finally:
            proxy.thaw()
            proxy.refuse(False)
            # Closed while nats-py is half-way through a reconnect (connected to the
            # proxy, waiting for INFO), nats-py can leave that attempt's socket open,
            # and uvloop then refuses to close the test's loop: let it finish first.
            for _ in range(500):  # 10 s at most
                if js.nc.is_connected:
                    break
                await asyncio.sleep(0.02)
            await asyncio.wait_for(js.close(), 2 * TIMEOUT + MARGIN)
            try:
                await direct.delete_key_value(bucket)
            finally:
                await direct.close()


async def outcome(call: Awaitable[object], limit: float = TIMEOUT + MARGIN) -> object:
    """The call's result or exception; fails the test if it takes longer than ``limit``."""
    start = time.monotonic()
    task = asyncio.ensure_future(call)
    done, _ = await asyncio.wait({task}, timeout=limit + 5)
    if not done:
        task.cancel()
        raise AssertionError(f"the call did not end within {limit + 5}s")
    exc = task.exception()
    result: object = task.result() if exc is None else exc
    elapsed = time.monotonic() - start
    assert elapsed < limit, f"the call took {elapsed:.2f}s (bound {limit}s): {result!r}"
    return result


def reads_from_the_socket_callback(js: JetStream) -> bool:
    """The parser takes the socket's bytes first, and the connection's protocol hands
    them straight to it (not through ``StreamReaderProtocol.data_received``)."""
    nc = js.nc
    parser = nc._ps
    reader = nc._transport._io_reader
    protocol = nc._transport._io_writer._protocol
    return (
        isinstance(parser, FastParser)
        and parser._reader is reader
        and vars(protocol).get("data_received") is reader.feed_data
    )


async def test_replies_skip_the_stream_protocol_s_data_received(
    nats_server: Server, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On either loop, a get's reply reaches the parser without a call of
    ``StreamReaderProtocol.data_received`` (uvloop keeps the protocol's bound method
    from the connect on: the transport must be given the protocol again)."""
    received: list[object] = []
    original = asyncio.StreamReaderProtocol.data_received

    def counted(self: asyncio.StreamReaderProtocol, data: bytes) -> None:
        received.append(self)
        original(self, data)

    monkeypatch.setattr(asyncio.StreamReaderProtocol, "data_received", counted)
    bucket = unique_name.replace(".", "_")[-60:]
    js = await connect(nats_server.url, timeout=5)
    try:
        kv = await js.create_key_value(bucket)
        await kv.put("a", b"one")
        assert reads_from_the_socket_callback(js)
        ours = js.nc._transport._io_writer._protocol
        assert received.count(ours) > 0  # the connect's INFO came this way
        before = received.count(ours)
        for _ in range(20):
            assert (await kv.get("a")).value == b"one"
        assert received.count(ours) == before
        await js.delete_key_value(bucket)
    finally:
        await js.close()


async def test_gets_keep_their_semantics_on_the_fast_path(
    proxied: tuple[FaultProxy, JetStream, KeyValue],
) -> None:
    _, js, kv = proxied
    assert reads_from_the_socket_callback(js)
    entry = await kv.get("a")
    assert (entry.key, entry.value, entry.operation, entry.delta) == ("a", b"one", "PUT", 0)
    with pytest.raises(KeyNotFoundError) as missing:
        await kv.get("missing")
    assert type(missing.value) is KeyNotFoundError
    with pytest.raises(KeyDeletedError) as deleted:
        await kv.get("gone")
    assert deleted.value.entry.operation == "DEL"  # type: ignore[attr-defined]
    assert (await kv.get("a", revision=entry.revision)).value == b"one"
    # its time, read on first access, is the one the general reading makes
    assert entry == await kv.get("a", revision=entry.revision)
    assert type(entry.created) is datetime
    assert entry.created.tzinfo is not None
    assert js._requests.outstanding == 0


async def test_a_get_on_a_frozen_connection_ends_in_time_with_a_typed_timeout(
    proxied: tuple[FaultProxy, JetStream, KeyValue],
) -> None:
    proxy, js, kv = proxied
    skip_if_the_proxy_can_be_bypassed(js.nc)
    proxy.freeze()
    result = await outcome(kv.get("a"))
    assert isinstance(result, APITimeoutError), repr(result)
    assert isinstance(result, TimeoutError)
    assert f"get of 'a' in {kv.bucket!r}" in str(result)  # what timed out, named
    assert js._requests.outstanding == 0
    proxy.thaw()  # the late reply arrives first: dropped, not taken by the next get
    assert (await kv.get("a")).value == b"one"
    assert js._requests.outstanding == 0


async def test_a_get_on_a_jammed_connection_ends_in_time_with_a_typed_timeout(
    proxied: tuple[FaultProxy, JetStream, KeyValue],
) -> None:
    proxy, js, kv = proxied
    skip_if_the_proxy_can_be_bypassed(js.nc)
    proxy.freeze()
    acks: list[asyncio.Future[object]] = []
    for _ in range(100):  # big publishes until one cannot be written: a full socket
        queued = await outcome(js.publish_async(f"$KV.{kv.bucket}.big", BIG, timeout=TIMEOUT))
        if not isinstance(queued, asyncio.Future):
            break
        acks.append(queued)
    else:
        raise AssertionError("100 big publishes through a frozen proxy were all accepted")
    for ack in acks:
        ack.add_done_callback(lambda f: f.exception())  # failure expected; seen
    result = await outcome(kv.get("a"))
    assert isinstance(result, AioClientsError), repr(result)
    assert isinstance(result, TimeoutError), repr(result)
    assert js._requests.outstanding == 0


async def test_cancelling_a_waiting_get_cancels_and_leaves_nothing_behind(
    proxied: tuple[FaultProxy, JetStream, KeyValue],
) -> None:
    proxy, js, kv = proxied
    await kv.get("a")  # the reply inbox exists
    proxy.freeze()
    task = asyncio.ensure_future(kv.get("a"))
    done, _ = await asyncio.wait({task}, timeout=0.2)
    assert not done
    assert js._requests.outstanding == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, MARGIN)
    assert js._requests.outstanding == 0
    proxy.thaw()
    assert (await kv.get("a")).value == b"one"


async def test_gets_work_again_after_a_reset_and_read_from_the_new_socket(
    proxied: tuple[FaultProxy, JetStream, KeyValue],
) -> None:
    proxy, js, kv = proxied
    await kv.get("a")
    old_reader = js.nc._transport._io_reader
    assert proxy.reset() >= 1
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:
        result = await outcome(kv.get("a"))
        if not isinstance(result, BaseException):
            break
        assert isinstance(result, AioClientsError), repr(result)
        assert loop.time() < deadline, f"no get succeeded after the reset: {result!r}"
        await asyncio.sleep(0.1)  # poll interval of a bounded wait
    assert result.value == b"one"  # type: ignore[attr-defined]
    assert js.nc._transport._io_reader is not old_reader
    assert reads_from_the_socket_callback(js)
    values = [(await kv.get("a")).value for _ in range(50)]
    assert values == [b"one"] * 50
    assert js._requests.outstanding == 0
