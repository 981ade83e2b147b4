"""The nsqlookupd emulator: its TCP registration protocol, its HTTP API, and nsqd
registering with it (over TCP and directly).

With ``AIOCLIENTS_TEST_NSQ_BIN_DIR`` naming a real nsqlookupd binary (run by hand),
the ``lookupd`` fixture is a fresh real nsqlookupd instead (the nsqd emulator then
registers with the real one); direct registration skips there.
"""

from __future__ import annotations

import asyncio
import json
import struct
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from aioclients.testing import NsqdEmulator, NsqlookupdEmulator
from tests.nsq.nsq_processes import nsqlookupd_server

PEER_KEYS = ["remote_address", "hostname", "broadcast_address", "tcp_port", "http_port", "version"]


@pytest.fixture
async def lookupd() -> AsyncIterator[NsqlookupdEmulator]:
    async with nsqlookupd_server() as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with session.get(url) as resp:
        text = await resp.text()
        if resp.content_type == "application/json":
            return resp.status, json.loads(text)
        return resp.status, text


async def eventually(
    check: Callable[[], Awaitable[bool]], *, timeout: float = 5.0, what: str = "condition"
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


class LookupConn:
    """A raw client of the lookupd TCP protocol (what nsqd sends)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, address: str) -> LookupConn:
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"  V1")
        return cls(reader, writer)

    async def call(self, line: bytes, body: bytes | None = None) -> bytes:
        data = line + b"\n"
        if body is not None:
            data += struct.pack(">I", len(body)) + body
        self.writer.write(data)
        (size,) = struct.unpack(">I", await asyncio.wait_for(self.reader.readexactly(4), 5))
        return await asyncio.wait_for(self.reader.readexactly(size), 5)

    async def identify(self, **overrides: object) -> bytes:
        info = {
            "broadcast_address": "10.1.2.3",
            "hostname": "nsqd-host",
            "tcp_port": 4150,
            "http_port": 4151,
            "version": "1.3.0",
            **overrides,
        }
        return await self.call(b"IDENTIFY", json.dumps(info).encode())

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass


async def test_tcp_registration_and_lookup_shape(
    lookupd: NsqlookupdEmulator, http: aiohttp.ClientSession
) -> None:
    conn = await LookupConn.connect(lookupd.tcp_address)
    answer = json.loads(await conn.identify())
    assert answer["version"] == "1.3.0"
    assert answer["tcp_port"] == lookupd.tcp_port
    assert answer["http_port"] == lookupd.http_port
    assert await conn.call(b"REGISTER clicks") == b"OK"
    assert await conn.call(b"REGISTER clicks archive") == b"OK"
    assert await conn.call(b"PING") == b"OK"
    status, doc = await get(http, f"http://{lookupd.http_address}/lookup?topic=clicks")
    assert status == 200
    assert list(doc) == ["channels", "producers"]
    assert doc["channels"] == ["archive"]
    [producer] = doc["producers"]
    assert list(producer) == PEER_KEYS
    assert producer["broadcast_address"] == "10.1.2.3"
    assert (producer["tcp_port"], producer["http_port"]) == (4150, 4151)
    assert producer["hostname"] == "nsqd-host"
    assert producer["version"] == "1.3.0"
    assert producer["remote_address"].startswith("127.0.0.1:")
    await conn.close()


async def test_unknown_topic_is_404(
    lookupd: NsqlookupdEmulator, http: aiohttp.ClientSession
) -> None:
    status, doc = await get(http, f"http://{lookupd.http_address}/lookup?topic=nope")
    assert (status, doc) == (404, {"message": "TOPIC_NOT_FOUND"})
    status, doc = await get(http, f"http://{lookupd.http_address}/lookup")
    assert (status, doc) == (400, {"message": "MISSING_ARG_TOPIC"})


async def test_producer_leaves_lookups_when_its_connection_closes(
    lookupd: NsqlookupdEmulator, http: aiohttp.ClientSession
) -> None:
    conn = await LookupConn.connect(lookupd.tcp_address)
    await conn.identify()
    await conn.call(b"REGISTER gone")
    await conn.close()
    url = f"http://{lookupd.http_address}/lookup?topic=gone"

    async def empty() -> bool:
        status, doc = await get(http, url)
        return status == 200 and doc["producers"] == []

    await eventually(empty, what="the producer to leave /lookup")


@pytest.mark.parametrize(
    ("line", "answer"),
    [
        (b"REGISTER t", b"E_INVALID client must IDENTIFY"),
        (b"FOO", b"E_INVALID invalid command FOO"),
    ],
)
async def test_tcp_errors_close(lookupd: NsqlookupdEmulator, line: bytes, answer: bytes) -> None:
    conn = await LookupConn.connect(lookupd.tcp_address)
    assert await conn.call(line) == answer
    assert await asyncio.wait_for(conn.reader.read(), 5) == b""
    await conn.close()


async def test_identify_requires_every_field(lookupd: NsqlookupdEmulator) -> None:
    conn = await LookupConn.connect(lookupd.tcp_address)
    assert await conn.identify(tcp_port=0) == b"E_BAD_BODY IDENTIFY missing fields"
    await conn.close()


async def test_bad_topic_name(lookupd: NsqlookupdEmulator) -> None:
    conn = await LookupConn.connect(lookupd.tcp_address)
    await conn.identify()
    assert (
        await conn.call(b"REGISTER bad!") == b"E_BAD_TOPIC REGISTER topic name 'bad!' is not valid"
    )
    await conn.close()


async def test_ping_topics_nodes_and_info(
    lookupd: NsqlookupdEmulator, http: aiohttp.ClientSession
) -> None:
    base = f"http://{lookupd.http_address}"
    assert await get(http, f"{base}/ping") == (200, "OK")
    assert await get(http, f"{base}/info") == (200, {"version": "1.3.0"})
    conn = await LookupConn.connect(lookupd.tcp_address)
    await conn.identify()
    await conn.call(b"REGISTER b")
    await conn.call(b"REGISTER a ch")
    # nsqlookupd lists topics in Go map order: compare as sets
    status, doc = await get(http, f"{base}/topics")
    assert (status, sorted(doc["topics"])) == (200, ["a", "b"])
    assert await get(http, f"{base}/channels?topic=a") == (200, {"channels": ["ch"]})
    status, doc = await get(http, f"{base}/nodes")
    assert status == 200
    [node] = doc["producers"]
    assert sorted(node["topics"]) == ["a", "b"]
    assert node["tombstones"] == [False, False]
    await conn.close()


async def test_nsqd_emulator_registers_over_tcp_and_reappears_after_restart(
    lookupd: NsqlookupdEmulator, http: aiohttp.ClientSession
) -> None:
    url = f"http://{lookupd.http_address}/lookup?topic=orders"
    async with NsqdEmulator(lookupd_tcp_addresses=[lookupd.tcp_address]) as nsqd:
        nsqd.create_topic("orders", "billing")

        async def producers() -> list[dict[str, Any]]:
            status, doc = await get(http, url)
            return doc["producers"] if status == 200 else []

        async def present() -> bool:
            found = await producers()
            return [(p["tcp_port"], p["http_port"]) for p in found] == [
                (nsqd.tcp_port, nsqd.http_port)
            ]

        async def absent() -> bool:
            return await producers() == []

        await eventually(present, what="nsqd to register")
        assert (await get(http, url))[1]["channels"] == ["billing"]
        await nsqd.stop()
        await eventually(absent, what="the stopped nsqd to leave /lookup")
        await nsqd.start()
        await eventually(present, what="the restarted nsqd to register again")


async def test_direct_registration_follows_the_nsqd(
    lookupd: NsqlookupdEmulator, http: aiohttp.ClientSession
) -> None:
    url = f"http://{lookupd.http_address}/lookup?topic=direct"
    async with NsqdEmulator() as nsqd:
        lookupd.register(nsqd)
        assert (await get(http, url))[0] == 404
        nsqd.create_topic("direct", "c1")
        status, doc = await get(http, url)
        assert status == 200
        assert doc["channels"] == ["c1"]
        assert [(p["broadcast_address"], p["tcp_port"]) for p in doc["producers"]] == [
            ("127.0.0.1", nsqd.tcp_port)
        ]
        await nsqd.stop()
        assert (await get(http, url))[1]["producers"] == []
        await nsqd.start()
        assert len((await get(http, url))[1]["producers"]) == 1
        lookupd.unregister(nsqd)
        assert (await get(http, url))[1]["producers"] == []


async def test_tombstone_hides_a_producer(
    lookupd: NsqlookupdEmulator, http: aiohttp.ClientSession
) -> None:
    conn = await LookupConn.connect(lookupd.tcp_address)
    await conn.identify()
    await conn.call(b"REGISTER t")
    base = f"http://{lookupd.http_address}"
    async with http.post(f"{base}/topic/tombstone?topic=t&node=10.1.2.3:4151") as resp:
        assert resp.status == 200
    assert (await get(http, f"{base}/lookup?topic=t"))[1]["producers"] == []
    await conn.close()


async def test_http_channel_create_and_delete(
    lookupd: NsqlookupdEmulator, http: aiohttp.ClientSession
) -> None:
    base = f"http://{lookupd.http_address}"

    async def post(path: str) -> tuple[int, Any]:
        async with http.post(f"{base}{path}") as resp:
            body = await resp.read()
            if resp.content_type == "application/json":
                return resp.status, json.loads(body)
            return resp.status, body

    assert await post("/channel/create?topic=t&channel=a") == (200, b"")
    assert await post("/channel/create?topic=t&channel=b") == (200, b"")
    assert await post("/channel/delete?topic=t&channel=a") == (200, b"")
    assert await get(http, f"{base}/channels?topic=t") == (200, {"channels": ["b"]})
    assert (await get(http, f"{base}/lookup?topic=t"))[1]["channels"] == ["b"]
    not_found = (404, {"message": "CHANNEL_NOT_FOUND"})
    assert await post("/channel/delete?topic=t&channel=a") == not_found
    assert await post("/channel/delete?topic=t") == (400, {"message": "MISSING_ARG_CHANNEL"})
    assert await post("/channel/delete?channel=b") == (400, {"message": "MISSING_ARG_TOPIC"})
    assert await post("/channel/delete?topic=t!&channel=b") == (
        400,
        {"message": "INVALID_ARG_TOPIC"},
    )
    assert await post("/channel/delete?topic=t&channel=b!") == (
        400,
        {"message": "INVALID_ARG_CHANNEL"},
    )


async def test_lookupd_fixture(nsqlookupd: NsqlookupdEmulator, nsqd: NsqdEmulator) -> None:
    # Runs against external servers too: the topic is created over nsqd's HTTP API and
    # a real nsqd registers it with its nsqlookupd a moment later, so poll (bounded).
    nsqlookupd.register(nsqd)
    topic = f"fixture_{uuid.uuid4().hex[:8]}"
    tcp_port = int(nsqd.tcp_address.rsplit(":", 1)[1])
    async with aiohttp.ClientSession() as session:
        async with session.post(f"http://{nsqd.http_address}/topic/create?topic={topic}") as resp:
            assert resp.status == 200
        url = f"http://{nsqlookupd.http_address}/lookup?topic={topic}"
        deadline = asyncio.get_running_loop().time() + 5
        while True:
            status, doc = await get(session, url)
            if status == 200 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
    assert status == 200
    assert [p["tcp_port"] for p in doc["producers"]] == [tcp_port]
