"""Pull-consumer state: ADR-37 "Fetch", "Next" and "Consume", ADR-42 client side.

One ``PullBuffer`` per fetch or consume call owns everything that decides when
to pull and how much; the asyncio driver only moves bytes and calls it.

States (``PullState``):
    ACTIVE    pulling: a pull is in flight whenever the buffer has room
    DRAINING  no new pulls; messages already buffered are still handed out
    DONE      finished (fetch complete, ``stop()``, or a terminal status)
Connectivity is a separate flag: while disconnected no pull goes out and the
heartbeat timer is paused (ADR-37 "Server reconnects").

Accounting (ADR-37 "Buffering messages"):
    pending   messages / bytes requested from the server and not yet received
    buffered  messages / bytes received and not yet taken by the user
    outstanding = pending + buffered, never above the limit
A pull is sent when outstanding falls to the threshold (default half the
limit); it asks for exactly the room left (``limit - outstanding``). Counting
buffered messages is what makes back-pressure reach the server: a user who
stops taking messages stops the pulls. With ``max_bytes`` the batch is a large
constant and the byte counts decide. Pending counts shrink by one message (and
its size, computed as the server does) per user message, and by
``Nats-Pending-Messages`` / ``Nats-Pending-Bytes`` whenever a status carries
them; they never go below zero.

Statuses (ADR-37 "Status handling", ADR-42 "Client implementation"):
    terminal  400 Bad Request, 409 Consumer Deleted, 409 Consumer is push based
    warning   409 Exceeded MaxRequestBatch / MaxRequestExpires /
              MaxRequestMaxBytes / MaxWaiting (and any other 409 not listed);
              a fetch, whose only pull was refused, ends with it as an error
    silent    404 No Messages, 408 Request Timeout, 409 Message Size Exceeds
              MaxBytes, 409 Batch Completed
    100       idle heartbeat
    423       pin id mismatch: forget the pin id, zero the pending counts, pull
              again without an id
    409 Leadership Change / Server Shutdown: zero the pending counts (the old
              pulls are gone); a fetch just ends
    503       no responders: consume reports a warning (the driver checks the
              consumer); a fetch with no message yet asks the driver to check it
              (``CheckConsumer``): it exists -> ``consumer_exists(now)`` sends the
              pull again for the time left (at most ``NO_RESPONDERS_RETRIES``
              times); else the driver ends it. A cluster node may not know yet of a
              consumer just created, and answers its first pulls so.

Heartbeats: the deadline is ``last activity + 2 * idle_heartbeat``; any
message (user, status or heartbeat) is activity. Missing it is reported, never
terminal: pending counts are zeroed and a fresh pull goes out (consume); a
fetch ends with a heartbeat error. A fetch also has a client-side deadline
above the pull's expiry.

Time is passed in as ``now``; ``get_timer()`` / ``handle_timer(now)`` follow
the sans-I/O convention. Nothing here does I/O.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from aioclients._core._checks import check_int
from aioclients._errors import InvalidArgumentError, LocalProtocolError
from aioclients.jetstream._protocol._names import validate_group_name

__all__ = (
    "BYTES_MODE_BATCH",
    "CheckConsumer",
    "DEFAULT_CONSUME_MAX_MESSAGES",
    "Disconnected",
    "HeartbeatMissed",
    "Mode",
    "NO_RESPONDERS_RETRIES",
    "PullBuffer",
    "PullEnded",
    "PullOptions",
    "PullRequest",
    "PullState",
    "Pinned",
    "Reconnected",
    "StatusKind",
    "StatusWarning",
    "Terminated",
    "Unpinned",
    "classify_status",
    "consume_options",
    "fetch_options",
    "message_size",
)

#: Batch sent with every ``max_bytes`` pull, so the bytes decide (ADR-37).
BYTES_MODE_BATCH = 1_000_000
DEFAULT_CONSUME_MAX_MESSAGES = 500
DEFAULT_EXPIRES = 30.0
MIN_EXPIRES = 1.0
MIN_HEARTBEAT = 0.5
MAX_HEARTBEAT = 30.0
#: How many times a fetch sends its pull again after a 503 when the consumer exists.
NO_RESPONDERS_RETRIES = 2
#: A retried pull needs at least this long left before the fetch's pull expires.
MIN_RETRY_EXPIRES = 0.1


class Mode(enum.Enum):
    FETCH = "fetch"
    CONSUME = "consume"


class PullState(enum.Enum):
    ACTIVE = "active"
    DRAINING = "draining"
    DONE = "done"


class StatusKind(enum.Enum):
    HEARTBEAT = "heartbeat"
    SILENT = "silent"
    WARNING = "warning"
    TERMINAL = "terminal"
    PIN_MISMATCH = "pin_mismatch"
    LEADERSHIP_CHANGE = "leadership_change"
    NO_RESPONDERS = "no_responders"


# -- events (what the driver acts on or reports) ------------------------------------------


@dataclass(frozen=True, slots=True)
class PullRequest:
    """A ``CONSUMER.MSG.NEXT`` request to send (durations in seconds)."""

    batch: int
    max_bytes: int | None
    expires: float
    idle_heartbeat: float | None
    group: str | None = None
    pin_id: str | None = None
    min_pending: int | None = None
    min_ack_pending: int | None = None
    priority: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The request body, durations in nanoseconds as the server wants them."""
        body: dict[str, Any] = {"batch": self.batch, "expires": _ns(self.expires)}
        if self.max_bytes is not None:
            body["max_bytes"] = self.max_bytes
        if self.idle_heartbeat is not None:
            body["idle_heartbeat"] = _ns(self.idle_heartbeat)
        if self.group is not None:
            body["group"] = self.group
        if self.pin_id is not None:
            body["id"] = self.pin_id
        if self.min_pending is not None:
            body["min_pending"] = self.min_pending
        if self.min_ack_pending is not None:
            body["min_ack_pending"] = self.min_ack_pending
        if self.priority is not None:
            body["priority"] = self.priority
        return body


