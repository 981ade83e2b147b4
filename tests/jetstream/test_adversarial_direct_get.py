"""Adversarial tests of ADR-31 Direct Get: odd stream states, odd stored headers, bad
arguments, cancellation mid-batch and malformed replies, against a real nats-server.

A batch that stalls half-way is produced without stopping the server: the stream
is created without ``allow_direct`` (so the server does not answer Direct Get for
it) and a plain NATS subscriber answers in its place with a few well-formed
messages, then stays silent.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg as NatsMsg
from support import PROBE, Server, WaitFor, until_visible

from aioclients import AioClientsError, InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream import (
    DirectGetBatch,
    JetStream,
    JetStreamError,
    MessageNotFoundError,
    StoredMessage,
    Stream,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def stream(js: JetStream, unique_name: str) -> Stream:
    """A Direct Get stream with 10 messages: seq n is on ``.a`` when odd, ``.b`` when even."""
    s = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    for n in range(1, 11):
        await js.publish(f"{unique_name}.{'a' if n % 2 else 'b'}", b"m%d" % n)
    return s


async def _read(batch: DirectGetBatch) -> list[StoredMessage]:
    return [m async for m in batch]


async def _seqs(batch: DirectGetBatch) -> list[int]:
    return [m.seq async for m in batch]


# -- odd stream states -----------------------------------------------------------------------


async def test_deleted_messages_inside_a_batch_range_are_skipped(stream: Stream) -> None:
    for seq in (3, 4, 10):
        await stream.delete_msg(seq)

    first = stream.direct_get_batch(batch=5)
    assert await _seqs(first) == [1, 2, 5, 6, 7]
    assert (first.last_seq, first.num_pending) == (7, 2)

    # Starting on a deleted sequence starts at the next stored one.
    from_deleted = stream.direct_get_batch(batch=2, seq=3)
    assert await _seqs(from_deleted) == [5, 6]

    # The deleted last message is not there; the batch ends cleanly before it.
    tail = stream.direct_get_batch(batch=5, seq=8)
    assert await _seqs(tail) == [8, 9]
    assert tail.num_pending == 0

    # Starting past every stored message is an empty answer, not an error.
    empty = stream.direct_get_batch(batch=5, seq=10)
    assert await _seqs(empty) == []
    assert empty.num_pending == 0

    with pytest.raises(MessageNotFoundError):
        await stream.direct_get(4)


async def test_batches_of_one_walk_a_stream_with_holes(stream: Stream) -> None:
    for seq in (2, 5, 6):
        await stream.delete_msg(seq)
    seen: list[int] = []
    seq = 1
    for _ in range(20):
        page = stream.direct_get_batch(batch=1, seq=seq)
        seen += await _seqs(page)
        if not page.num_pending:
            break
        assert page.last_seq is not None
        seq = page.last_seq + 1
    assert seen == [1, 3, 4, 7, 8, 9, 10]


async def test_purged_streams(js: JetStream, stream: Stream) -> None:
    assert await stream.purge(subject=f"{stream.name}.a") == 5
    only_b = stream.direct_get_batch(batch=10)
    assert await _seqs(only_b) == [2, 4, 6, 8, 10]
    assert only_b.num_pending == 0
    last = [m.subject async for m in stream.direct_get_last_for([f"{stream.name}.>"])]
    assert last == [f"{stream.name}.b"]

    assert await stream.purge() == 5
    empty = stream.direct_get_batch(batch=10)
    assert await _read(empty) == []
    assert empty.num_pending == 0
    assert await _read(stream.direct_get_last_for([f"{stream.name}.>"])) == []
    with pytest.raises(MessageNotFoundError):
        await stream.direct_get(last_by_subj=f"{stream.name}.a")

    ack = await js.publish(f"{stream.name}.c", b"new")
    assert ack.seq == 11
    assert await _seqs(stream.direct_get_batch(batch=10)) == [11]
    # A point in time before the purge has nothing left to show.
    assert await _read(stream.direct_get_last_for([f"{stream.name}.>"], up_to_seq=10)) == []


async def test_start_time_in_the_future_is_empty(stream: Stream) -> None:
    future = datetime.now(timezone.utc) + timedelta(days=1)

    batch = stream.direct_get_batch(batch=5, start_time=future)
    assert await _read(batch) == []
    assert batch.num_pending == 0
    with pytest.raises(MessageNotFoundError):
        await stream.direct_get(start_time=future)
    # Far in the past means from the start.
    ancient = datetime(1990, 1, 1, tzinfo=timezone.utc)
    assert await _seqs(stream.direct_get_batch(batch=2, start_time=ancient)) == [1, 2]


async def test_multi_last_on_subjects_without_messages(stream: Stream) -> None:
    name = stream.name
    for subjects in ([f"{name}.none"], [f"{name}.none.>"], [f"{name}.x", f"{name}.y.*"]):
        result = stream.direct_get_last_for(subjects)
        assert await _read(result) == []
        assert result.num_pending == 0
    mixed = [m.seq async for m in stream.direct_get_last_for([f"{name}.none", f"{name}.b"])]
    assert mixed == [10]


async def test_multi_last_up_to_seq_on_and_past_the_end(stream: Stream) -> None:
    at_end = stream.direct_get_last_for([f"{stream.name}.>"], up_to_seq=10)
    assert await _seqs(at_end) == [9, 10]
    assert at_end.up_to_seq == 10

    await stream.delete_msg(8)
    at_hole = stream.direct_get_last_for([f"{stream.name}.>"], up_to_seq=8)
    assert await _seqs(at_hole) == [6, 7]

    # Past the end: the server answers "No Results" (404); the iterator ends promptly,
    # without an error, and never yields anything after the last sequence.
    start = time.monotonic()
    past = stream.direct_get_last_for([f"{stream.name}.>"], up_to_seq=1000)
    assert all(seq <= 10 for seq in await _seqs(past))
    assert time.monotonic() - start < 2


async def test_multi_last_pages_follow_sequence_order_not_subject_order(
    js: JetStream, unique_name: str
) -> None:
    s = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    subjects = [f"{unique_name}.k{i:02d}" for i in range(25)]
    rnd = random.Random(7)
    latest: dict[str, int] = {}
    for subject in [*reversed(subjects), *rnd.sample(subjects, 10), subjects[0]]:
        latest[subject] = (await js.publish(subject, subject.encode())).seq
    for seq in rnd.sample(range(1, 26), 5):
        if seq not in latest.values():
            await s.delete_msg(seq)

    for page in (1, 3, 10, 24, 25, None):
        result = s.direct_get_last_for([f"{unique_name}.>"], batch=page)
        got = [(m.subject, m.seq) async for m in result]
        assert sorted(got) == sorted(latest.items()), f"batch={page}"
        assert [seq for _, seq in got] == sorted(latest.values())
        assert result.num_pending == 0


async def test_concurrent_batches_while_publishing(
    js: JetStream, stream: Stream, wait_for: WaitFor
) -> None:
    subs = len(js.nc._subs)

    async def reader() -> list[int]:
        return await _seqs(stream.direct_get_batch(batch=10))

    async def writer() -> None:
        for i in range(50):
            await js.publish_async(f"{stream.name}.w", b"w%d" % i)
        await js.publish_async_complete(timeout=10)

    *reads, _ = await asyncio.wait_for(asyncio.gather(*(reader() for _ in range(25)), writer()), 20)
    assert all(r == list(range(1, 11)) for r in reads)

    async def released() -> bool:
        return len(js.nc._subs) <= subs + 1  # + the ack subscription the writer opened

    await wait_for(released, timeout=5, what="every batch to release its inbox")
    assert await _seqs(stream.direct_get_batch(batch=100, seq=11)) == list(range(11, 61))


async def test_unicode_stream_names_and_subjects_end_to_end(
    js: JetStream, unique_name: str
) -> None:
    name = f"{unique_name}_Ünïcødé_😀"
    s = await js.create_stream(name, subjects=[f"{unique_name}.ü.>"], allow_direct=True)
    subjects = [f"{unique_name}.ü.日本", f"{unique_name}.ü.😀", f"{unique_name}.ü.ß"]
    for subject in subjects:
        ack = await js.publish(subject, subject.encode(), headers={"X-Uni": "välue ✓"})
        assert ack.stream == name
    assert (await js.stream(name)).name == name
    assert [m.subject async for m in s.direct_get_batch(batch=10)] == subjects
    last = [m.subject async for m in s.direct_get_last_for([f"{unique_name}.ü.*"], batch=1)]
    assert last == subjects
    msg = await s.direct_get(last_by_subj=subjects[1])
    assert (msg.seq, msg.data, msg.headers) == (2, subjects[1].encode(), {"X-Uni": "välue ✓"})
    assert [m.seq async for m in s.direct_get_batch(batch=5, next_by_subj=subjects[2])] == [3]


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.direct_get(2**64),
        lambda s: s.direct_get_batch(batch=2**64),
        lambda s: s.direct_get_batch(batch=1, seq=2**64),
        lambda s: s.direct_get_batch(batch=1, max_bytes=2**64),
        lambda s: s.direct_get_last_for([f"{s.name}.>"], up_to_seq=2**64),
        lambda s: s.get_msg(2**64),
        lambda s: s.delete_msg(2**64),
        lambda s: s.purge(keep=2**64),
    ],
    ids=["get", "batch", "batch-seq", "max_bytes", "up_to_seq", "get_msg", "delete_msg", "keep"],
)
async def test_huge_numbers_fail_fast_with_a_typed_error_or_are_served(
    js: JetStream, stream: Stream, call: Callable[[Stream], Any]
) -> None:
    subs = len(js.nc._subs)
    start = time.monotonic()
    error: AioClientsError | None = None
    try:
        await _attempt(stream, call)
    except AioClientsError as exc:
        error = exc
    assert not isinstance(error, TimeoutError), repr(error)
    assert time.monotonic() - start < 2
    assert len(js.nc._subs) == subs
    assert (await stream.info()).state.messages == 10


# -- stored headers that look like status replies --------------------------------------------


@pytest.mark.parametrize("status", ["404", "204", "200"])
async def test_a_user_header_named_status_is_not_a_status_reply(
    js: JetStream, stream: Stream, status: str
) -> None:
    ack = await js.publish(f"{stream.name}.s", b"payload", headers={"Status": status})
    assert (await stream.get_msg(ack.seq)).headers == {"Status": status}  # stored fine

    msg = await stream.direct_get(ack.seq)
    assert (msg.seq, msg.data, msg.headers) == (ack.seq, b"payload", {"Status": status})


@pytest.mark.parametrize("status", ["404", "204"])
async def test_a_user_header_named_status_does_not_cut_a_batch_short(
    js: JetStream, stream: Stream, status: str
) -> None:
    ack = await js.publish(f"{stream.name}.s", b"payload", headers={"Status": status})
    await js.publish(f"{stream.name}.t", b"after")

    batch = stream.direct_get_batch(batch=100, seq=ack.seq - 1)
    assert await _seqs(batch) == [ack.seq - 1, ack.seq, ack.seq + 1]
    multi = stream.direct_get_last_for([f"{stream.name}.>"])
    assert await _seqs(multi) == [9, 10, ack.seq, ack.seq + 1]


# -- bad arguments ---------------------------------------------------------------------------


def _naive() -> datetime:
    return datetime(2024, 1, 1)


BAD_CALLS: dict[str, Callable[[Stream], Any]] = {
    "batch=0": lambda s: s.direct_get_batch(batch=0),
    "batch=-1": lambda s: s.direct_get_batch(batch=-1),
    "batch=True": lambda s: s.direct_get_batch(batch=True),
    "batch='5'": lambda s: s.direct_get_batch(batch="5"),
    "batch=1.5": lambda s: s.direct_get_batch(batch=1.5),
    "batch seq=0": lambda s: s.direct_get_batch(batch=1, seq=0),
    "batch seq=-1": lambda s: s.direct_get_batch(batch=1, seq=-1),
    "batch seq=True": lambda s: s.direct_get_batch(batch=1, seq=True),
    "batch seq='1'": lambda s: s.direct_get_batch(batch=1, seq="1"),
    "max_bytes=0": lambda s: s.direct_get_batch(batch=1, max_bytes=0),
    "max_bytes=-1": lambda s: s.direct_get_batch(batch=1, max_bytes=-1),
    "max_bytes='1'": lambda s: s.direct_get_batch(batch=1, max_bytes="1"),
    "batch naive start_time": lambda s: s.direct_get_batch(batch=1, start_time=_naive()),
    "batch seq+start_time": lambda s: s.direct_get_batch(
        batch=1, seq=1, start_time=datetime.now(timezone.utc)
    ),
    "batch next_by_subj=''": lambda s: s.direct_get_batch(batch=1, next_by_subj=""),
    "get seq=0": lambda s: s.direct_get(0),
    "get seq=-3": lambda s: s.direct_get(-3),
    "get seq=True": lambda s: s.direct_get(True),
    "get seq=1.0": lambda s: s.direct_get(1.0),
    "get no selector": lambda s: s.direct_get(),
    "get last_by_subj=123": lambda s: s.direct_get(last_by_subj=123),
    "get last_by_subj=''": lambda s: s.direct_get(last_by_subj=""),
    "get last_by_subj 'a b'": lambda s: s.direct_get(last_by_subj="a b"),
    "get last_by_subj+seq": lambda s: s.direct_get(1, last_by_subj="a"),
    "get next_by_subj 'a..b'": lambda s: s.direct_get(next_by_subj="a..b"),
    "get naive start_time": lambda s: s.direct_get(start_time=_naive()),
    "last_for []": lambda s: s.direct_get_last_for([]),
    "last_for ''": lambda s: s.direct_get_last_for(""),
    "last_for [1]": lambda s: s.direct_get_last_for([1]),
    "last_for ['']": lambda s: s.direct_get_last_for([""]),
    "last_for 1025": lambda s: s.direct_get_last_for([f"s.{i}" for i in range(1025)]),
    "last_for up_to_seq=0": lambda s: s.direct_get_last_for(["a"], up_to_seq=0),
    "last_for up_to_seq=True": lambda s: s.direct_get_last_for(["a"], up_to_seq=True),
    "last_for batch=0": lambda s: s.direct_get_last_for(["a"], batch=0),
    "last_for naive up_to_time": lambda s: s.direct_get_last_for(["a"], up_to_time=_naive()),
    "last_for seq+time": lambda s: s.direct_get_last_for(
        ["a"], up_to_seq=1, up_to_time=datetime.now(timezone.utc)
    ),
    "get_msg seq=0": lambda s: s.get_msg(0),
    "get_msg nothing": lambda s: s.get_msg(),
    "delete_msg seq=0": lambda s: s.delete_msg(0),
    "delete_msg seq='1'": lambda s: s.delete_msg("1"),
    "purge keep=-1": lambda s: s.purge(keep=-1),
    "purge seq+keep": lambda s: s.purge(seq=1, keep=1),
    "purge subject=''": lambda s: s.purge(subject=""),
}

BUGGY_CALLS: dict[str, Callable[[Stream], Any]] = {
    # AttributeError: format_rfc3339 reads .tzinfo of whatever it is given.
    "get start_time=str": lambda s: s.direct_get(start_time="2024-01-01T00:00:00Z"),
    "get start_time=int": lambda s: s.direct_get(start_time=0),
    "batch start_time=str": lambda s: s.direct_get_batch(batch=1, start_time="2024-01-01"),
    "last_for up_to_time=str": lambda s: s.direct_get_last_for(["a"], up_to_time="2024"),
    # TypeError: list(subjects) of a non-iterable.
    "last_for None": lambda s: s.direct_get_last_for(None),
    "last_for 123": lambda s: s.direct_get_last_for(123),
    # bool passes isinstance(int) and goes to the server, which fails to parse it.
    "max_bytes=True": lambda s: s.direct_get_batch(batch=1, max_bytes=True),
    "get_msg seq=True": lambda s: s.get_msg(True),
    "delete_msg seq=True": lambda s: s.delete_msg(True),
    "purge seq=True": lambda s: s.purge(seq=True),
}


async def _attempt(stream: Stream, call: Callable[[Stream], Any]) -> None:
    """Make the call and, for an iterator, read it: all within a bounded time."""

    async def run() -> None:
        result = call(stream)
        if isinstance(result, DirectGetBatch):
            await _read(result)
        else:
            await result

    await asyncio.wait_for(run(), 5)


@pytest.mark.parametrize("name", list(BAD_CALLS))
async def test_bad_direct_get_arguments_raise_invalid_argument(
    js: JetStream, stream: Stream, name: str
) -> None:
    subs = len(js.nc._subs)
    with pytest.raises(InvalidArgumentError):
        await _attempt(stream, BAD_CALLS[name])
    assert len(js.nc._subs) == subs
    assert (await stream.info()).state.messages == 10  # nothing was deleted or purged


@pytest.mark.parametrize("name", list(BUGGY_CALLS))
async def test_wrong_typed_direct_get_arguments_raise_invalid_argument(
    stream: Stream, name: str
) -> None:
    with pytest.raises(InvalidArgumentError):
        await _attempt(stream, BUGGY_CALLS[name])


# -- a responder that stalls or misbehaves -------------------------------------------------


def _message_headers(stream: str, seq: int, pending: int) -> dict[str, str]:
    return {
        "Nats-Stream": stream,
        "Nats-Subject": f"{stream}.x",
        "Nats-Sequence": str(seq),
        "Nats-Time-Stamp": "2024-01-02T03:04:05.123456789Z",
        "Nats-Num-Pending": str(pending),
        "Nats-Last-Sequence": str(seq - 1),
    }


class FakeDirect:
    """Answers a stream's Direct Get requests with canned replies, then stays silent."""

    def __init__(self, nc: NATS, stream: str) -> None:
        self.nc = nc
        self.stream = stream
        self.replies: list[tuple[dict[str, str] | None, bytes]] = []
        self.requests = 0

    async def _on_request(self, msg: NatsMsg) -> None:
        if msg.data == PROBE:
            await self.nc.publish(msg.reply, b"")
            return
        self.requests += 1
        for headers, data in self.replies:
            await self.nc.publish(msg.reply, data, headers=headers)

    async def start(self) -> None:
        await self.nc.subscribe(f"$JS.API.DIRECT.GET.{self.stream}", cb=self._on_request)
        await self.nc.flush()


