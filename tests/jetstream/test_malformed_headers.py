"""A responder that sends header bytes that are not UTF-8: the reply fails typed (or is
decoded leniently), and the connection stays up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg as NatsMsg
from support import Server, until_visible

from aioclients import RemoteProtocolError
from aioclients.jetstream import JetStream, JetStreamError


@pytest.fixture
async def responder(nats_server: Server) -> AsyncIterator[tuple[NATS, list[bytes]]]:
    """A plain connection that answers Direct Get requests on its subject with raw header
    blocks, taken in order from the list it yields (the last one repeats)."""
    nc = await nats.connect(nats_server.url)
    blocks: list[bytes] = []
    try:
        yield nc, blocks
    finally:
        await nc.close()


async def _answer_with(nc: NATS, subject: str, blocks: list[bytes]) -> None:
    async def answer(msg: NatsMsg) -> None:
        if msg.data == b"__probe__":
            await msg.respond(b"ok")
            return
        block = blocks.pop(0) if len(blocks) > 1 else blocks[0]
        frame = b"HPUB %s %d %d\r\n%s\r\n" % (
            msg.reply.encode(),
            len(block),
            len(block),
            block,
        )
        await nc._send_command(frame)
        await nc._flush_pending()

    await nc.subscribe(subject, cb=answer)
    await nc.flush()


@pytest.mark.parametrize(
    "block",
    [
        b"NATS/1.0 4\xff4 Not \xfe Found\r\n\r\n",  # status code not digits, nor UTF-8
        b"NATS/1.0 404 Not \xff\xfe Found\r\n\r\n",  # description not UTF-8
        b"NATS/1.0 408 \xc3\r\nNats-Stream: \xff\r\n\r\n",
    ],
    ids=["code", "description", "description-and-value"],
)
async def test_direct_get_with_a_status_line_that_is_not_utf8_fails_typed_and_keeps_the_connection(
    js: JetStream, unique_name: str, responder: tuple[NATS, list[bytes]], block: bytes
) -> None:
    nc, blocks = responder
    # A stream without allow_direct: nobody but our responder answers its Direct Gets.
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    subject = f"$JS.API.DIRECT.GET.{unique_name}"
    blocks.append(block)
    await _answer_with(nc, subject, blocks)
    await until_visible(js.nc, subject)
    with pytest.raises((JetStreamError, RemoteProtocolError)) as info:
        await asyncio.wait_for(stream.direct_get(1), 5)
    assert "Direct Get" in str(info.value) or "\ufffd" in str(info.value)
    # the read loop survived: same connection, no reconnect, still answering
    assert js.nc.is_connected
    assert js.nc.stats["reconnects"] == 0
    assert (await js.account_info()) is not None


async def test_a_kv_watch_over_a_message_it_cannot_read_fails_naming_it(
    js: JetStream, nats_server: Server, unique_name: str
) -> None:
    # A publisher put a header block into the bucket that is not a NATS/1.0 block (the
    # server stores headers as they come). The watch's entry maker cannot read it: the
    # watch ends with the reason instead of waiting for ever behind it.
    kv = await js.create_key_value(unique_name)
    await kv.put("good", b"1")
    nc = await nats.connect(nats_server.url)
    try:
        block = b"GARBAGE\r\nNats-Marker-Reason: x\r\n\r\n"
        frame = b"HPUB $KV.%s.bad %d %d\r\n%sv\r\n" % (
            unique_name.encode(),
            len(block),
            len(block) + 1,
            block,
        )
        await nc._send_command(frame)
        await nc.flush()
    finally:
        await nc.close()

    async def initial() -> list[str]:
        keys = []
        async with kv.watch() as watch:
            async for entry in watch:
                if entry is None:
                    break
                keys.append(entry.key)
        return keys

    with pytest.raises(RemoteProtocolError, match="stream sequence 2") as info:
        await asyncio.wait_for(initial(), 20)
    assert "NATS/1.0" in str(info.value)
    assert js.nc.is_connected
