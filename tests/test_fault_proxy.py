"""FaultProxy: the loopback proxy that freezes, resets, refuses and delays connections."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from aioclients import InvalidArgumentError
from aioclients.testing import FaultProxy
from aioclients.testing.fault_proxy import _Link

pytestmark = pytest.mark.fault


class EchoServer:
    """Echoes everything back and counts what it received."""

    def __init__(self) -> None:
        self.received = 0
        self.got_data = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while data := await reader.read(65536):
                self.received += len(data)
                self.got_data.set()
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


@pytest.fixture
async def echo() -> AsyncIterator[EchoServer]:
    srv = EchoServer()
    srv.server = await asyncio.start_server(srv._handle, "127.0.0.1", 0)
    yield srv
    srv.server.close()
    for w in srv.writers:
        w.transport.abort()
    await srv.server.wait_closed()


async def _connect(address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = address.rsplit(":", 1)
    return await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.transport.abort()
    await asyncio.sleep(0)


async def test_forwards_both_ways_and_counts(echo: EchoServer) -> None:
    async with FaultProxy(echo.address) as proxy:
        reader, writer = await _connect(proxy.address)
        writer.write(b"hello proxy")
        assert await asyncio.wait_for(reader.readexactly(11), 5) == b"hello proxy"
        stats = proxy.statistics()
        assert (stats.connections_accepted, stats.connections_open) == (1, 1)
        assert stats.bytes_to_server == stats.bytes_to_client == 11
        await _close(writer)


async def test_freeze_backs_up_the_sender_and_thaw_delivers_everything(echo: EchoServer) -> None:
    payload = bytes(range(256)) * 40_000  # 10 MB: more than every socket buffer on the way
    async with FaultProxy(echo.address) as proxy:
        reader, writer = await _connect(proxy.address)
        writer.write(b"x")
        assert await asyncio.wait_for(reader.readexactly(1), 5) == b"x"
        proxy.freeze()
        assert proxy.frozen
        writer.write(payload)
        # A stopped peer: the writer cannot get rid of 10 MB.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(writer.drain(), 0.5)
        assert echo.received == 1
        proxy.thaw()
        echoed = await asyncio.wait_for(reader.readexactly(len(payload)), 30)
        assert echoed == payload
        await _close(writer)


async def test_reset_resets_both_ends(echo: EchoServer) -> None:
    async with FaultProxy(echo.address) as proxy:
        reader, writer = await _connect(proxy.address)
        writer.write(b"ping")
        await asyncio.wait_for(reader.readexactly(4), 5)
        assert proxy.reset() == 1
        with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(reader.readexactly(1), 5)
        assert proxy.statistics().resets == 1
        assert proxy.statistics().connections_open == 0
        await _close(writer)
        # New connections still work after a reset.
        reader2, writer2 = await _connect(proxy.address)
        writer2.write(b"again")
        assert await asyncio.wait_for(reader2.readexactly(5), 5) == b"again"
        await _close(writer2)


async def test_the_fault_calls_can_be_awaited_too(echo: EchoServer) -> None:
    # The API contract writes them without "(sync)": awaiting each works as well as
    # the plain call, and the fault is in place when the call returns.
    async with FaultProxy(echo.address) as proxy:
        reader, writer = await _connect(proxy.address)
        writer.write(b"ping")
        await asyncio.wait_for(reader.readexactly(4), 5)
        assert await proxy.freeze() is None
        assert proxy.frozen
        assert await proxy.thaw() is None
        assert not proxy.frozen
        assert await proxy.delay(0) is None
        assert await proxy.refuse() is None
        with pytest.raises(ConnectionRefusedError):
            await _connect(proxy.address)
        assert await proxy.refuse(False) is None
        count = await proxy.reset()
        assert count == 1
        assert type(count) is int
        await _close(writer)


async def test_refuse_refuses_new_connections_only(echo: EchoServer) -> None:
    async with FaultProxy(echo.address) as proxy:
        reader, writer = await _connect(proxy.address)
        proxy.refuse()
        with pytest.raises(ConnectionRefusedError):
            await _connect(proxy.address)
        writer.write(b"still here")
        assert await asyncio.wait_for(reader.readexactly(10), 5) == b"still here"
        proxy.refuse(False)
        reader2, writer2 = await _connect(proxy.address)
        writer2.write(b"back")
        assert await asyncio.wait_for(reader2.readexactly(4), 5) == b"back"
        await _close(writer)
        await _close(writer2)


async def test_delay_adds_latency_each_way(echo: EchoServer) -> None:
    async with FaultProxy(echo.address) as proxy:
        reader, writer = await _connect(proxy.address)
        proxy.delay(0.2)
        loop = asyncio.get_running_loop()
        started = loop.time()
        writer.write(b"slow")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"slow"
        # 0.2 s to the server and 0.2 s back. uvloop's clock counts whole
        # milliseconds: 80055.563 - 80055.163 is 0.39999999999417923 in floats.
        assert loop.time() - started >= 0.4 - 1e-6
        proxy.delay(0)
        with pytest.raises(InvalidArgumentError, match="delay"):
            proxy.delay(-1)
        await _close(writer)


async def test_unreachable_target_closes_the_client() -> None:
    async with FaultProxy(("127.0.0.1", 9)) as proxy, FaultProxy(proxy.address) as front:
        proxy.refuse()
        reader, writer = await _connect(front.address)
        with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(reader.readexactly(1), 10)
        await _close(writer)


async def test_close_aborts_open_connections(echo: EchoServer) -> None:
    proxy = FaultProxy(echo.address)
    await proxy.start()
    reader, writer = await _connect(proxy.address)
    proxy.freeze()
    await proxy.aclose()
    with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(reader.readexactly(1), 5)
    await _close(writer)


def test_bad_target_is_refused_at_once() -> None:
    with pytest.raises(InvalidArgumentError, match="host:port"):
        FaultProxy("no-port-here")
    with pytest.raises(RuntimeError, match="not started"):
        _ = FaultProxy("127.0.0.1:1").address


async def test_no_task_outlives_aclose_even_after_a_reset(echo: EchoServer) -> None:
    before = asyncio.all_tasks()
    proxy = FaultProxy(echo.address)
    await proxy.start()
    readers = []
    for _ in range(3):
        reader, writer = await _connect(proxy.address)
        writer.write(b"x")
        assert await asyncio.wait_for(reader.readexactly(1), 5) == b"x"
        readers.append(writer)
    assert proxy.reset() == 3
    proxy.refuse()
    proxy.refuse(False)  # a task listens again
    await proxy.aclose()
    left = asyncio.all_tasks() - before
    assert [t for t in left if "EchoServer" not in repr(t)] == []  # the echo's are the test's
    for writer in readers:
        await _close(writer)


async def test_a_failing_pump_is_raised_by_aclose(echo: EchoServer) -> None:
    proxy = FaultProxy(echo.address)
    await proxy.start()

    failed = asyncio.Event()

    async def broken(*args: object, **kwargs: object) -> None:
        failed.set()
        raise RuntimeError("a bug in the pump")

    proxy._pump = broken  # type: ignore[method-assign]
    _reader, writer = await _connect(proxy.address)
    await asyncio.wait_for(failed.wait(), 5)
    with pytest.raises(RuntimeError, match="a bug in the pump"):
        await proxy.aclose()
    await _close(writer)


async def test_a_chunk_read_before_its_link_was_aborted_is_dropped(echo: EchoServer) -> None:
    # The race of an aclose (or reset) with a chunk already read: the pump wakes with
    # data for a transport the proxy has just aborted. A closed socket takes nothing,
    # and the pump ends its link without an error (on uvloop the write would raise).
    proxy = FaultProxy(echo.address)
    await proxy.start()
    reader, writer = await _connect(echo.address)
    writer.transport.abort()
    chunk = asyncio.StreamReader()
    chunk.feed_data(b"read just before the abort")
    chunk.feed_eof()
    link = _Link((chunk, writer), (reader, writer))
    await asyncio.wait_for(proxy._pump(link, chunk, writer, to_server=True), 5)
    assert proxy.statistics().bytes_to_server == 0
    await proxy.aclose()  # no failure of a task to raise


def test_the_emulators_refuse_bad_arguments_with_the_library_s_error() -> None:
    # aioclients.AioClientsError is the root of every error the library raises, the
    # test servers' included (InvalidArgumentError is still a ValueError).
    from aioclients.testing import LiftbridgeCluster, NsqdEmulator

    nsqd = NsqdEmulator()
    for call in (
        lambda: nsqd.publish("bad topic", b"x"),
        lambda: nsqd.publish("t", b""),
        lambda: nsqd.create_topic("t", "bad channel"),
        lambda: nsqd.fail_next("SUB"),
        lambda: LiftbridgeCluster().advertise(0, "no-port"),
    ):
        with pytest.raises(InvalidArgumentError):
            call()
