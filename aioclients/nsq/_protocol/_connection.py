"""One nsqd connection as a pure state machine: bytes in, events and bytes out.

Theory of operation (client library guide, "Connection Handling", "Feature
Negotiation", "Data Flow and Heartbeats"; TCP Protocol Spec, IDENTIFY and AUTH):

    INIT --start()--> IDENTIFYING --answer--> [TLS] --OK--> [COMPRESSION] --OK-->
    [AUTHENTICATING] --JSON--> SUBSCRIBING --OK--> SUBSCRIBED --cls()--> CLOSING
                                    \\--(producer)--> READY
    any state --connection_lost()/fatal error--> CLOSED

- ``start()`` queues the magic ``"  V2"`` and IDENTIFY. A plain ``OK`` answer means
  the server does not negotiate features: ``max_rdy_count`` is then 2500.
- TLS (``tls_v1``): the driver upgrades the socket when it sees :class:`UpgradeTLS`,
  then nsqd sends ``OK`` over TLS. Compression (snappy or deflate): nsqd sends one
  more, compressed, ``OK``; on :class:`UpgradeCompression` the decoder stops at the
  IDENTIFY answer so that the driver can route the rest of the bytes
  (:meth:`ConnectionCore.take_buffered`) through the decompressor.
- AUTH is sent only when the answer says ``auth_required`` (the spec forbids it
  otherwise); a missing secret then fails the handshake with a clear message.
- Heartbeats are answered with NOP here, so the driver cannot forget. The watchdog
  deadline (:meth:`get_timer`) is two heartbeat intervals plus a margin (5 s, or
  one interval if shorter) after the last byte received; during the handshake it
  is the handshake timeout.
- Errors: ``E_FIN_FAILED``, ``E_REQ_FAILED``, ``E_TOUCH_FAILED`` are reported and
  the connection stays; nsqd closes the connection after any other error, so the
  core moves to CLOSED. Errors during the handshake raise.
- ``in_flight`` holds the ids of messages received and not yet FIN'd or REQ'd (with
  their arrival time). More of them than the largest RDY ever sent, not counting
  those whose msg_timeout has passed, means nsqd ignores RDY: a protocol error
  that closes the connection, so a broken server cannot fill our memory
  (client library guide, "RDY State").
- A message larger than ``max_message_size`` is not an error (nsqd's limit may be
  higher than ours): its body is read past and :class:`OversizedMessage` reports
  it, in flight, for the owner to FIN.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Any, Final, NamedTuple

from aioclients._errors import LocalProtocolError
from aioclients.nsq._errors import (
    NSQConnectError,
    NSQError,
    NSQProtocolError,
    identify_refused,
    parse_error_frame,
)
from aioclients.nsq._protocol import _frames as F

__all__ = (
    "Authenticated",
    "CloseWait",
    "ConnectionCore",
    "ConnectionState",
    "ErrorReceived",
    "Event",
    "Heartbeat",
    "IdentifyResponse",
    "Identified",
    "MessageReceived",
    "OversizedMessage",
    "Ready",
    "Response",
    "Subscribed",
    "TimedOut",
    "UpgradeCompression",
    "UpgradeTLS",
)

DEFAULT_MAX_RDY_COUNT: Final = 2500
HANDSHAKE_FRAME_LIMIT: Final = 1024 * 1024
HEARTBEAT_MARGIN: Final = 5.0


class ConnectionState(enum.Enum):
    INIT = "init"
    IDENTIFYING = "identifying"
    TLS = "tls"
    COMPRESSION = "compression"
    AUTHENTICATING = "authenticating"
    SUBSCRIBING = "subscribing"
    SUBSCRIBED = "subscribed"
    READY = "ready"
    CLOSING = "closing"
    CLOSED = "closed"


# The states the per-message paths compare with, as plain globals (an enum member
# taken from its class is an attribute lookup through the enum's metaclass).
_CLOSED: Final = ConnectionState.CLOSED
_SUBSCRIBED: Final = ConnectionState.SUBSCRIBED


@dataclass(frozen=True, slots=True)
class IdentifyResponse:
    """nsqd's answer to IDENTIFY (feature negotiation); defaults describe a plain OK."""

    max_rdy_count: int = DEFAULT_MAX_RDY_COUNT
    version: str = ""
    max_msg_timeout: int = 0
    msg_timeout: int = 0
    tls_v1: bool = False
    deflate: bool = False
    deflate_level: int = 0
    max_deflate_level: int = 0
    snappy: bool = False
    sample_rate: int = 0
    auth_required: bool = False
    output_buffer_size: int = 0
    output_buffer_timeout: int = 0
    feature_negotiation: bool = False

    @classmethod
    def parse(cls, data: bytes, offset: int = 0) -> IdentifyResponse:
        """Parse the IDENTIFY answer (``OK`` or a JSON object).

        Raises:
            NSQProtocolError: neither ``OK`` nor a JSON object with sane fields.
        """
        if data == b"OK":
            return cls()
        try:
            doc = json.loads(data)
        except ValueError:
            raise NSQProtocolError(
                f"IDENTIFY answer is neither OK nor JSON: {data[:60]!r}", offset=offset
            ) from None
        if not isinstance(doc, dict):
            raise NSQProtocolError("IDENTIFY answer is not a JSON object", offset=offset)

        def num(name: str, default: int) -> int:
            value = doc.get(name, default)
            if not isinstance(value, int) or isinstance(value, bool):
                raise NSQProtocolError(f"IDENTIFY answer: {name} is not an integer", offset=offset)
            return value

        max_rdy = num("max_rdy_count", DEFAULT_MAX_RDY_COUNT)
        if max_rdy < 0:
            raise NSQProtocolError("IDENTIFY answer: negative max_rdy_count", offset=offset)
        return cls(
            max_rdy_count=max_rdy,
            version=str(doc.get("version", "")),
            max_msg_timeout=num("max_msg_timeout", 0),
            msg_timeout=num("msg_timeout", 0),
            tls_v1=bool(doc.get("tls_v1", False)),
            deflate=bool(doc.get("deflate", False)),
            deflate_level=num("deflate_level", 0),
            max_deflate_level=num("max_deflate_level", 0),
            snappy=bool(doc.get("snappy", False)),
            sample_rate=num("sample_rate", 0),
            auth_required=bool(doc.get("auth_required", False)),
            output_buffer_size=num("output_buffer_size", 0),
            output_buffer_timeout=num("output_buffer_timeout", 0),
            feature_negotiation=True,
        )


