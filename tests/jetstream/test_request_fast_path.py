"""A request's fast path: its future and deadline come from the loop it runs in
(asyncio's own loops: ``asyncio.Future`` and ``time.monotonic`` called directly,
what their ``create_future`` and ``time`` do; any other loop: its own methods), and
a connection with no socket writer of its own writes nothing past nats-py's flusher."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from support import Server

from aioclients.jetstream import connect
from aioclients.jetstream._publisher import future_and_clock

#: far enough from time.monotonic() that a deadline taken on the wrong clock has passed
OFFSET = 1e6


class _OffsetClockLoop(asyncio.SelectorEventLoop):  # type: ignore[misc,name-defined]
    """A loop with a clock of its own, and futures of its own making."""

    made = 0

    def time(self) -> float:
        return super().time() + OFFSET

    def create_future(self) -> asyncio.Future[Any]:
        type(self).made += 1
        return super().create_future()


def test_asyncio_s_own_loop_gets_a_future_and_monotonic_directly() -> None:
    loop = asyncio.new_event_loop()
    try:
        new_future, clock = future_and_clock(loop)
        assert clock is time.monotonic
        future = new_future()
        assert type(future) is asyncio.Future
        assert future.get_loop() is loop
        assert not future.done()
    finally:
        loop.close()


def test_a_loop_that_overrides_them_keeps_its_own() -> None:
    loop = _OffsetClockLoop()
    try:
        new_future, clock = future_and_clock(loop)
        assert clock == loop.time
        before = _OffsetClockLoop.made
        assert new_future().get_loop() is loop
        assert _OffsetClockLoop.made == before + 1
    finally:
        loop.close()


def test_gets_on_a_loop_with_a_clock_of_its_own(nats_server: Server, unique_name: str) -> None:
    """A deadline taken on another clock than the loop's would lie a million seconds
    in the loop's past: the first sweep would fail every get as timed out."""
    bucket = unique_name.replace(".", "_")[-60:]

    async def gets() -> None:
        js = await connect(nats_server.url, timeout=5)
        try:
            kv = await js.create_key_value(bucket)
            await kv.put("a", b"one")
            made = _OffsetClockLoop.made
            for _ in range(20):
                assert (await kv.get("a")).value == b"one"
                await asyncio.sleep(0)  # a turn of the loop: the sweep's, if it were due
            assert js._requests.outstanding == 0
            assert _OffsetClockLoop.made - made >= 20  # the gets' futures were the loop's
            await js.delete_key_value(bucket)
        finally:
            await js.close()

    loop = _OffsetClockLoop()
    try:
        loop.run_until_complete(gets())
    finally:
        loop.close()


class _NoSocketTransport:
    """nats-py's transport as a websocket one looks to us: no ``_io_writer``."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "_io_writer":
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_a_connection_without_a_socket_writer_takes_the_flusher(
    nats_server: Server, unique_name: str
) -> None:
    """``write_now`` writes nothing on a transport with no socket writer of its own
    (nats-py's websocket one); requests and gets go through nats-py's flusher."""
    bucket = unique_name.replace(".", "_")[-60:]
    js = await connect(nats_server.url, timeout=5)
    try:
        kv = await js.create_key_value(bucket)
        await kv.put("a", b"one")
        nc = js.nc
        transport = js._transport
        assert transport.write_now(b"PING\r\n")  # the socket's, as usual
        real = nc._transport
        nc._transport = _NoSocketTransport(real)
        try:
            assert not transport.write_now(b"PING\r\n")
            assert (await kv.get("a")).value == b"one"
        finally:
            nc._transport = real
        assert transport.write_now(b"PING\r\n")
        assert (await kv.get("a")).value == b"one"
        await js.delete_key_value(bucket)
    finally:
        await js.close()