@dataclass(frozen=True, slots=True)
class HeartbeatMissed:
    """No message of any kind arrived within twice the idle heartbeat."""


@dataclass(frozen=True, slots=True)
class Pinned:
    """This client became the pinned client of its group (ADR-42)."""

    pin_id: str


@dataclass(frozen=True, slots=True)
class Unpinned:
    """The server pinned another client (a 423 answered our pull)."""


@dataclass(frozen=True, slots=True)
class StatusWarning:
    """A pull was refused or cut short for a reason worth knowing (ADR-37 warnings)."""

    code: int
    description: str


@dataclass(frozen=True, slots=True)
class Disconnected:
    """The NATS connection dropped; pulls pause until it is back."""


@dataclass(frozen=True, slots=True)
class Reconnected:
    """The NATS connection is back and the consumer still exists; pulling resumes."""


@dataclass(frozen=True, slots=True)
class Terminated:
    """A terminal status ended the pull(s): ``code`` / ``description`` say which."""

    code: int
    description: str


@dataclass(frozen=True, slots=True)
class CheckConsumer:
    """A fetch's pull was answered 503 (no responders) before any message: the
    driver looks the consumer up, within ``deadline`` (the pull's expiry, on the
    core's clock), then calls ``consumer_exists(now)`` or ``terminate(...)``."""

    code: int
    description: str
    deadline: float


@dataclass(frozen=True, slots=True)
class PullEnded:
    """A fetch is over; ``reason`` is ``"complete"``, ``"no_messages"``,
    ``"expired"``, ``"heartbeat"`` or ``"timeout"`` (the client-side deadline)."""

    reason: str


