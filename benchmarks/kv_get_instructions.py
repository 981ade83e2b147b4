"""Instructions per KV ``get``, counted by valgrind: ours, the bare floor, nats-py.

The time per get on a shared 2-core machine moves by a third between runs (the
floor's own best round did, 34-59 us, in one series of runs), more than a change
to the get path; the instructions the client executes do not. This runs each
client under ``valgrind --tool=cachegrind --cache-sim=no`` twice, getting N and 2N
random keys of the bucket of ``jetstream_kv.py`` (filled first unless
``--no-fill``), one after the other over real round trips, and prints the
difference divided by N: the instructions per get, with the start-up and the
connection taken out. The clients:

- ``floor``: ``jetstream_kv_get_floor.py``'s bare ``asyncio.Protocol`` (a PUB per
  get, the reply's frame found and handed to a future; nothing a client can skip);
- ``ours``: ``kv.get``;
- ``nats-py``: nats-py's ``kv.get``.

valgrind runs the client some 50 times slower, so the counts are those of a client
that never waits behind the server.

    python benchmarks/kv_get_instructions.py --url nats://127.0.0.1:4222 --loop uvloop
    python benchmarks/kv_get_instructions.py --url ... --no-fill --tree /tmp/base \\
        --clients ours                                         # another checkout
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from _valgrind import count_instructions
from jetstream_kv import BUCKET, fill, sample

HERE = Path(__file__).resolve().parent


async def gets(url: str, client: str, n: int) -> None:
    """One run: ``n`` gets of the sample's keys."""
    names = sample(100_000, n)
    if client == "floor":
        from _floor import open_floor
        from jetstream_kv_get_floor import SUBJECT, _FloorProtocol

        loop = asyncio.get_running_loop()
        transport, proto = await open_floor(url, _FloorProtocol)
        for i, key in enumerate(names):
            waiter = loop.create_future()
            proto.waiter = waiter
            transport.write(b"PUB %s _FLOOR.%d 0\r\n\r\n" % ((SUBJECT + key).encode(), i))
            await waiter
        transport.close()
        return
    if client == "nats-py":
        import nats

        nc = await nats.connect(url)
        kv = await nc.jetstream().key_value(BUCKET)
        for key in names:
            await kv.get(key)
        await nc.close()
        return
    from aioclients import jetstream

    async with await jetstream.connect(url) as js:
        ours = await js.key_value(BUCKET)
        for key in names:
            await ours.get(key)


def instructions(tree: str, args: argparse.Namespace, client: str, n: int) -> int:
    """Instructions valgrind counts for one run of ``n`` gets (the whole process)."""
    run = ["--url", args.url, "--run", client, str(n), "--loop", args.loop]
    return count_instructions(__file__, run, [tree, str(HERE)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a nats-server with JetStream")
    parser.add_argument("--count", type=int, default=1000, help="N (runs of N and 2N)")
    parser.add_argument(
        "--clients", nargs="+", default=["floor", "ours", "nats-py"], help="clients to count"
    )
    parser.add_argument("--tree", default=str(HERE.parent), help="the checkout to measure")
    parser.add_argument("--loop", default="asyncio", choices=["asyncio", "uvloop"])
    parser.add_argument("--no-fill", action="store_true", help="the bucket is filled already")
    parser.add_argument("--run", nargs=2, metavar=("CLIENT", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    from _loop import run_async, use_loop

    use_loop(args.loop)
    if args.run:
        run_async(gets(args.url, args.run[0], int(args.run[1])))
        return
    if not args.no_fill:
        run_async(fill(args.url, 100_000))
    print(
        f"instructions per get, {args.loop}, checkout {args.tree} "
        f"({2 * args.count} minus {args.count} gets):"
    )
    for client in args.clients:
        low = instructions(args.tree, args, client, args.count)
        high = instructions(args.tree, args, client, 2 * args.count)
        print(f"  {client:<8} {(high - low) / args.count:>12,.0f}", flush=True)


if __name__ == "__main__":
    main()
