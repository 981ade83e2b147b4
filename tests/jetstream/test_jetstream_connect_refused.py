"""A refused connect fails at once and says what to start; a clean close logs no news."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from support import Server

from aioclients import InvalidArgumentError
from aioclients.jetstream import JetStreamConnectError, connect
from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A loopback address that refuses connections: bound (so nobody else takes the port)
    but not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"nats://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def another_refused_url() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"nats://127.0.0.1:{sock.getsockname()[1]}"


async def test_refused_connect_fails_at_once_saying_what_to_start(
    refused_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="aioclients")
    start = time.monotonic()
    with pytest.raises(JetStreamConnectError) as info:
        await connect(refused_url)
    # nats-py would try again after reconnect_time_wait (2 s) until the deadline (6 s).
    assert time.monotonic() - start < 1.5
    message = str(info.value)
    assert message.startswith(f"no NATS server at {refused_url} (connection refused)")
    assert "`aioclients-servers`" in message
    assert "`nats-server -js`" in message
    assert "\n" not in message
    # Raised, not also logged as a warning on the way.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_every_server_of_a_list_refusing_fails_at_once(
    refused_url: str, another_refused_url: str
) -> None:
    start = time.monotonic()
    with pytest.raises(JetStreamConnectError, match="no NATS server at") as info:
        await connect([refused_url, another_refused_url])
    assert time.monotonic() - start < 1.5
    assert refused_url in str(info.value)
    assert another_refused_url in str(info.value)


async def test_a_refusing_server_in_a_list_is_skipped(
    refused_url: str, nats_server: Server
) -> None:
    async with await connect([refused_url, nats_server.url], dont_randomize=True) as js:
        await js.account_info()


async def test_a_comma_separated_string_names_several_servers(
    refused_url: str, nats_server: Server
) -> None:
    # As nats.go's Connect takes a cluster's seed list: the refusing one is skipped.
    seeds = f"{refused_url}, {nats_server.url}"
    async with await connect(seeds, dont_randomize=True) as js:
        await js.account_info()


async def test_every_server_of_a_comma_separated_string_is_named_when_all_refuse(
    refused_url: str, another_refused_url: str
) -> None:
    with pytest.raises(JetStreamConnectError, match="no NATS server at") as info:
        await connect(f"{refused_url},{another_refused_url}")
    assert refused_url in str(info.value)
    assert another_refused_url in str(info.value)


@pytest.mark.parametrize("servers", ["", " , ", [","]])
async def test_a_string_naming_no_server_is_refused_before_connecting(servers: object) -> None:
    with pytest.raises(InvalidArgumentError, match="servers must be a URL"):
        await connect(servers)  # type: ignore[arg-type]


async def test_your_error_callback_still_hears_the_refusal(refused_url: str) -> None:
    heard: list[Exception] = []

    async def error_cb(exc: Exception) -> None:
        heard.append(exc)

    with pytest.raises(JetStreamConnectError, match="no NATS server"):
        await connect(refused_url, error_cb=error_cb)
    assert [type(e) for e in heard] == [ConnectionRefusedError]


async def test_closing_logs_nothing_at_info(
    nats_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="aioclients")
    async with await connect(nats_server.url) as js:
        await js.account_info()
    assert not [r for r in caplog.records if r.levelno >= logging.INFO], caplog.records


@pytest.mark.fault
async def test_a_lost_connection_is_logged_at_info(
    nats_server_private: NatsServer | ExternalServer, caplog: pytest.LogCaptureFixture
) -> None:
    if isinstance(nats_server_private, ExternalServer):
        pytest.skip("stops the server; cannot stop an external one")
    caplog.set_level(logging.INFO, logger="aioclients")
    reconnected = asyncio.Event()

    async def reconnected_cb() -> None:
        reconnected.set()

    async with await connect(nats_server_private.url, reconnected_cb=reconnected_cb) as js:
        await js.account_info()
        nats_server_private.restart()
        await asyncio.wait_for(reconnected.wait(), 30)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert "NATS disconnected" in messages


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:4222", "nsq://127.0.0.1:4150", "HTTPS://bob:s3cret@h:4222"]
)
async def test_a_url_of_another_scheme_is_refused_at_once(url: str) -> None:
    # nats-py took it for a host name: three DNS errors logged, then a failure after 6 s.
    with pytest.raises(InvalidArgumentError, match="is not a NATS URL: use nats://") as info:
        await connect(url)
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize("url", ["TLS://127.0.0.1:4222", "ws://127.0.0.1:4222"])
async def test_the_schemes_nats_py_knows_pass_the_check(url: str) -> None:
    # Checked by connect before anything is opened; these reach the connect (and fail there).
    with pytest.raises(JetStreamConnectError):
        await connect(url.replace("4222", str(_free_port())), timeout=1.0)


async def test_a_failed_websocket_connect_leaves_no_session_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # nats-py before 2.16 kept the aiohttp session of a WebSocket connect that failed
    # (reported as "Unclosed client session" when collected, in some later test).
    sessions: list[aiohttp.ClientSession] = []
    made = aiohttp.ClientSession.__init__

    def recording(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        sessions.append(self)

    monkeypatch.setattr(aiohttp.ClientSession, "__init__", recording)
    with pytest.raises(JetStreamConnectError):
        await connect(f"ws://127.0.0.1:{_free_port()}", timeout=1.0)
    assert sessions
    assert all(session.closed for session in sessions)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_silent_server_is_asked_whether_it_is_a_nats_port() -> None:
    # nsqd's TCP port accepts and waits for the client: "TimeoutError (no answer
    # within 2s)" said nothing about the port being another server's.
    writers: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.read()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"nats://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        with pytest.raises(JetStreamConnectError) as info:
            await connect(url, timeout=0.5)
        for writer in writers:
            writer.transport.abort()
    assert str(info.value).startswith(f"cannot connect to NATS at {url}: TimeoutError")
    assert str(info.value).endswith("nats-server answers at once; is this its client port (4222)?")