# -- options --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PullOptions:
    """Validated options of one fetch or consume call."""

    max_messages: int
    max_bytes: int | None
    expires: float
    idle_heartbeat: float | None
    threshold_messages: int
    threshold_bytes: int
    group: str | None = None
    min_pending: int | None = None
    min_ack_pending: int | None = None
    priority: int | None = None

    @property
    def client_timeout(self) -> float:
        """How long a fetch waits beyond its expiry before giving up client-side."""
        return self.expires + min(max(1.0, self.expires * 0.1), 5.0)


def _seconds(name: str, value: object, *, minimum: float, maximum: float = math.inf) -> float:
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or math.isnan(value)
        or math.isinf(value)
        or not minimum <= value <= maximum
    ):
        upper = " (finite)" if math.isinf(maximum) else f" and <= {maximum:g}"
        raise InvalidArgumentError(f"{name} must be seconds >= {minimum:g}{upper}, got {value!r}")
    return float(value)


def _priority_fields(
    group: object, min_pending: object, min_ack_pending: object, priority: object
) -> tuple[str | None, int | None, int | None, int | None]:
    if group is not None:
        if not isinstance(group, str):
            raise InvalidArgumentError(f"group must be a str, got {type(group).__name__}")
        validate_group_name(group)
    elif min_pending is not None or min_ack_pending is not None or priority is not None:
        raise InvalidArgumentError(
            "min_pending, min_ack_pending and priority need group= (the consumer's priority group)"
        )
    mp = None if min_pending is None else check_int("min_pending", min_pending, minimum=0)
    map_ = (
        None
        if min_ack_pending is None
        else check_int("min_ack_pending", min_ack_pending, minimum=0)
    )
    prio = None if priority is None else check_int("priority", priority, minimum=0)
    if prio is not None and prio > 9:
        raise InvalidArgumentError(f"priority must be 0..9, got {prio}")
    return group, mp, map_, prio


def _heartbeat(idle_heartbeat: object, expires: float, *, default: float | None) -> float | None:
    if idle_heartbeat is None:
        return default
    hb = _seconds("idle_heartbeat", idle_heartbeat, minimum=MIN_HEARTBEAT, maximum=MAX_HEARTBEAT)
    if hb > expires / 2:
        raise InvalidArgumentError(
            f"idle_heartbeat ({hb:g}s) must be at most half of expires ({expires:g}s)"
        )
    return hb


def consume_options(
    *,
    max_messages: object = None,
    max_bytes: object = None,
    expires: object = DEFAULT_EXPIRES,
    idle_heartbeat: object = None,
    threshold_messages: object = None,
    threshold_bytes: object = None,
    group: object = None,
    min_pending: object = None,
    min_ack_pending: object = None,
    priority: object = None,
) -> PullOptions:
    """Validate ``consume()`` options and fill in the ADR-37 defaults.

    Raises:
        InvalidArgumentError: both ``max_messages`` and ``max_bytes``, a threshold
            above its limit, out-of-range durations or a bad group.
    """
    if max_messages is not None and max_bytes is not None:
        raise InvalidArgumentError("give max_messages or max_bytes, not both (ADR-37)")
    exp = _seconds("expires", expires, minimum=MIN_EXPIRES)
    # Heartbeats are always on for consume: half the expiry, within 0.5..30 s.
    hb = _heartbeat(idle_heartbeat, exp, default=min(max(exp / 2, MIN_HEARTBEAT), MAX_HEARTBEAT))
    if max_bytes is not None:
        mb: int | None = check_int("max_bytes", max_bytes, minimum=1)
        mm = BYTES_MODE_BATCH
        if threshold_messages is not None:
            raise InvalidArgumentError("threshold_messages goes with max_messages, not max_bytes")
    else:
        mb = None
        mm = (
            DEFAULT_CONSUME_MAX_MESSAGES
            if max_messages is None
            else check_int("max_messages", max_messages, minimum=1)
        )
        if threshold_bytes is not None:
            raise InvalidArgumentError("threshold_bytes goes with max_bytes, not max_messages")
    tm = (
        mm // 2
        if threshold_messages is None
        else check_int("threshold_messages", threshold_messages, minimum=0)
    )
    if tm > mm:
        raise InvalidArgumentError(f"threshold_messages ({tm}) cannot be above max_messages ({mm})")
    tb = 0
    if mb is not None:
        tb = (
            mb // 2
            if threshold_bytes is None
            else check_int("threshold_bytes", threshold_bytes, minimum=0)
        )
        if tb > mb:
            raise InvalidArgumentError(f"threshold_bytes ({tb}) cannot be above max_bytes ({mb})")
    g, mp, map_, prio = _priority_fields(group, min_pending, min_ack_pending, priority)
    return PullOptions(mm, mb, exp, hb, tm, tb, g, mp, map_, prio)


