"""The Reader's background loops survive a misbehaving nsqd or nsqlookupd, and end
the iteration (never hang) on an error they cannot retry.

They script a fake nsqd / nsqlookupd (``tests/nsq/fake_nsqd.py``) to send answers no
real server sends, so they never use the external servers of AIOCLIENTS_TEST_NSQD_*."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable

import pytest

from aioclients.nsq import Reader
from tests.nsq.fake_nsqd import FakeNsqd, frame, message_frame

MID1 = b"00000000000000b1"
MID2 = b"00000000000000b2"

FAST_RECONNECT = {"reconnect_delay": 0.02, "max_reconnect_delay": 0.05}


def scripted_identify(
    answers: list[bytes | None],
) -> Callable[[FakeNsqd, bytes, bytes | None], bytes | None]:
    """Answer the n-th IDENTIFY with ``answers[n]`` (None: nsqd's normal answer; the
    last entry repeats); every other command as nsqd would."""
    seen = 0

    def answer(fake: FakeNsqd, command: bytes, body: bytes | None) -> bytes | None:
        nonlocal seen
        if command == b"IDENTIFY":
            scripted = answers[min(seen, len(answers) - 1)]
            seen += 1
            if scripted is not None:
                return scripted
        return fake.default_answer(command, body)

    return answer


async def test_garbled_identify_answer_on_reconnect_is_retried_and_delivery_resumes() -> None:
    garbled = frame(0, b'{"max_rdy_count": 25')  # cut-off JSON: NSQProtocolError
    async with FakeNsqd(on_command=scripted_identify([None, garbled, None])) as fake:
        async with Reader("t", "c", nsqd_tcp_addresses=[fake.address], **FAST_RECONNECT) as reader:
            await fake.wait_for(lambda c: c.count(b"RDY 1") >= 1)
            fake.writers[-1].close()  # nsqd drops us; the reconnect meets the garbage
            await fake.wait_for(lambda c: c.count(b"SUB t c") == 2)  # third connection
            assert fake.commands.count(b"IDENTIFY") == 3
            await fake.wait_for(lambda c: c.count(b"RDY 1") >= 2)
            fake.send(message_frame(MID1, b"after"))
            msg = await asyncio.wait_for(reader.__anext__(), 5)
            assert msg.body == b"after"
            await msg.finish()
            await fake.wait_for(lambda c: b"FIN " + MID1 in c)


async def test_a_bug_in_the_reconnect_loop_ends_the_iteration_with_it() -> None:
    async with FakeNsqd() as fake:
        async with Reader("t", "c", nsqd_tcp_addresses=[fake.address], **FAST_RECONNECT) as reader:
            await fake.wait_for(lambda c: b"RDY 1" in c)

            async def broken(address: str) -> None:
                raise KeyError("a bug")

            reader._connect = broken  # type: ignore[method-assign]
            fake.writers[-1].close()

            async def consume() -> None:
                async for _ in reader:
                    pass

            with pytest.raises(KeyError, match="a bug"):
                await asyncio.wait_for(consume(), 5)
            with pytest.raises(KeyError):  # stays failed
                await asyncio.wait_for(reader.__anext__(), 5)


async def test_run_raises_the_background_failure_instead_of_hanging() -> None:
    async with FakeNsqd() as fake:
        async with Reader("t", "c", nsqd_tcp_addresses=[fake.address], **FAST_RECONNECT) as reader:
            await fake.wait_for(lambda c: b"RDY 1" in c)

            async def broken(address: str) -> None:
                raise TypeError("a bug")

            reader._connect = broken  # type: ignore[method-assign]
            fake.writers[-1].close()
            with pytest.raises(TypeError, match="a bug"):
                await asyncio.wait_for(reader.run(lambda m: None), 5)


# ---- nsqlookupd polling -----------------------------------------------------------------


class FakeLookupd:
    """An HTTP/1.0 nsqlookupd answering ``/lookup`` from a script: each entry is
    ``(status, body)`` or ``None`` (accept the request and never answer); the last
    entry repeats. ``served`` counts the requests."""

    def __init__(self, script: list[tuple[int, bytes] | None]) -> None:
        self.script = script
        self.served = 0
        self._server: asyncio.Server | None = None
        self._changed = asyncio.Event()
        self._hung: list[asyncio.StreamWriter] = []

    @property
    def address(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def wait_served(self, n: int, timeout: float = 10.0) -> None:
        async def loop() -> None:
            while self.served < n:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), timeout)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            entry = self.script[min(self.served, len(self.script) - 1)]
            self.served += 1
            self._changed.set()
            if entry is None:
                self._hung.append(writer)
                return
            status, body = entry
            head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
            writer.write(head.encode() + b"Content-Type: application/json\r\n\r\n" + body)
            await writer.drain()
        writer.close()

    async def __aenter__(self) -> FakeLookupd:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for w in self._hung:
            w.close()
        await self._server.wait_closed()


def lookup_answer(*tcp_addresses: str) -> tuple[int, bytes]:
    producers = []
    for address in tcp_addresses:
        host, port = address.rsplit(":", 1)
        producers.append({"broadcast_address": host, "tcp_port": int(port)})
    return 200, json.dumps({"channels": [], "producers": producers}).encode()


@contextlib.asynccontextmanager
async def caught(caplog: pytest.LogCaptureFixture) -> AsyncIterator[None]:
    with caplog.at_level(logging.DEBUG, logger="aioclients"):
        yield


async def test_lookupd_garbage_http_500_and_silence_do_not_stop_discovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with FakeNsqd() as fake, caught(caplog):
        script: list[tuple[int, bytes] | None] = [
            lookup_answer(),  # answers at start(), no producers yet
            (200, b"<html>not json"),
            (500, b'{"message": "INTERNAL_ERROR"}'),
            None,  # accepts and never answers: bounded by connect_timeout
            lookup_answer(fake.address),
        ]
        async with FakeLookupd(script) as lookupd:
            async with Reader(
                "t",
                "c",
                lookupd_http_addresses=[f"http://u:pw-secret@{lookupd.address}"],
                lookupd_poll_interval=0.02,
                lookupd_poll_jitter=0,
                connect_timeout=0.3,
            ) as reader:
                await fake.wait_for(lambda c: b"RDY 1" in c, timeout=10)
                assert lookupd.served >= 5
                fake.send(message_frame(MID2, b"found"))
                msg = await asyncio.wait_for(reader.__anext__(), 5)
                assert msg.body == b"found"
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("aioclients")]
    assert any("not JSON" in w for w in warnings)
    assert any("HTTP_500" in w for w in warnings)
    assert any("unreachable" in w or "within" in w for w in warnings)
    assert not any("pw-secret" in w for w in warnings)


# ---- a server that ignores RDY ------------------------------------------------------------


async def test_an_nsqd_ignoring_rdy_is_cut_off_and_the_queue_stays_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    connections = 0

    def flood_once(fake: FakeNsqd, command: bytes, body: bytes | None) -> bytes | None:
        nonlocal connections
        if command == b"IDENTIFY":
            connections += 1
        if command == b"RDY 1" and connections == 1:
            return b"".join(message_frame(b"%016d" % i, b"flood") for i in range(500))
        return fake.default_answer(command, body)

    async with FakeNsqd(on_command=flood_once) as fake:
        async with Reader(
            "t", "c", nsqd_tcp_addresses=[fake.address], max_in_flight=1, **FAST_RECONNECT
        ) as reader:
            await fake.wait_for(lambda c: c.count(b"SUB t c") == 2)  # reconnected
            assert reader.statistics().buffered <= 1
            await fake.wait_for(lambda c: c.count(b"RDY 1") >= 2)
            assert reader.statistics().buffered == 0  # the flood was dropped with its link
            fake.send(message_frame(MID1, b"fine"))
            msg = await asyncio.wait_for(reader.__anext__(), 5)
            assert msg.body == b"fine"
    assert any("ignores RDY" in r.getMessage() for r in caplog.records)
