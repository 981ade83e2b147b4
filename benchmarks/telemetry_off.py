"""Telemetry off costs nothing: two checkouts' uninstrumented loops, side by side.

The aioclients loops of ``jetstream_consume.py`` (ack none, ack explicit),
``jetstream_publish.py`` (``publish_async``), ``liftbridge_subscribe.py``,
``liftbridge_publish.py`` (``publish_async``) and ``nsq_consume.py`` (FIN each), run
from a baseline checkout (``--base``: an export of main, say) and from this one, each
run in a fresh process, alternating in every round, against one nats-server, one
emulated Liftbridge broker and one nsqd (the emulator, or the real one given with
--nsqd-tcp/--nsqd-http). This checkout also runs once more per round after
``AioClientsInstrumentor().instrument()`` (with the SDK's tracer and meter providers)
and ``.uninstrument()``: nothing of the instrumentation may stay behind on the
per-message paths. Prints the median (and range) of the rounds: msgs/s and CPU time
per message of the worker process, and this checkout's ratio to the baseline.
``--kinds`` picks some of the loops. Needs the ``otel`` and ``test`` extras.

    git archive main | tar -x -C /tmp/base
    python benchmarks/telemetry_off.py --base /tmp/base --count 100000 --rounds 5
    python benchmarks/telemetry_off.py --base /tmp/base --loop uvloop
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

from _loop import LOOP_ENV, add_loop_argument, run_async, use_loop
from _nsq_common import emulated_nsqd

from aioclients.testing import NatsServer

HERE = Path(__file__).resolve().parent.parent

# Runs in a fresh process with the checkout's benchmarks/ and package on the path:
# one consume loop, its msgs/s and this process's CPU time per message.
_WORKER = """
import json, sys, time
from _loop import run_async
kind, target, count, off = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
if off:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from aioclients.telemetry import AioClientsInstrumentor
    instrumentor = AioClientsInstrumentor()
    instrumentor.instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider())
    instrumentor.uninstrument()
if kind == "nsq":
    import nsq_consume
    tcp, http, topic = target.split(",")
    run_async(nsq_consume.fill(http, topic, count))
    run = lambda: nsq_consume.ours(tcp, topic, count, 200)
elif kind == "js-publish":
    import jetstream_publish
    run_async(jetstream_publish.reset_stream(target))
    run = lambda: jetstream_publish.ours_async(target, count)
elif kind == "lb-subscribe":
    import liftbridge_subscribe
    addresses, stream = target.split(",")
    run = lambda: liftbridge_subscribe.ours([addresses], stream, count)
elif kind == "lb-publish":
    import liftbridge_publish
    run = lambda: liftbridge_publish.ours_async([target], count)
else:
    import jetstream_consume
    run = lambda: jetstream_consume.ours(target, count, kind == "js-explicit")
used = time.process_time()
rate = run_async(run())
print(json.dumps([rate, (time.process_time() - used) / count * 1e6]))
"""


LABELS = {
    "js-none": "JetStream consume, ack none",
    "js-explicit": "JetStream consume, ack explicit",
    "js-publish": "JetStream publish_async",
    "lb-subscribe": "Liftbridge subscribe",
    "lb-publish": "Liftbridge publish_async",
    "nsq": "NSQ consume, FIN each",
}


def _run(tree: Path, kind: str, target: str, count: int, off: bool) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{tree / 'benchmarks'}")
    out = subprocess.run(
        [sys.executable, "-c", _WORKER, kind, target, str(count), "1" if off else "0"],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    rate, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    return float(rate), float(cpu)


def _median_range(values: list[float], fmt: str) -> str:
    return (
        f"{fmt.format(statistics.median(values))} "
        f"({fmt.format(min(values))}-{fmt.format(max(values))})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the baseline checkout (a directory)")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nsqd-tcp", help="a real nsqd's TCP address (host:port)")
    parser.add_argument("--nsqd-http", help="the same nsqd's HTTP address (host:port)")
    parser.add_argument(
        "--kinds", nargs="+", choices=list(LABELS), default=list(LABELS), help="loops to run"
    )
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    os.environ[LOOP_ENV] = args.loop
    base = Path(args.base).resolve()
    variants = (("main", base, False), ("branch", HERE, False), ("branch, off", HERE, True))
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    sys.path.insert(0, str(HERE / "benchmarks"))
    import jetstream_consume
    import liftbridge_subscribe
    from liftbridge_common import emulated_cluster

    nsqd = (
        contextlib.nullcontext((args.nsqd_tcp, args.nsqd_http))
        if args.nsqd_tcp
        else emulated_nsqd()
    )
    liftbridge = (
        emulated_cluster(None) if {"lb-subscribe", "lb-publish"} & set(args.kinds) else None
    )
    with (
        NatsServer() as nats_server,
        nsqd as (tcp, http),
        liftbridge or contextlib.nullcontext([""]) as lb_addresses,
    ):
        if {"js-none", "js-explicit"} & set(args.kinds):
            print(f"filling a file stream with {args.count} messages ...", flush=True)
            run_async(jetstream_consume.fill_stream(nats_server.url, args.count))
        lb_stream = ""
        if "lb-subscribe" in args.kinds:
            print(f"filling a Liftbridge stream with {args.count} messages ...", flush=True)
            lb_stream = run_async(liftbridge_subscribe.fill(lb_addresses, args.count))
        targets = {
            "lb-subscribe": f"{lb_addresses[0]},{lb_stream}",
            "lb-publish": lb_addresses[0],
        }
        for round_ in range(args.rounds):
            for kind in args.kinds:
                # alternate which checkout goes first
                order = variants if round_ % 2 == 0 else variants[::-1]
                for name, tree, off in order:
                    if kind == "nsq":
                        target = f"{tcp},{http},off_{uuid.uuid4().hex[:10]}"
                    else:
                        target = targets.get(kind, nats_server.url)
                    results.setdefault((kind, name), []).append(
                        _run(tree, kind, target, args.count, off)
                    )
            print(f"round {round_ + 1}/{args.rounds} done", flush=True)
    print(
        f"median (range) of {args.rounds} rounds, {args.count} messages each; ratios "
        "against main: median msgs/s, median CPU per message, and the best round's CPU "
        "per message (the least disturbed by the rest of the machine)"
    )
    for kind in args.kinds:
        label = LABELS[kind]
        print(label)
        base_rate = statistics.median(r for r, _ in results[(kind, "main")])
        base_cpu = statistics.median(c for _, c in results[(kind, "main")])
        base_best = min(c for _, c in results[(kind, "main")])
        for name, _, _ in variants:
            runs = results[(kind, name)]
            rates = [r for r, _ in runs]
            cpus = [c for _, c in runs]
            print(
                f"  {name:<12} {_median_range(rates, '{:,.0f}'):>30}/s "
                f"{_median_range(cpus, '{:.2f}'):>22} us/msg   "
                f"{statistics.median(rates) / base_rate:>5.3f}x msgs/s "
                f"{statistics.median(cpus) / base_cpu:>5.3f}x CPU "
                f"{min(cpus) / base_best:>5.3f}x best CPU"
            )


if __name__ == "__main__":
    main()
