"""JetStream against a hostile NATS server: one that accepts and never answers,
answers garbage, or floods (an endless INFO line, a message announced at 4 GB).

A real nats-server cannot be made to misbehave like this, so here a small script
written in this file stands in for it (every other JetStream test uses a real
nats-server). Each call must end within its bound with an aioclients error, a
cancelled call must leave nothing running, a frame over the limit is refused
rather than buffered, and the credentials given to connect appear in no error and
no log record.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from aioclients import AioClientsError
from aioclients.jetstream import HeartbeatMissed, JetStream, JetStreamConnectError, connect

PASSWORD = "Hostile-S3cret-Pw"
TOKEN = "Hostile-T0ken-XYZ"
#: generous bound for a call that must end on its own (its timeout is far below)
BOUND = 10.0

INFO = (
    b'INFO {"server_id":"x","version":"2.12.0","proto":1,"headers":true,"max_payload":1048576}\r\n'
)

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class HostileNats:
    """A loopback server that runs ``script`` on each connection it accepts and
    records whether the client closed each one."""

    def __init__(self, script: Script) -> None:
        self._script = script
        self._server: asyncio.Server | None = None
        self.connections = 0
        self.accepted = asyncio.Event()
        self.client_closed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"nats://127.0.0.1:{port}"

    async def __aenter__(self) -> HostileNats:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.accepted.set()
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._script(reader, writer)
            # the script is done: wait for the client to close its side
            while await reader.read(65536):
                pass
            self.client_closed.set()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.client_closed.set()
        except asyncio.CancelledError:
            pass  # the server is closing
        finally:
            self._tasks.discard(task)
            writer.transport.abort()


async def handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """INFO, then read CONNECT and PING and answer PONG, as nats-server does."""
    writer.write(INFO)
    while True:
        line = await reader.readline()
        if not line:
            raise ConnectionResetError
        if line.startswith(b"PING"):
            writer.write(b"PONG\r\n")
            return


_SUB = re.compile(rb"SUB\s+(\S+)\s+(?:\S+\s+)?(\d+)\s*\r\n")
_PUB = re.compile(rb"(H?)PUB\s+(\S+)\s+(?:(\S+)\s+)?(?:(\d+)\s+)?(\d+)\s*\r\n")


async def requests(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> AsyncIterator[tuple[str, bytes, int]]:
    """After the handshake: answer PINGs, note SUBs, and yield each request as
    ``(subject, reply, sid of the subscription the reply goes to)``."""
    subs: dict[bytes, int] = {}
    while True:
        line = await reader.readline()
        if not line:
            return
        if line.startswith(b"PING"):
            writer.write(b"PONG\r\n")
        elif m := _SUB.match(line):
            subs[m[1]] = int(m[2])
        elif m := _PUB.match(line):
            await reader.readexactly(int(m[5]) + 2)
            reply = m[3] or b""
            sid = 0
            for pattern, number in subs.items():
                if pattern == reply or (
                    pattern.endswith((b".*", b".>")) and reply.startswith(pattern[:-1])
                ):
                    sid = number
            yield m[2].decode(), reply, sid


async def connected(server: HostileNats, **options: Any) -> JetStream:
    return await asyncio.wait_for(
        # no reconnect: a call must end by the fault itself, not by a new connection
        connect(server.url, timeout=0.2, **{"allow_reconnect": False, **options}),
        BOUND,
    )


def assert_no_secret(text: str) -> None:
    assert PASSWORD not in text, text
    assert TOKEN not in text, text


def assert_logs_hold_no_secret(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        assert_no_secret(record.getMessage())
        if record.exc_info and record.exc_info[1] is not None:
            assert_no_secret(repr(record.exc_info[1]))


# ---- connect --------------------------------------------------------------------------


async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    pass  # read what comes (until the client closes), answer nothing


async def garbage_greeting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"\x16\x03\x01 HTTP/1.1 400 Bad Request\r\n\r\n" + bytes(range(256)))


async def endless_info(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b'INFO {"server_id":"')
    chunk = b"x" * 65536
    while True:  # no end of line, ever: the client must stop reading, not buffer it
        writer.write(chunk)
        await writer.drain()


async def info_then_garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(INFO)
    await reader.readline()  # CONNECT ... PING
    writer.write(b"SOMETHING ELSE\r\n")


@pytest.mark.parametrize(
    ("script", "credentials"),
    [
        (never_answer, {"user": "alice", "password": PASSWORD}),
        (garbage_greeting, {"token": TOKEN}),
        (endless_info, {"user": "alice", "password": PASSWORD}),
        (info_then_garbage, {"token": TOKEN}),
    ],
    ids=["never-answers", "garbage-greeting", "endless-info", "garbage-pong"],
)
async def test_connect_to_a_hostile_server_fails_typed_within_its_timeout(
    script: Script, credentials: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with HostileNats(script) as server:
        with pytest.raises(JetStreamConnectError) as info:
            await connected(server, **credentials)
        assert_no_secret(str(info.value))
        assert_no_secret(repr(info.value.__cause__) + repr(info.value.__context__))
        # the client dropped what it opened
        await asyncio.wait_for(server.client_closed.wait(), BOUND)
    assert_logs_hold_no_secret(caplog)


async def test_cancelling_connect_to_a_silent_server_leaves_nothing_behind() -> None:
    async with HostileNats(never_answer) as server:
        before = asyncio.all_tasks()
        call = asyncio.ensure_future(connect(server.url, timeout=30.0, max_reconnect_attempts=0))
        await asyncio.wait_for(server.accepted.wait(), BOUND)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(call, BOUND)
        await asyncio.wait_for(server.client_closed.wait(), BOUND)
        await asyncio.sleep(0)
        assert asyncio.all_tasks() <= before | {asyncio.current_task()}


# ---- requests on a connected client ---------------------------------------------------


def answering(answer: Callable[[str, bytes, int], bytes | None]) -> Script:
    """A server that shakes hands, then answers each request with ``answer(...)``
    (raw bytes; None: no answer)."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handshake(reader, writer)
        async for subject, reply, sid in requests(reader, writer):
            data = answer(subject, reply, sid)
            if data is not None:
                writer.write(data)

    return script