@pytest.fixture
async def fake(nats_server: Server, js: JetStream, unique_name: str) -> AsyncIterator[FakeDirect]:
    # No allow_direct: the server does not answer Direct Get for this stream, we do.
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    nc = await nats.connect(nats_server.url)
    try:
        responder = FakeDirect(nc, unique_name)
        await responder.start()
        await until_visible(js.nc, f"$JS.API.DIRECT.GET.{unique_name}")
        yield responder
    finally:
        await nc.close()


@pytest.mark.parametrize("kind", ["batch", "last_for"])
async def test_cancelling_a_stalled_batch_releases_everything(
    js: JetStream, fake: FakeDirect, wait_for: WaitFor, kind: str
) -> None:
    ctx = JetStream(js.nc, timeout=30.0)  # the stall would last this long
    try:
        stream = await ctx.stream(fake.stream)
        fake.replies = [(_message_headers(fake.stream, n, 5 - n), b"d%d" % n) for n in (1, 2)]
        subs = len(js.nc._subs)
        got: list[int] = []

        async def consume() -> None:
            if kind == "batch":
                batch = stream.direct_get_batch(batch=5)
            else:
                batch = stream.direct_get_last_for([f"{fake.stream}.>"])
            async for msg in batch:
                got.append(msg.seq)

        task = asyncio.ensure_future(consume())

        async def two_read() -> bool:
            return len(got) == 2

        await wait_for(two_read, timeout=5, what="the two replies")
        assert len(js.nc._subs) == subs + 1  # the batch's reply inbox
        await asyncio.sleep(0.05)
        assert not task.done()  # stalled, waiting for the third message

        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(js.nc._subs) == subs
        assert ctx.publish_async_pending == 0

        # The context still works.
        ack = await ctx.publish(f"{fake.stream}.y", b"after")
        assert ack.seq == 1
        assert (await stream.get_msg(1)).data == b"after"
    finally:
        await ctx.close()


