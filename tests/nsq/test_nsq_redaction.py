"""No auth secret and no credential from a lookupd or nsqd HTTP URL in an error or a log."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from aioclients import InvalidArgumentError
from aioclients.nsq import HTTPProducer, NSQConnectError, NSQError, Producer, Reader
from tests.nsq.fake_nsqd import FakeNsqd, frame

SECRET = "s3cr3t-VALUE"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


def echoing_auth_server(fake: FakeNsqd, command: bytes, body: bytes | None) -> bytes | None:
    """An nsqd whose auth server quotes the secret it refuses."""
    if command == b"AUTH":
        assert body is not None
        return frame(1, b"E_AUTH_FAILED AUTH failed: unknown secret " + body)
    return fake.default_answer(command, body)


async def test_a_refused_auth_secret_is_not_in_the_error_or_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="aioclients")
    answer = {"max_rdy_count": 100, "auth_required": True}
    async with FakeNsqd(identify_answer=answer, on_command=echoing_auth_server) as fake:
        reader = Reader("t", "c", nsqd_tcp_addresses=[fake.address], auth_secret=SECRET)
        with pytest.raises(NSQError) as err:
            await asyncio.wait_for(reader.start(), 5)
        assert err.value.code == "E_AUTH_FAILED"
        assert "***" in str(err.value)
        assert SECRET not in str(err.value)
        producer = Producer(fake.address, auth_secret=SECRET.encode())
        with pytest.raises(NSQError) as perr:
            await asyncio.wait_for(producer.publish("t", b"x"), 5)
        await producer.close()
        assert SECRET not in str(perr.value)
    assert fake.bodies.count(SECRET.encode()) == 2  # it was sent, only to nsqd
    assert SECRET not in logged(caplog)


async def test_lookupd_credentials_stay_out_of_start_errors_and_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="aioclients")
    url = f"http://admin:{SECRET}@127.0.0.1:{free_port()}"
    reader = Reader("t", "c", lookupd_http_addresses=[url], connect_timeout=1)
    with pytest.raises(NSQConnectError) as err:
        await asyncio.wait_for(reader.start(), 10)
    assert "admin:***@127.0.0.1" in str(err.value)
    assert SECRET not in str(err.value)
    assert SECRET not in logged(caplog)


async def test_http_producer_credentials_stay_out_of_errors() -> None:
    url = f"http://admin:{SECRET}@127.0.0.1:{free_port()}"
    async with HTTPProducer(url, timeout=2) as producer:
        with pytest.raises(NSQConnectError) as err:
            await producer.publish("t", b"x")
    assert SECRET not in str(err.value)
    assert "admin:***@" in str(err.value)


def test_bad_addresses_do_not_echo_credentials() -> None:
    with pytest.raises(InvalidArgumentError) as err:
        Reader("t", "c", lookupd_http_addresses=[f"admin:{SECRET}@nohostport"])
    assert SECRET not in str(err.value)
    with pytest.raises(InvalidArgumentError) as err:
        Producer(f"tok{SECRET}@host")
    assert SECRET not in str(err.value)
