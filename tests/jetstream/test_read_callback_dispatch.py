"""Raw replies dispatched from the socket's read callback (``FastParser.attach``).

A chunk holding exactly one whole message for a raw handler (a reply, as a
rule) is handed to it as it arrives, while nats-py's read loop waits for data;
anything else (several messages, a PING, a message for a nats-py subscription,
a frame cut short, a busy read loop) goes to the read loop, and every message
is still seen once, in order.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client as NATS

from aioclients.jetstream._protocol._kv import PLAIN_PUT_REPLY
from aioclients.jetstream._protocol._wire import reply_frame_match
from aioclients.jetstream._transport import FastParser

pytestmark = pytest.mark.timeout(10)

RAW_SID = 1  # a reply inbox
OTHER_SID = 2  # a nats-py subscription
PULL_SID = 3  # a raw inbox that is not for replies (pull deliveries)


def hmsg(sid: int, n: int) -> bytes:
    header = b"NATS/1.0\r\nNats-Sequence: %d\r\n\r\n" % n
    payload = b"v%d" % n
    return b"HMSG _R.%d %d %d %d\r\n%s%s\r\n" % (
        n,
        sid,
        len(header),
        len(header) + len(payload),
        header,
        payload,
    )


class FakeClient:
    """What FastParser uses of NatsClient, recording what reaches it and how."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.in_read_loop = False
        self._raw_handlers = {RAW_SID: self.raw, PULL_SID: self.raw}
        self._reply_handlers = {RAW_SID: self.raw}
        self._frame_reader: Any = None
        self.stats = {"in_msgs": 0, "in_bytes": 0}
        self.is_connected = True
        self._status = NATS.CONNECTED

    def raw(self, subject: str, reply: str, payload: bytes, header: bytes | None) -> None:
        self.seen.append(("raw" if not self.in_read_loop else "raw/loop", payload))

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        self.seen.append(("msg", data))

    async def _process_ping(self) -> None:
        self.seen.append(("ping", None))


class ReadLoop:
    """nats-py's read loop: read from the StreamReader, hand the bytes to the parser."""

    def __init__(self, reader: asyncio.StreamReader, parser: FastParser, nc: FakeClient) -> None:
        self.reader = reader
        self.parser = parser
        self.nc = nc
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            data = await self.reader.read(65536)
            if not data:
                return
            self.nc.in_read_loop = True
            try:
                await self.parser.parse(data)
            finally:
                self.nc.in_read_loop = False

    async def idle(self) -> None:
        """Wait (bounded) until the loop waits for data with nothing buffered."""
        for _ in range(1000):
            waiter = self.reader._waiter  # type: ignore[attr-defined]
            if waiter is not None and not waiter.done() and not self.reader._buffer:  # type: ignore[attr-defined]
                return
            await asyncio.sleep(0)
        raise AssertionError("the read loop never became idle")

    async def stop(self) -> None:
        self.reader.feed_eof()
        await asyncio.wait_for(self.task, 5)


@pytest.fixture
async def wired() -> Any:
    nc = FakeClient()
    parser = FastParser(nc)  # type: ignore[arg-type]
    reader = asyncio.StreamReader()
    parser.attach(reader)
    loop = ReadLoop(reader, parser, nc)
    await loop.idle()
    yield nc, reader, loop
    await loop.stop()


async def test_a_raw_message_arriving_alone_is_dispatched_as_it_arrives(wired: Any) -> None:
    nc, reader, loop = wired
    reader.feed_data(hmsg(RAW_SID, 0))
    reader.feed_data(hmsg(RAW_SID, 1))
    # no await in between: dispatched from the feed itself, not by the read loop
    assert nc.seen == [("raw", b"v0"), ("raw", b"v1")]
    assert nc.stats["in_msgs"] == 2
    assert not reader._buffer
    await loop.idle()


async def test_a_pull_delivery_arriving_alone_goes_to_the_read_loop(wired: Any) -> None:
    nc, reader, loop = wired
    reader.feed_data(hmsg(PULL_SID, 1))
    assert nc.seen == []
    await loop.idle()
    assert nc.seen == [("raw/loop", b"v1")]


async def test_several_messages_in_one_chunk_go_to_the_read_loop(wired: Any) -> None:
    nc, reader, loop = wired
    reader.feed_data(hmsg(RAW_SID, 1) + hmsg(RAW_SID, 2))  # a burst of deliveries
    assert nc.seen == []
    await loop.idle()
    assert nc.seen == [("raw/loop", b"v1"), ("raw/loop", b"v2")]


async def test_a_chunk_with_anything_else_goes_to_the_read_loop_in_order(wired: Any) -> None:
    nc, reader, loop = wired
    reader.feed_data(hmsg(RAW_SID, 1) + b"PING\r\n" + hmsg(OTHER_SID, 2) + hmsg(RAW_SID, 3))
    assert nc.seen == []  # nothing taken out of order
    await loop.idle()
    assert nc.seen == [("raw/loop", b"v1"), ("ping", None), ("msg", b"v2"), ("raw/loop", b"v3")]


