"""Spans and metrics of the NSQ client, added by wrapping its public methods.

- ``send`` (PRODUCER): ``publish`` and ``dpublish`` of ``Producer`` and
  ``HTTPProducer``; ``mpublish`` is one batch span (``messaging.batch.message_count``).
- ``receive`` (CLIENT): one per message ``Reader`` hands out to ``async for``.
- ``process`` (CONSUMER): one per message under ``Reader.run``, around the handler:
  the message's one span there (the library receives it for the handler, and the
  FIN it sends after a handler that returned is not a call of the user's). A
  plain handler's span ends when it returns; a coroutine handler's, when the
  coroutine does (no coroutine of ours around a plain one).
- ``settle`` (CLIENT): ``Message.finish`` and ``requeue`` called by the user, and
  the REQ ``run()`` sends after a handler that raised.

NSQ messages carry no headers, and bodies are never changed: there is no trace
context to propagate, so consumer spans have no link to the producer's.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from contextvars import Token
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind

from aioclients.nsq import HTTPProducer, Message, Producer, Reader
from aioclients.telemetry._common import (
    BATCH_COUNT,
    CONSUMER_GROUP,
    DESTINATION,
    MESSAGE_ID,
    OPERATION_NAME,
    OPERATION_TYPE,
    SERVER_ADDRESS,
    SERVER_PORT,
    SYSTEM,
    Attributes,
    Instruments,
    Patches,
    server_attributes,
)

__all__ = ("instrument_nsq",)

_time_ns = time.time_ns
_CLIENT = SpanKind.CLIENT
_CONSUMER = SpanKind.CONSUMER


class _Nothing:
    pass


# A weak reference whose object is gone: calling it gives None, which no Reader is.
_dead_ref: weakref.ref[Any] = weakref.ref(_Nothing())


class _ReaderAttributes:
    """What the spans of one Reader's messages from one nsqd share: the receive
    span's name and attributes (without the message id) and the consumed counter's
    key, and the names and attributes of the message's finish and requeue spans."""

    __slots__ = (
        "consumed",
        "finish",
        "finish_name",
        "receive",
        "receive_name",
        "requeue",
        "requeue_name",
    )

    def __init__(self, topic: str, base: Attributes, inst: Instruments) -> None:
        self.receive: Attributes = {OPERATION_TYPE: "receive", OPERATION_NAME: "receive", **base}
        # the consumed counter's [attributes, count]: a message adds 1, no call
        self.consumed = inst.consumed.entry(self.receive, frozenset(self.receive.items()))
        self.finish: Attributes = {OPERATION_TYPE: "settle", OPERATION_NAME: "finish", **base}
        self.requeue: Attributes = {OPERATION_TYPE: "settle", OPERATION_NAME: "requeue", **base}
        self.receive_name = f"receive {topic}" if topic else "receive"
        self.finish_name = f"finish {topic}" if topic else "finish"
        self.requeue_name = f"requeue {topic}" if topic else "requeue"


def _producer_server(producer: object) -> Attributes:
    address = getattr(producer, "address", None)
    if isinstance(address, str):
        return server_attributes(address)
    url = getattr(producer, "url", None)
    if isinstance(url, str):
        parts = urlsplit(url)
        out: Attributes = {}
        if parts.hostname:
            out[SERVER_ADDRESS] = parts.hostname
        if parts.port:
            out[SERVER_PORT] = parts.port
        return out
    return {}


