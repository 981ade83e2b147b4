"""The ``liftbridge`` Spark writer against one ``publish_async`` loop of ours.

Writes ``--count`` rows of 100-byte ``value`` with ``df.write.format("liftbridge")``
(``AckPolicy.LEADER``, every ack awaited) on ``--master`` (default ``local[2]``),
with 1, 2 and 4 partitions, after a warm-up write and with the input cached. The
reference, measured right before each write against the same brokers: one
asyncio loop of ``await client.publish_async(stream, value)`` (window 4096), then
every ack awaited in order (not ``asyncio.gather``, whose callback per future
costs about 4 us of CPU per message: the reference would be handicapped).
The brokers are the emulator (a Python gRPC server) in a
process of its own unless --addresses names real ones; since the emulator is
likely the bottleneck, the client CPU per row is reported too (the reference's
process, and the Spark Python workers' for the writer). The stream's message
count is checked after every write.

    python benchmarks/spark_liftbridge_write.py --count 100000 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

from _loop import add_loop_argument, run_async, use_loop
from _spark_write_common import measure, spark_session
from liftbridge_common import PAYLOAD, emulated_cluster

from aioclients import liftbridge

_cpu: dict[str, float] = {}


def worker_cpu(skip: set[int]) -> float:
    """CPU seconds of the Python processes under this one (Spark's Python workers and
    their daemon, reaped children included), leaving out ``skip`` (the emulator)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    total = 0.0
    stack = list(children.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        if pid in skip:
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if not f.read().startswith("python"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        total += ticks / os.sysconf("SC_CLK_TCK")
    return total


async def new_stream(addresses: list[str]) -> str:
    name = f"sparkwrite_{uuid.uuid4().hex[:8]}"
    async with await liftbridge.connect(addresses) as client:
        await client.create_stream(name, name)
    return name


async def delete_stream(addresses: list[str], stream: str) -> None:
    async with await liftbridge.connect(addresses) as client:
        await client.delete_stream(stream)


async def high_watermark(addresses: list[str], stream: str) -> int:
    async with await liftbridge.connect(addresses) as client:
        md = await client.fetch_partition_metadata(stream, 0)
        return md.high_watermark


async def publish_async_loop(addresses: list[str], stream: str, count: int) -> float:
    async with await liftbridge.connect(addresses, publish_async_window=4096) as client:
        cpu = time.process_time()
        start = time.perf_counter()
        futures = [await client.publish_async(stream, PAYLOAD, timeout=120) for _ in range(count)]
        for future in futures:  # nearly all settled by now: no callback, no loop turn
            await future
        elapsed = time.perf_counter() - start
        _cpu["reference"] = (time.process_time() - cpu) / count * 1e6
        return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--partitions", default="1,2,4", help="comma-separated counts")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--addresses", help="comma list of brokers (default: an emulator)")
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    given = args.addresses.split(",") if args.addresses else None
    with emulated_cluster(given) as addresses:
        from liftbridge_common import _EMULATOR_PID

        skip = {_EMULATOR_PID} if _EMULATOR_PID else set()
        spark = spark_session(args.master, "aioclients-spark-liftbridge-write-bench")
        stream = [""]

        def reset() -> None:
            # Delete the last stream: the emulator keeps messages in memory, and a
            # growing heap slows every later round down.
            if stream[0]:
                run_async(delete_stream(addresses, stream[0]))
            stream[0] = run_async(new_stream(addresses))

        def write(df: object) -> None:
            before = worker_cpu(skip)
            df.write.format("liftbridge").option("brokers", ",".join(addresses)).option(  # type: ignore[attr-defined]
                "stream", stream[0]
            ).mode("append").save()
            _cpu["writer"] = (worker_cpu(skip) - before) / args.count * 1e6

        def check() -> None:
            got = run_async(high_watermark(addresses, stream[0])) + 1
            if got != args.count:
                raise SystemExit(f"stream {stream[0]} holds {got} messages, not {args.count}")

        try:
            measure(
                title=f"liftbridge writer ({args.master}, AckPolicy.LEADER)",
                count=args.count,
                partitions=[int(p) for p in args.partitions.split(",")],
                rounds=args.rounds,
                make_df=lambda parts: spark.range(0, args.count, numPartitions=parts).selectExpr(
                    "cast(repeat('x', 100) as binary) as value"
                ),
                reset=reset,
                write=write,
                check=check,
                reference=lambda: run_async(publish_async_loop(addresses, stream[0], args.count)),
                reference_name="publish_async loop",
                extra=lambda: (
                    f"client CPU us/row: writer {_cpu.get('writer', float('nan')):.1f} "
                    f"(Python workers), loop {_cpu.get('reference', float('nan')):.1f}"
                ),
            )
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
