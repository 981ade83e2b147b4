"""ADR-31 Direct Get (single, batched and multi_last) against a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone

import nats
import pytest
from nats.aio.msg import Msg as NatsMsg
from support import Server, WaitFor, subscriptions_live

from aioclients import InvalidArgumentError
from aioclients.jetstream import (
    DirectGetBatch,
    DirectGetUnavailableError,
    JetStream,
    MessageNotFoundError,
    StoredMessage,
    Stream,
    TooManySubjectsError,
)

pytestmark = pytest.mark.timeout(60)


#: Headers the server adds to Direct Get replies; they are not the user's.
BOOKKEEPING = {
    "Nats-Stream",
    "Nats-Subject",
    "Nats-Sequence",
    "Nats-Time-Stamp",
    "Nats-Num-Pending",
    "Nats-Last-Sequence",
    "Nats-UpTo-Sequence",
}


@pytest.fixture
async def stream(js: JetStream, unique_name: str) -> Stream:
    """A Direct Get stream with 10 messages: seq n is on ``.a`` when odd, ``.b`` when even,
    with data ``m<n>``."""
    s = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    assert s.cached_info.config.allow_direct is True
    for n in range(1, 11):
        await js.publish(f"{unique_name}.{'a' if n % 2 else 'b'}", b"m%d" % n)
    return s


async def _seqs(batch: DirectGetBatch) -> list[int]:
    return [m.seq async for m in batch]


class RequestSpy:
    """A second connection that sees every request sent to a stream's Direct Get API."""

    def __init__(self) -> None:
        self.requests: list[NatsMsg] = []

    async def _on_msg(self, msg: NatsMsg) -> None:
        self.requests.append(msg)


@pytest.fixture
async def spy(nats_server: Server, unique_name: str) -> AsyncIterator[RequestSpy]:
    nc = await nats.connect(nats_server.url)
    try:
        watcher = RequestSpy()
        await nc.subscribe(f"$JS.API.DIRECT.GET.{unique_name}", cb=watcher._on_msg)
        await nc.subscribe(f"$JS.API.DIRECT.GET.{unique_name}.>", cb=watcher._on_msg)
        await subscriptions_live(nc)  # not flush(): its PING can overtake the SUBs
        yield watcher
    finally:
        await nc.close()


# -- single message ------------------------------------------------------------------------------


async def test_direct_get_by_seq(stream: Stream) -> None:
    msg = await stream.direct_get(3)

    assert isinstance(msg, StoredMessage)
    assert (msg.seq, msg.subject, msg.data) == (3, f"{stream.name}.a", b"m3")
    assert msg.headers is None
    assert msg.time.tzinfo is not None
    assert msg.time == (await stream.get_msg(3)).time


async def test_direct_get_last_by_subject_uses_the_subject_appended_form(
    stream: Stream, spy: RequestSpy, wait_for: WaitFor
) -> None:
    last_a = await stream.direct_get(last_by_subj=f"{stream.name}.a")
    last_b = await stream.direct_get(last_by_subj=f"{stream.name}.b")

    assert (last_a.seq, last_a.data) == (9, b"m9")
    assert (last_b.seq, last_b.data) == (10, b"m10")

    async def seen_both() -> bool:
        return len(spy.requests) >= 2

    await wait_for(seen_both, what="the spy to see both requests")
    prefix = f"$JS.API.DIRECT.GET.{stream.name}."
    assert [r.subject for r in spy.requests] == [
        f"{prefix}{stream.name}.a",
        f"{prefix}{stream.name}.b",
    ]
    assert all(r.data == b"" for r in spy.requests)  # ADR-31: no payload in this form


async def test_direct_get_next_by_subject(stream: Stream) -> None:
    first_b = await stream.direct_get(next_by_subj=f"{stream.name}.b")
    assert (first_b.seq, first_b.data) == (2, b"m2")

    from_5 = await stream.direct_get(5, next_by_subj=f"{stream.name}.b")
    assert (from_5.seq, from_5.data) == (6, b"m6")

    at_6 = await stream.direct_get(6, next_by_subj=f"{stream.name}.b")
    assert at_6.seq == 6  # "at or after"

    wildcard = await stream.direct_get(4, next_by_subj=f"{stream.name}.*")
    assert wildcard.seq == 4


async def test_direct_get_start_time(stream: Stream) -> None:
    t6 = (await stream.get_msg(6)).time

    msg = await stream.direct_get(start_time=t6)
    assert msg.seq == 6

    # Any aware timezone denotes the same instant.
    plus_five = timezone(timedelta(hours=5))
    assert (await stream.direct_get(start_time=t6.astimezone(plus_five))).seq == 6

    # Combined with a subject: the first `.a` message at or after t6.
    assert (await stream.direct_get(start_time=t6, next_by_subj=f"{stream.name}.a")).seq == 7

    with pytest.raises(MessageNotFoundError):
        await stream.direct_get(start_time=datetime.now(timezone.utc) + timedelta(hours=1))


