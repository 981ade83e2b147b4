"""The emulators' harness: fixtures, external-server handling, the separate-process runner."""

from __future__ import annotations

import asyncio
import signal
import struct
import sys
from collections.abc import Awaitable, Callable

import aiohttp
import pytest

from aioclients.testing import NsqdEmulator, NsqlookupdEmulator
from aioclients.testing._nsq_fixtures import (
    NSQD_HTTP_ENV,
    NSQD_TCP_ENV,
    ExternalNsqd,
    ExternalNsqlookupd,
    external_nsqd,
)


def test_external_nsqd_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NSQD_TCP_ENV, raising=False)
    monkeypatch.delenv(NSQD_HTTP_ENV, raising=False)
    assert external_nsqd() is None
    monkeypatch.setenv(NSQD_TCP_ENV, "10.0.0.1:4150")
    monkeypatch.setenv(NSQD_HTTP_ENV, "http://10.0.0.1:4151/")
    ext = external_nsqd()
    assert ext is not None
    assert (ext.tcp_address, ext.http_address) == ("10.0.0.1:4150", "10.0.0.1:4151")


async def test_external_servers_cannot_be_stopped() -> None:
    nsqd = ExternalNsqd("127.0.0.1:4150", None)
    with pytest.raises(pytest.skip.Exception, match="external nsqd"):
        await nsqd.stop()
    with pytest.raises(pytest.skip.Exception, match="no HTTP address"):
        _ = nsqd.http_address
    lookupd = ExternalNsqlookupd("http://127.0.0.1:4161")
    assert lookupd.http_address == "127.0.0.1:4161"
    lookupd.register(nsqd)  # the external nsqd registers itself: nothing to do
    with pytest.raises(pytest.skip.Exception, match="external nsqlookupd"):
        await lookupd.start()


async def test_nsqd_factory_starts_configured_emulators(
    nsqd_factory: Callable[..., Awaitable[NsqdEmulator]],
) -> None:
    a = await nsqd_factory(msg_timeout=5.0)
    b = await nsqd_factory()
    assert a.tcp_address != b.tcp_address
    assert (a.msg_timeout, a.running, b.running) == (5.0, True, True)


async def test_fixtures_are_fresh_per_test(
    nsqd: NsqdEmulator, nsqlookupd: NsqlookupdEmulator
) -> None:
    if getattr(nsqd, "external", False) or getattr(nsqlookupd, "external", False):
        pytest.skip("checks the emulators' in-process state; an external server is not fresh")
    assert nsqd.topic_names() == []
    assert nsqlookupd.lookup("anything") is None


async def test_separate_process_runner() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aioclients.testing._nsq_serve",
        "--lookupd",
        "--nsqd",
        "2",
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        lines = []
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip()
            assert line, "the runner exited before it was ready"
            if line == "ready":
                break
            lines.append(dict(kv.split("=") for kv in line.split()[1:]))
        lookupd, first, second = lines
        host, port = first["tcp"].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"  V2PUB proc\n" + struct.pack(">I", 2) + b"hi")
        size, frame_type = struct.unpack(">II", await reader.readexactly(8))
        assert (frame_type, await reader.readexactly(size - 4)) == (0, b"OK")
        writer.close()
        await writer.wait_closed()
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://{lookupd['http']}/lookup?topic=proc") as resp,
        ):
            doc = await resp.json()
        assert [p["tcp_port"] for p in doc["producers"]] == [int(port)]
        assert second["tcp"] != first["tcp"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
