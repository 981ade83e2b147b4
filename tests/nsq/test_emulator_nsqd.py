"""Byte-level transcripts against the nsqd emulator's TCP protocol.

Each test drives the emulator with a raw asyncio socket and asserts the exact
frames nsqd v1.3 sends: sizes, types, JSON answers, error texts, and whether
an error closes the connection.

With ``AIOCLIENTS_TEST_NSQ_BIN_DIR`` naming a real nsqd binary (run by hand), each
test gets a fresh real nsqd instead (``tests/nsq/nsq_processes.py``), so the same
transcripts check the emulator against nsqd; tests needing the emulator's hooks (TLS
contexts, AUTH, injected failures) skip there and say so.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import struct
import time
import zlib
from collections.abc import AsyncIterator

import pytest

from aioclients.testing import NsqdEmulator
from tests.nsq.nsq_processes import is_real, nsq_bin_dir, nsqd_server, tls_server_context

# REQ / DPUB / msg_timeout timers: a real nsqd scans a NEW channel's timers only after
# its queue-scan list refresh (every 5 s), so they may fire ~5 s late there.
TIMER_BOUND = 10.0

IDENTIFY_KEYS = [
    "max_rdy_count",
    "version",
    "max_msg_timeout",
    "msg_timeout",
    "tls_v1",
    "deflate",
    "deflate_level",
    "max_deflate_level",
    "snappy",
    "sample_rate",
    "auth_required",
    "output_buffer_size",
    "output_buffer_timeout",
]


class Raw:
    """A raw nsqd TCP client: write commands, read frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.inflater: zlib._Decompress | None = None
        self.deflater: zlib._Compress | None = None
        self._plain = b""

    @classmethod
    async def connect(cls, address: str, *, magic: bytes = b"  V2") -> Raw:
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        raw = cls(reader, writer)
        if magic:
            writer.write(magic)
        return raw

    def send(self, data: bytes) -> None:
        if self.deflater is not None:
            data = self.deflater.compress(data) + self.deflater.flush(zlib.Z_SYNC_FLUSH)
        self.writer.write(data)

    def command(self, line: bytes, body: bytes | None = None) -> None:
        data = line + b"\n"
        if body is not None:
            data += struct.pack(">I", len(body)) + body
        self.send(data)

    async def _readexactly(self, n: int) -> bytes:
        if self.inflater is None:
            return await self.reader.readexactly(n)
        while len(self._plain) < n:
            chunk = await self.reader.read(65536)
            if not chunk:
                raise asyncio.IncompleteReadError(self._plain, n)
            self._plain += self.inflater.decompress(chunk)
        out, self._plain = self._plain[:n], self._plain[n:]
        return out

    async def frame(self, timeout: float = 5.0) -> tuple[int, bytes]:
        async def read() -> tuple[int, bytes]:
            size, frame_type = struct.unpack(">II", await self._readexactly(8))
            return frame_type, await self._readexactly(size - 4)

        return await asyncio.wait_for(read(), timeout)

    async def frame_skipping_heartbeats(self, timeout: float = 5.0) -> tuple[int, bytes]:
        while True:
            frame_type, data = await self.frame(timeout)
            if (frame_type, data) != (0, b"_heartbeat_"):
                return frame_type, data

    async def response(self) -> bytes:
        frame_type, data = await self.frame_skipping_heartbeats()
        assert frame_type == 0, data
        return data

    async def error(self) -> bytes:
        frame_type, data = await self.frame_skipping_heartbeats()
        assert frame_type == 1, data
        return data

    async def message(self, timeout: float = 5.0) -> tuple[int, int, bytes, bytes]:
        frame_type, data = await self.frame_skipping_heartbeats(timeout)
        assert frame_type == 2, data
        ts, attempts = struct.unpack(">qH", data[:10])
        return ts, attempts, data[10:26], data[26:]

    async def closed(self, timeout: float = 5.0) -> bool:
        """Whether the server closes the connection (reading past any frames)."""
        try:
            while await asyncio.wait_for(self.reader.read(65536), timeout):
                pass
        except (ConnectionResetError, asyncio.TimeoutError):
            return False
        return True

    async def identify(self, **fields: object) -> bytes:
        self.command(b"IDENTIFY", json.dumps(fields).encode())
        return await self.response()

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, ssl.SSLError):
            pass