async def test_a_chunk_starting_with_another_subscription_s_message_goes_to_the_read_loop(
    wired: Any,
) -> None:
    nc, reader, loop = wired
    reader.feed_data(hmsg(OTHER_SID, 1) + hmsg(RAW_SID, 2))
    assert nc.seen == []
    await loop.idle()
    reader.feed_data(hmsg(OTHER_SID, 3))  # alone, too
    assert nc.seen == [("msg", b"v1"), ("raw/loop", b"v2")]
    await loop.idle()
    assert nc.seen == [("msg", b"v1"), ("raw/loop", b"v2"), ("msg", b"v3")]


async def test_messages_cut_across_chunks_are_each_seen_once_in_order(wired: Any) -> None:
    nc, reader, loop = wired
    second = hmsg(RAW_SID, 2)
    reader.feed_data(second[:10])  # a frame cut short: the read loop's, which keeps it
    await loop.idle()
    reader.feed_data(second[10:])  # completes the held frame: the read loop's too
    await loop.idle()
    reader.feed_data(hmsg(RAW_SID, 3))  # with nothing held, straight again
    assert nc.seen == [("raw/loop", b"v2"), ("raw", b"v3")]
    await loop.idle()


async def test_nothing_is_taken_while_the_read_loop_has_bytes_to_parse(wired: Any) -> None:
    nc, reader, loop = wired
    reader.feed_data(b"PING\r\n")  # wakes the read loop, which has not run yet
    reader.feed_data(hmsg(RAW_SID, 1))
    assert nc.seen == []
    await loop.idle()
    assert nc.seen == [("ping", None), ("raw/loop", b"v1")]


async def take_a_large_socket_read(nc: FakeClient, reader: asyncio.StreamReader) -> list[int]:
    """Feed one socket read of about 200 KB, four of the read loop's 64 KiB reads,
    of deliveries to PULL_SID, and return how many had been handed over each time
    the task they wake ran."""
    count = 200
    payload = b"x" * 1000
    burst = b"".join(
        b"MSG _P.%d %d %d\r\n%s\r\n" % (n, PULL_SID, len(payload), payload) for n in range(count)
    )
    came = asyncio.Event()
    woke_at: list[int] = []

    def delivered(subject: str, reply: str, data: bytes, header: bytes | None) -> None:
        nc.seen.append(("raw/loop", data))
        came.set()

    async def take() -> None:
        while len(nc.seen) < count:
            await came.wait()
            came.clear()
            woke_at.append(len(nc.seen))

    nc._raw_handlers[PULL_SID] = delivered
    taker = asyncio.ensure_future(take())
    await asyncio.sleep(0)  # the taker waits
    reader.feed_data(burst)
    await asyncio.wait_for(taker, 5)
    assert woke_at[-1] == count
    return woke_at


async def test_a_paced_subscription_takes_each_read_before_the_next_is_parsed(
    wired: Any,
) -> None:
    # An ordered consumer's: the task the first read's messages woke takes them
    # before the second read is parsed, not the whole socket read's at the end.
    nc, reader, loop = wired
    nc._paced = {PULL_SID: True}
    woke_at = await take_a_large_socket_read(nc, reader)
    assert len(woke_at) >= 3, woke_at
    assert woke_at[0] < len(nc.seen) // 2, woke_at
    await loop.idle()


async def test_without_a_paced_subscription_a_socket_read_is_parsed_at_once(
    wired: Any,
) -> None:
    nc, reader, loop = wired
    nc._paced = {}
    woke_at = await take_a_large_socket_read(nc, reader)
    assert woke_at == [len(nc.seen)]
    await loop.idle()


async def test_a_disconnected_client_leaves_everything_to_the_read_loop(wired: Any) -> None:
    nc, reader, loop = wired
    nc.is_connected = False
    nc._status = NATS.RECONNECTING
    reader.feed_data(hmsg(RAW_SID, 1))
    assert nc.seen == []
    await loop.idle()
    assert nc.seen == [("raw/loop", b"v1")]


async def test_a_draining_client_leaves_everything_to_the_read_loop(wired: Any) -> None:
    nc, reader, loop = wired
    nc._status = NATS.DRAINING_SUBS  # still "connected" for nats-py, but draining
    reader.feed_data(hmsg(RAW_SID, 1))
    assert nc.seen == []
    await loop.idle()
    assert nc.seen == [("raw/loop", b"v1")]


