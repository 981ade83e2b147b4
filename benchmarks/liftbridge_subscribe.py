"""Liftbridge subscribe throughput: aioclients vs gufo-liftbridge, side by side in one run.

Starts an emulated Liftbridge cluster (aioclients.testing.LiftbridgeCluster on a
nats-server) in a child process unless --addresses is given, fills a stream with
--count 100-byte messages, then reads them all from the earliest offset: with
aioclients in this process and with gufo-liftbridge in a child process (each
client has a process of its own). Each client reads --rounds times, interleaved;
the best round is reported as msgs/s with the ratio aioclients / gufo.

    python benchmarks/liftbridge_subscribe.py --count 50000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid

from _loop import add_loop_argument, run_async, use_loop
from liftbridge_common import (
    PAYLOAD,
    Result,
    best,
    emulated_cluster,
    gufo_available,
    measured,
    report,
    run_worker,
    with_emulator_cpu,
)

from aioclients import liftbridge


async def fill(addresses: list[str], n: int) -> str:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    async with await liftbridge.connect(addresses, publish_async_window=4096) as client:
        await client.create_stream(name, name)
        futures = [await client.publish_async(name, PAYLOAD, timeout=120) for _ in range(n)]
        await asyncio.gather(*futures)
    return name


async def ours(addresses: list[str], stream: str, n: int) -> float:
    async with await liftbridge.connect(addresses) as client:
        start = time.perf_counter()
        count = 0
        async with client.subscribe(stream, start_at=liftbridge.StartPosition.EARLIEST) as sub:
            async for msg in sub:
                count += 1
                if msg.offset == n - 1:
                    break
        elapsed = time.perf_counter() - start
        assert count == n, count
        return n / elapsed


async def gufo(addresses: list[str], stream: str, n: int) -> float:
    from gufo.liftbridge.client import LiftbridgeClient
    from gufo.liftbridge.types import StartPosition

    async with LiftbridgeClient(addresses) as client:
        start = time.perf_counter()
        count = 0
        async for msg in client.subscribe(stream, start_position=StartPosition.EARLIEST):
            count += 1
            if msg.offset == n - 1:
                break
        elapsed = time.perf_counter() - start
        assert count == n, count
        return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--addresses", help="comma list of brokers (default: start an emulator)")
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--worker", nargs=3, metavar=("ADDRESSES", "STREAM", "COUNT"), help=argparse.SUPPRESS
    )
    add_loop_argument(parser)
    args = parser.parse_args()
    if args.worker:
        addresses, stream, count = args.worker
        rate, cpu = measured(
            int(count), lambda: run_async(gufo(addresses.split(","), stream, int(count)))
        )
        print(rate, cpu)
        return
    use_loop(args.loop)
    have_gufo = gufo_available()
    if not have_gufo:
        print(
            "gufo-liftbridge is not installed (pip install gufo-liftbridge): ours only",
            file=sys.stderr,
        )
    given = args.addresses.split(",") if args.addresses else None
    with emulated_cluster(given) as addresses:
        stream = run_async(fill(addresses, args.count))
        results: dict[str, Result] = {}
        worker_args = (",".join(addresses), stream, str(args.count))
        for _ in range(args.rounds):
            best(
                results,
                "ours",
                with_emulator_cpu(
                    args.count,
                    lambda: measured(
                        args.count, lambda: run_async(ours(addresses, stream, args.count))
                    ),
                ),
            )
            if have_gufo:
                best(
                    results,
                    "gufo",
                    with_emulator_cpu(
                        args.count, lambda: run_worker("liftbridge_subscribe.py", *worker_args)
                    ),
                )
    where = f"brokers {args.addresses}" if args.addresses else "emulated cluster"
    print(f"{where}, {args.count} 100-byte messages, best of {args.rounds} rounds")
    report([("subscribe (EARLIEST, read all)", results["ours"], results.get("gufo"))])
    if "gufo" in results:
        print(f"goal: >= 1.5x gufo-liftbridge; got {results['ours'][0] / results['gufo'][0]:.2f}x")


if __name__ == "__main__":
    main()