@pytest.fixture
async def emulator() -> AsyncIterator[NsqdEmulator]:
    async with nsqd_server() as nsqd:
        yield nsqd


@pytest.fixture
async def conn(emulator: NsqdEmulator) -> AsyncIterator[Raw]:
    raw = await Raw.connect(emulator.tcp_address)
    yield raw
    await raw.close()


async def subscribed(
    nsqd: NsqdEmulator, topic: str = "t", channel: str = "c", **ident: object
) -> Raw:
    raw = await Raw.connect(nsqd.tcp_address)
    await raw.identify(feature_negotiation=True, **ident)
    raw.command(f"SUB {topic} {channel}".encode())
    assert await raw.response() == b"OK"
    return raw


async def barrier(raw: Raw) -> None:
    """A round trip on the connection: everything the server did before is on the wire."""
    raw.command(b"PUB barrier", b"x")
    assert await raw.response() == b"OK"


# -- handshake ---------------------------------------------------------------------------


async def test_identify_with_feature_negotiation_answers_the_json_settings(conn: Raw) -> None:
    answer = json.loads(await conn.identify(feature_negotiation=True, client_id="a"))
    assert list(answer) == IDENTIFY_KEYS
    assert answer == {
        "max_rdy_count": 2500,
        "version": "1.3.0",
        "max_msg_timeout": 900000,
        "msg_timeout": 60000,
        "tls_v1": False,
        "deflate": False,
        "deflate_level": 6,
        "max_deflate_level": 6,
        "snappy": False,
        "sample_rate": 0,
        "auth_required": False,
        "output_buffer_size": 16384,
        "output_buffer_timeout": 250,
    }


async def test_identify_answer_is_one_compact_response_frame(emulator: NsqdEmulator) -> None:
    raw = await Raw.connect(emulator.tcp_address)
    body = b'{"feature_negotiation":true}'
    raw.writer.write(b"IDENTIFY\n" + struct.pack(">I", len(body)) + body)
    header = await raw.reader.readexactly(8)
    size, frame_type = struct.unpack(">II", header)
    payload = await raw.reader.readexactly(size - 4)
    assert frame_type == 0
    assert payload.startswith(b'{"max_rdy_count":2500,"version":"1.3.0",')
    assert b" " not in payload
    await raw.close()


async def test_identify_without_feature_negotiation_answers_ok(conn: Raw) -> None:
    assert await conn.identify(client_id="a") == b"OK"


async def test_identify_reports_requested_msg_timeout_and_server_limits() -> None:
    async with nsqd_server(max_rdy_count=200, max_msg_timeout=120.0) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        answer = json.loads(await raw.identify(feature_negotiation=True, msg_timeout=5000))
        assert (answer["max_rdy_count"], answer["max_msg_timeout"]) == (200, 120000)
        assert answer["msg_timeout"] == 5000
        await raw.close()


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"heartbeat_interval": 500}, b"E_BAD_BODY IDENTIFY heartbeat interval (500) is invalid"),
        # nsqd's minimum is 1000 ms; the emulator's default is the same
        ({"heartbeat_interval": 999}, b"E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid"),
        ({"msg_timeout": 10}, b"E_BAD_BODY IDENTIFY msg timeout (10) is invalid"),
        ({"sample_rate": 100}, b"E_BAD_BODY IDENTIFY sample rate (100) is invalid"),
        ({"heartbeat_interval": "x"}, b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ],
)
async def test_identify_rejects_out_of_range_settings_and_closes(
    conn: Raw, fields: dict[str, object], error: bytes
) -> None:
    conn.command(b"IDENTIFY", json.dumps(fields).encode())
    assert await conn.error() == error
    assert await conn.closed()


async def test_one_second_heartbeat_interval_is_accepted(conn: Raw) -> None:
    assert await conn.identify(heartbeat_interval=1000) == b"OK"


async def test_bad_magic_gets_e_bad_protocol_and_close(emulator: NsqdEmulator) -> None:
    raw = await Raw.connect(emulator.tcp_address, magic=b"  V1")
    assert await raw.frame() == (1, b"E_BAD_PROTOCOL")
    assert await raw.closed()
    await raw.close()