async def test_timeout_of_a_stalled_batch_is_typed_and_releases_the_inbox(
    js: JetStream, fake: FakeDirect
) -> None:
    ctx = JetStream(js.nc, timeout=0.3)
    try:
        stream = await ctx.stream(fake.stream)
        fake.replies = [(_message_headers(fake.stream, 1, 4), b"d1")]
        subs = len(js.nc._subs)
        got: list[int] = []

        async def consume() -> None:
            async for msg in stream.direct_get_batch(batch=5):
                got.append(msg.seq)

        start = time.monotonic()
        with pytest.raises(TimeoutError) as excinfo:
            await consume()
        assert isinstance(excinfo.value, AioClientsError)
        assert got == [1]
        assert time.monotonic() - start < 2
        assert len(js.nc._subs) == subs
    finally:
        await ctx.close()


MALFORMED: dict[str, tuple[list[tuple[dict[str, str] | None, bytes]], type[Exception]]] = {
    "no headers": ([(None, b"raw")], RemoteProtocolError),
    "no timestamp": (
        [({"Nats-Subject": "s.x", "Nats-Sequence": "1", "Nats-Num-Pending": "0"}, b"x")],
        RemoteProtocolError,
    ),
    "bad timestamp": (
        [
            (
                {
                    "Nats-Subject": "s.x",
                    "Nats-Sequence": "1",
                    "Nats-Time-Stamp": "yesterday",
                    "Nats-Num-Pending": "0",
                },
                b"x",
            )
        ],
        RemoteProtocolError,
    ),
    "bad sequence": (
        [
            (
                {
                    "Nats-Subject": "s.x",
                    "Nats-Sequence": "one",
                    "Nats-Time-Stamp": "2024-01-02T03:04:05Z",
                },
                b"x",
            )
        ],
        RemoteProtocolError,
    ),
    "bad pending": (
        [
            (
                {
                    "Nats-Subject": "s.x",
                    "Nats-Sequence": "1",
                    "Nats-Time-Stamp": "2024-01-02T03:04:05Z",
                    "Nats-Num-Pending": "many",
                },
                b"x",
            )
        ],
        RemoteProtocolError,
    ),
    "unknown status": ([({"Status": "500", "Description": "Boom"}, b"")], JetStreamError),
    "bad request status": ([({"Status": "408", "Description": "Bad"}, b"")], JetStreamError),
}


@pytest.mark.parametrize("name", list(MALFORMED))
async def test_malformed_replies_raise_typed_errors_and_release_the_inbox(
    js: JetStream, fake: FakeDirect, name: str
) -> None:
    ctx = JetStream(js.nc, timeout=2.0)
    try:
        stream = await ctx.stream(fake.stream)
        fake.replies, error = MALFORMED[name]
        subs = len(js.nc._subs)
        with pytest.raises(error):
            await asyncio.wait_for(_read(stream.direct_get_batch(batch=5)), 3)
        with pytest.raises(error):
            await asyncio.wait_for(stream.direct_get(1), 3)
        assert len(js.nc._subs) == subs
    finally:
        await ctx.close()
