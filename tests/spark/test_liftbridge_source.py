"""The liftbridge Spark data source against the Liftbridge emulator (or a real cluster
named by ``AIOCLIENTS_TEST_LIFTBRIDGE``), on the shared local[2] session.

The emulator runs in the test's event loop, so every Spark action runs in a
thread (``asyncio.to_thread``): Spark's Python workers connect to the emulator
while the loop keeps serving them.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pyspark.sql.datasource import GreaterThanOrEqual
from pyspark.sql.types import StructType

from aioclients import liftbridge
from aioclients.spark._errors import DataSourceOptionError
from aioclients.spark._lb_offsets import (
    cap_offsets,
    checkpoint_offsets,
    parse_brokers,
    parse_offsets,
    parse_partitions,
    resolve_end,
    resolve_start,
    to_checkpoint,
)
from aioclients.spark._liftbridge import (
    LiftbridgeBatchReader,
    LiftbridgePushdownReader,
    LiftbridgeStreamReader,
    _oldest_kept,
)
from aioclients.spark._liftbridge import _write_config as write_config
from aioclients.testing import LiftbridgeCluster
from aioclients.testing._liftbridge_fixtures import (
    ExternalLiftbridge,
    oldest_offset,
    wait_for_oldest,
)

pytestmark = pytest.mark.spark

Cluster = LiftbridgeCluster | ExternalLiftbridge
T = TypeVar("T")
EPOCH = datetime(1970, 1, 1)


async def in_thread(spark: Any, fn: Callable[[], T]) -> T:
    """Run a blocking Spark call off the loop that serves the emulator.

    The JVM's active session is per thread, and ``writeStream`` looks Python data
    sources up in it: make the session active in the worker thread first.
    """

    def call() -> T:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        return fn()

    return await asyncio.to_thread(call)


@pytest.fixture
async def client(liftbridge_cluster: Cluster) -> AsyncIterator[liftbridge.Client]:
    c = await liftbridge.connect(liftbridge_cluster.addresses)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def stream(client: liftbridge.Client, unique_name: str) -> AsyncIterator[str]:
    """A stream of two partitions, deleted afterwards."""
    await client.create_stream(unique_name, unique_name, partitions=2)
    yield unique_name
    try:
        await client.delete_stream(unique_name)
    except liftbridge.NoSuchStreamError:
        pass


def brokers_of(cluster: Cluster) -> str:
    return ",".join(cluster.addresses)


Sent = tuple[
    int, int, bytes | None, bytes, dict[str, bytes]
]  # partition, offset, key, value, headers


async def publish(
    client: liftbridge.Client, stream: str, counts: dict[int, int], tag: str = "m"
) -> list[Sent]:
    """Publish ``counts[p]`` messages to each partition ``p``; some keyed, some with headers."""
    sent: list[Sent] = []
    for partition, count in counts.items():
        for i in range(count):
            key = f"k{i % 4}".encode() if i % 2 == 0 else None
            headers = {"n": str(i).encode(), "bin": bytes([0, i % 256])} if i % 3 == 0 else {}
            value = f"{tag}-{partition}-{i}".encode()
            ack = await client.publish(
                stream, value, key=key, headers=headers or None, partition=partition
            )
            assert ack is not None
            sent.append((partition, ack.offset, key, value, headers))
    return sent


def read(spark: Any, brokers: str, stream: str, **options: object) -> Any:
    reader = spark.read.format("liftbridge").option("brokers", brokers).option("stream", stream)
    for key, value in options.items():
        reader = reader.option(key, value if isinstance(value, str) else json.dumps(value))
    return reader.load()


def rows_of(df: Any) -> list[Any]:
    return sorted(df.collect(), key=lambda r: (r.partition, r.offset))


# -- pure helpers ----------------------------------------------------------------------------


def test_offset_options_parse_like_kafka() -> None:
    assert parse_brokers(" a:1, b:2 ") == ["a:1", "b:2"]
    assert parse_partitions(None, [1, 0], "s") == [0, 1]
    assert parse_partitions("1, 1", [0, 1], "s") == [1]
    words = ("earliest", "latest")
    assert parse_offsets("startingOffsets", None, default=-2, words=words, stream="s") == -2
    assert parse_offsets("startingOffsets", "LATEST", default=-2, words=words, stream="s") == -1
    spec = parse_offsets(
        "startingOffsets", '{"0": 5, "1": -2}', default=-2, words=words, stream="s"
    )
    assert spec == {0: 5, 1: -2}
    nested = parse_offsets(
        "startingOffsets", '{"s": {"1": 3}}', default=-2, words=words, stream="s"
    )
    assert nested == {1: 3}
    hws = {0: 9, 1: -1, 2: 4}
    assert resolve_start({0: 5, 1: -1}, hws, stream="s") == {0: 5, 1: 0, 2: 0}
    assert resolve_start(-1, hws, stream="s") == {0: 10, 1: 0, 2: 5}
    assert resolve_end({2: 3}, hws, stream="s") == {0: 9, 1: -1, 2: 3}
    assert checkpoint_offsets(to_checkpoint("s", {1: 4, 0: 2}), "s") == {0: 2, 1: 4}


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: parse_brokers(""), "'brokers'"),
        (lambda: parse_brokers("localhost"), "not host:port"),
        (lambda: parse_partitions("3", [0, 1], "s"), "no partition 3"),
        (lambda: parse_partitions("x", [0, 1], "s"), "not a partition number"),
        (
            lambda: parse_offsets(
                "endingOffsets", "earliest", default=-1, words=("latest",), stream="s"
            ),
            "'latest' or JSON",
        ),
        (
            lambda: parse_offsets("startingOffsets", "{0: 1}", default=-2, words=(), stream="s"),
            "JSON offsets",
        ),
        (
            lambda: parse_offsets(
                "startingOffsets", '{"0": -3}', default=-2, words=("latest",), stream="s"
            ),
            "partition 0 has offset -3",
        ),
        (lambda: resolve_start({5: 0}, {0: 1}, stream="s"), "partition(s) [5]"),
        (lambda: checkpoint_offsets({"stream": "t", "offsets": {}}, "s"), "new checkpointLocation"),
    ],
)
def test_bad_offset_options_name_the_option(call: Callable[[], object], expected: str) -> None:
    with pytest.raises(DataSourceOptionError, match=re.escape(expected)):
        call()


def test_max_per_trigger_is_shared_between_partitions() -> None:
    start = {0: 0, 1: 10, 2: 5}
    end = {0: 100, 1: 12, 2: 5}
    capped = cap_offsets(start, end, 10)
    assert capped == {0: 8, 1: 12, 2: 5}  # partition 1 needs 2, partition 0 gets the rest
    assert sum(capped[p] - start[p] for p in start) == 10
    assert cap_offsets({0: 0, 1: 0}, {0: 3, 1: 3}, 1) == {0: 1, 1: 0}  # progress at least
    assert cap_offsets(start, end, 1000) == end


# -- batch reads -----------------------------------------------------------------------------


async def test_batch_read_equals_what_was_published(
    spark: Any, liftbridge_cluster: Cluster, client: liftbridge.Client, stream: str
) -> None:
    sent = await publish(client, stream, {0: 40, 1: 25})
    stamps: dict[tuple[int, int], int] = {}
    for partition, count in ((0, 40), (1, 25)):
        sub = client.subscribe(
            stream,
            partition=partition,
            start_at=liftbridge.StartPosition.EARLIEST,
            stop_offset=count - 1,
        )
        async with sub:
            async for msg in sub:
                stamps[(partition, msg.offset)] = msg.timestamp

    df = read(spark, brokers_of(liftbridge_cluster), stream, batchSize="7")
    assert await in_thread(spark, lambda: df.rdd.getNumPartitions()) == 2
    rows = await in_thread(spark, lambda: rows_of(df))

    assert len(rows) == len(sent)
    for row, (partition, offset, key, value, headers) in zip(
        rows, sorted(sent, key=lambda s: (s[0], s[1])), strict=True
    ):
        assert (row.stream, row.partition, row.offset) == (stream, partition, offset)
        assert row.key == key
        assert bytes(row.value) == value
        # Liftbridge adds the NATS subject and reply of every message to its headers.
        assert {
            k: v for k, v in (row.headers or {}).items() if k not in ("subject", "reply")
        } == headers
        expected = EPOCH + timedelta(microseconds=stamps[(partition, offset)] // 1000)
        assert row.timestamp == expected
    assert [r.offset for r in rows if r.partition == 0] == list(range(40))


async def test_offset_ranges_and_partitions_option(
    spark: Any, liftbridge_cluster: Cluster, client: liftbridge.Client, stream: str
) -> None:
    await publish(client, stream, {0: 30, 1: 20})
    brokers = brokers_of(liftbridge_cluster)

    def offsets(df: Any) -> list[tuple[int, int]]:
        return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())

    ranged = read(
        spark, brokers, stream, startingOffsets={"0": 10, "1": 5}, endingOffsets={"0": 19}
    )
    expected = [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5, 20)]
    assert await in_thread(spark, lambda: offsets(ranged)) == expected

    # Kafka's nested form, -2 for earliest, and one partition only.
    only_one = read(
        spark,
        brokers,
        stream,
        partitions="1",
        startingOffsets={stream: {"1": -2}},
        endingOffsets={stream: {"1": 3}},
    )
    assert await in_thread(spark, lambda: offsets(only_one)) == [(1, o) for o in range(4)]

    latest = read(spark, brokers, stream, startingOffsets="latest")
    assert await in_thread(spark, lambda: latest.count()) == 0


async def test_empty_stream_reads_no_rows(
    spark: Any, liftbridge_cluster: Cluster, stream: str
) -> None:
    df = read(spark, brokers_of(liftbridge_cluster), stream)
    assert await in_thread(spark, lambda: df.count()) == 0


async def test_bad_options_fail_clearly(
    spark: Any, liftbridge_cluster: Cluster, client: liftbridge.Client, stream: str
) -> None:
    await publish(client, stream, {0: 3})
    brokers = brokers_of(liftbridge_cluster)
    # Through Spark: the planner's error reaches the caller with its text.
    spark_cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: spark.read.format("liftbridge").option("stream", stream).load(), "'brokers'"),
        (lambda: read(spark, brokers, f"{stream}-missing"), "there is no Liftbridge stream"),
        (lambda: read(spark, brokers, stream, startingOffsets="{0: 1"), "'startingOffsets'"),
        (lambda: read(spark, brokers, stream, partitions="7"), "no partition 7"),
    ]
    for load, expected in spark_cases:
        with pytest.raises(Exception) as excinfo:  # noqa: PT011 - Spark wraps our error
            await in_thread(spark, lambda load=load: load().collect())  # type: ignore[misc]
        assert expected in str(excinfo.value), (expected, str(excinfo.value)[:2000])

    # The same planning code called directly (as Spark's planner process does), faster.
    def batch(**options: object) -> LiftbridgeBatchReader:
        given = {"brokers": brokers, "stream": stream}
        given.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in options.items()})
        return LiftbridgeBatchReader({k: v for k, v in given.items() if v is not None})

    direct_cases: list[tuple[dict[str, object], str]] = [
        ({"stream": None}, "'stream'"),
        ({"brokers": "nohost"}, "not host:port"),
        ({"endingOffsets": "earliest"}, "'endingOffsets'"),
        ({"startingOffsets": {"9": 0}}, "partition(s) [9]"),
        ({"endingOffsets": {"0": 50}}, "past its newest"),
        ({"startingOffsets": {"0": 2}, "endingOffsets": {"0": 0}}, "is after 'endingOffsets'"),
        ({"maxMessagesPerTrigger": "5"}, "unknown option"),
    ]
    for options, expected in direct_cases:
        with pytest.raises(DataSourceOptionError) as excinfo:
            await asyncio.to_thread(batch, **options)
        assert expected in str(excinfo.value), (expected, str(excinfo.value))

    def stream_start() -> object:
        options = {"brokers": brokers, "stream": stream, "startingOffsets": '{"0": 9}'}
        return LiftbridgeStreamReader(options).initialOffset()

    with pytest.raises(DataSourceOptionError, match="'startingOffsets': partition 0 starts at 9"):
        await asyncio.to_thread(stream_start)


# -- streaming -------------------------------------------------------------------------------


def stream_to_files(
    spark: Any, brokers: str, stream: str, out: Path, checkpoint: Path, **options: object
) -> None:
    reader = spark.readStream.format("liftbridge").option("brokers", brokers)
    reader = reader.option("stream", stream)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    query = (
        reader.load()
        .selectExpr("partition", "offset", "cast(value as string) as value")
        .writeStream.format("json")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(240), "the availableNow query did not finish"
    finally:
        query.stop()
    assert query.exception() is None


async def test_stream_restarted_from_checkpoint_yields_every_message_once(
    spark: Any,
    liftbridge_cluster: Cluster,
    client: liftbridge.Client,
    stream: str,
    tmp_path: Path,
) -> None:
    brokers = brokers_of(liftbridge_cluster)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first = await publish(client, stream, {0: 40, 1: 20}, tag="a")

    def run() -> None:
        stream_to_files(
            spark,
            brokers,
            stream,
            out,
            checkpoint,
            startingOffsets="earliest",
            maxMessagesPerTrigger=25,
        )

    def written() -> list[tuple[int, int, str]]:
        rows = spark.read.json(str(out)).collect()
        return sorted((r.partition, r.offset, r.value) for r in rows)

    await in_thread(spark, run)
    assert await in_thread(spark, written) == sorted((p, o, v.decode()) for p, o, _, v, _ in first)

    second = await publish(client, stream, {0: 10, 1: 15}, tag="b")
    await in_thread(spark, run)
    everything = sorted((p, o, v.decode()) for p, o, _, v, _ in first + second)
    assert await in_thread(spark, written) == everything, "every message exactly once"

    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    # 60 messages in batches of <= 25, then 25 more: at least 3 + 1 micro-batches.
    assert len(commits) >= 4
    last = json.loads(
        (checkpoint / "offsets" / str(commits[-1])).read_text().strip().splitlines()[-1]
    )
    # "created" tells a recreated stream (offsets restarting at 0) from the same one.
    assert last == {"stream": stream, "offsets": {"0": 50, "1": 35}, "created": last["created"]}


# -- failOnDataLoss --------------------------------------------------------------------------


async def publish_values(client: liftbridge.Client, stream: str, first: int, count: int) -> None:
    """Publish values ``str(first) .. str(first + count - 1)`` to partition 0, acked."""
    futures = [
        await client.publish_async(stream, str(i).encode(), partition=0)
        for i in range(first, first + count)
    ]
    await asyncio.wait_for(asyncio.gather(*futures), 60)


async def retention_done(client: liftbridge.Client, stream: str, published: int) -> int:
    """Wait until the cleaner has brought the partition down to ``KEEP`` messages or
    fewer (whole segments: it may keep fewer); return its oldest offset."""
    return await wait_for_oldest(client, stream, at_least=published - KEEP, timeout=60)


KEEP = 1000


@pytest.fixture
async def retained(client: liftbridge.Client, unique_name: str) -> AsyncIterator[str]:
    """A one-partition stream that keeps its newest 1000 messages or fewer.

    Liftbridge deletes whole segments, when the partition's cleaner runs (every 5
    minutes by default): segments of some 200 of these messages and a cleaner every
    0.5 s make retention happen soon, a segment at a time. (Not smaller: Liftbridge
    1.9.0 can crash when its cleaner rolls a full segment while a publish rolls it
    too, and small segments are full more often.)
    """
    await client.create_stream(
        unique_name,
        unique_name,
        retention_max_messages=KEEP,
        segment_max_bytes=24_000,
        cleaner_interval=0.5,
    )
    yield unique_name
    try:
        await client.delete_stream(unique_name)
    except liftbridge.NoSuchStreamError:
        pass


@pytest.mark.slow
async def test_retention_past_the_checkpoint_fails_the_query_naming_the_range(
    spark: Any,
    liftbridge_cluster: Cluster,
    client: liftbridge.Client,
    retained: str,
    tmp_path: Path,
) -> None:
    # The scenario: checkpointed after 800 messages, then 4200 more on a
    # stream keeping 1000 (offsets 4000..4999 are left).
    brokers = brokers_of(liftbridge_cluster)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    await publish_values(client, retained, 0, 800)

    def run(**options: object) -> None:
        stream_to_files(
            spark, brokers, retained, out, checkpoint, startingOffsets="earliest", **options
        )

    def offsets() -> list[int]:
        return sorted(r.offset for r in spark.read.json(str(out)).collect())

    await in_thread(spark, run)
    assert await in_thread(spark, offsets) == list(range(800))
    await publish_values(client, retained, 800, 4200)
    oldest = await retention_done(client, retained, 5000)  # 4000 or a segment more

    lost = rf"partition 0: offsets 800\.\.{oldest - 1} .*failOnDataLoss"
    with pytest.raises(Exception, match=lost):
        await in_thread(spark, run)
    assert await in_thread(spark, offsets) == list(range(800)), "nothing read past the loss"

    await in_thread(spark, lambda: run(failOnDataLoss="false"))
    assert await in_thread(spark, offsets) == [*range(800), *range(oldest, 5000)]


async def test_data_loss_with_fail_false_warns_and_goes_on_from_the_oldest_kept(
    liftbridge_cluster: Cluster,
    client: liftbridge.Client,
    retained: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = {
        "brokers": brokers_of(liftbridge_cluster),
        "stream": retained,
        "startingOffsets": "earliest",
        "maxMessagesPerTrigger": "30",
        "failOnDataLoss": "false",
    }
    reader = await asyncio.to_thread(LiftbridgeStreamReader, options)
    start = await asyncio.to_thread(reader.initialOffset)
    assert start["offsets"] == {"0": 0}
    await publish_values(client, retained, 0, 1100)
    oldest = await retention_done(client, retained, 1100)  # 100 or a segment more
    with caplog.at_level("WARNING", logger="aioclients.spark.liftbridge"):
        end = await asyncio.to_thread(reader.latestOffset, start, reader.getDefaultReadLimit())
    assert end["offsets"] == {"0": oldest + 30}, "maxMessagesPerTrigger counts from the oldest"
    [record] = [r for r in caplog.records if "data loss" in r.getMessage()]
    assert f"partition 0: offsets 0..{oldest - 1}" in record.getMessage()
    assert record.name == "aioclients.spark.liftbridge"
    [part] = reader.partitions(start, end)
    assert (part.first, part.last) == (oldest, oldest + 29)
    batches = await asyncio.to_thread(lambda: list(reader.read(part)))
    read = [o for b in batches for o in b.column("offset").to_pylist()]
    assert read == list(range(oldest, oldest + 30))


async def test_stream_recreated_under_the_query_is_data_loss(
    liftbridge_cluster: Cluster, client: liftbridge.Client, unique_name: str
) -> None:
    from aioclients.spark import DataLossError

    await client.create_stream(unique_name, unique_name)
    await publish_values(client, unique_name, 0, 20)
    options = {
        "brokers": brokers_of(liftbridge_cluster),
        "stream": unique_name,
        "startingOffsets": "earliest",
    }
    reader = await asyncio.to_thread(LiftbridgeStreamReader, options)
    start = await asyncio.to_thread(reader.initialOffset)
    end = await asyncio.to_thread(reader.latestOffset, start, reader.getDefaultReadLimit())
    assert end["offsets"] == {"0": 20}

    await client.delete_stream(unique_name)
    await asyncio.sleep(0.002)  # a later creation timestamp (ns) on a coarse clock
    await client.create_stream(unique_name, unique_name)
    await publish_values(client, unique_name, 0, 30)  # more than before: only "created" tells
    try:
        with pytest.raises(DataLossError, match=r"deleted and recreated.*failOnDataLoss"):
            await asyncio.to_thread(reader.latestOffset, end, reader.getDefaultReadLimit())
        lenient = await asyncio.to_thread(
            LiftbridgeStreamReader, {**options, "failOnDataLoss": "false"}
        )
        new_end = await asyncio.to_thread(lenient.latestOffset, end, lenient.getDefaultReadLimit())
        assert new_end["offsets"] == {"0": 30}
        assert new_end["created"] != end["created"]
        [part] = lenient.partitions(end, new_end)
        assert (part.first, part.last) == (0, 29), "the new stream from its beginning"
    finally:
        await client.delete_stream(unique_name)


async def test_batch_start_below_the_oldest_kept_says_so(
    spark: Any,
    liftbridge_cluster: Cluster,
    client: liftbridge.Client,
    retained: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    brokers = brokers_of(liftbridge_cluster)
    await publish_values(client, retained, 0, 1050)
    oldest = await retention_done(client, retained, 1050)  # 50 or a segment more
    with pytest.raises(
        Exception, match=rf"partition 0: offsets 5\.\.{oldest - 1} .*failOnDataLoss"
    ):
        await in_thread(
            spark, lambda: read(spark, brokers, retained, startingOffsets={"0": 5}).count()
        )

    options = {"brokers": brokers, "stream": retained, "startingOffsets": '{"0": 5}'}
    with caplog.at_level("WARNING", logger="aioclients.spark.liftbridge"):
        reader = await asyncio.to_thread(
            LiftbridgeBatchReader, {**options, "failOnDataLoss": "false"}
        )
        ranges = await asyncio.to_thread(reader.partitions)
    assert (ranges[0].first, ranges[0].last) == (oldest, 1049)
    assert any(f"offsets 5..{oldest - 1}" in r.getMessage() for r in caplog.records)
    df = await in_thread(
        spark,
        lambda: read(spark, brokers, retained, startingOffsets={"0": 5}, failOnDataLoss="false"),
    )
    assert await in_thread(spark, df.count) == 1050 - oldest
    # "earliest" (the default) starts at the oldest kept: no loss.
    assert await in_thread(spark, read(spark, brokers, retained).count) == 1050 - oldest


# -- writing ---------------------------------------------------------------------------------


async def test_writer_round_trips(spark: Any, liftbridge_cluster: Cluster, stream: str) -> None:
    brokers = brokers_of(liftbridge_cluster)
    rows = [
        (f"v{i}".encode(), f"k{i}" if i % 2 else None, i % 2, {"h": f"{i}".encode()})
        for i in range(30)
    ]

    def write() -> None:
        df = spark.createDataFrame(
            rows, "value binary, key string, partition int, headers map<string,binary>"
        ).repartition(2)
        df.write.format("liftbridge").option("brokers", brokers).option("stream", stream).mode(
            "append"
        ).save()

    await in_thread(spark, write)
    back = await in_thread(spark, lambda: rows_of(read(spark, brokers, stream)))
    got = sorted(
        (
            bytes(r.value),
            r.key,
            r.partition,
            {k: v for k, v in (r.headers or {}).items() if k == "h"},
        )
        for r in back
    )
    expected = sorted((v, None if k is None else k.encode(), p, h) for v, k, p, h in rows)
    assert got == expected
    for partition in (0, 1):
        assert sorted(r.offset for r in back if r.partition == partition) == list(range(15))


async def test_writer_fails_the_task_when_a_publish_fails(
    spark: Any, liftbridge_cluster: Cluster, stream: str
) -> None:
    brokers = brokers_of(liftbridge_cluster)

    def write() -> None:
        df = spark.createDataFrame(
            [("ok", 0), ("no such partition", 5)], "value string, partition int"
        )
        df.coalesce(1).write.format("liftbridge").option("brokers", brokers).option(
            "stream", stream
        ).mode("append").save()

    with pytest.raises(
        Exception, match=r"publish\(es\) to liftbridge stream .* failed; the first was row 1"
    ):
        await in_thread(spark, write)


async def test_stream_writer_and_bad_writer_input(
    spark: Any,
    liftbridge_cluster: Cluster,
    client: liftbridge.Client,
    stream: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    brokers = brokers_of(liftbridge_cluster)
    sink = f"{unique_name}-sink"
    await client.create_stream(sink, sink)
    await publish(client, stream, {0: 12, 1: 8})

    def copy() -> None:
        query = (
            spark.readStream.format("liftbridge")
            .option("brokers", brokers)
            .option("stream", stream)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("value", "key")
            .writeStream.format("liftbridge")
            .option("brokers", brokers)
            .option("stream", sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(240)
        finally:
            query.stop()
        assert query.exception() is None

    try:
        await in_thread(spark, copy)
        copied = await in_thread(spark, lambda: rows_of(read(spark, brokers, sink)))
        assert sorted(bytes(r.value) for r in copied) == sorted(
            f"m-{p}-{i}".encode() for p, n in ((0, 12), (1, 8)) for i in range(n)
        )

        # Through Spark once; the column and option checks directly.
        def attempt() -> None:
            df = spark.createDataFrame([], "value binary")
            df.write.format("liftbridge").option("brokers", brokers).option(
                "stream", f"{stream}-missing"
            ).mode("append").save()

        with pytest.raises(Exception, match="there is no Liftbridge stream"):
            await in_thread(spark, attempt)

        cases: list[tuple[str, dict[str, str], str]] = [
            ("key binary", {"stream": stream}, "'value' column"),
            ("value binary, extra string", {"stream": stream}, "unexpected column"),
            ("value int", {"stream": stream}, "'value' column"),
            ("value binary, partition string", {"stream": stream}, "column 'partition'"),
            ("value binary", {}, "'stream'"),
            ("value binary", {"stream": stream, "partitioner": "hash"}, "'partitioner'"),
        ]
        for schema, options, expected in cases:
            with pytest.raises(DataSourceOptionError) as excinfo:
                await asyncio.to_thread(
                    write_config, {"brokers": brokers, **options}, StructType.fromDDL(schema)
                )
            assert expected in str(excinfo.value), (expected, str(excinfo.value))
    finally:
        await client.delete_stream(sink)


# -- retention under a read: an emptied partition, a segment deleted mid-read ---------------


async def wait_emptied(client: liftbridge.Client, stream: str) -> int:
    """Wait until the cleaner has deleted every message of partition 0 (an EARLIEST
    reader then waits for the next one); return its high watermark."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while await oldest_offset(client, stream, timeout=1.0) is not None:
        assert loop.time() < deadline, f"{stream}/0 still keeps messages after 60s"
    return (await client.fetch_partition_metadata(stream, 0)).high_watermark


