"""Spans and metrics of the JetStream client, added by wrapping its public methods.

- ``send`` (PRODUCER): ``JetStream.publish``, ``publish_async`` (the span lasts until
  the ack arrives or fails), ``KeyValue.put`` / ``create`` / ``update``. The span's
  context goes into the message's headers through the global propagator (a KV
  write's through the request layer's ``JetStreamApi.publish``, which it calls).
  ``publish_batch`` (ADR-50) is one ``send`` span named after its first message's
  subject, with ``messaging.batch.message_count``; its context goes into every
  message's headers (a message that carries a ``traceparent`` keeps its own).
- ``receive`` (CLIENT): one per message of ``consume()`` (``MessageStream``,
  ``OrderedMessageStream``) and of ``next()``; one per ``fetch()`` batch
  (``FetchResult``, ``OrderedFetch``), linked to each message's creation context.
- ``settle`` (CLIENT): ``Msg.ack``, ``ack_sync``, ``nak``, ``term``.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import re
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from functools import partial
from typing import Any, overload

from opentelemetry import propagate, trace
from opentelemetry.context import get_current
from opentelemetry.trace import Link, SpanKind

from aioclients._errors import AioClientsError
from aioclients.jetstream import (
    Consumer,
    FetchResult,
    JetStream,
    KeyValue,
    MessageStream,
    Msg,
    OrderedConsumer,
    OrderedFetch,
    OrderedMessageStream,
)
from aioclients.jetstream._api import JetStreamApi
from aioclients.jetstream._protocol._batch import MAX_BATCH_MESSAGES
from aioclients.telemetry._common import (
    BATCH_COUNT,
    CONSUMER_GROUP,
    DESTINATION,
    MESSAGE_ID,
    NESTED,
    OPERATION_NAME,
    OPERATION_TYPE,
    SERVER_ADDRESS,
    SERVER_PORT,
    SYSTEM,
    Attributes,
    Instruments,
    Patches,
    block_may_carry_context,
    creation_link,
    merge_nested,
    traced_send,
)

__all__ = ("instrument_jetstream",)

_PRODUCER = SpanKind.PRODUCER
_CLIENT = SpanKind.CLIENT
_time_ns = time.time_ns

#: Set while an instrumented receive runs another one inside it (``next()`` runs a
#: fetch, an ordered fetch runs a plain one): the inner one makes no span.
_RECEIVING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "aioclients_telemetry_receiving", default=False
)


def _server(owner: object) -> Attributes:
    """``server.address`` / ``server.port`` of the connection behind ``owner`` (a
    JetStream context, or a handle or stream holding its request layer, ``_api``),
    empty when unknown."""
    nc: object
    if isinstance(owner, JetStream):
        nc = owner.nc
    else:
        nc = getattr(getattr(owner, "_api", None), "nc", None)
    url = getattr(nc, "connected_url", None)
    host = getattr(url, "hostname", None)
    if not host:
        return {}
    out: Attributes = {SERVER_ADDRESS: host}
    port = getattr(url, "port", None)
    if port:
        out[SERVER_PORT] = port
    return out


def _send_attributes(js: object, destination: str) -> Attributes:
    return {
        SYSTEM: "nats",
        OPERATION_TYPE: "send",
        OPERATION_NAME: "send",
        DESTINATION: destination,
        **_server(js),
    }


def _with_context(item: tuple[Any, ...], added: dict[str, str]) -> tuple[Any, ...]:
    """A batch message with the span's context in its headers, unless it has its own."""
    headers = item[2] if len(item) == 3 else None
    if isinstance(headers, Mapping):
        if "traceparent" in headers:
            return item
        return (item[0], item[1], {**headers, **added})
    if headers is not None:
        return item  # not a mapping: publish_batch says what is wrong
    return (item[0], item[1], added)


def _receive_attributes(owner: object, msg: Msg | None, *, group: bool = True) -> Attributes:
    attrs: Attributes = {SYSTEM: "nats", OPERATION_TYPE: "receive", OPERATION_NAME: "receive"}
    position = None if msg is None else _ack_position(msg)
    if position is not None:
        attrs[DESTINATION] = position[0]
        if group:
            attrs[CONSUMER_GROUP] = position[1]
    attrs.update(_server(owner))
    return attrs


