"""The end-to-end demo: ``python -m aioclients.demo``.

Starts an embedded nats-server (JetStream, temporary store), produces a stream
of realistic order events with the async client, reads them back with ADR-31
batched Direct Get, aggregates revenue per region, writes the results to a
KV-style stream (one message per region) and reads the latest values back
with a ``multi_last`` Direct Get.

Then a Spark job (local[2]) reads the same orders through the ``jetstream``
data source, aggregates revenue and units per region and product, and writes
the results back: to a JetStream stream through the ``jetstream`` writer and to
a Parquet folder. Prints progress and a short report, and checks that Spark's
totals agree with the asyncio client's.

Options: ``--orders N`` (default 20000), ``--nats-url URL`` to use an existing
server instead of the embedded one, ``--parquet DIR`` to keep the Parquet output
(default: a temporary folder), ``--no-spark`` to skip the Spark job.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from aioclients import jetstream
from aioclients.testing import NatsServer

REGIONS = ("emea", "amer", "apac")
PRODUCTS = ("keyboard", "mouse", "monitor", "laptop", "headset", "dock")
PRICES = {
    "keyboard": 49.0,
    "mouse": 19.0,
    "monitor": 229.0,
    "laptop": 1199.0,
    "headset": 89.0,
    "dock": 149.0,
}


@dataclass
class Report:
    published: int = 0
    duplicates: int = 0
    read: int = 0
    publish_seconds: float = 0.0
    read_seconds: float = 0.0
    revenue: dict[str, float] = field(default_factory=dict)


def _orders(count: int, rng: random.Random) -> list[dict[str, object]]:
    orders = []
    for i in range(count):
        product = rng.choice(PRODUCTS)
        quantity = rng.randint(1, 5)
        orders.append(
            {
                "order_id": f"ord-{i:07d}",
                "region": rng.choice(REGIONS),
                "product": product,
                "quantity": quantity,
                "amount": round(PRICES[product] * quantity, 2),
            }
        )
    return orders


def _progress(label: str, done: int, total: int) -> None:
    width = 30
    filled = width * done // max(total, 1)
    print(f"  {label:<8} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}", flush=True)


def _stream_names(suffix: str) -> tuple[str, str, str]:
    return f"ORDERS{suffix}", f"REGION_TOTALS{suffix}", f"SPARK_TOTALS{suffix}"


async def run(url: str, count: int, *, suffix: str = "") -> Report:
    """Run the asyncio part; ``suffix`` makes stream and subject names unique (shared servers).

    The streams stay for the Spark job; :func:`cleanup` removes them.
    """
    report = Report()
    orders_name, totals_name, _ = _stream_names(suffix)
    async with await jetstream.connect(url) as js:
        orders_stream = await js.create_stream(
            orders_name,
            subjects=[f"orders{suffix}.>"],
            allow_direct=True,
            duplicate_window=120,
        )
        totals_stream = await js.create_stream(
            totals_name,
            subjects=[f"totals{suffix}.>"],
            max_msgs_per_subject=1,
            allow_direct=True,
        )
        await _pipeline(js, orders_stream, totals_stream, count, suffix, report)
    return report


async def cleanup(url: str, suffix: str) -> None:
    """Delete the demo's streams (on someone else's server, leave nothing behind)."""
    async with await jetstream.connect(url) as js:
        for name in _stream_names(suffix):
            try:
                await js.delete_stream(name)
            except jetstream.StreamNotFoundError:
                pass


async def _pipeline(
    js: jetstream.JetStream,
    orders_stream: jetstream.Stream,
    totals_stream: jetstream.Stream,
    count: int,
    suffix: str,
    report: Report,
) -> None:
    print(f"Producing {count} orders to stream {orders_stream.name} (publish_async, msg_id de-dup)")
    orders = _orders(count, random.Random(2026))
    start = time.perf_counter()
    futures = []
    for i, order in enumerate(orders, 1):
        payload = json.dumps(order).encode()
        futures.append(
            await js.publish_async(
                f"orders{suffix}.{order['region']}", payload, msg_id=str(order["order_id"])
            )
        )
        if i % max(count // 5, 1) == 0 or i == count:
            _progress("publish", i, count)
    acks = await asyncio.gather(*futures)
    report.publish_seconds = time.perf_counter() - start
    report.published = sum(not a.duplicate for a in acks)

    # A producer retry: the same order ids again are recognised as duplicates.
    for order in orders[:100]:
        ack = await js.publish(
            f"orders{suffix}.{order['region']}",
            json.dumps(order).encode(),
            msg_id=str(order["order_id"]),
        )
        report.duplicates += ack.duplicate

    print("Reading the orders back with batched Direct Get (ADR-31)")
    revenue: dict[str, float] = defaultdict(float)
    units: dict[str, int] = defaultdict(int)
    start = time.perf_counter()
    seq = 1
    while True:
        batch = orders_stream.direct_get_batch(batch=5000, seq=seq)
        async for msg in batch:
            order = json.loads(msg.data)
            revenue[order["region"]] += order["amount"]
            units[order["region"]] += order["quantity"]
            report.read += 1
            seq = msg.seq + 1
        _progress("read", report.read, report.published)
        if not batch.num_pending:
            break
    report.read_seconds = time.perf_counter() - start

    report.revenue = {region: round(revenue[region], 2) for region in REGIONS}
    for region in REGIONS:
        await js.publish(
            f"totals{suffix}.{region}",
            json.dumps({"revenue": round(revenue[region], 2), "units": units[region]}).encode(),
        )
    latest = {
        msg.subject.split(".", 1)[1]: json.loads(msg.data)
        async for msg in totals_stream.direct_get_last_for([f"totals{suffix}.>"])
    }

    print("\nRevenue per region (read back from REGION_TOTALS with multi_last Direct Get)")
    for region in REGIONS:
        row = latest[region]
        print(f"  {region:<5} {row['revenue']:>14,.2f}  {row['units']:>7} units")
    print(
        f"\nPublished {report.published} orders in {report.publish_seconds:.2f}s "
        f"({report.published / report.publish_seconds:,.0f} msgs/s); "
        f"{report.duplicates} retried publishes de-duplicated"
    )
    print(
        f"Read {report.read} orders in {report.read_seconds:.2f}s "
        f"({report.read / report.read_seconds:,.0f} msgs/s)"
    )
    if report.read != count or report.duplicates != 100:
        raise SystemExit("demo check failed: counts do not add up")


# -- the Spark job ----------------------------------------------------------------------------


def spark_job(url: str, suffix: str, report: Report, parquet: str) -> None:
    """Read the orders with the jetstream data source, aggregate, write to JetStream and Parquet."""
    try:
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        from aioclients.spark import register_data_sources
    except ImportError as exc:
        print(f"\nSkipping the Spark job ({exc}); install it with: pip install 'aioclients[spark]'")
        return
    orders_name, _, spark_totals = _stream_names(suffix)
    asyncio.run(_create_spark_totals(url, spark_totals, suffix))

    print("\nStarting Spark (local[2]) for the batch job")
    start = time.perf_counter()
    # Spark's Python workers must run this interpreter (it has pyarrow and aioclients).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aioclients-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        register_data_sources(spark)
        print(f"  Spark up in {time.perf_counter() - start:.1f}s")
        orders = (
            spark.read.format("jetstream")
            .option("servers", url)
            .option("stream", orders_name)
            .load()
        )
        print(
            f"  reading {orders_name} through the jetstream data source "
            f"({spark.sparkContext.defaultParallelism} partitions, batched Direct Get)"
        )
        schema = "order_id string, region string, product string, quantity int, amount double"
        parsed = orders.select(F.from_json(F.col("data").cast("string"), schema).alias("o"))
        start = time.perf_counter()
        totals = (
            parsed.groupBy("o.region", "o.product")
            .agg(
                F.round(F.sum("o.amount"), 2).alias("revenue"),
                F.sum("o.quantity").alias("units"),
                F.count("*").alias("orders"),
            )
            .orderBy("region", "product")
            .cache()
        )
        rows = totals.collect()
        seconds = time.perf_counter() - start
        counted = sum(r.orders for r in rows)
        print(f"  aggregated {counted} orders into {len(rows)} rows in {seconds:.2f}s")

        print(f"  writing the totals to stream {spark_totals} (jetstream writer, msg_id de-dup)")
        totals.select(
            F.concat(F.lit(f"spark_totals{suffix}."), "region", F.lit("."), "product").alias(
                "subject"
            ),
            F.to_json(F.struct("region", "product", "revenue", "units", "orders"))
            .cast("binary")
            .alias("data"),
            F.concat_ws(".", "region", "product").alias("msg_id"),
        ).write.format("jetstream").option("servers", url).mode("append").save()
        print(f"  writing the totals to Parquet at {parquet}")
        totals.write.mode("overwrite").parquet(parquet)
        written = spark.read.parquet(parquet).count()
    finally:
        spark.stop()

    stored = asyncio.run(_count_messages(url, spark_totals))
    by_region: dict[str, float] = defaultdict(float)
    for r in rows:
        by_region[r.region] += r.revenue
    print("\nSpark report: revenue per region and product")
    for r in rows:
        print(f"  {r.region:<5} {r.product:<9} {r.revenue:>13,.2f}  {r.units:>6} units")
    print(
        f"Spark read {counted} orders in {seconds:.2f}s (a first job: that includes starting "
        f"Spark's Python workers); {stored} totals in {spark_totals}, {written} rows in Parquet"
    )
    mismatched = [
        region
        for region in REGIONS
        if abs(by_region[region] - report.revenue.get(region, 0.0)) > 0.01 * len(rows)
    ]
    if counted != report.read or stored != len(rows) or written != len(rows) or mismatched:
        raise SystemExit("demo check failed: Spark's totals do not match the orders")
    print("Spark's revenue per region matches the asyncio client's")


async def _create_spark_totals(url: str, name: str, suffix: str) -> None:
    async with await jetstream.connect(url) as js:
        await js.create_stream(
            name,
            subjects=[f"spark_totals{suffix}.>"],
            allow_direct=True,
            max_msgs_per_subject=1,
            duplicate_window=120,
        )


async def _count_messages(url: str, name: str) -> int:
    async with await jetstream.connect(url) as js:
        return (await js.stream_info(name)).state.messages


def _run_all(url: str, count: int, suffix: str, parquet: str | None, with_spark: bool) -> None:
    report = asyncio.run(run(url, count, suffix=suffix))
    if with_spark:
        if parquet is not None:
            spark_job(url, suffix, report, parquet)
        else:
            with tempfile.TemporaryDirectory(prefix="aioclients-demo-") as folder:
                spark_job(url, suffix, report, os.path.join(folder, "region_product_totals"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m aioclients.demo", description=__doc__)
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--nats-url", help="use this JetStream server instead of an embedded one")
    parser.add_argument("--parquet", help="write the Spark job's Parquet output here")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark job")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.nats_url:
        suffix = f"_{uuid.uuid4().hex[:8]}"
        try:
            _run_all(args.nats_url, args.orders, suffix, args.parquet, not args.no_spark)
        finally:
            asyncio.run(cleanup(args.nats_url, suffix))
    else:
        with NatsServer() as server:
            print(f"Embedded nats-server with JetStream at {server.url}")
            _run_all(server.url, args.orders, "", args.parquet, not args.no_spark)
    print(f"\nDemo finished in {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    main(sys.argv[1:])
