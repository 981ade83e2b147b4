"""Atomic batch publish (ADR-50) and scheduled messages (ADR-51) on a real nats-server.

"Nothing is stored" is checked by reading the stream afterwards; scheduled
messages are waited for on a consumer of the target subject, with a deadline.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from support import RetryLog, Server, retry_log

from aioclients import InvalidArgumentError
from aioclients.jetstream import (
    BatchAbortedError,
    BatchAck,
    BatchTimeoutError,
    JetStream,
    JetStreamError,
    MaxPayloadError,
    ServerTooOldError,
    connect,
)
from aioclients.testing import FaultProxy

pytestmark = pytest.mark.timeout(60)


async def _count(js: JetStream, stream: str) -> int:
    return (await js.stream_info(stream)).state.messages


@pytest.fixture
async def atomic(js: JetStream, unique_name: str) -> str:
    """A stream named ``unique_name`` taking ``<name>.>`` with allow_atomic."""
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_atomic=True)
    return unique_name


# -- atomic batches --------------------------------------------------------------------------


async def test_a_batch_is_stored_whole(js: JetStream, atomic: str) -> None:
    ack = await js.publish_batch(
        [
            (f"{atomic}.a", b"one"),
            (f"{atomic}.b", b"two", {"Trace": "t-1", "Multi": ["x", "y"]}),
            (f"{atomic}.a", b"three"),
        ]
    )
    assert isinstance(ack, BatchAck)
    assert (ack.stream, ack.seq, ack.count) == (atomic, 3, 3)
    assert 0 < len(ack.batch_id) <= 64
    stream = await js.stream(atomic)
    stored = [await stream.get_msg(seq) for seq in (1, 2, 3)]
    assert [(m.subject, m.data) for m in stored] == [
        (f"{atomic}.a", b"one"),
        (f"{atomic}.b", b"two"),
        (f"{atomic}.a", b"three"),
    ]
    assert stored[1].headers is not None
    assert stored[1].headers["Trace"] == "t-1"
    assert stored[1].headers["Multi"] == ["x", "y"]
    assert stored[2].headers is not None
    assert stored[2].headers["Nats-Batch-Id"] == ack.batch_id


async def test_one_message_is_a_batch_too(js: JetStream, atomic: str) -> None:
    ack = await js.publish_batch([(f"{atomic}.a", b"only")])
    assert (ack.seq, ack.count) == (1, 1)
    assert await _count(js, atomic) == 1


async def test_the_servers_limit_is_reached_and_not_passed(js: JetStream, atomic: str) -> None:
    full = [(f"{atomic}.a", b"x" * 100)] * 1000
    ack = await js.publish_batch(full)
    assert (ack.seq, ack.count) == (1000, 1000)

    taken = itertools.count()

    def too_many() -> Iterator[tuple[str, bytes]]:
        for _ in taken:
            yield (f"{atomic}.a", b"x")

    with pytest.raises(BatchAbortedError, match="more than 1,000") as info:
        await js.publish_batch(too_many())
    assert info.value.err_code is None
    assert next(taken) == 1001  # not read past the limit
    assert await _count(js, atomic) == 1000


@pytest.fixture
def retries() -> Iterator[RetryLog]:
    with retry_log("aioclients.jetstream.batch") as handler:
        yield handler


@pytest.mark.parametrize("size", [1, 3])
async def test_a_batch_no_stream_took_is_sent_again_once_one_listens(
    js: JetStream, unique_name: str, retries: RetryLog, size: int
) -> None:
    # What a cluster answers for a moment after a stream is created: no responders.
    # The context's publish retries (ADR-22) apply; widened here so that creating the
    # stream surely fits between two tries.
    js._jsapi.acks.retry_attempts, js._jsapi.acks.retry_wait = 20, 0.5
    batch = [(f"{unique_name}.a", str(i).encode()) for i in range(size)]
    task = asyncio.ensure_future(js.publish_batch(batch, timeout=30))
    await asyncio.wait_for(retries.seen.wait(), 10)
    assert not task.done()
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_atomic=True)
    ack = await asyncio.wait_for(task, 30)
    assert (ack.stream, ack.seq, ack.count) == (unique_name, size, size)
    assert await _count(js, unique_name) == size  # stored once


async def test_a_batch_no_stream_takes_fails_after_the_retries(
    js: JetStream, unique_name: str, retries: RetryLog
) -> None:
    with pytest.raises(BatchAbortedError, match="no stream stores") as info:
        await js.publish_batch([(f"{unique_name}.a", b"1"), (f"{unique_name}.a", b"2")])
    assert info.value.code == 503
    assert retries.seen.is_set()


async def test_a_stream_without_allow_atomic_stores_nothing(
    js: JetStream, unique_name: str
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    with pytest.raises(BatchAbortedError, match="allow_atomic=True") as info:
        await js.publish_batch([(f"{unique_name}.a", b"1"), (f"{unique_name}.a", b"2")])
    assert info.value.err_code == 10174
    assert isinstance(info.value, JetStreamError)
    assert await _count(js, unique_name) == 0

    await js.update_stream(unique_name, allow_atomic=True)
    ack = await js.publish_batch([(f"{unique_name}.a", b"1"), (f"{unique_name}.a", b"2")])
    assert ack.count == 2


async def test_a_failed_expectation_stores_nothing(js: JetStream, atomic: str) -> None:
    await js.publish(f"{atomic}.a", b"before")
    batch = [
        (f"{atomic}.a", b"1", {"Nats-Expected-Last-Sequence": "5"}),
        (f"{atomic}.b", b"2"),
        (f"{atomic}.c", b"3"),
    ]
    with pytest.raises(BatchAbortedError, match="wrong last sequence") as info:
        await js.publish_batch(batch)
    assert info.value.err_code == 10071
    assert await _count(js, atomic) == 1

    batch[0] = (f"{atomic}.a", b"1", {"Nats-Expected-Last-Sequence": "1"})
    assert (await js.publish_batch(batch)).seq == 4


async def test_a_message_outside_the_stream_leaves_a_gap_and_nothing_is_stored(
    js: JetStream, atomic: str
) -> None:
    # The middle message goes to no stream: the stream sees sequence 1 then 3.
    with pytest.raises(BatchAbortedError, match="incomplete") as info:
        await js.publish_batch(
            [(f"{atomic}.a", b"1"), (f"elsewhere.{atomic}", b"2"), (f"{atomic}.a", b"3")]
        )
    assert info.value.err_code == 10176
    assert await _count(js, atomic) == 0


async def test_no_stream_for_the_first_subject(js: JetStream, unique_name: str) -> None:
    with pytest.raises(BatchAbortedError, match="no stream") as info:
        await js.publish_batch([(f"nowhere.{unique_name}", b"1"), (f"nowhere.{unique_name}", b"2")])
    assert info.value.code == 503


async def test_bad_messages_send_nothing(js: JetStream, atomic: str) -> None:
    with pytest.raises(InvalidArgumentError):
        await js.publish_batch([])
    with pytest.raises(InvalidArgumentError, match=r"messages\[1\]"):
        await js.publish_batch([(f"{atomic}.a", b"1"), (f"{atomic}.a", "text")])
    with pytest.raises(InvalidArgumentError, match="CR or LF"):
        await js.publish_batch(
            [(f"{atomic}.a", b"1"), (f"{atomic}.a", b"2"), (f"{atomic}.a", b"3", {"K": "\n"})]
        )
    big = b"x" * (js.nc.max_payload + 1)
    with pytest.raises(MaxPayloadError):
        await js.publish_batch([(f"{atomic}.a", b"1"), (f"{atomic}.a", big), (f"{atomic}.a", b"")])
    assert await _count(js, atomic) == 0
    assert (await js.publish_batch([(f"{atomic}.a", b"ok")] * 3)).count == 3


async def test_a_server_that_does_not_answer_times_out_with_nothing_stored(
    nats_server: Server, js: JetStream, atomic: str
) -> None:
    async with FaultProxy(nats_server.url) as proxy:
        slow = await connect(f"nats://{proxy.address}", timeout=5)
        try:
            await slow.account_info()  # the API level and version are known
            proxy.freeze()
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(BatchTimeoutError, match="not stored") as info:
                await slow.publish_batch([(f"{atomic}.a", b"1")] * 5, timeout=0.5)
            assert loop.time() - started < 3
            assert isinstance(info.value, TimeoutError)
            assert isinstance(info.value, BatchAbortedError)
            proxy.thaw()
            await slow.account_info()  # what was held back has reached the server
        finally:
            await slow.close()
    assert await _count(js, atomic) == 0


async def test_a_cancelled_batch_stores_nothing(
    nats_server: Server, js: JetStream, atomic: str
) -> None:
    async with FaultProxy(nats_server.url) as proxy:
        slow = await connect(f"nats://{proxy.address}", timeout=5)
        try:
            await slow.account_info()
            proxy.freeze()
            task = asyncio.create_task(slow.publish_batch([(f"{atomic}.a", b"1")] * 3))
            # One turn of the loop: the task sends its first message and waits for
            # the answer (nothing before that suspends it).
            await asyncio.sleep(0)
            assert slow._jsapi.requests.outstanding == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert slow._jsapi.requests.outstanding == 0
            proxy.thaw()
            ack = await slow.publish_batch([(f"{atomic}.b", b"after")])
        finally:
            await slow.close()
    assert (ack.seq, ack.count) == (1, 1)  # the cancelled batch took no sequence
    assert await _count(js, atomic) == 1


async def test_a_commit_without_answer_may_be_stored_and_the_error_says_so(
    nats_server: Server, js: JetStream, atomic: str
) -> None:
    # A one-message batch: its first message is its commit.
    async with FaultProxy(nats_server.url) as proxy:
        slow = await connect(f"nats://{proxy.address}", timeout=5)
        try:
            await slow.account_info()
            proxy.freeze()
            with pytest.raises(BatchTimeoutError, match="may or may not be stored"):
                await slow.publish_batch([(f"{atomic}.a", b"1")], timeout=0.5)
            proxy.thaw()
            await slow.account_info()
        finally:
            await slow.close()
    # The commit reached the server after all: the batch is stored, whole.
    consumer = await js.create_consumer(atomic, ack_policy="none")
    msg = await consumer.next(expires=5)
    assert (msg.subject, msg.data, msg.metadata.sequence.stream) == (f"{atomic}.a", b"1", 1)
    assert await _count(js, atomic) == 1


async def test_an_old_server_is_told_before_anything_is_sent(
    nats_server: Server, js: JetStream, atomic: str
) -> None:
    old = await connect(nats_server.url)
    try:
        # The INFO this connection read says 2.11 (no older server is installable here).
        old.nc._server_info["version"] = "2.11.4"
        with pytest.raises(ServerTooOldError, match=r"2\.12"):
            await old.publish_batch([(f"{atomic}.a", b"1")])
        with pytest.raises(ServerTooOldError, match=r"2\.12"):
            await old.publish_schedule(
                f"{atomic}.s", target=f"{atomic}.t", at=datetime.now(timezone.utc)
            )
        old.nc._server_info["version"] = "2.12.0"
        with pytest.raises(ServerTooOldError, match=r"2\.14"):
            await old.publish_schedule(f"{atomic}.s", target=f"{atomic}.t", every=1)
    finally:
        await old.close()
    assert await _count(js, atomic) == 0


# -- schedules -------------------------------------------------------------------------------


@pytest.fixture
async def scheduled(js: JetStream, unique_name: str) -> str:
    """A stream named ``unique_name`` taking ``<name>.>`` with schedules and TTLs."""
    await js.create_stream(
        unique_name,
        subjects=[f"{unique_name}.>"],
        allow_msg_schedules=True,
        allow_msg_ttl=True,
    )
    return unique_name


async def _next_on(js: JetStream, stream: str, subject: str, count: int) -> list[object]:
    """The first ``count`` messages stored on ``subject``, waiting at most 10 s in all."""
    consumer = await js.create_consumer(stream, filter_subject=subject, ack_policy="none")

    async def take() -> list[object]:
        return [await consumer.next(expires=10) for _ in range(count)]

    return await asyncio.wait_for(take(), 10)


async def test_an_at_schedule_fires_once(js: JetStream, scheduled: str) -> None:
    when = datetime.now(timezone.utc) + timedelta(seconds=1)
    ack = await js.publish_schedule(
        f"{scheduled}.sched.once",
        b"later",
        target=f"{scheduled}.out",
        at=when,
        headers={"Order": "42"},
    )
    assert ack.stream == scheduled
    (msg,) = await _next_on(js, scheduled, f"{scheduled}.out", 1)
    assert msg.data == b"later"  # type: ignore[attr-defined]
    assert datetime.now(timezone.utc) >= when
    headers = msg.headers  # type: ignore[attr-defined]
    assert headers["Order"] == "42"
    assert headers["Nats-Scheduler"] == f"{scheduled}.sched.once"


async def test_an_every_schedule_repeats(js: JetStream, scheduled: str) -> None:
    await js.publish_schedule(
        f"{scheduled}.sched.tick", b"tick", target=f"{scheduled}.ticks", every=1, ttl=60
    )
    first, second = await _next_on(js, scheduled, f"{scheduled}.ticks", 2)
    assert first.data == second.data == b"tick"  # type: ignore[attr-defined]
    # The server copies Nats-Schedule-TTL as written (nats.go's form of ttl=60).
    assert first.headers["Nats-TTL"] == "1m0s"  # type: ignore[attr-defined]


async def test_a_per_second_cron_in_a_time_zone_fires(js: JetStream, scheduled: str) -> None:
    await js.publish_schedule(
        f"{scheduled}.sched.cron",
        b"cron",
        target=f"{scheduled}.cron",
        cron="* * * * * *",
        time_zone="Europe/Amsterdam",
    )
    (msg,) = await _next_on(js, scheduled, f"{scheduled}.cron", 1)
    assert msg.data == b"cron"  # type: ignore[attr-defined]


async def test_a_schedule_with_a_source_publishes_its_last_message(
    js: JetStream, scheduled: str
) -> None:
    """nats.go's WithScheduleSource: each firing samples the source subject's last
    message; the schedule's own payload is the fallback while it holds none."""
    source, target = f"{scheduled}.gauge", f"{scheduled}.sampled"
    await js.publish_schedule(
        f"{scheduled}.sched.empty", b"own", target=f"{scheduled}.fallback", every=1, source=source
    )
    (fallback,) = await _next_on(js, scheduled, f"{scheduled}.fallback", 1)
    assert fallback.data == b"own"  # type: ignore[attr-defined]
    await js.publish(source, b"21.5", headers={"Unit": "C"})
    ack = await js.publish_schedule(
        f"{scheduled}.sched.sample", b"own", target=target, every=1, source=source
    )
    stored = await (await js.stream(scheduled)).get_msg(ack.seq)
    assert stored.headers is not None
    assert stored.headers["Nats-Schedule-Source"] == source
    (sample,) = await _next_on(js, scheduled, target, 1)
    assert sample.data == b"21.5"  # type: ignore[attr-defined]
    assert sample.headers["Unit"] == "C"  # type: ignore[attr-defined]


