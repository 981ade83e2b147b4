"""Batch read of a JetStream stream through the ``jetstream`` Spark data source.

Fills a memory-storage stream with ``--count`` 100-byte messages, then reads it
with ``spark.read.format("jetstream")`` on ``--master`` (default ``local[2]``)
with 1, 2 and 4 partitions, and reports rows/s and the scaling against one
partition. Each measurement is the best of ``--rounds`` after one warm-up read
(the first read starts the Python workers).

    python benchmarks/spark_jetstream_read.py                  # 1M messages
    python benchmarks/spark_jetstream_read.py --count 200000   # a quicker run
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from _loop import add_loop_argument, run_async, use_loop

from aioclients import jetstream
from aioclients.testing import NatsServer

STREAM = "SPARK_READ_BENCH"
PAYLOAD = b"x" * 100


async def fill(url: str, count: int) -> None:
    async with await jetstream.connect(url, timeout=30) as js:
        try:
            await js.delete_stream(STREAM)
        except jetstream.StreamNotFoundError:
            pass
        await js.create_stream(
            STREAM, subjects=["sparkread.>"], storage="memory", allow_direct=True
        )
        start = time.perf_counter()
        for i in range(count):
            await js.publish_async(f"sparkread.{i % 100}", PAYLOAD)
        await js.publish_async_complete(timeout=120)
        print(f"filled {count} messages in {time.perf_counter() - start:.1f}s", flush=True)


def measure(url: str, count: int, partitions: list[int], rounds: int, master: str) -> None:
    from pyspark.sql import SparkSession

    from aioclients.spark import register_data_sources

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName("aioclients-spark-read-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)

    def read(parts: int) -> float:
        df = (
            spark.read.format("jetstream")
            .option("servers", url)
            .option("stream", STREAM)
            .option("numPartitions", str(parts))
            .load()
        )
        start = time.perf_counter()
        got = df.count()
        elapsed = time.perf_counter() - start
        if got != count:
            raise SystemExit(f"read {got} rows, expected {count}")
        return count / elapsed

    try:
        read(max(partitions))  # warm-up: starts the Python workers
        best = {p: max(read(p) for _ in range(rounds)) for p in partitions}
    finally:
        spark.stop()
    base = best[partitions[0]]
    print(f"\n{'partitions':>10} {'rows/s':>12} {'scaling':>8}   ({count} rows, {master})")
    for parts in partitions:
        print(f"{parts:>10} {best[parts]:>12,.0f} {best[parts] / base:>7.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--partitions", default="1,2,4", help="comma list (default 1,2,4)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--nats-url", help="an existing nats-server with JetStream")
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    partitions = [int(p) for p in args.partitions.split(",")]
    if args.nats_url:
        run_async(fill(args.nats_url, args.count))
        measure(args.nats_url, args.count, partitions, args.rounds, args.master)
        return
    with NatsServer() as server:
        run_async(fill(server.url, args.count))
        measure(server.url, args.count, partitions, args.rounds, args.master)


if __name__ == "__main__":
    main()