# -- delivery ----------------------------------------------------------------------------


async def test_message_frame_layout(emulator: NsqdEmulator) -> None:
    raw = await subscribed(emulator)
    before = time.time_ns()
    emulator.publish("t", b"hello")
    raw.command(b"RDY 1")
    frame_type, data = await raw.frame_skipping_heartbeats()
    assert frame_type == 2
    ts, attempts = struct.unpack(">qH", data[:10])
    msg_id, body = data[10:26], data[26:]
    assert before <= ts <= time.time_ns()
    assert attempts == 1
    assert len(msg_id) == 16
    assert all(c in b"0123456789abcdef" for c in msg_id)
    assert body == b"hello"
    await raw.close()


async def test_rdy_bounds_what_is_in_flight(emulator: NsqdEmulator) -> None:
    raw = await subscribed(emulator)
    emulator.publish("t", *[b"m%d" % i for i in range(5)])
    raw.command(b"RDY 2")
    first = await raw.message()
    second = await raw.message()
    await barrier(raw)
    stats = emulator.stats()["topics"][1]["channels"][0]
    assert (stats["in_flight_count"], stats["depth"]) == (2, 3)
    raw.command(b"FIN " + first[2])
    third = await raw.message()
    assert [first[3], second[3], third[3]] == [b"m0", b"m1", b"m2"]
    await barrier(raw)
    stats = emulator.stats()["topics"][1]["channels"][0]
    assert (stats["in_flight_count"], stats["depth"]) == (2, 2)
    await raw.close()


async def test_rdy_zero_stops_delivery(emulator: NsqdEmulator) -> None:
    raw = await subscribed(emulator)
    raw.command(b"RDY 0")
    emulator.publish("t", b"a")
    await barrier(raw)
    assert emulator.stats(topic="t")["topics"][0]["channels"][0]["depth"] == 1
    raw.command(b"RDY 1")
    assert (await raw.message())[3] == b"a"
    await raw.close()


async def test_req_redelivers_with_attempts_plus_one(emulator: NsqdEmulator) -> None:
    raw = await subscribed(emulator)
    emulator.publish("t", b"again")
    raw.command(b"RDY 1")
    _, attempts, msg_id, _ = await raw.message()
    assert attempts == 1
    raw.command(b"REQ " + msg_id + b" 0")
    _, attempts, again_id, body = await raw.message()
    assert (attempts, again_id, body) == (2, msg_id, b"again")
    channel = emulator.stats(topic="t")["topics"][0]["channels"][0]
    assert channel["requeue_count"] == 1
    await raw.close()


async def test_req_with_delay_defers_the_message(emulator: NsqdEmulator) -> None:
    raw = await subscribed(emulator)
    emulator.publish("t", b"later")
    raw.command(b"RDY 1")
    _, _, msg_id, _ = await raw.message()
    loop = asyncio.get_running_loop()
    start = loop.time()
    raw.command(b"REQ " + msg_id + b" 200")
    await barrier(raw)
    assert emulator.stats(topic="t")["topics"][0]["channels"][0]["deferred_count"] == 1
    _, attempts, _, _ = await raw.message(TIMER_BOUND)
    assert attempts == 2
    assert loop.time() - start >= 0.19
    await raw.close()


async def test_msg_timeout_requeues_with_attempts_incremented() -> None:
    async with nsqd_server(msg_timeout=0.2) as nsqd:
        raw = await subscribed(nsqd)
        nsqd.publish("t", b"slow")
        raw.command(b"RDY 1")
        loop = asyncio.get_running_loop()
        _, attempts, msg_id, _ = await raw.message()
        start = loop.time()
        _, attempts2, msg_id2, _ = await raw.message(TIMER_BOUND)
        assert loop.time() - start >= 0.19
        assert (attempts, attempts2, msg_id2) == (1, 2, msg_id)
        channel = nsqd.stats(topic="t")["topics"][0]["channels"][0]
        assert (channel["timeout_count"], channel["in_flight_count"]) == (1, 1)
        await raw.close()