def instrument_nsq(inst: Instruments, patches: Patches) -> None:
    start_span = inst.start
    finish = inst.finish
    servers: dict[str, Attributes] = {}

    def server_of(address: str) -> Attributes:
        attrs = servers.get(address)
        if attrs is None:
            if len(servers) > 1024:
                servers.clear()
            attrs = servers[address] = server_attributes(address)
        return attrs

    # -- send ----------------------------------------------------------------------

    def traced_send(operation_name: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            async def send(self: Any, topic: str, body: bytes, *args: Any, **kwargs: Any) -> None:
                attrs: Attributes = {
                    SYSTEM: "nsq",
                    OPERATION_TYPE: "send",
                    OPERATION_NAME: operation_name,
                    DESTINATION: topic,
                    **_producer_server(self),
                }
                start = _time_ns()
                span = start_span("send", topic, SpanKind.PRODUCER, attrs, start_ns=start)
                try:
                    await original(self, topic, body, *args, **kwargs)
                except BaseException as exc:
                    finish(span, attrs, start, exc, sent=1)
                    raise
                finish(span, attrs, start, sent=1)

            return send

        return make

    def traced_mpublish(original: Any) -> Any:
        async def mpublish(self: Any, topic: str, bodies: Iterable[bytes]) -> None:
            bodies = bodies if isinstance(bodies, (list, tuple)) else list(bodies)
            count = len(bodies)
            attrs: Attributes = {
                SYSTEM: "nsq",
                OPERATION_TYPE: "send",
                OPERATION_NAME: "send",
                DESTINATION: topic,
                **_producer_server(self),
            }
            start = _time_ns()
            span = start_span(
                "send", topic, SpanKind.PRODUCER, {**attrs, BATCH_COUNT: count}, start_ns=start
            )
            try:
                await original(self, topic, bodies)
            except BaseException as exc:
                finish(span, attrs, start, exc, sent=count)
                raise
            finish(span, attrs, start, sent=count)

        return mpublish

    for cls in (Producer, HTTPProducer):
        patches.wrap(cls, "publish", traced_send("send"))
        patches.wrap(cls, "dpublish", traced_send("send"))
        patches.wrap(cls, "mpublish", traced_mpublish)

    # -- receive -------------------------------------------------------------------

    # Per Reader and nsqd: the receive attributes, their counter key, and the
    # attributes of the message's finish and requeue.
    readers: weakref.WeakKeyDictionary[Reader, dict[str, _ReaderAttributes]] = (
        weakref.WeakKeyDictionary()
    )
    # A Message does not say (publicly) which Reader, topic and channel it came
    # from: its settle span finds them in the message's ``_telemetry`` slot, set when
    # the message is handed out (to ``async for`` or to run()'s handler). It lives
    # and goes with the message.

    def receive_attributes(reader: Reader, address: str) -> _ReaderAttributes:
        by_address = readers.get(reader)
        if by_address is None:
            by_address = readers[reader] = {}
        cached = by_address.get(address)
        if cached is None:
            base: Attributes = {
                SYSTEM: "nsq",
                DESTINATION: reader.topic,
                CONSUMER_GROUP: reader.channel,
                **server_of(address),
            }
            cached = by_address[address] = _ReaderAttributes(reader.topic, base, inst)
        last[0] = weakref.ref(reader)
        last[1] = address
        last[2] = cached
        return cached

    # the last (Reader, nsqd address) a message came from and its attributes: a
    # Reader's loop finds them with one call and two comparisons
    last: list[Any] = [_dead_ref, None, None]
    start_span_now = inst.start_span
    record = inst.record
    record_process = inst.record_process

    def failed(reader: Reader, start: int, exc: BaseException) -> None:
        attrs: Attributes = {
            SYSTEM: "nsq",
            OPERATION_TYPE: "receive",
            OPERATION_NAME: "receive",
            DESTINATION: reader.topic,
            CONSUMER_GROUP: reader.channel,
        }
        span = start_span("receive", reader.topic, SpanKind.CLIENT, attrs, start_ns=start)
        finish(span, attrs, start, exc)

    def traced_anext(original: Any) -> Any:
        async def __anext__(self: Reader) -> Message:
            start = _time_ns()
            # a queued message (nearly every one) is taken with the Reader's own
            # fast path, a plain call, with no coroutine of the library's awaited
            msg = self._take_queued()
            if msg is None:
                try:
                    msg = await original(self)
                except (StopAsyncIteration, asyncio.CancelledError):
                    raise
                except BaseException as exc:
                    failed(self, start, exc)
                    raise
            # The hot path: only the message id is made per message.
            address = msg.nsqd_address
            cached: _ReaderAttributes = (
                last[2]
                if last[1] == address and last[0]() is self
                else receive_attributes(self, address)
            )
            msg._telemetry = cached
            cached.consumed[1] += 1
            attrs = cached.receive.copy()
            attrs[MESSAGE_ID] = msg.id.decode("ascii", "replace")
            span = start_span_now(cached.receive_name, None, _CLIENT, attrs, None, start)
            end = _time_ns()
            span.end(end)
            if record is not None:
                record((end - start) / 1e9, cached.receive)
            return msg

        return __anext__

    patches.wrap(Reader, "__anext__", traced_anext)

    # -- process (Reader.run's handler) ---------------------------------------------

    # run()'s workers take their messages without __anext__ (no receive span: the
    # process span is the message's one span) and finish them without
    # Message.finish (that FIN is the library's, not the user's call: no settle
    # span; the process span's status says how the handler ended).
    set_span_in_context = trace.set_span_in_context
    attach = otel_context.attach
    detach = otel_context.detach

    def traced_run(original: Any) -> Any:
        async def run(
            self: Reader,
            handler: Callable[[Message], Awaitable[object] | object],
            *args: Any,
            **kwargs: Any,
        ) -> None:
            # per nsqd address: the settle attributes (and consumed counter) of
            # async for's messages, and the process span's attributes
            by_address: dict[str, tuple[_ReaderAttributes, Attributes, str]] = {}

            def attributes_of(address: str) -> tuple[_ReaderAttributes, Attributes, str]:
                if len(by_address) > 1024:
                    by_address.clear()
                cached = receive_attributes(self, address)
                attrs: Attributes = {
                    SYSTEM: "nsq",
                    OPERATION_TYPE: "process",
                    OPERATION_NAME: "process",
                    DESTINATION: self.topic,
                    CONSUMER_GROUP: self.channel,
                    **server_of(address),
                }
                name = f"process {self.topic}" if self.topic else "process"
                entry = by_address[address] = (cached, attrs, name)
                return entry

            def ended(span: Any, attrs: Attributes, start: int, token: Token[Context]) -> None:
                detach(token)
                end = _time_ns()
                span.end(end)
                if record_process is not None:
                    record_process((end - start) / 1e9, attrs)

            async def awaited(
                result: Awaitable[object],
                span: Any,
                attrs: Attributes,
                start: int,
                token: Token[Context],
            ) -> object:
                try:
                    value = await result
                except BaseException as exc:
                    detach(token)
                    finish(span, attrs, start, exc, process=True)
                    raise
                ended(span, attrs, start, token)
                return value

            def traced_handler(msg: Message) -> object:
                address = msg.nsqd_address
                entry = by_address.get(address)
                if entry is None:
                    entry = attributes_of(address)
                cached, attrs, name = entry
                msg._telemetry = cached  # for the settle span of the user's own answer
                cached.consumed[1] += 1
                span_attrs = attrs.copy()
                span_attrs[MESSAGE_ID] = msg.id.decode("ascii", "replace")
                start = _time_ns()
                span = start_span_now(name, None, _CONSUMER, span_attrs, None, start)
                token = attach(set_span_in_context(span))
                try:
                    result = handler(msg)
                except BaseException as exc:
                    detach(token)
                    finish(span, attrs, start, exc, process=True)
                    raise
                if inspect.isawaitable(result):
                    # the span stays current in the handler's coroutine, and ends
                    # when it does (a plain handler's ends here, with no coroutine)
                    return awaited(result, span, attrs, start, token)
                ended(span, attrs, start, token)
                return result

            await original(self, traced_handler, *args, **kwargs)

        return run

    patches.wrap(Reader, "run", traced_run)

    # -- settle --------------------------------------------------------------------

    def traced_settle(operation: str) -> Callable[[Any], Any]:
        is_finish = operation == "finish"

        def make(original: Any) -> Any:
            async def settle(self: Message, *args: Any, **kwargs: Any) -> None:
                # a message answered already no longer says where it came from
                cached: _ReaderAttributes | None = (
                    None if self._responded else getattr(self, "_telemetry", None)
                )
                if cached is None:  # handed out before instrument(), or answered
                    name = operation
                    attrs: Attributes = {
                        SYSTEM: "nsq",
                        OPERATION_TYPE: "settle",
                        OPERATION_NAME: operation,
                        **server_of(self.nsqd_address),
                    }
                elif is_finish:
                    name, attrs = cached.finish_name, cached.finish
                else:
                    name, attrs = cached.requeue_name, cached.requeue
                span_attrs = attrs.copy()
                span_attrs[MESSAGE_ID] = self.id.decode("ascii", "replace")
                start = _time_ns()
                span = start_span_now(name, None, _CLIENT, span_attrs, None, start)
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

    patches.wrap(Message, "finish", traced_settle("finish"))
    patches.wrap(Message, "requeue", traced_settle("requeue"))