def garbage_reply(subject: str, reply: bytes, sid: int) -> bytes:
    payload = b"\x00\xffnot json at all"
    return b"MSG %s %d %d\r\n%s\r\n" % (reply, sid, len(payload), payload)


def huge_reply(subject: str, reply: bytes, sid: int) -> bytes:
    # a message of 4 GB announced: it must be refused, not awaited
    return b"MSG %s %d %d\r\n" % (reply, sid, 4 * 1024**3) + b"\x00" * 65536


def huge_header_reply(subject: str, reply: bytes, sid: int) -> bytes:
    return b"HMSG %s %d 12 %d\r\nNATS/1.0\r\n\r\n" % (reply, sid, 2**31) + b"\x00" * 65536


def protocol_garbage(subject: str, reply: bytes, sid: int) -> bytes:
    return bytes(range(256)) * 64  # no CRLF anywhere near the start


async def test_a_garbage_answer_to_an_api_request_is_a_typed_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with HostileNats(answering(garbage_reply)) as server:
        js = await connected(server, user="alice", password=PASSWORD)
        try:
            with pytest.raises(AioClientsError) as info:
                await asyncio.wait_for(js.account_info(), BOUND)
            assert_no_secret(str(info.value))
            with pytest.raises(AioClientsError):
                await asyncio.wait_for(js.publish("orders.1", b"x"), BOUND)
        finally:
            await asyncio.wait_for(js.close(), BOUND)
    assert_logs_hold_no_secret(caplog)


