"""Publishing a DataFrame through the ``jetstream`` Spark writer.

Writes ``--count`` rows of 100-byte payloads (``spark.range`` → subject, data,
and with ``--msg-id`` a ``msg_id`` column for de-duplication) with
``df.write.format("jetstream")`` on ``--master`` (default ``local[2]``), and
reports rows/s; every ack is awaited and checked by the writer, and the stream's
message count is checked afterwards.

    python benchmarks/spark_jetstream_write.py --count 200000 [--msg-id]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from aioclients import jetstream
from aioclients.testing import NatsServer

STREAM = "SPARK_WRITE_BENCH"


async def reset(url: str) -> None:
    async with await jetstream.connect(url) as js:
        try:
            await js.delete_stream(STREAM)
        except jetstream.StreamNotFoundError:
            pass
        await js.create_stream(
            STREAM, subjects=["sparkwrite.>"], storage="memory", duplicate_window=120
        )


async def stored(url: str) -> int:
    async with await jetstream.connect(url) as js:
        info = await js.stream_info(STREAM)
        return info.state.messages


def measure(url: str, count: int, partitions: int, msg_id: bool, master: str) -> None:
    from pyspark.sql import SparkSession

    from aioclients.spark import register_data_sources

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName("aioclients-spark-write-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    columns = [
        "concat('sparkwrite.', cast(id % 100 as string)) as subject",
        "cast(repeat('x', 100) as binary) as data",
    ]
    if msg_id:
        columns.append("concat('m-', cast(id as string)) as msg_id")
    try:
        df = spark.range(0, count, numPartitions=partitions).selectExpr(*columns).cache()
        df.count()  # materialise the input, so that only the write is measured
        start = time.perf_counter()
        df.write.format("jetstream").option("servers", url).mode("append").save()
        elapsed = time.perf_counter() - start
    finally:
        spark.stop()
    got = asyncio.run(stored(url))
    if got != count:
        raise SystemExit(f"the stream holds {got} messages, expected {count}")
    print(
        f"wrote {count} rows in {elapsed:.2f}s: {count / elapsed:,.0f} rows/s "
        f"({partitions} partitions, {master}, msg_id={'yes' if msg_id else 'no'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--msg-id", action="store_true", help="add a msg_id column")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--nats-url", help="an existing nats-server with JetStream")
    args = parser.parse_args()
    if args.nats_url:
        asyncio.run(reset(args.nats_url))
        measure(args.nats_url, args.count, args.partitions, args.msg_id, args.master)
        return
    with NatsServer() as server:
        asyncio.run(reset(server.url))
        measure(server.url, args.count, args.partitions, args.msg_id, args.master)


if __name__ == "__main__":
    main()