def fetch_options(
    *,
    max_messages: object = None,
    max_bytes: object = None,
    expires: object = DEFAULT_EXPIRES,
    idle_heartbeat: object = None,
    group: object = None,
    min_pending: object = None,
    min_ack_pending: object = None,
    priority: object = None,
) -> PullOptions:
    """Validate ``fetch()`` / ``next()`` options (ADR-37 "Fetch").

    One of ``max_messages`` / ``max_bytes`` is needed (``max_messages`` defaults
    to 1 when neither is given); heartbeats are on by default only for expiries
    above 30 s.
    """
    if max_messages is not None and max_bytes is not None:
        raise InvalidArgumentError("give max_messages or max_bytes, not both (ADR-37)")
    exp = _seconds("expires", expires, minimum=MIN_EXPIRES)
    default_hb = min(exp / 2, MAX_HEARTBEAT) if exp > 30.0 else None
    hb = _heartbeat(idle_heartbeat, exp, default=default_hb)
    if max_bytes is not None:
        mb: int | None = check_int("max_bytes", max_bytes, minimum=1)
        mm = BYTES_MODE_BATCH
    else:
        mb = None
        mm = 1 if max_messages is None else check_int("max_messages", max_messages, minimum=1)
    g, mp, map_, prio = _priority_fields(group, min_pending, min_ack_pending, priority)
    return PullOptions(mm, mb, exp, hb, 0, 0, g, mp, map_, prio)


# -- statuses -------------------------------------------------------------------------------

_SILENT_409 = ("message size exceeds maxbytes", "batch completed")
_TERMINAL_409 = ("consumer deleted", "consumer is push based")


def classify_status(code: int, description: str) -> StatusKind:
    """Where a status message falls in ADR-37's table (plus ADR-42's 423)."""
    if code == 100:
        return StatusKind.HEARTBEAT
    if code in (404, 408):
        return StatusKind.SILENT
    if code == 400:
        return StatusKind.TERMINAL
    if code == 423:
        return StatusKind.PIN_MISMATCH
    if code == 503:
        return StatusKind.NO_RESPONDERS
    if code == 409:
        text = description.strip().lower()
        if text.startswith(_TERMINAL_409):
            return StatusKind.TERMINAL
        if text.startswith(_SILENT_409):
            return StatusKind.SILENT
        if text.startswith(("leadership change", "server shutdown")):
            return StatusKind.LEADERSHIP_CHANGE
        return StatusKind.WARNING
    return StatusKind.WARNING


def message_size(subject: str, reply: str, header_len: int, payload_len: int) -> int:
    """A message's size as the server counts it against ``max_bytes``.

    ``len(subject) + len(reply) + len(headers) + len(payload)`` (server
    ``consumer.go``); subjects and replies are ASCII on the wire.
    """
    return len(subject) + len(reply) + header_len + payload_len


# -- the state machine ----------------------------------------------------------------------

Event = (
    PullRequest
    | HeartbeatMissed
    | Pinned
    | Unpinned
    | StatusWarning
    | Terminated
    | PullEnded
    | CheckConsumer
    | Disconnected
    | Reconnected
)


