"""What every client's instrumentation shares: attribute names, the instruments,
span endings, header carriers, and the patch table that instrument() fills and
uninstrument() empties.

Names follow the OpenTelemetry messaging semantic conventions (spans: "send" is
PRODUCER, its context injected as the message's creation context; "receive" and
"settle" are CLIENT and link to the creation context; "process" is CONSUMER).
Span names are ``"{operation} {destination}"``.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from functools import partial
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Meter, NoOpHistogram, Observation
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import Getter, Setter, TextMapPropagator
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

__all__ = (
    "BATCH_COUNT",
    "CONSUMER_GROUP",
    "DESTINATION",
    "DESTINATION_PARTITION",
    "ERROR_TYPE",
    "MESSAGE_ID",
    "NESTED",
    "OPERATION_NAME",
    "OPERATION_TYPE",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "SYSTEM",
    "Attributes",
    "Instruments",
    "Patches",
    "block_may_carry_context",
    "creation_link",
    "extract",
    "inject_into",
    "split_address",
    "traced_send",
)

SYSTEM = "messaging.system"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
DESTINATION = "messaging.destination.name"
DESTINATION_PARTITION = "messaging.destination.partition.id"
MESSAGE_ID = "messaging.message.id"
CONSUMER_GROUP = "messaging.consumer.group.name"
BATCH_COUNT = "messaging.batch.message_count"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"

Attributes = dict[str, AttributeValue]

#: Set while an instrumented call runs a public method that is instrumented too
#: (``publish`` calling ``publish_async``, ``kv.put`` calling ``publish``): the
#: inner call makes no span of its own and only adds these headers (the outer
#: span's context) to its message.
NESTED: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "aioclients_telemetry_nested", default=None
)

# The bucket boundaries the conventions give for messaging.client.operation.duration.
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)

_time_ns = time.time_ns


class _Totals:
    """Counts kept here and read by an asynchronous counter at each collection.

    A synchronous ``Counter.add`` costs the SDK a copy, a clean and a hash of the
    attributes on every call (some 10-20 us with seven attributes): on the
    per-message paths that is more than the client's own work. Here a message
    costs a dict lookup and an integer add; the SDK sees the same monotonic sums.
    """

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        # frozenset(attributes.items()) -> [attributes, count]
        self._counts: dict[frozenset[tuple[str, AttributeValue]], list[Any]] = {}

    def entry(self, attributes: Attributes, key: Any) -> list[Any]:
        """The ``[attributes, count]`` of one attribute set, made if new: a per-message
        path keeps it and adds to ``entry[1]`` itself (no call per message)."""
        entry = self._counts.get(key)
        if entry is None:
            entry = self._counts[key] = [attributes, 0]
        return entry

    def add(self, amount: int, attributes: Attributes, key: Any = None) -> None:
        if key is None:
            key = frozenset(attributes.items())
        entry = self._counts.get(key)
        if entry is None:
            self._counts[key] = [attributes, amount]
        else:
            entry[1] += amount

    def observe(self, options: CallbackOptions) -> Iterable[Observation]:
        # list() of a dict's items runs in C: the event loop's thread cannot
        # change the dict half-way through.
        return [Observation(count, attributes) for attributes, count in list(self._counts.values())]


def _duration_recorder(
    meter: Meter, name: str, description: str
) -> Callable[[float, Attributes], None] | None:
    """A duration histogram's ``record`` (seconds, the conventions' buckets), or
    ``None`` when the meter is the API's no-op one: nothing at all is called then."""
    histogram = meter.create_histogram(
        name,
        unit="s",
        description=description,
        explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
    )
    return None if isinstance(histogram, NoOpHistogram) else histogram.record


class Instruments:
    """The tracer and the three instruments of one ``instrument()`` call.

    The per-message paths (a receive span per message, a settle span per ack) call
    ``start_span`` (the tracer's own method) and ``record`` directly rather than
    :meth:`start` and :meth:`finish`: ``record`` is ``None`` when the meter is the
    API's no-op one, so that nothing at all is called for the histogram then.
    """

    def __init__(self, tracer: Tracer, meter: Meter) -> None:
        self.tracer = tracer
        self.start_span = tracer.start_span
        self.sent = _Totals()
        self.consumed = _Totals()
        meter.create_observable_counter(
            "messaging.client.sent.messages",
            callbacks=[self.sent.observe],
            unit="{message}",
            description="Number of messages producer attempted to send to the broker.",
        )
        meter.create_observable_counter(
            "messaging.client.consumed.messages",
            callbacks=[self.consumed.observe],
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        )
        self.record = _duration_recorder(
            meter,
            "messaging.client.operation.duration",
            "Duration of messaging operation initiated by a producer or consumer client.",
        )
        # The conventions keep processing apart: a "process" span's duration (the
        # user's handler) goes here, never into messaging.client.operation.duration.
        self.record_process = _duration_recorder(
            meter, "messaging.process.duration", "Duration of processing operation."
        )

    def start(
        self,
        operation: str,
        destination: str | None,
        kind: SpanKind,
        attributes: Attributes,
        *,
        links: list[Link] | None = None,
        start_ns: int | None = None,
    ) -> Span:
        name = f"{operation} {destination}" if destination else operation
        return self.tracer.start_span(
            name, kind=kind, attributes=attributes, links=links, start_time=start_ns
        )

    def finish(
        self,
        span: Span,
        metric_attributes: Attributes,
        start_ns: int,
        error: BaseException | None = None,
        *,
        sent: int = 0,
        consumed: int = 0,
        key: Any = None,
        process: bool = False,
    ) -> None:
        """End ``span`` (failed with ``error`` if given) and record the metrics:
        the operation's duration (a ``process`` span's in
        ``messaging.process.duration``), and the messages sent or consumed. ``key``
        is ``frozenset(metric_attributes.items())`` when the caller has it at hand."""
        end = _time_ns()
        if error is not None:
            error_type = type(error).__qualname__
            span.set_attribute(ERROR_TYPE, error_type)
            span.set_status(Status(StatusCode.ERROR, str(error) or error_type))
            span.record_exception(error)
            metric_attributes = {**metric_attributes, ERROR_TYPE: error_type}
            key = None
        span.end(end)
        record = self.record_process if process else self.record
        if record is not None:
            record((end - start_ns) / 1e9, metric_attributes)
        if sent:
            self.sent.add(sent, metric_attributes, key)
        if consumed:
            self.consumed.add(consumed, metric_attributes, key)


