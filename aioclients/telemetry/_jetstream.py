"""Spans and metrics of the JetStream client, added by wrapping its public methods.

- ``send`` (PRODUCER): ``JetStream.publish``, ``publish_async`` (the span lasts until
  the ack arrives or fails), ``KeyValue.put`` / ``create`` / ``update``. The span's
  context goes into the message's headers through the global propagator.
  ``publish_batch`` (ADR-50) is not in this version; when it lands it is wrapped
  here as one ``send`` span with ``messaging.batch.message_count``, its context
  added to every message's headers (as NSQ's ``mpublish`` in ``_nsq.py``).
- ``receive`` (CLIENT): one per message of ``consume()`` (``MessageStream``,
  ``OrderedMessageStream``) and of ``next()``; one per ``fetch()`` batch
  (``FetchResult``, ``OrderedFetch``), linked to each message's creation context.
- ``settle`` (CLIENT): ``Msg.ack``, ``ack_sync``, ``nak``, ``term``.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import weakref
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

from opentelemetry import propagate, trace
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
    creation_link,
    inject_into,
    merge_nested,
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
    JetStream context, or an object holding one), empty when unknown."""
    js = owner if isinstance(owner, JetStream) else getattr(owner, "_js", None)
    if not isinstance(js, JetStream):
        return {}
    url = getattr(js.nc, "connected_url", None)
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


def _receive_attributes(owner: object, msg: Msg | None, *, group: bool = True) -> Attributes:
    attrs: Attributes = {SYSTEM: "nats", OPERATION_TYPE: "receive", OPERATION_NAME: "receive"}
    if msg is not None:
        try:
            metadata = msg.metadata
        except AioClientsError:
            pass
        else:
            attrs[DESTINATION] = metadata.stream
            if group:
                attrs[CONSUMER_GROUP] = metadata.consumer
    attrs.update(_server(owner))
    return attrs


def _message_id(msg: Msg) -> str | None:
    try:
        return str(msg.metadata.sequence.stream)
    except AioClientsError:
        return None


def _with_id(attrs: Attributes, msg: Msg) -> Attributes:
    seq = _message_id(msg)
    return attrs if seq is None else {**attrs, MESSAGE_ID: seq}


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

    def traced_publish(original: Any) -> Any:
        async def publish(
            self: JetStream,
            subject: str,
            payload: bytes = b"",
            *,
            headers: Any = None,
            **options: Any,
        ) -> Any:
            nested = NESTED.get()
            if nested is not None:
                return await original(
                    self, subject, payload, headers=merge_nested(headers, nested), **options
                )
            attrs = _send_attributes(self, subject)
            start = _time_ns()
            span = tracer_start("send", subject, _PRODUCER, attrs, start_ns=start)
            headers, added = inject_into(headers, span)
            token = NESTED.set(added)
            try:
                ack = await original(self, subject, payload, headers=headers, **options)
            except BaseException as exc:
                finish(span, attrs, start, exc, sent=1)
                raise
            finally:
                NESTED.reset(token)
            span.set_attribute(MESSAGE_ID, str(ack.seq))
            finish(span, attrs, start, sent=1)
            return ack

        return publish

    def traced_publish_async(original: Any) -> Any:
        async def publish_async(
            self: JetStream,
            subject: str,
            payload: bytes = b"",
            *,
            headers: Any = None,
            **options: Any,
        ) -> Any:
            nested = NESTED.get()
            if nested is not None:
                return await original(
                    self, subject, payload, headers=merge_nested(headers, nested), **options
                )
            attrs = _send_attributes(self, subject)
            start = _time_ns()
            span = tracer_start("send", subject, _PRODUCER, attrs, start_ns=start)
            headers, _ = inject_into(headers, span)
            try:
                future = await original(self, subject, payload, headers=headers, **options)
            except BaseException as exc:
                finish(span, attrs, start, exc, sent=1)
                raise
            future.add_done_callback(partial(_acked, span, attrs, start))
            return future

        return publish_async

    def _acked(span: Any, attrs: Attributes, start: int, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            finish(span, attrs, start, asyncio.CancelledError(), sent=1)
            return
        error = future.exception()
        if error is None:
            span.set_attribute(MESSAGE_ID, str(future.result().seq))
        finish(span, attrs, start, error, sent=1)

    def traced_kv(original: Any) -> Any:
        async def kv_write(self: KeyValue, key: str, *args: Any, **kwargs: Any) -> Any:
            if NESTED.get() is not None:
                return await original(self, key, *args, **kwargs)
            destination = self.stream.name
            attrs = _send_attributes(getattr(self, "_js", None), destination)
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

    patches.wrap(JetStream, "publish", traced_publish)
    patches.wrap(JetStream, "publish_async", traced_publish_async)
    for name in ("put", "create", "update"):
        patches.wrap(KeyValue, name, traced_kv)

    # -- receive, one span per message ---------------------------------------------

    # per stream (or consumer): the receive attributes and their counter key
    stream_attrs: weakref.WeakKeyDictionary[object, tuple[Attributes, Any]] = (
        weakref.WeakKeyDictionary()
    )

    def received(owner: object, msg: Msg, start: int, *, group: bool = True) -> None:
        cached = stream_attrs.get(owner)
        if cached is None:
            attrs = _receive_attributes(owner, msg, group=group)
            cached = stream_attrs[owner] = (attrs, frozenset(attrs.items()))
        attrs, key = cached
        span = tracer_start(
            "receive",
            attrs.get(DESTINATION),  # type: ignore[arg-type]
            _CLIENT,
            _with_id(attrs, msg),
            links=creation_link(msg.headers),
            start_ns=start,
        )
        finish(span, attrs, start, consumed=1, key=key)

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
            received(owner, msg, start, group=group)
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
                received(self, msg, start, group=group)
                return msg

            return __anext__

        return make

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

    patches.wrap(MessageStream, "__anext__", traced_anext(True))
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
                received(self, msg, start, group=group)
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
        link = creation_link(msg.headers)
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

    def traced_settle(operation: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            async def settle(self: Msg, *args: Any, **kwargs: Any) -> None:
                attrs: Attributes = {
                    SYSTEM: "nats",
                    OPERATION_TYPE: "settle",
                    OPERATION_NAME: operation,
                }
                try:
                    metadata = self.metadata
                except AioClientsError:
                    seq = None
                else:
                    attrs[DESTINATION] = metadata.stream
                    attrs[CONSUMER_GROUP] = metadata.consumer
                    seq = str(metadata.sequence.stream)
                attrs.update(_server(self))
                span_attrs = attrs if seq is None else {**attrs, MESSAGE_ID: seq}
                start = _time_ns()
                span = tracer_start(
                    operation,
                    attrs.get(DESTINATION),  # type: ignore[arg-type]
                    _CLIENT,
                    span_attrs,
                    start_ns=start,
                )
                try:
                    await original(self, *args, **kwargs)
                except BaseException as exc:
                    finish(span, attrs, start, exc)
                    raise
                finish(span, attrs, start)

            return settle

        return make

    for name in ("ack", "ack_sync", "nak", "term"):
        patches.wrap(Msg, name, traced_settle(name))
