"""Checks shared by the local-cluster and Spark Connect test modules: one batch read
and one streaming read per format, exact, on whatever session they are given.

Emulators run in the test's event loop: every Spark call runs in a thread. Outputs
go to JSON files read back with plain Python (works the same over Spark Connect,
where the sink runs in the server).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from aioclients import jetstream, liftbridge
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