async def test_direct_get_missing_raises_message_not_found(stream: Stream) -> None:
    with pytest.raises(MessageNotFoundError) as excinfo:
        await stream.direct_get(99)
    assert excinfo.value.code == 404

    with pytest.raises(MessageNotFoundError):
        await stream.direct_get(last_by_subj=f"{stream.name}.nothing")
    with pytest.raises(MessageNotFoundError):
        await stream.direct_get(10, next_by_subj=f"{stream.name}.a")


async def test_direct_get_naive_datetime_is_invalid(stream: Stream) -> None:
    naive = datetime.now()
    with pytest.raises(InvalidArgumentError):
        await stream.direct_get(start_time=naive)
    with pytest.raises(InvalidArgumentError):
        stream.direct_get_batch(batch=3, start_time=naive)
    with pytest.raises(InvalidArgumentError):
        stream.direct_get_last_for([f"{stream.name}.>"], up_to_time=naive)


async def test_direct_get_argument_validation(stream: Stream) -> None:
    with pytest.raises(InvalidArgumentError):
        await stream.direct_get()
    with pytest.raises(InvalidArgumentError):
        await stream.direct_get(0)
    with pytest.raises(InvalidArgumentError):
        await stream.direct_get(1, last_by_subj=f"{stream.name}.a")
    with pytest.raises(InvalidArgumentError):
        stream.direct_get_batch(batch=0)
    with pytest.raises(InvalidArgumentError):
        stream.direct_get_last_for([])


async def test_direct_get_without_allow_direct_is_unavailable(
    js: JetStream, unique_name: str, wait_for: WaitFor
) -> None:
    plain = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    assert plain.cached_info.config.allow_direct is False
    await js.publish(f"{unique_name}.x", b"x")

    start = time.monotonic()
    with pytest.raises(DirectGetUnavailableError) as excinfo:
        await plain.direct_get(1)
    assert time.monotonic() - start < min(2.0, js.timeout)  # no responders, not a timeout
    assert excinfo.value.code == 503

    with pytest.raises(DirectGetUnavailableError):
        await plain.direct_get(last_by_subj=f"{unique_name}.x")
    start = time.monotonic()
    with pytest.raises(DirectGetUnavailableError):
        await _seqs(plain.direct_get_batch(batch=5))
    with pytest.raises(DirectGetUnavailableError):
        await _seqs(plain.direct_get_last_for([f"{unique_name}.>"]))
    assert time.monotonic() - start < min(2.0, js.timeout)

    # Turning it on makes the same call work: at once on a server alone; on a cluster
    # once the replicas' new interest has reached the server the client is on.
    enabled = await js.update_stream(unique_name, allow_direct=True)

    async def answered() -> bool:
        with contextlib.suppress(DirectGetUnavailableError):
            return (await enabled.direct_get(1)).data == b"x"
        return False

    await wait_for(answered, what="Direct Get to be answered once enabled")


# -- headers -------------------------------------------------------------------------------------


async def test_direct_get_headers_are_the_users_only(js: JetStream, stream: Stream) -> None:
    headers: dict[str, str | list[str]] = {"Trace-Id": "t-1", "X": ["1", "2"]}
    ack = await js.publish(f"{stream.name}.h", b"h", headers=headers, msg_id="hdr-1")
    expected = {"Trace-Id": "t-1", "X": ["1", "2"], "Nats-Msg-Id": "hdr-1"}

    by_seq = await stream.direct_get(ack.seq)
    by_subject = await stream.direct_get(last_by_subj=f"{stream.name}.h")
    [in_batch] = [m async for m in stream.direct_get_batch(batch=1, seq=ack.seq)]
    [in_multi] = [m async for m in stream.direct_get_last_for([f"{stream.name}.h"])]

    for msg in (by_seq, by_subject, in_batch, in_multi):
        assert msg.headers == expected
        assert not BOOKKEEPING & set(msg.headers or {})


# -- batches -------------------------------------------------------------------------------------


async def test_direct_get_batch_from_seq(stream: Stream) -> None:
    batch = stream.direct_get_batch(batch=5, seq=2)
    msgs = [m async for m in batch]

    assert [m.seq for m in msgs] == [2, 3, 4, 5, 6]
    assert [m.data for m in msgs] == [b"m2", b"m3", b"m4", b"m5", b"m6"]
    assert all(m.headers is None for m in msgs)
    # After the batch: 7..10 remain, and 6 was the last sent.
    info = await stream.info()
    assert batch.last_seq == 6
    assert batch.num_pending == info.state.last_seq - 6 == 4
    # Each message says how many matching messages follow it.
    assert [m.num_pending for m in msgs] == [8, 7, 6, 5, 4]
    # The iterator stays exhausted.
    assert [m async for m in batch] == []