async def test_a_handler_that_raises_does_not_stop_the_others(
    wired: Any, caplog: pytest.LogCaptureFixture
) -> None:
    nc, reader, loop = wired
    calls: list[bytes] = []

    def flaky(subject: str, reply: str, payload: bytes, header: bytes | None) -> None:
        calls.append(payload)
        if payload == b"v1":
            raise RuntimeError("handler bug")

    nc._raw_handlers[RAW_SID] = nc._reply_handlers[RAW_SID] = flaky
    reader.feed_data(hmsg(RAW_SID, 1))
    reader.feed_data(hmsg(RAW_SID, 2))
    assert calls == [b"v1", b"v2"]
    assert "handler bug" in caplog.text
    await loop.idle()


async def test_a_reader_without_the_expected_internals_is_left_alone() -> None:
    nc = FakeClient()
    parser = FastParser(nc)  # type: ignore[arg-type]

    class OtherReader:
        def feed_data(self, data: bytes) -> None:
            raise AssertionError("not ours to wrap")

    other = OtherReader()
    parser.attach(other)
    assert "feed_data" not in vars(other)
    assert parser._reader is None


# -- replies of the usual form, read whole with one match (a raw inbox's frame reader) --

PLAIN = (
    b"NATS/1.0\r\nNats-Stream: KV_B\r\nNats-Subject: $KV.B.k\r\nNats-Sequence: %d\r\n"
    b"Nats-Time-Stamp: 2026-11-27T21:29:42.070310463Z\r\n\r\n"
)


def plain_reply(sid: int, n: int, payload: bytes | None = None) -> bytes:
    header = PLAIN % n
    payload = b"v%d" % n if payload is None else payload
    return b"HMSG _R.%d %d %d %d\r\n%s%s\r\n" % (
        n,
        sid,
        len(header),
        len(header) + len(payload),
        header,
        payload,
    )


class RecordingFuture:
    """A waiter's future that records the groups it is given."""

    def __init__(self, nc: FakeClient, subject: str) -> None:
        self.nc = nc
        self.subject = subject

    def done(self) -> bool:
        return False

    def set_result(self, groups: tuple[Any, ...]) -> None:
        assert groups[0].decode() == self.subject
        self.nc.seen.append(("whole", (groups[0], groups[3], groups[-1])))


class RecordingWaiters(dict[str, tuple[Any, ...]]):
    """A table of outstanding requests with one waiting on every subject."""

    def __init__(self, nc: FakeClient) -> None:
        super().__init__()
        self.nc = nc

    def pop(self, subject: str, default: Any = None) -> tuple[Any, ...]:  # type: ignore[override]
        return (RecordingFuture(self.nc, subject),)


def read_whole(nc: FakeClient, sid: int = RAW_SID) -> None:
    """Register a frame reader for ``sid``, as ``subscribe_raw(frame_header=...)`` does."""
    nc._frame_reader = (reply_frame_match(sid, PLAIN_PUT_REPLY), RecordingWaiters(nc), sid)


async def test_a_reply_of_the_usual_form_is_read_whole_as_it_arrives(wired: Any) -> None:
    nc, reader, loop = wired
    read_whole(nc)
    reader.feed_data(plain_reply(RAW_SID, 5))
    reader.feed_data(plain_reply(RAW_SID, 6, b"\r\nHMSG x 1 2 2\r\nab\r\n"))
    assert nc.seen == [
        ("whole", (b"_R.5", b"5", b"v5")),
        ("whole", (b"_R.6", b"6", b"\r\nHMSG x 1 2 2\r\nab\r\n")),
    ]
    assert nc.stats == {"in_msgs": 2, "in_bytes": 2 + 20}
    await loop.idle()


async def test_other_replies_to_the_inbox_go_as_before(wired: Any) -> None:
    nc, reader, loop = wired
    read_whole(nc)
    status = b"NATS/1.0 404 Message Not Found\r\n\r\n"
    reader.feed_data(b"HMSG _R.1 %d %d %d\r\n%s\r\n" % (RAW_SID, len(status), len(status), status))
    reader.feed_data(hmsg(RAW_SID, 2))  # headers of another form
    reader.feed_data(b"MSG _R.3 %d 2\r\nv3\r\n" % RAW_SID)  # no headers
    assert nc.seen == [("raw", b""), ("raw", b"v2"), ("raw", b"v3")]
    await loop.idle()


async def test_a_reply_of_the_usual_form_to_another_subscription_is_not_taken(
    wired: Any,
) -> None:
    nc, reader, loop = wired
    read_whole(nc)
    reader.feed_data(plain_reply(PULL_SID, 1))
    reader.feed_data(plain_reply(RAW_SID * 10 + RAW_SID, 2))
    assert nc.seen == []
    await loop.idle()
    assert nc.seen == [("raw/loop", b"v1"), ("msg", b"v2")]


