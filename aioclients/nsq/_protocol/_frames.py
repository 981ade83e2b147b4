"""NSQ V2 wire format: frame decoding and command encoding (pure, no I/O).

Theory of operation (NSQ "TCP Protocol Spec", section "Data Format"):

- nsqd sends frames ``[size u32 BE][type u32 BE][data]``; ``size`` counts the type
  field and the data, so it is at least 4. Types: 0 response, 1 error, 2 message.
- A message frame's data is ``[timestamp i64 ns][attempts u16][16-byte ASCII id][body]``.
- :class:`FrameDecoder` is incremental: it is fed chunks of any size and returns the
  frames that became complete. A peer can never make us buffer more than one
  maximal frame (``max_frame_size``): a response or error frame announced larger is
  rejected as soon as its header is seen. A *message* frame announced larger (a
  message above the consumer's ``max_message_size``) is legal but unwanted: the
  decoder returns its header as a :data:`FRAME_OVERSIZED_MESSAGE` pseudo-frame as
  soon as the first 34 bytes are in, then reads past the body without keeping it
  (the skip state, ``skipping`` bytes to go), so the connection and the other
  messages on it live on and the consumer can FIN it. Every malformed input raises
  :class:`NSQProtocolError` with the stream offset of the offending bytes; nothing
  else escapes (the decoder fuzz test checks this).
- The encoders build the client's commands. Topic and channel names are checked
  against nsqd's rule: ``[.a-zA-Z0-9_-]+`` with an optional ``#ephemeral`` suffix,
  1 to 64 characters in all.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Final

from aioclients._errors import InvalidArgumentError
from aioclients.nsq._errors import NSQInvalidNameError, NSQProtocolError

__all__ = (
    "FRAME_ERROR",
    "FRAME_MESSAGE",
    "FRAME_OVERSIZED_MESSAGE",
    "FRAME_RESPONSE",
    "MAGIC_V2",
    "MESSAGE_HEADER_SIZE",
    "FrameDecoder",
    "check_channel",
    "check_topic",
    "encode_auth",
    "encode_cls",
    "encode_dpub",
    "encode_fin",
    "encode_identify",
    "encode_mpub",
    "encode_nop",
    "encode_pub",
    "encode_rdy",
    "encode_req",
    "encode_sub",
    "encode_touch",
    "is_valid_name",
    "message_rows",
    "mpub_body",
    "parse_message",
    "parse_oversized_message",
)

MAGIC_V2: Final = b"  V2"
FRAME_RESPONSE: Final = 0
FRAME_ERROR: Final = 1
FRAME_MESSAGE: Final = 2
# Not a wire type (nsqd's types are 0-2; others are rejected): a message frame above
# max_frame_size whose body was skipped. Its data is the 26-byte message header
# followed by the body's size (u32 BE); see parse_oversized_message.
FRAME_OVERSIZED_MESSAGE: Final = 3
MESSAGE_HEADER_SIZE: Final = 26  # 8 timestamp + 2 attempts + 16 id
MAX_NAME_LENGTH: Final = 64
DEFAULT_MAX_FRAME_SIZE: Final = 1024 * 1024 + MESSAGE_HEADER_SIZE

_HEADER = struct.Struct(">II")
_SIZE = struct.Struct(">I")
_MESSAGE_HEAD = struct.Struct(">qH")
# a message frame's first 18 bytes: size, type, timestamp, attempts
_MESSAGE_FRAME_HEAD = struct.Struct(">IIqH")
# a message frame of a given size, past its size and type: timestamp, attempts, id, body
_MESSAGE_ROW_FORMAT = ">8xqH16s%ds"
_NAME = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")
_U32_MAX: Final = 0xFFFFFFFF
_U16_MAX: Final = 0xFFFF
#: The byte values 0 to n, for each n below 255: the low bytes of attempts counts
#: within a limit of n (deleted with ``translate``, what is left is above it).
_UP_TO: Final = tuple(bytes(range(n + 1)) for n in range(255))
_ATTEMPTS: Final = itemgetter(1)  # of a message row: timestamp, attempts, id, body


class FrameDecoder:
    """Incremental decoder of nsqd's frames.

    Args:
        max_frame_size: the largest ``type + data`` size accepted (bytes). Raise it
            after the handshake to the message size the server may send.
    """

    __slots__ = ("_buf", "_consumed", "_skip", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self._consumed = 0  # stream offset of _buf[0]
        self._skip = 0  # bytes of an oversized message body still to read past
        self.max_frame_size = max_frame_size

    @property
    def skipping(self) -> int:
        """Bytes of an oversized message's body still to be read past (0: none)."""
        return self._skip

    @property
    def offset(self) -> int:
        """Stream offset of the next byte not yet consumed into a frame."""
        return self._consumed

    @property
    def buffered(self) -> int:
        """Number of bytes held waiting for the rest of a frame."""
        return len(self._buf)

    def take_buffered(self) -> bytes:
        """Remove and return the bytes not yet decoded (used when the stream switches
        to a compressed encoding in the middle of a chunk)."""
        data = bytes(self._buf)
        self._consumed += len(data)
        self._buf.clear()
        return data

    def view(self, data: bytes) -> bytes | None:
        """The bytes to decode next (those held, then ``data``), for a caller that
        walks the whole frames at their start itself and then says where it stopped
        with :meth:`consumed` (the rest is held again, and :meth:`feed` goes on from
        there). ``None`` while an oversized body is being read past: use
        :meth:`feed`."""
        if self._skip:
            return None
        buf = self._buf
        if not buf:
            return data
        buf += data
        whole = bytes(buf)
        buf.clear()
        return whole

    def consumed(self, whole: bytes, pos: int) -> None:
        """``whole[:pos]`` (from :meth:`view`) was decoded; hold the rest."""
        self._consumed += pos
        if pos < len(whole):
            self._buf += memoryview(whole)[pos:]

    def feed(self, data: bytes, limit: int | None = None) -> list[tuple[int, bytes]]:
        """Add ``data`` and return every frame it completed, as ``(type, data)``.

        Args:
            data: the next bytes of the stream (any length, including 0).
            limit: decode at most this many frames; the rest stays buffered.

        Raises:
            NSQProtocolError: the stream is malformed (the message names the offset).
        """
        if self._skip:
            n = min(self._skip, len(data))
            self._skip -= n
            self._consumed += n
            data = data[n:]
        buf = self._buf
        if data:
            buf += data
        frames: list[tuple[int, bytes]] = []
        pos = 0
        end = len(buf)
        # Frames are sliced from one bytes copy of the buffer, made once the first
        # frame is complete: slicing the bytearray and copying each slice to bytes
        # costs twice as much per frame.
        whole: bytes | None = None
        max_size = self.max_frame_size + 4
        unpack = _HEADER.unpack_from
        while end - pos >= 8:
            size, ftype = unpack(buf, pos)
            if size < 4:
                raise self._malformed(
                    f"frame size {size} is below the 4 bytes of the frame type", buf, pos
                )
            if size > max_size:
                if ftype != FRAME_MESSAGE:
                    raise self._malformed(
                        f"frame of {size - 4} bytes is larger than the maximum of "
                        f"{self.max_frame_size} bytes",
                        buf,
                        pos,
                    )
                if size - 4 < MESSAGE_HEADER_SIZE:
                    raise NSQProtocolError(
                        f"message frame of {size - 4} bytes is shorter than the "
                        f"{MESSAGE_HEADER_SIZE}-byte message header",
                        offset=self._consumed + pos,
                    )
                head_end = pos + 8 + MESSAGE_HEADER_SIZE
                if head_end > end:
                    break  # wait for the message header
                body_size = size - 4 - MESSAGE_HEADER_SIZE
                frames.append(
                    (
                        FRAME_OVERSIZED_MESSAGE,
                        bytes(buf[pos + 8 : head_end]) + _SIZE.pack(body_size),
                    )
                )
                stop = pos + 4 + size
                if stop > end:  # read past the rest of the body as it arrives
                    self._skip = stop - end
                    pos = end
                    break
                pos = stop
                if limit is not None and len(frames) >= limit:
                    break
                continue
            if ftype > FRAME_MESSAGE:
                raise self._malformed(f"unknown frame type {ftype}", buf, pos, at=4)
            stop = pos + 4 + size
            if stop > end:
                break
            if ftype == FRAME_MESSAGE and size - 4 < MESSAGE_HEADER_SIZE:
                raise NSQProtocolError(
                    f"message frame of {size - 4} bytes is shorter than the "
                    f"{MESSAGE_HEADER_SIZE}-byte message header",
                    offset=self._consumed + pos,
                )
            if whole is None:
                whole = bytes(buf)
            frames.append((ftype, whole[pos + 8 : stop]))
            pos = stop
            if limit is not None and len(frames) >= limit:
                break
        if pos:
            del buf[:pos]
            self._consumed += pos
        return frames

    def _malformed(self, what: str, buf: bytearray, pos: int, at: int = 0) -> NSQProtocolError:
        """The error for a malformed frame; at the very start of the stream, text instead
        of a frame means another server (nsqd's HTTP port, nats-server) answered."""
        head = bytes(buf[pos : pos + 24])
        if self._consumed + pos == 0 and all(32 <= b < 127 for b in head[:4]):
            text = head.split(b"\r")[0].split(b"\n")[0].decode("ascii", "replace")
            what = (
                f"the server answered with text ({text!r}), not the NSQ protocol: is this "
                f"nsqd's TCP port (4150 by default, not its HTTP port 4151)? ({what})"
            )
        return NSQProtocolError(what, offset=self._consumed + pos + at)