class Event:
    """Base of the events :meth:`ConnectionCore.receive_data` returns."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Identified(Event):
    response: IdentifyResponse


@dataclass(frozen=True, slots=True)
class UpgradeTLS(Event):
    """Start TLS on the socket now; call :meth:`ConnectionCore.tls_started` after."""


@dataclass(frozen=True, slots=True)
class UpgradeCompression(Event):
    """From the next byte on, both directions are compressed with ``kind``."""

    kind: str  # "snappy" or "deflate"
    level: int


@dataclass(frozen=True, slots=True)
class Authenticated(Event):
    identity: str
    identity_url: str
    permission_count: int


@dataclass(frozen=True, slots=True)
class Subscribed(Event):
    """SUB was accepted: the consumer may send RDY."""

    max_rdy_count: int


@dataclass(frozen=True, slots=True)
class Ready(Event):
    """A publishing connection finished its handshake."""


class MessageReceived(NamedTuple):
    """A message frame. The one event made per message, so it is an immutable
    NamedTuple: about half the construction cost of a frozen dataclass."""

    timestamp: int
    attempts: int
    id: bytes
    body: bytes


@dataclass(frozen=True, slots=True)
class OversizedMessage(Event):
    """A message whose body is larger than ``max_message_size``: its body was read
    past, not kept. It is in flight (nsqd counts it against RDY) until FIN'd."""

    timestamp: int
    attempts: int
    id: bytes
    body_size: int


@dataclass(frozen=True, slots=True)
class Heartbeat(Event):
    """nsqd sent ``_heartbeat_``; a NOP is already queued."""


