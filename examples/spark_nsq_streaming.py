"""A Spark structured-streaming job reading an NSQ channel: shipment events in, counts per
carrier out.

``spark.readStream.format("nsq")`` consumes a topic of its own on channel ``spark``;
each micro-batch's messages stay in flight at nsqd until Spark has committed the
batch, then they are finished (at least once: after a failure a batch may be read
twice, and NSQ keeps no order). The job counts events per carrier in a memory sink,
checks that nsqd has nothing left in flight or queued at the end, and deletes its topic.

Needs Java 17 (e.g. `apt-get install openjdk-17-jre-headless`) and the spark extra
(`./run` installs it into `.venv`). Run it against the local servers (an nsqd emulator
among them), from a checkout, each command in a terminal of its own:

    .venv/bin/aioclients-servers
    .venv/bin/python examples/spark_nsq_streaming.py

Spark prints its own start-up lines (the JVM's, log4j's) before the job's. With pip:
`pip install "aioclients[servers,spark]"`, then the same without `.venv/bin/`.
A real nsqd works too; NSQD_TCP and NSQD_HTTP (defaults 127.0.0.1:4150 and
127.0.0.1:4151) name it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import tempfile
import time
import urllib.request
import uuid

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from aioclients import nsq
from aioclients.spark import register_data_sources

NSQD_TCP = os.environ.get("NSQD_TCP", "127.0.0.1:4150")
NSQD_HTTP = os.environ.get("NSQD_HTTP", "127.0.0.1:4151")
TOPIC = f"shipments_{uuid.uuid4().hex[:8]}"
CHANNEL = "spark"
EVENTS = 500
CARRIERS = ("dhl", "ups", "fedex")


def channel_stats() -> dict[str, int]:
    """What nsqd holds for the job's channel: queued (depth) and in flight."""
    url = f"http://{NSQD_HTTP}/stats?format=json&topic={TOPIC}&channel={CHANNEL}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        doc = json.load(answer)
    channel = doc["topics"][0]["channels"][0]
    return {"depth": channel["depth"], "in_flight": channel["in_flight_count"]}


def delete_topic() -> None:
    url = f"http://{NSQD_HTTP}/topic/delete?topic={TOPIC}"
    with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10):
        pass


async def publish_events(address: str) -> None:
    rng = random.Random(7)
    async with nsq.Producer(address) as producer:
        # The channel exists once the job subscribes; until then nsqd keeps the topic's
        # messages for the first channel, so publishing first loses nothing.
        events = [
            json.dumps({"shipment": i, "carrier": rng.choice(CARRIERS)}).encode()
            for i in range(EVENTS)
        ]
        for start in range(0, EVENTS, 100):
            await producer.mpublish(TOPIC, events[start : start + 100])


def main() -> None:
    try:  # first, so that without nsqd it fails at once, before Spark starts
        asyncio.run(publish_events(NSQD_TCP))
    except nsq.NSQConnectError as exc:
        raise SystemExit(exc) from None
    print(f"Published {EVENTS} shipment events to NSQ topic {TOPIC}")
    try:
        run_job()
    finally:
        delete_topic()


def run_job() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need aioclients
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aioclients-nsq-streaming")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    try:
        with tempfile.TemporaryDirectory() as checkpoint:
            count_shipments(spark, checkpoint)
    finally:
        spark.stop()


def count_shipments(spark: SparkSession, checkpoint: str) -> None:
    events = (
        spark.readStream.format("nsq")
        .option("nsqd", NSQD_TCP)
        .option("topic", TOPIC)
        .option("channel", CHANNEL)
        .option("maxMessagesPerTrigger", 200)
        .load()
        .select(
            F.from_json(F.col("body").cast("string"), "shipment int, carrier string").alias("e"),
            "id",
            "attempts",
        )
        .select("e.*", "id", "attempts")
    )
    query = (
        events.writeStream.format("memory")
        .queryName("shipments")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        deadline = time.monotonic() + 180
        while spark.sql("select count(*) from shipments").first()[0] < EVENTS:
            if time.monotonic() > deadline or query.exception() is not None:
                raise SystemExit(f"the streaming query stalled: {query.exception()}")
            time.sleep(0.5)
        # Every batch is finished once Spark has committed it (at the latest at the
        # next trigger): wait for nsqd to have nothing left.
        while channel_stats() != {"depth": 0, "in_flight": 0}:
            if time.monotonic() > deadline:
                raise SystemExit(f"nsqd still holds messages: {channel_stats()}")
            time.sleep(0.5)
    finally:
        query.stop()
    batches = len([p for p in query.recentProgress if p["numInputRows"]])
    rows = spark.sql("select carrier, count(*) as n from shipments group by carrier")
    counts = {r.carrier: r.n for r in rows.collect()}
    distinct = spark.sql("select count(distinct id) from shipments").first()[0]
    print(
        f"Spark read {sum(counts.values())} events in {batches} "
        f"micro-batch{'es' if batches != 1 else ''} (<= 200 each)"
    )
    for carrier in sorted(counts):
        print(f"  {carrier:<6} {counts[carrier]:>4} shipments")
    assert sum(counts.values()) == EVENTS == distinct, "each event once in a clean run"
    print(f"nsqd channel {CHANNEL!r}: {channel_stats()} (every message finished)")


if __name__ == "__main__":
    main()
