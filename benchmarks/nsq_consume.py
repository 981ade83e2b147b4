"""NSQ consume throughput: aioclients vs pynsq vs ansq on the same nsqd, in one run.

Each client consumes --count 100-byte messages (FIN each) with max_in_flight
--max-in-flight from a topic filled beforehand with 10 x max_in_flight more (the
fill is not timed; a drained channel would wait for nsqd's output buffer timeout). The nsqd is
the emulator, in a process of its own, unless --nsqd-tcp/--nsqd-http name a real one.
Each client runs --rounds times, interleaved; the best round is reported, with the
lowest CPU time this process spent per message (the fill is not counted).

"aioclients-run" consumes with ``Reader.run(handler)`` instead, the handler model
of pynsq (a handler that returns is finished by the library).

``--otel`` adds "aioclients+otel": aioclients instrumented with OpenTelemetry (see
``_otel_common.py``: a receive span per message, a settle span per FIN, and the
metrics) in the same rounds, and "aioclients-run+otel" (a process span per message:
the library's FIN is not the user's call and makes no span), "aioclients+bare" and
"aioclients-run+bare" (uninstrumented, making the same SDK spans by hand: the
floor of instrumentation measured in the same loop), and prints what
instrumentation costs per message.

    python benchmarks/nsq_consume.py --count 100000 --max-in-flight 200
    python benchmarks/nsq_consume.py --count 2000 --rounds 1      # quick check
    python benchmarks/nsq_consume.py --count 100000 --rounds 3 --otel
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from _loop import add_loop_argument, run_async, use_loop
from _nsq_common import PAYLOAD, emulated_nsqd, report

from aioclients.nsq import HTTPProducer, Reader


async def fill(http: str, topic: str, count: int) -> None:
    async with HTTPProducer(http) as producer:
        for i in range(0, count, 2000):
            await producer.mpublish(topic, [PAYLOAD] * min(2000, count - i))


async def ours(tcp: str, topic: str, count: int, mif: int) -> float:
    start = time.perf_counter()  # connecting included, as for pynsq
    async with Reader(topic, "bench", nsqd_tcp_addresses=[tcp], max_in_flight=mif) as reader:
        n = 0
        async for msg in reader:
            await msg.finish()
            n += 1
            if n == count:
                break
        return count / (time.perf_counter() - start)


def counting_handler(count: int) -> tuple[Callable[[object], bool], asyncio.Future[float]]:
    """A handler that counts messages (and returns True, pynsq's FIN) and a future
    that gets the time the ``count``-th arrived."""
    done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    n = 0

    def handler(message: object) -> bool:
        nonlocal n
        n += 1
        if n == count and not done.done():
            done.set_result(time.perf_counter())
        return True

    return handler, done


async def ours_run(tcp: str, topic: str, count: int, mif: int, telemetry: Any = None) -> float:
    """``Reader.run(handler)``: the handler model pynsq has (a handler that returns is
    finished by the library). With ``telemetry``, uninstrumented, its handler making
    the SDK's process span by hand."""
    handler, done = counting_handler(count)
    if telemetry is not None:
        handler = bare_process_span(telemetry, topic, handler)
    start = time.perf_counter()  # connecting included, as for pynsq
    async with Reader(topic, "bench", nsqd_tcp_addresses=[tcp], max_in_flight=mif) as reader:
        task = asyncio.ensure_future(reader.run(handler, concurrency=1))
        try:
            return count / (await done - start)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def ours_bare_spans(tcp: str, topic: str, count: int, mif: int, spans: Any) -> float:
    """``ours`` uninstrumented, making the same SDK spans by hand (see BareSpans)."""
    time_ns = spans.time_ns
    start = time.perf_counter()  # connecting included, as for pynsq
    async with Reader(topic, "bench", nsqd_tcp_addresses=[tcp], max_in_flight=mif) as reader:
        n = 0
        while True:
            begin = time_ns()
            msg = await reader.__anext__()
            message_id = msg.id.decode("ascii", "replace")
            spans.receive(begin, message_id)
            span = spans.settle(message_id)
            await msg.finish()
            span.end(time_ns())
            n += 1
            if n == count:
                break
        return count / (time.perf_counter() - start)


def bare_process_span(
    telemetry: Any, topic: str, handler: Callable[[Any], object]
) -> Callable[[Any], object]:
    """``handler`` inside the process span instrumented ``run()`` makes, made by hand
    (the same tracer provider, kind, attributes, context attached around the
    handler): what the SDK costs in ``run()`` with nothing of ours around it."""
    from opentelemetry import context, trace
    from opentelemetry.trace import SpanKind

    start_span = telemetry.tracer_provider.get_tracer("bare").start_span
    set_span_in_context, attach, detach = trace.set_span_in_context, context.attach, context.detach
    time_ns = time.time_ns
    kind = SpanKind.CONSUMER
    base: dict[str, Any] = {}
    name = f"process {topic}"

    def traced(msg: Any) -> object:
        if not base:
            host, port = msg.nsqd_address.rsplit(":", 1)
            base.update(
                {
                    "messaging.system": "nsq",
                    "messaging.operation.type": "process",
                    "messaging.operation.name": "process",
                    "messaging.destination.name": topic,
                    "messaging.consumer.group.name": "bench",
                    "server.address": host,
                    "server.port": int(port),
                }
            )
        attrs = base.copy()
        attrs["messaging.message.id"] = msg.id.decode("ascii", "replace")
        span = start_span(name, None, kind, attrs, None, time_ns())
        token = attach(set_span_in_context(span))
        try:
            return handler(msg)
        finally:
            detach(token)
            span.end(time_ns())

    return traced


async def pynsq(tcp: str, topic: str, count: int, mif: int) -> float:
    import nsq

    handler, done = counting_handler(count)  # returns True: pynsq sends FIN
    start = time.perf_counter()  # pynsq connects in the background: included, a few ms
    reader = nsq.Reader(
        topic=topic,
        channel="bench",
        message_handler=handler,
        nsqd_tcp_addresses=[tcp],
        max_in_flight=mif,
    )
    try:
        return count / (await done - start)
    finally:
        reader.close()
        await asyncio.sleep(0.1)


async def ansq(tcp: str, topic: str, count: int, mif: int) -> float:
    from ansq import open_connection

    host, port = tcp.rsplit(":", 1)
    start = time.perf_counter()  # connecting included, as for pynsq
    conn = await open_connection(host, int(port))
    try:
        await conn.subscribe(topic, "bench", mif)
        n = 0
        async for msg in conn.messages():
            await msg.fin()
            n += 1
            if n == count:
                break
        return count / (time.perf_counter() - start)
    finally:
        await conn.close()


CLIENTS: dict[str, Callable[[str, str, int, int], Awaitable[float]]] = {
    "aioclients": ours,
    "aioclients-run": ours_run,
    "pynsq": pynsq,
    "ansq": ansq,
}


@contextlib.contextmanager
def servers(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if args.nsqd_tcp:
        yield args.nsqd_tcp, args.nsqd_http
    else:
        with emulated_nsqd() as addresses:
            yield addresses


async def main(args: argparse.Namespace, tcp: str, http: str) -> None:
    best: dict[str, float] = {}
    clients = dict(CLIENTS)
    telemetry = None
    if args.otel:
        from _otel_common import Telemetry

        telemetry = Telemetry(metrics=False)
        with_metrics = Telemetry(metrics=True)

        async def traced(tcp: str, topic: str, count: int, mif: int) -> float:
            assert telemetry is not None
            with telemetry.on():
                return await ours(tcp, topic, count, mif)

        async def traced_metrics(tcp: str, topic: str, count: int, mif: int) -> float:
            with with_metrics.on():
                return await ours(tcp, topic, count, mif)

        from _otel_common import BareSpans

        bare_spans = BareSpans(telemetry, "nsq")

        # The hand-made spans are flushed through the batch processor in the client's
        # own measured time, as telemetry.on() does for the instrumented clients: else
        # their export would be charged to the next client measured.
        async def bare(tcp: str, topic: str, count: int, mif: int) -> float:
            assert telemetry is not None
            try:
                return await ours_bare_spans(tcp, topic, count, mif, bare_spans)
            finally:
                telemetry.tracer_provider.force_flush()

        async def traced_run(tcp: str, topic: str, count: int, mif: int) -> float:
            assert telemetry is not None
            with telemetry.on():
                return await ours_run(tcp, topic, count, mif)

        async def bare_run(tcp: str, topic: str, count: int, mif: int) -> float:
            assert telemetry is not None
            try:
                return await ours_run(tcp, topic, count, mif, telemetry)
            finally:
                telemetry.tracer_provider.force_flush()

        clients = {
            "aioclients": ours,
            "aioclients+bare": bare,
            "aioclients+otel": traced,
            "aioclients+otel+metrics": traced_metrics,
            "aioclients-run": ours_run,
            "aioclients-run+bare": bare_run,
            "aioclients-run+otel": traced_run,
            "pynsq": pynsq,
            "ansq": ansq,
        }
    cpu: dict[str, float] = {}
    rates: dict[str, list[float]] = {}  # every round's, for the medians
    cpus: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, run in clients.items():
            if name.split("+")[0] not in args.clients:
                continue
            topic = f"bench_{name.replace('+', '_')}_{uuid.uuid4().hex[:8]}"
            # More than is read: nsqd holds a drained channel's last messages until its
            # output buffer timeout (250 ms), which would round every time up to it.
            await fill(http, topic, args.count + 10 * args.max_in_flight)
            used = time.process_time()
            try:
                rate = await asyncio.wait_for(run(tcp, topic, args.count, args.max_in_flight), 300)
            except ImportError as exc:
                print(f"{name}: not installed ({exc})")
                continue
            used = (time.process_time() - used) / args.count * 1e6
            best[name] = max(best.get(name, 0.0), rate)
            cpu[name] = min(cpu.get(name, math.inf), used)
            rates.setdefault(name, []).append(rate)
            cpus.setdefault(name, []).append(used)
        if telemetry is not None:
            from _otel_common import sdk_floor_us

            # the SDK alone, in the same round: two spans per message (receive, FIN)
            cpus.setdefault("sdk floor", []).append(sdk_floor_us(telemetry, 2))
    report(
        f"consume {args.count} x {len(PAYLOAD)}-byte messages, max_in_flight {args.max_in_flight}",
        best,
    )
    print("client CPU per message (this process, best round):")
    for name, us in cpu.items():
        print(f"  {name:<12} {us:>9.2f} us")
    if telemetry is not None:
        import statistics

        from _otel_common import median_range, per_message_us

        peer = best.get("pynsq")
        for variant in ("aioclients+otel", "aioclients+otel+metrics"):
            traced_rate = best[variant]
            print(
                f"  {variant}: +{per_message_us(best['aioclients'], traced_rate):.1f} us per "
                f"message; {traced_rate / peer if peer else float('nan'):.2f}x pynsq "
                "(uninstrumented)"
            )
        print(
            f"median (range) of {args.rounds} rounds: msgs/s, and CPU us per message (this "
            "process, the span processor's thread included)"
        )
        for name in cpus:
            if name in rates:
                print(
                    f"  {name:<24} {median_range(rates[name], '{:,.0f}'):>28}/s"
                    f"  {median_range(cpus[name], '{:.2f}'):>22} us"
                )
        med = {name: statistics.median(values) for name, values in cpus.items()}
        floor = med["aioclients"] + med["sdk floor"]
        print(
            "  SDK floor: two spans per message (receive and FIN, 8 attributes each, "
            f"start_span, end, batch processor), no client: "
            f"{median_range(cpus['sdk floor'], '{:.2f}')} us\n"
            f"  ours {med['aioclients']:.2f} + SDK floor {med['sdk floor']:.2f} = {floor:.2f} "
            f"us; instrumented {med['aioclients+otel']:.2f} us, so the instrumentation's own "
            f"work is {med['aioclients+otel'] - floor:.2f} us"
        )
        bare_us = med["aioclients+bare"]
        print(
            "  two spans per message made by hand in the same loop (the SDK in situ): "
            f"{bare_us:.2f} us (SDK {bare_us - med['aioclients']:.2f}); instrumented "
            f"{med['aioclients+otel']:.2f} us: the instrumentation's own work "
            f"{med['aioclients+otel'] - bare_us:.2f} us"
        )
        if "pynsq" in med and "aioclients-run+otel" in med:
            run_ratio = statistics.median(rates["aioclients-run+otel"]) / statistics.median(
                rates["pynsq"]
            )
            print(
                "  Reader.run(handler), pynsq's model (a process span per message; the "
                f"library's FIN makes none): instrumented {med['aioclients-run+otel']:.2f} us, "
                f"uninstrumented {med['aioclients-run']:.2f} us; instrumented / pynsq: "
                f"{med['pynsq'] / med['aioclients-run+otel']:.2f}x by CPU, {run_ratio:.2f}x by "
                "median msgs/s"
            )
            if "aioclients-run+bare" in med:
                bare_run_us = med["aioclients-run+bare"]
                print(
                    "  the process span made by hand in run()'s handler (the SDK in situ): "
                    f"{bare_run_us:.2f} us (SDK {bare_run_us - med['aioclients-run']:.2f}); "
                    f"instrumented {med['aioclients-run+otel']:.2f} us: the instrumentation's "
                    f"own work {med['aioclients-run+otel'] - bare_run_us:.2f} us"
                )
        if "pynsq" in med:
            rate_ratio = statistics.median(rates["aioclients+otel"]) / statistics.median(
                rates["pynsq"]
            )
            print(
                f"  pynsq uninstrumented {med['pynsq']:.2f} us (instrumented / pynsq: "
                f"{med['pynsq'] / med['aioclients+otel']:.2f}x by CPU, {rate_ratio:.2f}x by "
                "median msgs/s)"
            )
        print(f"  spans exported: {telemetry.spans + with_metrics.spans}")
        telemetry.shutdown()
        with_metrics.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--max-in-flight", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", nargs="+", default=list(CLIENTS))
    parser.add_argument("--nsqd-tcp", help="a real nsqd's TCP address (host:port)")
    parser.add_argument("--nsqd-http", help="the same nsqd's HTTP address (host:port)")
    parser.add_argument("--otel", action="store_true", help="also run aioclients instrumented")
    add_loop_argument(parser)
    ns = parser.parse_args()
    use_loop(ns.loop)
    with servers(ns) as (tcp_address, http_address):
        run_async(main(ns, tcp_address, http_address))
