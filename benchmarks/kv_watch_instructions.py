"""Instructions per entry of KV ``watch()`` until ``initial_done``, counted by valgrind.

The rate of a watch's initial values on a shared 2-core machine moves with the
load more than with a change to it; the instructions the client executes do not.
This fills two buckets (file storage, history 1, 100-byte values, as
``jetstream_kv.py`` does) with N and 3N keys, then watches each whole bucket until
its initial values are in (``initial_done``) under ``valgrind --tool=cachegrind
--cache-sim=no`` and prints the difference divided by 2N: the client's
instructions per watched entry, everything a watch does once (start-up,
connecting, the stream info of the snapshot, the consumer's creation) taken out,
and everything it does per entry in (the frames, the ordered consumer's judgement,
the snapshot's, the entries made and handed out). The server is another process:
none of its work is counted. ``--client nats-py`` counts nats-py's ``watchall()``
until its ``None`` marker on the same buckets instead: the other side of
``jetstream_kv.py --only watch``'s ratio.

    python benchmarks/kv_watch_instructions.py --loop asyncio
    python benchmarks/kv_watch_instructions.py --loop asyncio --client nats-py
    python benchmarks/kv_watch_instructions.py --url nats://127.0.0.1:4222 --no-fill \\
        --tree /tmp/base                                        # another checkout
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _loop import add_loop_argument, run_async, use_loop
from _valgrind import count_instructions

from aioclients import jetstream
from aioclients.testing import NatsServer

HERE = Path(__file__).resolve().parent
VALUE = b"v" * 100


def bucket(n: int) -> str:
    return f"WATCH{n}"


async def fill(url: str, n: int) -> None:
    async with await jetstream.connect(url, timeout=30) as js:
        await js.create_key_value(bucket(n))
        for i in range(n):
            await js.publish_async(f"$KV.{bucket(n)}.key.{i}", VALUE)
        await js.publish_async_complete(timeout=120)


async def watch_ours(url: str, n: int) -> None:
    async with await jetstream.connect(url, timeout=30) as js:
        kv = await js.key_value(bucket(n))
        count = 0
        async with kv.watch() as watcher:
            async for _ in watcher:
                count += 1
                if watcher.initial_done.is_set():
                    break
    assert count == n, (count, n)


async def watch_nats_py(url: str, n: int) -> None:
    import nats

    nc = await nats.connect(url)
    kv = await nc.jetstream(timeout=30).key_value(bucket(n))
    count = 0
    watcher = await kv.watchall()
    async for entry in watcher:
        if entry is None:
            break
        count += 1
    await watcher.stop()
    await nc.close()
    assert count == n, (count, n)


def instructions(tree: str, url: str, loop: str, n: int, client: str) -> int:
    run = ["--url", url, "--loop", loop, "--run", str(n), "--client", client]
    return count_instructions(__file__, run, [tree, str(HERE)])


def measure(url: str, args: argparse.Namespace) -> None:
    n = args.count
    if not args.no_fill:
        run_async(fill(url, n))
        run_async(fill(url, 3 * n))
    tree = str(Path(args.tree).resolve())
    low = instructions(tree, url, args.loop, n, args.client)
    high = instructions(tree, url, args.loop, 3 * n, args.client)
    what = "watch()" if args.client == "ours" else "nats-py's watchall()"
    print(f"{what}, {args.loop}, {tree}: {(high - low) / (2 * n):,.0f} instructions per entry")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--count", type=int, default=20_000, help="N (buckets of N and 3N)")
    parser.add_argument("--tree", default=str(HERE.parent), help="the checkout to measure")
    parser.add_argument("--no-fill", action="store_true", help="the buckets are filled already")
    parser.add_argument(
        "--client", choices=("ours", "nats-py"), default="ours", help="what watches the bucket"
    )
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)
    add_loop_argument(parser)
    args = parser.parse_args()
    if args.run:
        run_async((watch_nats_py if args.client == "nats-py" else watch_ours)(args.url, args.run))
        return
    use_loop(args.loop)
    if args.url:
        measure(args.url, args)
        return
    with NatsServer() as server:
        measure(server.url, args)


if __name__ == "__main__":
    main()
