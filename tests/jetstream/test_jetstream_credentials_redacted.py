"""No password or token from a server URL reaches an exception or a log record."""

from __future__ import annotations

import logging
import socket

import pytest

from aioclients.jetstream import JetStreamConnectError, connect

PASSWORD = "S3cretPassw0rd"
TOKEN = "s3cr3tT0k3nXYZ"


def _refused_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _assert_hidden(text: str, secret: str) -> None:
    assert secret not in text, text


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("nats://alice:{secret}@127.0.0.1:{port}", PASSWORD),
        ("nats://{secret}@127.0.0.1:{port}", TOKEN),
        ("alice:{secret}@127.0.0.1:{port}", PASSWORD),
    ],
    ids=["user-password", "token", "bare-address"],
)
async def test_a_refused_connect_names_the_server_without_its_secret(
    caplog: pytest.LogCaptureFixture, url: str, secret: str
) -> None:
    caplog.set_level(logging.DEBUG)
    address = url.format(secret=secret, port=_refused_port())
    with pytest.raises(JetStreamConnectError) as info:
        await connect(address, timeout=1, max_reconnect_attempts=0)
    text = str(info.value)
    assert "127.0.0.1" in text  # still says which server
    assert "***" in text
    _assert_hidden(text, secret)
    _assert_hidden(repr(info.value), secret)
    for record in caplog.records:
        _assert_hidden(record.getMessage(), secret)


async def test_a_list_of_servers_is_redacted_too(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    port = _refused_port()
    servers = [f"nats://alice:{PASSWORD}@127.0.0.1:{port}", f"nats://{TOKEN}@127.0.0.1:{port}"]
    with pytest.raises(JetStreamConnectError) as info:
        await connect(servers, timeout=1, max_reconnect_attempts=0)
    for secret in (PASSWORD, TOKEN):
        _assert_hidden(str(info.value), secret)
        for record in caplog.records:
            _assert_hidden(record.getMessage(), secret)


async def test_a_wrong_password_is_not_echoed(
    own_server_allowed: None, caplog: pytest.LogCaptureFixture
) -> None:
    from aioclients.testing import NatsServer

    caplog.set_level(logging.DEBUG)
    wrong = "Wr0ngPassw0rdABC"
    config = f"authorization {{ user: alice, password: {PASSWORD} }}"
    async with NatsServer(config=config) as server:
        address = server.url.replace("nats://", f"nats://alice:{wrong}@")
        with pytest.raises(JetStreamConnectError) as info:
            await connect(address, timeout=1, max_reconnect_attempts=0)
    assert "uthorization" in str(info.value)  # the server's reason is kept
    _assert_hidden(str(info.value), wrong)
    for record in caplog.records:
        _assert_hidden(record.getMessage(), wrong)