async def test_touch_postpones_the_timeout() -> None:
    async with nsqd_server(msg_timeout=1.0) as nsqd:
        raw = await subscribed(nsqd)
        nsqd.publish("t", b"slow")
        raw.command(b"RDY 1")
        loop = asyncio.get_running_loop()
        _, _, msg_id, _ = await raw.message()
        await asyncio.sleep(0.4)  # well inside the timeout: TOUCH comes in time
        touched = loop.time()
        raw.command(b"TOUCH " + msg_id)
        _, attempts, _, _ = await raw.message(TIMER_BOUND)
        assert attempts == 2
        assert loop.time() - touched >= 0.99
        await raw.close()


async def test_dpub_defers_delivery(emulator: NsqdEmulator) -> None:
    raw = await subscribed(emulator)
    raw.command(b"RDY 1")
    loop = asyncio.get_running_loop()
    start = loop.time()
    raw.command(b"DPUB t 150", b"deferred")
    assert await raw.response() == b"OK"
    _, attempts, _, body = await raw.message(TIMER_BOUND)
    assert (attempts, body) == (1, b"deferred")
    assert loop.time() - start >= 0.14
    await raw.close()


async def test_every_channel_gets_every_message(emulator: NsqdEmulator) -> None:
    a = await subscribed(emulator, channel="a")
    b = await subscribed(emulator, channel="b")
    for raw in (a, b):
        raw.command(b"RDY 10")
    emulator.publish("t", b"1", b"2")
    got_a = [(await a.message())[3] for _ in range(2)]
    got_b = [(await b.message())[3] for _ in range(2)]
    assert got_a == got_b == [b"1", b"2"]
    await a.close()
    await b.close()


async def test_clients_of_one_channel_share_its_messages(emulator: NsqdEmulator) -> None:
    a = await subscribed(emulator)
    b = await subscribed(emulator)
    for raw in (a, b):
        raw.command(b"RDY 2")
    await barrier(a)
    await barrier(b)
    emulator.publish("t", b"1", b"2", b"3", b"4")
    got = [(await a.message())[3] for _ in range(2)] + [(await b.message())[3] for _ in range(2)]
    assert sorted(got) == [b"1", b"2", b"3", b"4"]
    await a.close()
    await b.close()


async def test_messages_published_before_any_channel_wait_for_the_first(
    emulator: NsqdEmulator,
) -> None:
    emulator.publish("t", b"early")
    assert emulator.stats(topic="t")["topics"][0]["depth"] == 1
    raw = await subscribed(emulator)
    raw.command(b"RDY 1")
    assert (await raw.message())[3] == b"early"
    await raw.close()


async def test_ephemeral_channel_disappears_with_its_last_client(emulator: NsqdEmulator) -> None:
    raw = await subscribed(emulator, channel="tmp#ephemeral")
    assert emulator.channel_names("t") == ["tmp#ephemeral"]
    await raw.close()
    for _ in range(100):
        if not emulator.channel_names("t"):
            break
        await asyncio.sleep(0.01)
    assert emulator.channel_names("t") == []


async def test_disconnected_clients_messages_stay_in_flight_until_timeout() -> None:
    async with nsqd_server(msg_timeout=0.2) as nsqd:
        first = await subscribed(nsqd)
        nsqd.publish("t", b"orphan")
        first.command(b"RDY 1")
        _, _, msg_id, _ = await first.message()
        await first.close()
        second = await subscribed(nsqd)
        second.command(b"RDY 1")
        _, attempts, again, _ = await second.message(TIMER_BOUND)
        assert (attempts, again) == (2, msg_id)
        await second.close()


# -- PUB / MPUB / DPUB -------------------------------------------------------------------


async def test_pub_mpub_answer_ok_and_queue(conn: Raw, emulator: NsqdEmulator) -> None:
    conn.command(b"PUB t", b"one")
    assert await conn.response() == b"OK"
    mpub = struct.pack(">I", 2) + struct.pack(">I", 3) + b"two" + struct.pack(">I", 5) + b"three"
    conn.command(b"MPUB t", mpub)
    assert await conn.response() == b"OK"
    topic = emulator.stats(topic="t")["topics"][0]
    assert (topic["message_count"], topic["depth"], topic["message_bytes"]) == (3, 3, 11)


