"""A Spark structured-streaming pipeline over JetStream: orders in, revenue per region out.

Reads an ORDERS stream with the ``jetstream`` data source, parses the JSON orders,
keeps a running revenue and order count per region, and writes the totals back to
a TOTALS stream with the ``jetstream`` writer after every micro-batch (complete
output mode; one subject per region, the stream keeps the latest; a msg_id makes a
total that did not change, or a retried micro-batch, add nothing). The query runs
twice from the same checkpoint with new orders in between, the way a scheduled job
would: the second run reads only the new orders.

Needs Java 17 (e.g. `apt-get install openjdk-17-jre-headless`) and the spark extra
(`./run` installs it into `.venv`). Run it against the local servers, from a checkout,
each command in a terminal of its own:

    .venv/bin/aioclients-servers
    .venv/bin/python examples/spark_streaming_pipeline.py

Spark prints its own start-up lines (the JVM's, log4j's) before the job's. With pip:
`pip install "aioclients[servers,spark]"`, then the same without `.venv/bin/`.
Any nats-server with JetStream works too; NATS_URL (default nats://127.0.0.1:4222)
names it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import tempfile
import uuid

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from aioclients import jetstream
from aioclients.spark import register_data_sources

URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
RUN = uuid.uuid4().hex[:8]
ORDERS = f"PIPELINE_ORDERS_{RUN}"
TOTALS = f"PIPELINE_TOTALS_{RUN}"
REGIONS = ("emea", "amer", "apac")


async def create_streams() -> None:
    async with await jetstream.connect(URL) as js:
        await js.create_stream(ORDERS, subjects=[f"{ORDERS}.>"], allow_direct=True)
        await js.create_stream(
            TOTALS,
            subjects=[f"{TOTALS}.>"],
            allow_direct=True,
            max_msgs_per_subject=1,  # keep the latest total per region
            duplicate_window=120,
        )


async def publish_orders(count: int, seed: int) -> None:
    rng = random.Random(seed)
    async with await jetstream.connect(URL) as js:
        for i in range(count):
            order = {
                "order_id": f"{seed}-{i}",
                "region": rng.choice(REGIONS),
                "amount": round(rng.uniform(5, 500), 2),
            }
            await js.publish_async(
                f"{ORDERS}.{order['region']}", json.dumps(order).encode(), msg_id=order["order_id"]
            )
        await js.publish_async_complete(timeout=30)


async def delete_streams() -> None:
    async with await jetstream.connect(URL) as js:
        for name in (ORDERS, TOTALS):
            await js.delete_stream(name)


def run_pipeline(spark: SparkSession, checkpoint: str) -> None:
    """One run of the streaming query: everything new since the checkpoint, then stop."""
    order_schema = "order_id string, region string, amount double"
    orders = (
        spark.readStream.format("jetstream")
        .option("servers", URL)
        .option("stream", ORDERS)
        .option("maxMessagesPerTrigger", 500)
        .load()
        .select(F.from_json(F.col("data").cast("string"), order_schema).alias("o"), "sequence")
        .select("o.*", "sequence")
    )
    totals = orders.groupBy("region").agg(
        F.round(F.sum("amount"), 2).alias("revenue"),
        F.count("*").alias("orders"),
        F.max("sequence").alias("up_to_sequence"),
    )
    query = (
        totals.select(
            F.concat(F.lit(f"{TOTALS}."), "region").alias("subject"),
            F.to_json(F.struct("region", "revenue", "orders", "up_to_sequence"))
            .cast("binary")
            .alias("data"),
            # The same total again (unchanged region, retried micro-batch) is a duplicate.
            F.concat_ws("-", "region", F.col("up_to_sequence").cast("string")).alias("msg_id"),
        )
        .writeStream.format("jetstream")
        .outputMode("complete")
        .option("servers", URL)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = len(query.recentProgress)
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    print(f"  query read {rows} new orders in {batches} micro-batch{'es' if batches != 1 else ''}")


def show_totals(spark: SparkSession) -> int:
    """Print the latest total per region; return the number of orders they count."""
    latest = (
        spark.read.format("jetstream")
        .option("servers", URL)
        .option("stream", TOTALS)
        .load()
        .select(F.from_json(F.col("data").cast("string"), "map<string,string>").alias("t"))
        .collect()
    )
    for row in sorted(latest, key=lambda r: r.t["region"]):
        t = row.t
        print(f"  {t['region']:<5} revenue {float(t['revenue']):>10,.2f}  orders {t['orders']:>5}")
    return sum(int(row.t["orders"]) for row in latest)


def main() -> None:
    try:  # first, so that without a server it fails at once, before Spark starts
        asyncio.run(create_streams())
    except jetstream.JetStreamConnectError as exc:
        raise SystemExit(exc) from None
    try:
        run_twice()
    finally:
        asyncio.run(delete_streams())


def run_twice() -> None:
    # Spark's Python workers must use this interpreter (it has pyarrow and aioclients).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aioclients-streaming-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    try:
        with tempfile.TemporaryDirectory() as checkpoint:
            asyncio.run(publish_orders(1200, seed=1))
            print(f"Run 1: 1200 orders in {ORDERS}")
            run_pipeline(spark, checkpoint)
            assert show_totals(spark) == 1200

            asyncio.run(publish_orders(300, seed=2))
            print("Run 2, restarted from the checkpoint after 300 more orders")
            run_pipeline(spark, checkpoint)
            # The aggregation state lives in the checkpoint: totals cover both runs,
            # and every order is counted exactly once.
            assert show_totals(spark) == 1500
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
