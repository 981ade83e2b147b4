"""Instructions per message of the JetStream consume loops, counted by valgrind.

On a shared machine a loop's CPU time per message moves by 5-15 us between rounds,
more than the instrumentation's own work; the number of instructions executed does
not. This runs each loop under ``valgrind --tool=cachegrind --cache-sim=no`` twice,
consuming N and 2N messages (100 bytes, ack none or explicit, from a file stream it
fills), and prints the difference divided by N: the instructions per message, with
the start-up, the connection and the consumer's creation taken out. The loops:

- ``nats-py``: nats-py's ``pull_subscribe(...).fetch(1000)`` loop;
- ``ours``: ``consume(max_messages=1000)``, uninstrumented;
- ``bare``: the same loop, uninstrumented, making the SDK spans a message needs by
  hand (``_otel_common.BareSpans``: a receive span, and with ``--ack`` a settle span
  around each ack);
- ``otel``: the loop instrumented by ``aioclients.telemetry``.

The spans go through the SDK's ``TracerProvider``, a ``BatchSpanProcessor`` and an
exporter that drops them (``_otel_common.Telemetry``, no meter provider). Both
processes of a pair use the same server; valgrind runs the client some 50 times slower,
so the counts are those of a client that never waits behind the server's writes.

    python benchmarks/consume_instructions.py --url nats://127.0.0.1:4222
    python benchmarks/consume_instructions.py --url nats://127.0.0.1:4222 --ack \\
        --loops ours bare otel
    python benchmarks/consume_instructions.py --url ... --tree /tmp/base   # another checkout
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

# The stream, its filling and the pull size are jetstream_consume.py's, so that both
# scripts measure the same loops (its imports count once per process, taken out with
# the rest of the start-up).
from _valgrind import count_instructions
from jetstream_consume import BATCH, STREAM, SUBJECT, fill_stream

HERE = Path(__file__).resolve().parent


async def consume(url: str, loop: str, n: int, ack: bool) -> None:
    """One run: ``n`` messages through a fresh durable consumer."""
    durable = f"instr{os.getpid()}"
    if loop == "nats-py":
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig

        nc = await nats.connect(url)
        js = nc.jetstream()
        policy = AckPolicy.EXPLICIT if ack else AckPolicy.NONE
        psub = await js.pull_subscribe(
            SUBJECT, durable=durable, stream=STREAM, config=ConsumerConfig(ack_policy=policy)
        )
        got = 0
        while got < n:
            for msg in await psub.fetch(min(BATCH, n - got), timeout=10):
                if ack:
                    await msg.ack()
                got += 1
        await js.delete_consumer(STREAM, durable)
        await nc.close()
        return
    from _otel_common import BareSpans, Telemetry

    from aioclients import jetstream

    telemetry = Telemetry(metrics=False)
    if loop == "otel":
        telemetry._instrumentor.instrument(
            tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
        )
    spans = BareSpans(telemetry) if loop == "bare" else None
    async with await jetstream.connect(url) as client:
        stream = await client.stream(STREAM)
        consumer = await stream.create_consumer(
            durable_name=durable, ack_policy="explicit" if ack else "none"
        )
        got = 0
        async with consumer.consume(max_messages=BATCH) as messages:
            if spans is None:
                async for msg in messages:
                    if ack:
                        await msg.ack()
                    got += 1
                    if got == n:
                        break
            else:
                time_ns = spans.time_ns
                while got < n:
                    begin = time_ns()
                    msg = await messages.__anext__()
                    message_id = str(got + 1)
                    spans.receive(begin, message_id)
                    if ack:
                        span = spans.settle(message_id)
                        await msg.ack()
                        span.end(time_ns())
                    got += 1
        await consumer.delete()
    telemetry.tracer_provider.force_flush()
    telemetry.shutdown()


def instructions(tree: str, args: argparse.Namespace, loop: str, n: int) -> int:
    """Instructions valgrind counts for one run of ``n`` messages (the whole process)."""
    run = ["--url", args.url, "--run", loop, str(n), "--loop", args.loop]
    if args.ack:
        run.append("--ack")
    return count_instructions(__file__, run, [tree, str(HERE)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a nats-server with JetStream")
    parser.add_argument("--count", type=int, default=3000, help="N (runs of N and 2N)")
    parser.add_argument("--ack", action="store_true", help="ack explicit, an ack per message")
    parser.add_argument(
        "--loops", nargs="+", default=["nats-py", "ours", "bare", "otel"], help="loops to count"
    )
    parser.add_argument("--tree", default=str(HERE.parent), help="the checkout to measure")
    parser.add_argument("--loop", default="asyncio", choices=["asyncio", "uvloop"])
    parser.add_argument("--run", nargs=2, metavar=("LOOP", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    from _loop import run_async, use_loop

    use_loop(args.loop)
    if args.run:
        run_async(consume(args.url, args.run[0], int(args.run[1]), args.ack))
        return
    run_async(fill_stream(args.url, 3 * args.count))
    print(
        f"instructions per message, {args.loop}, ack {'explicit' if args.ack else 'none'}, "
        f"checkout {args.tree} ({2 * args.count} minus {args.count} messages):"
    )
    for loop in args.loops:
        low = instructions(args.tree, args, loop, args.count)
        high = instructions(args.tree, args, loop, 2 * args.count)
        print(f"  {loop:<8} {(high - low) / args.count:>12,.0f}", flush=True)


if __name__ == "__main__":
    main()
