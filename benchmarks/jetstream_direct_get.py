"""Reading a stream with ADR-31 Direct Get: aioclients vs nats-py, side by side in one run.

Fills a memory-storage stream with 100-byte messages, then reads it back:

- single Direct Get by sequence, one request per message (both clients;
  nats-py: ``js.get_msg(stream, seq, direct=True)``);
- the whole stream with batched Direct Get (``direct_get_batch``; nats-py has no
  batched form, so its best equivalent is the single-message loop above).

Each scenario runs --rounds times, interleaved; the best round is reported.

    python benchmarks/jetstream_direct_get.py --messages 50000 --single 5000
"""

from __future__ import annotations

import argparse
import time

import nats
from _loop import add_loop_argument, run_async, use_loop

from aioclients import jetstream
from aioclients.testing import NatsServer

PAYLOAD = b"x" * 100


async def fill(url: str, n: int) -> None:
    async with await jetstream.connect(url) as js:
        await js.create_stream("READS", subjects=["reads.>"], storage="memory", allow_direct=True)
        for i in range(n):
            await js.publish_async(f"reads.{i % 100}", PAYLOAD)
        await js.publish_async_complete(timeout=60)


async def ours_single(url: str, n: int) -> float:
    async with await jetstream.connect(url) as js:
        stream = await js.stream("READS")
        start = time.perf_counter()
        for seq in range(1, n + 1):
            await stream.direct_get(seq)
        return n / (time.perf_counter() - start)


async def theirs_single(url: str, n: int) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    start = time.perf_counter()
    for seq in range(1, n + 1):
        await js.get_msg("READS", seq, direct=True)
    elapsed = time.perf_counter() - start
    await nc.close()
    return n / elapsed


async def ours_batch(url: str, n: int, batch: int) -> float:
    async with await jetstream.connect(url) as js:
        stream = await js.stream("READS")
        start = time.perf_counter()
        seq = read = 0
        while read < n:
            async for msg in stream.direct_get_batch(batch=batch, seq=seq + 1):
                seq = msg.seq
                read += 1
        return read / (time.perf_counter() - start)


async def run(url: str, messages: int, single: int, batch: int, rounds: int) -> None:
    await fill(url, messages)
    best = {"ours_single": 0.0, "theirs_single": 0.0, "ours_batch": 0.0}
    for _ in range(rounds):
        best["theirs_single"] = max(best["theirs_single"], await theirs_single(url, single))
        best["ours_single"] = max(best["ours_single"], await ours_single(url, single))
        best["ours_batch"] = max(best["ours_batch"], await ours_batch(url, messages, batch))
    print(f"{'scenario':<28} {'messages':>9} {'aioclients':>12} {'nats-py':>12} {'ratio':>7}")
    print(
        f"{'direct_get (one per request)':<28} {single:>9} {best['ours_single']:>10.0f}/s "
        f"{best['theirs_single']:>10.0f}/s {best['ours_single'] / best['theirs_single']:>6.2f}x"
    )
    print(
        f"{f'direct_get_batch ({batch})':<28} {messages:>9} {best['ours_batch']:>10.0f}/s "
        f"{best['theirs_single']:>10.0f}/s {best['ours_batch'] / best['theirs_single']:>6.2f}x"
        "  (nats-py: single gets)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--single", type=int, default=5_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    if args.url:
        run_async(run(args.url, args.messages, args.single, args.batch, args.rounds))
        return
    with NatsServer() as server:
        run_async(run(server.url, args.messages, args.single, args.batch, args.rounds))


if __name__ == "__main__":
    main()
