"""Spans and metrics of the NSQ client, added by wrapping its public methods.

- ``send`` (PRODUCER): ``publish`` and ``dpublish`` of ``Producer`` and
  ``HTTPProducer``; ``mpublish`` is one batch span (``messaging.batch.message_count``).
- ``receive`` (CLIENT): one per message ``Reader`` hands out (``async for``, and
  under ``run()``).
- ``process`` (CONSUMER): the handler of ``Reader.run``, per message.
- ``settle`` (CLIENT): ``Message.finish`` and ``requeue``.

NSQ messages carry no headers, and bodies are never changed: there is no trace
context to propagate, so consumer spans have no link to the producer's.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
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
_HANDED_OUT_LIMIT = 1 << 16


class _ReaderAttributes(NamedTuple):
    receive: Attributes
    key: Any  # frozenset(receive.items()): the consumed counter's key
    finish: Attributes
    requeue: Attributes


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
    # from: its settle span finds them here, by (message id, nsqd address), an
    # entry made when the message was handed out and dropped when it is answered.
    # Bounded: a message never answered (nsqd re-queues it) ages out.
    handed_out: dict[tuple[bytes, str], _ReaderAttributes] = {}

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
            attrs = {OPERATION_TYPE: "receive", OPERATION_NAME: "receive", **base}
            cached = by_address[address] = _ReaderAttributes(
                attrs,
                frozenset(attrs.items()),
                {OPERATION_TYPE: "settle", OPERATION_NAME: "finish", **base},
                {OPERATION_TYPE: "settle", OPERATION_NAME: "requeue", **base},
            )
        return cached

    def hand_out(msg: Message, cached: _ReaderAttributes) -> None:
        if len(handed_out) >= _HANDED_OUT_LIMIT:
            del handed_out[next(iter(handed_out))]  # the oldest
        handed_out[(msg.id, msg.nsqd_address)] = cached

    def traced_anext(original: Any) -> Any:
        async def __anext__(self: Reader) -> Message:
            start = _time_ns()
            try:
                msg: Message = await original(self)
            except (StopAsyncIteration, asyncio.CancelledError):
                raise
            except BaseException as exc:
                attrs: Attributes = {
                    SYSTEM: "nsq",
                    OPERATION_TYPE: "receive",
                    OPERATION_NAME: "receive",
                    DESTINATION: self.topic,
                    CONSUMER_GROUP: self.channel,
                }
                span = start_span("receive", self.topic, SpanKind.CLIENT, attrs, start_ns=start)
                finish(span, attrs, start, exc)
                raise
            cached = receive_attributes(self, msg.nsqd_address)
            hand_out(msg, cached)
            attrs = cached.receive
            span = start_span(
                "receive",
                self.topic,
                SpanKind.CLIENT,
                {**attrs, MESSAGE_ID: msg.id.decode("ascii", "replace")},
                start_ns=start,
            )
            finish(span, attrs, start, consumed=1, key=cached.key)
            return msg

        return __anext__

    patches.wrap(Reader, "__anext__", traced_anext)

    # -- process (Reader.run's handler) ---------------------------------------------

    def traced_run(original: Any) -> Any:
        async def run(
            self: Reader,
            handler: Callable[[Message], Awaitable[object] | object],
            *args: Any,
            **kwargs: Any,
        ) -> None:
            topic = self.topic
            base: Attributes = {
                SYSTEM: "nsq",
                OPERATION_TYPE: "process",
                OPERATION_NAME: "process",
                DESTINATION: topic,
                CONSUMER_GROUP: self.channel,
            }

            async def traced_handler(msg: Message) -> object:
                attrs = {**base, **server_of(msg.nsqd_address)}
                start = _time_ns()
                span = start_span(
                    "process",
                    topic,
                    SpanKind.CONSUMER,
                    {**attrs, MESSAGE_ID: msg.id.decode("ascii", "replace")},
                    start_ns=start,
                )
                token = otel_context.attach(trace.set_span_in_context(span))
                try:
                    result = handler(msg)
                    if inspect.isawaitable(result):
                        result = await result
                except BaseException as exc:
                    otel_context.detach(token)
                    finish(span, attrs, start, exc)
                    raise
                otel_context.detach(token)
                finish(span, attrs, start)
                return result

            await original(self, traced_handler, *args, **kwargs)

        return run

    patches.wrap(Reader, "run", traced_run)

    # -- settle --------------------------------------------------------------------

    def traced_settle(operation: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            async def settle(self: Message, *args: Any, **kwargs: Any) -> None:
                cached = handed_out.pop((self.id, self.nsqd_address), None)
                if cached is None:  # handed out before instrument(), or aged out
                    attrs: Attributes = {
                        SYSTEM: "nsq",
                        OPERATION_TYPE: "settle",
                        OPERATION_NAME: operation,
                        **server_of(self.nsqd_address),
                    }
                else:
                    attrs = cached.finish if operation == "finish" else cached.requeue
                topic = attrs.get(DESTINATION)
                start = _time_ns()
                span = start_span(
                    operation,
                    topic if isinstance(topic, str) else None,
                    SpanKind.CLIENT,
                    {**attrs, MESSAGE_ID: self.id.decode("ascii", "replace")},
                    start_ns=start,
                )
                try:
                    await original(self, *args, **kwargs)
                except BaseException as exc:
                    if cached is not None and not self.has_responded:
                        handed_out[(self.id, self.nsqd_address)] = cached  # may try again
                    finish(span, attrs, start, exc)
                    raise
                finish(span, attrs, start)

            return settle

        return make

    patches.wrap(Message, "finish", traced_settle("finish"))
    patches.wrap(Message, "requeue", traced_settle("requeue"))