async def test_replies_of_the_usual_form_in_one_chunk_or_cut_go_to_the_read_loop(
    wired: Any,
) -> None:
    nc, reader, loop = wired
    read_whole(nc)
    reader.feed_data(plain_reply(RAW_SID, 1) + plain_reply(RAW_SID, 2))
    assert nc.seen == []
    await loop.idle()
    cut = plain_reply(RAW_SID, 3, b"v3\r\nmore")
    reader.feed_data(cut[: cut.index(b"more")])  # ends in a CRLF, as a whole frame does
    assert nc.seen == [("raw/loop", b"v1"), ("raw/loop", b"v2")]
    await loop.idle()
    reader.feed_data(cut[cut.index(b"more") :])
    await loop.idle()
    reader.feed_data(plain_reply(RAW_SID, 4))  # nothing held: read whole again
    assert nc.seen == [
        ("raw/loop", b"v1"),
        ("raw/loop", b"v2"),
        ("raw/loop", b"v3\r\nmore"),
        ("whole", (b"_R.4", b"4", b"v4")),
    ]
    await loop.idle()


async def test_a_reply_whose_sizes_are_not_its_frame_s_is_read_by_its_sizes(
    wired: Any,
) -> None:
    nc, reader, loop = wired
    read_whole(nc)
    good = plain_reply(RAW_SID, 1, b"abcd")
    line, rest = good.split(b"\r\n", 1)
    words = line.split(b" ")
    # the header size one less: the block then ends a byte early, as single_message reads it
    words[3] = b"%d" % (int(words[3]) - 1)
    reader.feed_data(b" ".join(words) + b"\r\n" + rest)
    assert nc.seen == [("raw", b"\nabcd")]
    await loop.idle()


async def test_a_reply_not_waited_for_or_to_no_utf8_subject_is_dropped_and_the_next_read(
    wired: Any, caplog: pytest.LogCaptureFixture
) -> None:
    nc, reader, loop = wired
    waiters: dict[str, tuple[Any, ...]] = {}
    nc._frame_reader = (reply_frame_match(RAW_SID, PLAIN_PUT_REPLY), waiters, RAW_SID)
    running = asyncio.get_running_loop()
    second, third = running.create_future(), running.create_future()
    waiters["_R.2"] = (second, "what")
    waiters["_R.3"] = (third, "what")
    reader.feed_data(plain_reply(RAW_SID, 1))  # timed out earlier: not in the table
    reader.feed_data(plain_reply(RAW_SID, 4).replace(b"_R.4", b"_R.\xff"))
    reader.feed_data(plain_reply(RAW_SID, 2))
    assert "message handler for b'_R.\\xff' failed" in caplog.text
    assert second.result()[-1] == b"v2"
    assert list(waiters) == ["_R.3"]
    assert nc.stats == {"in_msgs": 3, "in_bytes": 6}
    assert nc.seen == []
    third.cancel()  # a get cancelled, its entry not yet taken out: the reply is dropped
    reader.feed_data(plain_reply(RAW_SID, 3))
    assert waiters == {}
    await loop.idle()


@given(
    st.lists(
        st.tuples(st.sampled_from(["plain", "status", "other", "ping"]), st.binary(max_size=40)),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.integers(0, 4000), max_size=6),
)
@settings(max_examples=60)
async def test_any_replies_in_any_chunks_are_each_seen_once_in_order(
    messages: list[tuple[str, bytes]], cuts: list[int]
) -> None:
    nc = FakeClient()
    read_whole(nc)
    parser = FastParser(nc)  # type: ignore[arg-type]
    reader = asyncio.StreamReader()
    parser.attach(reader)
    loop = ReadLoop(reader, parser, nc)
    await loop.idle()
    stream = b""
    expected: list[bytes | None] = []
    status = b"NATS/1.0 408 Request Timeout\r\n\r\n"
    for i, (kind, payload) in enumerate(messages):
        if kind == "plain":
            stream += plain_reply(RAW_SID, i, payload)
        elif kind == "status":
            stream += b"HMSG _R.%d %d %d %d\r\n%s%s\r\n" % (
                i,
                RAW_SID,
                len(status),
                len(status) + len(payload),
                status,
                payload,
            )
        elif kind == "other":
            stream += b"MSG _R.%d %d %d\r\n%s\r\n" % (i, RAW_SID, len(payload), payload)
        else:
            stream += b"PING\r\n"
            payload = None  # type: ignore[assignment]
        expected.append(payload)
    try:
        pos = 0
        for cut in sorted(cuts):
            cut = min(cut, len(stream))
            if cut > pos:
                reader.feed_data(stream[pos:cut])
                pos = cut
                await loop.idle()
        if pos < len(stream):
            reader.feed_data(stream[pos:])
        await loop.idle()
        got = [item[2] if kind == "whole" else item for kind, item in nc.seen]
        assert got == expected
    finally:
        await loop.stop()