# -- carriers ---------------------------------------------------------------------------


class _HeaderGetter(Getter[Mapping[str, Any]]):
    """Reads JetStream headers (``str`` or a list of them) and Liftbridge headers
    (``bytes``); a name is matched exactly first, then without regard to case (Go
    code that carries context through ``http.Header`` writes ``Traceparent``)."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            for name, candidate in carrier.items():
                if name.lower() == key:
                    value = candidate
                    break
            else:
                return None
        if isinstance(value, list):
            return [_text(v) for v in value]
        return [_text(value)]

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return list(carrier)


def _text(value: object) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


class _BytesSetter(Setter[MutableMapping[str, bytes]]):
    def set(self, carrier: MutableMapping[str, bytes], key: str, value: str) -> None:
        carrier[key] = value.encode()


_GETTER = _HeaderGetter()
_BYTES_SETTER = _BytesSetter()


def extract(headers: Mapping[str, Any] | None) -> Context:
    """The context the global propagator finds in ``headers`` (empty if none)."""
    if not headers or not _headers_may_carry_context(headers):
        return Context()
    return propagate.extract(headers, context=Context(), getter=_GETTER)


# -- does a message carry a context at all? ------------------------------------------

# The propagators whose extract() reads no header but the ones their ``fields`` name
# (the W3C ones, the default): with these, a message none of whose header names is one
# of those fields carries no context, and the propagator need not be asked. With any
# other propagator (B3 reads a header it does not list, for one) it always is.
_FIELDS_TRUSTED = (TraceContextTextMapPropagator, W3CBaggagePropagator)

# (the propagator the names were taken from, its field names as text, the same as
# lower-case bytes); the names are None when the propagator must always be asked
_fields_cache: tuple[object, frozenset[str] | None, tuple[bytes, ...] | None] = (None, None, None)


def _fields_of(propagator: TextMapPropagator) -> frozenset[str] | None:
    if isinstance(propagator, CompositePropagator):
        parts = getattr(propagator, "_propagators", None)
        if not isinstance(parts, (list, tuple)):
            return None
    else:
        parts = [propagator]
    names: set[str] = set()
    for part in parts:
        if type(part) not in _FIELDS_TRUSTED:
            return None
        names.update(name.lower() for name in part.fields)
    return frozenset(names)


def _context_fields() -> tuple[frozenset[str] | None, tuple[bytes, ...] | None]:
    """The header names the global propagator reads (lower case), as text and as
    bytes; ``(None, None)`` when it cannot be told (then always extract)."""
    global _fields_cache
    propagator = propagate.get_global_textmap()
    cached = _fields_cache
    if cached[0] is not propagator:
        names = _fields_of(propagator)
        encoded = None if names is None else tuple(name.encode() for name in names)
        cached = _fields_cache = (propagator, names, encoded)
    return cached[1], cached[2]


def block_may_carry_context(block: bytes) -> bool:
    """Whether a raw ``NATS/1.0`` header block may carry a trace context: False only
    when none of the global propagator's header names occurs in it (any case), so
    that a message without one costs no header decoding and no extract()."""
    names = _context_fields()[1]
    if names is None:
        return True
    lowered = block.lower()
    for name in names:
        if name in lowered:
            return True
    return False


def _headers_may_carry_context(headers: Mapping[str, Any]) -> bool:
    names = _context_fields()[0]
    if names is None:
        return True
    for key in headers:
        if isinstance(key, str) and key.lower() in names:
            return True
    return False


def creation_link(headers: Mapping[str, Any] | None) -> list[Link] | None:
    """A link to the creation context carried by ``headers``, if there is one."""
    if not headers or not _headers_may_carry_context(headers):
        return None
    context = trace.get_current_span(extract(headers)).get_span_context()
    if not context.is_valid:
        return None
    return [Link(context)]


def inject_into(
    headers: Mapping[str, Any] | None, span: Span, *, as_bytes: bool = False
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """Headers with the context of ``span`` added (a new dict; the caller's is
    left alone), and the added entries as text.

    A message that already carries a ``traceparent`` (a creation context the
    caller set) keeps it and gets nothing added.
    """
    if headers and "traceparent" in headers:
        return dict(headers), {}
    added: dict[str, str] = {}
    propagate.inject(added, context=trace.set_span_in_context(span))
    if not added:
        return (dict(headers) if headers is not None else None), added
    merged: dict[str, Any] = dict(headers) if headers else {}
    if as_bytes:
        for key, value in added.items():
            _BYTES_SETTER.set(merged, key, value)
    else:
        merged.update(added)
    return merged, added


def merge_nested(
    headers: Mapping[str, Any] | None, added: dict[str, str], *, as_bytes: bool = False
) -> dict[str, Any] | None:
    """``headers`` with the outer call's context entries (see :data:`NESTED`)."""
    if not added or (headers and "traceparent" in headers):
        return dict(headers) if headers is not None else None
    merged: dict[str, Any] = dict(headers) if headers else {}
    for key, value in added.items():
        merged[key] = value.encode() if as_bytes else value
    return merged


