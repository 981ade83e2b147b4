"""Checkouts of aioclients side by side: the same loops, alternating, in one run.

Each measurement is a fresh process with a checkout's package first on the path and
this directory's benchmark scripts (the same for every checkout), so only the
library differs. The order of the checkouts rotates from round to round. The
scenarios are the benchmark scripts' own ``ours*`` loops:

  js-none      benchmarks/jetstream_consume.py ours(url, N, ack=False)
  js-explicit  benchmarks/jetstream_consume.py ours(url, N, ack=True)
  pub-async    benchmarks/jetstream_publish.py ours_async(url, N)   (stream reset before)
  kv-get       benchmarks/jetstream_kv.py ours_get(url, sample(KEYS, GETS))
  nsq          benchmarks/nsq_consume.py fill + ours(tcp, topic, N, 200) (fill not timed)

The summary gives each checkout's median msgs/s and CPU per message, and the
median of the per-round ratios to the first checkout (a round's checkouts ran
minutes apart at most, so a paired ratio is steadier than a ratio of medians).
``--calls`` prints, instead, the Python function calls per operation of each
checkout (cProfile's count, which the machine's load does not change).

    git archive BASE | tar -x -C /tmp/base; git archive HEAD | tar -x -C /tmp/new
    python benchmarks/checkouts_ab.py --url nats://127.0.0.1:4222 \\
        --nsqd-tcp 127.0.0.1:4150 --nsqd-http 127.0.0.1:4151 --rounds 11 /tmp/base /tmp/new
    python benchmarks/checkouts_ab.py --calls --url ... /tmp/base /tmp/new
    python benchmarks/checkouts_ab.py --loop uvloop --url ... /tmp/base /tmp/new
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from _loop import add_loop_argument, use_loop  # noqa: E402

WORKER = """
import json, sys, time
from _loop import run_async
kind, url, tcp, http, count, keys, gets, tag, calls = sys.argv[1:10]
count, keys, gets = int(count), int(keys), int(gets)


def loop(n):
    if kind == "nsq":
        import nsq_consume
        topic = f"ab_{tag}_{n}"
        run_async(nsq_consume.fill(http, topic, n))
        return lambda: nsq_consume.ours(tcp, topic, n, 200)
    if kind == "pub-async":
        import jetstream_publish
        run_async(jetstream_publish.reset_stream(url))
        return lambda: jetstream_publish.ours_async(url, n)
    if kind == "kv-get":
        import jetstream_kv
        names = jetstream_kv.sample(keys, n)
        return lambda: jetstream_kv.ours_get(url, names)
    import jetstream_consume
    return lambda: jetstream_consume.ours(url, n, kind == "js-explicit")


if calls == "1":
    import cProfile, pstats

    def total(n):
        run = loop(n)
        profile = cProfile.Profile()
        profile.enable()
        run_async(run())
        profile.disable()
        return pstats.Stats(profile).total_calls

    # connecting and setting up are counted in both: the difference is per operation
    print(json.dumps([(total(11_000) - total(1_000)) / 10_000, 0.0]))
else:
    n = gets if kind == "kv-get" else count
    run = loop(n)
    used = time.process_time()
    rate = run_async(run())
    print(json.dumps([rate, (time.process_time() - used) / n * 1e6]))
"""


def run_one(tree: Path, kind: str, a: argparse.Namespace) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{BENCH}")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            WORKER,
            kind,
            a.url,
            a.nsqd_tcp,
            a.nsqd_http,
            str(a.count),
            str(a.keys),
            str(a.gets),
            uuid.uuid4().hex[:10],
            "1" if a.calls else "0",
        ],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode:
        raise SystemExit(f"{tree} {kind} failed:\n{out.stderr[-3000:]}")
    rate, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    return float(rate), float(cpu)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--nsqd-tcp", required=True)
    p.add_argument("--nsqd-http", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--count", type=int, default=50_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--gets", type=int, default=20_000)
    p.add_argument("--kinds", default="js-none,js-explicit,pub-async,kv-get,nsq")
    p.add_argument("--calls", action="store_true", help="Python calls per operation")
    p.add_argument("trees", nargs="+", help="checkouts (the first is the base)")
    add_loop_argument(p)
    a = p.parse_args()
    use_loop(a.loop)  # the workers inherit the choice through the environment
    trees = [Path(t).resolve() for t in a.trees]
    kinds = a.kinds.split(",")
    import jetstream_consume
    import jetstream_kv
    import jetstream_publish

    from aioclients import jetstream

    async def setup() -> None:
        await jetstream_consume.fill_stream(a.url, a.count)
        async with await jetstream.connect(a.url) as js:
            try:
                await js.delete_key_value(jetstream_kv.BUCKET)
            except jetstream.JetStreamError:
                pass
        await jetstream_kv.fill(a.url, a.keys)

    print(f"setup: stream of {a.count}, bucket of {a.keys} keys", flush=True)
    asyncio.run(setup())
    if a.calls:
        for kind in kinds:
            counts = "  ".join(f"{t.name}: {run_one(t, kind, a)[0]:.1f}" for t in trees)
            print(f"{kind:12} Python calls per operation  {counts}", flush=True)
        return
    res: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(a.rounds):
        for i, kind in enumerate(kinds):
            k = (r + i) % len(trees)
            order = trees[k:] + trees[:k]  # rotate which tree goes first
            if r % 2:
                order = order[::-1]
            for tree in order:
                if kind == "pub-async":
                    asyncio.run(jetstream_publish.reset_stream(a.url))
                res.setdefault((kind, tree.name), []).append(run_one(tree, kind, a))
        print(f"round {r + 1}/{a.rounds} done", flush=True)
        for kind in kinds:
            line = "  ".join(
                f"{t.name}:{res[(kind, t.name)][-1][0]:,.0f}/s {res[(kind, t.name)][-1][1]:.2f}us"
                for t in trees
            )
            print(f"  {kind:12} {line}", flush=True)
    base = trees[0].name
    print(
        f"\nmedian (min-max) over {a.rounds} rounds; count {a.count}, kv {a.gets} gets of "
        f"{a.keys} keys; ratios vs {base}: median msgs/s, median CPU us/msg"
    )
    for kind in kinds:
        b_rate = statistics.median(x for x, _ in res[(kind, base)])
        b_cpu = statistics.median(c for _, c in res[(kind, base)])
        for t in trees:
            rates = [x for x, _ in res[(kind, t.name)]]
            cpus = [c for _, c in res[(kind, t.name)]]
            mr, mc = statistics.median(rates), statistics.median(cpus)
            pairs = zip(res[(kind, t.name)], res[(kind, base)], strict=True)
            paired = [(x / bx, c / bc) for (x, c), (bx, bc) in pairs]
            print(
                f"{kind:12} {t.name:8} {mr:>10,.0f}/s ({min(rates):,.0f}-{max(rates):,.0f})"
                f"  cpu {mc:5.2f}us ({min(cpus):.2f}-{max(cpus):.2f})"
                f"  rate x{mr / b_rate:.3f}  cpu x{mc / b_cpu:.3f}"
                f"  paired: rate x{statistics.median(r for r, _ in paired):.3f}"
                f" cpu x{statistics.median(c for _, c in paired):.3f}"
            )


if __name__ == "__main__":
    main()
