"""The nsq streaming source on the shared local[2] session, against the nsqd emulator or,
when ``AIOCLIENTS_TEST_NSQD_TCP`` / ``_HTTP`` are set, a real nsqd.

What the tests check about nsqd they read from its HTTP ``/stats`` (channel depth,
in-flight, re-queue and time-out counts, the clients' finish counts), which the
emulator answers as nsqd does, so the same assertions hold on both. The emulator
runs in the test's event loop, so every Spark call and every ``/stats`` request
from the test runs in a thread (``asyncio.to_thread``); ``foreachBatch`` sinks run
in py4j callback threads and may block.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from aioclients import nsq
from aioclients._errors import ConnectError
from aioclients.spark._errors import DataSourceOptionError
from aioclients.spark._nsq_source import NsqStreamReader
from aioclients.testing import NsqdEmulator
from aioclients.testing._nsq_fixtures import external_nsqd

pytestmark = pytest.mark.spark

T = TypeVar("T")
WAIT = 120.0
CHANNEL = "spark"


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


@dataclass
class Nsqd:
    """The nsqd under test, looked at through its HTTP API only.

    ``emulator`` is set when it is an :class:`NsqdEmulator` of this test (started
    with a 0.5 s minimum msg_timeout), ``None`` for an external nsqd.
    """

    tcp_address: str
    http_address: str
    emulator: NsqdEmulator | None = None

    def _http(self, method: str, path: str, **query: str) -> Any:
        url = f"http://{self.http_address}{path}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, method=method)
        with urllib.request.urlopen(request, timeout=30) as reply:
            body = reply.read()
        return json.loads(body) if path == "/stats" else None

    def channel(self, topic: str) -> dict[str, Any]:
        """The channel's ``/stats`` entry, with ``finish_count`` summed over its clients
        (blocking: call it from a thread)."""
        doc = self._http("GET", "/stats", format="json", topic=topic, channel=CHANNEL)
        doc = doc.get("data", doc)  # nsqd before 1.0 wrapped the document
        for t in doc.get("topics") or []:
            for c in t.get("channels") or [] if t["topic_name"] == topic else []:
                if c["channel_name"] == CHANNEL:
                    clients = c.get("clients") or []
                    return {**c, "finish_count": sum(x["finish_count"] for x in clients)}
        raise AssertionError(f"nsqd has no channel {topic}/{CHANNEL}")

    async def prepare(self, topic: str, bodies: list[bytes]) -> None:
        """Create the topic and channel (so nothing is lost before the query starts), publish."""
        await asyncio.to_thread(self._http, "POST", "/topic/create", topic=topic)
        await asyncio.to_thread(self._http, "POST", "/channel/create", topic=topic, channel=CHANNEL)
        async with nsq.Producer(self.tcp_address) as producer:
            for start in range(0, len(bodies), 100):
                await producer.mpublish(topic, bodies[start : start + 100])

    async def wait_drained(self, topic: str) -> dict[str, Any]:
        """Wait until the channel has nothing queued or in flight; its stats then."""
        deadline = time.monotonic() + WAIT
        while True:
            stats = await asyncio.to_thread(self.channel, topic)
            if stats["depth"] == 0 and stats["in_flight_count"] == 0:
                return stats
            if time.monotonic() > deadline:
                raise AssertionError(f"channel never drained: {stats}")
            await asyncio.sleep(0.1)


@pytest.fixture
async def server(unique_name: str) -> AsyncIterator[Nsqd]:
    external = external_nsqd()
    if external is not None:
        found = Nsqd(external.tcp_address, external.http_address)
        yield found
        try:  # tests share the external nsqd: leave no topic behind
            await asyncio.to_thread(found._http, "POST", "/topic/delete", topic=unique_name[-60:])
        except OSError:
            pass
        return
    # msg_timeout down to 0.5 s, as a real nsqd allows 1 s: timed-out messages come back soon.
    async with NsqdEmulator(min_msg_timeout=0.5) as emulator:
        yield Nsqd(emulator.tcp_address, emulator.http_address, emulator)


@dataclass
class Seen:
    """One non-empty micro-batch as the sink saw it, with nsqd's view at that moment."""

    rows: list[Any]
    in_flight: int  # the channel's in_flight_count
    finished: int  # FINs nsqd has counted from the query's connection
    committed_before: int  # rows of this run's earlier batches (Spark committed them)