def traced_send(
    inst: Instruments,
    original: Callable[..., Awaitable[Any]],
    *,
    attributes: Callable[[Any, str], Attributes],
    acked: Callable[[Span, Any], None],
    deferred: bool,
    nested: bool = False,
    as_bytes: bool = False,
) -> Callable[..., Awaitable[Any]]:
    """A ``send`` span around a publish method ``original(self, destination,
    payload, *, headers=None, **options)``.

    ``attributes(self, destination)`` gives the span's attributes and
    ``acked(span, ack)`` adds what the ack tells. ``deferred``: the method returns
    a future of the ack, and the span ends when it is done. ``nested``: the
    client's other instrumented calls honour :data:`NESTED` (a call made inside
    another adds the outer span's context and makes no span); a method that is
    not ``deferred`` also sets it while it runs. ``as_bytes``: header values are
    bytes.
    """
    start_span = inst.start
    finish = inst.finish

    def settled(span: Span, attrs: Attributes, start: int, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            finish(span, attrs, start, asyncio.CancelledError(), sent=1)
            return
        error = future.exception()
        if error is None:
            acked(span, future.result())
        finish(span, attrs, start, error, sent=1)

    async def send(
        self: Any, destination: str, payload: bytes = b"", *, headers: Any = None, **options: Any
    ) -> Any:
        if nested:
            outer = NESTED.get()
            if outer is not None:
                headers = merge_nested(headers, outer, as_bytes=as_bytes)
                return await original(self, destination, payload, headers=headers, **options)
        attrs = attributes(self, destination)
        start = _time_ns()
        span = start_span("send", destination, SpanKind.PRODUCER, attrs, start_ns=start)
        headers, added = inject_into(headers, span, as_bytes=as_bytes)
        token = NESTED.set(added) if nested and not deferred else None
        try:
            result = await original(self, destination, payload, headers=headers, **options)
        except BaseException as exc:
            finish(span, attrs, start, exc, sent=1)
            raise
        finally:
            if token is not None:
                NESTED.reset(token)
        if deferred:
            result.add_done_callback(partial(settled, span, attrs, start))
        else:
            acked(span, result)
            finish(span, attrs, start, sent=1)
        return result

    return send


def split_address(address: str | None) -> tuple[str | None, int | None]:
    """``("host", port)`` of ``"host:port"`` (IPv6 in brackets), Nones if unknown."""
    if not address:
        return None, None
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, None
    host = host.strip("[]")
    try:
        return host, int(port)
    except ValueError:
        return address, None


def server_attributes(address: str | None) -> Attributes:
    host, port = split_address(address)
    out: Attributes = {}
    if host:
        out[SERVER_ADDRESS] = host
    if port is not None:
        out[SERVER_PORT] = port
    return out


# -- patching ---------------------------------------------------------------------------


class Patches:
    """Class attributes replaced by instrument(), put back by restore().

    Each entry keeps the exact object found in the class's ``__dict__``, so that
    after restore() the classes hold their original functions again: the
    uninstrumented path is the library's own code, with nothing in between.
    """

    def __init__(self) -> None:
        self._saved: list[tuple[type, str, object]] = []

    def wrap(self, cls: type, name: str, make: Callable[[Any], Any]) -> None:
        """Replace ``cls.name`` (defined on ``cls`` itself) by ``make(original)``."""
        original = cls.__dict__[name]
        wrapper = make(original)
        wrapper.__wrapped__ = original
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                setattr(wrapper, attr, getattr(original, attr))
            except AttributeError:
                pass
        setattr(cls, name, wrapper)
        self._saved.append((cls, name, original))

    def wrapped(self) -> Iterable[tuple[type, str, object]]:
        return list(self._saved)

    def restore(self) -> None:
        while self._saved:
            cls, name, original = self._saved.pop()
            setattr(cls, name, original)