@pytest.mark.parametrize(
    ("command", "body", "error"),
    [
        (b"PUB bad!topic", b"x", b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid'),
        (b"PUB t", b"", b"E_BAD_MESSAGE PUB invalid message body size 0"),
        (b"PUB", b"x", b"E_INVALID PUB insufficient number of parameters"),
        (b"DPUB t x", b"x", b"E_INVALID DPUB could not parse timeout x"),
        (b"DPUB t 3600001", b"x", b"E_INVALID DPUB timeout 3600001 out of range 0-3600000"),
        (b"MPUB t", struct.pack(">I", 0), b"E_BAD_BODY MPUB invalid message count 0"),
        (
            b"MPUB t",
            struct.pack(">I", 1) + struct.pack(">I", 0),
            b"E_BAD_MESSAGE MPUB invalid message(0) body size 0",
        ),
        (
            b"MPUB t!",
            b"x",
            b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "t!" is not valid',
        ),
    ],
)
async def test_publish_errors_are_fatal(
    conn: Raw, command: bytes, body: bytes, error: bytes
) -> None:
    conn.command(command, body)
    assert await conn.error() == error
    assert await conn.closed()


@pytest.mark.parametrize("command", [b"PUB", b"MPUB", b"DPUB"])
async def test_injected_publish_failure_is_fatal(command: bytes) -> None:
    if nsq_bin_dir() is not None:
        pytest.skip("needs the emulator: injects a publish failure into the server")
    async with nsqd_server() as nsqd:
        nsqd.fail_next(command.decode())
        raw = await Raw.connect(nsqd.tcp_address)
        body = b"x" if command != b"MPUB" else struct.pack(">II", 1, 1) + b"x"
        raw.command(command + b" t" + (b" 10" if command == b"DPUB" else b""), body)
        name = command.decode()
        assert await raw.error() == f"E_{name}_FAILED {name} failed exiting".encode()
        assert await raw.closed()
        await raw.close()
        # only the next one fails
        again = await Raw.connect(nsqd.tcp_address)
        again.command(command + b" t" + (b" 10" if command == b"DPUB" else b""), body)
        assert await again.response() == b"OK"
        await again.close()


async def test_pub_too_big_is_fatal() -> None:
    async with nsqd_server(max_msg_size=10) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        raw.command(b"PUB t", b"x" * 11)
        assert await raw.error() == b"E_BAD_MESSAGE PUB message too big 11 > 10"
        assert await raw.closed()
        await raw.close()


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (b"WHAT", b"E_INVALID invalid command WHAT"),
        (b"SUB bad!t c", b'E_BAD_TOPIC SUB topic name "bad!t" is not valid'),
        (b"SUB t bad!c", b'E_BAD_CHANNEL SUB channel name "bad!c" is not valid'),
        (b"SUB t", b"E_INVALID SUB insufficient number of parameters"),
        (b"RDY 1", b"E_INVALID cannot RDY in current state"),
        (b"FIN 0123456789abcdef", b"E_INVALID cannot FIN in current state"),
        (b"CLS", b"E_INVALID cannot CLS in current state"),
    ],
)
async def test_fatal_errors_close_the_connection(conn: Raw, command: bytes, error: bytes) -> None:
    conn.command(command)
    assert await conn.error() == error
    assert await conn.closed()


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (b"RDY 2501", b"E_INVALID RDY count 2501 out of range 0-2500"),
        (b"RDY -1", b"E_INVALID RDY could not parse count -1"),
        (b"FIN short", b"E_INVALID invalid message ID"),  # nsqd's exact text
        (b"REQ 0123456789abcdef x", b"E_INVALID REQ could not parse timeout x"),
        (b"SUB t c", b"E_INVALID cannot SUB in current state"),
    ],
)
async def test_fatal_errors_when_subscribed(
    emulator: NsqdEmulator, command: bytes, error: bytes
) -> None:
    raw = await subscribed(emulator)
    raw.command(command)
    assert await raw.error() == error
    assert await raw.closed()
    await raw.close()


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (b"FIN 0123456789abcdef", b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"),
        (
            b"REQ 0123456789abcdef 0",
            b"E_REQ_FAILED REQ 0123456789abcdef failed ID not in flight",
        ),
        (
            b"TOUCH 0123456789abcdef",
            b"E_TOUCH_FAILED TOUCH 0123456789abcdef failed ID not in flight",
        ),
    ],
)
async def test_fin_req_touch_failures_are_not_fatal(
    emulator: NsqdEmulator, command: bytes, error: bytes
) -> None:
    raw = await subscribed(emulator)
    raw.command(command)
    assert await raw.error() == error
    emulator.publish("t", b"still here")
    raw.command(b"RDY 1")
    assert (await raw.message())[3] == b"still here"
    await raw.close()


