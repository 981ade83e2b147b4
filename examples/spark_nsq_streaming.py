"""A Spark structured-streaming job reading an NSQ channel: shipment events in, counts per
carrier out.

``spark.readStream.format("nsq")`` consumes topic ``shipments`` on channel ``spark``;
each micro-batch's messages stay in flight at nsqd until Spark has committed the
batch, then they are finished (at least once: after a failure a batch may be read
twice, and NSQ keeps no order). The job counts events per carrier in a memory sink
and checks that nsqd has nothing left in flight or queued at the end.

Needs the spark extra (``pip install "aioclients[spark]"``) and Java 17. Against a
real nsqd: ``NSQD_TCP=127.0.0.1:4150 NSQD_HTTP=127.0.0.1:4151 python
examples/spark_nsq_streaming.py``; without them it starts the nsqd emulator from
``aioclients.testing`` in a background thread.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from aioclients import nsq
from aioclients.spark import register_data_sources

TOPIC = f"shipments_{uuid.uuid4().hex[:8]}"
CHANNEL = "spark"
EVENTS = 500
CARRIERS = ("dhl", "ups", "fedex")


@contextmanager
def nsqd_addresses() -> Iterator[tuple[str, Any]]:
    """nsqd's TCP address, and a function giving the channel's stats (depth, in flight)."""
    tcp, http = os.environ.get("NSQD_TCP"), os.environ.get("NSQD_HTTP")
    if tcp:

        def stats_http() -> dict[str, int]:
            import urllib.request

            url = f"http://{http}/stats?format=json&topic={TOPIC}&channel={CHANNEL}"
            with urllib.request.urlopen(url, timeout=10) as answer:
                doc = json.load(answer)
            channel = doc["topics"][0]["channels"][0]
            return {"depth": channel["depth"], "in_flight": channel["in_flight_count"]}

        yield tcp, stats_http if http else None
        return

    from aioclients.testing import NsqdEmulator

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    emulator = NsqdEmulator()
    on_loop(emulator.start())

    async def stats() -> dict[str, int]:
        channel = emulator.stats(TOPIC, CHANNEL)["topics"][0]["channels"][0]
        return {"depth": channel["depth"], "in_flight": channel["in_flight_count"]}

    try:
        yield emulator.tcp_address, lambda: on_loop(stats())
    finally:
        on_loop(emulator.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


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
    with nsqd_addresses() as (address, channel_stats), tempfile.TemporaryDirectory() as cp:
        asyncio.run(publish_events(address))
        print(f"Published {EVENTS} shipment events to NSQ topic {TOPIC}")
        events = (
            spark.readStream.format("nsq")
            .option("nsqd", address)
            .option("topic", TOPIC)
            .option("channel", CHANNEL)
            .option("maxMessagesPerTrigger", 200)
            .load()
            .select(
                F.from_json(F.col("body").cast("string"), "shipment int, carrier string").alias(
                    "e"
                ),
                "id",
                "attempts",
            )
            .select("e.*", "id", "attempts")
        )
        query = (
            events.writeStream.format("memory")
            .queryName("shipments")
            .option("checkpointLocation", cp)
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
            while channel_stats is not None and channel_stats() != {"depth": 0, "in_flight": 0}:
                if time.monotonic() > deadline:
                    raise SystemExit(f"nsqd still holds messages: {channel_stats()}")
                time.sleep(0.5)
        finally:
            query.stop()
        batches = len([p for p in query.recentProgress if p["numInputRows"]])
        rows = spark.sql("select carrier, count(*) as n from shipments group by carrier")
        counts = {r.carrier: r.n for r in rows.collect()}
        distinct = spark.sql("select count(distinct id) from shipments").first()[0]
        print(f"Spark read {sum(counts.values())} events in {batches} micro-batches (<= 200 each)")
        for carrier in sorted(counts):
            print(f"  {carrier:<6} {counts[carrier]:>4} shipments")
        assert sum(counts.values()) == EVENTS == distinct, "each event once in a clean run"
        if channel_stats is not None:
            print(f"nsqd channel {CHANNEL!r}: {channel_stats()} (every message finished)")
    spark.stop()


if __name__ == "__main__":
    main()
