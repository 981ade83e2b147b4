"""The end-to-end demo: ``python -m aioclients.demo``.

Starts an embedded nats-server (JetStream, temporary store), produces a stream
of realistic order events with the async client, reads them back with ADR-31
batched Direct Get, aggregates revenue per region, writes the results to a
KV-style stream (one message per region) and reads the latest values back
with a ``multi_last`` Direct Get. Prints progress and a short report.

Options: ``--orders N`` (default 20000), ``--nats-url URL`` to use an existing
server instead of the embedded one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass

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


async def run(url: str, count: int, *, suffix: str = "") -> Report:
    """Run the demo; ``suffix`` makes stream and subject names unique (shared servers)."""
    report = Report()
    async with await jetstream.connect(url) as js:
        orders_stream = await js.create_stream(
            f"ORDERS{suffix}",
            subjects=[f"orders{suffix}.>"],
            allow_direct=True,
            duplicate_window=120,
        )
        totals_stream = await js.create_stream(
            f"REGION_TOTALS{suffix}",
            subjects=[f"totals{suffix}.>"],
            max_msgs_per_subject=1,
            allow_direct=True,
        )
        try:
            await _pipeline(js, orders_stream, totals_stream, count, suffix, report)
        finally:
            if suffix:  # on someone else's server, leave nothing behind
                await js.delete_stream(orders_stream.name)
                await js.delete_stream(totals_stream.name)
    return report


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m aioclients.demo", description=__doc__)
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--nats-url", help="use this JetStream server instead of an embedded one")
    args = parser.parse_args(argv)
    if args.nats_url:
        asyncio.run(run(args.nats_url, args.orders, suffix=f"_{uuid.uuid4().hex[:8]}"))
        return
    with NatsServer() as server:
        print(f"Embedded nats-server with JetStream at {server.url}")
        asyncio.run(run(server.url, args.orders))


if __name__ == "__main__":
    main(sys.argv[1:])
