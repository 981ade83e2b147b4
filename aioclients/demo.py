"""The end-to-end demo: ``python -m aioclients.demo``.

Starts an embedded nats-server (JetStream, temporary store), produces a stream
of realistic order events with the async client, reads them back with ADR-31
batched Direct Get, aggregates revenue per region, writes the results to a
KV-style stream (one message per region) and reads the latest values back
with a ``multi_last`` Direct Get.

Then it starts the Liftbridge emulator (two brokers on the same nats-server)
and the nsqd emulator in its event loop, publishes a payment event for most
orders to a two-partition Liftbridge stream (``publish_async``, keyed by order
id) and reads them back with one Subscribe per partition.

A Spark job (local[2]) reads the orders through the ``jetstream`` data source
and the payments through the ``liftbridge`` data source, aggregates revenue and
units per region and product (written back to a JetStream stream through the
``jetstream`` writer and to a Parquet folder), joins the payments to the orders
(orders, paid, collected and outstanding per region) and writes one shipment
request per paid order to NSQ through the ``nsq`` sink (MPUB), while an
``nsq.Reader`` consumes and counts them. Every Spark action runs in a thread
(``asyncio.to_thread``) so the loop keeps serving the emulators Spark's Python
workers talk to. Prints progress and a short report, and checks that the
counts and totals agree across JetStream, Liftbridge, Spark and NSQ (exit
status 1 with ``demo check failed`` when they do not).

It ends with the throughput each system showed. Spark's JVM, log4j and Python
workers write to a log file (``--spark-log``), so their start-up lines do not land
between the demo's.

Options: ``--orders N`` (default 10000), ``--nats-url URL`` to use an existing
server instead of the embedded one, ``--parquet DIR`` to keep the Parquet output
(default: a temporary folder), ``--no-spark`` to skip the Spark job (the asyncio
client then joins the payments and publishes the shipment requests with MPUB),
``--spark-log FILE`` for Spark's own output (default: ``aioclients-demo-spark.log``
in the temporary directory).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aioclients import jetstream, liftbridge, nsq
from aioclients.testing import LiftbridgeCluster, NatsServer, NsqdEmulator

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
METHODS = ("card", "paypal", "invoice")
T = TypeVar("T")
ORDER_SEED = 2026
PAYMENT_SEED = 7
PAID_SHARE = 0.9  # the other orders stay unpaid: the join has something to find
MPUB_BATCH = 500
WAIT = 90.0  # seconds for the NSQ consumer to see every shipment request


@dataclass
class Report:
    published: int = 0
    duplicates: int = 0
    read: int = 0
    publish_seconds: float = 0.0
    read_seconds: float = 0.0
    revenue: dict[str, float] = field(default_factory=dict)
    payments: int = 0  # published to Liftbridge
    payments_read: int = 0  # read back with Subscribe
    payments_seconds: float = 0.0
    payments_read_seconds: float = 0.0
    shipments: int = 0  # received from NSQ
    shipments_seconds: float = 0.0  # from the first send to the last one received
    shipped_by: str = ""
    spark_rows: int = 0  # orders Spark's first job read (through the jetstream source)
    spark_seconds: float = 0.0


@dataclass
class RegionSummary:
    """Orders joined with their payments, for one region."""

    orders: int = 0
    paid: int = 0
    revenue: float = 0.0
    collected: float = 0.0
    paid_units: int = 0


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
    orders = _orders(count, random.Random(ORDER_SEED))
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
    if report.read != count or report.duplicates != min(count, 100):
        raise SystemExit("demo check failed: counts do not add up")


# -- payments through Liftbridge, shipment requests through NSQ --------------------------------


def _payments(orders: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """One payment for most orders (a share stays unpaid), in the orders' order."""
    return [
        {"order_id": o["order_id"], "method": rng.choice(METHODS), "amount": o["amount"]}
        for o in orders
        if rng.random() < PAID_SHARE
    ]


def _expected(
    orders: list[dict[str, Any]], payments: list[dict[str, Any]]
) -> dict[str, RegionSummary]:
    """The join computed in plain Python: what Spark and NSQ must agree with."""
    paid = {p["order_id"]: p["amount"] for p in payments}
    summary = {region: RegionSummary() for region in REGIONS}
    for o in orders:
        row = summary[o["region"]]
        row.orders += 1
        row.revenue += o["amount"]
        if o["order_id"] in paid:
            row.paid += 1
            row.collected += paid[o["order_id"]]
            row.paid_units += o["quantity"]
    return summary


