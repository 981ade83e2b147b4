"""``--otel`` of the benchmarks: aioclients instrumented the way a service runs it.

The OpenTelemetry SDK with a ``BatchSpanProcessor`` (a queue large enough that no
span is dropped at it) and, with ``metrics=True``, a ``MeterProvider`` with a
periodic reader (without it the meter is the API's no-op one); the exporters count
what they are given and drop it, so what is measured is the client-side cost of
making the spans and metrics, not of sending them anywhere. Needs the ``otel`` and
``test`` extras (opentelemetry-sdk).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any


class Telemetry:
    """Instrument for the length of a ``with`` block; counts spans exported."""

    def __init__(self, *, metrics: bool) -> None:
        from opentelemetry.metrics import NoOpMeterProvider
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            MetricExporter,
            MetricExportResult,
            PeriodicExportingMetricReader,
        )
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        from aioclients.telemetry import AioClientsInstrumentor

        counts = self

        class DroppingSpanExporter(SpanExporter):
            def export(self, spans: Sequence[Any]) -> SpanExportResult:
                counts.spans += len(spans)
                return SpanExportResult.SUCCESS

        class DroppingMetricExporter(MetricExporter):
            def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kw: Any) -> Any:
                counts.metric_exports += 1
                return MetricExportResult.SUCCESS

            def force_flush(self, timeout_millis: float = 10_000) -> bool:
                return True

            def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
                pass

        self.spans = 0
        self.metric_exports = 0
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(DroppingSpanExporter(), max_queue_size=1 << 16)
        )
        self.meter_provider: Any = (
            MeterProvider(
                metric_readers=[
                    PeriodicExportingMetricReader(
                        DroppingMetricExporter(), export_interval_millis=5_000
                    )
                ]
            )
            if metrics
            else NoOpMeterProvider()
        )
        self._instrumentor = AioClientsInstrumentor()

    @contextlib.contextmanager
    def on(self) -> Iterator[None]:
        self._instrumentor.instrument(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )
        try:
            yield
        finally:
            self._instrumentor.uninstrument()
            self.tracer_provider.force_flush()

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        if hasattr(self.meter_provider, "shutdown"):
            self.meter_provider.shutdown()


def sdk_floor_us(telemetry: Telemetry, spans: int = 1, count: int = 20_000) -> float:
    """CPU time (this process, the batch processor's thread included) per message of a
    consumer that does nothing but make the SDK spans a message needs, in
    microseconds: per span, the attributes the conventions require (a shared dict
    copied with the message id added, as the instrumentation does), ``start_span``
    and ``end()`` through the same tracer provider and batch processor, and a flush
    at the end. No client, no instrumentation: the floor of ``spans`` spans per
    message."""
    import time

    from opentelemetry.trace import SpanKind

    start_span = telemetry.tracer_provider.get_tracer("floor").start_span
    shared = {k: v for k, v in RECEIVE_ATTRIBUTES.items() if k != "messaging.message.id"}
    kind = SpanKind.CLIENT
    time_ns = time.time_ns
    used = time.process_time()
    for i in range(count):
        for _ in range(spans):
            begin = time_ns()
            attrs = shared.copy()
            attrs["messaging.message.id"] = str(i)
            start_span("receive BENCHC", None, kind, attrs, None, begin).end(time_ns())
    telemetry.tracer_provider.force_flush()
    return (time.process_time() - used) / count * 1e6


class BareSpans:
    """The SDK spans a message needs, made by hand in an uninstrumented consume loop
    (same tracer provider and batch processor, the attributes the conventions ask
    for): the floor of instrumentation measured in the loop itself, under the same
    event loop, garbage collector and machine load as the instrumented run."""

    def __init__(self, telemetry: Telemetry, system: str = "nats") -> None:
        import time

        from opentelemetry.trace import SpanKind

        self._start_span = telemetry.tracer_provider.get_tracer("bare").start_span
        self._kind = SpanKind.CLIENT
        self.time_ns = time.time_ns
        base = {k: v for k, v in RECEIVE_ATTRIBUTES.items() if k != "messaging.message.id"}
        base["messaging.system"] = system
        self._receive = base
        self._settle = {
            **base,
            "messaging.operation.type": "settle",
            "messaging.operation.name": "ack" if system == "nats" else "finish",
        }

    def receive(self, start: int, message_id: str) -> None:
        attrs = self._receive.copy()
        attrs["messaging.message.id"] = message_id
        self._start_span("receive BENCHC", None, self._kind, attrs, None, start).end(self.time_ns())

    def settle(self, message_id: str) -> Any:
        """Start a settle span (the caller ends it when the ack is sent)."""
        attrs = self._settle.copy()
        attrs["messaging.message.id"] = message_id
        return self._start_span("ack BENCHC", None, self._kind, attrs, None, self.time_ns())


#: the attributes of a per-message receive span (JetStream; NSQ's are alike)
RECEIVE_ATTRIBUTES: dict[str, Any] = {
    "messaging.system": "nats",
    "messaging.operation.type": "receive",
    "messaging.operation.name": "receive",
    "messaging.destination.name": "BENCHC",
    "messaging.consumer.group.name": "ours1",
    "messaging.message.id": "12345",
    "server.address": "127.0.0.1",
    "server.port": 4222,
}


def per_message_us(plain_rate: float, traced_rate: float) -> float:
    """What instrumentation adds to each message, in microseconds."""
    return (1 / traced_rate - 1 / plain_rate) * 1e6


def median_range(values: Sequence[float], fmt: str = "{:.1f}") -> str:
    """``median (low-high)`` of the rounds' values."""
    import statistics

    return (
        f"{fmt.format(statistics.median(values))} "
        f"({fmt.format(min(values))}-{fmt.format(max(values))})"
    )