# A regular JetStream ack subject: ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.
# <dseq>.<ts>.<pending>``, or with a domain and account hash in front (and tokens
# after). Read with these, ``(stream, consumer, stream sequence)`` costs a fraction of
# parsing all of ``msg.metadata`` (five integers and a datetime: some 5 us, more than
# the rest of a receive span's own work). What they match, the parse reads alike.
# A delivered message's reply is usually still the bytes on the wire (``Msg`` decodes
# it when read, an ack sends the bytes): the bytes patterns read it as it is, so that
# a span neither decodes it nor makes the ack encode it again.
_NUMBERS = r"\.[0-9]+\.(0|[1-9][0-9]*)\.[0-9]+\.[0-9]+\.[0-9]+"
_V1 = r"\$JS\.ACK\.([^.]+)\.([^.]+)" + _NUMBERS
_V2 = r"\$JS\.ACK\.[^.]*\.[^.]*\.([^.]+)\.([^.]+)" + _NUMBERS + r"(?:\.[^.]*)*"
_ACK_V1 = re.compile(_V1).fullmatch
_ACK_V2 = re.compile(_V2).fullmatch
_ACK_V1_BYTES = re.compile(_V1.encode()).fullmatch
_ACK_V2_BYTES = re.compile(_V2.encode()).fullmatch


def _ack_match(reply: str | bytes) -> re.Match[Any] | None:
    """The match of a regular ack subject (V1, else V2), read as it is: as text, or
    as the bytes on the wire. Its groups are ``(stream, consumer, stream sequence)``,
    as ``str`` or ``bytes`` like the reply (see :func:`_decoded`); None for anything
    else (then the full parse decides). The one place that picks the patterns."""
    if isinstance(reply, str):
        return _ACK_V1(reply) or _ACK_V2(reply)
    return _ACK_V1_BYTES(reply) or _ACK_V2_BYTES(reply)


@overload
def _decoded(token: str | bytes) -> str: ...
@overload
def _decoded(token: str | bytes | None) -> str | None: ...


def _decoded(token: str | bytes | None) -> str | None:
    """A token of an ack subject as ``Msg.reply`` would read it (None stays None):
    tokens of bytes are decoded as ``Msg.reply`` decodes the whole (a ``.`` is never
    part of a UTF-8 sequence, so token by token gives the same text)."""
    if token is None or isinstance(token, str):
        return token
    return token.decode("utf-8", "replace")


def _message_id(msg: Msg) -> str | None:
    """The stream sequence of a delivered message, its ``messaging.message.id``
    (None when its reply is no JetStream ack subject)."""
    if msg._metadata is None:
        match = _ack_match(msg._reply)
        if match is not None:
            seq: str | bytes = match[3]
            return _decoded(seq)
    try:
        return str(msg.metadata.sequence.stream)
    except AioClientsError:
        return None


def _ack_position(msg: Msg) -> tuple[str, str] | None:
    """``(stream, consumer)`` of a delivered message (None when it has none)."""
    if msg._metadata is None:
        match = _ack_match(msg._reply)
        if match is not None:
            return _decoded(match[1]), _decoded(match[2])
    try:
        metadata = msg.metadata
    except AioClientsError:
        return None
    return metadata.stream, metadata.consumer


def _message_link(msg: Msg) -> list[Link] | None:
    """The link to the creation context a message carries, looking at the raw
    header block first: a message with no headers, or with none the propagator
    reads, is neither decoded nor given to the propagator."""
    block = msg._header_block
    if block is None or not block_may_carry_context(block):
        return None
    return creation_link(msg.headers)


class _Nothing:
    pass


# A weak reference whose object is gone: calling it gives None, which no owner is.
_dead_ref: weakref.ref[Any] = weakref.ref(_Nothing())


class _Receiving:
    """What every receive span of one stream (consume, next) shares: its name, its
    attributes without the message id, and its entry in the consumed counter (a
    message adds 1 to ``consumed[1]``, no call)."""

    __slots__ = ("attrs", "consumed", "name")

    def __init__(self, attrs: Attributes, inst: Instruments) -> None:
        destination = attrs.get(DESTINATION)
        self.name = f"receive {destination}" if destination else "receive"
        self.attrs = attrs
        self.consumed = inst.consumed.entry(attrs, frozenset(attrs.items()))