def parse_message(data: bytes) -> tuple[int, int, bytes, bytes]:
    """Split a message frame's data into ``(timestamp_ns, attempts, id, body)``.

    The decoder has checked the length already.
    """
    timestamp, attempts = _MESSAGE_HEAD.unpack_from(data, 0)
    return timestamp, attempts, data[10:26], data[26:]


def parse_oversized_message(data: bytes) -> tuple[int, int, bytes, int]:
    """Split a :data:`FRAME_OVERSIZED_MESSAGE` pseudo-frame into
    ``(timestamp_ns, attempts, id, body_size)``."""
    timestamp, attempts = _MESSAGE_HEAD.unpack_from(data, 0)
    (body_size,) = _SIZE.unpack_from(data, MESSAGE_HEADER_SIZE)
    return timestamp, attempts, data[10:26], body_size


def is_valid_name(name: object) -> bool:
    """Whether ``name`` is a valid topic or channel name for nsqd."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= MAX_NAME_LENGTH
        and _NAME.fullmatch(name) is not None
    )


def _check_name(kind: str, name: object) -> bytes:
    if not is_valid_name(name):
        raise NSQInvalidNameError(
            f"E_BAD_{kind.upper()}",
            f"{kind} name {name!r} is not valid for NSQ: use 1 to {MAX_NAME_LENGTH} "
            "characters from [.a-zA-Z0-9_-], optionally ending in '#ephemeral'",
        )
    assert isinstance(name, str)
    return name.encode("ascii")


def check_topic(topic: object) -> bytes:
    """Return the topic as bytes.

    Raises:
        NSQInvalidNameError: the name breaks nsqd's naming rule (an
            ``InvalidArgumentError`` and an ``NSQError`` coded ``E_BAD_TOPIC``).
    """
    return _check_name("topic", topic)


def check_channel(channel: object) -> bytes:
    """Return the channel as bytes.

    Raises:
        NSQInvalidNameError: the name breaks nsqd's naming rule (an
            ``InvalidArgumentError`` and an ``NSQError`` coded ``E_BAD_CHANNEL``).
    """
    return _check_name("channel", channel)


def _check_body(body: object, max_size: int | None, what: str = "body") -> bytes:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"{what} must be bytes, got {type(body).__name__}")
    data = bytes(body)
    if max_size is not None and len(data) > max_size:
        raise InvalidArgumentError(
            f"{what} of {len(data)} bytes is larger than the maximum message size of "
            f"{max_size} bytes (nsqd's --max-msg-size; raise max_message_size to match it)"
        )
    return data


def _check_id(message_id: bytes) -> bytes:
    if not isinstance(message_id, bytes) or len(message_id) != 16:
        raise InvalidArgumentError(f"a message id is 16 bytes, got {message_id!r}")
    return message_id


def _check_ms(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _U32_MAX:
        raise InvalidArgumentError(f"{name} must be a whole number of milliseconds >= 0")
    return value


def encode_identify(fields: Mapping[str, object]) -> bytes:
    """``IDENTIFY\\n[size][json]``."""
    body = json.dumps(dict(fields), separators=(",", ":"), sort_keys=True).encode()
    return b"IDENTIFY\n" + _SIZE.pack(len(body)) + body


def encode_auth(secret: str | bytes) -> bytes:
    """``AUTH\\n[size][secret]``."""
    data = secret.encode() if isinstance(secret, str) else bytes(secret)
    return b"AUTH\n" + _SIZE.pack(len(data)) + data


def encode_sub(topic: str, channel: str) -> bytes:
    """``SUB <topic> <channel>\\n``."""
    return b"SUB " + check_topic(topic) + b" " + check_channel(channel) + b"\n"


def encode_pub(topic: str, body: bytes, max_size: int | None = None) -> bytes:
    """``PUB <topic>\\n[size][body]``."""
    data = _check_body(body, max_size)
    return b"PUB " + check_topic(topic) + b"\n" + _SIZE.pack(len(data)) + data


def encode_mpub(topic: str, bodies: Iterable[bytes], max_size: int | None = None) -> bytes:
    """``MPUB <topic>\\n[size][count]([size][body])...``.

    Raises:
        InvalidArgumentError: no bodies, a body that is not bytes or is too large.
    """
    name = check_topic(topic)
    if isinstance(bodies, (bytes, bytearray, memoryview, str)):
        raise InvalidArgumentError("mpublish takes a list of bodies, not a single body")
    parts: list[bytes] = []
    pack = _SIZE.pack
    count = 0
    for body in bodies:
        data = _check_body(body, max_size, f"body #{count}")
        parts.append(pack(len(data)))
        parts.append(data)
        count += 1
    if count == 0:
        raise InvalidArgumentError("mpublish needs at least one body (nsqd rejects an empty MPUB)")
    payload = b"".join(parts)
    return b"MPUB " + name + b"\n" + pack(len(payload) + 4) + pack(count) + payload


def mpub_body(bodies: Iterable[bytes], max_size: int | None = None) -> bytes:
    """The ``[count]([size][body])...`` part of MPUB (also HTTP ``/mpub?binary=true``)."""
    cmd = encode_mpub("x", bodies, max_size)
    return cmd[len(b"MPUB x\n") + 4 :]


def encode_dpub(topic: str, delay_ms: int, body: bytes, max_size: int | None = None) -> bytes:
    """``DPUB <topic> <delay_ms>\\n[size][body]``."""
    delay = _check_ms("delay", delay_ms)
    data = _check_body(body, max_size)
    head = b"DPUB " + check_topic(topic) + b" " + str(delay).encode() + b"\n"
    return head + _SIZE.pack(len(data)) + data


def encode_rdy(count: int) -> bytes:
    """``RDY <count>\\n``."""
    if not isinstance(count, int) or count < 0:
        raise InvalidArgumentError(f"RDY count must be an int >= 0, got {count!r}")
    return b"RDY %d\n" % count


def encode_fin(message_id: bytes) -> bytes:
    """``FIN <id>\\n``."""
    return b"FIN " + _check_id(message_id) + b"\n"


def encode_req(message_id: bytes, delay_ms: int) -> bytes:
    """``REQ <id> <delay_ms>\\n``."""
    return b"REQ %b %d\n" % (_check_id(message_id), _check_ms("requeue delay", delay_ms))


def encode_touch(message_id: bytes) -> bytes:
    """``TOUCH <id>\\n``."""
    return b"TOUCH " + _check_id(message_id) + b"\n"


def encode_cls() -> bytes:
    """``CLS\\n``."""
    return b"CLS\n"


def encode_nop() -> bytes:
    """``NOP\\n``."""
    return b"NOP\n"


def message_rows(
    data: bytes, smallest: int, largest: int, max_attempts: int = 0
) -> tuple[list[tuple[int, int, bytes, bytes]], int] | None:
    """The message frames at the start of ``data``, as ``(timestamp, attempts, id,
    body)`` rows, and where they end, when there are at least two whole ones and
    every whole frame that fits in ``data`` at the first one's size is a message
    frame of that size (the usual read of a consumer of same-sized messages), none
    of them delivered more than ``max_attempts`` times (0: no limit); ``None``
    otherwise (walk the frames one at a time).

    ``smallest`` and ``largest``: the sizes a message frame may have (its size
    field, which counts the type, the header and the body). Each of the 8 bytes of
    the frame headers is checked at once for all frames (a strided slice), then
    one ``struct`` pass in C reads the fields of every frame, where a walk takes
    some 15 Python steps per frame. What follows the frames (a frame cut short, a
    frame of another size or type) is for the walk. The attempts are checked the
    same way: the high bytes counted, the low bytes within the limit deleted
    (``translate``), where a look at every row costs a call per row.
    """
    if len(data) < 8:
        return None
    size, ftype = _HEADER.unpack_from(data, 0)
    stride = size + 4
    count = len(data) // stride
    if count < 2 or ftype != FRAME_MESSAGE or size < smallest or size > largest:
        return None
    # every frame's size and type are the first's: so each starts where the one
    # before it ends (checked in the 2nd frame first, to refuse varied sizes early)
    if data[stride : stride + 8] != data[:8]:
        return None
    used = count * stride
    for k in range(8):
        if data[k:used:stride].count(data[k]) != count:
            return None
    # attempts: the two bytes after the 8-byte timestamp (big-endian)
    checked = not max_attempts or max_attempts >= _U16_MAX
    if not checked:
        if data[16:used:stride].count(0) == count:  # all below 256
            if max_attempts < 255 and data[17:used:stride].translate(None, _UP_TO[max_attempts]):
                return None  # some above the limit: the walk gives them up
            checked = True
        elif max_attempts < 256:
            return None
    rows = list(
        struct.iter_unpack(
            _MESSAGE_ROW_FORMAT % (size - 4 - MESSAGE_HEADER_SIZE), memoryview(data)[:used]
        )
    )
    if not checked and max(map(_ATTEMPTS, rows)) > max_attempts:
        return None
    return rows, used