async def test_direct_get_batch_larger_than_the_stream(stream: Stream) -> None:
    batch = stream.direct_get_batch(batch=100)

    assert await _seqs(batch) == list(range(1, 11))
    assert batch.num_pending == 0
    assert batch.last_seq == 10


async def test_direct_get_batch_max_bytes_limits_the_count(js: JetStream, unique_name: str) -> None:
    s = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    for n in range(10):
        await js.publish(f"{unique_name}.x", bytes([65 + n]) * 100)

    unbounded = await _seqs(s.direct_get_batch(batch=10))
    bounded = s.direct_get_batch(batch=10, max_bytes=250)
    seqs = await _seqs(bounded)

    assert unbounded == list(range(1, 11))
    assert 1 <= len(seqs) < 5
    assert seqs == list(range(1, len(seqs) + 1))
    assert bounded.last_seq == seqs[-1]
    assert bounded.num_pending == 10 - len(seqs)
    # The smallest bound still makes progress.
    assert await _seqs(s.direct_get_batch(batch=10, max_bytes=1)) == [1]


async def test_direct_get_batch_next_by_subject(stream: Stream) -> None:
    only_b = stream.direct_get_batch(batch=10, next_by_subj=f"{stream.name}.b")
    assert await _seqs(only_b) == [2, 4, 6, 8, 10]
    assert only_b.num_pending == 0

    b_from_5 = stream.direct_get_batch(batch=2, seq=5, next_by_subj=f"{stream.name}.b")
    assert await _seqs(b_from_5) == [6, 8]
    assert b_from_5.num_pending == 1  # seq 10 is left

    wildcard = stream.direct_get_batch(batch=10, seq=8, next_by_subj=f"{stream.name}.*")
    msgs = [m async for m in wildcard]
    assert [(m.seq, m.subject) for m in msgs] == [
        (8, f"{stream.name}.b"),
        (9, f"{stream.name}.a"),
        (10, f"{stream.name}.b"),
    ]


async def test_direct_get_batch_start_time(stream: Stream) -> None:
    t6 = (await stream.get_msg(6)).time

    assert await _seqs(stream.direct_get_batch(batch=3, start_time=t6)) == [6, 7, 8]


async def test_direct_get_batch_past_the_end_is_empty(stream: Stream) -> None:
    batch = stream.direct_get_batch(batch=5, seq=50)

    assert [m async for m in batch] == []
    assert batch.num_pending == 0


async def test_direct_get_batch_as_context_manager(stream: Stream) -> None:
    async with stream.direct_get_batch(batch=10, seq=1) as batch:
        got = []
        async for msg in batch:
            got.append(msg.seq)
            if len(got) == 3:
                break

    assert got == [1, 2, 3]
    # Leaving the block releases the reply subscription: nothing more comes.
    assert [m async for m in batch] == []

    async with stream.direct_get_batch(batch=4, seq=7) as whole:
        assert [m.data async for m in whole] == [b"m7", b"m8", b"m9", b"m10"]
    assert whole.num_pending == 0


# -- multi_last ----------------------------------------------------------------------------------


async def test_adr31_kv_example(js: JetStream, unique_name: str) -> None:
    # ADR-31's example bucket USERS; its stream and bucket names carry unique_name so
    # that the test can share a server.
    # allow_direct is given explicitly, as KV clients do: see the test below.
    bucket = f"USERS_{unique_name}"
    kv = await js.create_stream(
        f"{unique_name}_KV_USERS",
        subjects=[f"$KV.{bucket}.>"],
        max_msgs_per_subject=5,
        allow_direct=True,
    )
    assert kv.cached_info.config.allow_direct is True
    assert kv.cached_info.config.max_msgs_per_subject == 5

    key = f"$KV.{bucket}.1234"
    assert (await js.publish(f"{key}.name", b"Bob")).seq == 1
    assert (await js.publish(f"{key}.surname", b"Smith")).seq == 2
    assert (await js.publish(f"{key}.address", b"1 Main Street")).seq == 3
    t3 = (await kv.get_msg(3)).time
    # A noticeable gap between the two address writes (server clock = this clock).
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0
    while datetime.now(timezone.utc) < t3 + timedelta(milliseconds=20):
        assert loop.time() < deadline
        await asyncio.sleep(0.005)
    assert (await js.publish(f"{key}.address", b"10 Oak Lane")).seq == 4
    t4 = (await kv.get_msg(4)).time
    assert t4 > t3

    async def read(**kwargs: object) -> dict[str, bytes]:
        result = {}
        async for msg in kv.direct_get_last_for([f"{key}.>"], **kwargs):  # type: ignore[arg-type]
            assert msg.subject not in result
            result[msg.subject] = msg.data
        return result

    assert await read() == {
        f"{key}.name": b"Bob",
        f"{key}.surname": b"Smith",
        f"{key}.address": b"10 Oak Lane",
    }
    as_of_3 = {
        f"{key}.name": b"Bob",
        f"{key}.surname": b"Smith",
        f"{key}.address": b"1 Main Street",
    }
    assert await read(up_to_seq=3) == as_of_3
    assert await read(up_to_time=t3 + (t4 - t3) / 2) == as_of_3
    assert await read(up_to_seq=1) == {f"{key}.name": b"Bob"}

    # Specific keys rather than a wildcard.
    some = kv.direct_get_last_for([f"{key}.name", f"{key}.address"])
    assert [(m.subject, m.data) async for m in some] == [
        (f"{key}.name", b"Bob"),
        (f"{key}.address", b"10 Oak Lane"),
    ]
    assert some.up_to_seq == 4

    # Nothing matches: an empty answer.
    assert [m async for m in kv.direct_get_last_for([f"$KV.{bucket}.9999.>"])] == []