@pytest.mark.parametrize("answer", [huge_reply, huge_header_reply, protocol_garbage])
async def test_a_flooding_answer_is_refused_not_buffered(
    answer: Callable[[str, bytes, int], bytes], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handshake(reader, writer)
        async for _subject, reply, sid in requests(reader, writer):
            writer.write(answer(_subject, reply, sid))
            chunk = b"\x00" * 65536
            while True:  # and more, for as long as the client reads
                writer.write(chunk)
                await writer.drain()

    async with HostileNats(script) as server:
        # A long call timeout: only refusing the frame ends the call within BOUND
        # (and no reconnect, which would leave the call waiting for its timeout).
        js = await connected(server, user="alice", password=PASSWORD)
        try:
            with pytest.raises(AioClientsError) as info:
                await asyncio.wait_for(js.publish("orders.1", b"x", timeout=60.0), BOUND)
            assert not isinstance(info.value, TimeoutError)
            assert_no_secret(str(info.value))
            await asyncio.wait_for(server.client_closed.wait(), BOUND)
        finally:
            await asyncio.wait_for(js.close(), BOUND)
    assert "NATS protocol error" in caplog.text
    assert_logs_hold_no_secret(caplog)


async def test_a_server_that_never_answers_a_request_times_it_out_and_cancel_cancels(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with HostileNats(answering(lambda *_: None)) as server:
        js = await connected(server, token=TOKEN)
        try:
            with pytest.raises(AioClientsError) as info:
                await asyncio.wait_for(js.stream_name_by_subject("orders.1"), BOUND)
            assert isinstance(info.value, TimeoutError)
            assert_no_secret(str(info.value))
            before = asyncio.all_tasks()
            call = asyncio.ensure_future(js.publish("orders.1", b"x", timeout=60.0))
            await asyncio.sleep(0.05)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(call, BOUND)
            assert asyncio.all_tasks() <= before | {asyncio.current_task()}
        finally:
            await asyncio.wait_for(js.close(), BOUND)
    assert_logs_hold_no_secret(caplog)


def _json_reply(reply: bytes, sid: int, doc: object) -> bytes:
    payload = json.dumps(doc).encode()
    return b"MSG %s %d %d\r\n%s\r\n" % (reply, sid, len(payload), payload)


async def test_kv_and_object_store_handles_on_a_garbage_server_fail_typed() -> None:
    async with HostileNats(answering(garbage_reply)) as server:
        js = await connected(server)
        try:
            with pytest.raises(AioClientsError):
                await asyncio.wait_for(js.key_value("bucket"), BOUND)
            with pytest.raises(AioClientsError):
                await asyncio.wait_for(js.object_store("bucket"), BOUND)
            with pytest.raises(AioClientsError):
                await asyncio.wait_for(js.consumer("stream", "name"), BOUND)
        finally:
            with contextlib.suppress(AioClientsError):
                await asyncio.wait_for(js.close(), BOUND)


@pytest.mark.parametrize(
    "doc", [{"config": 5}, {"config": None, "state": "x"}], ids=["config-5", "state-x"]
)
async def test_json_answers_of_the_wrong_shape_are_typed_errors(doc: object) -> None:
    script = answering(lambda _subject, reply, sid: _json_reply(reply, sid, doc))
    async with HostileNats(script) as server:
        js = await connected(server)
        try:
            calls: list[Callable[[], Awaitable[object]]] = [
                lambda: js.stream("s"),
                lambda: js.consumer("s", "c"),
                lambda: js.key_value("bucket"),
                lambda: js.object_store("bucket"),
                lambda: js.create_stream("s", subjects=["a"]),
            ]
            for call in calls:
                # an answer it can read, or an aioclients error: never an
                # AttributeError or TypeError of reading it
                with contextlib.suppress(AioClientsError):
                    await asyncio.wait_for(call(), BOUND)
        finally:
            await asyncio.wait_for(js.close(), BOUND)


# ---- KV, object store and consumers on a server that answers only the info requests ----


def _stream_info(name: str) -> dict[str, object]:
    if name.startswith("KV_"):
        subjects = [f"$KV.{name[3:]}.>"]
    elif name.startswith("OBJ_"):
        subjects = [f"$O.{name[4:]}.C.>", f"$O.{name[4:]}.M.>"]
    else:
        subjects = ["orders.>"]
    config = {
        "name": name,
        "subjects": subjects,
        "allow_direct": True,
        "allow_rollup_hdrs": True,
        "max_msgs_per_subject": 1,
        "storage": "file",
        "num_replicas": 1,
        "discard": "new",
        "retention": "limits",
    }
    state = {"messages": 0, "bytes": 0, "first_seq": 0, "last_seq": 0, "consumer_count": 0}
    return {"config": config, "state": state, "created": "2026-01-01T00:00:00Z"}


def _consumer_info(stream: str, name: str) -> dict[str, object]:
    zero = {"consumer_seq": 0, "stream_seq": 0}
    return {
        "stream_name": stream,
        "name": name,
        "config": {"durable_name": name, "ack_policy": "explicit"},
        "created": "2026-01-01T00:00:00Z",
        "num_pending": 0,
        "delivered": zero,
        "ack_floor": zero,
    }


def info_only(data: Callable[[str, bytes, int], bytes | None]) -> Script:
    """A server that answers stream and consumer info properly and every other
    request (gets, puts, consumer creation, pulls) with ``data(...)``."""

    def answer(subject: str, reply: bytes, sid: int) -> bytes | None:
        if subject.startswith("$JS.API.STREAM.INFO."):
            return _json_reply(reply, sid, _stream_info(subject.rsplit(".", 1)[1]))
        if subject.startswith("$JS.API.CONSUMER.INFO."):
            stream, name = subject.split(".")[-2:]
            return _json_reply(reply, sid, _consumer_info(stream, name))
        return data(subject, reply, sid)

    return answering(answer)


DATA_ANSWERS: dict[str, Callable[[str, bytes, int], bytes | None]] = {
    "silent": lambda *_: None,
    "garbage": garbage_reply,
}


@pytest.mark.parametrize("data", sorted(DATA_ANSWERS))
async def test_kv_and_object_store_calls_on_a_hostile_server_end_typed(data: str) -> None:
    async with HostileNats(info_only(DATA_ANSWERS[data])) as server:
        js = await connected(server)
        try:
            kv = await asyncio.wait_for(js.key_value("bucket"), BOUND)
            store = await asyncio.wait_for(js.object_store("bucket"), BOUND)

            async def watch() -> object:
                async with kv.watch() as entries:
                    async for entry in entries:
                        return entry
                return None

            async def get_object() -> bytes:
                async with store.get("name") as obj:
                    return await obj.read()

            calls: list[Callable[[], Awaitable[object]]] = [
                lambda: kv.get("key"),
                lambda: kv.put("key", b"value"),
                watch,
                lambda: kv.history("key"),
                get_object,
                lambda: store.put("name", b"data"),
            ]
            for call in calls:
                with pytest.raises(AioClientsError):
                    await asyncio.wait_for(call(), BOUND)
        finally:
            await asyncio.wait_for(js.close(), BOUND)


async def test_consume_from_a_silent_server_reports_missed_heartbeats_and_stops() -> None:
    async with HostileNats(info_only(lambda *_: None)) as server:
        js = await connected(server)
        try:
            consumer = await asyncio.wait_for(js.consumer("S", "C"), BOUND)
            before = asyncio.all_tasks()
            missed = asyncio.Event()

            def on_event(event: object) -> None:
                if isinstance(event, HeartbeatMissed):
                    missed.set()

            messages = consumer.consume(expires=1.0, idle_heartbeat=0.5, on_event=on_event)
            async with messages:
                reading = asyncio.ensure_future(messages.__anext__())
                await asyncio.wait_for(missed.wait(), BOUND)  # the silence is noticed
                assert not reading.done()
                reading.cancel()  # a cancelled read is cancelled
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(reading, BOUND)
            await asyncio.sleep(0)
            assert asyncio.all_tasks() <= before | {asyncio.current_task()}
        finally:
            await asyncio.wait_for(js.close(), BOUND)
