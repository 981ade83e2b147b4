"""What ``kv_keys_instructions.py`` and ``kv_watch_instructions.py`` share: two
buckets of N and 3N keys, a run of one client over each under valgrind (through
the script itself, ``--run N``), and the difference divided by 2N."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from _loop import add_loop_argument, run_async, use_loop
from _valgrind import count_instructions

from aioclients import jetstream
from aioclients.testing import NatsServer

HERE = Path(__file__).resolve().parent
VALUE = b"v" * 100

#: a client's run over the bucket of ``n`` keys: (url, n)
Run = Callable[[str, int], Awaitable[None]]


async def fill(url: str, name: str, n: int) -> None:
    """A bucket (file storage, history 1) of ``n`` keys of 100-byte values, as
    ``jetstream_kv.py`` fills it."""
    async with await jetstream.connect(url, timeout=30) as js:
        await js.create_key_value(name)
        for i in range(n):
            await js.publish_async(f"$KV.{name}.key.{i}", VALUE)
        await js.publish_async_complete(timeout=120)


def main(
    script: str,
    doc: str,
    bucket: Callable[[int], str],
    clients: Mapping[str, tuple[str, Run]],
    unit: str,
) -> None:
    """The command line of a script counting ``clients`` (name: (what it is
    called in the result, its run)), the first the default, per ``unit``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--count", type=int, default=20_000, help="N (buckets of N and 3N)")
    parser.add_argument("--tree", default=str(HERE.parent), help="the checkout to measure")
    parser.add_argument("--no-fill", action="store_true", help="the buckets are filled already")
    parser.add_argument(
        "--client", choices=tuple(clients), default=next(iter(clients)), help="what is counted"
    )
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)
    add_loop_argument(parser)
    args = parser.parse_args()
    if args.run:
        run_async(clients[args.client][1](args.url, args.run))
        return
    use_loop(args.loop)

    def measure(url: str) -> None:
        n = args.count
        if not args.no_fill:
            run_async(fill(url, bucket(n), n))
            run_async(fill(url, bucket(3 * n), 3 * n))
        tree = str(Path(args.tree).resolve())
        counts = []
        for size in (n, 3 * n):
            run = ["--url", url, "--loop", args.loop, "--run", str(size)]
            run += ["--client", args.client]
            counts.append(count_instructions(script, run, [tree, str(HERE)]))
        what = clients[args.client][0]
        per = (counts[1] - counts[0]) / (2 * n)
        print(f"{what}, {args.loop}, {tree}: {per:,.0f} instructions per {unit}")

    if args.url:
        measure(args.url)
        return
    with NatsServer() as server:
        measure(server.url)
