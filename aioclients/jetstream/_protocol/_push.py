"""Push-consumer state: flow control, idle heartbeats and the bounded buffer.

A push consumer (nats.go ``CreatePushConsumer``; ADR-37's statuses) sends its
messages to a deliver subject on its own; the client cannot ask for less. One
``PushFlow`` per ``consume()`` decides everything the client does in return; the
asyncio driver only moves bytes and calls it.

States (``PushState``):
    ACTIVE    subscribed: messages arrive, flow control is answered
    DRAINING  unsubscribing: buffered messages are still handed out
    DONE      finished (``stop()``, or a terminal status)
Connectivity is a separate flag: while disconnected the heartbeat timer is off.

Back-pressure is flow control. The server asks ``100 FlowControl Request`` (with
a reply subject) once half of its window of unanswered bytes is out, and stops
sending when the whole window is out until the reply comes. The reply goes out
at once while the buffer has room (fewer than ``max_messages`` messages and
``max_bytes`` bytes); when it is full the reply is held until the user has
taken the buffer down to half, so a user who stops reading stops the server.
A heartbeat that carries ``Nats-Consumer-Stalled: <subject>`` means a flow
control reply was lost (or is being held): that subject replaces the held one
and is answered by the same rule. Without flow control only the consumer's
``max_ack_pending`` bounds what is in flight; beyond ``overflow_messages`` (or
``overflow_bytes``) the driver drops messages (unacked, so redelivered after
``ack_wait``), and :meth:`PushFlow.drop` counts them. With flow control nothing
is dropped: the server never has more than its window (2 to 32 MiB) unanswered.

Statuses:
    100 Idle Heartbeat        activity (and a stalled flow-control subject)
    100 FlowControl Request   answered as above
    409 Consumer Deleted      terminal
    anything else             a warning (``StatusWarning``), e.g.
                              409 Leadership Change
Heartbeats: with ``idle_heartbeat`` set, the deadline is the last activity
(any message) + 2 * ``idle_heartbeat``. Missing it is reported
(``HeartbeatMissed``), once per two intervals at most, never terminal: a paused
consumer is quiet but still beats, so a miss means the connection or the
server is in trouble.

Time is passed in as ``now``; ``get_timer()`` / ``handle_timer(now)`` follow the
sans-I/O convention. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from aioclients._core._checks import check_int
from aioclients._errors import InvalidArgumentError, LocalProtocolError
from aioclients.jetstream._protocol._pull import (
    Disconnected,
    HeartbeatMissed,
    Mode,
    Reconnected,
    StatusWarning,
    Terminated,
)

__all__ = (
    "DEFAULT_PUSH_MAX_MESSAGES",
    "FlowControlReply",
    "PushEvent",
    "PushFlow",
    "PushOptions",
    "PushState",
    "PushStatus",
    "classify_push_status",
    "push_options",
)

DEFAULT_PUSH_MAX_MESSAGES = 1000
#: Without flow control, dropping starts this many times above the buffer's size
#: (or at ``max_ack_pending``, when acks bound what is in flight).
OVERFLOW_FACTOR = 4
#: No overflow bound (the server's flow-control window is the bound).
UNBOUNDED = 1 << 62


class PushState(enum.Enum):
    ACTIVE = "active"
    DRAINING = "draining"
    DONE = "done"


class PushStatus(enum.Enum):
    HEARTBEAT = "heartbeat"
    FLOW_CONTROL = "flow_control"
    TERMINAL = "terminal"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class FlowControlReply:
    """Publish an empty message to ``subject``: the server may send more."""

    subject: str


PushEvent = (
    FlowControlReply | HeartbeatMissed | StatusWarning | Terminated | Disconnected | Reconnected
)


@dataclass(frozen=True, slots=True)
class PushOptions:
    """Validated options of one push ``consume()``."""

    #: flow-control replies wait while this many messages are buffered
    max_messages: int
    #: ... or this many bytes (``None``: messages only)
    max_bytes: int | None
    #: the consumer's idle heartbeat, seconds (``None``: not checked)
    idle_heartbeat: float | None
    #: messages beyond these are dropped
    overflow_messages: int
    overflow_bytes: int | None


def push_options(
    *,
    max_messages: object = None,
    max_bytes: object = None,
    idle_heartbeat: object = None,
    max_ack_pending: object = None,
    flow_control: bool = False,
) -> PushOptions:
    """Validate ``consume()`` options of a push consumer; ``idle_heartbeat``,
    ``max_ack_pending`` and ``flow_control`` come from the consumer's config
    (``max_ack_pending``: ``None`` or <= 0 when acks do not bound what is in
    flight). With flow control nothing is dropped: the server's window (at most
    32 MiB unanswered) bounds what arrives beyond the buffer.

    Raises:
        InvalidArgumentError: out-of-range values.
    """
    mm = (
        DEFAULT_PUSH_MAX_MESSAGES
        if max_messages is None
        else check_int("max_messages", max_messages, minimum=1)
    )
    mb = None if max_bytes is None else check_int("max_bytes", max_bytes, minimum=1)
    hb: float | None = None
    if idle_heartbeat is not None:
        if (
            not isinstance(idle_heartbeat, (int, float))
            or isinstance(idle_heartbeat, bool)
            or not idle_heartbeat >= 0
        ):
            raise InvalidArgumentError(
                f"idle_heartbeat must be seconds >= 0, got {idle_heartbeat!r}"
            )
        hb = float(idle_heartbeat) if idle_heartbeat > 0 else None
    if flow_control:
        return PushOptions(mm, mb, hb, overflow_messages=UNBOUNDED, overflow_bytes=None)
    acks = max_ack_pending if isinstance(max_ack_pending, int) and max_ack_pending > 0 else 0
    return PushOptions(
        max_messages=mm,
        max_bytes=mb,
        idle_heartbeat=hb,
        overflow_messages=max(OVERFLOW_FACTOR * mm, acks),
        overflow_bytes=None if mb is None else OVERFLOW_FACTOR * mb,
    )


def classify_push_status(code: int, description: str) -> PushStatus:
    """What a status message on a deliver subject means."""
    text = description.strip().lower()
    if code == 100:
        if text.startswith("flowcontrol") or text.startswith("flow control"):
            return PushStatus.FLOW_CONTROL
        return PushStatus.HEARTBEAT
    if code == 409 and text.startswith("consumer deleted"):
        return PushStatus.TERMINAL
    return PushStatus.WARNING


class PushFlow:
    """The state of one push ``consume()`` (see the module docstring)."""

    #: for the shared consume driver: a push stream is a continuous consume
    mode = Mode.CONSUME

    __slots__ = (
        "_events",
        "_hb_deadline",
        "_held",
        "_last_activity",
        "buffered_bytes",
        "buffered_messages",
        "connected",
        "delivered",
        "dropped",
        "flow_control_replies",
        "heartbeats_missed",
        "options",
        "received",
        "stalled_heartbeats",
        "state",
    )

    def __init__(self, options: PushOptions) -> None:
        self.options = options
        self.state = PushState.ACTIVE
        self.connected = True
        self.buffered_messages = 0
        self.buffered_bytes = 0
        self.received = 0
        self.delivered = 0
        self.dropped = 0
        self.flow_control_replies = 0
        self.heartbeats_missed = 0
        #: heartbeats saying the server waits for a flow-control reply
        self.stalled_heartbeats = 0
        self._events: list[PushEvent] = []
        self._held: str | None = None  # a flow-control reply waiting for room
        self._last_activity: float | None = None
        self._hb_deadline: float | None = None

    # -- outputs --

    def events(self) -> list[PushEvent]:
        """Return and clear the events produced since the last call."""
        out, self._events = self._events, []
        return out

    def get_timer(self) -> float | None:
        """The heartbeat deadline, if one is armed."""
        return None if self.state is PushState.DONE else self._hb_deadline

    @property
    def held_reply(self) -> str | None:
        """The flow-control reply held until the buffer has room, if any."""
        return self._held

    @property
    def has_room(self) -> bool:
        """Below the buffer's size: a flow-control request is answered at once."""
        opts = self.options
        if self.buffered_messages >= opts.max_messages:
            return False
        return opts.max_bytes is None or self.buffered_bytes < opts.max_bytes

    @property
    def finished(self) -> bool:
        """Nothing more will be buffered (done or draining)."""
        return self.state is not PushState.ACTIVE

    def takes_before_reply(self) -> int:
        """How many buffered messages may be taken before a held reply may be
        due: the driver may tell :meth:`take_batch` of that many at once."""
        if self._held is None:
            return max(1, self.buffered_messages)
        opts = self.options
        if opts.max_bytes is not None:
            return 1
        left = self.buffered_messages - self._resume_at()
        return left if left > 1 else 1

    def overflowing(self, extra_bytes: int = 0) -> bool:
        """Whether one more message (of ``extra_bytes``) must be dropped."""
        opts = self.options
        if self.buffered_messages >= opts.overflow_messages:
            return True
        return (
            opts.overflow_bytes is not None
            and self.buffered_bytes + extra_bytes > opts.overflow_bytes
        )

    # -- inputs --

    def start(self, now: float) -> None:
        """Subscribed: arm the heartbeat check."""
        if self.state is not PushState.ACTIVE or self._last_activity is not None:
            raise LocalProtocolError("start() is called once, on an active flow")
        self._activity(now)

    def receive_batch(self, count: int, size: int, now: float) -> None:
        """``count`` user messages of ``size`` bytes in all were buffered."""
        if count < 0 or size < 0:
            raise LocalProtocolError("receive_batch() of a negative count")
        self.buffered_messages += count
        self.buffered_bytes += size
        self.received += count
        self._activity(now)

    def drop(self, count: int = 1) -> None:
        """``count`` messages arrived over the overflow bound and were dropped."""
        self.dropped += count

    def take_batch(self, count: int, size: int, now: float) -> FlowControlReply | None:
        """The user took ``count`` buffered messages of ``size`` bytes in all;
        returns the held flow-control reply once the buffer is down to half."""
        if count > self.buffered_messages or count < 0 or size > self.buffered_bytes:
            raise LocalProtocolError("take_batch() of more than is buffered")
        self.buffered_messages -= count
        self.buffered_bytes -= size
        self.delivered += count
        return self._release_held()

    def receive_status(
        self, code: int, description: str, now: float, reply: str = "", stalled: str = ""
    ) -> PushStatus:
        """A status on the deliver subject: ``reply`` is its reply subject (flow
        control), ``stalled`` its ``Nats-Consumer-Stalled`` header (heartbeat)."""
        self._activity(now)
        kind = classify_push_status(code, description)
        if self.state is PushState.DONE:
            return kind
        if kind is PushStatus.FLOW_CONTROL:
            if reply:
                self._answer(reply)
        elif kind is PushStatus.HEARTBEAT:
            if stalled:
                self.stalled_heartbeats += 1
                self._answer(stalled)
        elif kind is PushStatus.TERMINAL:
            self._finish()
            self._events.append(Terminated(code, description))
        else:
            self._events.append(StatusWarning(code, description))
        return kind

    def handle_timer(self, now: float) -> None:
        """Check the heartbeat deadline against ``now``."""
        deadline = self._hb_deadline
        if deadline is None or self.state is not PushState.ACTIVE or not self.connected:
            self._hb_deadline = None
            return
        last = self._last_activity
        hb = self.options.idle_heartbeat
        assert last is not None  # armed only when both are set
        assert hb is not None
        if now < last + 2 * hb:
            self._hb_deadline = last + 2 * hb  # activity since: push the timer out
            return
        self.heartbeats_missed += 1
        self._events.append(HeartbeatMissed())
        # Once per two intervals at most, until something arrives.
        self._last_activity = now
        self._hb_deadline = now + 2 * hb

    def drain(self) -> None:
        """Unsubscribing: buffered messages are still taken, nothing is answered."""
        if self.state is PushState.ACTIVE:
            self.state = PushState.DRAINING
            self._hb_deadline = None

    def stop(self) -> None:
        """Finish now."""
        self._finish()

    def disconnected(self) -> None:
        """The connection dropped: the heartbeat timer pauses."""
        if not self.connected:
            return
        self.connected = False
        self._hb_deadline = None
        if self.state is not PushState.DONE:
            self._events.append(Disconnected())

    def reconnected(self, now: float) -> None:
        """The connection is back and the consumer exists: check heartbeats again.

        A flow-control reply held or sent on the old connection may be lost; the
        server's next heartbeat names the subject it still waits for.
        """
        was_connected, self.connected = self.connected, True
        if self.state is PushState.DONE:
            return
        if not was_connected:
            self._events.append(Reconnected())
        if self.state is PushState.ACTIVE:
            self._activity(now)

    def terminate(self, code: int, description: str) -> None:
        """End with a terminal error found elsewhere (the consumer is gone)."""
        if self.state is not PushState.DONE:
            self._finish()
            self._events.append(Terminated(code, description))

    # -- internals --

    def _activity(self, now: float) -> None:
        self._last_activity = now
        hb = self.options.idle_heartbeat
        if (
            hb is not None
            and self._hb_deadline is None
            and self.connected
            and self.state is PushState.ACTIVE
        ):
            self._hb_deadline = now + 2 * hb

    def _answer(self, subject: str) -> None:
        if self.state is not PushState.ACTIVE:
            return
        if self.has_room:
            self._held = None
            self.flow_control_replies += 1
            self._events.append(FlowControlReply(subject))
        else:
            self._held = subject  # the newest request is the one the server waits on

    def _resume_at(self) -> int:
        return self.options.max_messages // 2

    def _release_held(self) -> FlowControlReply | None:
        held = self._held
        if held is None or self.state is not PushState.ACTIVE:
            return None
        opts = self.options
        if self.buffered_messages > self._resume_at():
            return None
        if opts.max_bytes is not None and self.buffered_bytes > opts.max_bytes // 2:
            return None
        self._held = None
        self.flow_control_replies += 1
        return FlowControlReply(held)

    def _finish(self) -> None:
        self.state = PushState.DONE
        self._hb_deadline = None
        self._held = None
