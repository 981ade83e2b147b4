"""A trace that crosses two processes: a publisher in a subprocess (instrumented, its
own SDK), the consumer here. The consumer's receive span links to the publisher's send
span, and a span started in ``context_of(msg)`` is its child, in its trace."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap

from opentelemetry import trace
from opentelemetry.trace import SpanKind
from otel_support import Otel

from aioclients.jetstream import JetStream
from aioclients.liftbridge import StartPosition, StopPosition, connect
from aioclients.telemetry import context_of

_PUBLISHER = """
import asyncio, json, sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aioclients.telemetry import AioClientsInstrumentor

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
AioClientsInstrumentor().instrument(tracer_provider=provider)


async def publish(kind, where, destination):
    tracer = provider.get_tracer("publisher")
    with tracer.start_as_current_span("job"):
        if kind == "jetstream":
            from aioclients.jetstream import connect

            async with await connect(where) as js:
                await js.publish(destination, b"from afar")
        else:
            from aioclients.liftbridge import connect

            async with await connect(where.split(",")) as client:
                await client.publish(destination, b"from afar")


asyncio.run(publish(*sys.argv[1:4]))
(send,) = [s for s in exporter.get_finished_spans() if s.name.startswith("send ")]
print(json.dumps({
    "trace_id": send.context.trace_id,
    "span_id": send.context.span_id,
    "kind": send.kind.name,
}))
"""


async def _publish_elsewhere(kind: str, where: str, destination: str) -> tuple[int, int]:
    # Not subprocess.run: the emulators serve from this test's event loop.
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        textwrap.dedent(_PUBLISHER),
        kind,
        where,
        destination,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, (out + err).decode()
    sent = json.loads(out.decode().strip().splitlines()[-1])
    assert sent["kind"] == "PRODUCER"
    return sent["trace_id"], sent["span_id"]


def _check_consumer_side(otel: Otel, receive_name: str, msg: object, sent: tuple[int, int]) -> None:
    (receive,) = otel.spans(receive_name)
    assert receive.kind is SpanKind.CLIENT
    (link,) = receive.links
    assert (link.context.trace_id, link.context.span_id) == sent
    assert link.context.is_remote
    # the receive span itself is not in the producer's trace (a link, not a parent)
    assert receive.context.trace_id != sent[0]
    with otel.tracer.start_as_current_span("process", context=context_of(msg)) as process:
        pass
    assert process.get_span_context().trace_id == sent[0]
    assert process.parent is not None
    assert process.parent.span_id == sent[1]
    assert trace.get_current_span(context_of(msg)).get_span_context().is_remote


async def test_jetstream_trace_crosses_processes(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    sent = await _publish_elsewhere("jetstream", js.nc.connected_url.geturl(), f"{unique_name}.job")  # type: ignore[union-attr]
    consumer = await js.create_consumer(unique_name, durable_name="far")
    msg = await consumer.next(expires=5)
    assert msg.data == b"from afar"
    _check_consumer_side(otel, f"receive {unique_name}", msg, sent)
    await msg.ack()


async def test_liftbridge_trace_crosses_processes(
    liftbridge_cluster: object, unique_name: str, otel: Otel
) -> None:
    addresses = liftbridge_cluster.addresses  # type: ignore[attr-defined]
    stream = f"x_{unique_name}"
    async with await connect(addresses) as client:
        await client.create_stream(f"xs.{unique_name}", stream)
        sent = await _publish_elsewhere("liftbridge", ",".join(addresses), stream)
        async with client.subscribe(
            stream, start_at=StartPosition.EARLIEST, stop_at=StopPosition.LATEST
        ) as sub:
            msgs = [m async for m in sub]
    assert [m.value for m in msgs] == [b"from afar"]
    _check_consumer_side(otel, f"receive {stream}", msgs[0], sent)
