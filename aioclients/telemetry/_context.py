"""``context_of(msg)``: the producer's trace context carried by a received message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.context import Context

from aioclients.jetstream import KeyValueEntry, Msg
from aioclients.liftbridge import Message as LiftbridgeMessage
from aioclients.nsq import Message as NsqMessage
from aioclients.telemetry._common import extract

__all__ = ("context_of",)


def _header_block(block: bytes) -> dict[str, str]:
    """The ``Name: value`` lines of a ``NATS/1.0`` header block (first value wins;
    trace context headers are not repeated)."""
    out: dict[str, str] = {}
    for line in block.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep and name:
            out.setdefault(
                name.decode("utf-8", "replace"), value.strip().decode("utf-8", "replace")
            )
    return out


def context_of(msg: object) -> Context:
    """The producer's context carried by a received message, for a span of your own.

    ``with tracer.start_as_current_span("handle", context=context_of(msg)):`` makes
    the span a child of the producer's ``send`` span, in the producer's trace.

    Args:
        msg: a JetStream ``Msg`` or ``KeyValueEntry``, or a Liftbridge ``Message``.
            An NSQ ``Message`` carries no headers, so no context.

    Returns:
        What the globally configured propagator (W3C ``traceparent`` /
        ``tracestate`` by default) finds in the message's headers: an empty
        ``Context`` when there is none (a span started in it begins a new trace).

    Raises:
        TypeError: ``msg`` is none of these.
    """
    headers: Mapping[str, Any] | None
    if isinstance(msg, Msg):
        headers = msg.headers
    elif isinstance(msg, LiftbridgeMessage):
        headers = msg.headers
    elif isinstance(msg, KeyValueEntry):
        stored = getattr(msg, "_headers", None)
        headers = _header_block(stored) if isinstance(stored, bytes) else stored
    elif isinstance(msg, NsqMessage):
        return Context()
    else:
        raise TypeError(
            "context_of() takes a JetStream Msg or KeyValueEntry, or a Liftbridge or NSQ "
            f"Message; got {type(msg).__name__}"
        )
    return extract(headers)
