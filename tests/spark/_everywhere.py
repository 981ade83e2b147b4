"""Checks shared by the local-cluster and Spark Connect test modules: one batch read
and one streaming read per format, exact, on whatever session they are given.

Emulators run in the test's event loop: every Spark call runs in a thread. Outputs
go to JSON files read back with plain Python (works the same over Spark Connect,
where the sink runs in the server).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from aioclients import jetstream, liftbridge, nsq
from aioclients.testing import NsqdEmulator

T = TypeVar("T")
WAIT = 240.0


async def off_loop(fn: Callable[[], T]) -> T:
    return await asyncio.to_thread(fn)


def json_rows(directory: Path) -> list[dict[str, Any]]:
    """Rows of a JSON file sink's output (lines still being written are skipped)."""
    rows = []
    for path in sorted(directory.glob("part-*.json")):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows


def run_available_now(reader: Any, columns: list[str], out: Path, checkpoint: Path) -> None:
    query = (
        reader.load()
        .selectExpr(*columns)
        .writeStream.format("json")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(WAIT), "the availableNow query did not finish"
    finally:
        query.stop()
    assert query.exception() is None


async def check_jetstream(spark: Any, url: str, name: str, tmp_path: Path) -> None:
    async with await jetstream.connect(url) as js:
        await js.create_stream(name, subjects=[f"{name}.>"], allow_direct=True)
        futures = [await js.publish_async(f"{name}.s", str(i).encode()) for i in range(120)]
        for f in futures:
            await f
        # A gap: reads stay exact across deleted messages.
        await (await js.stream(name)).delete_msg(7)
    try:
        expected = [s for s in range(1, 121) if s != 7]

        def batch() -> list[int]:
            df = (
                spark.read.format("jetstream")
                .option("servers", url)
                .option("stream", name)
                .option("numPartitions", "4")
                .load()
            )
            return sorted(r.sequence for r in df.select("sequence").collect())

        assert await off_loop(batch) == expected

        out = tmp_path / "js-out"
        reader = (
            spark.readStream.format("jetstream")
            .option("servers", url)
            .option("stream", name)
            .option("maxMessagesPerTrigger", "50")
        )
        await off_loop(
            lambda: run_available_now(
                reader, ["sequence", "cast(data as string) as data"], out, tmp_path / "js-cp"
            )
        )
        rows = json_rows(out)
        assert sorted(r["sequence"] for r in rows) == expected
        assert all(r["data"] == str(r["sequence"] - 1) for r in rows)
    finally:
        async with await jetstream.connect(url) as js:
            await js.delete_stream(name)


async def check_liftbridge(spark: Any, addresses: list[str], name: str, tmp_path: Path) -> None:
    brokers = ",".join(addresses)
    async with await liftbridge.connect(addresses) as client:
        await client.create_stream(name, name, partitions=2)
        try:
            sent = set()
            for p in (0, 1):
                for i in range(30 + 10 * p):
                    ack = await client.publish(name, f"{p}-{i}".encode(), partition=p)
                    assert ack is not None
                    sent.add((p, ack.offset, f"{p}-{i}"))

            def batch() -> set[tuple[int, int, str]]:
                df = (
                    spark.read.format("liftbridge")
                    .option("brokers", brokers)
                    .option("stream", name)
                    .load()
                )
                return {(r.partition, r.offset, bytes(r.value).decode()) for r in df.collect()}

            assert await off_loop(batch) == sent

            out = tmp_path / "lb-out"
            reader = (
                spark.readStream.format("liftbridge")
                .option("brokers", brokers)
                .option("stream", name)
                .option("startingOffsets", "earliest")
                .option("maxMessagesPerTrigger", "25")
            )
            columns = ["partition", "offset", "cast(value as string) as value"]
            await off_loop(lambda: run_available_now(reader, columns, out, tmp_path / "lb-cp"))
            rows = json_rows(out)
            assert len(rows) == len(sent), "every message once"
            assert {(r["partition"], r["offset"], r["value"]) for r in rows} == sent
        finally:
            await client.delete_stream(name)


async def check_nsq(spark: Any, nsqd: NsqdEmulator, topic: str, tmp_path: Path) -> None:
    nsqd.create_topic(topic, "spark")
    bodies = sorted(f"n-{i}" for i in range(60))
    nsqd.publish(topic, *(b.encode() for b in bodies))
    out = tmp_path / "nsq-out"

    def channel() -> dict[str, Any]:
        (t,) = nsqd.stats(topic, "spark", include_clients=False)["topics"]
        (c,) = t["channels"]
        return c  # type: ignore[no-any-return]

    def start() -> Any:
        return (
            spark.readStream.format("nsq")
            .option("nsqd", nsqd.tcp_address)
            .option("topic", topic)
            .option("channel", "spark")
            .option("maxMessagesPerTrigger", "25")
            .load()
            .selectExpr("id", "attempts", "cast(body as string) as body")
            .writeStream.format("json")
            .option("path", str(out))
            .option("checkpointLocation", str(tmp_path / "nsq-cp"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    query = await off_loop(start)
    try:
        deadline = time.monotonic() + WAIT
        # Written, committed and finished (the last batch at the next trigger).
        while len(json_rows(out)) < 60 or channel()["in_flight_count"] or channel()["depth"]:
            assert time.monotonic() < deadline, "timed out waiting for 60 finished rows"
            await asyncio.sleep(0.2)
    finally:
        await off_loop(query.stop)
    rows = json_rows(out)
    assert sorted(r["body"] for r in rows) == bodies, "each message once"
    assert len({r["id"] for r in rows}) == 60
    c = channel()
    assert (c["requeue_count"], c["timeout_count"]) == (0, 0)


# -- filter pushdown -------------------------------------------------------------------------


def explained(df: Any) -> str:
    """``df.explain("formatted")``'s text (printed by pyspark, classic or Connect)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain("formatted")
    return out.getvalue()


def pushed_filters(df: Any) -> str:
    """The ``PushedFilters: [...]`` line of the scan ('' when nothing was pushed)."""
    for line in explained(df).splitlines():
        if line.strip().startswith("PushedFilters:"):
            return line.strip()
    return ""


@dataclass(frozen=True)
class Shape:
    """A filter Spark can push (``where``), the same filter written so that it cannot
    (``unpushable``), and what the scan must report as pushed (``pushed``; an empty
    tuple: nothing on that column)."""

    where: str
    unpushable: str
    pushed: tuple[str, ...]
    options: tuple[tuple[str, str], ...] = ()


def jetstream_shapes(name: str, t_mid: str, t_late: str) -> list[Shape]:
    s = name
    return [
        Shape(f"subject = '{s}.eu.a'", f"concat(subject, '') = '{s}.eu.a'",
              (f"EqualTo(subject,{s}.eu.a)",)),
        Shape(f"subject IN ('{s}.eu.a', '{s}.us.b', '{s}.none')",
              f"concat(subject, '') IN ('{s}.eu.a', '{s}.us.b', '{s}.none')", ("In(subject",)),
        Shape(f"subject LIKE '{s}.eu.%'", f"concat(subject, '') LIKE '{s}.eu.%'",
              (f"StringStartsWith(subject,{s}.eu.)",)),
        # Ends inside a token: narrows the read to <name>.>, Spark checks the rest.
        Shape(f"subject LIKE '{s}.e%'", f"concat(subject, '') LIKE '{s}.e%'", ()),
        Shape(f"subject = '{s}.eu.*'", f"concat(subject, '') = '{s}.eu.*'", ()),
        Shape("sequence BETWEEN 50 AND 120", "abs(sequence) BETWEEN 50 AND 120",
              ("GreaterThanOrEqual(sequence,50)", "LessThanOrEqual(sequence,120)")),
        Shape("sequence > 250", "abs(sequence) > 250", ("GreaterThan(sequence,250)",)),
        Shape("sequence < 12", "abs(sequence) < 12", ("LessThan(sequence,12)",)),
        Shape("sequence = 77", "abs(sequence) = 77", ("EqualTo(sequence,77)",)),
        Shape("sequence IN (3, 150, 299, 100000)", "abs(sequence) IN (3, 150, 299, 100000)",
              ("In(sequence",)),
        Shape(f"timestamp >= timestamp'{t_mid}'",
              f"timestamp + interval 0 seconds >= timestamp'{t_mid}'",
              ("GreaterThanOrEqual(timestamp",)),
        Shape(f"timestamp > timestamp'{t_mid}'",
              f"timestamp + interval 0 seconds > timestamp'{t_mid}'", ("GreaterThan(timestamp",)),
        Shape(f"timestamp < timestamp'{t_mid}'",
              f"timestamp + interval 0 seconds < timestamp'{t_mid}'", ("LessThan(timestamp",)),
        Shape(f"timestamp > timestamp'{t_late}'",
              f"timestamp + interval 0 seconds > timestamp'{t_late}'", ("GreaterThan(timestamp",)),
        Shape(f"subject = '{s}.eu.a' AND timestamp >= timestamp'{t_mid}' AND sequence < 280",
              f"concat(subject, '') = '{s}.eu.a' AND timestamp + interval 0 seconds >= "
              f"timestamp'{t_mid}' AND abs(sequence) < 280",
              (f"EqualTo(subject,{s}.eu.a)", "GreaterThanOrEqual(timestamp", "LessThan(sequence")),
        Shape(f"subject = '{s}.eu.a' OR sequence < 5", f"concat(subject, '') = '{s}.eu.a' OR "
              "abs(sequence) < 5", ()),
        Shape(f"NOT subject = '{s}.eu.a'", f"NOT concat(subject, '') = '{s}.eu.a'", ()),
        # Pushed filters narrow the options, never widen or replace them.
        Shape(f"subject IN ('{s}.eu.a', '{s}.us.a')", f"concat(subject, '') IN ('{s}.eu.a', "
              f"'{s}.us.a')", ("In(subject",), (("subject", f"{s}.eu.*"),)),
        Shape(f"subject LIKE '{s}.%'", f"concat(subject, '') LIKE '{s}.%'",
              (f"StringStartsWith(subject,{s}.)",), (("subject", f"{s}.*.b"),)),
        Shape("sequence > 150 AND sequence < 400", "abs(sequence) > 150 AND abs(sequence) < 400",
              ("GreaterThan(sequence,150)",),
              (("startSequence", "100"), ("endSequence", "200"))),
        Shape("sequence < 50", "abs(sequence) < 50", ("LessThan(sequence,50)",),
              (("startSequence", "100"),)),
    ]  # fmt: skip


async def seed_jetstream_for_pushdown(url: str, name: str) -> tuple[str, str]:
    """300 messages over 6 subjects with a few gaps; returns two times (UTC, µs) to
    filter on: that of sequence 200 and that of the last message."""
    async with await jetstream.connect(url) as js:
        await js.create_stream(name, subjects=[f"{name}.>"], allow_direct=True)
        futures = []
        for i in range(300):
            subject = f"{name}.{('eu', 'us', 'ap')[i % 3]}.{'ab'[i % 2]}"
            headers = {"n": str(i)} if i % 7 == 0 else None
            futures.append(await js.publish_async(subject, str(i).encode(), headers=headers))
        for f in futures:
            await f
        stream = await js.stream(name)
        for seq in (4, 5, 151, 300):
            await stream.delete_msg(seq)
        mid = (await stream.direct_get(200)).time
        late = (await stream.direct_get(299)).time

    def text(t: datetime) -> str:
        return t.astimezone(timezone.utc).replace(tzinfo=None).isoformat(sep=" ")

    return text(mid), text(late)


def _pushes_a_comparison(report: str) -> bool:
    """Whether a PushedFilters line holds more than IsNotNull checks."""
    columns = ("subject", "sequence", "timestamp", "partition", "offset")
    return any(f"({c}," in report for c in columns)


def check_pushdown(load: Callable[..., Any], shapes: list[Shape], key: list[str]) -> None:
    """Every shape: the pushed and the unpushable query give the same rows, and the scan
    reports exactly the pushed filters.

    Every query reads a DataFrame of its own (pyspark 4.3.0 reuses a pushed read for a
    later query on the same one); the shapes run as one union (one Spark job) each way.
    """
    from pyspark.sql import functions as F

    pushed_dfs, plain_dfs, failures = [], [], []
    for i, shape in enumerate(shapes):
        options = dict(shape.options)
        pushed_df = load(**options).where(shape.where)
        plain_df = load(**options).where(shape.unpushable)
        report, plain_report = pushed_filters(pushed_df), pushed_filters(plain_df)
        for expected in shape.pushed:
            if expected not in report:
                failures.append(f"{shape.where}: {expected!r} not in {report!r}")
        if _pushes_a_comparison(plain_report):
            failures.append(f"{shape.unpushable}: pushed {plain_report!r}")
        if not shape.pushed and _pushes_a_comparison(report):
            failures.append(f"{shape.where}: nothing should be pushed, got {report!r}")
        pushed_dfs.append(pushed_df.select(F.lit(i).alias("shape"), *key))
        plain_dfs.append(plain_df.select(F.lit(i).alias("shape"), *key))

    def rows(dfs: list[Any]) -> dict[int, list[tuple[Any, ...]]]:
        union = dfs[0]
        for df in dfs[1:]:
            union = union.unionAll(df)
        out: dict[int, list[tuple[Any, ...]]] = {i: [] for i in range(len(dfs))}
        # Two tasks in all (a task per scan costs more than its read here).
        for row in union.coalesce(2).collect():
            out[row[0]].append(tuple(row[1:]))
        return {i: sorted(r) for i, r in out.items()}

    got, want = rows(pushed_dfs), rows(plain_dfs)
    for i, shape in enumerate(shapes):
        if got[i] != want[i]:
            failures.append(
                f"{shape.where} {dict(shape.options)}: {len(got[i])} rows pushed, "
                f"{len(want[i])} not"
            )
    assert any(want.values()), "the shapes select something"
    assert not failures, "\n".join(failures)


async def check_jetstream_pushdown(spark: Any, url: str, name: str, partitions: int = 1) -> None:
    name = name.replace("_", "-")  # '_' is a wildcard in LIKE: keep the prefixes plain
    t_mid, t_late = await seed_jetstream_for_pushdown(url, name)
    try:

        def load(**options: str) -> Any:
            reader = spark.read.format("jetstream").option("servers", url)
            reader = reader.option("stream", name).option("numPartitions", str(partitions))
            for key, value in options.items():
                reader = reader.option(key, value)
            return reader.load()

        shapes = jetstream_shapes(name, t_mid, t_late)
        await off_loop(lambda: check_pushdown(load, shapes, ["sequence", "subject", "data"]))
    finally:
        async with await jetstream.connect(url) as js:
            await js.delete_stream(name)


def liftbridge_shapes(t_mid: str) -> list[Shape]:
    ts = "timestamp + interval 0 seconds"
    return [
        Shape("partition = 1", "abs(partition) = 1", ("EqualTo(partition,1)",)),
        Shape("partition IN (0, 2, 7)", "abs(partition) IN (0, 2, 7)", ("In(partition",)),
        Shape("partition = 5", "abs(partition) = 5", ("EqualTo(partition,5)",)),
        Shape("offset BETWEEN 5 AND 10", "abs(offset) BETWEEN 5 AND 10",
              ("GreaterThanOrEqual(offset,5)", "LessThanOrEqual(offset,10)")),
        Shape("offset > 20", "abs(offset) > 20", ("GreaterThan(offset,20)",)),
        Shape("offset IN (0, 7, 35)", "abs(offset) IN (0, 7, 35)", ("In(offset",)),
        Shape(f"timestamp >= timestamp'{t_mid}'", f"{ts} >= timestamp'{t_mid}'",
              ("GreaterThanOrEqual(timestamp",)),
        Shape(f"timestamp > timestamp'{t_mid}'", f"{ts} > timestamp'{t_mid}'",
              ("GreaterThan(timestamp",)),
        Shape(f"timestamp <= timestamp'{t_mid}'", f"{ts} <= timestamp'{t_mid}'",
              ("LessThanOrEqual(timestamp",)),
        Shape(f"partition = 2 AND offset < 15 AND timestamp >= timestamp'{t_mid}'",
              f"abs(partition) = 2 AND abs(offset) < 15 AND {ts} >= timestamp'{t_mid}'",
              ("EqualTo(partition,2)", "LessThan(offset,15)", "GreaterThanOrEqual(timestamp")),
        Shape("partition = 1 OR offset < 3", "abs(partition) = 1 OR abs(offset) < 3", ()),
        # Pushed filters narrow the options, never widen or replace them.
        Shape("partition IN (1, 2)", "abs(partition) IN (1, 2)", ("In(partition",),
              (("partitions", "0,1"),)),
        Shape("offset < 10", "abs(offset) < 10", ("LessThan(offset,10)",),
              (("startingOffsets", '{"0": 5, "1": 0, "2": 8}'),)),
        Shape("offset > 2", "abs(offset) > 2", ("GreaterThan(offset,2)",),
              (("endingOffsets", '{"0": 6, "1": 20, "2": 1}'),)),
    ]  # fmt: skip


async def check_liftbridge_pushdown(spark: Any, addresses: list[str], name: str) -> None:
    brokers = ",".join(addresses)
    async with await liftbridge.connect(addresses) as client:
        await client.create_stream(name, name, partitions=3)
        try:
            stamps = []
            for i in range(90):  # interleaved, so times cross partitions
                ack = await client.publish(name, f"v{i}".encode(), partition=i % 3)
                assert ack is not None
                if i == 45:
                    stamps.append(ack.offset)
            mid_offset = stamps[0]

            def mid_time() -> str:
                df = spark.read.format("liftbridge").option("brokers", brokers)
                df = df.option("stream", name).load()
                row = df.where(f"partition = 0 AND offset = {mid_offset}").first()
                return str(row.timestamp.isoformat(sep=" "))

            t_mid = await off_loop(mid_time)

            def load(**options: str) -> Any:
                reader = spark.read.format("liftbridge").option("brokers", brokers)
                reader = reader.option("stream", name)
                for key, value in options.items():
                    reader = reader.option(key, value)
                return reader.load()

            shapes = liftbridge_shapes(t_mid)
            await off_loop(lambda: check_pushdown(load, shapes, ["partition", "offset", "value"]))
        finally:
            await client.delete_stream(name)


# -- restarts and writes ---------------------------------------------------------------------


async def in_session_thread(spark: Any, fn: Callable[[], T]) -> T:
    """``off_loop`` with ``spark`` made the JVM's active session in the thread first: writes
    look Python data sources up in the active session, which is per thread."""

    def call() -> T:
        jvm = getattr(spark, "_jvm", None)
        if jvm is not None:
            jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        return fn()

    return await asyncio.to_thread(call)


async def check_jetstream_restart(spark: Any, url: str, name: str, tmp_path: Path) -> None:
    """A streaming read stopped and restarted from its checkpoint reads every message
    once: what was there at the first run, then only what came after."""
    out, checkpoint = tmp_path / "restart-out", tmp_path / "restart-cp"

    async def publish(first: int, count: int) -> None:
        async with await jetstream.connect(url) as js:
            for i in range(first, first + count):
                await js.publish_async(f"{name}.r", str(i).encode())
            await js.publish_async_complete()

    async with await jetstream.connect(url) as js:
        await js.create_stream(name, subjects=[f"{name}.>"], allow_direct=True)
    try:
        reader = (
            spark.readStream.format("jetstream")
            .option("servers", url)
            .option("stream", name)
            .option("maxMessagesPerTrigger", "40")
        )
        columns = ["sequence", "cast(data as string) as data"]
        await publish(0, 100)
        await off_loop(lambda: run_available_now(reader, columns, out, checkpoint))
        assert len(json_rows(out)) == 100
        await publish(100, 70)
        await off_loop(lambda: run_available_now(reader, columns, out, checkpoint))
        rows = json_rows(out)
        assert sorted(r["sequence"] for r in rows) == list(range(1, 171)), "each once"
        assert all(r["data"] == str(r["sequence"] - 1) for r in rows)
    finally:
        async with await jetstream.connect(url) as js:
            await js.delete_stream(name)


async def check_liftbridge_restart(
    spark: Any, addresses: list[str], name: str, tmp_path: Path
) -> None:
    brokers = ",".join(addresses)
    out, checkpoint = tmp_path / "lb-restart-out", tmp_path / "lb-restart-cp"
    async with await liftbridge.connect(addresses) as client:
        await client.create_stream(name, name, partitions=2)
        try:

            async def publish(first: int, count: int) -> None:
                for i in range(first, first + count):
                    await client.publish(name, f"v{i}".encode(), partition=i % 2)

            reader = (
                spark.readStream.format("liftbridge")
                .option("brokers", brokers)
                .option("stream", name)
                .option("startingOffsets", "earliest")
                .option("maxMessagesPerTrigger", "20")
            )
            columns = ["partition", "offset", "cast(value as string) as value"]
            await publish(0, 50)
            await off_loop(lambda: run_available_now(reader, columns, out, checkpoint))
            await publish(50, 30)
            await off_loop(lambda: run_available_now(reader, columns, out, checkpoint))
            rows = json_rows(out)
            assert len(rows) == 80, "every message once"
            assert sorted(int(r["value"][1:]) for r in rows) == list(range(80))
        finally:
            await client.delete_stream(name)


async def check_writes(
    spark: Any,
    url: str,
    addresses: list[str],
    nsqd: NsqdEmulator,
    name: str,
) -> None:
    """A DataFrame of 300 rows written to a JetStream stream, a Liftbridge stream, an NSQ
    topic and a Key-Value bucket: every row arrives, once."""
    count = 300
    stream = f"{name}_JS"  # (Liftbridge uses NATS subjects <name> and <name>.<partition>)
    async with await jetstream.connect(url) as js:
        await js.create_stream(stream, subjects=[f"{stream}.>"], allow_direct=True)
        await js.create_key_value(f"{name}_kv")
    lb = await liftbridge.connect(addresses)
    topic = name[-60:]
    try:
        await lb.create_stream(name, name, partitions=2)
        source = spark.range(count).repartition(3)

        def write_all() -> None:
            (
                source.selectExpr(
                    f"concat('{stream}.', id % 3) as subject",
                    "cast(id as string) as data",
                    "cast(id as string) as msg_id",
                )
                .write.format("jetstream")
                .option("servers", url)
                .mode("append")
                .save()
            )
            (
                source.selectExpr("cast(id as string) as value")
                .write.format("liftbridge")
                .option("brokers", ",".join(addresses))
                .option("stream", name)
                .option("partitioner", "round_robin")
                .mode("append")
                .save()
            )
            (
                source.selectExpr("cast(id as string) as data")
                .write.format("nsq")
                .option("nsqd", nsqd.tcp_address)
                .option("topic", topic)
                .mode("append")
                .save()
            )
            (
                source.selectExpr("concat('k', id) as key", "cast(id as string) as value")
                .write.format("jetstream").option("servers", url)
                .option("bucket", f"{name}_kv").mode("append").save()
            )  # fmt: skip

        async with nsq.Reader(
            topic, "check", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=100
        ) as reader:
            await in_session_thread(spark, write_all)
            bodies = []

            async def take() -> None:
                async for msg in reader:
                    await msg.finish()
                    bodies.append(int(msg.body))
                    if len(bodies) == count:
                        return

            await asyncio.wait_for(take(), WAIT)
        assert sorted(bodies) == list(range(count))

        async with await jetstream.connect(url) as js:
            info = await (await js.stream(stream)).info()
            assert info.state.messages == count, info.state
            kv = await js.key_value(f"{name}_kv")
            assert (await kv.get("k299")).value == b"299"
            async with kv.keys() as keys:
                assert len([k async for k in keys]) == count
        meta = await lb.fetch_metadata()
        info_lb = meta.get_stream(name)
        assert info_lb is not None
        marks = [
            (await lb.fetch_partition_metadata(name, p)).high_watermark + 1
            for p in sorted(info_lb.partitions)
        ]
        assert sum(marks) == count
    finally:
        with contextlib.suppress(liftbridge.NoSuchStreamError):
            await lb.delete_stream(name)
        await lb.close()
        async with await jetstream.connect(url) as js:
            await js.delete_stream(stream)
            await js.delete_key_value(f"{name}_kv")
