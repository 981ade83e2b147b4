"""``AioClientsInstrumentor``: the OpenTelemetry instrumentor of the three clients."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from aioclients._version import __version__
from aioclients.telemetry._common import Instruments, Patches
from aioclients.telemetry._jetstream import instrument_jetstream
from aioclients.telemetry._liftbridge import instrument_liftbridge
from aioclients.telemetry._nsq import instrument_nsq

__all__ = ("AioClientsInstrumentor",)

_SCHEMA_URL = "https://opentelemetry.io/schemas/1.27.0"


class AioClientsInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Traces and metrics for the JetStream, NSQ and Liftbridge clients.

    ``AioClientsInstrumentor().instrument()`` wraps the clients' public methods
    (publish, receive, settle); ``uninstrument()`` puts the original methods back,
    so that an uninstrumented program runs the library's own code, unchanged.
    ``opentelemetry-instrument`` finds it through the ``opentelemetry_instrumentor``
    entry point.
    """

    _patches: Patches | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        # The instrumentation ships inside the library it instruments.
        return ("aioclients",)

    def _instrument(self, **kwargs: Any) -> None:
        """Args (keywords):
        tracer_provider: a ``TracerProvider`` (default: the global one).
        meter_provider: a ``MeterProvider`` (default: the global one).
        """
        tracer = trace.get_tracer(
            "aioclients.telemetry",
            __version__,
            tracer_provider=kwargs.get("tracer_provider"),
            schema_url=_SCHEMA_URL,
        )
        meter = metrics.get_meter(
            "aioclients.telemetry",
            __version__,
            meter_provider=kwargs.get("meter_provider"),
            schema_url=_SCHEMA_URL,
        )
        instruments = Instruments(tracer, meter)
        patches = Patches()
        try:
            instrument_jetstream(instruments, patches)
            instrument_nsq(instruments, patches)
            instrument_liftbridge(instruments, patches)
        except BaseException:
            patches.restore()
            raise
        self._patches = patches

    def _uninstrument(self, **kwargs: Any) -> None:
        patches = self._patches
        self._patches = None
        if patches is not None:
            patches.restore()

    def wrapped_methods(self) -> list[tuple[type, str]]:
        """The ``(class, name)`` pairs replaced while instrumented (empty otherwise)."""
        patches = self._patches
        return [] if patches is None else [(cls, name) for cls, name, _ in patches.wrapped()]