@dataclass(frozen=True, slots=True)
class Response(Event):
    """A response frame outside the handshake (``OK`` to PUB, MPUB, DPUB)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class ErrorReceived(Event):
    """An error frame; ``error.fatal`` says whether nsqd closes the connection."""

    error: NSQError


@dataclass(frozen=True, slots=True)
class CloseWait(Event):
    """nsqd acknowledged CLS."""


@dataclass(frozen=True, slots=True)
class TimedOut(Event):
    reason: str


_HANDSHAKE_STATES = frozenset(
    {
        ConnectionState.IDENTIFYING,
        ConnectionState.TLS,
        ConnectionState.COMPRESSION,
        ConnectionState.AUTHENTICATING,
        ConnectionState.SUBSCRIBING,
    }
)
_HEARTBEAT: Final = b"_heartbeat_"
_ID: Final = itemgetter(2)  # of a message row: timestamp, attempts, id, body
_CLOSE_WAIT: Final = b"CLOSE_WAIT"


class ConnectionCore:
    """Pure state of one connection to nsqd.

    Args:
        identify: the IDENTIFY fields to send (``feature_negotiation`` is forced on).
        topic, channel: set both for a consumer (SUB after the handshake); leave both
            ``None`` for a publisher.
        auth_secret: sent with AUTH when nsqd requires it.
        tls: whether TLS was asked for; nsqd refusing it fails the handshake.
        max_message_size: largest message body accepted after the handshake.
        handshake_timeout: seconds for the whole handshake.
        heartbeat_interval: seconds between nsqd's heartbeats, ``None`` if disabled.
    """

    def __init__(
        self,
        *,
        identify: Mapping[str, Any],
        topic: str | None = None,
        channel: str | None = None,
        auth_secret: str | bytes | None = None,
        tls: bool = False,
        max_message_size: int = 1024 * 1024,
        handshake_timeout: float = 10.0,
        heartbeat_interval: float | None = 30.0,
    ) -> None:
        if (topic is None) != (channel is None):
            raise LocalProtocolError("give both topic and channel (consumer) or neither")
        if topic is not None and channel is not None:
            self._sub: bytes | None = F.encode_sub(topic, channel)
        else:
            self._sub = None
        self._identify = dict(identify)
        self._identify["feature_negotiation"] = True
        self._auth_secret = auth_secret
        self._tls = tls
        self.state = ConnectionState.INIT
        self.decoder = F.FrameDecoder(HANDSHAKE_FRAME_LIMIT)
        self._max_message_size = max_message_size
        self._out = bytearray()
        #: The ids of the FINs queued since the last other command: written as one
        #: join (one formatting per write, not per message) before whatever is
        #: queued next (_settle), so the byte stream is that of a FIN at a time. A
        #: driver may queue a FIN here itself, as :meth:`fin_if_in_flight` does (the
        #: state not CLOSED, the id popped from ``in_flight``), without the call.
        self.fins: list[bytes] = []
        # id -> when it arrived; nsqd stops counting a message against RDY once its
        # msg_timeout passes (it re-queues it), so the arrival time matters.
        self.in_flight: dict[bytes, float] = {}
        self.rdy_allowance = 0  # the largest RDY sent: see _check_rdy_overflow
        self.identify_response: IdentifyResponse | None = None
        self._handshake_timeout = handshake_timeout
        self._heartbeat_interval = heartbeat_interval
        self._deadline = math.inf
        self._last_received = 0.0
        self.pending_responses = 0  # PUB/MPUB/DPUB sent and not answered yet
        #: A consumer's owner may set these: then each message frame received in
        #: the steady state becomes ``make_message(id, body, timestamp, attempts,
        #: *make_with)`` (``make_with``: two values of the owner's, passed as they
        #: are), appended to ``received`` (which the owner empties) instead of a
        #: :class:`MessageReceived` event, saving an event and a dispatch per
        #: message. A message delivered more than ``attempts_limit`` times (when
        #: above 0) is still a :class:`MessageReceived` event, for the owner to
        #: give up on.
        self.make_message: Callable[[bytes, bytes, int, int, Any, Any], Any] | None = None
        #: And this, for a read whose message frames are read as rows
        #: (:func:`~aioclients.nsq._protocol._frames.message_rows`: ``(timestamp,
        #: attempts, id, body)`` each): ``make_messages(rows, *make_with)``, what
        #: ``make_message`` would make of each row, in one call.
        self.make_messages: (
            Callable[[list[tuple[int, int, bytes, bytes]], Any, Any], Iterable[Any]] | None
        ) = None
        self.make_with: tuple[Any, Any] = (None, None)
        self.attempts_limit = 0
        self.received: list[Any] = []

    # ---- outgoing -------------------------------------------------------------------

    def start(self, now: float) -> None:
        """Queue the magic and IDENTIFY."""
        self._expect(ConnectionState.INIT, "start")
        self._out += F.MAGIC_V2
        self._out += F.encode_identify(self._identify)
        self.state = ConnectionState.IDENTIFYING
        self._deadline = now + self._handshake_timeout
        self._last_received = now

    def data_to_send(self) -> bytes:
        """Return and clear the bytes queued for the socket."""
        if self.fins:
            self._settle()
        out = self._out
        if not out:
            return b""
        data = bytes(out)
        out.clear()
        return data

    def _settle(self) -> None:
        """Write the queued FINs into the output (before anything queued after them)."""
        fins = self.fins
        self._out += b"FIN %b\n" % b"\nFIN ".join(fins)
        fins.clear()

    def _queue(self, command: bytes) -> None:
        """Queue ``command`` after the FINs queued before it (the byte stream stays
        that of one command at a time, in the order they were made)."""
        if self.fins:
            self._settle()
        self._out += command

    @property
    def has_data_to_send(self) -> bool:
        return bool(self._out) or bool(self.fins)

    @property
    def pending_bytes(self) -> int:
        """Bytes queued and not yet taken by :meth:`data_to_send`."""
        return len(self._out) + sum(len(i) + 5 for i in self.fins)

    def send_rdy(self, count: int) -> None:
        if self.state is not ConnectionState.SUBSCRIBED:
            if self.state is ConnectionState.CLOSING or self.state is ConnectionState.CLOSED:
                return  # nsqd ignores RDY after CLS; nothing to say on a dead connection
            raise LocalProtocolError(f"RDY before SUB was accepted (state {self.state.value})")
        self._queue(F.encode_rdy(count))
        if count > self.rdy_allowance:
            self.rdy_allowance = count

    def _respond_check(self, message_id: bytes, what: str) -> None:
        if message_id not in self.in_flight:
            raise LocalProtocolError(f"{what}: message {message_id!r} is not in flight here")
        if self.state is ConnectionState.CLOSED:
            raise LocalProtocolError(f"{what}: the connection is closed")

    def fin(self, message_id: bytes) -> None:
        self._respond_check(message_id, "FIN")
        self.in_flight.pop(message_id, None)
        self.fins.append(message_id)

    def fin_if_in_flight(self, message_id: bytes) -> bool | None:
        """Queue FIN when the message is in flight here (True); False (nothing
        queued) when it is not (answered already, or its id was delivered again and
        answered); None (nothing queued) when the connection is closed: nsqd
        re-delivers the message after its timeout, there is nothing to say."""
        if self.state is _CLOSED:
            return None
        if self.in_flight.pop(message_id, None) is None:
            return False
        self.fins.append(message_id)
        return True

    def req(self, message_id: bytes, delay_ms: int) -> None:
        self._respond_check(message_id, "REQ")
        self._queue(F.encode_req(message_id, delay_ms))
        self.in_flight.pop(message_id, None)

    def touch(self, message_id: bytes) -> None:
        self._respond_check(message_id, "TOUCH")
        self._queue(F.encode_touch(message_id))

    def cls(self) -> None:
        """Queue CLS (consumers); nsqd answers CLOSE_WAIT and stops sending messages."""
        if self.state is not ConnectionState.SUBSCRIBED:
            raise LocalProtocolError(
                f"CLS is for subscribed connections (state {self.state.value})"
            )
        self._queue(F.encode_cls())
        self.state = ConnectionState.CLOSING

    def publish(self, command: bytes) -> None:
        """Queue an encoded PUB, MPUB or DPUB; its answer comes back in order."""
        if self.state is not ConnectionState.READY:
            raise LocalProtocolError(
                f"publishing needs a READY connection (state {self.state.value})"
            )
        self._queue(command)
        self.pending_responses += 1

    def connection_lost(self) -> None:
        self.state = ConnectionState.CLOSED
        self._deadline = math.inf

    # ---- timers ---------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """The next deadline (handshake or heartbeat watchdog), or ``None``."""
        if self.state in _HANDSHAKE_STATES:
            return self._deadline
        if self.state is ConnectionState.CLOSED or self._heartbeat_interval is None:
            return None
        interval = self._heartbeat_interval
        # the margin never exceeds one interval, so a short interval (fast failure
        # detection) is not drowned by the default margin
        return self._last_received + 2 * interval + min(HEARTBEAT_MARGIN, interval)

    def handle_timer(self, now: float) -> list[Event]:
        deadline = self.get_timer()
        if deadline is None or now < deadline:
            return []
        if self.state in _HANDSHAKE_STATES:
            reason = (
                f"no answer to the handshake ({self.state.value}) within {self._handshake_timeout}s"
            )
        else:
            silent = now - self._last_received
            reason = f"nothing received from nsqd for {silent:.1f}s (heartbeats stopped)"
        self.state = ConnectionState.CLOSED
        return [TimedOut(reason)]

    # ---- incoming -------------------------------------------------------------------

    def take_buffered(self) -> bytes:
        """Bytes received but not decoded (after :class:`UpgradeCompression`)."""
        return self.decoder.take_buffered()

    def tls_started(self) -> None:
        """The driver finished the TLS handshake; nsqd's OK comes next."""
        self._expect(ConnectionState.TLS, "tls_started")

    def receive_data(self, data: bytes, now: float) -> list[Event | MessageReceived]:
        """Feed bytes from nsqd; return what happened.

        Raises:
            NSQProtocolError: malformed bytes.
            NSQError: nsqd refused a handshake step (bad topic, auth failed ...).
            NSQConnectError: nsqd refused TLS that was asked for, or wants AUTH and no
                secret was given.
        """
        self._last_received = now
        state = self.state
        if state is _SUBSCRIBED:
            if self.make_message is not None:
                return self._steady_made(data, now)
            return self._steady(self.decoder.feed(data), now)
        if state is ConnectionState.READY:
            return self._steady(self.decoder.feed(data), now)
        if state in _HANDSHAKE_STATES:
            return self._handshake(data, now)
        if state is ConnectionState.CLOSING:
            return self._steady(self.decoder.feed(data), now)
        if state is ConnectionState.CLOSED:
            return []
        raise LocalProtocolError("receive_data() before start()")

    def _steady_made(self, data: bytes, now: float) -> list[Event | MessageReceived]:
        """The steady state of a consumer whose owner makes its messages: the
        message frames at the start of the bytes are decoded and made in one loop
        (no frame list, the body sliced once), or, when they all have one size, as
        rows (``make_messages``); from the first other frame on (a heartbeat, a
        response, an error, anything malformed or oversized) the decoder's general
        path takes the rest."""
        decoder = self.decoder
        whole = decoder.view(data)
        if whole is None:
            return self._steady(decoder.feed(data), now)
        events: list[Event | MessageReceived] = []
        in_flight = self.in_flight
        make = self.make_message
        assert make is not None
        made = self.received.append
        with_a, with_b = self.make_with
        limit = self.attempts_limit or 0x10000  # attempts are 16 bits
        unpack = F._MESSAGE_FRAME_HEAD.unpack_from  # size, type, timestamp, attempts
        message = F.FRAME_MESSAGE
        # a message frame's size counts the type, the 26-byte header and the body
        smallest = 4 + F.MESSAGE_HEADER_SIZE
        largest = decoder.max_frame_size + 4
        pos = 0
        end = len(whole)
        other = False
        # A read of same-sized messages (the usual one) as rows, in one C pass;
        # the frames after them (or all, when refused) one at a time below.
        # (Refused when some are to be given up: one at a time, below.)
        got = F.message_rows(whole, smallest, largest, self.attempts_limit)
        if got is not None:
            rows, pos = got
            in_flight.update(zip(map(_ID, rows), repeat(now)))
            make_many = self.make_messages
            if make_many is None:
                self.received += [make(i, body, ts, n, with_a, with_b) for ts, n, i, body in rows]
            else:
                self.received += make_many(rows, with_a, with_b)
        while end - pos >= 18:
            size, ftype, ts, attempts = unpack(whole, pos)
            if ftype != message or size < smallest or size > largest:
                other = True
                break
            stop = pos + 4 + size
            if stop > end:
                break
            message_id = whole[pos + 18 : pos + 34]
            in_flight[message_id] = now
            if attempts <= limit:
                made(make(message_id, whole[pos + 34 : stop], ts, attempts, with_a, with_b))
            else:
                events.append(MessageReceived(ts, attempts, message_id, whole[pos + 34 : stop]))
            pos = stop
        if not other and end - pos >= 8:
            # a frame header without the 18 bytes above: a frame shorter than that
            # is no message (the general path takes it), else wait for the rest
            size, ftype = F._HEADER.unpack_from(whole, pos)
            other = ftype != message or size < smallest or size > largest
        decoder.consumed(whole, pos)
        if other:
            events.extend(self._steady(decoder.feed(b""), now))
        elif len(in_flight) > self.rdy_allowance:  # once per read, not per message
            self._check_rdy_overflow(now)
        return events

    def _steady(self, frames: list[tuple[int, bytes]], now: float) -> list[Event | MessageReceived]:
        events: list[Event | MessageReceived] = []
        append = events.append
        in_flight = self.in_flight
        make = self.make_message
        made = self.received.append
        with_a, with_b = self.make_with
        limit = self.attempts_limit or 0x10000  # attempts are 16 bits
        unpack = F._MESSAGE_HEAD.unpack_from
        for ftype, payload in frames:
            if ftype == 2:
                message_id = payload[10:26]
                in_flight[message_id] = now
                ts, attempts = unpack(payload, 0)
                if make is not None and attempts <= limit:
                    made(make(message_id, payload[26:], ts, attempts, with_a, with_b))
                else:
                    append(MessageReceived(ts, attempts, message_id, payload[26:]))
            elif ftype == 0:
                if payload == _HEARTBEAT:
                    self._queue(b"NOP\n")
                    append(Heartbeat())
                elif payload == _CLOSE_WAIT:
                    append(CloseWait())
                else:
                    if self.pending_responses:
                        self.pending_responses -= 1
                    append(Response(payload))
            elif ftype == 1:
                error = self._error(payload)
                if error.fatal:
                    if self.pending_responses:
                        self.pending_responses -= 1
                    self.state = ConnectionState.CLOSED
                append(ErrorReceived(error))
            else:  # F.FRAME_OVERSIZED_MESSAGE
                ts, attempts, message_id, body_size = F.parse_oversized_message(payload)
                in_flight[message_id] = now
                append(OversizedMessage(ts, attempts, message_id, body_size))
        if len(in_flight) > self.rdy_allowance:  # once per read, not per message
            self._check_rdy_overflow(now)
        return events

    def _check_rdy_overflow(self, now: float) -> None:
        """More messages in flight than any RDY we sent: unless some of them timed
        out at nsqd (no longer counted there), nsqd ignores RDY, and would fill our
        memory. Checked once per read (a read is bounded), and the count is only
        taken when the number held exceeds the allowance.

        Sound against a correct nsqd: a message that arrived less than msg_timeout
        ago was sent less than msg_timeout ago, so nsqd still counted it when it sent
        the newest one, and nsqd sends only while its count is below its RDY, which
        is never above the largest RDY we sent (a lowered RDY may not have reached
        it yet, so the allowance never goes down). Ids we answered are not counted
        here but may still be there: that errs on the side of the server.

        Raises:
            NSQProtocolError: nsqd went over the RDY it was given.
        """
        response = self.identify_response
        timeout = response.msg_timeout / 1000 if response and response.msg_timeout > 0 else 1.0
        cutoff = now - timeout
        live = sum(1 for arrived in self.in_flight.values() if arrived > cutoff)
        if live > self.rdy_allowance:
            self.state = ConnectionState.CLOSED
            raise NSQProtocolError(
                f"nsqd sent {live} messages in flight when it was given at most "
                f"RDY {self.rdy_allowance}: it ignores RDY; closing the connection",
                offset=self.decoder.offset,
            )

    def _handshake(self, data: bytes, now: float) -> list[Event | MessageReceived]:
        events: list[Event | MessageReceived] = []
        pending = data
        while self.state in _HANDSHAKE_STATES:
            frames = self.decoder.feed(pending, limit=1)
            pending = b""
            if not frames:
                break
            offset = self.decoder.offset
            ftype, payload = frames[0]
            if ftype == F.FRAME_ERROR:
                refused_identify = self.state is ConnectionState.IDENTIFYING
                self.state = ConnectionState.CLOSED
                error = self._error(payload)
                if refused_identify:
                    error = identify_refused(error)
                raise error
            if ftype == F.FRAME_MESSAGE or ftype == F.FRAME_OVERSIZED_MESSAGE:
                raise NSQProtocolError(
                    f"message frame during the handshake ({self.state.value})", offset=offset
                )
            if payload == _HEARTBEAT:
                self._queue(b"NOP\n")
                continue
            if self._step(payload, offset, events):
                break  # the driver must switch transport or encoding first
        if self.state is ConnectionState.SUBSCRIBED or self.state is ConnectionState.READY:
            rest = self.decoder.feed(b"")
            events.extend(self._steady(rest, now))
        return events

    def _step(self, payload: bytes, offset: int, events: list[Event | MessageReceived]) -> bool:
        """Advance the handshake by one answer; True when the driver must act first."""
        state = self.state
        if state is ConnectionState.IDENTIFYING:
            response = IdentifyResponse.parse(payload, offset)
            self.identify_response = response
            events.append(Identified(response))
            if self._tls:
                if not response.tls_v1:
                    self.state = ConnectionState.CLOSED
                    raise NSQConnectError(
                        "TLS was requested but nsqd did not agree to it "
                        "(start nsqd with --tls-cert and --tls-key, or pass tls=None)"
                    )
                self.state = ConnectionState.TLS
                events.append(UpgradeTLS())
                return True
            return self._after_tls(events)
        if payload != b"OK" and state in (ConnectionState.TLS, ConnectionState.COMPRESSION):
            raise NSQProtocolError(f"expected OK after the {state.value} upgrade", offset=offset)
        if state is ConnectionState.TLS:
            return self._after_tls(events)
        if state is ConnectionState.COMPRESSION:
            self._after_compression(events)
            return False
        if state is ConnectionState.AUTHENTICATING:
            try:
                doc = json.loads(payload)
            except ValueError:
                doc = None
            if not isinstance(doc, dict):
                raise NSQProtocolError("AUTH answer is not a JSON object", offset=offset)
            count = doc.get("permission_count", 0)
            events.append(
                Authenticated(
                    str(doc.get("identity", "")),
                    str(doc.get("identity_url", "")),
                    count if isinstance(count, int) else 0,
                )
            )
            self._after_auth(events)
            return False
        if state is ConnectionState.SUBSCRIBING:
            if payload != b"OK":
                raise NSQProtocolError(f"expected OK to SUB, got {payload[:40]!r}", offset=offset)
            self._enter_steady(events)
            return False
        raise LocalProtocolError(f"no handshake step in state {state.value}")  # pragma: no cover

    def _after_tls(self, events: list[Event | MessageReceived]) -> bool:
        response = self.identify_response
        assert response is not None
        if response.snappy or response.deflate:
            self.state = ConnectionState.COMPRESSION
            if response.snappy:
                events.append(UpgradeCompression("snappy", 0))
            else:
                events.append(UpgradeCompression("deflate", response.deflate_level or 6))
            return True
        self._after_compression(events)
        return False

    def _after_compression(self, events: list[Event | MessageReceived]) -> None:
        response = self.identify_response
        assert response is not None
        if response.auth_required:
            if self._auth_secret is None:
                self.state = ConnectionState.CLOSED
                raise NSQConnectError("nsqd requires AUTH: pass auth_secret=...")
            self._out += F.encode_auth(self._auth_secret)
            self.state = ConnectionState.AUTHENTICATING
            return
        self._after_auth(events)

    def _after_auth(self, events: list[Event | MessageReceived]) -> None:
        if self._sub is not None:
            self._out += self._sub
            self.state = ConnectionState.SUBSCRIBING
        else:
            self._enter_steady(events)

    def _enter_steady(self, events: list[Event | MessageReceived]) -> None:
        self.decoder.max_frame_size = self._max_message_size + F.MESSAGE_HEADER_SIZE
        response = self.identify_response
        assert response is not None
        if self._sub is not None:
            self.state = ConnectionState.SUBSCRIBED
            events.append(Subscribed(response.max_rdy_count))
        else:
            self.state = ConnectionState.READY
            events.append(Ready())

    def _error(self, payload: bytes) -> NSQError:
        """The error in an error frame, with our auth secret cut out: an auth server
        may quote what it was given, and the error is logged and raised."""
        secret = self._auth_secret
        if secret:
            raw = secret.encode() if isinstance(secret, str) else bytes(secret)
            payload = payload.replace(raw, b"***")
        return parse_error_frame(payload)

    def _expect(self, state: ConnectionState, what: str) -> None:
        if self.state is not state:
            raise LocalProtocolError(
                f"{what}() in state {self.state.value}, expected {state.value}"
            )
