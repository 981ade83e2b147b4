"""The drivers and the emulators on uvloop, in every run (not only ``./run uvloop``).

uvloop's transports are not subclasses of ``asyncio.Transport`` (its classes are
not registered with asyncio's ABCs) and its clock counts whole milliseconds: code
that checked ``isinstance(transport, asyncio.Transport)`` failed on it, and code
that mixed ``time.monotonic()`` with loop timers woke too early. Each test runs
one scenario on a uvloop loop of its own (``uvloop.run``), whatever loop the rest
of the session uses; ``./run uvloop`` runs the whole driver suites on uvloop too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from aioclients import jetstream, liftbridge, nsq
from aioclients.jetstream import _transport as transport_module
from aioclients.jetstream._transport import FastParser, _socket_transport, abort_socket
from aioclients.testing import LiftbridgeCluster, NatsServer, NsqdEmulator
from aioclients.testing._liftbridge_state import MonotonicTimer
from aioclients.testing.pytest_plugin import ExternalServer

uvloop = pytest.importorskip("uvloop")

pytestmark = pytest.mark.timeout(60)


def on_uvloop(coro: Coroutine[Any, Any, None]) -> None:
    async def checked() -> None:
        assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
        await coro

    uvloop.run(asyncio.wait_for(checked(), 30))


def test_jetstream_keeps_its_fast_paths_on_uvloop(
    nats_server: NatsServer | ExternalServer, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aioclients")

    async def scenario() -> None:
        async with await jetstream.connect(nats_server.url) as js:
            nc = js._transport.nc
            # the socket's transport is found (immediate writes, aborting a jammed socket)
            transport = _socket_transport(nc)
            assert transport is not None
            # replies are dispatched from the socket's read callback
            assert isinstance(nc._ps, FastParser)
            assert nc._ps._reader is not None
            stream = await js.create_stream(
                unique_name, subjects=[f"{unique_name}.>"], allow_direct=True
            )
            await js.publish(f"{unique_name}.a", b"one")
            got = await stream.direct_get(last_by_subj=f"{unique_name}.a")
            assert got.data == b"one"
            await js.delete_stream(unique_name)
            # aborting reaches uvloop's transport (a frozen server's socket is dropped)
            abort_socket(nc)
            assert transport.is_closing()

    on_uvloop(scenario())
    assert not [r for r in caplog.records if " is off " in r.getMessage()]


def test_liftbridge_client_and_emulator_on_uvloop(
    nats_server: NatsServer | ExternalServer, unique_name: str
) -> None:
    async def scenario() -> None:
        async with LiftbridgeCluster(1, nats_url=nats_server.url, metadata_delay=0.0) as cluster:
            client = await liftbridge.connect(cluster.addresses)
            try:
                await client.create_stream(unique_name, unique_name)
                ack = await client.publish(unique_name, b"v")
                assert ack is not None
                assert ack.offset == 0
                async with client.subscribe(
                    unique_name,
                    start_at=liftbridge.StartPosition.EARLIEST,
                    stop_at=liftbridge.StopPosition.LATEST,
                ) as sub:
                    values = [msg.value async for msg in sub]
                assert values == [b"v"]
            finally:
                await client.close()

    on_uvloop(scenario())


def test_nsq_reader_producer_and_emulator_on_uvloop() -> None:
    async def scenario() -> None:
        async with NsqdEmulator() as nsqd:
            async with nsq.Producer(nsqd.tcp_address) as producer:
                await producer.mpublish("t", [b"a", b"b"])
            async with nsq.Reader("t", "c", nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:
                bodies = []
                async for msg in reader:
                    bodies.append(msg.body)
                    await msg.finish()
                    if len(bodies) == 2:
                        break
            assert sorted(bodies) == [b"a", b"b"]

    on_uvloop(scenario())


class EarlyLoop:
    """Records call_later; the test fires the callbacks itself, as early as it likes."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, Callable[[], Any]]] = []

    def call_later(self, delay: float, fn: Callable[[], Any]) -> EarlyLoop:
        self.calls.append((delay, fn))
        return self

    def cancel(self) -> None:
        self.calls.clear()


def test_emulator_timer_waits_for_the_monotonic_clock_when_woken_early() -> None:
    loop = EarlyLoop()
    fired: list[bool] = []
    MonotonicTimer(loop, time.monotonic() + 3600, lambda: fired.append(True))  # type: ignore[arg-type]
    delay, fire = loop.calls.pop()
    assert 3599 < delay <= 3600
    fire()  # the loop's clock says the time has come; time.monotonic() does not
    assert fired == []
    again, _ = loop.calls.pop()
    assert 3599 < again <= 3600  # re-armed for what is left

    MonotonicTimer(loop, time.monotonic() - 1, lambda: fired.append(True))  # type: ignore[arg-type]
    _, fire = loop.calls.pop()
    fire()
    assert fired == [True]


def test_a_transport_without_the_needed_methods_is_reported_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport_module, "_REPORTED_OFF", set())  # once per process

    class Writer:
        transport = object()  # neither asyncio's nor uvloop's: no abort()

    class Client:
        _transport = type("T", (), {"_io_writer": Writer()})()

    caplog.set_level(logging.INFO, logger="aioclients")
    assert _socket_transport(Client()) is None  # type: ignore[arg-type]
    assert _socket_transport(Client()) is None  # type: ignore[arg-type]
    off = [r for r in caplog.records if "writing requests straight to the socket" in r.message]
    assert len(off) == 1
    assert "object" in off[0].message
