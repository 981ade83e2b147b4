"""The nsq Spark sink against the nsqd emulator (or ``AIOCLIENTS_TEST_NSQD_TCP``),
on the shared local[2] session.

The emulator runs in the test's event loop, so every Spark action runs in a
thread (``asyncio.to_thread``) while the loop keeps serving Spark's workers.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pyspark.sql.types import StructType

from aioclients import nsq
from aioclients.spark._errors import DataSourceOptionError
from aioclients.spark._nsq import _write_config as write_config
from aioclients.testing import NsqdEmulator
from aioclients.testing._nsq_fixtures import ExternalNsqd

pytestmark = pytest.mark.spark

Nsqd = NsqdEmulator | ExternalNsqd
T = TypeVar("T")
WAIT = 60.0


async def in_thread(spark: Any, fn: Callable[[], T]) -> T:
    """Run a blocking Spark call off the loop that serves the emulator.

    The JVM's active session is per thread, and ``writeStream`` looks Python data
    sources up in it: make the session active in the worker thread first.
    """

    def call() -> T:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        return fn()

    return await asyncio.to_thread(call)


def topic_name(unique_name: str) -> str:
    return unique_name[-60:]


def write(spark: Any, df: Any, nsqd: str, topic: str, **options: object) -> None:
    writer = df.write.format("nsq").option("nsqd", nsqd).option("topic", topic).mode("append")
    for key, value in options.items():
        writer = writer.option(key, str(value))
    writer.save()


async def receive(reader: nsq.Reader, count: int) -> list[nsq.Message]:
    """Take ``count`` messages (finishing each), failing after WAIT seconds."""
    got: list[nsq.Message] = []

    async def run() -> None:
        async for msg in reader:
            await msg.finish()
            got.append(msg)
            if len(got) == count:
                return

    await asyncio.wait_for(run(), WAIT)
    return got


async def test_writer_delivers_every_row_once(spark: Any, nsqd: Nsqd, unique_name: str) -> None:
    topic = topic_name(unique_name)
    count = 1200
    async with nsq.Reader(
        topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=200
    ) as reader:

        def go() -> None:
            df = spark.range(count).selectExpr("concat('row-', cast(id as string)) as data")
            write(spark, df.repartition(3), nsqd.tcp_address, topic, batchSize=100)

        writing = asyncio.ensure_future(in_thread(spark, go))
        got = await receive(reader, count)
        await writing
    bodies = sorted(m.body for m in got)
    assert bodies == sorted(f"row-{i}".encode() for i in range(count))
    if isinstance(nsqd, NsqdEmulator):
        # nsqd saw each row once: no duplicate still waiting on the channel.
        (stats,) = nsqd.stats(topic=topic, include_clients=False)["topics"]
        assert stats["message_count"] == count
        assert stats["channels"][0]["depth"] == 0


async def test_rows_go_out_in_mpub_batches(spark: Any, nsqd: Nsqd, unique_name: str) -> None:
    if not isinstance(nsqd, NsqdEmulator):
        pytest.skip("counts MPUB batches by the emulator's per-command timestamps")
    topic = topic_name(unique_name)
    nsqd.create_topic(topic, "ch")

    def go() -> None:
        df = spark.createDataFrame([(f"b{i}".encode(),) for i in range(23)], "body binary")
        write(spark, df.coalesce(1), nsqd.tcp_address, topic, batchSize=5)

    await in_thread(spark, go)
    async with nsq.Reader(
        topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=50
    ) as reader:
        got = await receive(reader, 23)
    # The emulator stamps all messages of one MPUB with one time: the groups are the batches.
    got.sort(key=lambda m: int(m.body[1:]))
    sizes = [len(list(group)) for _, group in itertools.groupby(got, key=lambda m: m.timestamp)]
    assert sizes == [5, 5, 5, 5, 3]


async def test_stream_writer_publishes_each_micro_batch(
    spark: Any, nsqd: Nsqd, unique_name: str, tmp_path: Path
) -> None:
    topic = topic_name(unique_name)
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.txt").write_text("\n".join(f"line-{i}" for i in range(50)) + "\n")
    async with nsq.Reader(
        topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=100
    ) as reader:

        def go() -> None:
            query = (
                spark.readStream.format("text")
                .load(str(source))
                .withColumnRenamed("value", "data")
                .writeStream.format("nsq")
                .option("nsqd", nsqd.tcp_address)
                .option("topic", topic)
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )
            try:
                assert query.awaitTermination(240)
            finally:
                query.stop()
            assert query.exception() is None

        writing = asyncio.ensure_future(in_thread(spark, go))
        got = await receive(reader, 50)
        await writing
    assert sorted(m.body for m in got) == sorted(f"line-{i}".encode() for i in range(50))


async def test_a_failed_mpub_fails_the_task(spark: Any, nsqd: Nsqd, unique_name: str) -> None:
    if not isinstance(nsqd, NsqdEmulator):
        pytest.skip("injects an MPUB failure into the emulator")
    topic = topic_name(unique_name)
    nsqd.create_topic(topic, "ch")
    nsqd.fail_next("MPUB")

    def go() -> None:
        df = spark.createDataFrame([(f"x{i}",) for i in range(10)], "data string")
        write(spark, df.coalesce(1), nsqd.tcp_address, topic, batchSize=4)

    with pytest.raises(Exception, match=r"MPUB of rows 0\.\.3 to NSQ topic .* failed"):
        await in_thread(spark, go)
    (stats,) = nsqd.stats(topic=topic, include_clients=False)["topics"]
    assert stats["message_count"] == 0


async def test_bad_options_and_reads_fail_clearly(spark: Any, nsqd: Nsqd, unique_name: str) -> None:
    topic = topic_name(unique_name)
    address = nsqd.tcp_address
    # Through Spark: an option error at planning and a row error in a task.
    spark_cases: list[tuple[list[Any], dict[str, str], str]] = [
        ([("x",)], {"nsqd": address}, "'topic'"),
        ([("x",), ("",)], {"nsqd": address, "topic": topic}, "row 1 has an empty"),
    ]
    for rows, options, expected in spark_cases:

        def attempt(rows: list[Any] = rows, options: dict[str, str] = options) -> None:
            writer = spark.createDataFrame(rows, "data string").coalesce(1).write.format("nsq")
            for key, value in options.items():
                writer = writer.option(key, value)
            writer.mode("append").save()

        with pytest.raises(Exception) as excinfo:  # noqa: PT011 - Spark wraps our error
            await in_thread(spark, attempt)
        assert expected in str(excinfo.value), (expected, str(excinfo.value)[:2000])

    # The planner's checks called directly.
    direct_cases: list[tuple[str, dict[str, str], str]] = [
        ("data string", {"topic": topic}, "'nsqd'"),
        ("data string", {"nsqd": "nsqd-without-port", "topic": topic}, "not host:port"),
        ("data string", {"nsqd": address, "topic": "bad topic!"}, "not a valid NSQ topic"),
        ("data string", {"nsqd": address, "topic": topic, "batchSize": "0"}, "'batchSize'"),
        ("data string", {"nsqd": address, "topic": topic, "size": "1"}, "unknown option"),
        ("data int", {"nsqd": address, "topic": topic}, "binary or string"),
        ("data string, body string", {"nsqd": address, "topic": topic}, "exactly one"),
        ("value string", {"nsqd": address, "topic": topic}, "exactly one"),
    ]
    for schema, options, expected in direct_cases:
        with pytest.raises(DataSourceOptionError, match=re.escape(expected)):
            write_config(options, StructType.fromDDL(schema))

    # NSQ has no log to plan a batch read from; streaming reads are in test_nsq_source.py.
    with pytest.raises(Exception, match="not available for batch reads: NSQ keeps no log"):
        await in_thread(
            spark, lambda: spark.read.format("nsq").option("nsqd", address).load().collect()
        )
