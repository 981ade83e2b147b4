"""The instrumentation's own work per message, without I/O: JetStream's receive and
ack hooks against the same SDK spans made by hand, from two checkouts side by side.

Each round runs a worker process per checkout (``--base``: an export of main, say;
and this one), alternating which goes first. A worker takes --count messages from a
stand-in for ``consume()``'s stream (its buffered fast path, the one a consume loop
takes for nearly every message) and, with ``--ack``, acknowledges each one into a
transport that drops the bytes; no event loop, no socket. It measures its CPU time
per message for:

- plain: the uninstrumented ``__anext__`` and ``ack``;
- by hand: the same, plus the SDK spans made by hand (a receive span per message,
  with ``--ack`` a settle span around the ack too, with the attributes the
  conventions ask for), through the same tracer provider and batch processor;
- instrumented: ``MessageStream.__anext__`` and ``Msg.ack`` as
  ``AioClientsInstrumentor`` wraps them.

"instrumented - by hand" is the instrumentation's own work per message; "by hand -
plain" is what the SDK's spans cost. The OpenTelemetry SDK with a
``BatchSpanProcessor`` and an exporter that drops (``_otel_common.py``). Prints the
median (and range) of the rounds.

    git archive main | tar -x -C /tmp/base
    python benchmarks/telemetry_hooks.py --base /tmp/base --rounds 7
    python benchmarks/telemetry_hooks.py --base /tmp/base --rounds 7 --ack
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

# Runs in a fresh process with a checkout's benchmarks/ and package on the path.
_WORKER = """
import gc, json, sys, time
from _otel_common import RECEIVE_ATTRIBUTES, Telemetry
from opentelemetry.trace import SpanKind
from aioclients.jetstream import MessageStream, Msg

count, ack = int(sys.argv[1]), sys.argv[2] == "1"


class _Url:
    hostname, port = "127.0.0.1", 4222


class _Nc:
    connected_url = _Url()


class _Transport:
    def send_nowait(self, data):
        pass


class _Api:
    nc = _Nc()
    transport = _Transport()


API = _Api()


class Stream:
    # what consume()'s stream gives the instrumentation: its buffered fast path
    def __init__(self, messages):
        self._api = API
        self._next = iter(messages).__next__

    def _take_buffered(self):
        return self._next()

    async def __anext__(self):
        return self._next()


def messages():
    reply = b"$JS.ACK.BENCHC.ours1.1.%d.%d.1764160000000000000.0"
    return [Msg(API, b"benchc.data", reply % (i, i), b"x" * 100, None) for i in range(1, count + 1)]


def drive(anext, settle, stream):
    for _ in range(count):
        step = anext(stream)
        try:
            step.send(None)
        except StopIteration as stop:
            msg = stop.value
        if settle is not None:
            step = settle(msg)
            try:
                step.send(None)
            except StopIteration:
                pass


telemetry = Telemetry(metrics=False)
start_span = telemetry.tracer_provider.get_tracer("by hand").start_span
kind = SpanKind.CLIENT
time_ns = time.time_ns
receive_attrs = {k: v for k, v in RECEIVE_ATTRIBUTES.items() if k != "messaging.message.id"}
settle_attrs = {**receive_attrs, "messaging.operation.type": "settle",
                "messaging.operation.name": "ack"}
plain_ack = Msg.ack


async def by_hand_anext(stream):
    begin = time_ns()
    msg = stream._take_buffered()
    attrs = receive_attrs.copy()
    attrs["messaging.message.id"] = msg._reply.split(b".")[5].decode()
    start_span("receive BENCHC", None, kind, attrs, None, begin).end(time_ns())
    return msg


async def by_hand_ack(msg):
    attrs = settle_attrs.copy()
    attrs["messaging.message.id"] = msg._reply.split(b".")[5].decode()
    span = start_span("ack BENCHC", None, kind, attrs, None, time_ns())
    await plain_ack(msg)
    span.end(time_ns())


def measure(anext, settle):
    stream = Stream(messages())
    gc.collect()
    used = time.process_time()
    drive(anext, settle, stream)
    telemetry.tracer_provider.force_flush()
    return (time.process_time() - used) / count * 1e6


out = {
    "plain": measure(Stream.__anext__, plain_ack if ack else None),
    "by hand": measure(by_hand_anext, by_hand_ack if ack else None),
}
with telemetry.on():
    traced_anext = MessageStream.__anext__
    out["instrumented"] = measure(traced_anext, Msg.ack if ack else None)
telemetry.shutdown()
print(json.dumps(out))
"""


def _run(tree: Path, count: int, ack: bool) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{HERE / 'benchmarks'}")
    out = subprocess.run(
        [sys.executable, "-c", _WORKER, str(count), "1" if ack else "0"],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _median_range(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the baseline checkout (a directory)")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ack", action="store_true", help="also ack each message")
    args = parser.parse_args()
    trees = (("main", Path(args.base).resolve()), ("branch", HERE))
    results: dict[str, dict[str, list[float]]] = {name: {} for name, _ in trees}
    for round_ in range(args.rounds):
        for name, tree in trees if round_ % 2 == 0 else trees[::-1]:
            for key, value in _run(tree, args.count, args.ack).items():
                results[name].setdefault(key, []).append(value)
        print(f"round {round_ + 1}/{args.rounds} done", flush=True)
    spans = "a receive and a settle span" if args.ack else "a receive span"
    print(
        f"CPU us per message, {spans} per message, median (range) of {args.rounds} rounds "
        f"of {args.count} messages; the SDK's spans (BatchSpanProcessor, dropping exporter)"
    )
    print(f"{'':<10} {'plain':>22} {'by hand':>22} {'instrumented':>22} {'ours':>6} {'SDK':>6}")
    for name, _ in trees:
        row = results[name]
        plain, hand, traced = (
            statistics.median(row[k]) for k in ("plain", "by hand", "instrumented")
        )
        print(
            f"{name:<10} {_median_range(row['plain']):>22} {_median_range(row['by hand']):>22} "
            f"{_median_range(row['instrumented']):>22} {traced - hand:>6.2f} {hand - plain:>6.2f}"
        )


if __name__ == "__main__":
    main()
