"""A sans-I/O HTTP/2 client connection that carries gRPC calls.

Theory of operation. ``grpc.aio`` costs well over 100 us of CPU for every
message it reads from a stream: each read is a separate operation handed
between gRPC's core and the event loop. A subscriber or a pipelined publisher
moves small messages by the thousand, so a client speaks gRPC's HTTP/2 mapping
itself on its hot streams: one socket read is decoded into every
complete frame and every complete gRPC message it holds, in one pass.

This module is the pure part: bytes in, events and bytes out, no sockets and
no clock. The driver (``aioclients._grpc_h2._io._h2``) feeds what the socket
reads to :meth:`H2Connection.receive`, writes :meth:`H2Connection.data_to_send`
and turns the events into call results.

What it implements (RFC 9113, and the gRPC over HTTP/2 protocol):

* the client preface, SETTINGS and their acknowledgement, PING answers, GOAWAY;
* request HEADERS through our HPACK encoder (``_hpack``): the headers every
  call repeats are indexed in the dynamic table, so after the first call they
  cost a byte each; the block of a path whose fields are all indexed is kept
  until the table changes. Application metadata is never indexed. Response
  HEADERS and trailers go through a full HPACK decoder (``hpack``); a block of
  indexed fields only is decoded once while the table stays the same;
  CONTINUATION frames, padding and priority fields;
* flow control both ways. Receiving: each stream advertises ``stream_window``
  bytes and credit is given back only when the application *consumes* a
  message (:meth:`consumed`), so a slow reader holds the server back instead
  of filling memory. A message that does not fit in what is left of the
  window is let in whole (the window opens in advance by what it misses), so
  a stream buffers at most one window and one message. The connection window
  is credited on receipt. Sending: DATA waits in a per-stream queue while the
  peer's windows are closed;
* gRPC length-prefixed messages, split across or packed into DATA frames; the
  last message of a request may carry END_STREAM on its last DATA frame;
* status: ``:status`` other than 200 is mapped as gRPC specifies, a missing
  ``grpc-status`` is INTERNAL, RST_STREAM codes are mapped as gRPC's core does;
* flood protection: while the driver says its transport is paused
  (:meth:`set_output_paused`) it takes no output, and at most
  ``MAX_QUEUED_CONTROL_REPLIES`` SETTINGS/PING acknowledgements may wait in it
  (until :meth:`data_to_send`). One more is a connection error: GOAWAY
  ENHANCE_YOUR_CALM, as nghttp2 and Go do.

Status codes are plain ints (gRPC's numbering); the driver turns them into
``grpc.StatusCode``.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote

import hpack

from aioclients._errors import LocalProtocolError, RemoteProtocolError
from aioclients._grpc_h2._protocol._hpack import INDEX, NAME, NEVER, HeaderEncoder

__all__ = (
    "CONNECTION_PREFACE",
    "ConnectionTerminated",
    "H2Connection",
    "Messages",
    "PingAcked",
    "ResponseHeaders",
    "StatusCode",
    "StreamEnded",
    "encode_grpc_timeout",
)

CONNECTION_PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types and flags (RFC 9113, section 6).
DATA: Final = 0x0
HEADERS: Final = 0x1
PRIORITY: Final = 0x2
RST_STREAM: Final = 0x3
SETTINGS: Final = 0x4
PUSH_PROMISE: Final = 0x5
PING: Final = 0x6
GOAWAY: Final = 0x7
WINDOW_UPDATE: Final = 0x8
CONTINUATION: Final = 0x9

FLAG_END_STREAM: Final = 0x1
FLAG_ACK: Final = 0x1
FLAG_END_HEADERS: Final = 0x4
FLAG_PADDED: Final = 0x8
FLAG_PRIORITY: Final = 0x20

# Settings identifiers.
SETTINGS_HEADER_TABLE_SIZE: Final = 0x1
SETTINGS_ENABLE_PUSH: Final = 0x2
SETTINGS_MAX_CONCURRENT_STREAMS: Final = 0x3
SETTINGS_INITIAL_WINDOW_SIZE: Final = 0x4
SETTINGS_MAX_FRAME_SIZE: Final = 0x5
SETTINGS_MAX_HEADER_LIST_SIZE: Final = 0x6

# Error codes (RFC 9113, section 7).
NO_ERROR: Final = 0x0
PROTOCOL_ERROR: Final = 0x1
INTERNAL_ERROR: Final = 0x2
FLOW_CONTROL_ERROR: Final = 0x3
STREAM_CLOSED: Final = 0x5
FRAME_SIZE_ERROR: Final = 0x6
REFUSED_STREAM: Final = 0x7
CANCEL: Final = 0x8
COMPRESSION_ERROR: Final = 0x9
ENHANCE_YOUR_CALM: Final = 0xB
INADEQUATE_SECURITY: Final = 0xC

_MAX_WINDOW: Final = 2**31 - 1
_DEFAULT_WINDOW: Final = 65_535
_DEFAULT_MAX_FRAME: Final = 16_384
_MAX_HEADER_BLOCK: Final = 1 << 20  # bytes of one header block we are willing to hold
# Replies to the server's control frames (SETTINGS ACK, PING ACK) queued while
# the driver's transport is paused (the server does not read what we write), so
# not handed to the driver. Without a cap a server that floods PINGs or SETTINGS
# and never reads grows our output without bound. nghttp2 allows 1000 such
# replies (``max_outbound_ack``), Go's x/net/http2 10000 control frames
# (``maxQueuedControlFrames``); we take nghttp2's, a ~17 KB queue at most.
MAX_QUEUED_CONTROL_REPLIES: Final = 1000
_MAX_CACHED_BLOCKS: Final = 64  # header blocks kept: requests (per path), responses


class StatusCode:
    """gRPC status codes (the numbers of the gRPC specification)."""

    OK: Final = 0
    CANCELLED: Final = 1
    UNKNOWN: Final = 2
    INVALID_ARGUMENT: Final = 3
    DEADLINE_EXCEEDED: Final = 4
    NOT_FOUND: Final = 5
    ALREADY_EXISTS: Final = 6
    PERMISSION_DENIED: Final = 7
    RESOURCE_EXHAUSTED: Final = 8
    FAILED_PRECONDITION: Final = 9
    ABORTED: Final = 10
    OUT_OF_RANGE: Final = 11
    UNIMPLEMENTED: Final = 12
    INTERNAL: Final = 13
    UNAVAILABLE: Final = 14
    DATA_LOSS: Final = 15
    UNAUTHENTICATED: Final = 16


# How gRPC maps an HTTP status that is not 200 (gRPC "http-grpc-status-mapping").
_HTTP_TO_GRPC: Final = {
    400: StatusCode.INTERNAL,
    401: StatusCode.UNAUTHENTICATED,
    403: StatusCode.PERMISSION_DENIED,
    404: StatusCode.UNIMPLEMENTED,
    429: StatusCode.UNAVAILABLE,
    502: StatusCode.UNAVAILABLE,
    503: StatusCode.UNAVAILABLE,
    504: StatusCode.UNAVAILABLE,
}

# How gRPC's core reports a stream the server reset.
_RST_TO_GRPC: Final = {
    NO_ERROR: StatusCode.INTERNAL,
    REFUSED_STREAM: StatusCode.UNAVAILABLE,
    CANCEL: StatusCode.CANCELLED,
    ENHANCE_YOUR_CALM: StatusCode.RESOURCE_EXHAUSTED,
    INADEQUATE_SECURITY: StatusCode.PERMISSION_DENIED,
}


# -- events ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResponseHeaders:
    """The response's initial headers arrived (the call is accepted)."""

    stream_id: int
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Messages:
    """Complete gRPC messages (payloads, without the 5-byte prefix), in order."""

    stream_id: int
    messages: list[bytes]


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The call is over: ``status`` 0 is success; the stream is forgotten.

    Messages that arrived before are delivered first. ``local`` is true when the
    status was made here (a reset, a broken rule) rather than sent by the server.
    """

    stream_id: int
    status: int
    message: str
    trailers: tuple[tuple[str, str], ...] = ()
    local: bool = False


@dataclass(frozen=True, slots=True)
class ConnectionTerminated:
    """The server sent GOAWAY: streams above ``last_stream_id`` were not processed.

    The connection takes no new streams; streams at or below ``last_stream_id``
    may still finish.
    """

    error_code: int
    last_stream_id: int
    debug: str


@dataclass(frozen=True, slots=True)
class PingAcked:
    """The server answered one of our PINGs."""

    payload: bytes


Event = ResponseHeaders | Messages | StreamEnded | ConnectionTerminated | PingAcked


# -- helpers ----------------------------------------------------------------------


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big")
        + bytes((kind, flags))
        + stream_id.to_bytes(4, "big")
        + payload
    )


def encode_grpc_timeout(seconds: float) -> str:
    """A ``grpc-timeout`` value: at most 8 digits and a unit, rounded up."""
    if seconds <= 0:
        return "1n"
    for unit, scale in (("n", 1e9), ("u", 1e6), ("m", 1e3), ("S", 1.0), ("M", 1 / 60)):
        value = int(-(-seconds * scale // 1))
        if value < 100_000_000:
            return f"{value}{unit}"
    return "99999999H"


def _check_header_value(what: str, value: str) -> None:
    if not value.isascii() or any(c in value for c in "\r\n\0"):
        raise LocalProtocolError(f"{what} {value!r} is not a valid HTTP/2 header value")


# -- the connection -------------------------------------------------------------------


@dataclass(slots=True)
class _Stream:
    stream_id: int
    send_window: int
    recv_credit: int = 0  # consumed bytes not yet given back with WINDOW_UPDATE
    recv_window: int = 0  # what the server may still send us on this stream
    partial: bytearray = field(default_factory=bytearray)
    headers_done: bool = False
    remote_closed: bool = False
    local_closed: bool = False
    end_after_send: bool = False  # END_STREAM to send once the queue is empty
    blocked: collections.deque[bytes] = field(default_factory=collections.deque)
    blocked_bytes: int = 0


class H2Connection:
    """One HTTP/2 connection to a gRPC server, client side.

    Args:
        authority: the ``:authority`` of requests (``host:port``).
        scheme: ``"http"`` or ``"https"``.
        stream_window: receive window of each stream, in bytes.
        connection_window: receive window of the connection, in bytes.
        max_message_size: largest gRPC message accepted; a larger one ends its
            call with RESOURCE_EXHAUSTED.
    """

    def __init__(
        self,
        *,
        authority: str,
        scheme: str = "http",
        stream_window: int = 4 * 1024 * 1024,
        connection_window: int = 64 * 1024 * 1024,
        max_message_size: int = 64 * 1024 * 1024,
        user_agent: str = "aioclients-grpc-h2",
    ) -> None:
        if not 1 <= stream_window <= _MAX_WINDOW or not 1 <= connection_window <= _MAX_WINDOW:
            raise ValueError("HTTP/2 windows must be between 1 and 2**31 - 1 bytes")
        _check_header_value("authority", authority)
        _check_header_value("user agent", user_agent)
        self._authority = authority
        self._scheme = scheme
        self._stream_window = stream_window
        self._connection_window = connection_window
        self._max_message = max_message_size
        self._user_agent = user_agent
        self._out = bytearray()
        self._in = bytearray()
        self._encoder = HeaderEncoder()
        self._request_blocks: dict[str, tuple[int, bytes]] = {}  # path: (generation, block)
        self._decoder = hpack.Decoder()
        # header blocks of indexed fields only, decoded (see _decode_headers)
        self._decoded: dict[bytes, tuple[tuple[str, str], ...]] = {}
        self._decoder.max_allowed_table_size = 65_536
        # What we advertise as SETTINGS_MAX_HEADER_LIST_SIZE (hpack's own default is 64 KiB).
        self._decoder.max_header_list_size = _MAX_HEADER_BLOCK
        self._streams: dict[int, _Stream] = {}
        self._next_stream_id = 1
        self._preface_seen = False  # the server's SETTINGS arrived
        self._peer_initial_window = _DEFAULT_WINDOW
        self._peer_max_frame = _DEFAULT_MAX_FRAME
        self._peer_max_streams: int | None = None
        self._send_window = _DEFAULT_WINDOW  # connection-level, towards the server
        self._recv_connection_credit = 0
        self._header_block: bytearray | None = None  # a HEADERS awaiting CONTINUATION
        self._header_stream = 0
        self._header_end_stream = False
        self.goaway: ConnectionTerminated | None = None
        self.closed = False  # a connection error happened: nothing more is accepted
        self._started = False
        self._queued_control = 0  # control replies queued while paused (MAX_QUEUED_...)
        self._output_paused = False

    # -- outgoing --------------------------------------------------------------

    def initiate(self) -> None:
        """Queue the client preface, our settings and the connection window."""
        if self._started:
            return
        self._started = True
        settings = b"".join(
            k.to_bytes(2, "big") + v.to_bytes(4, "big")
            for k, v in (
                (SETTINGS_ENABLE_PUSH, 0),
                (SETTINGS_INITIAL_WINDOW_SIZE, self._stream_window),
                (SETTINGS_MAX_HEADER_LIST_SIZE, _MAX_HEADER_BLOCK),
            )
        )
        self._out += CONNECTION_PREFACE + _frame(SETTINGS, 0, 0, settings)
        extra = self._connection_window - _DEFAULT_WINDOW
        if extra > 0:
            self._out += _frame(WINDOW_UPDATE, 0, 0, extra.to_bytes(4, "big"))

    def has_output(self) -> bool:
        return bool(self._out)

    def data_to_send(self) -> bytes:
        """The bytes to write now (and forget)."""
        if not self._out:
            return b""
        out = bytes(self._out)
        self._out.clear()
        self._queued_control = 0
        return out

    def set_output_paused(self, paused: bool) -> None:
        """The driver's transport stopped (True) or resumed (False) taking bytes.

        While paused the driver leaves the output here, and the server's
        SETTINGS and PINGs, whose acknowledgements must queue, are counted.
        """
        self._output_paused = paused

    @property
    def queued_control_replies(self) -> int:
        """SETTINGS/PING acknowledgements queued while paused, not yet taken."""
        return self._queued_control

    def _queue_control_reply(self, reply: bytes) -> None:
        if not self._output_paused:
            self._out += reply
            return
        if self._queued_control >= MAX_QUEUED_CONTROL_REPLIES:
            self.close(ENHANCE_YOUR_CALM)
            raise RemoteProtocolError(
                f"HTTP/2: the server sent more than {MAX_QUEUED_CONTROL_REPLIES} PING/SETTINGS "
                "frames while not reading our answers (a control-frame flood); the connection "
                "is closed with ENHANCE_YOUR_CALM"
            )
        self._queued_control += 1
        self._out += reply

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def can_start_stream(self) -> bool:
        """False once the server sent GOAWAY, the connection broke, or it is at its limit."""
        if self.closed or self.goaway is not None or self._next_stream_id > _MAX_WINDOW:
            return False
        return self._peer_max_streams is None or len(self._streams) < self._peer_max_streams

    def start_request(
        self,
        path: str,
        *,
        timeout: float | None = None,
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> int:
        """Open a stream with a gRPC request's headers; returns its id."""
        if not self.can_start_stream():
            raise LocalProtocolError("this HTTP/2 connection takes no new streams")
        # Everything is checked before the encoder's table changes: a block
        # that was encoded must be sent, or the server's table falls out of step.
        for name, value in metadata:
            lname = name.lower()
            if lname.startswith(":") or lname in ("te", "content-type", "grpc-timeout"):
                raise LocalProtocolError(f"metadata key {name!r} is reserved")
            _check_header_value("metadata key", lname)
            _check_header_value(f"metadata {name!r} value", value)
        encoder = self._encoder
        cached = self._request_blocks.get(path)
        if cached is not None and cached[0] == encoder.generation:
            block = cached[1]
        else:
            _check_header_value("path", path)
            generation = encoder.generation
            block = encoder.encode(
                (
                    (":method", "POST", INDEX),
                    (":scheme", self._scheme, INDEX),
                    (":path", path, INDEX),
                    (":authority", self._authority, INDEX),
                    ("content-type", "application/grpc", INDEX),
                    ("te", "trailers", INDEX),
                    ("user-agent", self._user_agent, INDEX),
                )
            )
            if encoder.generation == generation:  # all indexed: valid while the table stays
                if len(self._request_blocks) >= _MAX_CACHED_BLOCKS:
                    self._request_blocks.clear()
                self._request_blocks[path] = (generation, block)
        if timeout is not None or metadata:
            fields = [(name.lower(), value, NEVER) for name, value in metadata]
            if timeout is not None:
                fields.insert(0, ("grpc-timeout", encode_grpc_timeout(timeout), NAME))
            block += encoder.encode(fields)
        stream_id = self._next_stream_id
        self._next_stream_id += 2
        self._write_headers(stream_id, block)
        self._streams[stream_id] = _Stream(
            stream_id, self._peer_initial_window, recv_window=self._stream_window
        )
        return stream_id

    def _write_headers(self, stream_id: int, block: bytes) -> None:
        size = self._peer_max_frame
        first, rest = block[:size], block[size:]
        flags = 0 if rest else FLAG_END_HEADERS
        self._out += _frame(HEADERS, flags, stream_id, first)
        while rest:
            chunk, rest = rest[:size], rest[size:]
            self._out += _frame(CONTINUATION, 0 if rest else FLAG_END_HEADERS, stream_id, chunk)

    def send_message(self, stream_id: int, payload: bytes, *, end_stream: bool = False) -> None:
        """Queue one gRPC message (uncompressed) on a stream.

        With ``end_stream`` the message is the last: its last DATA frame carries
        END_STREAM (a unary request takes no frame of its own to end).

        Raises:
            LocalProtocolError: the stream is unknown or its sending side is closed.
        """
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_closed or stream.end_after_send:
            raise LocalProtocolError(f"stream {stream_id} is not open for sending")
        data = b"\x00" + len(payload).to_bytes(4, "big") + payload
        if stream.blocked:
            stream.blocked.append(data)
            stream.blocked_bytes += len(data)
            if end_stream:
                stream.end_after_send = True
        else:
            self._send_data(stream, data, end_stream)

    def end_stream(self, stream_id: int) -> None:
        """Half-close: the request is complete (sent after anything still queued)."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_closed or stream.end_after_send:
            return
        if stream.blocked:
            stream.end_after_send = True  # on the last queued frame
        else:
            stream.local_closed = True
            self._out += _frame(DATA, FLAG_END_STREAM, stream_id)

    def blocked_bytes(self, stream_id: int) -> int:
        """Bytes of a stream waiting for the server to open its flow-control window."""
        stream = self._streams.get(stream_id)
        return 0 if stream is None else stream.blocked_bytes

    def _send_data(self, stream: _Stream, data: bytes, end: bool) -> None:
        """Frame what the windows allow; queue the rest on the stream.

        ``end``: ``data`` is the last of the stream; the frame that carries its
        last byte carries END_STREAM (or, queued, it will: ``end_after_send``).
        """
        view = memoryview(data)
        while view:
            room = min(stream.send_window, self._send_window, self._peer_max_frame)
            if room <= 0:
                rest = bytes(view)
                stream.blocked.appendleft(rest)
                stream.blocked_bytes += len(rest)
                if end:
                    stream.end_after_send = True
                return
            chunk = view[:room]
            n = len(chunk)
            view = view[n:]
            flags = FLAG_END_STREAM if end and not view else 0
            self._out += (
                n.to_bytes(3, "big") + bytes((DATA, flags)) + stream.stream_id.to_bytes(4, "big")
            )
            self._out += chunk
            stream.send_window -= n
            self._send_window -= n
        if end:
            stream.local_closed = True

    def _flush_blocked(self) -> None:
        for stream in list(self._streams.values()):
            while stream.blocked and self._send_window > 0 and stream.send_window > 0:
                data = stream.blocked.popleft()
                stream.blocked_bytes -= len(data)
                end = stream.end_after_send and not stream.blocked
                if end:
                    stream.end_after_send = False  # _send_data sets it again if still held
                self._send_data(stream, data, end)

    def reset_stream(self, stream_id: int, error_code: int = CANCEL) -> None:
        """Cancel a stream (RST_STREAM) and forget it; no event follows."""
        stream = self._streams.pop(stream_id, None)
        if stream is None or self.closed:
            return
        self._out += _frame(RST_STREAM, 0, stream_id, error_code.to_bytes(4, "big"))

    def consumed(self, stream_id: int, nbytes: int) -> None:
        """The application took ``nbytes`` (prefix included) off a stream: credit it back."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.remote_closed:
            return
        stream.recv_credit += nbytes
        if stream.recv_credit >= self._stream_window // 4:
            credit, stream.recv_credit = stream.recv_credit, 0
            stream.recv_window += credit
            self._out += _frame(WINDOW_UPDATE, 0, stream_id, credit.to_bytes(4, "big"))

    def _credit_connection(self, nbytes: int) -> None:
        self._recv_connection_credit += nbytes
        if self._recv_connection_credit >= self._connection_window // 4:
            credit, self._recv_connection_credit = self._recv_connection_credit, 0
            self._out += _frame(WINDOW_UPDATE, 0, 0, credit.to_bytes(4, "big"))

    def ping(self, payload: bytes) -> None:
        """Queue a PING (8 bytes)."""
        if len(payload) != 8:
            raise ValueError("a PING carries exactly 8 bytes")
        self._out += _frame(PING, 0, 0, payload)

    def close(self, error_code: int = NO_ERROR) -> None:
        """Queue GOAWAY; nothing more is sent or accepted."""
        if not self.closed:
            # The last stream id counts streams the server opened: none (no push).
            self._out += _frame(GOAWAY, 0, 0, bytes(4) + error_code.to_bytes(4, "big"))
            self.closed = True

    # -- incoming ------------------------------------------------------------------

    def receive(self, data: bytes) -> list[Event]:
        """Feed bytes read from the socket; returns what they completed.

        Raises:
            RemoteProtocolError: the server broke HTTP/2 (a connection error). A
                GOAWAY is queued; fail every call and drop the connection.
        """
        if self.closed:
            return []
        buf = self._in
        if buf:
            buf += data
            data = bytes(buf)
            buf.clear()
        events: list[Event] = []
        pos = 0
        size = len(data)
        try:
            while size - pos >= 9:
                length = int.from_bytes(data[pos : pos + 3], "big")
                if length > _DEFAULT_MAX_FRAME:
                    # We never raise SETTINGS_MAX_FRAME_SIZE for the server.
                    raise RemoteProtocolError(f"HTTP/2: a frame of {length} bytes is too large")
                end = pos + 9 + length
                if end > size:
                    break
                kind = data[pos + 3]
                flags = data[pos + 4]
                stream_id = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
                payload = data[pos + 9 : end]
                pos = end
                if self._header_block is not None and kind != CONTINUATION:
                    raise RemoteProtocolError("HTTP/2: a header block was interrupted")
                if kind == DATA:
                    self._on_data(stream_id, flags, payload, events)
                elif kind == HEADERS:
                    self._on_headers(stream_id, flags, payload, events)
                elif kind == CONTINUATION:
                    self._on_continuation(stream_id, flags, payload, events)
                elif kind == SETTINGS:
                    self._on_settings(stream_id, flags, payload)
                elif kind == WINDOW_UPDATE:
                    self._on_window_update(stream_id, payload, events)
                elif kind == PING:
                    if stream_id or len(payload) != 8:
                        raise RemoteProtocolError("HTTP/2: malformed PING")
                    if flags & FLAG_ACK:
                        events.append(PingAcked(payload))
                    else:
                        self._queue_control_reply(_frame(PING, FLAG_ACK, 0, payload))
                elif kind == RST_STREAM:
                    self._on_rst_stream(stream_id, payload, events)
                elif kind == GOAWAY:
                    self._on_goaway(stream_id, payload, events)
                elif kind == PUSH_PROMISE:
                    raise RemoteProtocolError("HTTP/2: PUSH_PROMISE although push is disabled")
                elif kind == PRIORITY:
                    if len(payload) != 5:
                        raise RemoteProtocolError("HTTP/2: malformed PRIORITY")
                # Unknown frame types are ignored (RFC 9113, 4.1).
        except RemoteProtocolError:
            self.close(PROTOCOL_ERROR)
            raise
        if pos < size:
            buf += data[pos:]
        return events

    def _unpad(self, flags: int, payload: bytes, what: str) -> bytes:
        if flags & FLAG_PADDED:
            if not payload:
                raise RemoteProtocolError(f"HTTP/2: padded {what} without a pad length")
            pad = payload[0]
            if pad >= len(payload):
                raise RemoteProtocolError(f"HTTP/2: {what} padding exceeds the frame")
            return payload[1 : len(payload) - pad]
        return payload

    def _on_data(self, stream_id: int, flags: int, payload: bytes, events: list[Event]) -> None:
        if stream_id == 0:
            raise RemoteProtocolError("HTTP/2: DATA on stream 0")
        flow = len(payload)
        body = self._unpad(flags, payload, "DATA")
        # The connection window is credited on receipt, for every stream (also
        # one we reset or finished): only stream windows hold a slow reader back.
        self._credit_connection(flow)
        stream = self._streams.get(stream_id)
        if stream is None:
            if self._is_idle(stream_id):
                raise RemoteProtocolError(f"HTTP/2: DATA on idle stream {stream_id}")
            return
        if stream.remote_closed:
            self._fail(stream, StatusCode.INTERNAL, "DATA after the end of the stream", events)
            return
        if not stream.headers_done:
            self._fail(stream, StatusCode.INTERNAL, "DATA before the response headers", events)
            return
        stream.recv_window -= flow
        if stream.recv_window < 0:
            self._fail(
                stream,
                StatusCode.INTERNAL,
                "the server overran the flow-control window",
                events,
                FLOW_CONTROL_ERROR,
            )
            return
        # Padding is not a message: give it back at once.
        if flow != len(body):
            self.consumed(stream_id, flow - len(body))
        partial = stream.partial
        if partial:
            if len(partial) >= 5:
                # The middle of a large message (its prefix was checked): append
                # without copying what was gathered so far again.
                total = 5 + int.from_bytes(partial[1:5], "big")
                if len(partial) + len(body) < total:
                    partial += body
                    # Padding may have used window the message still needs.
                    self._make_room(stream, total - len(partial))
                    if flags & FLAG_END_STREAM:
                        stream.remote_closed = True
                        self._fail(
                            stream, StatusCode.INTERNAL, "the stream ended inside a message", events
                        )
                    return
            partial += body
            body = bytes(partial)
            partial.clear()
        pos = 0
        n = len(body)
        max_message = self._max_message
        messages: list[bytes] = []
        error: tuple[int, str] | None = None
        end = 0
        while n - pos >= 5:
            if body[pos]:
                error = (
                    StatusCode.INTERNAL,
                    "the server sent a compressed message, which was not asked for",
                )
                break
            length = int.from_bytes(body[pos + 1 : pos + 5], "big")
            if length > max_message:
                error = (
                    StatusCode.RESOURCE_EXHAUSTED,
                    f"received message larger than max ({length} vs. {max_message})",
                )
                break
            end = pos + 5 + length
            if end > n:
                break
            messages.append(body[pos + 5 : end])
            pos = end
        if messages:
            events.append(Messages(stream_id, messages))
        if error is not None:
            self._fail(stream, error[0], error[1], events)
            return
        if pos < n:
            partial += body[pos:]
            if end > n:
                self._make_room(stream, end - n)
        if flags & FLAG_END_STREAM:
            stream.remote_closed = True
            self._fail(
                stream, StatusCode.INTERNAL, "the server ended the stream without trailers", events
            )

    def _make_room(self, stream: _Stream, missing: int) -> None:
        """Let the rest of a message in even when the stream window is too small.

        Credit comes back only as messages are consumed, so a message larger
        than what is left of the window (or than the window) would stall the
        stream for good. The window is opened by what is missing, in advance:
        ``recv_credit`` goes below zero and is repaid by the message's own
        :meth:`consumed`, so a slow reader still holds at most one window and
        one message.
        """
        grant = min(missing, _MAX_WINDOW) - stream.recv_window
        if grant > 0:
            stream.recv_window += grant
            stream.recv_credit -= grant
            self._out += _frame(WINDOW_UPDATE, 0, stream.stream_id, grant.to_bytes(4, "big"))

    def _on_headers(self, stream_id: int, flags: int, payload: bytes, events: list[Event]) -> None:
        if stream_id == 0:
            raise RemoteProtocolError("HTTP/2: HEADERS on stream 0")
        block = self._unpad(flags, payload, "HEADERS")
        if flags & FLAG_PRIORITY:
            if len(block) < 5:
                raise RemoteProtocolError("HTTP/2: HEADERS priority field is short")
            block = block[5:]
        self._header_stream = stream_id
        self._header_end_stream = bool(flags & FLAG_END_STREAM)
        if flags & FLAG_END_HEADERS:
            self._on_header_block(stream_id, block, self._header_end_stream, events)
        else:
            self._header_block = bytearray(block)

    def _on_continuation(
        self, stream_id: int, flags: int, payload: bytes, events: list[Event]
    ) -> None:
        if self._header_block is None or stream_id != self._header_stream:
            raise RemoteProtocolError("HTTP/2: unexpected CONTINUATION")
        self._header_block += payload
        if len(self._header_block) > _MAX_HEADER_BLOCK:
            raise RemoteProtocolError("HTTP/2: header block too large")
        if flags & FLAG_END_HEADERS:
            block, self._header_block = bytes(self._header_block), None
            self._on_header_block(stream_id, block, self._header_end_stream, events)

    def _on_header_block(
        self, stream_id: int, block: bytes, end_stream: bool, events: list[Event]
    ) -> None:
        # Decode even for a stream we forgot: the HPACK table must stay in step.
        headers = self._decode_headers(block)
        stream = self._streams.get(stream_id)
        if stream is None:
            if self._is_idle(stream_id):
                raise RemoteProtocolError(f"HTTP/2: HEADERS on idle stream {stream_id}")
            return
        if stream.remote_closed:
            self._fail(stream, StatusCode.INTERNAL, "HEADERS after the end of the stream", events)
            return
        if end_stream:
            stream.remote_closed = True  # nothing to reset if the call fails below
        if not stream.headers_done:
            stream.headers_done = True
            status = _lookup(headers, ":status")
            if status is None:
                self._fail(stream, StatusCode.INTERNAL, "response without :status", events)
                return
            if status != "200":
                code = _HTTP_TO_GRPC.get(_parse_int(status), StatusCode.UNKNOWN)
                self._fail(stream, code, f"HTTP status {status} from the server", events)
                return
            if not end_stream:
                ctype = _lookup(headers, "content-type") or ""
                if not ctype.startswith("application/grpc"):
                    self._fail(
                        stream,
                        StatusCode.UNKNOWN,
                        f"the server answered with content-type {ctype!r}",
                        events,
                    )
                    return
                events.append(ResponseHeaders(stream_id, headers))
                return
            # A trailers-only response: the headers carry the status.
        elif not end_stream:
            self._fail(stream, StatusCode.INTERNAL, "trailers without END_STREAM", events)
            return
        if stream.partial:
            self._fail(stream, StatusCode.INTERNAL, "the stream ended inside a message", events)
            return
        status_code = _parse_int(_lookup(headers, "grpc-status"))
        if status_code < 0:
            self._end(
                stream, StatusCode.INTERNAL, "the server sent no grpc-status", events, headers
            )
            return
        message = unquote(_lookup(headers, "grpc-message") or "", errors="replace")
        self._end(stream, status_code, message, events, headers)

    def _decode_headers(self, block: bytes) -> tuple[tuple[str, str], ...]:
        """Decode a block; remember it when decoding it again must give the same.

        A block made only of one-byte indexed fields (bytes 0x80-0xFE: indices
        1-126) neither reads nor changes anything but the table, so its headers
        stay what they are until a block that changes the table: a server
        answers every call with the same two such blocks (headers, trailers).
        """
        decoded = self._decoded
        headers = decoded.get(block)
        if headers is not None:
            return headers
        try:
            headers = tuple((str(k), str(v)) for k, v in self._decoder.decode(block, raw=False))
        except Exception as exc:  # hpack raises its own HPACKError family
            self.close(COMPRESSION_ERROR)
            raise RemoteProtocolError(f"HTTP/2: cannot decode a header block: {exc}") from None
        if block and min(block) >= 0x80 and 0xFF not in block:
            if len(decoded) >= _MAX_CACHED_BLOCKS:
                decoded.clear()
            decoded[block] = headers
        elif decoded:
            decoded.clear()  # the table may have changed
        return headers

    def _on_settings(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id:
            raise RemoteProtocolError("HTTP/2: SETTINGS on a stream")
        if flags & FLAG_ACK:
            if payload:
                raise RemoteProtocolError("HTTP/2: SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise RemoteProtocolError("HTTP/2: SETTINGS payload is not a multiple of 6")
        for i in range(0, len(payload), 6):
            key = int.from_bytes(payload[i : i + 2], "big")
            value = int.from_bytes(payload[i + 2 : i + 6], "big")
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > _MAX_WINDOW:
                    raise RemoteProtocolError("HTTP/2: SETTINGS_INITIAL_WINDOW_SIZE too large")
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for stream in self._streams.values():
                    stream.send_window += delta
                    if stream.send_window > _MAX_WINDOW:
                        raise RemoteProtocolError(
                            "HTTP/2: SETTINGS_INITIAL_WINDOW_SIZE overflowed a stream window"
                        )
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if not 16_384 <= value <= 16_777_215:
                    raise RemoteProtocolError("HTTP/2: SETTINGS_MAX_FRAME_SIZE out of range")
                self._peer_max_frame = value
            elif key == SETTINGS_MAX_CONCURRENT_STREAMS:
                self._peer_max_streams = value
            elif key == SETTINGS_ENABLE_PUSH and value > 1:
                raise RemoteProtocolError("HTTP/2: SETTINGS_ENABLE_PUSH must be 0 or 1")
            elif key == SETTINGS_HEADER_TABLE_SIZE:
                # Blocks encoded from now on follow our ACK (queued below).
                self._encoder.set_peer_limit(value)
        self._preface_seen = True
        self._queue_control_reply(_frame(SETTINGS, FLAG_ACK, 0))
        self._flush_blocked()

    def _on_window_update(self, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if len(payload) != 4:
            raise RemoteProtocolError("HTTP/2: malformed WINDOW_UPDATE")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream_id == 0:
            if increment == 0:
                raise RemoteProtocolError("HTTP/2: WINDOW_UPDATE of 0 on the connection")
            self._send_window += increment
            if self._send_window > _MAX_WINDOW:
                raise RemoteProtocolError("HTTP/2: the connection window overflowed")
        else:
            stream = self._streams.get(stream_id)
            if stream is None:
                if self._is_idle(stream_id):
                    raise RemoteProtocolError(f"HTTP/2: WINDOW_UPDATE on idle stream {stream_id}")
                return
            if increment == 0:
                self._fail(
                    stream, StatusCode.INTERNAL, "WINDOW_UPDATE of 0", events, PROTOCOL_ERROR
                )
                return
            stream.send_window += increment
            if stream.send_window > _MAX_WINDOW:
                self._fail(
                    stream,
                    StatusCode.INTERNAL,
                    "the stream window overflowed",
                    events,
                    FLOW_CONTROL_ERROR,
                )
                return
        self._flush_blocked()

    def _on_rst_stream(self, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id == 0 or len(payload) != 4:
            raise RemoteProtocolError("HTTP/2: malformed RST_STREAM")
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            if self._is_idle(stream_id):
                raise RemoteProtocolError(f"HTTP/2: RST_STREAM on idle stream {stream_id}")
            return
        code = int.from_bytes(payload, "big")
        events.append(
            StreamEnded(
                stream_id,
                _RST_TO_GRPC.get(code, StatusCode.INTERNAL),
                f"Received RST_STREAM with error code {code}",
                local=True,
            )
        )

    def _on_goaway(self, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id or len(payload) < 8:
            raise RemoteProtocolError("HTTP/2: malformed GOAWAY")
        last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        code = int.from_bytes(payload[4:8], "big")
        debug = payload[8:].decode("utf-8", "replace")
        event = ConnectionTerminated(code, last, debug)
        self.goaway = event
        events.append(event)
        # Streams the server never saw: fail them, they may be retried elsewhere.
        for sid in [s for s in self._streams if s > last]:
            stream = self._streams.pop(sid)
            events.append(
                StreamEnded(
                    sid, StatusCode.UNAVAILABLE, "the server is going away (GOAWAY)", local=True
                )
            )
            del stream

    def _is_idle(self, stream_id: int) -> bool:
        """A stream never opened: not one of ours yet, or a server stream (no push)."""
        return stream_id >= self._next_stream_id or not stream_id & 1

    def _end(
        self,
        stream: _Stream,
        status: int,
        message: str,
        events: list[Event],
        trailers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        # A server may answer before the request is complete (RFC 9113, 8.1): the
        # stream is over either way and nothing more is sent on it.
        self._streams.pop(stream.stream_id, None)
        events.append(StreamEnded(stream.stream_id, status, message, trailers))

    def _fail(
        self,
        stream: _Stream,
        status: int,
        message: str,
        events: list[Event],
        error_code: int = PROTOCOL_ERROR,
    ) -> None:
        """End a call on our side because the server broke a rule for it."""
        if self._streams.pop(stream.stream_id, None) is not None and not stream.remote_closed:
            self._out += _frame(RST_STREAM, 0, stream.stream_id, error_code.to_bytes(4, "big"))
        events.append(StreamEnded(stream.stream_id, status, message, local=True))

    def connection_lost(self, reason: str) -> list[StreamEnded]:
        """The socket closed: every open call ends UNAVAILABLE."""
        self.closed = True
        ended = [
            StreamEnded(sid, StatusCode.UNAVAILABLE, reason, local=True) for sid in self._streams
        ]
        self._streams.clear()
        return ended


def _parse_int(text: str | None) -> int:
    """A decimal header value (``:status``, ``grpc-status``), or -1."""
    if text is None or not text.isascii() or not text.isdigit():
        return -1
    return int(text)


def _lookup(headers: tuple[tuple[str, str], ...], name: str) -> str | None:
    for key, value in headers:
        if key == name:
            return value
    return None