@pytest.fixture
async def emptied(client: liftbridge.Client, unique_name: str) -> AsyncIterator[str]:
    """A one-partition stream whose 50 messages (offsets 0..49) the cleaner deleted.

    Liftbridge deletes a sealed segment once its last write is older than
    ``retention_max_age``, and seals the active one once ``segment_max_age`` has
    passed: an idle partition ends up with nothing kept, its offsets going on at 50.
    """
    await client.create_stream(
        unique_name,
        unique_name,
        retention_max_age=0.5,
        segment_max_age=0.2,
        cleaner_interval=0.1,
    )
    await publish_values(client, unique_name, 0, 50)
    assert await wait_emptied(client, unique_name) == 49
    yield unique_name
    try:
        await client.delete_stream(unique_name)
    except liftbridge.NoSuchStreamError:
        pass


async def test_batch_read_of_a_partition_the_cleaner_emptied_finishes(
    spark: Any,
    liftbridge_cluster: Cluster,
    emptied: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing is kept: the read is empty (an EARLIEST reader would wait for the next
    message; the planner must not)."""
    from aioclients.spark import DataLossError

    brokers = brokers_of(liftbridge_cluster)
    options = {"brokers": brokers, "stream": emptied, "timeout": "5"}
    reader = await asyncio.to_thread(LiftbridgeBatchReader, options)
    assert reader.state.earliest == {0: 50}
    [part] = await asyncio.to_thread(reader.partitions)
    assert part.first > part.last, "nothing to read"

    # Asked for offsets the cleaner deleted: data loss, reported as such.
    lost = {**options, "startingOffsets": '{"0": 10}'}
    reader = await asyncio.to_thread(LiftbridgeBatchReader, lost)
    with pytest.raises(DataLossError, match=r"partition 0: offsets 10\.\.49 "):
        await asyncio.to_thread(reader.partitions)
    with caplog.at_level("WARNING", logger="aioclients.spark.liftbridge"):
        reader = await asyncio.to_thread(LiftbridgeBatchReader, {**lost, "failOnDataLoss": "false"})
        [part] = await asyncio.to_thread(reader.partitions)
    assert part.first > part.last
    assert any("offsets 10..49" in r.getMessage() for r in caplog.records)

    # A pushed time bound looks nothing up by time on it (that lookup would wait too).
    reader = await asyncio.to_thread(LiftbridgePushdownReader, options)
    since = datetime(2020, 1, 1, tzinfo=timezone.utc)
    assert reader.pushFilters([GreaterThanOrEqual(("timestamp",), since)]) == []
    [part] = await asyncio.to_thread(reader.partitions)
    assert part.first > part.last

    df = await in_thread(spark, lambda: read(spark, brokers, emptied, timeout="5"))
    assert await in_thread(spark, df.count) == 0


async def test_stream_read_of_a_partition_the_cleaner_emptied_goes_on(
    liftbridge_cluster: Cluster,
    client: liftbridge.Client,
    unique_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A query that started before the messages came and a new one: neither waits on
    the partition; the first reports the messages it never read."""
    await client.create_stream(
        unique_name, unique_name, retention_max_age=0.5, segment_max_age=0.2, cleaner_interval=0.1
    )
    options = {
        "brokers": brokers_of(liftbridge_cluster),
        "stream": unique_name,
        "startingOffsets": "earliest",
        "timeout": "5",
        "failOnDataLoss": "false",
    }
    try:
        reader = await asyncio.to_thread(LiftbridgeStreamReader, options)
        start = await asyncio.to_thread(reader.initialOffset)
        assert start["offsets"] == {"0": 0}
        await publish_values(client, unique_name, 0, 50)
        assert await wait_emptied(client, unique_name) == 49
        with caplog.at_level("WARNING", logger="aioclients.spark.liftbridge"):
            end = await asyncio.to_thread(reader.latestOffset, start, reader.getDefaultReadLimit())
        assert end["offsets"] == {"0": 50}
        assert any("partition 0: offsets 0..49" in r.getMessage() for r in caplog.records)
        assert reader.partitions(start, end) == []

        fresh = await asyncio.to_thread(LiftbridgeStreamReader, options)
        first = await asyncio.to_thread(fresh.initialOffset)
        assert first["offsets"] == {"0": 50}
        last = await asyncio.to_thread(fresh.latestOffset, first, fresh.getDefaultReadLimit())
        assert last["offsets"] == {"0": 50}
        # A message after the loss is read as usual.
        await publish_values(client, unique_name, 50, 1)
        later = await asyncio.to_thread(fresh.latestOffset, last, fresh.getDefaultReadLimit())
        [part] = fresh.partitions(last, later)
        assert (part.first, part.last) == (50, 50)
        batches = await asyncio.to_thread(lambda: list(fresh.read(part)))
        assert [o for b in batches for o in b.column("offset").to_pylist()] == [50]
    finally:
        await client.delete_stream(unique_name)


async def test_segment_deleted_under_a_partition_read(
    liftbridge_cluster: Cluster,
    client: liftbridge.Client,
    unique_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Retention deletes the segment a Spark task is reading (the task reads slowly:
    Spark consumes its batches as it goes). failOnDataLoss=true fails the task naming
    the lost offsets; false warns and goes on from the oldest offset kept."""
    from aioclients.spark import DataLossError

    await client.create_stream(
        unique_name,
        unique_name,
        retention_max_messages=2000,
        segment_max_bytes=1_000_000,
        cleaner_interval=0.2,
    )
    value = b"v" * 8000  # large, so that the broker is held back by flow control

    async def publish_many(first: int, count: int) -> None:
        futures = [
            await client.publish_async(unique_name, value, partition=0, key=str(i).encode())
            for i in range(first, first + count)
        ]
        await asyncio.wait_for(asyncio.gather(*futures), 120)

    try:
        await publish_many(0, 1500)
        options = {"brokers": brokers_of(liftbridge_cluster), "stream": unique_name}
        readers, parts, batches = [], [], []
        for fail in ("true", "false"):
            opts = {**options, "batchSize": "10", "failOnDataLoss": fail}
            reader = await asyncio.to_thread(LiftbridgeBatchReader, opts)
            [part] = await asyncio.to_thread(reader.partitions)
            assert (part.first, part.last) == (0, 1499)
            it = reader.read(part)
            first = await asyncio.to_thread(next, it)  # under way
            assert first.column("offset").to_pylist() == list(range(10))
            readers.append(reader)
            parts.append(part)
            batches.append(it)
        strict, lenient = batches

        await publish_many(1500, 1500)  # the cleaner keeps the newest 2000 or fewer
        oldest = await wait_for_oldest(client, unique_name, at_least=1000, timeout=60)

        with pytest.raises(
            DataLossError, match=r"partition 0: offsets \d+\.\.\d+ .*failOnDataLoss"
        ):
            await asyncio.to_thread(lambda: list(strict))
        with caplog.at_level("WARNING", logger="aioclients.spark.liftbridge"):
            rest = await asyncio.to_thread(lambda: list(lenient))
        offsets = list(range(10)) + [o for b in rest for o in b.column("offset").to_pylist()]
        gap = next(i for i, o in enumerate(offsets) if o != i)  # the first offset lost
        resume = offsets[gap]
        assert gap < oldest <= resume
        assert offsets == [*range(gap), *range(resume, 1500)], "a prefix, then the rest kept"
        assert resume == await oldest_offset(client, unique_name)
        # What a task finds of a range that retention passed entirely: nothing.
        async with await liftbridge.connect(liftbridge_cluster.addresses) as probe:
            kept = await _oldest_kept(probe, parts[1].config, 0, 600)
        assert kept == 601
        records = [r.getMessage() for r in caplog.records if "data loss" in r.getMessage()]
        assert records, "a warning"
        assert f"partition 0: offsets {gap}.." in records[0]
        assert f"..{resume - 1} are no longer kept" in records[-1]
    finally:
        await client.delete_stream(unique_name)


async def test_a_time_bound_on_a_partition_whose_newest_segment_is_empty(
    liftbridge_cluster: Cluster, client: liftbridge.Client, unique_name: str
) -> None:
    """Once the cleaner seals a segment by age, the newest segment is empty until the
    next message, and Liftbridge's time lookup reads that as the end of the log (it
    answers the next offset, past the high watermark). A pushed time bound and the
    oldest-offset probe then search by offset."""
    await client.create_stream(unique_name, unique_name, segment_max_age=0.2, cleaner_interval=0.1)
    try:
        await publish_values(client, unique_name, 0, 50)
        async with client.subscribe(unique_name, start_offset=0, stop_offset=49) as sub:
            stamps = [m.timestamp async for m in sub]
        assert len(stamps) == 50

        async def lookup_past_the_newest() -> bool:
            try:
                async with client.subscribe(unique_name, start_time=1, stop_offset=49):
                    return False
            except liftbridge.LiftbridgeServerError as e:
                return "Stop offset is before start offset: 49 < 50" in str(e)

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not await lookup_past_the_newest():
            assert loop.time() < deadline, "the newest segment was not sealed in 30s"
            await asyncio.sleep(0.05)  # the cleaner's next tick

        options = {"brokers": brokers_of(liftbridge_cluster), "stream": unique_name}
        reader = await asyncio.to_thread(LiftbridgePushdownReader, options)
        assert reader.state.earliest == {0: 0}
        micros = stamps[25] // 1000
        since = EPOCH.replace(tzinfo=timezone.utc) + timedelta(microseconds=micros)
        assert reader.pushFilters([GreaterThanOrEqual(("timestamp",), since)]) == []
        [part] = await asyncio.to_thread(reader.partitions)
        first = min(o for o, t in enumerate(stamps) if t >= micros * 1000)
        assert first <= 25
        assert (part.first, part.last) == (first, 49)
    finally:
        await client.delete_stream(unique_name)
