"""The nsq streaming source against the nsqd emulator, on the shared local[2] session.

The emulator runs in the test's event loop, so every Spark call runs in a thread
(``asyncio.to_thread``); ``foreachBatch`` sinks run in py4j callback threads and
look at the emulator through ``run_coroutine_threadsafe``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from aioclients._errors import ConnectError
from aioclients.spark._errors import DataSourceOptionError
from aioclients.spark._nsq_source import NsqStreamReader
from aioclients.testing import NsqdEmulator

pytestmark = pytest.mark.spark

T = TypeVar("T")
WAIT = 120.0


async def in_thread(spark: Any, fn: Callable[[], T]) -> T:
    def call() -> T:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        return fn()

    return await asyncio.to_thread(call)


async def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


class Recorder:
    """A foreachBatch sink: keeps each batch's rows and what nsqd held in flight then."""

    def __init__(self, nsqd: NsqdEmulator, topic: str, channel: str, fail_batch: int = -1):
        self.loop = asyncio.get_running_loop()
        self.nsqd = nsqd
        self.topic = topic
        self.channel = channel
        self.fail_batch = fail_batch
        self.batches: list[list[Any]] = []
        self.not_in_flight: list[str] = []

    def in_flight(self) -> set[str]:
        async def snapshot() -> set[str]:
            channel = self.nsqd._topics[self.topic].channels[self.channel]
            return {i.decode() for i in channel.in_flight}

        return asyncio.run_coroutine_threadsafe(snapshot(), self.loop).result(30)

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.collect()
        if not rows:
            return
        held = self.in_flight()
        self.not_in_flight.extend(r.id for r in rows if r.id not in held)
        if len(self.batches) == self.fail_batch:
            raise RuntimeError("the sink fails this batch on purpose")
        self.batches.append(rows)

    @property
    def rows(self) -> list[Any]:
        return [r for batch in self.batches for r in batch]