async def test_max_msgs_per_subject_alone_does_not_enable_direct_get(
    js: JetStream, unique_name: str
) -> None:
    # ADR-31 says the server sets allow_direct when max_msgs_per_subject > 0; the
    # server this suite runs (nats-server 2.15) does not: it keeps what the client sent.
    s = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], max_msgs_per_subject=5)
    await js.publish(f"{unique_name}.k", b"v")

    assert s.cached_info.config.max_msgs_per_subject == 5
    assert s.cached_info.config.allow_direct is False
    with pytest.raises(DirectGetUnavailableError):
        await s.direct_get(last_by_subj=f"{unique_name}.k")


async def test_multi_last_pages(
    js: JetStream, unique_name: str, spy: RequestSpy, wait_for: WaitFor
) -> None:
    s = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    for i in range(25):
        await js.publish(f"{unique_name}.k{i:02d}", b"v%d" % i)

    result = s.direct_get_last_for([f"{unique_name}.>"], batch=10)
    msgs = [m async for m in result]

    assert [m.subject for m in msgs] == [f"{unique_name}.k{i:02d}" for i in range(25)]
    assert [m.data for m in msgs] == [b"v%d" % i for i in range(25)]
    assert result.up_to_seq == 25
    assert result.num_pending == 0

    async def three_requests() -> bool:
        return len(spy.requests) >= 3

    await wait_for(three_requests, what="three page requests")
    pages = [json.loads(r.data) for r in spy.requests]
    assert len(pages) == 3
    assert all(p["batch"] == 10 and p["multi_last"] == [f"{unique_name}.>"] for p in pages)
    # Every page after the first asks for the first page's point in time.
    assert [p.get("up_to_seq") for p in pages[1:]] == [25, 25]


async def test_multi_last_pages_hold_their_point_in_time(js: JetStream, unique_name: str) -> None:
    s = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    subjects = [f"{unique_name}.k{i:02d}" for i in range(25)]
    for subject in subjects:
        await js.publish(subject, b"old")

    seen: dict[str, list[bytes]] = {}
    updated = False
    async for msg in s.direct_get_last_for([f"{unique_name}.>"], batch=10):
        seen.setdefault(msg.subject, []).append(msg.data)
        if not updated:
            # New values for every subject while the first page is being read.
            for subject in subjects:
                await js.publish(subject, b"new")
            updated = True

    assert sorted(seen) == subjects  # every subject ...
    assert all(values == [b"old"] for values in seen.values())  # ... once, as it was
    # The new values are there for a fresh read.
    fresh = {m.subject: m.data async for m in s.direct_get_last_for([f"{unique_name}.>"])}
    assert set(fresh.values()) == {b"new"}
    assert len(fresh) == 25


async def test_multi_last_too_many_subjects(js: JetStream, unique_name: str) -> None:
    s = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    for i in range(1030):
        await js.publish_async(f"{unique_name}.s{i}", b"x")
    await js.publish_async_complete(timeout=30)
    assert (await s.info()).state.num_subjects == 1030

    with pytest.raises(TooManySubjectsError) as excinfo:
        await _seqs(s.direct_get_last_for([f"{unique_name}.>"]))
    assert excinfo.value.code == 413

    # Up to 1024 is fine.
    narrower = [f"{unique_name}.s{i}" for i in range(1024)]
    assert len(await _seqs(s.direct_get_last_for(narrower))) == 1024