async def test_a_source_outside_the_stream_is_refused_with_a_hint(
    js: JetStream, scheduled: str
) -> None:
    with pytest.raises(JetStreamError, match="same stream") as info:
        await js.publish_schedule(
            f"{scheduled}.s", target=f"{scheduled}.t", every=1, source=f"other.{scheduled}"
        )
    assert info.value.err_code == 10203
    assert await _count(js, scheduled) == 0


async def test_a_stream_without_schedules_refuses_with_a_hint(
    js: JetStream, unique_name: str
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    with pytest.raises(JetStreamError, match="allow_msg_schedules=True") as info:
        await js.publish_schedule(f"{unique_name}.s", target=f"{unique_name}.t", every=1)
    assert info.value.err_code == 10188
    assert await _count(js, unique_name) == 0


async def test_a_target_outside_the_stream_is_refused(js: JetStream, scheduled: str) -> None:
    with pytest.raises(JetStreamError, match="same stream") as info:
        await js.publish_schedule(f"{scheduled}.s", target=f"other.{scheduled}", every=1)
    assert info.value.err_code == 10190


async def test_bad_schedules_send_nothing(js: JetStream, scheduled: str) -> None:
    subject, target = f"{scheduled}.s", f"{scheduled}.t"
    with pytest.raises(InvalidArgumentError, match="exactly one"):
        await js.publish_schedule(subject, target=target)
    with pytest.raises(InvalidArgumentError, match="aware"):
        await js.publish_schedule(subject, target=target, at=datetime(2030, 1, 1))
    with pytest.raises(InvalidArgumentError, match=">= 1"):
        await js.publish_schedule(subject, target=target, every=0.5)
    with pytest.raises(InvalidArgumentError, match="6 fields"):
        await js.publish_schedule(subject, target=target, cron="* * * * *")
    with pytest.raises(InvalidArgumentError, match="differ"):
        await js.publish_schedule(subject, target=subject, every=1)
    with pytest.raises(InvalidArgumentError, match="source must differ"):
        await js.publish_schedule(subject, target=target, every=1, source=target)
    with pytest.raises(InvalidArgumentError, match=r"source: .*wildcard"):
        await js.publish_schedule(subject, target=target, every=1, source=f"{scheduled}.*")
    assert await _count(js, scheduled) == 0