class PullBuffer:
    """Pending counts, thresholds, heartbeats and the pin id of one fetch or consume.

    Inputs: ``start``, ``receive_message``, ``receive_status``, ``take``,
    ``drain``, ``stop``, ``disconnected``, ``reconnected``, ``handle_timer``,
    ``consumer_exists`` (the answer to ``CheckConsumer``), ``terminate``.
    Outputs: ``events()`` returns (and clears) what the driver must do or
    report, in order; ``take`` returns a pull directly (the hot path).
    """

    __slots__ = (
        "_checking",
        "_events",
        "_expires_at",
        "_fetch_deadline",
        "_hb_deadline",
        "_last_activity",
        "_last_pull_full",
        "_received_at_pull",
        "buffered_bytes",
        "buffered_messages",
        "connected",
        "delivered",
        "heartbeats_missed",
        "mode",
        "no_responder_retries",
        "options",
        "pending_bytes",
        "pending_messages",
        "pin_id",
        "pulls",
        "received",
        "received_bytes",
        "state",
    )

    def __init__(self, options: PullOptions, mode: Mode) -> None:
        self.options = options
        self.mode = mode
        self.state = PullState.ACTIVE
        self.connected = True
        self.pending_messages = 0
        self.pending_bytes = 0
        self.buffered_messages = 0
        self.buffered_bytes = 0
        self.received = 0  # user messages received (fetch completion, statistics)
        self.received_bytes = 0
        self.delivered = 0  # messages taken by the user
        self.pulls = 0
        self.heartbeats_missed = 0
        self.pin_id: str | None = None
        self._events: list[Event] = []
        self._last_pull_full = False
        self._received_at_pull = 0
        self._last_activity: float | None = None
        self._hb_deadline: float | None = None
        self._fetch_deadline: float | None = None
        self._expires_at: float | None = None  # a fetch: when its pull expires
        self._checking = False  # a fetch: waiting for the driver's CheckConsumer answer
        self.no_responder_retries = 0  # pulls a fetch sent again after a 503

    # -- outputs --

    def events(self) -> list[Event]:
        """Return and clear the events produced since the last call."""
        out, self._events = self._events, []
        return out

    def get_timer(self) -> float | None:
        """The next deadline (heartbeat or client-side fetch timeout), if any."""
        if self.state is PullState.DONE:
            return None
        hb = self._hb_deadline
        fd = self._fetch_deadline
        if hb is None:
            return fd
        if fd is None:
            return hb
        return min(hb, fd)

    @property
    def outstanding_messages(self) -> int:
        return self.pending_messages + self.buffered_messages

    @property
    def outstanding_bytes(self) -> int:
        return self.pending_bytes + self.buffered_bytes

    # -- inputs --

    def start(self, now: float) -> None:
        """Send the first pull and arm the timers."""
        if self.pulls or self.state is not PullState.ACTIVE:
            raise LocalProtocolError("start() is called once, on an active buffer")
        self._last_activity = now
        if self.mode is Mode.FETCH:
            self._fetch_deadline = now + self.options.client_timeout
            self._expires_at = now + self.options.expires
        pull = self._pull_if_needed(now)
        assert pull is not None  # an empty buffer always has room
        self._events.append(pull)

    def receive_message(self, size: int, now: float, pin_id: str | None = None) -> None:
        """A user message arrived (``size`` from :func:`message_size`)."""
        self._last_activity = now
        pending = self.pending_messages - 1
        self.pending_messages = pending if pending > 0 else 0
        if self.options.max_bytes is not None:
            left = self.pending_bytes - size
            self.pending_bytes = left if left > 0 else 0
        self.buffered_messages += 1
        self.buffered_bytes += size
        self.received += 1
        self.received_bytes += size
        if pin_id is not None and pin_id != self.pin_id and self.options.group is not None:
            self.pin_id = pin_id
            self._events.append(Pinned(pin_id))
        if self.mode is Mode.FETCH and self.state is PullState.ACTIVE:
            opts = self.options
            if self.received >= opts.max_messages or (
                opts.max_bytes is not None and self.received_bytes >= opts.max_bytes
            ):
                self._end_fetch("complete")

    def receive_batch(self, count: int, size: int, now: float) -> None:
        """``count`` user messages of ``size`` bytes in all arrived (consume mode,
        no priority group): :meth:`receive_message` for many at once."""
        if self.mode is not Mode.CONSUME or self.options.group is not None:
            raise LocalProtocolError("receive_batch() is for consume without a priority group")
        self._last_activity = now
        pending = self.pending_messages - count
        self.pending_messages = pending if pending > 0 else 0
        if self.options.max_bytes is not None:
            left = self.pending_bytes - size
            self.pending_bytes = left if left > 0 else 0
        self.buffered_messages += count
        self.buffered_bytes += size
        self.received += count
        self.received_bytes += size

    def take_batch(self, count: int, size: int, now: float) -> PullRequest | None:
        """The user took ``count`` buffered messages of ``size`` bytes in all
        (:meth:`take` for many at once); returns a pull to send, if one is due."""
        if count > self.buffered_messages or count < 0:
            raise LocalProtocolError("take_batch() of more than is buffered")
        self.buffered_messages -= count
        self.buffered_bytes -= size
        self.delivered += count
        if self.mode is Mode.CONSUME:
            return self._pull_if_needed(now)
        return None

    def takes_before_pull(self) -> int:
        """How many buffered messages may be taken before a pull may be due: the
        driver may tell :meth:`take_batch` of that many at once without sending a
        pull late. 1 (tell each take) where it cannot be known in advance: pulls
        by bytes, a fetch, or no pulls now (draining, disconnected)."""
        opts = self.options
        if (
            self.mode is not Mode.CONSUME
            or opts.max_bytes is not None
            or self.state is not PullState.ACTIVE
            or not self.connected
        ):
            return 1
        left = self.pending_messages + self.buffered_messages - opts.threshold_messages
        return left if left > 1 else 1

    def take(self, size: int, now: float) -> PullRequest | None:
        """The user took one buffered message; returns a pull to send, if one is due."""
        if self.buffered_messages <= 0:
            raise LocalProtocolError("take() without a buffered message")
        self.buffered_messages -= 1
        self.buffered_bytes -= size
        self.delivered += 1
        if self.mode is Mode.CONSUME:
            return self._pull_if_needed(now)
        return None

    def receive_status(
        self,
        code: int,
        description: str,
        now: float,
        pending_messages: int | None = None,
        pending_bytes: int | None = None,
    ) -> StatusKind:
        """A status message arrived on the pull inbox; returns how it was classified."""
        self._last_activity = now
        kind = classify_status(code, description)
        if kind is StatusKind.HEARTBEAT:
            return kind
        if pending_messages is not None:
            self.pending_messages = max(0, self.pending_messages - pending_messages)
        if pending_bytes is not None and self.options.max_bytes is not None:
            self.pending_bytes = max(0, self.pending_bytes - pending_bytes)
        if self.state is PullState.DONE:
            return kind
        if kind is StatusKind.TERMINAL:
            self.state = PullState.DONE
            self._events.append(Terminated(code, description))
            return kind
        if self.mode is Mode.FETCH:
            if kind is StatusKind.NO_RESPONDERS:
                if self._checking:
                    return kind  # no pull is out: a stray copy
                if (
                    self.received == 0
                    and self.no_responder_retries < NO_RESPONDERS_RETRIES
                    and self._retry_expires(now) is not None
                ):
                    # Nobody serves the pull. On a cluster, the node may not know
                    # yet of a consumer just created: the driver checks it exists.
                    assert self._expires_at is not None
                    self.pending_messages = 0
                    self.pending_bytes = 0
                    self._hb_deadline = None
                    self._checking = True
                    self._events.append(
                        CheckConsumer(code, description or "No Responders", self._expires_at)
                    )
                    return kind
                # Nobody serves the pull: the consumer (or JetStream) is gone.
                self.state = PullState.DONE
                self._events.append(Terminated(code, description or "No Responders"))
                return kind
            if kind is StatusKind.WARNING and description.lower().startswith("exceeded"):
                # The server refused this fetch's only pull (batch, expiry or
                # max_bytes above the consumer's limits, too many waiting pulls):
                # an empty result would hide it.
                self.state = PullState.DONE
                self._events.append(Terminated(code, description))
                return kind
            if kind is StatusKind.WARNING:
                self._events.append(StatusWarning(code, description))
            elif kind is StatusKind.PIN_MISMATCH:
                self._unpin()
            if code == 404:
                self._end_fetch("no_messages")
            elif code == 408:
                self._end_fetch("expired")
            else:
                self._end_fetch("complete" if kind is StatusKind.SILENT else "terminated")
            return kind
        # consume
        if (
            kind is StatusKind.SILENT
            and code == 409
            and self.options.max_bytes is not None
            and self.pending_messages == 0
            and self.buffered_messages == 0
            and self._last_pull_full
            and self.received == self._received_at_pull
        ):
            # A pull for the whole of max_bytes got nothing: the next message is
            # larger than the buffer can ever be. Pulling again would spin.
            self.state = PullState.DONE
            self._events.append(Terminated(code, description))
            return kind
        if kind is StatusKind.PIN_MISMATCH:
            self._unpin()
            self.pending_messages = 0
            self.pending_bytes = 0
        elif kind is StatusKind.LEADERSHIP_CHANGE:
            self.pending_messages = 0
            self.pending_bytes = 0
        elif kind is StatusKind.WARNING or kind is StatusKind.NO_RESPONDERS:
            self._events.append(StatusWarning(code, description))
        self._queue_pull(now)
        return kind

    def handle_timer(self, now: float) -> None:
        """Check the deadlines against ``now`` (call when ``get_timer()`` passes)."""
        if self.state is PullState.DONE:
            return
        if self._fetch_deadline is not None and now >= self._fetch_deadline:
            self._end_fetch("timeout")
            return
        last = self._last_activity
        hb = self.options.idle_heartbeat
        if not self.connected or hb is None or last is None or self.pending_messages == 0:
            # Heartbeats only come while a pull is open on the server.
            self._hb_deadline = None
            return
        deadline = last + 2 * hb
        if now < deadline:
            self._hb_deadline = deadline  # activity since: push the timer out
            return
        self.heartbeats_missed += 1
        self._events.append(HeartbeatMissed())
        if self.mode is Mode.FETCH:
            self._end_fetch("heartbeat")
            return
        # The pulls may be gone (a lost request, a restarted server): start over.
        self.pending_messages = 0
        self.pending_bytes = 0
        self._hb_deadline = None
        self._queue_pull(now)

    def drain(self) -> None:
        """No new pulls; messages already buffered are still taken."""
        if self.state is PullState.ACTIVE:
            self.state = PullState.DRAINING
            self._hb_deadline = None

    def stop(self) -> None:
        """Finish now."""
        self.state = PullState.DONE
        self._hb_deadline = None
        self._fetch_deadline = None

    @property
    def finished(self) -> bool:
        """Nothing more will be buffered (done or draining) — the driver ends the
        iteration once the buffer is empty."""
        return self.state is not PullState.ACTIVE

    def disconnected(self) -> None:
        """The connection dropped: pause the heartbeat timer (ADR-37)."""
        if not self.connected:
            return
        self.connected = False
        self._hb_deadline = None
        if self.state is not PullState.DONE:
            self._events.append(Disconnected())

    def reconnected(self, now: float) -> None:
        """The connection is back and the consumer exists: resume and pull afresh.

        Pulls sent on the old connection died with it, so pending counts restart
        from zero (buffered messages stay counted).
        """
        was_connected, self.connected = self.connected, True
        if self.state is PullState.DONE:
            return
        if not was_connected:
            self._events.append(Reconnected())
        self.pending_messages = 0
        self.pending_bytes = 0
        self._last_activity = now
        if self.mode is Mode.FETCH:
            # A fetch's single pull is gone; nothing will answer it.
            self._end_fetch("expired")
            return
        self._queue_pull(now)

    def consumer_exists(self, now: float) -> None:
        """The driver's answer to ``CheckConsumer``: the consumer exists. The pull
        goes out again, expiring when the first one would have; with too little
        time left, the fetch ends with the 503."""
        if self.state is not PullState.ACTIVE or not self._checking:
            return
        self._checking = False
        expires = self._retry_expires(now)
        if expires is None:
            self.state = PullState.DONE
            self._fetch_deadline = None
            self._events.append(Terminated(503, "No Responders"))
            return
        self.no_responder_retries += 1
        self._queue_pull(now, expires)

    def terminate(self, code: int, description: str) -> None:
        """End with a terminal error found outside the pull inbox (e.g. the
        consumer is gone after a reconnect)."""
        if self.state is not PullState.DONE:
            self.state = PullState.DONE
            self._hb_deadline = None
            self._fetch_deadline = None
            self._events.append(Terminated(code, description))

    # -- internals --

    def _retry_expires(self, now: float) -> float | None:
        """The expiry of a pull sent again now, or None when too little is left
        (the server wants at least twice the idle heartbeat)."""
        if self._expires_at is None:
            return None
        left = self._expires_at - now
        hb = self.options.idle_heartbeat
        if left < MIN_RETRY_EXPIRES or (hb is not None and left < 2 * hb):
            return None
        return left

    def _unpin(self) -> None:
        if self.pin_id is not None:
            self.pin_id = None
            self._events.append(Unpinned())

    def _end_fetch(self, reason: str) -> None:
        self.state = PullState.DONE
        self._hb_deadline = None
        self._fetch_deadline = None
        self._events.append(PullEnded(reason))

    def _queue_pull(self, now: float, retry_expires: float | None = None) -> None:
        pull = self._pull_if_needed(now, retry_expires)
        if pull is not None:
            self._events.append(pull)

    def _pull_if_needed(self, now: float, retry_expires: float | None = None) -> PullRequest | None:
        if self.state is not PullState.ACTIVE or not self.connected:
            return None
        opts = self.options
        if self.mode is Mode.FETCH and self.pulls and retry_expires is None:
            return None  # a fetch is exactly one pull (sent again only after a 503)
        out_msgs = self.pending_messages + self.buffered_messages
        if opts.max_bytes is None:
            if out_msgs > opts.threshold_messages or out_msgs >= opts.max_messages:
                return None
            batch = opts.max_messages - out_msgs
            max_bytes = None
        else:
            out_bytes = self.pending_bytes + self.buffered_bytes
            room_msgs = opts.max_messages - out_msgs
            room_bytes = opts.max_bytes - out_bytes
            if room_bytes <= 0 or room_msgs <= 0:
                return None
            if out_bytes > opts.threshold_bytes and out_msgs > opts.threshold_messages:
                return None
            batch = room_msgs
            max_bytes = room_bytes
            self.pending_bytes += max_bytes
            self._last_pull_full = max_bytes == opts.max_bytes
            self._received_at_pull = self.received
        self.pending_messages += batch
        self.pulls += 1
        if opts.idle_heartbeat is not None:
            # The server's heartbeats for this pull start now.
            self._last_activity = now
            if self._hb_deadline is None:
                self._hb_deadline = now + 2 * opts.idle_heartbeat
        return PullRequest(
            batch=batch,
            max_bytes=max_bytes,
            expires=opts.expires if retry_expires is None else retry_expires,
            idle_heartbeat=opts.idle_heartbeat,
            group=opts.group,
            pin_id=self.pin_id,
            min_pending=opts.min_pending,
            min_ack_pending=opts.min_ack_pending,
            priority=opts.priority,
        )


def _ns(seconds: float) -> int:
    return round(seconds * 1_000_000_000)