class _Batch:
    """What one fetch has delivered so far: its receive span is made at the end."""

    __slots__ = ("attrs", "count", "links", "start")

    def __init__(self) -> None:
        self.start = _time_ns()
        self.count = 0
        self.links: list[Link] = []
        self.attrs: Attributes | None = None


def instrument_jetstream(inst: Instruments, patches: Patches) -> None:
    tracer_start = inst.start
    finish = inst.finish

    # -- send ----------------------------------------------------------------------

    def _acked(span: Any, ack: Any) -> None:
        span.set_attribute(MESSAGE_ID, str(ack.seq))

    def traced_publish(original: Any) -> Any:
        return traced_send(
            inst, original, attributes=_send_attributes, acked=_acked, deferred=False, nested=True
        )

    def traced_publish_async(original: Any) -> Any:
        return traced_send(
            inst, original, attributes=_send_attributes, acked=_acked, deferred=True, nested=True
        )

    def traced_kv(original: Any) -> Any:
        async def kv_write(self: KeyValue, key: str, *args: Any, **kwargs: Any) -> Any:
            if NESTED.get() is not None:
                return await original(self, key, *args, **kwargs)
            destination = self.stream.name
            attrs = _send_attributes(self, destination)
            start = _time_ns()
            span = tracer_start("send", destination, _PRODUCER, attrs, start_ns=start)
            added: dict[str, str] = {}
            propagate.inject(added, context=trace.set_span_in_context(span))
            token = NESTED.set(added)
            try:
                revision = await original(self, key, *args, **kwargs)
            except BaseException as exc:
                finish(span, attrs, start, exc, sent=1)
                raise
            finally:
                NESTED.reset(token)
            span.set_attribute(MESSAGE_ID, str(revision))
            finish(span, attrs, start, sent=1)
            return revision

        return kv_write

    def nested_api_publish(original: Any) -> Any:
        # KeyValue writes publish through the request layer, not the JetStream
        # facade: the context of kv_write's span goes into their headers here.
        async def publish(
            self: JetStreamApi, subject: str, payload: bytes, headers: Any, *args: Any
        ) -> Any:
            nested = NESTED.get()
            if nested is not None:
                headers = merge_nested(headers, nested)
            return await original(self, subject, payload, headers, *args)

        return publish

    def traced_publish_batch(original: Any) -> Any:
        async def publish_batch(self: JetStream, messages: Any, **options: Any) -> Any:
            if isinstance(messages, (str, bytes, bytearray, memoryview, Mapping)):
                return await original(self, messages, **options)  # its own error
            try:
                # As publish_batch itself: never read past one over the limit.
                items = list(itertools.islice(messages, MAX_BATCH_MESSAGES + 1))
            except TypeError:
                return await original(self, messages, **options)
            if not (0 < len(items) <= MAX_BATCH_MESSAGES) or not all(
                type(item) is tuple and len(item) in (2, 3) for item in items
            ):
                return await original(self, items, **options)  # refused, nothing sent
            count = len(items)
            subject = items[0][0] if isinstance(items[0][0], str) else ""
            attrs = _send_attributes(self, subject)
            start = _time_ns()
            span = tracer_start(
                "send", subject, _PRODUCER, {**attrs, BATCH_COUNT: count}, start_ns=start
            )
            added: dict[str, str] = {}
            propagate.inject(added, context=trace.set_span_in_context(span))
            if added:
                items = [_with_context(item, added) for item in items]
            try:
                ack = await original(self, items, **options)
            except BaseException as exc:
                finish(span, attrs, start, exc, sent=count)
                raise
            finish(span, attrs, start, sent=count)
            return ack

        return publish_batch

    patches.wrap(JetStream, "publish", traced_publish)
    patches.wrap(JetStream, "publish_batch", traced_publish_batch)

    def traced_counter_add(original: Any) -> Any:
        # An increment is a publish to the counter's subject; its answer is the
        # new total, not a stored sequence, so the span has no message id. No
        # context goes into the increment (the server keeps the counter's own).
        async def counter_add(self: JetStream, subject: str, *args: Any, **kwargs: Any) -> Any:
            if NESTED.get() is not None:
                return await original(self, subject, *args, **kwargs)
            attrs = _send_attributes(self, subject)
            start = _time_ns()
            span = tracer_start("send", subject, _PRODUCER, attrs, start_ns=start)
            try:
                total = await original(self, subject, *args, **kwargs)
            except BaseException as exc:
                finish(span, attrs, start, exc, sent=1)
                raise
            finish(span, attrs, start, sent=1)
            return total

        return counter_add

    patches.wrap(JetStream, "counter_add", traced_counter_add)
    # A schedule is a message stored on its subject: a send span like publish's,
    # whose context the messages the schedule produces carry too (they copy its
    # headers).
    patches.wrap(JetStream, "publish_schedule", traced_publish)
    patches.wrap(JetStream, "publish_async", traced_publish_async)
    patches.wrap(JetStreamApi, "publish", nested_api_publish)
    for name in ("put", "create", "update"):
        patches.wrap(KeyValue, name, traced_kv)

    # -- receive, one span per message ---------------------------------------------

    # per stream (or consumer): what its receive spans share; the last one used is
    # also kept aside (a weak reference to it and its entry), so that a consume loop
    # finds it with one call and one comparison
    receiving: weakref.WeakKeyDictionary[object, _Receiving] = weakref.WeakKeyDictionary()
    last: list[Any] = [_dead_ref, None]
    start_span = inst.start_span
    record = inst.record

    def receiving_of(owner: object, msg: Msg, group: bool) -> _Receiving:
        shared = receiving.get(owner)
        if shared is None:
            attrs = _receive_attributes(owner, msg, group=group)
            shared = receiving[owner] = _Receiving(attrs, inst)
        last[0] = weakref.ref(owner)
        last[1] = shared
        return shared

    def received(owner: object, msg: Msg, start: int, group: bool) -> None:
        # The hot path of a span per message: the SDK's start_span and end() are
        # most of its cost; around them only what differs per message is made.
        shared: _Receiving = last[1] if last[0]() is owner else receiving_of(owner, msg, group)
        attrs = shared.attrs.copy()
        seq = _message_id(msg)
        if seq is not None:
            attrs[MESSAGE_ID] = seq
        span = start_span(
            shared.name,
            # the current context, given: the SDK would look it up three times
            get_current(),
            _CLIENT,
            attrs,
            None if msg._header_block is None else _message_link(msg),
            start,
        )
        end = _time_ns()
        span.end(end)
        if record is not None:
            record((end - start) / 1e9, shared.attrs)
        shared.consumed[1] += 1

    def receive_failed(owner: object, start: int, error: BaseException) -> None:
        attrs = _receive_attributes(owner, None)
        span = tracer_start("receive", None, _CLIENT, attrs, start_ns=start)
        finish(span, attrs, start, error)

    def per_message(next_of: Callable[[], Any], owner: object, group: bool) -> Any:
        """``await next_of()`` with a receive span for the message it returns."""

        async def step() -> Msg:
            if _RECEIVING.get():
                msg: Msg = await next_of()
                return msg
            start = _time_ns()
            try:
                msg = await next_of()
            except (StopAsyncIteration, asyncio.CancelledError):
                raise
            except BaseException as exc:
                receive_failed(owner, start, exc)
                raise
            received(owner, msg, start, group)
            return msg

        return step

    def traced_anext(group: bool) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            async def __anext__(self: Any) -> Any:
                if _RECEIVING.get():
                    return await original(self)
                start = _time_ns()
                try:
                    msg = await original(self)
                except (StopAsyncIteration, asyncio.CancelledError):
                    raise
                except BaseException as exc:
                    receive_failed(self, start, exc)
                    raise
                received(self, msg, start, group)
                return msg

            return __anext__

        return make

    def traced_stream_anext(original: Any) -> Any:
        # consume()'s MessageStream: a buffered message (nearly every one) is taken
        # with the stream's own fast path, a plain call, with no coroutine of the
        # library's awaited inside this one
        async def __anext__(self: MessageStream) -> Msg:
            start = _time_ns()
            msg = self._take_buffered()
            if msg is None:
                if _RECEIVING.get():
                    nested: Msg = await original(self)
                    return nested
                try:
                    msg = await original(self)
                except (StopAsyncIteration, asyncio.CancelledError):
                    raise
                except BaseException as exc:
                    receive_failed(self, start, exc)
                    raise
            elif _RECEIVING.get():
                return msg
            received(self, msg, start, True)
            return msg

        return __anext__

    def traced_aiter(group: bool) -> Callable[[Any], Any]:
        """A bare ``async for`` (outside ``async with``) gets an iterator of the
        library's own that does not pass through ``__anext__``: wrap it."""

        def make(original: Any) -> Any:
            def __aiter__(self: Any) -> Any:
                iterator = original(self)
                if iterator is self:
                    return iterator
                return _PerMessage(iterator, self, group)

            return __aiter__

        return make

    class _PerMessage:
        __slots__ = ("_inner", "_step")

        def __init__(self, inner: AsyncIterator[Msg], owner: object, group: bool) -> None:
            self._inner = inner
            self._step = per_message(inner.__anext__, owner, group)

        def __aiter__(self) -> _PerMessage:
            return self

        async def __anext__(self) -> Msg:
            msg: Msg = await self._step()
            return msg

        async def aclose(self) -> None:
            close = getattr(self._inner, "aclose", None)
            if close is not None:
                await close()

    patches.wrap(MessageStream, "__anext__", traced_stream_anext)
    patches.wrap(MessageStream, "__aiter__", traced_aiter(True))
    # Ordered consumers replace their server-side consumer on every reset: its
    # name is no group.
    patches.wrap(OrderedMessageStream, "__anext__", traced_anext(False))
    patches.wrap(OrderedMessageStream, "__aiter__", traced_aiter(False))

    def traced_next(group: bool) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            async def next(self: Any, **options: Any) -> Msg:
                if _RECEIVING.get():
                    msg: Msg = await original(self, **options)
                    return msg
                start = _time_ns()
                token = _RECEIVING.set(True)
                try:
                    msg = await original(self, **options)
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:
                    receive_failed(self, start, exc)
                    raise
                finally:
                    _RECEIVING.reset(token)
                received(self, msg, start, group)
                return msg

            return next

        return make

    patches.wrap(Consumer, "next", traced_next(True))
    patches.wrap(OrderedConsumer, "next", traced_next(False))

    # -- receive, one span per fetch -----------------------------------------------

    batches: weakref.WeakKeyDictionary[object, _Batch] = weakref.WeakKeyDictionary()

    def batch_of(owner: object) -> _Batch:
        batch = batches.get(owner)
        if batch is None:
            batch = batches[owner] = _Batch()
        return batch

    def batch_add(batch: _Batch, owner: object, msg: Msg, group: bool) -> None:
        batch.count += 1
        if batch.attrs is None:
            batch.attrs = _receive_attributes(owner, msg, group=group)
        link = _message_link(msg)
        if link:
            seq = _message_id(msg)
            if seq is not None:
                link = [Link(link[0].context, {MESSAGE_ID: seq})]
            batch.links.extend(link)

    def batch_end(owner: object, error: BaseException | None) -> None:
        batch = batches.pop(owner, None)
        if batch is None:
            return
        attrs = batch.attrs or _receive_attributes(owner, None)
        span = tracer_start(
            "receive",
            attrs.get(DESTINATION),  # type: ignore[arg-type]
            _CLIENT,
            {**attrs, BATCH_COUNT: batch.count},
            links=batch.links or None,
            start_ns=batch.start,
        )
        finish(span, attrs, batch.start, error, consumed=batch.count)

    def batch_step(next_of: Callable[[], Any], owner: object, group: bool) -> Any:
        async def step() -> Msg:
            if _RECEIVING.get():
                msg: Msg = await next_of()
                return msg
            batch = batch_of(owner)
            token = _RECEIVING.set(True)
            try:
                msg = await next_of()
            except StopAsyncIteration:
                batch_end(owner, None)
                raise
            except BaseException as exc:
                batch_end(owner, exc)
                raise
            finally:
                _RECEIVING.reset(token)
            batch_add(batch, owner, msg, group)
            return msg

        return step

    def traced_fetch_anext(group: bool) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            async def __anext__(self: Any) -> Any:
                return await batch_step(partial(original, self), self, group)()

            return __anext__

        return make

    def traced_fetch_aiter(original: Any) -> Any:
        def __aiter__(self: Any) -> Any:
            iterator = original(self)
            if iterator is self:
                return iterator
            return _FetchIteration(iterator, self)

        return __aiter__

    class _FetchIteration:
        """A bare ``async for`` over a fetch: the span ends with the loop."""

        __slots__ = ("__weakref__", "_inner", "_owner", "_step")

        def __init__(self, inner: AsyncIterator[Msg], owner: object) -> None:
            self._inner = inner
            self._owner = owner
            self._step = batch_step(inner.__anext__, owner, True)

        def __aiter__(self) -> _FetchIteration:
            return self

        async def __anext__(self) -> Msg:
            msg: Msg = await self._step()
            return msg

        def __del__(self) -> None:
            batch_end(self._owner, None)

    def traced_fetch_aclose(original: Any) -> Any:
        async def aclose(self: Any) -> None:
            try:
                await original(self)
            finally:
                batch_end(self, None)

        return aclose

    patches.wrap(FetchResult, "__anext__", traced_fetch_anext(True))
    patches.wrap(FetchResult, "__aiter__", traced_fetch_aiter)
    patches.wrap(FetchResult, "aclose", traced_fetch_aclose)
    patches.wrap(OrderedFetch, "__anext__", traced_fetch_anext(False))
    patches.wrap(OrderedFetch, "aclose", traced_fetch_aclose)

    # -- settle --------------------------------------------------------------------

    # Per request layer (one per JetStream context): the server its connection was on
    # when the entries were made, and per (operation, stream, consumer) a settle span's
    # name and attributes (without the message id). A reconnect to another server
    # starts afresh.
    settling: weakref.WeakKeyDictionary[
        object, tuple[object, dict[tuple[str, str | None, str | None], tuple[str, Attributes]]]
    ] = weakref.WeakKeyDictionary()

    def settle_attributes(
        msg: Msg, operation: str, stream: str | None, consumer: str | None
    ) -> tuple[str, Attributes]:
        js = msg._api
        nc = getattr(js, "nc", None)
        url = getattr(nc, "connected_url", None)
        by_context = settling.get(js)
        if by_context is None or by_context[0] is not url:
            by_context = settling[js] = (url, {})
        entries = by_context[1]
        entry = entries.get((operation, stream, consumer))
        if entry is None:
            attrs: Attributes = {
                SYSTEM: "nats",
                OPERATION_TYPE: "settle",
                OPERATION_NAME: operation,
            }
            if stream is not None and consumer is not None:
                attrs[DESTINATION] = stream
                attrs[CONSUMER_GROUP] = consumer
            attrs.update(_server(msg))
            if len(entries) > 1024:
                entries.clear()
            entry = entries[(operation, stream, consumer)] = (
                f"{operation} {stream}" if stream else operation,
                attrs,
            )
        return entry

    def traced_settle(operation: str) -> Callable[[Any], Any]:
        # the last (context, server, stream, consumer) settled and its name and
        # attributes: an ack loop finds them with a few comparisons
        last: list[Any] = [_dead_ref, None, None, None, None]

        def make(original: Any) -> Any:
            async def settle(self: Msg, *args: Any, **kwargs: Any) -> None:
                # stream, consumer and message id from one reading of the ack subject
                # (as it came: the bytes on the wire are neither decoded here nor
                # encoded again by the ack; the names are decoded only when new)
                match = None if self._metadata is not None else _ack_match(self._reply)
                seq: str | None
                if match is not None:
                    stream, consumer, raw_seq = match.groups()
                    seq = _decoded(raw_seq)
                else:
                    position = _ack_position(self)
                    stream, consumer = (None, None) if position is None else position
                    seq = _message_id(self)
                js = self._api
                if (
                    last[0]() is js
                    and last[1] is getattr(getattr(js, "nc", None), "connected_url", None)
                    and last[2] == stream
                    and last[3] == consumer
                ):
                    name, attrs = last[4]
                else:
                    entry = settle_attributes(self, operation, _decoded(stream), _decoded(consumer))
                    name, attrs = entry
                    if js is not None:
                        last[:] = [
                            weakref.ref(js),
                            getattr(getattr(js, "nc", None), "connected_url", None),
                            stream,
                            consumer,
                            entry,
                        ]
                span_attrs = attrs.copy()
                if seq is not None:
                    span_attrs[MESSAGE_ID] = seq
                start = _time_ns()
                span = start_span(name, get_current(), _CLIENT, span_attrs, None, start)
                try:
                    await original(self, *args, **kwargs)
                except BaseException as exc:
                    finish(span, attrs, start, exc)
                    raise
                end = _time_ns()
                span.end(end)
                if record is not None:
                    record((end - start) / 1e9, attrs)

            return settle

        return make

    for name in ("ack", "ack_sync", "nak", "term"):
        patches.wrap(Msg, name, traced_settle(name))