def start_query(
    spark: Any, nsqd: NsqdEmulator, topic: str, sink: Recorder, checkpoint: Path, **options: object
) -> Any:
    reader = (
        spark.readStream.format("nsq")
        .option("nsqd", nsqd.tcp_address)
        .option("topic", topic)
        .option("channel", "spark")
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def channel_of(nsqd: NsqdEmulator, topic: str) -> Any:
    return nsqd._topics[topic].channels["spark"]


async def test_rows_exact_batches_capped_and_finished_only_after_commit(
    spark: Any, nsqd_factory: Any, unique_name: str, tmp_path: Path
) -> None:
    nsqd: NsqdEmulator = await nsqd_factory()
    topic = unique_name[-60:]
    nsqd.create_topic(topic, "spark")
    bodies = [f"m-{i}".encode() for i in range(250)]
    before = time.time()
    nsqd.publish(topic, *bodies)
    sink = Recorder(nsqd, topic, "spark")
    query = await in_thread(
        spark,
        lambda: start_query(
            spark, nsqd, topic, sink, tmp_path / "checkpoint", maxMessagesPerTrigger=100
        ),
    )
    try:
        await wait_for(lambda: len(sink.rows) >= 250, "250 rows")
        # The last batch is finished once Spark has committed it (at the next trigger).
        await wait_for(lambda: not channel_of(nsqd, topic).in_flight, "every message finished")
    finally:
        await in_thread(spark, query.stop)
    assert query.exception() is None

    assert sorted(bytes(r.body) for r in sink.rows) == sorted(bodies), "each message once"
    assert all(len(b) <= 100 for b in sink.batches), "maxMessagesPerTrigger"
    assert len(sink.batches) >= 3
    assert sink.not_in_flight == [], "a batch's messages stay in flight until Spark commits it"
    row = sink.rows[0]
    assert (row.topic, row.channel, row.nsqd, row.attempts) == (
        topic,
        "spark",
        nsqd.tcp_address,
        1,
    )
    assert len(row.id) == 16
    assert before - 5 < row.timestamp.timestamp() < time.time() + 5
    channel = channel_of(nsqd, topic)
    assert (len(channel.queue), channel.requeue_count, channel.timeout_count) == (0, 0, 0)


@pytest.mark.slow
async def test_query_failed_mid_run_and_restarted_loses_no_message(
    spark: Any, nsqd_factory: Any, unique_name: str, tmp_path: Path
) -> None:
    # msg_timeout 2 s: messages of the failed batch come back soon even if not re-queued.
    nsqd: NsqdEmulator = await nsqd_factory(min_msg_timeout=0.5)
    topic = unique_name[-60:]
    nsqd.create_topic(topic, "spark")
    bodies = {f"m-{i}".encode() for i in range(200)}
    nsqd.publish(topic, *sorted(bodies))
    checkpoint = tmp_path / "checkpoint"
    options = {"maxMessagesPerTrigger": 50, "msgTimeout": 2}

    failing = Recorder(nsqd, topic, "spark", fail_batch=1)
    query = await in_thread(
        spark, lambda: start_query(spark, nsqd, topic, failing, checkpoint, **options)
    )
    try:
        with pytest.raises(Exception, match="the sink fails this batch on purpose"):
            await in_thread(spark, lambda: query.awaitTermination(WAIT))
    finally:
        await in_thread(spark, query.stop)
    assert len(failing.batches) == 1
    committed_first = {bytes(r.body) for r in failing.rows}

    again = Recorder(nsqd, topic, "spark")
    query = await in_thread(
        spark, lambda: start_query(spark, nsqd, topic, again, checkpoint, **options)
    )
    try:
        await wait_for(
            lambda: committed_first | {bytes(r.body) for r in again.rows} >= bodies,
            "every message after the restart",
        )
        await wait_for(lambda: not channel_of(nsqd, topic).in_flight, "every message finished")
    finally:
        await in_thread(spark, query.stop)
    assert query.exception() is None
    assert committed_first.isdisjoint({bytes(r.body) for r in again.rows}), (
        "a committed batch is finished: nsqd does not deliver it again"
    )
    assert any(r.attempts > 1 for r in again.rows), "the failed batch came back from nsqd"
    assert again.not_in_flight == []
    assert len(channel_of(nsqd, topic).queue) == 0


def streaming_source_runners() -> list[int]:
    """PIDs of this test process's Python streaming source runners (Spark's driver-side
    process holding the source), found among our own descendants only."""
    parents: dict[int, int] = {}
    commands: dict[int, bytes] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                commands[int(entry)] = f.read()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(b")", 1)[1].split()[1])
    mine = {os.getpid()}
    changed = True
    while changed:
        changed = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                changed = True
    return [p for p in mine if b"python_streaming_source_runner" in commands.get(p, b"")]


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds Spark's runner through /proc")
async def test_query_killed_mid_run_and_restarted_loses_no_message(
    spark: Any, nsqd_factory: Any, unique_name: str, tmp_path: Path
) -> None:
    # The process holding the messages dies without a word (no REQ, no CLS): nsqd
    # re-delivers them once msg_timeout (2 s) has passed.
    nsqd: NsqdEmulator = await nsqd_factory(min_msg_timeout=0.5)
    topic = unique_name[-60:]
    nsqd.create_topic(topic, "spark")
    bodies = {f"m-{i}".encode() for i in range(150)}
    nsqd.publish(topic, *sorted(bodies))
    checkpoint = tmp_path / "checkpoint"
    options = {"maxMessagesPerTrigger": 50, "msgTimeout": 2}

    killed: list[int] = []

    class Killer(Recorder):
        def __call__(self, df: Any, batch_id: int) -> None:
            if self.batches and not killed:
                killed.extend(streaming_source_runners())
                for pid in killed:
                    os.kill(pid, signal.SIGKILL)
                raise RuntimeError("the driver's source process was killed")
            super().__call__(df, batch_id)

    killer = Killer(nsqd, topic, "spark")
    query = await in_thread(
        spark, lambda: start_query(spark, nsqd, topic, killer, checkpoint, **options)
    )
    try:
        with pytest.raises(Exception, match="killed"):
            await in_thread(spark, lambda: query.awaitTermination(WAIT))
    finally:
        await in_thread(spark, query.stop)
    assert killed, "found the streaming source runner"
    committed_first = {bytes(r.body) for r in killer.rows}
    assert 1 <= len(committed_first) <= 50, "one batch committed before the kill"

    again = Recorder(nsqd, topic, "spark")
    query = await in_thread(
        spark, lambda: start_query(spark, nsqd, topic, again, checkpoint, **options)
    )
    try:
        await wait_for(
            lambda: committed_first | {bytes(r.body) for r in again.rows} >= bodies,
            "every message after the restart",
        )
        await wait_for(lambda: not channel_of(nsqd, topic).in_flight, "every message finished")
    finally:
        await in_thread(spark, query.stop)
    channel = channel_of(nsqd, topic)
    assert channel.timeout_count > 0, "the killed runner's messages came back by timeout"
    assert channel.requeue_count == 0
    assert again.not_in_flight == []