async def test_fin_of_another_clients_message_fails(emulator: NsqdEmulator) -> None:
    a = await subscribed(emulator)
    b = await subscribed(emulator)
    emulator.publish("t", b"mine")
    a.command(b"RDY 1")
    _, _, msg_id, _ = await a.message()
    b.command(b"FIN " + msg_id)
    assert await b.error() == b"E_FIN_FAILED FIN " + msg_id + b" failed client does not own message"
    await a.close()
    await b.close()


# -- heartbeats, NOP, CLS ----------------------------------------------------------------


def fast_heartbeats() -> dict[str, float]:
    """The emulator can go below nsqd's 1 s minimum heartbeat interval, to keep tests short."""
    return {} if nsq_bin_dir() is not None else {"min_heartbeat_interval": 0.01}


async def test_heartbeats_arrive_and_nop_keeps_the_connection() -> None:
    async with nsqd_server(**fast_heartbeats()) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        # The emulator shares this test's loop: a loop stalled for two intervals (a busy
        # machine) leaves the NOP unread that long, and the emulator closes the
        # connection as nsqd would. 500 ms intervals ride out a 1 s stall.
        await raw.identify(heartbeat_interval=1000 if is_real(nsqd) else 500)
        for _ in range(4):  # four intervals: longer than the two a silent client gets
            assert await raw.frame() == (0, b"_heartbeat_")
            raw.command(b"NOP")
        raw.command(b"PUB t", b"x")
        assert await raw.response() == b"OK"
        await raw.close()


async def test_a_client_silent_for_two_heartbeats_is_disconnected() -> None:
    async with nsqd_server(**fast_heartbeats()) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        loop = asyncio.get_running_loop()
        interval = 1.0 if is_real(nsqd) else 0.05
        await raw.identify(heartbeat_interval=round(interval * 1000))
        start = loop.time()
        assert await raw.closed()
        assert loop.time() - start >= 2 * interval - 0.01
        await raw.close()


async def test_sub_with_heartbeats_disabled_is_refused(conn: Raw) -> None:
    await conn.identify(heartbeat_interval=-1)
    conn.command(b"SUB t c")
    assert await conn.error() == b"E_INVALID cannot SUB with heartbeats disabled"
    assert await conn.closed()


async def test_cls_answers_close_wait_and_stops_delivery(emulator: NsqdEmulator) -> None:
    raw = await subscribed(emulator)
    emulator.publish("t", b"a", b"b")
    raw.command(b"RDY 1")
    _, _, msg_id, _ = await raw.message()
    raw.command(b"CLS")
    assert await raw.response() == b"CLOSE_WAIT"
    raw.command(b"RDY 5")  # ignored after CLS
    raw.command(b"FIN " + msg_id)  # still allowed while closing
    await barrier(raw)
    channel = emulator.stats(topic="t")["topics"][0]["channels"][0]
    assert (channel["in_flight_count"], channel["depth"]) == (0, 1)
    assert channel["clients"][0]["state"] == 4
    await raw.close()


# -- AUTH --------------------------------------------------------------------------------


async def test_auth_required_flow() -> None:
    async with nsqd_server(auth_secret="s3cret", auth_identity="tester") as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        answer = json.loads(await raw.identify(feature_negotiation=True))
        assert answer["auth_required"] is True
        raw.command(b"AUTH", b"s3cret")
        assert json.loads(await raw.response()) == {
            "identity": "tester",
            "identity_url": "",
            "permission_count": 1,
        }
        raw.command(b"SUB t c")
        assert await raw.response() == b"OK"
        await raw.close()


async def test_sub_before_auth_is_refused() -> None:
    async with nsqd_server(auth_secret="s3cret") as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        raw.command(b"SUB t c")
        assert await raw.error() == b"E_AUTH_FIRST AUTH required before SUB"
        assert await raw.closed()
        await raw.close()


