"""Telemetry off, counted: Python calls per message of the uninstrumented hot paths,
never instrumented and after ``instrument()`` and ``uninstrument()``.

A timing check of "telemetry off costs nothing" (``telemetry_off.py``) moves by several
percent between rounds on a shared machine; a count of calls does not depend on the
machine. This runs the aioclients loops of ``jetstream_consume.py`` (ack none, ack
explicit), ``jetstream_publish.py`` (``publish_async``), ``liftbridge_subscribe.py`` and
``liftbridge_publish.py`` (``publish_async``) under ``cProfile``, twice before and twice
after ``AioClientsInstrumentor().instrument()`` (with the SDK's tracer and meter
providers) and ``.uninstrument()``, against one nats-server and an emulated Liftbridge
broker in a child process, and prints the calls per message of each run (the event
loop's own included; how a run's messages fall into socket reads moves the count a
little). Needs the ``otel`` and ``test`` extras.

    python benchmarks/telemetry_off_calls.py --count 20000
    python benchmarks/telemetry_off_calls.py --count 20000 --loop uvloop
    python benchmarks/telemetry_off_calls.py --ports 4222 4223 9292   # given ports
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import jetstream_consume
import jetstream_publish
import liftbridge_publish
import liftbridge_subscribe
from _loop import add_loop_argument, run_async, use_loop

from aioclients.testing import NatsServer

# An emulated Liftbridge broker in a child process (so that its work is not counted).
_BROKER = """
import asyncio, json, sys
from aioclients.testing import LiftbridgeCluster, NatsServer

async def main():
    nats_port, broker_port = int(sys.argv[1]) or None, int(sys.argv[2])
    with NatsServer(port=nats_port, jetstream=False) as nats:
        async with LiftbridgeCluster(1, nats_url=nats.url, ports=[broker_port]) as cluster:
            print(json.dumps(cluster.addresses), flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


def _calls(count: int, run: Callable[[], Any]) -> float:
    profile = cProfile.Profile()
    profile.enable()
    try:
        run()
    finally:
        profile.disable()
    total: int = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    return total / count


def _turn_off() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    from aioclients.telemetry import AioClientsInstrumentor

    instrumentor = AioClientsInstrumentor()
    instrumentor.instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider())
    instrumentor.uninstrument()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument(
        "--ports",
        nargs=3,
        type=int,
        default=[0, 0, 0],
        metavar=("JETSTREAM", "LIFTBRIDGE_NATS", "LIFTBRIDGE"),
        help="the servers' ports (default: free ones)",
    )
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    n = args.count
    js_port, lb_nats_port, lb_port = args.ports
    with NatsServer(port=js_port or None) as nats:
        broker = subprocess.Popen(
            [sys.executable, "-c", _BROKER, str(lb_nats_port), str(lb_port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert broker.stdout is not None
            addresses = json.loads(broker.stdout.readline())
            url = nats.url
            print(f"filling a JetStream and a Liftbridge stream with {n} messages ...", flush=True)
            run_async(jetstream_consume.fill_stream(url, n))
            stream = run_async(liftbridge_subscribe.fill(addresses, n))

            def js_publish() -> Any:
                run_async(jetstream_publish.reset_stream(url))  # not counted
                return lambda: run_async(jetstream_publish.ours_async(url, n))

            loops: dict[str, Callable[[], Callable[[], Any]]] = {
                "JetStream consume, ack none": lambda: (
                    lambda: run_async(jetstream_consume.ours(url, n, False))
                ),
                "JetStream consume, ack explicit": lambda: (
                    lambda: run_async(jetstream_consume.ours(url, n, True))
                ),
                "JetStream publish_async": js_publish,
                "Liftbridge subscribe": lambda: (
                    lambda: run_async(liftbridge_subscribe.ours(addresses, stream, n))
                ),
                "Liftbridge publish_async": lambda: (
                    lambda: run_async(liftbridge_publish.ours_async(addresses, n))
                ),
            }
            results: dict[str, dict[str, list[float]]] = {name: {} for name in loops}
            for phase in ("never", "never", "off", "off"):
                if phase == "off" and "off" not in next(iter(results.values())):
                    _turn_off()
                for name, prepare in loops.items():
                    calls = _calls(n, prepare())
                    results[name].setdefault(phase, []).append(calls)
        finally:
            assert broker.stdin is not None
            broker.stdin.close()
            broker.wait(30)
    print(f"Python calls per message ({n} messages a run):")
    print(f"{'':<34} {'never instrumented':>20} {'after uninstrument()':>22}")
    for name, phases in results.items():
        never = ", ".join(f"{c:.2f}" for c in phases["never"])
        off = ", ".join(f"{c:.2f}" for c in phases["off"])
        print(f"{name:<34} {never:>20} {off:>22}")


if __name__ == "__main__":
    main()
