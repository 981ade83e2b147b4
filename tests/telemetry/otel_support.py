"""Helpers of the telemetry tests: the in-memory exporter and reader, read back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer


@dataclass
class Otel:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    provider: TracerProvider
    tracer: Tracer  # for the test's own spans

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        found = list(self.exporter.get_finished_spans())
        return [s for s in found if name is None or s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.spans(name)
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]

    def points(self, metric: str) -> list[Any]:
        """The data points of ``metric`` (each with ``.attributes`` and a value)."""
        data = self.reader.get_metrics_data()
        out: list[Any] = []
        if data is None:
            return out
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        out.extend(m.data.data_points)
        return out

    def total(self, metric: str, **attributes: Any) -> int:
        """The sum of a counter's points whose attributes include ``attributes``."""
        wanted = {k.replace("__", "."): v for k, v in attributes.items()}
        return sum(
            int(p.value)
            for p in self.points(metric)
            if all(p.attributes.get(k) == v for k, v in wanted.items())
        )


def hex_ids(span: ReadableSpan) -> tuple[int, int]:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id, context.span_id
