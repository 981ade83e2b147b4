"""The ``otel`` fixture: the clients instrumented into an in-memory span exporter and
an in-memory metric reader (the OpenTelemetry SDK, from the test extra), and put back
afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the test extra brings opentelemetry-sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import Otel

from aioclients.telemetry import AioClientsInstrumentor


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    instrumentor = AioClientsInstrumentor()
    instrumentor.instrument(tracer_provider=provider, meter_provider=meters)
    assert instrumentor.is_instrumented_by_opentelemetry
    try:
        yield Otel(exporter, reader, provider, provider.get_tracer("tests"))
    finally:
        instrumentor.uninstrument()
        meters.shutdown()
        provider.shutdown()
