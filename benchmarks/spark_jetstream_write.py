"""The ``jetstream`` Spark writer against one ``publish_async`` loop of ours.

Writes ``--count`` rows (subject ``sparkwrite.<id % 100>``, 100-byte ``data``
and, unless ``--no-msg-id``, a ``msg_id`` column for de-duplication) with
``df.write.format("jetstream")`` on ``--master`` (default ``local[2]``), with 1,
2 and 4 partitions, after a warm-up write and with the input cached. The
reference, measured right before each write on the same server: one asyncio
loop of ``js.publish_async(subject, data, msg_id=...)`` over the same rows, then
``publish_async_complete``. Both check every ack; the stream's message count is
checked after every write.

    python benchmarks/spark_jetstream_write.py --count 200000 --rounds 2
"""

from __future__ import annotations

import argparse
import time

from _loop import add_loop_argument, run_async, use_loop
from _spark_write_common import measure, spark_session

from aioclients import jetstream
from aioclients.testing import NatsServer

STREAM = "SPARK_WRITE_BENCH"
PAYLOAD = b"x" * 100


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


async def publish_async_loop(url: str, count: int, msg_id: bool) -> float:
    subjects = [f"sparkwrite.{i % 100}" for i in range(100)]
    ids = [f"m-{i}" for i in range(count)] if msg_id else None
    async with await jetstream.connect(url) as js:
        start = time.perf_counter()
        for i in range(count):
            await js.publish_async(
                subjects[i % 100], PAYLOAD, msg_id=ids[i] if ids is not None else None
            )
        await js.publish_async_complete(timeout=120)
        return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--partitions", default="1,2,4", help="comma-separated counts")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-msg-id", action="store_true", help="leave out the msg_id column")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--nats-url", help="an existing nats-server with JetStream")
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    msg_id = not args.no_msg_id
    server = None if args.nats_url else NatsServer()
    url = args.nats_url or server.__enter__().url  # type: ignore[union-attr]
    spark = spark_session(args.master, "aioclients-spark-jetstream-write-bench")
    try:
        columns = [
            "concat('sparkwrite.', cast(id % 100 as string)) as subject",
            "cast(repeat('x', 100) as binary) as data",
        ]
        if msg_id:
            columns.append("concat('m-', cast(id as string)) as msg_id")

        def check() -> None:
            got = run_async(stored(url))
            if got != args.count:
                raise SystemExit(f"the stream holds {got} messages, expected {args.count}")

        measure(
            title=f"jetstream writer ({args.master}, msg_id={'yes' if msg_id else 'no'})",
            count=args.count,
            partitions=[int(p) for p in args.partitions.split(",")],
            rounds=args.rounds,
            make_df=lambda parts: spark.range(0, args.count, numPartitions=parts).selectExpr(
                *columns
            ),
            reset=lambda: run_async(reset(url)),
            write=lambda df: (
                df.write.format("jetstream").option("servers", url).mode("append").save()
            ),
            check=check,
            reference=lambda: run_async(publish_async_loop(url, args.count, msg_id)),
            reference_name="publish_async loop",
        )
    finally:
        spark.stop()
        if server is not None:
            server.__exit__(None, None, None)


if __name__ == "__main__":
    main()
