"""No password or token in what the Liftbridge package raises or logs."""

from __future__ import annotations

import asyncio
import logging

import grpc
import grpc.aio
import pytest

import aioclients.liftbridge as lb
from aioclients import InvalidArgumentError
from aioclients.liftbridge._io._grpc import map_rpc_error
from aioclients.liftbridge._io._h2 import Http2Channel

SECRETS = ("S3cret", "Tok3nValue", "hunter2")


def assert_clean(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} leaked in {text!r}"


@pytest.mark.parametrize(
    ("address", "shown"),
    [
        ("alice:S3cret@127.0.0.1:1", "alice:***@127.0.0.1:1"),
        ("Tok3nValue@127.0.0.1:1", "***@127.0.0.1:1"),
    ],
)
async def test_an_address_with_user_info_is_refused_without_printing_it(
    address: str, shown: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="aioclients")
    with pytest.raises(InvalidArgumentError) as info:
        await lb.connect([address], max_rpc_attempts=1, rpc_timeout=2)
    assert shown in str(info.value)
    assert "host:port" in str(info.value)
    assert_clean(str(info.value), caplog.text)


async def test_the_stream_channel_never_prints_the_user_info_of_its_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="aioclients")
    ch = Http2Channel("alice:S3cret@127.0.0.1:1", connect_timeout=5)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(ch.unary_unary("/t.T/Unary")(b"x"), 10)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "alice:***@127.0.0.1:1" in (info.value.details() or "")
        assert_clean(info.value.details() or "", str(info.value), caplog.text)
    finally:
        await ch.close()
    with pytest.raises(ValueError, match=r"\*\*\*") as bad:
        Http2Channel("alice:S3cret@127.0.0.1")
    assert_clean(str(bad.value))


async def test_a_goaway_quoting_a_url_with_credentials_is_logged_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="aioclients")

    def frame(kind: int, payload: bytes = b"") -> bytes:
        return len(payload).to_bytes(3, "big") + bytes((kind, 0)) + bytes(4) + payload

    async def goaway(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # SETTINGS, then GOAWAY (last stream 0) whose debug text quotes a URL.
        debug = b"lost nats://bob:hunter2@nats.internal:4222"
        writer.write(frame(4) + frame(7, bytes(8) + debug))
        try:
            await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()

    server = await asyncio.start_server(goaway, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ch = Http2Channel(f"127.0.0.1:{port}")
    try:
        with pytest.raises(grpc.aio.AioRpcError):
            await asyncio.wait_for(ch.unary_unary("/t.T/Unary")(b"x"), 5)
    finally:
        await ch.close()
        server.close()
        await server.wait_closed()
    assert "GOAWAY" in caplog.text
    assert "nats://bob:***@nats.internal:4222" in caplog.text
    assert_clean(caplog.text)


def test_server_details_quoting_a_url_with_credentials_are_redacted() -> None:
    exc = grpc.aio.AioRpcError(
        grpc.StatusCode.INTERNAL,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details="failed to reach nats://bob:hunter2@nats.internal:4222",
    )
    err = map_rpc_error(exc, what="create_stream 's'")
    assert "nats://bob:***@nats.internal:4222" in str(err)
    assert_clean(str(err))
