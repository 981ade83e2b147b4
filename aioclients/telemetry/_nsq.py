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
from typing import Any
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


def _topic_of(msg: Message) -> str | None:
    # The Message knows its Reader only privately; the name may move, so look
    # it up defensively (the span then goes without a destination).
    topic = getattr(getattr(msg, "_reader", None), "topic", None)
    return topic if isinstance(topic, str) else None


def _channel_of(msg: Message) -> str | None:
    channel = getattr(getattr(msg, "_reader", None), "channel", None)
    return channel if isinstance(channel, str) else None


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

    # per Reader and nsqd: the receive attributes and their counter key
    readers: weakref.WeakKeyDictionary[Reader, dict[str, tuple[Attributes, Any]]] = (
        weakref.WeakKeyDictionary()
    )

    def receive_attributes(reader: Reader, address: str) -> tuple[Attributes, Any]:
        by_address = readers.get(reader)
        if by_address is None:
            by_address = readers[reader] = {}
        cached = by_address.get(address)
        if cached is None:
            attrs: Attributes = {
                SYSTEM: "nsq",
                OPERATION_TYPE: "receive",
                OPERATION_NAME: "receive",
                DESTINATION: reader.topic,
                CONSUMER_GROUP: reader.channel,
                **server_of(address),
            }
            cached = by_address[address] = (attrs, frozenset(attrs.items()))
        return cached

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
            attrs, key = receive_attributes(self, msg.nsqd_address)
            span = start_span(
                "receive",
                self.topic,
                SpanKind.CLIENT,
                {**attrs, MESSAGE_ID: msg.id.decode("ascii", "replace")},
                start_ns=start,
            )
            finish(span, attrs, start, consumed=1, key=key)
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
                topic = _topic_of(self)
                attrs: Attributes = {
                    SYSTEM: "nsq",
                    OPERATION_TYPE: "settle",
                    OPERATION_NAME: operation,
                    **server_of(self.nsqd_address),
                }
                if topic is not None:
                    attrs[DESTINATION] = topic
                channel = _channel_of(self)
                if channel is not None:
                    attrs[CONSUMER_GROUP] = channel
                start = _time_ns()
                span = start_span(
                    operation,
                    topic,
                    SpanKind.CLIENT,
                    {**attrs, MESSAGE_ID: self.id.decode("ascii", "replace")},
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

    patches.wrap(Message, "finish", traced_settle("finish"))
    patches.wrap(Message, "requeue", traced_settle("requeue"))
