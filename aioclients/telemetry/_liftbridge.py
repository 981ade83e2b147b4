"""Spans and metrics of the Liftbridge client, added by wrapping its public methods.

- ``send`` (PRODUCER): ``Client.publish``, ``publish_async`` (the span lasts until
  the ack arrives or fails) and ``publish_to_subject``; the span's context goes
  into the message's headers (``dict[str, bytes]``) through the global propagator.
- ``receive`` (CLIENT): one per message of a ``Subscription`` and of a
  ``GroupConsumer`` (whose own subscriptions read ahead into its buffer and make
  no span: a message counts when the application takes it), linked to the
  message's creation context.

Liftbridge has no per-message settlement (a group commits cursors), so no
``settle`` spans. The broker a call reaches is chosen inside the client, so the
spans carry no ``server.address``.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import weakref
from typing import Any

from opentelemetry.context import get_current
from opentelemetry.trace import SpanKind

from aioclients.liftbridge import Client, GroupConsumer, Message, Subscription
from aioclients.telemetry._common import (
    CONSUMER_GROUP,
    DESTINATION,
    DESTINATION_PARTITION,
    MESSAGE_ID,
    OPERATION_NAME,
    OPERATION_TYPE,
    SYSTEM,
    Attributes,
    Instruments,
    Patches,
    creation_link,
    traced_send,
)

__all__ = ("instrument_liftbridge",)

_time_ns = time.time_ns

#: True in the tasks a GroupConsumer starts: their reads fill its buffer ahead of
#: the application and make no receive span.
_READ_AHEAD: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "aioclients_telemetry_read_ahead", default=False
)


def _send_attributes(_client: object, destination: str) -> Attributes:
    return {
        SYSTEM: "liftbridge",
        OPERATION_TYPE: "send",
        OPERATION_NAME: "send",
        DESTINATION: destination,
    }


def _acked(span: Any, ack: Any) -> None:
    if ack is None:  # AckPolicy.NONE
        return
    span.set_attribute(MESSAGE_ID, str(ack.offset))
    if ack.partition is not None:
        span.set_attribute(DESTINATION_PARTITION, str(ack.partition))


def instrument_liftbridge(inst: Instruments, patches: Patches) -> None:
    start_span = inst.start
    finish = inst.finish

    # -- send ----------------------------------------------------------------------

    def traced_publish(original: Any) -> Any:
        return traced_send(
            inst, original, attributes=_send_attributes, acked=_acked, deferred=False, as_bytes=True
        )

    def traced_publish_async(original: Any) -> Any:
        return traced_send(
            inst, original, attributes=_send_attributes, acked=_acked, deferred=True, as_bytes=True
        )

    patches.wrap(Client, "publish", traced_publish)
    patches.wrap(Client, "publish_async", traced_publish_async)
    patches.wrap(Client, "publish_to_subject", traced_publish)

    # -- receive -------------------------------------------------------------------

    start_span_now = inst.start_span
    record = inst.record
    consumed = inst.consumed

    class _Receiving:
        """What the receive spans of one subscription (or of one group's stream)
        share: their name, attributes without the per-message ones, and their entry
        in the consumed counter (a message adds 1 to ``consumed[1]``, no call)."""

        __slots__ = ("attrs", "consumed", "name")

        def __init__(self, attrs: Attributes) -> None:
            destination = attrs.get(DESTINATION)
            self.name = f"receive {destination}" if destination else "receive"
            self.attrs = attrs
            self.consumed = consumed.entry(attrs, frozenset(attrs.items()))

    def received(shared: _Receiving, msg: Message, start: int) -> None:
        attrs = shared.attrs.copy()
        fields = msg._pb
        attrs[DESTINATION_PARTITION] = str(fields.partition)
        attrs[MESSAGE_ID] = str(fields.offset)
        # the headers are copied (Message.headers) only when there are any
        span = start_span_now(
            shared.name,
            # the current context, given: the SDK would look it up three times
            get_current(),
            SpanKind.CLIENT,
            attrs,
            creation_link(msg.headers) if fields.headers else None,
            start,
        )
        end = _time_ns()
        span.end(end)
        if record is not None:
            record((end - start) / 1e9, shared.attrs)
        shared.consumed[1] += 1

    def failed(attrs: Attributes, destination: str | None, start: int, exc: BaseException) -> None:
        span = start_span("receive", destination, SpanKind.CLIENT, attrs, start_ns=start)
        finish(span, attrs, start, exc)

    def _receive_attributes(stream: str | None, group: str | None) -> Attributes:
        attrs: Attributes = {
            SYSTEM: "liftbridge",
            OPERATION_TYPE: "receive",
            OPERATION_NAME: "receive",
        }
        if stream is not None:
            attrs[DESTINATION] = stream
        if group is not None:
            attrs[CONSUMER_GROUP] = group
        return attrs

    # per subscription; per group consumer and stream
    by_subscription: weakref.WeakKeyDictionary[Subscription, _Receiving] = (
        weakref.WeakKeyDictionary()
    )
    by_group: weakref.WeakKeyDictionary[GroupConsumer, dict[str, _Receiving]] = (
        weakref.WeakKeyDictionary()
    )

    def traced_subscription_anext(original: Any) -> Any:
        async def __anext__(self: Subscription) -> Message:
            if _READ_AHEAD.get():
                msg: Message = await original(self)
                return msg
            start = _time_ns()
            try:
                msg = await original(self)
            except (StopAsyncIteration, asyncio.CancelledError):
                raise
            except BaseException as exc:
                failed(_receive_attributes(self.stream, None), self.stream, start, exc)
                raise
            shared = by_subscription.get(self)
            if shared is None:
                shared = by_subscription[self] = _Receiving(_receive_attributes(self.stream, None))
            received(shared, msg, start)
            return msg

        return __anext__

    def traced_group_anext(original: Any) -> Any:
        async def __anext__(self: GroupConsumer) -> Message:
            start = _time_ns()
            try:
                msg: Message = await original(self)
            except (StopAsyncIteration, asyncio.CancelledError):
                raise
            except BaseException as exc:
                failed(_receive_attributes(None, self.group_id), None, start, exc)
                raise
            streams = by_group.get(self)
            if streams is None:
                streams = by_group[self] = {}
            shared = streams.get(msg.stream)
            if shared is None:
                shared = streams[msg.stream] = _Receiving(
                    _receive_attributes(msg.stream, self.group_id)
                )
            received(shared, msg, start)
            return msg

        return __anext__

    def traced_group_aenter(original: Any) -> Any:
        # The tasks that read ahead are started in here (and by a task started
        # in here): they inherit the flag, the caller's context gets it back unset.
        async def __aenter__(self: GroupConsumer) -> GroupConsumer:
            token = _READ_AHEAD.set(True)
            try:
                result: GroupConsumer = await original(self)
            finally:
                _READ_AHEAD.reset(token)
            return result

        return __aenter__

    patches.wrap(Subscription, "__anext__", traced_subscription_anext)
    patches.wrap(GroupConsumer, "__anext__", traced_group_anext)
    patches.wrap(GroupConsumer, "__aenter__", traced_group_aenter)
