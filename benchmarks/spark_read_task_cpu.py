"""Client CPU per row of a Spark jetstream partition read, measured outside Spark.

Fills a file-storage stream with ``--count`` messages for each ``--payloads`` size,
then reads it the way a Spark task does (``read_partition`` of one partition
covering the stream, in this process, no JVM) and reports CPU time per row (user
and system, ``getrusage``), split into the reply parser (``receive_data``), the
conversion to Arrow (``to_record_batch``) and the rest (socket reads, the event
loop, asyncio's own, as in a Spark task; ``--loop`` picks the fill's). Each figure
is the best of ``--rounds`` after one warm-up read. With ``--profile`` it prints a
cProfile of one more read of each size instead.

    python benchmarks/spark_read_task_cpu.py                          # 200k of 100 B, 1 KB
    python benchmarks/spark_read_task_cpu.py --count 50000 --payloads 1000 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import resource
import time
from collections.abc import Callable
from typing import Any

from _loop import add_loop_argument, run_async, use_loop

from aioclients import jetstream
from aioclients.spark import _stream_read
from aioclients.spark._protocol._direct_reader import DirectReplyParser
from aioclients.spark._stream_read import ReadConfig, SequenceRange, read_partition
from aioclients.testing import NatsServer

SPENT = {"parse": 0.0, "convert": 0.0}


def _timed(function: Callable[..., Any], key: str) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        start = time.process_time()
        try:
            return function(*args)
        finally:
            SPENT[key] += time.process_time() - start

    return wrapper


async def fill(url: str, stream: str, count: int, size: int) -> None:
    async with await jetstream.connect(url, timeout=30) as js:
        try:
            await js.delete_stream(stream)
        except jetstream.StreamNotFoundError:
            pass
        await js.create_stream(
            stream, subjects=[f"{stream.lower()}.>"], storage="file", allow_direct=True
        )
        payload = b"x" * size
        for i in range(count):
            await js.publish_async(f"{stream.lower()}.{i % 100}", payload)
        await js.publish_async_complete(timeout=300)


def read(url: str, stream: str, count: int) -> None:
    config = ReadConfig(servers=(url,), stream=stream, subject=None, batch_size=50_000, timeout=30)
    rows = sum(batch.num_rows for batch in read_partition(SequenceRange(config, 1, count)))
    if rows != count:
        raise SystemExit(f"read {rows} rows of {stream}, expected {count}")


def cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def measure(url: str, stream: str, count: int, rounds: int) -> str:
    best: tuple[float, ...] | None = None
    for _ in range(rounds):
        SPENT.update(parse=0.0, convert=0.0)
        user, system = cpu()
        read(url, stream, count)
        user2, system2 = cpu()
        row = (user2 - user + system2 - system, user2 - user, system2 - system)
        row += (SPENT["parse"], SPENT["convert"])
        if best is None or row < best:
            best = row
    assert best is not None
    total, user, system, parse, convert = (value / count * 1e6 for value in best)
    return (
        f"{total:6.2f} us/row (user {user:.2f}, system {system:.2f}): parse {parse:.2f}, "
        f"convert {convert:.2f}, rest {total - parse - convert:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--payloads", default="100,1000", help="payload sizes, comma list")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print a cProfile instead")
    parser.add_argument("--nats-url", help="an existing nats-server with JetStream")
    add_loop_argument(parser)  # the fill's loop; the read runs its own, as a Spark task does
    args = parser.parse_args()
    use_loop(args.loop)
    sizes = [int(size) for size in args.payloads.split(",")]

    def run(url: str) -> None:
        for size in sizes:
            stream = f"TASKCPU{size}"
            run_async(fill(url, stream, args.count, size))
            read(url, stream, args.count)  # warm-up
            if args.profile:
                profile = cProfile.Profile()
                profile.runcall(read, url, stream, args.count)
                print(f"== {size}-byte payloads, {args.count} rows")
                pstats.Stats(profile).sort_stats("tottime").print_stats(15)
            else:
                print(f"{size:>6} B: {measure(url, stream, args.count, args.rounds)}", flush=True)

    DirectReplyParser.receive_data = _timed(  # type: ignore[method-assign]
        DirectReplyParser.receive_data, "parse"
    )
    _stream_read._stream_rows = _timed(_stream_read._stream_rows, "convert")
    if args.nats_url:
        run(args.nats_url)
        return
    with NatsServer() as server:
        run(server.url)


if __name__ == "__main__":
    main()