async def test_wrong_secret_fails_auth() -> None:
    async with nsqd_server(auth_secret="s3cret") as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        raw.command(b"AUTH", b"nope")
        assert await raw.error() == b"E_AUTH_FAILED AUTH failed"
        assert await raw.closed()
        await raw.close()


async def test_auth_restricted_to_topics() -> None:
    async with nsqd_server(auth_secret="s", auth_topics=["allowed.*"]) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        raw.command(b"AUTH", b"s")
        await raw.response()
        raw.command(b"PUB other", b"x")
        assert await raw.error() == b'E_UNAUTHORIZED AUTH failed for PUB on "other" ""'
        assert await raw.closed()
        await raw.close()


async def test_auth_topic_patterns_match_anywhere_in_the_name() -> None:
    """nsqd matches an authorization's topic regex unanchored (Go's MatchString):
    "allowed" lets "allowed2" and "xallowedx" through; "^allowed$" only "allowed"."""
    async with nsqd_server(auth_secret="s", auth_topics=["allowed", "^exact$"]) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        raw.command(b"AUTH", b"s")
        assert json.loads(await raw.response())["permission_count"] == 2
        for topic in (b"allowed2", b"xallowedx", b"exact"):
            raw.command(b"PUB " + topic, b"x")
            assert await raw.response() == b"OK"
        raw.command(b"PUB exact2", b"x")
        assert await raw.error() == b'E_UNAUTHORIZED AUTH failed for PUB on "exact2" ""'
        assert await raw.closed()
        await raw.close()


async def test_auth_with_no_authorizations_is_refused() -> None:
    async with nsqd_server(auth_secret="s", auth_topics=[]) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        raw.command(b"AUTH", b"s")
        assert await raw.error() == b"E_UNAUTHORIZED AUTH no authorizations found"
        assert await raw.closed()
        await raw.close()


async def test_auth_when_disabled(conn: Raw) -> None:
    conn.command(b"AUTH", b"x")
    assert await conn.error() == b"E_AUTH_DISABLED AUTH disabled"
    assert await conn.closed()


# -- TLS and deflate ---------------------------------------------------------------------


async def test_tls_upgrade_after_identify() -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_ctx = tls_server_context(ca.issue_cert("127.0.0.1"))
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    async with nsqd_server(tls=server_ctx) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        answer = json.loads(await raw.identify(feature_negotiation=True, tls_v1=True))
        assert answer["tls_v1"] is True
        await raw.writer.start_tls(client_ctx, server_hostname="127.0.0.1")
        assert await raw.response() == b"OK"  # the first frame over TLS
        raw.command(b"SUB t c")
        assert await raw.response() == b"OK"
        nsqd.publish("t", b"secret")
        raw.command(b"RDY 1")
        assert (await raw.message())[3] == b"secret"
        assert nsqd.stats()["topics"][0]["channels"][0]["clients"][0]["tls"] is True
        await raw.close()


async def test_tls_then_deflate() -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_ctx = tls_server_context(ca.issue_cert("127.0.0.1"))
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    async with nsqd_server(tls=server_ctx) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        answer = json.loads(await raw.identify(feature_negotiation=True, tls_v1=True, deflate=True))
        assert (answer["tls_v1"], answer["deflate"], answer["deflate_level"]) == (True, True, 6)
        await raw.writer.start_tls(client_ctx, server_hostname="127.0.0.1")
        assert await raw.response() == b"OK"  # over TLS, not compressed
        raw.inflater = zlib.decompressobj(-15)
        raw.deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
        assert await raw.response() == b"OK"  # over TLS, compressed
        raw.command(b"PUB t", b"both")
        assert await raw.response() == b"OK"
        await raw.close()


async def test_tls_required_refuses_commands_before_the_upgrade() -> None:
    trustme = pytest.importorskip("trustme")
    server_ctx = tls_server_context(trustme.CA().issue_cert("127.0.0.1"))
    async with nsqd_server(tls=server_ctx, tls_required=True) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        raw.command(b"PUB t", b"x")
        assert await raw.error() == b"E_INVALID cannot PUB in current state (TLS required)"
        assert await raw.closed()
        await raw.close()