class Recorder:
    """A foreachBatch sink: keeps each batch's rows and what nsqd reported then."""

    def __init__(self, server: Nsqd, topic: str, fail_batch: int = -1):
        self.server = server
        self.topic = topic
        self.fail_batch = fail_batch
        self.seen: list[Seen] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.collect()
        if not rows:
            return
        self.look(rows)
        if len(self.seen) - 1 == self.fail_batch:
            raise RuntimeError("the sink fails this batch on purpose")

    def look(self, rows: list[Any]) -> None:
        stats = self.server.channel(self.topic)
        before = sum(len(s.rows) for s in self.seen)
        self.seen.append(Seen(rows, stats["in_flight_count"], stats["finish_count"], before))

    @property
    def batches(self) -> list[list[Any]]:
        return [s.rows for s in self.seen]

    @property
    def rows(self) -> list[Any]:
        return [r for batch in self.batches for r in batch]

    def finished_before_commit(self) -> list[str]:
        """Batches nsqd had (partly) finished, or no longer held in flight, before Spark
        committed them: a batch's messages must all be in flight while the sink runs."""
        return [
            f"batch {i}: {len(s.rows)} rows, in flight {s.in_flight}, finished {s.finished} "
            f"with {s.committed_before} rows committed before"
            for i, s in enumerate(self.seen)
            if s.in_flight < len(s.rows) or s.finished > s.committed_before
        ]


def start_query(
    spark: Any, server: Nsqd, topic: str, sink: Recorder, checkpoint: Path, **options: object
) -> Any:
    reader = (
        spark.readStream.format("nsq")
        .option("nsqd", server.tcp_address)
        .option("topic", topic)
        .option("channel", CHANNEL)
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


async def test_rows_exact_batches_capped_and_finished_only_after_commit(
    spark: Any, server: Nsqd, unique_name: str, tmp_path: Path
) -> None:
    topic = unique_name[-60:]
    bodies = [f"m-{i}".encode() for i in range(250)]
    before = time.time()
    await server.prepare(topic, bodies)
    sink = Recorder(server, topic)
    query = await in_thread(
        spark,
        lambda: start_query(
            spark, server, topic, sink, tmp_path / "checkpoint", maxMessagesPerTrigger=100
        ),
    )
    try:
        await wait_for(lambda: len(sink.rows) >= 250, "250 rows")
        # The last batch is finished once Spark has committed it (at the next trigger).
        stats = await server.wait_drained(topic)
    finally:
        await in_thread(spark, query.stop)
    assert query.exception() is None

    assert sorted(bytes(r.body) for r in sink.rows) == sorted(bodies), "each message once"
    assert all(len(b) <= 100 for b in sink.batches), "maxMessagesPerTrigger"
    assert len(sink.batches) >= 3
    assert sink.finished_before_commit() == []
    assert stats["finish_count"] == 250, "every message finished once committed"
    assert (stats["requeue_count"], stats["timeout_count"]) == (0, 0)
    row = sink.rows[0]
    assert (row.topic, row.channel, row.nsqd, row.attempts) == (
        topic,
        CHANNEL,
        server.tcp_address,
        1,
    )
    assert len(row.id) == 16
    assert before - 5 < row.timestamp.timestamp() < time.time() + 5


@pytest.mark.slow
async def test_query_failed_mid_run_and_restarted_loses_no_message(
    spark: Any, server: Nsqd, unique_name: str, tmp_path: Path
) -> None:
    topic = unique_name[-60:]
    bodies = {f"m-{i}".encode() for i in range(200)}
    await server.prepare(topic, sorted(bodies))
    checkpoint = tmp_path / "checkpoint"
    # msgTimeout 2 s: messages of the failed batch come back soon even if not re-queued.
    options = {"maxMessagesPerTrigger": 50, "msgTimeout": 2}

    failing = Recorder(server, topic, fail_batch=1)
    query = await in_thread(
        spark, lambda: start_query(spark, server, topic, failing, checkpoint, **options)
    )
    try:
        with pytest.raises(Exception, match="the sink fails this batch on purpose"):
            await in_thread(spark, lambda: query.awaitTermination(WAIT))
    finally:
        await in_thread(spark, query.stop)
    assert len(failing.batches) == 2, "one batch committed, the next failed in the sink"
    committed_first = {bytes(r.body) for r in failing.batches[0]}
    assert failing.finished_before_commit() == []

    again = Recorder(server, topic)
    query = await in_thread(
        spark, lambda: start_query(spark, server, topic, again, checkpoint, **options)
    )
    try:
        await wait_for(
            lambda: committed_first | {bytes(r.body) for r in again.rows} >= bodies,
            "every message after the restart",
        )
        stats = await server.wait_drained(topic)
    finally:
        await in_thread(spark, query.stop)
    assert query.exception() is None
    assert committed_first.isdisjoint({bytes(r.body) for r in again.rows}), (
        "a committed batch is finished: nsqd does not deliver it again"
    )
    assert any(r.attempts > 1 for r in again.rows), "the failed batch came back from nsqd"
    assert again.finished_before_commit() == []
    # Re-queued by the stopping source, or timed out when Spark ended its process first.
    assert stats["requeue_count"] + stats["timeout_count"] > 0, stats


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
    spark: Any, server: Nsqd, unique_name: str, tmp_path: Path
) -> None:
    # The process holding the messages dies without a word (no REQ, no CLS): nsqd
    # re-delivers them once msg_timeout (2 s) has passed.
    topic = unique_name[-60:]
    bodies = {f"m-{i}".encode() for i in range(150)}
    await server.prepare(topic, sorted(bodies))
    checkpoint = tmp_path / "checkpoint"
    options = {"maxMessagesPerTrigger": 50, "msgTimeout": 2}

    killed: list[int] = []

    class Killer(Recorder):
        def __call__(self, df: Any, batch_id: int) -> None:
            if self.seen and not killed:
                killed.extend(streaming_source_runners())
                for pid in killed:
                    os.kill(pid, signal.SIGKILL)
                raise RuntimeError("the driver's source process was killed")
            super().__call__(df, batch_id)

    killer = Killer(server, topic)
    query = await in_thread(
        spark, lambda: start_query(spark, server, topic, killer, checkpoint, **options)
    )
    try:
        with pytest.raises(Exception, match="killed"):
            await in_thread(spark, lambda: query.awaitTermination(WAIT))
    finally:
        await in_thread(spark, query.stop)
    assert killed, "found the streaming source runner"
    committed_first = {bytes(r.body) for r in killer.rows}
    assert 1 <= len(committed_first) <= 50, "one batch committed before the kill"
    assert killer.finished_before_commit() == []

    again = Recorder(server, topic)
    query = await in_thread(
        spark, lambda: start_query(spark, server, topic, again, checkpoint, **options)
    )
    try:
        await wait_for(
            lambda: committed_first | {bytes(r.body) for r in again.rows} >= bodies,
            "every message after the restart",
        )
        stats = await server.wait_drained(topic)
    finally:
        await in_thread(spark, query.stop)
    assert query.exception() is None
    assert committed_first.isdisjoint({bytes(r.body) for r in again.rows}), (
        "a committed batch is finished: nsqd does not deliver it again"
    )
    assert stats["timeout_count"] > 0, "the killed runner's messages came back by timeout"
    assert stats["requeue_count"] == 0
    assert again.finished_before_commit() == []