def _shipment(order: dict[str, Any]) -> bytes:
    keys = ("order_id", "region", "product", "quantity")
    return json.dumps({k: order[k] for k in keys}).encode()


def _names(suffix: str) -> tuple[str, str]:
    """The Liftbridge stream (and its subject) and the NSQ topic."""
    return f"payments{suffix}", f"shipments{suffix}"


async def publish_payments(
    brokers: list[str], payments: list[dict[str, Any]], suffix: str, report: Report
) -> None:
    """Publish the payments to a two-partition stream, then read every partition back."""
    stream, _ = _names(suffix)
    count = len(payments)
    async with await liftbridge.connect(brokers) as client:
        await client.create_stream(stream, stream, partitions=2)
        print(
            f"\nPublishing {count} payments to Liftbridge stream {stream} (publish_async, by key)"
        )
        start = time.perf_counter()
        futures = []
        for i, payment in enumerate(payments, 1):
            futures.append(
                await client.publish_async(
                    stream,
                    json.dumps(payment).encode(),
                    key=str(payment["order_id"]).encode(),
                    partitioner="key",
                )
            )
            if i % max(count // 5, 1) == 0 or i == count:
                _progress("publish", i, count)
        acks = await asyncio.gather(*futures)
        seconds = time.perf_counter() - start
        report.payments = sum(a is not None and a.ack_error is None for a in acks)
        per_partition: dict[int, int] = defaultdict(int)
        for ack in acks:
            if ack is not None and ack.partition is not None:
                per_partition[ack.partition] += 1

        print("Reading the payments back with one Subscribe per partition")
        start_read = time.perf_counter()
        collected = 0.0
        for partition in sorted(per_partition):
            sub = client.subscribe(
                stream,
                partition=partition,
                start_at=liftbridge.StartPosition.EARLIEST,
                stop_offset=per_partition[partition] - 1,
            )
            async with sub:
                async for msg in sub:
                    collected += json.loads(msg.value)["amount"]
                    report.payments_read += 1
            _progress(f"part {partition}", per_partition[partition], per_partition[partition])
        read_seconds = time.perf_counter() - start_read
    report.payments_seconds = seconds
    report.payments_read_seconds = read_seconds
    expected = round(sum(p["amount"] for p in payments), 2)
    print(
        f"Published {report.payments} payments in {seconds:.2f}s "
        f"({report.payments / seconds:,.0f} msgs/s) over {len(per_partition)} partitions; "
        f"read {report.payments_read} back in {read_seconds:.2f}s, "
        f"{collected:,.2f} collected"
    )
    if (
        report.payments != count
        or report.payments_read != count
        or abs(round(collected, 2) - expected) > 0.01
    ):
        raise SystemExit("demo check failed: the Liftbridge stream does not hold every payment")


async def consume_shipments(
    nsqd: NsqdEmulator,
    topic: str,
    expected: dict[str, RegionSummary],
    report: Report,
    producer: asyncio.Future[Any],
) -> None:
    """Count the shipment requests an ``nsq.Reader`` receives while ``producer`` (Spark's
    write or the asyncio MPUBs) sends them; check them against the join.

    A failed ``producer`` ends the wait at once (its error is raised); otherwise the
    Reader gets ``WAIT`` seconds to see every request. ``producer`` is awaited before
    returning, so no write is left running.
    """
    total = sum(row.paid for row in expected.values())
    units: dict[str, int] = defaultdict(int)
    seen: set[str] = set()
    started = time.perf_counter()
    async with nsq.Reader(
        topic, "warehouse", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=500
    ) as reader:

        async def take() -> None:
            if total == 0:
                return
            async for msg in reader:
                shipment = json.loads(msg.body)
                await msg.finish()
                seen.add(shipment["order_id"])
                units[shipment["region"]] += shipment["quantity"]
                report.shipments += 1
                if report.shipments % max(total // 5, 1) == 0 or report.shipments == total:
                    _progress("nsq", report.shipments, total)
                if report.shipments == total:
                    report.shipments_seconds = time.perf_counter() - started
                    return

        taking = asyncio.ensure_future(take())
        try:
            deadline = time.monotonic() + WAIT
            waiting: set[asyncio.Future[Any]] = {taking, producer}
            while not taking.done() and time.monotonic() < deadline:
                done, _ = await asyncio.wait(
                    waiting,
                    timeout=deadline - time.monotonic(),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if producer in done:
                    producer.result()  # a failed write fails the demo now, with its error
                    waiting.discard(producer)
        finally:
            taking.cancel()
            await asyncio.gather(taking, return_exceptions=True)
            await asyncio.wait({producer})
        producer.result()
        if not taking.cancelled() and taking.exception() is not None:
            raise taking.exception()  # type: ignore[misc]  # the Reader's own error
        if report.shipments != total:
            raise SystemExit(
                f"demo check failed: NSQ delivered {report.shipments} of {total} shipment "
                f"requests in {WAIT:.0f}s"
            )
    (stats,) = nsqd.stats(topic=topic, include_clients=False)["topics"]
    print(
        f"NSQ: the Reader received {report.shipments} shipment requests from topic {topic} "
        f"({stats['message_count']} published to nsqd)"
    )
    wrong = [r for r in REGIONS if units[r] != expected[r].paid_units]
    if len(seen) != total or stats["message_count"] != total or wrong:
        raise SystemExit(
            "demo check failed: the shipment requests in NSQ do not match the paid orders"
        )
    print("Every paid order reached NSQ once, with the units the orders say")


async def publish_shipments(
    nsqd: NsqdEmulator, topic: str, orders: list[dict[str, Any]], payments: list[dict[str, Any]]
) -> None:
    """Without Spark: the asyncio producer publishes the shipment requests with MPUB."""
    paid = {p["order_id"] for p in payments}
    bodies = [_shipment(o) for o in orders if o["order_id"] in paid]
    async with nsq.Producer(nsqd.tcp_address) as producer:
        for i in range(0, len(bodies), MPUB_BATCH):
            await producer.mpublish(topic, bodies[i : i + MPUB_BATCH])


def _print_summary(title: str, summary: dict[str, RegionSummary]) -> None:
    print(f"\n{title}")
    print(f"  {'region':<6} {'orders':>7} {'paid':>7} {'collected':>15} {'outstanding':>15}")
    for region in REGIONS:
        row = summary[region]
        print(
            f"  {region:<6} {row.orders:>7} {row.paid:>7} {row.collected:>15,.2f} "
            f"{row.revenue - row.collected:>15,.2f}"
        )


# -- the Spark job ----------------------------------------------------------------------------

JAVA_INSTALL = "`apt-get install openjdk-17-jre-headless`"


def java_problem() -> str | None:
    """Why Spark cannot start here, or ``None``: pyspark 4 needs Java 17 or newer.

    Looks for ``java`` where Spark's launcher does: ``$JAVA_HOME/bin/java`` when
    ``JAVA_HOME`` is set, else on ``PATH``; then asks it its version.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = os.path.join(java_home, "bin", "java")
        if not os.access(java, os.X_OK):
            return f"JAVA_HOME is {java_home}, which has no bin/java"
    else:
        found = shutil.which("java")
        if found is None:
            return "no `java` on PATH (and JAVA_HOME is not set)"
        java = found
    try:
        answer = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`{java} -version` failed ({exc})"
    # `openjdk version "17.0.15" ...`; before Java 9: `java version "1.8.0_392"`.
    version = re.search(r'version "(\d+)(?:\.(\d+))?', answer.stderr + answer.stdout)
    if version is None:
        return f"`{java} -version` does not say which Java it is"
    major = int(version[1])
    if major == 1 and version[2] is not None:
        major = int(version[2])
    if major < 17:
        return f"{java} is Java {major}"
    return None


def _start_spark(started: float, log_path: str) -> Any:
    """Start the local[2] session (blocking: the JVM starts) and register the data sources.

    The JVM is launched with its stdout and stderr on ``log_path``: the JVM's warnings,
    log4j's start-up lines and the Python workers' output (they inherit the JVM's
    streams) go there, not between the demo's lines.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    from aioclients.spark import register_data_sources

    # Spark's Python workers must run this interpreter (it has pyarrow and aioclients).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = (
        SparkConf()
        .setMaster("local[2]")
        .setAppName("aioclients-demo")
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.sql.shuffle.partitions", "2")
        .set("spark.sql.session.timeZone", "UTC")
        .set("spark.python.worker.reuse", "true")
    )
    with open(log_path, "ab") as log:  # the JVM keeps its own copy of the descriptor
        gateway = launch_gateway(  # type: ignore[no-untyped-call]
            conf, popen_kwargs={"stdout": log, "stderr": log}
        )
    spark = SparkSession(SparkContext(conf=conf, gateway=gateway))
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    print(f"  Spark up in {time.perf_counter() - started:.1f}s (its own log: {log_path})")
    return spark


async def _in_thread(spark: Any, action: Callable[[], T]) -> T:
    """Run a blocking Spark action in a worker thread, off the loop that serves the emulators.

    The JVM's active session is per thread and Spark looks Python data sources up in it
    (``DATA_SOURCE_NOT_FOUND`` otherwise): make the session active in that thread first.
    """

    def call() -> T:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        return action()

    return await asyncio.to_thread(call)


async def spark_job(
    spark: Any,
    url: str,
    suffix: str,
    report: Report,
    parquet: str | None,
    cluster: LiftbridgeCluster,
    nsqd: NsqdEmulator,
    expected: dict[str, RegionSummary],
) -> None:
    """Read orders (jetstream) and payments (liftbridge), aggregate and join them, write the
    totals to JetStream and Parquet and the shipment requests to NSQ.

    Every Spark call runs in a thread: the emulators live in this event loop and Spark's
    Python workers connect to them. The caller stops ``spark``.
    """
    from pyspark.sql import functions as F

    orders_name, _, spark_totals = _stream_names(suffix)
    payments_name, topic = _names(suffix)
    await _create_spark_totals(url, spark_totals, suffix)

    print("\nThe Spark batch job")
    orders = await _in_thread(
        spark,
        lambda: (
            spark.read.format("jetstream")
            .option("servers", url)
            .option("stream", orders_name)
            .load()
        ),
    )
    print(
        f"  reading {orders_name} through the jetstream data source "
        f"({spark.sparkContext.defaultParallelism} partitions, batched Direct Get)"
    )
    schema = "order_id string, region string, product string, quantity int, amount double"
    parsed = (
        orders.select(F.from_json(F.col("data").cast("string"), schema).alias("o"))
        .select("o.*")
        .cache()
    )
    start = time.perf_counter()
    totals = (
        parsed.groupBy("region", "product")
        .agg(
            F.round(F.sum("amount"), 2).alias("revenue"),
            F.sum("quantity").alias("units"),
            F.count("*").alias("orders"),
        )
        .orderBy("region", "product")
        .cache()
    )
    rows = await _in_thread(spark, totals.collect)
    seconds = time.perf_counter() - start
    counted = sum(r.orders for r in rows)
    # The first job's time is mostly Spark starting its Python workers: time a second read.
    start_warm = time.perf_counter()
    report.spark_rows = await _in_thread(
        spark,
        lambda: (
            spark.read.format("jetstream")
            .option("servers", url)
            .option("stream", orders_name)
            .load()
            .count()
        ),
    )
    report.spark_seconds = time.perf_counter() - start_warm
    print(f"  aggregated {counted} orders into {len(rows)} rows in {seconds:.2f}s")

    print(f"  writing the totals to stream {spark_totals} (jetstream writer, msg_id de-dup)")
    await _in_thread(
        spark,
        totals.select(
            F.concat(F.lit(f"spark_totals{suffix}."), "region", F.lit("."), "product").alias(
                "subject"
            ),
            F.to_json(F.struct("region", "product", "revenue", "units", "orders"))
            .cast("binary")
            .alias("data"),
            F.concat_ws(".", "region", "product").alias("msg_id"),
        )
        .write.format("jetstream")
        .option("servers", url)
        .mode("append")
        .save,
    )
    if parquet is None:
        with tempfile.TemporaryDirectory(prefix="aioclients-demo-") as folder:
            print(
                "  writing the totals to Parquet in a temporary folder (read back, then "
                "removed; --parquet DIR keeps them)"
            )
            written = await _write_parquet(spark, totals, os.path.join(folder, "totals"))
    else:
        print(f"  writing the totals to Parquet at {parquet}")
        written = await _write_parquet(spark, totals, parquet)

    print(
        f"  joining the orders with {payments_name} read through the liftbridge data source "
        "(one Subscribe per partition)"
    )
    start_join = time.perf_counter()
    payments_raw = await _in_thread(
        spark,
        lambda: (
            spark.read.format("liftbridge")
            .option("brokers", ",".join(cluster.addresses))
            .option("stream", payments_name)
            .load()
        ),
    )
    payments = payments_raw.select(
        F.from_json(
            F.col("value").cast("string"), "order_id string, method string, amount double"
        ).alias("p")
    ).select("p.order_id", F.col("p.amount").alias("paid_amount"))
    joined = parsed.join(payments, "order_id", "left").cache()
    summary_rows = await _in_thread(
        spark,
        joined.groupBy("region")
        .agg(
            F.count("*").alias("orders"),
            F.count("paid_amount").alias("paid"),
            F.sum("amount").alias("revenue"),
            F.coalesce(F.sum("paid_amount"), F.lit(0.0)).alias("collected"),
            F.coalesce(
                F.sum(F.when(F.col("paid_amount").isNotNull(), F.col("quantity"))), F.lit(0)
            ).alias("paid_units"),
        )
        .collect,
    )
    join_seconds = time.perf_counter() - start_join

    print(f"  writing one shipment request per paid order to NSQ topic {topic} (nsq sink)")
    shipments = joined.where(F.col("paid_amount").isNotNull()).select(
        F.to_json(F.struct("order_id", "region", "product", "quantity")).alias("data")
    )
    writer = (
        shipments.write.format("nsq")
        .option("nsqd", nsqd.tcp_address)
        .option("topic", topic)
        .option("batchSize", str(MPUB_BATCH))
        .mode("append")
    )
    writing = asyncio.ensure_future(_in_thread(spark, writer.save))
    report.shipped_by = "Spark sink"
    await consume_shipments(nsqd, topic, expected, report, writing)

    stored = await _count_messages(url, spark_totals)
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

    joined_summary = {
        r.region: RegionSummary(r.orders, r.paid, r.revenue, r.collected, r.paid_units)
        for r in summary_rows
    }
    _print_summary(
        f"Spark report: orders joined with Liftbridge payments ({join_seconds:.2f}s)",
        joined_summary,
    )
    if not _summaries_agree(joined_summary, expected):
        raise SystemExit("demo check failed: Spark's join does not match the payments")
    print("Spark's join matches the payments published to Liftbridge")


async def _write_parquet(spark: Any, totals: Any, path: str) -> int:
    """Write ``totals`` to ``path`` and read them back: the number of rows written."""
    await _in_thread(spark, lambda: totals.write.mode("overwrite").parquet(path))
    rows: int = await _in_thread(spark, lambda: spark.read.parquet(path).count())
    return rows


def _summaries_agree(got: dict[str, RegionSummary], expected: dict[str, RegionSummary]) -> bool:
    for region in REGIONS:
        g, e = got.get(region), expected[region]
        if g is None or (g.orders, g.paid, g.paid_units) != (e.orders, e.paid, e.paid_units):
            return False
        if abs(g.collected - e.collected) > 0.01 or abs(g.revenue - e.revenue) > 0.01:
            return False
    return True


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


# -- putting it together ----------------------------------------------------------------------


async def _demo(
    url: str, count: int, suffix: str, parquet: str | None, with_spark: bool, spark_log: str
) -> None:
    spark_start: asyncio.Future[Any] | None = None
    if with_spark:
        if importlib.util.find_spec("pyspark") is None:
            print(
                "Skipping the Spark job (pyspark is not installed); install it with: "
                "pip install 'aioclients[spark]'"
            )
        else:
            # The JVM takes a while to start: let it start while the JetStream client works.
            print("Starting Spark (local[2]) in the background")
            spark_start = asyncio.ensure_future(
                asyncio.to_thread(_start_spark, time.perf_counter(), spark_log)
            )
    try:
        await _pipelines(url, count, suffix, parquet, spark_start)
    finally:
        if spark_start is not None:
            await _stop_spark(spark_start)


async def _pipelines(
    url: str,
    count: int,
    suffix: str,
    parquet: str | None,
    spark_start: asyncio.Future[Any] | None,
) -> None:
    report = await run(url, count, suffix=suffix)
    orders = _orders(count, random.Random(ORDER_SEED))
    payments = _payments(orders, random.Random(PAYMENT_SEED))
    expected = _expected(orders, payments)
    _, topic = _names(suffix)
    # Spark launches its JVM with fork(): that must happen before the Liftbridge emulator's
    # gRPC threads exist (a fork beside them can break both), so wait for the session here.
    spark = None if spark_start is None else await spark_start
    async with NsqdEmulator() as nsqd, LiftbridgeCluster(brokers=2, nats_url=url) as cluster:
        print(
            f"\nLiftbridge emulator (2 brokers on the same nats-server) at "
            f"{', '.join(cluster.addresses)}; nsqd emulator at {nsqd.tcp_address}"
        )
        await publish_payments(cluster.addresses, payments, suffix, report)
        _print_summary("Orders joined with their payments (computed by the demo)", expected)
        if spark is not None:
            await spark_job(spark, url, suffix, report, parquet, cluster, nsqd, expected)
        else:
            print(f"\nPublishing one shipment request per paid order to NSQ topic {topic} (MPUB)")
            report.shipped_by = "MPUB"
            publishing = asyncio.ensure_future(publish_shipments(nsqd, topic, orders, payments))
            await consume_shipments(nsqd, topic, expected, report, publishing)
    print(
        f"\nAll checks passed: {report.read} orders in JetStream, {report.payments} payments "
        f"in Liftbridge, {report.shipments} shipment requests through NSQ"
    )
    _print_throughput(report)


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:>9,.0f}/s" if seconds > 0 else f"{'-':>11}"


def _print_throughput(report: Report) -> None:
    """One line per system: what it moved per second in this run, on this machine."""
    r = report
    print("\nThroughput in this run (messages per second, on this machine)")
    print(
        f"  JetStream   publish_async {_rate(r.published, r.publish_seconds)}   "
        f"Direct Get (batched) {_rate(r.read, r.read_seconds)}"
    )
    print(
        f"  Liftbridge  publish_async {_rate(r.payments, r.payments_seconds)}   "
        f"Subscribe            {_rate(r.payments_read, r.payments_read_seconds)}"
    )
    print(
        f"  NSQ         {r.shipped_by:<13} {_rate(r.shipments, r.shipments_seconds)}   "
        "(sent, then received by the Reader)"
    )
    if r.spark_rows:
        print(
            f"  Spark       jetstream read {_rate(r.spark_rows, r.spark_seconds)}   "
            "(a second query over the orders: planning and reading, workers warm)"
        )


async def _stop_spark(start: asyncio.Future[Any]) -> None:
    try:
        spark = await start
    except Exception:  # already raised where the session was awaited (or not needed)
        return
    await asyncio.to_thread(spark.stop)


def _run_all(
    url: str, count: int, suffix: str, parquet: str | None, with_spark: bool, spark_log: str
) -> None:
    asyncio.run(_demo(url, count, suffix, parquet, with_spark, spark_log))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m aioclients.demo", description=__doc__)
    parser.add_argument("--orders", type=int, default=10_000)
    parser.add_argument("--nats-url", help="use this JetStream server instead of an embedded one")
    parser.add_argument(
        "--parquet",
        help="keep the Spark job's Parquet output here (default: a temporary folder, removed)",
    )
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark job")
    parser.add_argument(
        "--spark-log",
        default=os.path.join(tempfile.gettempdir(), "aioclients-demo-spark.log"),
        help="where Spark's JVM, log4j and Python workers write (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.orders < 1:
        parser.error("--orders must be at least 1")
    if not args.no_spark and importlib.util.find_spec("pyspark") is not None:
        # Before anything starts: without Java, Spark would end the demo midway with a
        # long traceback whose cause is only in its log file.
        problem = java_problem()
        if problem is not None:
            raise SystemExit(
                f"The demo's Spark part needs Java 17 or newer: {problem}. Install it "
                f"(e.g. {JAVA_INSTALL}) or set JAVA_HOME, or run the rest without Spark: "
                "--no-spark (`./run demo --no-spark`)"
            )
    started = time.perf_counter()
    if args.nats_url:
        suffix = f"_{uuid.uuid4().hex[:8]}"
        try:
            _run_all(
                args.nats_url, args.orders, suffix, args.parquet, not args.no_spark, args.spark_log
            )
        finally:
            asyncio.run(cleanup(args.nats_url, suffix))
    else:
        with NatsServer() as server:
            print(f"Embedded nats-server with JetStream at {server.url}")
            _run_all(server.url, args.orders, "", args.parquet, not args.no_spark, args.spark_log)
    print(f"\nDemo finished in {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    main(sys.argv[1:])
