"""Liftbridge publish throughput: aioclients vs gufo-liftbridge, side by side in one run.

Starts an emulated Liftbridge cluster (aioclients.testing.LiftbridgeCluster on a
nats-server) in a child process unless --addresses is given, and publishes
100-byte payloads with:

- publish: one message at a time, each waiting for its LEADER ack;
- publish_async: pipelined over the PublishAsync stream (a window of
  outstanding acks), then every ack awaited.

gufo-liftbridge runs the same scenarios (``publish`` and ``publish_bulk``) in a
child process against the same cluster. Note: gufo's ``publish`` sets no gRPC
deadline, so the broker does not wait for the ack (fire and forget); ours waits.
Each scenario runs --rounds times per client, interleaved; the best round is
reported as msgs/s, with the ratios aioclients / gufo and publish_async / publish.

    python benchmarks/liftbridge_publish.py --count 20000 --sync-count 2000
"""

from __future__ import annotations

import argparse
import asyncio
import functools
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


async def _stream(addresses: list[str]) -> str:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    async with await liftbridge.connect(addresses) as client:
        await client.create_stream(name, name)
    return name


async def ours_sync(addresses: list[str], n: int) -> float:
    stream = await _stream(addresses)
    async with await liftbridge.connect(addresses) as client:
        start = time.perf_counter()
        for _ in range(n):
            await client.publish(stream, PAYLOAD)
        return n / (time.perf_counter() - start)


async def ours_async(addresses: list[str], n: int) -> float:
    stream = await _stream(addresses)
    async with await liftbridge.connect(addresses, publish_async_window=4096) as client:
        start = time.perf_counter()
        futures = [await client.publish_async(stream, PAYLOAD, timeout=120) for _ in range(n)]
        acks = await asyncio.gather(*futures)
        elapsed = time.perf_counter() - start
        assert acks[-1] is not None
        assert acks[-1].offset == n - 1
        return n / elapsed


async def gufo_sync(addresses: list[str], n: int) -> float:
    from gufo.liftbridge.client import LiftbridgeClient

    stream = await _stream(addresses)
    async with LiftbridgeClient(addresses) as client:
        start = time.perf_counter()
        for _ in range(n):
            await client.publish(PAYLOAD, stream=stream)
        return n / (time.perf_counter() - start)


async def gufo_async(addresses: list[str], n: int) -> float:
    from gufo.liftbridge.client import LiftbridgeClient

    stream = await _stream(addresses)
    async with LiftbridgeClient(addresses) as client:
        start = time.perf_counter()
        requests = (client.get_publish_request(PAYLOAD, stream=stream) for _ in range(n))
        count = 0
        async for _ack in client.publish_bulk(requests):
            count += 1
        elapsed = time.perf_counter() - start
        assert count == n, count
        return n / elapsed


WORKERS = {"sync": gufo_sync, "async": gufo_async}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--addresses", help="comma list of brokers (default: start an emulator)")
    parser.add_argument("--count", type=int, default=20_000, help="messages for publish_async")
    parser.add_argument("--sync-count", type=int, default=2_000, help="messages for publish")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--worker", nargs=3, metavar=("MODE", "ADDRESSES", "COUNT"), help=argparse.SUPPRESS
    )
    add_loop_argument(parser)
    args = parser.parse_args()
    if args.worker:
        mode, addresses, count = args.worker
        rate, cpu = measured(
            int(count), lambda: run_async(WORKERS[mode](addresses.split(","), int(count)))
        )
        print(rate, cpu)
        return
    use_loop(args.loop)
    gufo = gufo_available()
    if not gufo:
        print(
            "gufo-liftbridge is not installed (pip install gufo-liftbridge): ours only",
            file=sys.stderr,
        )
    given = args.addresses.split(",") if args.addresses else None
    with emulated_cluster(given) as addresses:
        joined = ",".join(addresses)
        results: dict[str, Result] = {}
        scenarios = (
            (
                "ours sync",
                args.sync_count,
                lambda: run_async(ours_sync(addresses, args.sync_count)),
            ),
            ("ours async", args.count, lambda: run_async(ours_async(addresses, args.count))),
        )
        workers = (
            ("gufo sync", ("sync", joined, str(args.sync_count))),
            ("gufo async", ("async", joined, str(args.count))),
        )
        for _ in range(args.rounds):
            for key, n, thunk in scenarios:
                best(results, key, with_emulator_cpu(n, functools.partial(measured, n, thunk)))
            for (key, worker_args), n in zip(
                workers if gufo else (), (args.sync_count, args.count), strict=False
            ):
                job = functools.partial(run_worker, "liftbridge_publish.py", *worker_args)
                best(results, key, with_emulator_cpu(n, job))
    where = f"brokers {args.addresses}" if args.addresses else "emulated cluster"
    print(f"{where}, 100-byte payloads, best of {args.rounds} rounds")
    report(
        [
            ("publish (sequential, acked)", results["ours sync"], results.get("gufo sync")),
            ("publish_async (pipelined)", results["ours async"], results.get("gufo async")),
        ]
    )
    ratio = results["ours async"][0] / results["ours sync"][0]
    print(f"publish_async / publish (aioclients): {ratio:.1f}x (goal >= 10x)")
    if gufo:
        print(
            "note: gufo's publish() sends no deadline, and a Liftbridge Publish without one "
            "returns at once without an ack (the emulator does the same): its sequential row "
            "is not an acked publish"
        )


if __name__ == "__main__":
    main()
