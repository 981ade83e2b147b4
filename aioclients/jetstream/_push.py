"""Push consumers (nats.go ``CreatePushConsumer``): the handle and its driver.

:class:`PushMessageStream` is a :class:`~aioclients.jetstream._consume.MessageStream`
(the same iteration, ``stop``/``drain``/``aclose``, reconnect check and events)
whose state is a :class:`~aioclients.jetstream._protocol._push.PushFlow` instead
of a pull buffer: it subscribes to the consumer's deliver subject (in its
deliver group, if any) and pulls nothing. The core decides when a flow-control
request is answered (at once while the buffer has room, else once the user has
taken it down to half) and when a heartbeat was missed; this module parses the
statuses, publishes the replies and wakes the iterator.

Hot path: as on pull, a user message becomes a ``Msg`` appended to a deque, and
the core hears of messages received and taken in batches (before a status, a
timer, or once the takes reach the core's credit).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from aioclients._errors import AioClientsError, InvalidArgumentError
from aioclients.jetstream._api import JetStreamApi
from aioclients.jetstream._consume import (
    ConsumeEvent,
    ConsumeStatistics,
    MessageStream,
    check_on_event,
)
from aioclients.jetstream._control import pause_consumer, reset_consumer, resume_consumer
from aioclients.jetstream._errors import (
    ConsumerDeletedError,
    ConsumerNotFoundError,
    JetStreamClosedError,
    JetStreamError,
    StreamNotFoundError,
)
from aioclients.jetstream._message import Msg
from aioclients.jetstream._models import ConsumerInfo, ConsumerPause
from aioclients.jetstream._protocol._headers import decode_headers
from aioclients.jetstream._protocol._names import (
    validate_consumer_name,
    validate_publish_subject,
)
from aioclients.jetstream._protocol._pull import HeartbeatMissed, Terminated, consume_options
from aioclients.jetstream._protocol._push import (
    FlowControlReply,
    PushFlow,
    PushOptions,
    push_options,
)

__all__ = (
    "DEFAULT_PUSH_IDLE_HEARTBEAT",
    "PushConsumer",
    "PushMessageStream",
    "push_consumer_of",
    "upsert_push_consumer",
)

log = logging.getLogger("aioclients.jetstream.push")

#: The idle heartbeat a push consumer gets unless given one (seconds); it comes
#: with flow control, which needs it.
DEFAULT_PUSH_IDLE_HEARTBEAT = 5.0


class PushConsumer:
    """A JetStream push consumer: the server sends its messages to
    ``deliver_subject``. Obtain one from ``JetStream.create_push_consumer`` or
    ``JetStream.push_consumer``; read it with :meth:`consume`."""

    def __init__(self, api: JetStreamApi, stream_name: str, name: str, info: ConsumerInfo) -> None:
        self._api = api
        self.stream_name = stream_name
        self.name = name
        self.cached_info = info
        # The consume() subscribed now (without a deliver group, a second one
        # would receive every message again, so it is refused).
        self._consuming: PushMessageStream | None = None

    def __repr__(self) -> str:
        return f"<PushConsumer {self.stream_name}/{self.name} -> {self.deliver_subject}>"

    @property
    def deliver_subject(self) -> str:
        """Where the server sends the messages."""
        return str(self.cached_info.config.get("deliver_subject") or "")

    @property
    def deliver_group(self) -> str | None:
        """The queue group the subscribers join (``None``: none)."""
        group = self.cached_info.config.get("deliver_group")
        return str(group) if group else None

    async def info(self) -> ConsumerInfo:
        """Fetch fresh info (also stored in ``cached_info``).

        Raises:
            ConsumerNotFoundError: the consumer is gone.
        """
        self.cached_info = await self._api.consumer_info(self.stream_name, self.name)
        return self.cached_info

    async def delete(self) -> None:
        """Delete this consumer (raises ``ConsumerNotFoundError`` if gone already)."""
        await self._api.delete_consumer(self.stream_name, self.name)

    async def pause(self, until: datetime) -> ConsumerPause:
        """Pause until ``until`` (aware datetime; nats-server 2.11+)."""
        return await pause_consumer(self._api, self.stream_name, self.name, until)

    async def resume(self) -> ConsumerPause:
        """End a pause now."""
        return await resume_consumer(self._api, self.stream_name, self.name)

    async def reset(self, *, seq: int | None = None) -> ConsumerInfo:
        """Deliver again from the ack floor + 1, or from ``seq`` (nats-server 2.14+)."""
        self.cached_info = await reset_consumer(self._api, self.stream_name, self.name, seq)
        return self.cached_info

    def consume(
        self,
        *,
        on_event: Callable[[ConsumeEvent], object] | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
    ) -> PushMessageStream:
        """Receive the pushed messages through a bounded buffer.

        ``async with consumer.consume() as messages: async for msg in messages``.

        Args:
            on_event: a plain callable receiving ``HeartbeatMissed`` (no message
                within twice the consumer's ``idle_heartbeat``), ``StatusWarning``
                (e.g. 409 Leadership Change), ``Disconnected`` and ``Reconnected``.
            max_messages: the buffer's size in messages (default 1000): while it
                is full, flow-control requests wait, and the server stops sending.
            max_bytes: the buffer's size in bytes as well (default: no limit).

        With flow control (the default) the server stops once its window (2 to
        32 MiB) is unanswered. Without it only ``max_ack_pending`` bounds what
        the server sends; messages beyond four buffers (or ``max_ack_pending``)
        are dropped and, with acks on, redelivered after ``ack_wait``.

        Raises:
            InvalidArgumentError: bad options.
            ConsumerDeletedError: while iterating, when the consumer is deleted.
        """
        check_on_event(on_event)
        config = self.cached_info.config
        acks = config.get("ack_policy", "explicit") != "none"
        options = push_options(
            max_messages=max_messages,
            max_bytes=max_bytes,
            # A deliver group's heartbeats go to one member at random.
            idle_heartbeat=None if self.deliver_group else config.get("idle_heartbeat"),
            max_ack_pending=config.get("max_ack_pending") if acks else None,
            flow_control=bool(config.get("flow_control")),
        )
        return PushMessageStream(self._api, self, options, on_event)


class PushMessageStream(MessageStream):
    """The messages of a push consumer's ``consume()``: a ``MessageStream``
    over the deliver subject, with flow control answered and heartbeats checked."""

    _kind = "push consumer"
    _on_missed_heartbeat = "checking that the consumer still exists"
    # No grants to the iterator's fast path: the overflow check of each delivery
    # reads the taken bytes, which a grant counts only at its end.
    _grants = False

    def __init__(
        self,
        api: JetStreamApi,
        consumer: PushConsumer,
        options: PushOptions,
        on_event: Callable[[ConsumeEvent], object] | None = None,
    ) -> None:
        super().__init__(api, consumer, consume_options(), on_event)
        self._push_consumer = consumer
        self._flow = PushFlow(options)
        # The shared driver calls only the lifecycle half of the core (start,
        # stop, drain, finished, timers, disconnected/reconnected, terminate),
        # which PushFlow has too; the rest is overridden here.
        self._core = self._flow  # type: ignore[assignment]
        self._existence_check: asyncio.Task[None] | None = None
        self._overflow_messages = options.overflow_messages
        self._overflow_bytes = options.overflow_bytes

    def __repr__(self) -> str:
        c = self._push_consumer
        return f"<PushMessageStream {c.stream_name}/{c.name}>"

    @property
    def pin_id(self) -> str | None:
        """Always ``None``: pinning (ADR-42) is for pull consumers."""
        return None

    @property
    def dropped(self) -> int:
        """Messages dropped because the buffer overflowed (see ``consume``)."""
        return self._flow.dropped

    @property
    def flow_control_replies(self) -> int:
        """Flow-control requests answered so far."""
        return self._flow.flow_control_replies

    @property
    def stalled_heartbeats(self) -> int:
        """Heartbeats in which the server said it waits for a flow-control reply
        (it stopped sending because the buffer was full)."""
        return self._flow.stalled_heartbeats

    # -- lifecycle --

    async def _start(self) -> None:
        if self._started:
            return
        self._started = True
        api = self._api
        api.check_open()
        consumer = self._push_consumer
        subject = consumer.deliver_subject
        if not subject:
            raise InvalidArgumentError(
                f"consumer {consumer.stream_name}/{consumer.name} has no deliver_subject: "
                "it is a pull consumer; use js.consumer(...).consume()"
            )
        active = consumer._consuming
        if active is not None and not consumer.deliver_group:
            raise JetStreamError(
                f"push consumer {consumer.stream_name}/{consumer.name} is being consumed "
                "already: a second subscription to its deliver subject would receive "
                "every message twice (stop the first consume(), or give the consumer a "
                "deliver_group)"
            )
        consumer._consuming = self
        loop = self._loop = asyncio.get_running_loop()
        self._inbox = subject
        self._sub = await self._transport.subscribe_raw(
            subject, self._on_raw, as_bytes=True, queue=consumer.deliver_group or ""
        )
        api.add_listener(self)
        self._flow.start(loop.time())
        self._process_events()

    # -- receive path (the connection's read loop) --

    def _on_raw(
        self, subject: str | bytes, reply: str | bytes, data: bytes, header: bytes | None
    ) -> None:
        if header is None:
            size = len(subject) + len(reply) + len(data)
        elif header[8:9] == b" ":
            self._on_push_status(header, reply)
            return
        else:
            size = len(subject) + len(reply) + len(header) + len(data)
        if len(self._buffer) >= self._overflow_messages or (
            self._overflow_bytes is not None
            and self._flow.buffered_bytes + self._received_bytes - self._taken_bytes + size
            > self._overflow_bytes
        ):
            self._drop()
            return
        self._buffer.append(Msg(self._api, subject, reply, data, header))
        self._runs.append([1, size])
        self._received += 1
        self._received_bytes += size
        waiters = self._waiters
        if waiters:
            waiter = waiters.popleft()  # one message, one waiting task
            if not waiter.done():
                waiter.set_result(None)

    def _drop(self) -> None:
        flow = self._flow
        flow.drop()
        if flow.dropped == 1 or flow.dropped % 1000 == 0:
            log.warning(
                "push consumer %s: the buffer is full and the server keeps sending "
                "(no flow control?); %d message(s) dropped so far, to be redelivered "
                "after ack_wait if acks are on",
                self._push_consumer,
                flow.dropped,
            )

    def _on_push_status(self, header: bytes, reply: str | bytes) -> None:
        assert self._loop is not None
        self._sync()
        end = header.find(b"\r\n")
        line = header[9 : end if end >= 0 else len(header)].decode("utf-8", "replace")
        code_text, _, description = line.partition(" ")
        try:
            code = int(code_text)
        except ValueError:
            log.warning("ignoring a malformed status line %r on %s", line, self._inbox)
            return
        stalled = ""
        if b"Nats-Consumer-Stalled" in header:
            value = decode_headers(header).get("Nats-Consumer-Stalled")
            stalled = (value[-1] if value else "") if isinstance(value, list) else value or ""
        reply_text = reply.decode() if isinstance(reply, bytes) else reply
        self._flow.receive_status(code, description.strip(), self._loop.time(), reply_text, stalled)
        self._process_events()
        self._credit = self._flow.takes_before_reply()
        self._wake()

    def _process_events(self) -> None:
        for event in self._flow.events():
            if isinstance(event, FlowControlReply):
                self._send_reply(event)
            elif isinstance(event, Terminated):
                self._fail(self._terminal_error(event))
            else:
                if isinstance(event, HeartbeatMissed):
                    self._start_existence_check()
                self._notify(event)
        self._rearm()

    def _start_existence_check(self) -> None:
        """The server says nothing to a push subscriber when its consumer is
        deleted; the heartbeats just stop. A missed heartbeat asks."""
        if self._finished or self._flow.finished or self._tasks.closed:
            return
        check = self._existence_check
        if check is None or check.done():
            self._existence_check = self._tasks.start(self._check_exists(), name="consumer check")

    async def _check_exists(self) -> None:
        try:
            await self._push_consumer.info()
        except (ConsumerNotFoundError, StreamNotFoundError):
            self._flow.terminate(409, "Consumer Deleted")
            self._process_events()
        except JetStreamClosedError:
            self.context_closed()
        except AioClientsError as exc:
            # Unreachable for now: the reconnect (or the next miss) asks again.
            log.info("push consumer %s not reachable (%s)", self._push_consumer, exc)

    def _send_reply(self, reply: FlowControlReply) -> None:
        try:
            self._transport.send_nowait(b"PUB %s 0\r\n\r\n" % reply.subject.encode())
        except AioClientsError as exc:
            # Disconnected with a full buffer: the server's next heartbeat names
            # the subject it still waits for (Nats-Consumer-Stalled).
            log.debug("flow control reply to %s not sent: %s", reply.subject, exc)

    def _terminal_error(self, event: Terminated) -> JetStreamError:
        c = self._push_consumer
        where = f"{c.stream_name}/{c.name}"
        if event.code == 409 and event.description.lower().startswith("consumer deleted"):
            return ConsumerDeletedError(f"push consumer {where} was deleted", code=409)
        return JetStreamError(
            f"push consumer {where} ended: {event.code} {event.description}", code=event.code
        )

    # -- the core's accounting --

    def _sync(self) -> None:
        """Tell the core of the messages received and taken since it last heard;
        send a flow-control reply that became due."""
        self._fold()  # (never granted here: kept in step with the base's _sync)
        flow = self._flow
        count = self._received
        if count:
            assert self._loop is not None
            flow.receive_batch(count, self._received_bytes, self._loop.time())
            self._received = self._received_bytes = 0
        count = self._taken
        if count:
            assert self._loop is not None
            reply = flow.take_batch(count, self._taken_bytes, self._loop.time())
            self._taken = self._taken_bytes = 0
            if reply is not None:
                self._send_reply(reply)
        self._credit = 0  # the next take asks the core again

    def _settle(self) -> None:
        self._sync()
        self._credit = self._flow.takes_before_reply()

    def _release(self) -> None:
        consumer = self._push_consumer
        if consumer._consuming is self:
            consumer._consuming = None
        super()._release()

    def _statistics(self) -> ConsumeStatistics:
        self._sync()
        flow = self._flow
        return ConsumeStatistics(
            delivered=flow.delivered,
            received=flow.received,
            buffered_messages=flow.buffered_messages,
            buffered_bytes=flow.buffered_bytes,
            pending_messages=0,
            pending_bytes=0,
            pulls=0,
            heartbeats_missed=flow.heartbeats_missed,
            reconnects=self._reconnects,
        )


# -- creating and looking up --------------------------------------------------------------


async def upsert_push_consumer(
    api: JetStreamApi,
    stream: str,
    config: Mapping[str, Any],
    action: str,
    deliver_subject: str | None = None,
) -> PushConsumer:
    """Create (``action="create"``), update (``"update"``) or create-or-update
    (``""``) a push consumer.

    Without ``deliver_subject`` an existing consumer of that name keeps its own,
    and a new one gets a fresh inbox. Without a deliver group, flow control and
    an idle heartbeat (5 s) are on unless ``config`` says otherwise.
    """
    cfg = dict(config)
    given = cfg.pop("deliver_subject", None)
    if deliver_subject is not None and given is not None and given != deliver_subject:
        raise InvalidArgumentError("deliver_subject is given twice, with different values")
    subject = deliver_subject if deliver_subject is not None else given
    if subject is None:
        name = cfg.get("name") or cfg.get("durable_name")
        if name is not None:
            validate_consumer_name(name)
            try:
                current = await api.consumer_info(stream, name)
            except ConsumerNotFoundError:
                pass
            else:
                subject = current.config.get("deliver_subject") or None
        if subject is None:
            subject = api.transport.new_inbox()
    validate_publish_subject(subject)
    cfg["deliver_subject"] = subject
    if action != "update" and not cfg.get("deliver_group"):
        cfg.setdefault("flow_control", True)
        if cfg.get("flow_control") or "idle_heartbeat" not in cfg:
            cfg.setdefault("idle_heartbeat", DEFAULT_PUSH_IDLE_HEARTBEAT)
    info = await api.upsert_consumer(stream, cfg, action)
    return PushConsumer(api, stream, info.name, info)


async def push_consumer_of(api: JetStreamApi, stream: str, name: str) -> PushConsumer:
    """Look up a push consumer.

    Raises:
        ConsumerNotFoundError: no such consumer.
        InvalidArgumentError: it is a pull consumer (no deliver subject).
    """
    info = await api.consumer_info(stream, name)
    if not info.config.get("deliver_subject"):
        raise InvalidArgumentError(
            f"consumer {stream}/{name} is a pull consumer (no deliver_subject); "
            "use js.consumer(...)"
        )
    return PushConsumer(api, stream, name, info)
