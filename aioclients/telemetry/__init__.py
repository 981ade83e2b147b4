"""OpenTelemetry tracing and metrics for the JetStream, NSQ and Liftbridge clients.

Opt in, with the ``otel`` extra (``pip install 'aioclients[otel]'``)::

    from aioclients.telemetry import AioClientsInstrumentor, context_of

    AioClientsInstrumentor().instrument()  # or: opentelemetry-instrument python app.py

Spans follow the OpenTelemetry messaging semantic conventions (``send``,
``receive``, ``process``, ``settle``); JetStream and Liftbridge messages carry the
trace context in their headers, and ``context_of(msg)`` gives it back on the
consuming side. The rest of the library never imports OpenTelemetry: without
``instrument()`` (or without the extra) nothing of this runs.
"""

try:
    import opentelemetry.instrumentation.instrumentor  # noqa: F401 (a check)
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "aioclients.telemetry needs the 'otel' extra: pip install 'aioclients[otel]' "
        "(it brings opentelemetry-api and opentelemetry-instrumentation)"
    ) from exc

from aioclients.telemetry._context import context_of
from aioclients.telemetry._instrumentor import AioClientsInstrumentor

__all__ = ("AioClientsInstrumentor", "context_of")
