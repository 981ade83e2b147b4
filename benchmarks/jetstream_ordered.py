"""Ordered consumer read of a whole stream: aioclients vs nats-py, side by side in one run.

Fills a file-storage stream with --count 100-byte messages, then reads all of
them in order with:

- aioclients: ``async for msg in (await stream.ordered_consumer()).consume()``
  (ADR-17 on our pull core);
- nats-py: ``js.subscribe(subject, ordered_consumer=True, cb=...)`` (its ordered
  push subscription with flow control, the fastest form it offers: a callback).

Each round reads the stream once per client, interleaved; the best round is
printed as msgs/s with the ratio, and the client's CPU time per message (steadier
than msgs/s on a busy machine; the server's share is not in it).

    python benchmarks/jetstream_ordered.py --count 1000000 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import time

import nats
from _loop import add_loop_argument, run_async, use_loop

from aioclients import jetstream
from aioclients.testing import NatsServer

PAYLOAD = b"x" * 100
STREAM = "BENCHO"
SUBJECT = "bencho.data"


async def fill(url: str, n: int) -> None:
    async with await jetstream.connect(url, timeout=30) as js:
        await js.create_stream(STREAM, subjects=["bencho.>"], storage="file")
        for _ in range(n):
            await js.publish_async(SUBJECT, PAYLOAD)
        await js.publish_async_complete(timeout=300)


CPU: dict[str, float] = {}


def note_cpu(who: str, cpu: float, n: int) -> None:
    per = cpu / n * 1e6
    CPU[who] = min(CPU.get(who, per), per)


async def ours(url: str, n: int) -> float:
    async with await jetstream.connect(url, timeout=30) as js:
        stream = await js.stream(STREAM)
        start = time.perf_counter()
        cpu = time.process_time()
        oc = await stream.ordered_consumer()
        count = 0
        async with oc.consume(max_messages=2000) as messages:
            async for _msg in messages:
                count += 1
                if count == n:
                    break
        elapsed = time.perf_counter() - start
        note_cpu("ours", time.process_time() - cpu, n)
        last = oc.last_stream_seq
        assert last == n, last
        return n / elapsed


async def theirs(url: str, n: int) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    done = asyncio.Event()
    count = 0
    last = 0

    async def cb(msg: nats.aio.msg.Msg) -> None:
        nonlocal count, last
        count += 1
        if count == n:
            last = msg.metadata.sequence.stream
            done.set()

    start = time.perf_counter()
    cpu = time.process_time()
    sub = await js.subscribe(SUBJECT, stream=STREAM, ordered_consumer=True, cb=cb)
    await asyncio.wait_for(done.wait(), 600)
    elapsed = time.perf_counter() - start
    note_cpu("theirs", time.process_time() - cpu, n)
    await sub.unsubscribe()
    await nc.close()
    assert last == n, last
    return n / elapsed


async def run(url: str, count: int, rounds: int) -> None:
    await fill(url, count)
    best_ours = best_theirs = 0.0
    for r in range(rounds):
        got_theirs = await theirs(url, count)
        got_ours = await ours(url, count)
        print(
            f"  round {r + 1}: aioclients {got_ours:.0f}/s, nats-py {got_theirs:.0f}/s, "
            f"{got_ours / got_theirs:.2f}x",
            flush=True,
        )
        best_theirs = max(best_theirs, got_theirs)
        best_ours = max(best_ours, got_ours)
    print(f"{'scenario':<30} {'messages':>9} {'aioclients':>13} {'nats-py':>13} {'ratio':>7}")
    print(
        f"{'ordered consumer, whole stream':<30} {count:>9} {best_ours:>11.0f}/s "
        f"{best_theirs:>11.0f}/s {best_ours / best_theirs:>6.2f}x"
    )
    print(
        f"{'client CPU per message':<30} {'':>9} {CPU['ours']:>10.2f} us "
        f"{CPU['theirs']:>10.2f} us {CPU['theirs'] / CPU['ours']:>6.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    if args.url:
        run_async(run(args.url, args.count, args.rounds))
        return
    with NatsServer() as server:
        run_async(run(server.url, args.count, args.rounds))


if __name__ == "__main__":
    main()