async def test_tls_not_offered_without_a_context(conn: Raw) -> None:
    answer = json.loads(await conn.identify(feature_negotiation=True, tls_v1=True))
    assert answer["tls_v1"] is False


async def test_deflate_negotiation_compresses_both_ways(emulator: NsqdEmulator) -> None:
    raw = await Raw.connect(emulator.tcp_address)
    answer = json.loads(await raw.identify(feature_negotiation=True, deflate=True, deflate_level=3))
    assert (answer["deflate"], answer["deflate_level"]) == (True, 3)
    raw.inflater = zlib.decompressobj(-15)
    raw.deflater = zlib.compressobj(3, zlib.DEFLATED, -15)
    assert await raw.response() == b"OK"  # compressed
    raw.command(b"SUB t c")
    assert await raw.response() == b"OK"
    emulator.publish("t", b"z" * 1000)
    raw.command(b"RDY 1")
    assert (await raw.message())[3] == b"z" * 1000
    await raw.close()


async def test_snappy_not_offered_when_disabled() -> None:
    async with nsqd_server(snappy=False) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        answer = json.loads(await raw.identify(feature_negotiation=True, snappy=True))
        assert answer["snappy"] is False
        await raw.close()


async def test_snappy_negotiation_frames_both_ways() -> None:
    cramjam = pytest.importorskip("cramjam")
    async with nsqd_server(snappy=True) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        answer = json.loads(await raw.identify(feature_negotiation=True, snappy=True))
        assert answer["snappy"] is True
        stream = b""

        async def decoded_at_least(n: int) -> bytes:
            # from here on the server sends one snappy framed stream
            nonlocal stream
            while True:
                stream += await asyncio.wait_for(raw.reader.read(65536), 5)
                try:
                    decoded = bytes(cramjam.snappy.decompress(stream))
                except Exception:  # a chunk cut by TCP: read on
                    continue
                if len(decoded) >= n:
                    return decoded

        decoded = await decoded_at_least(10)
        assert stream.startswith(b"\xff\x06\x00\x00sNaPpY")
        assert decoded == struct.pack(">II", 6, 0) + b"OK"
        raw.writer.write(bytes(cramjam.snappy.compress(b"PUB t\n" + struct.pack(">I", 1) + b"x")))
        decoded = await decoded_at_least(20)
        assert decoded[10:] == struct.pack(">II", 6, 0) + b"OK"
        assert nsqd.stats(topic="t")["topics"][0]["message_count"] == 1
        await raw.close()


async def test_deflate_and_snappy_together_are_refused() -> None:
    pytest.importorskip("cramjam")
    async with nsqd_server(snappy=True) as nsqd:
        raw = await Raw.connect(nsqd.tcp_address)
        raw.command(
            b"IDENTIFY",
            json.dumps({"feature_negotiation": True, "snappy": True, "deflate": True}).encode(),
        )
        assert await raw.error() == (
            b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
        )
        assert await raw.closed()
        await raw.close()


# -- stop / start ------------------------------------------------------------------------


async def test_stop_closes_clients_and_start_reuses_ports_and_keeps_messages() -> None:
    async with nsqd_server() as nsqd:
        tcp, http = nsqd.tcp_address, nsqd.http_address
        raw = await subscribed(nsqd)
        nsqd.publish("t", b"a", b"b")
        raw.command(b"RDY 1")
        _, _, msg_id, _ = await raw.message()
        await nsqd.stop()
        assert await raw.closed()
        await raw.close()
        with pytest.raises(ConnectionRefusedError):
            await Raw.connect(tcp)
        await nsqd.start()
        assert (nsqd.tcp_address, nsqd.http_address) == (tcp, http)
        again = await subscribed(nsqd)
        again.command(b"RDY 2")
        got = [await again.message() for _ in range(2)]
        # like nsqd (Channel.flush): the queued message first, then the one that was
        # in flight, with its id and attempts kept
        assert [(m[2] == msg_id, m[1], m[3]) for m in got] == [(False, 1, b"b"), (True, 2, b"a")]
        await again.close()


async def test_nsqd_fixture_yields_addresses(nsqd: NsqdEmulator) -> None:
    raw = await Raw.connect(nsqd.tcp_address)
    raw.command(b"PUB fixture", b"x")
    assert await raw.response() == b"OK"
    await raw.close()
