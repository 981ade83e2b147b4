"""The nsqd emulator's HTTP API: answers, status codes and JSON shapes of nsqd v1.3.

With ``AIOCLIENTS_TEST_NSQ_BIN_DIR`` naming a real nsqd binary (run by hand), each
test gets a fresh real nsqd instead (``tests/nsq/nsq_processes.py``).
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from aioclients.testing import NsqdEmulator
from tests.nsq.nsq_processes import nsqd_server


@pytest.fixture
async def emulator() -> AsyncIterator[NsqdEmulator]:
    async with nsqd_server() as nsqd:
        yield nsqd


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def call(
    session: aiohttp.ClientSession, method: str, url: str, data: bytes | None = None
) -> tuple[int, Any, aiohttp.ClientResponse]:
    async with session.request(method, url, data=data) as resp:
        body = await resp.read()
        if resp.content_type == "application/json":
            return resp.status, json.loads(body), resp
        return resp.status, body, resp


def channel_depth(nsqd: NsqdEmulator, topic: str) -> int:
    return int(nsqd.stats(topic=topic)["topics"][0]["depth"])


async def test_ping(emulator: NsqdEmulator, http: aiohttp.ClientSession) -> None:
    status, body, _ = await call(http, "GET", f"http://{emulator.http_address}/ping")
    assert (status, body) == (200, b"OK")


async def test_pub_answers_ok_and_queues(
    emulator: NsqdEmulator, http: aiohttp.ClientSession
) -> None:
    status, body, resp = await call(
        http, "POST", f"http://{emulator.http_address}/pub?topic=h", b"payload"
    )
    assert (status, body) == (200, b"OK")
    assert resp.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    topic = emulator.stats(topic="h")["topics"][0]
    assert (topic["message_count"], topic["depth"]) == (1, 1)


async def test_pub_with_defer(emulator: NsqdEmulator, http: aiohttp.ClientSession) -> None:
    emulator.create_topic("d", "c")
    status, _, _ = await call(
        http, "POST", f"http://{emulator.http_address}/pub?topic=d&defer=500", b"later"
    )
    assert status == 200
    channel = emulator.stats(topic="d")["topics"][0]["channels"][0]
    assert (channel["deferred_count"], channel["depth"]) == (1, 0)
    # a real nsqd scans a new channel's deferred messages after up to ~5 s: wait 10 s
    deadline = asyncio.get_running_loop().time() + 10
    while asyncio.get_running_loop().time() < deadline:
        channel = emulator.stats(topic="d")["topics"][0]["channels"][0]
        if channel["depth"] == 1:
            break
        await asyncio.sleep(0.01)
    assert (channel["deferred_count"], channel["depth"]) == (0, 1)


@pytest.mark.parametrize(
    ("query", "body", "status", "message"),
    [
        ("topic=t", b"", 400, "MSG_EMPTY"),
        ("", b"x", 400, "MISSING_ARG_TOPIC"),
        ("topic=bad!", b"x", 400, "INVALID_TOPIC"),
        ("topic=t&defer=x", b"x", 400, "INVALID_DEFER"),
        ("topic=t&defer=-5", b"x", 400, "INVALID_DEFER"),
        ("topic=t&defer=3600001", b"x", 400, "INVALID_DEFER"),
    ],
)
async def test_pub_errors(
    emulator: NsqdEmulator,
    http: aiohttp.ClientSession,
    query: str,
    body: bytes,
    status: int,
    message: str,
) -> None:
    got, doc, resp = await call(http, "POST", f"http://{emulator.http_address}/pub?{query}", body)
    assert (got, doc) == (status, {"message": message})
    assert resp.headers["Content-Type"] == "application/json; charset=utf-8"


async def test_pub_too_big() -> None:
    async with nsqd_server(max_msg_size=4) as nsqd, aiohttp.ClientSession() as http:
        status, doc, _ = await call(
            http, "POST", f"http://{nsqd.http_address}/pub?topic=t", b"12345"
        )
        assert (status, doc) == (413, {"message": "MSG_TOO_BIG"})


async def test_mpub_newline_mode(emulator: NsqdEmulator, http: aiohttp.ClientSession) -> None:
    status, body, _ = await call(
        http, "POST", f"http://{emulator.http_address}/mpub?topic=m", b"one\ntwo\n\nthree"
    )
    assert (status, body) == (200, b"OK")
    assert channel_depth(emulator, "m") == 3  # the empty line is dropped, as nsqd does


async def test_mpub_binary_mode(emulator: NsqdEmulator, http: aiohttp.ClientSession) -> None:
    payload = struct.pack(">I", 2) + struct.pack(">I", 3) + b"a\nb" + struct.pack(">I", 1) + b"c"
    status, body, _ = await call(
        http, "POST", f"http://{emulator.http_address}/mpub?topic=b&binary=true", payload
    )
    assert (status, body) == (200, b"OK")
    emulator.create_topic("b", "c")
    assert emulator.stats(topic="b")["topics"][0]["channels"][0]["depth"] == 2


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (struct.pack(">I", 0), "BAD_BODY"),
        (struct.pack(">I", 1) + struct.pack(">I", 0), "BAD_MESSAGE"),
        (b"\x00", "BAD_BODY"),
        (struct.pack(">I", 2) + struct.pack(">I", 1) + b"a", "BAD_MESSAGE"),
    ],
)
async def test_mpub_binary_errors(
    emulator: NsqdEmulator, http: aiohttp.ClientSession, payload: bytes, message: str
) -> None:
    status, doc, _ = await call(
        http, "POST", f"http://{emulator.http_address}/mpub?topic=b&binary=true", payload
    )
    assert (status, doc) == (413, {"message": message})


async def test_topic_create(emulator: NsqdEmulator, http: aiohttp.ClientSession) -> None:
    status, body, _ = await call(
        http, "POST", f"http://{emulator.http_address}/topic/create?topic=new"
    )
    assert (status, body) == (200, b"")
    assert emulator.topic_names() == ["new"]
    status, doc, _ = await call(
        http, "POST", f"http://{emulator.http_address}/topic/create?topic=b!"
    )
    assert (status, doc) == (400, {"message": "INVALID_TOPIC"})


async def test_stats_json_shape(emulator: NsqdEmulator, http: aiohttp.ClientSession) -> None:
    emulator.create_topic("s", "c")
    emulator.publish("s", b"abc", b"de")
    status, doc, _ = await call(http, "GET", f"http://{emulator.http_address}/stats?format=json")
    assert status == 200
    assert list(doc) == ["version", "health", "start_time", "topics", "memory", "producers"]
    assert (doc["version"], doc["health"]) == ("1.3.0", "OK")
    [topic] = doc["topics"]
    assert list(topic) == [
        "topic_name",
        "channels",
        "depth",
        "backend_depth",
        "message_count",
        "message_bytes",
        "paused",
        "e2e_processing_latency",
    ]
    assert (topic["message_count"], topic["message_bytes"], topic["depth"]) == (2, 5, 0)
    [channel] = topic["channels"]
    assert list(channel) == [
        "channel_name",
        "depth",
        "backend_depth",
        "in_flight_count",
        "deferred_count",
        "message_count",
        "requeue_count",
        "timeout_count",
        "client_count",
        "clients",
        "paused",
        "e2e_processing_latency",
    ]
    assert (channel["channel_name"], channel["depth"], channel["clients"]) == ("c", 2, [])


async def test_stats_without_memory_or_clients(
    emulator: NsqdEmulator, http: aiohttp.ClientSession
) -> None:
    emulator.create_topic("s", "c")
    url = f"http://{emulator.http_address}/stats?format=json&include_mem=false&include_clients=0"
    _, doc, _ = await call(http, "GET", url)
    assert "memory" not in doc
    assert doc["producers"] is None
    assert doc["topics"][0]["channels"][0]["clients"] is None


async def test_stats_of_a_topic_nsqd_does_not_have(
    emulator: NsqdEmulator, http: aiohttp.ClientSession
) -> None:
    """A missing topic gives ``"topics": null`` (nsqd returns before making the list),
    a missing channel of a present topic ``"topics": []``."""
    emulator.create_topic("s", "c")
    base = f"http://{emulator.http_address}/stats?format=json&include_mem=false"
    _, doc, _ = await call(http, "GET", f"{base}&topic=nope")
    assert (doc["topics"], doc["producers"]) == (None, None)
    assert emulator.stats(topic="nope")["topics"] is None
    _, doc, _ = await call(http, "GET", f"{base}&topic=s&channel=nope")
    assert doc["topics"] == []
    _, doc, _ = await call(http, "GET", f"{base}&topic=s")
    assert [t["topic_name"] for t in doc["topics"]] == ["s"]


async def test_stats_lists_consumers_and_producers(
    emulator: NsqdEmulator, http: aiohttp.ClientSession
) -> None:
    host, port = emulator.tcp_address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"  V2SUB s c\nRDY 7\nPUB s\n" + struct.pack(">I", 1) + b"x")
    for _ in range(2):  # SUB's OK, then PUB's OK: RDY was handled between them
        size, frame_type = struct.unpack(">II", await reader.readexactly(8))
        assert (frame_type, await reader.readexactly(size - 4)) == (0, b"OK")
    _, doc, _ = await call(http, "GET", f"http://{emulator.http_address}/stats?format=json")
    [client] = doc["topics"][0]["channels"][0]["clients"]
    assert (client["state"], client["version"], client["ready_count"]) == (3, "V2", 7)
    for key in ("client_id", "hostname", "remote_address", "ready_count", "in_flight_count"):
        assert key in client
    writer.close()
    await writer.wait_closed()


async def test_stats_pub_counts_of_a_producer(
    emulator: NsqdEmulator, http: aiohttp.ClientSession
) -> None:
    """A producer's ``pub_counts``: with ``topic=`` only that topic's count (absent when
    it published none there); without, nsqd v1.3.0 lists one topic only (a ``break``
    in clientV2.Stats), so the test checks no more than that."""
    host, port = emulator.tcp_address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"  V2")
    for topic in (b"pa", b"pb", b"pb"):
        writer.write(b"PUB " + topic + b"\n" + struct.pack(">I", 1) + b"x")
        size, frame_type = struct.unpack(">II", await reader.readexactly(8))
        assert (frame_type, await reader.readexactly(size - 4)) == (0, b"OK")
    emulator.create_topic("pc")
    base = f"http://{emulator.http_address}/stats?format=json&include_mem=false"

    async def pub_counts(query: str) -> list[Any]:
        _, doc, _ = await call(http, "GET", f"{base}&{query}")
        [producer] = doc["producers"]
        return producer.get("pub_counts", [])

    assert await pub_counts("topic=pa") == [{"topic": "pa", "count": 1}]
    assert await pub_counts("topic=pb") == [{"topic": "pb", "count": 2}]
    assert await pub_counts("topic=pc") == []
    [entry] = await pub_counts("")
    assert entry in ({"topic": "pa", "count": 1}, {"topic": "pb", "count": 2})
    writer.close()
    await writer.wait_closed()


async def test_unknown_path_and_wrong_method(
    emulator: NsqdEmulator, http: aiohttp.ClientSession
) -> None:
    status, doc, _ = await call(http, "GET", f"http://{emulator.http_address}/nope")
    assert (status, doc) == (404, {"message": "NOT_FOUND"})
    status, doc, _ = await call(http, "GET", f"http://{emulator.http_address}/pub?topic=t")
    assert (status, doc) == (405, {"message": "METHOD_NOT_ALLOWED"})


async def test_channel_delete(emulator: NsqdEmulator, http: aiohttp.ClientSession) -> None:
    emulator.create_topic("cd", "gone", "kept")
    base = f"http://{emulator.http_address}"
    status, body, _ = await call(http, "POST", f"{base}/channel/delete?topic=cd&channel=gone")
    assert (status, body) == (200, b"")
    assert emulator.channel_names("cd") == ["kept"]
    for query, status_doc in [
        ("topic=cd&channel=gone", (404, {"message": "CHANNEL_NOT_FOUND"})),
        ("topic=nope&channel=c", (404, {"message": "TOPIC_NOT_FOUND"})),
        ("topic=cd", (400, {"message": "MISSING_ARG_CHANNEL"})),
        ("channel=c", (400, {"message": "MISSING_ARG_TOPIC"})),
        ("topic=cd&channel=bad!", (400, {"message": "INVALID_ARG_CHANNEL"})),
    ]:
        status, doc, _ = await call(http, "POST", f"{base}/channel/delete?{query}")
        assert (status, doc) == status_doc, query
