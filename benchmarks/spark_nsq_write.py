"""The ``nsq`` Spark writer against our ``Producer.mpublish`` loop.

Writes ``--count`` rows of 100-byte ``data`` with ``df.write.format("nsq")``
(MPUB batches of ``--batch`` rows, the writer's default 500) on ``--master``
(default ``local[2]``), with 1, 2 and 4 partitions, after a warm-up write and
with the input cached. The reference, measured right before each write on the
same nsqd: the faster of two asyncio loops on one Producer with ``--batch`` bodies
per MPUB, every OK awaited: ``await producer.mpublish(topic, bodies)`` one at a
time, and the same with ``--in-flight`` (default 4, as the writer) MPUBs pipelined
(nsqd answers in order; awaiting each before the next leaves nsqd idle for a
round trip per MPUB, so the pipelined loop is the fair reference when it wins).
The nsqd is the emulator in a
process of its own (see _nsq_common.py) unless --nsqd-tcp/--nsqd-http name a
real one; the topic's message count is checked after every write.

    python benchmarks/spark_nsq_write.py --count 200000 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import time
import urllib.request
import uuid

from _loop import add_loop_argument, run_async, use_loop
from _nsq_common import PAYLOAD, emulated_nsqd
from _spark_write_common import measure, spark_session

from aioclients.nsq import Producer


async def mpublish_loop(tcp: str, topic: str, count: int, batch: int) -> float:
    bodies = [PAYLOAD] * batch
    async with Producer(tcp) as producer:
        start = time.perf_counter()
        for _ in range(count // batch):
            await producer.mpublish(topic, bodies)
        return (count // batch) * batch / (time.perf_counter() - start)


async def pipelined_mpublish_loop(
    tcp: str, topic: str, count: int, batch: int, in_flight: int
) -> float:
    bodies = [PAYLOAD] * batch
    async with Producer(tcp) as producer:
        start = time.perf_counter()
        sent: collections.deque[asyncio.Future[None]] = collections.deque()
        for _ in range(count // batch):
            if len(sent) >= in_flight:
                await sent.popleft()
            sent.append(asyncio.ensure_future(producer.mpublish(topic, bodies)))
        while sent:
            await sent.popleft()
        return (count // batch) * batch / (time.perf_counter() - start)


def message_count(http: str, topic: str) -> int:
    url = f"http://{http}/stats?format=json&topic={topic}"
    with urllib.request.urlopen(url, timeout=30) as reply:
        stats = json.load(reply)
    topics = stats.get("topics") or stats.get("data", {}).get("topics") or []
    return sum(t["message_count"] for t in topics if t["topic_name"] == topic)


def delete_topic(http: str, topic: str) -> None:
    request = urllib.request.Request(f"http://{http}/topic/delete?topic={topic}", method="POST")
    with urllib.request.urlopen(request, timeout=30):
        pass


def run(tcp: str, http: str, args: argparse.Namespace) -> None:
    spark = spark_session(args.master, "aioclients-spark-nsq-write-bench")
    topic = [""]
    loops: dict[str, float] = {}

    def reference() -> float:
        # Both loops, each on a fresh topic (reset() deletes the one before).
        loops["serial"] = run_async(mpublish_loop(tcp, topic[0], args.count, args.batch))
        check()
        reset()
        loops["pipelined"] = run_async(
            pipelined_mpublish_loop(tcp, topic[0], args.count, args.batch, args.in_flight)
        )
        check()
        return max(loops.values())

    def reset() -> None:
        # Delete the last topic: the emulator keeps a topic's messages in memory (no
        # channel consumes them), and millions of them slow every later round down.
        if topic[0]:
            delete_topic(http, topic[0])
        topic[0] = f"sparkwrite-{uuid.uuid4().hex[:12]}"

    def check() -> None:
        got = message_count(http, topic[0])
        if got != args.count:
            raise SystemExit(f"topic {topic[0]} got {got} messages, expected {args.count}")

    try:
        measure(
            title=f"nsq writer ({args.master}, MPUB batches of {args.batch})",
            count=args.count,
            partitions=[int(p) for p in args.partitions.split(",")],
            rounds=args.rounds,
            make_df=lambda parts: spark.range(0, args.count, numPartitions=parts).selectExpr(
                "cast(repeat('x', 100) as binary) as data"
            ),
            reset=reset,
            write=lambda df: (
                df.write.format("nsq")
                .option("nsqd", tcp)
                .option("topic", topic[0])
                .option("batchSize", str(args.batch))
                .mode("append")
                .save()
            ),
            check=check,
            reference=reference,
            reference_name="Producer.mpublish loop",
            extra=lambda: (
                f"loops msgs/s: one at a time {loops['serial']:,.0f}, "
                f"{args.in_flight} in flight {loops['pipelined']:,.0f}"
            ),
        )
    finally:
        if topic[0]:
            delete_topic(http, topic[0])
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=500, help="rows per MPUB")
    parser.add_argument("--partitions", default="1,2,4", help="comma-separated counts")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--in-flight", type=int, default=4, help="MPUBs of the pipelined loop")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--nsqd-tcp", help="a real nsqd's TCP address (host:port)")
    parser.add_argument("--nsqd-http", help="that nsqd's HTTP address (host:port)")
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    if args.nsqd_tcp:
        run(args.nsqd_tcp, args.nsqd_http or args.nsqd_tcp.rsplit(":", 1)[0] + ":4151", args)
        return
    with emulated_nsqd() as (tcp, http):
        run(tcp, http, args)


if __name__ == "__main__":
    main()