async def test_touches_keep_a_slow_batch_in_flight(
    spark: Any, server: Nsqd, unique_name: str, tmp_path: Path
) -> None:
    topic = unique_name[-60:]
    await server.prepare(topic, [f"m-{i}".encode() for i in range(20)])
    msg_timeout = 1.5

    class SlowSink(Recorder):
        held_rows = 0

        def __call__(self, df: Any, batch_id: int) -> None:
            rows = df.collect()
            if not rows:
                return
            if not self.seen:
                # Hold the first batch for twice msg_timeout: without TOUCH, nsqd
                # would time its messages out and deliver them again.
                until = time.monotonic() + 2 * msg_timeout
                while time.monotonic() < until:
                    time.sleep(0.05)
                self.held_rows = len(rows)
            self.look(rows)

    sink = SlowSink(server, topic)
    query = await in_thread(
        spark,
        lambda: start_query(spark, server, topic, sink, tmp_path / "cp", msgTimeout=msg_timeout),
    )
    try:
        await wait_for(lambda: len(sink.rows) >= 20, "20 rows")
        stats = await server.wait_drained(topic)
    finally:
        await in_thread(spark, query.stop)
    assert sink.held_rows > 0, "the first batch was held past msg_timeout"
    assert sink.finished_before_commit() == []
    assert stats["timeout_count"] == 0
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


async def test_a_failed_consumer_fails_the_next_call_and_stop_leaves_no_task(
    server: Nsqd, unique_name: str
) -> None:
    # No Spark session: the driver-side reader is called as Spark calls it.
    import threading

    topic = unique_name[-60:]
    await server.prepare(topic, [])
    reader = NsqStreamReader(
        {"nsqd": server.tcp_address, "topic": topic, "channel": CHANNEL, "timeout": "10"}
    )
    try:
        start = reader.initialOffset()
        limit = reader.getDefaultReadLimit()
        assert await asyncio.to_thread(reader.latestOffset, start, limit) == {"batch": 0}
        consumer = reader._consumer
        assert consumer is not None
        met = threading.Event()

        def broken(msg: object, now: float) -> None:
            met.set()
            raise RuntimeError("a bug while holding a message")

        consumer.held.receive = broken  # type: ignore[method-assign]
        await server.prepare(topic, [b"x"])
        assert await asyncio.to_thread(met.wait, WAIT)
        with pytest.raises(ConnectError, match="stopped consuming") as info:
            await asyncio.to_thread(reader.latestOffset, start, limit)
        assert isinstance(info.value.__cause__, RuntimeError)
    finally:
        await asyncio.to_thread(reader.stop)
    assert not consumer._thread.is_alive()
    assert asyncio.all_tasks(consumer._loop) == set()