async def test_touches_keep_a_slow_batch_in_flight(
    spark: Any, nsqd_factory: Any, unique_name: str, tmp_path: Path
) -> None:
    nsqd: NsqdEmulator = await nsqd_factory(min_msg_timeout=0.5)
    topic = unique_name[-60:]
    nsqd.create_topic(topic, "spark")
    nsqd.publish(topic, *(f"m-{i}".encode() for i in range(20)))
    msg_timeout = 1.5

    class SlowSink(Recorder):
        held_rows = 0

        def __call__(self, df: Any, batch_id: int) -> None:
            rows = df.collect()
            if not rows:
                return
            if not self.batches:
                # Hold the first batch for twice msg_timeout: without TOUCH, nsqd
                # would time its messages out and deliver them again.
                until = time.monotonic() + 2 * msg_timeout
                while time.monotonic() < until:
                    time.sleep(0.05)
                held = self.in_flight()
                self.not_in_flight.extend(r.id for r in rows if r.id not in held)
                self.held_rows = len(rows)
            self.batches.append(rows)

    sink = SlowSink(nsqd, topic, "spark")
    query = await in_thread(
        spark,
        lambda: start_query(spark, nsqd, topic, sink, tmp_path / "cp", msgTimeout=msg_timeout),
    )
    try:
        await wait_for(lambda: len(sink.rows) >= 20, "20 rows")
    finally:
        await in_thread(spark, query.stop)
    assert sink.held_rows > 0, "the first batch was held past msg_timeout"
    assert sink.not_in_flight == []
    assert channel_of(nsqd, topic).timeout_count == 0
    assert len(sink.rows) == 20, "no message delivered twice"


async def test_options_are_checked_and_an_unreachable_nsqd_is_named() -> None:
    with pytest.raises(DataSourceOptionError, match=r"'nsqd'.*or 'lookupd'"):
        NsqStreamReader({"topic": "t", "channel": "c"})
    with pytest.raises(DataSourceOptionError, match="'maxMessagesPerTrigger'"):
        NsqStreamReader(
            {"nsqd": "127.0.0.1:4150", "topic": "t", "channel": "c", "maxMessagesPerTrigger": "0"}
        )
    with pytest.raises(DataSourceOptionError, match="unknown option"):
        NsqStreamReader({"nsqd": "127.0.0.1:4150", "topic": "t", "channel": "c", "x": "1"})
    reader = NsqStreamReader({"nsqd": "127.0.0.1:1", "topic": "t", "channel": "c", "timeout": "5"})
    try:
        with pytest.raises(ConnectError, match="check the 'nsqd' / 'lookupd' options"):
            await asyncio.to_thread(
                reader.latestOffset, reader.initialOffset(), reader.getDefaultReadLimit()
            )
    finally:
        await asyncio.to_thread(reader.stop)
