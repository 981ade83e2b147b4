"""Key-Value: aioclients vs nats-py on the same bucket, side by side in one run.

Fills a bucket (file storage, history 1) with --keys keys of 100-byte values, then:

- ``get`` of random existing keys, one after the other (nats-py: ``kv.get``);
- ``keys()`` of the whole bucket (nats-py: ``kv.keys()``);
- ``watch()`` of the whole bucket until the initial values are in
  (ours: ``initial_done``; nats-py: the ``None`` marker of its watcher).

Each scenario runs --rounds times, interleaved; the best round is reported.

    python benchmarks/jetstream_kv.py --keys 100000 --gets 20000
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Awaitable, Callable

import nats
from _loop import add_loop_argument, run_async, use_loop

from aioclients import jetstream
from aioclients.testing import NatsServer

VALUE = b"v" * 100
BUCKET = "BENCH"


async def fill(url: str, n: int) -> None:
    async with await jetstream.connect(url, timeout=30) as js:
        await js.create_key_value(BUCKET)
        for i in range(n):
            await js.publish_async(f"$KV.{BUCKET}.key.{i}", VALUE)
        await js.publish_async_complete(timeout=120)


def sample(keys: int, gets: int) -> list[str]:
    rng = random.Random(7)
    return [f"key.{rng.randrange(keys)}" for _ in range(gets)]


async def ours_get(url: str, names: list[str]) -> float:
    async with await jetstream.connect(url) as js:
        kv = await js.key_value(BUCKET)
        start = time.perf_counter()
        for key in names:
            await kv.get(key)
        return len(names) / (time.perf_counter() - start)


async def theirs_get(url: str, names: list[str]) -> float:
    nc = await nats.connect(url)
    kv = await nc.jetstream().key_value(BUCKET)
    start = time.perf_counter()
    for key in names:
        await kv.get(key)
    elapsed = time.perf_counter() - start
    await nc.close()
    return len(names) / elapsed


async def ours_keys(url: str, n: int) -> float:
    async with await jetstream.connect(url, timeout=30) as js:
        kv = await js.key_value(BUCKET)
        start = time.perf_counter()
        count = 0
        async for _ in kv.keys():
            count += 1
        elapsed = time.perf_counter() - start
        assert count == n, count
        return n / elapsed


async def theirs_keys(url: str, n: int) -> float:
    nc = await nats.connect(url)
    kv = await nc.jetstream(timeout=30).key_value(BUCKET)
    start = time.perf_counter()
    keys = await kv.keys()
    elapsed = time.perf_counter() - start
    assert len(keys) == n, len(keys)
    await nc.close()
    return n / elapsed


async def ours_watch(url: str, n: int) -> float:
    async with await jetstream.connect(url, timeout=30) as js:
        kv = await js.key_value(BUCKET)
        start = time.perf_counter()
        count = 0
        async with kv.watch() as watcher:
            async for _ in watcher:
                count += 1
                if watcher.initial_done.is_set():
                    break
        elapsed = time.perf_counter() - start
        assert count == n, count
        return n / elapsed


async def theirs_watch(url: str, n: int) -> float:
    nc = await nats.connect(url)
    kv = await nc.jetstream(timeout=30).key_value(BUCKET)
    start = time.perf_counter()
    count = 0
    watcher = await kv.watchall()
    async for entry in watcher:
        if entry is None:
            break
        count += 1
    elapsed = time.perf_counter() - start
    await watcher.stop()
    await nc.close()
    assert count == n, count
    return n / elapsed


async def best_of(
    rounds: int, pair: tuple[Callable[[], Awaitable[float]], ...], name: str = ""
) -> list[float]:
    best = [0.0] * len(pair)
    for r in range(rounds):
        got = []
        cpu = []
        for run in pair:
            # The client's CPU time (connect included; the server's is not in
            # it): steadier than items/s on a busy machine.
            start = time.process_time()
            got.append(await run())
            cpu.append(time.process_time() - start)
        best = [max(b, g) for b, g in zip(best, got, strict=True)]
        # pair is (theirs, ours): print every round, not only the best
        print(
            f"  round {r + 1} {name}: aioclients {got[1]:.0f}/s, nats-py {got[0]:.0f}/s, "
            f"{got[1] / got[0]:.2f}x; client CPU {cpu[1]:.3f} s vs {cpu[0]:.3f} s, "
            f"{cpu[0] / cpu[1]:.2f}x",
            flush=True,
        )
    return best


async def run(url: str, keys: int, gets: int, rounds: int, only: set[str]) -> None:
    await fill(url, keys)
    names = sample(keys, gets)
    rows = []
    if "get" in only:
        ours, theirs = (
            await best_of(
                rounds, (lambda: theirs_get(url, names), lambda: ours_get(url, names)), "get"
            )
        )[::-1]
        rows.append(("get (random keys)", gets, ours, theirs))
    if "keys" in only:
        ours, theirs = (
            await best_of(
                rounds, (lambda: theirs_keys(url, keys), lambda: ours_keys(url, keys)), "keys"
            )
        )[::-1]
        rows.append(("keys()", keys, ours, theirs))
    if "watch" in only:
        ours, theirs = (
            await best_of(
                rounds, (lambda: theirs_watch(url, keys), lambda: ours_watch(url, keys)), "watch"
            )
        )[::-1]
        rows.append(("watch until initial done", keys, ours, theirs))
    print(f"{'scenario':<26} {'items':>8} {'aioclients':>13} {'nats-py':>13} {'ratio':>7}")
    for name, count, ours, theirs in rows:
        print(f"{name:<26} {count:>8} {ours:>11.0f}/s {theirs:>11.0f}/s {ours / theirs:>6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--gets", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="get,keys,watch", help="comma list of scenarios")
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    only = set(args.only.split(","))
    if args.url:
        run_async(run(args.url, args.keys, args.gets, args.rounds, only))
        return
    with NatsServer() as server:
        run_async(run(server.url, args.keys, args.gets, args.rounds, only))


if __name__ == "__main__":
    main()
