"""Column-wise NATS publish frames and a lean parser of JetStream publish acks.

Theory of operation. The Spark writers receive Arrow record batches; building a
Python object (and awaiting a coroutine) per row costs more than the server's
work per message. :func:`publish_frames` turns a whole batch into ``PUB`` /
``HPUB`` frames with Arrow compute kernels (string joins in C, no per-row Python
code): the result is one binary array whose value buffer is the frames back to
back, so the driver writes any run of rows with one ``transport.write`` of a
slice of that buffer. Each row's reply subject is ``<inbox>.<row number>``.

:class:`AckParser` takes the server's bytes and counts the acks (``MSG`` on the
reply subjects, JSON ``{"stream":..,"seq":..}``, ``"duplicate":true`` for a
message the stream already had) and failures (a JSON ``error``, or an ``HMSG``
status such as ``503`` no responders when no stream listens on the subject). It
does no I/O; control frames come back as events for the driver.

NATS client protocol: https://docs.nats.io/reference/reference-protocols/nats-protocol
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from aioclients._errors import RemoteProtocolError
from aioclients.spark._protocol._direct_reader import Ping, Pong, ServerErr, ServerInfo

__all__ = ("AckFailure", "AckParser", "header_blocks", "publish_frames")

_BIN = pa.large_binary()


def _lit(value: bytes) -> pa.Scalar:
    return pa.scalar(value, _BIN)


def _join(*parts: pa.Array | pa.Scalar) -> pa.Array:
    return pc.binary_join_element_wise(*parts, _lit(b""))


def _text(values: pa.Array) -> pa.Array:
    """Integers as decimal text (large_binary)."""
    return pc.cast(pc.cast(values, pa.string()), _BIN)


def _has(values: pa.Array, pattern: str) -> bool:
    return bool(pc.any(pc.match_substring_regex(values, pattern)).as_py())


def header_blocks(msg_ids: pa.Array | None, headers: pa.Array | None, count: int) -> pa.Array:
    """Per row the NATS header block (``NATS/1.0\\r\\n...\\r\\n``), or null for none.

    A row has headers if its ``msg_id`` is non-empty (``Nats-Msg-Id``) or its
    ``headers`` map (string to string) has entries.

    Raises:
        ValueError: a header name or value that would break the frame.
    """
    parts: list[pa.Array] = []
    present = pa.array([False] * count, pa.bool_()) if count else pa.array([], pa.bool_())
    if msg_ids is not None:
        ids = pc.cast(msg_ids, pa.string())
        ids = pc.if_else(pc.equal(pc.utf8_length(ids), 0), pa.scalar(None, pa.string()), ids)
        if _has(ids.drop_null() if ids.null_count else ids, r"[\r\n]"):
            raise ValueError("a msg_id holds a CR or LF")
        present = pc.or_(present, pc.is_valid(ids))
        line = _join(_lit(b"Nats-Msg-Id: "), pc.cast(ids, _BIN), _lit(b"\r\n"))
        parts.append(pc.fill_null(line, _lit(b"")))
    if headers is not None:
        raw = headers.offsets  # honours a sliced array, unlike .keys / .items
        base = raw[0].as_py()
        entries = headers.values.slice(base, raw[len(raw) - 1].as_py() - base)
        rebased = pc.subtract(pc.cast(raw, pa.int64()), base)
        lengths = pc.if_else(
            pc.is_valid(headers), pc.subtract(rebased[1:], rebased[:-1]), pa.scalar(0, pa.int64())
        )
        keys = pc.cast(entries.field(0), pa.string())
        values = pc.fill_null(pc.cast(entries.field(1), pa.string()), "")
        if len(keys) and _has(keys, r"[\s:]|^$"):
            raise ValueError("a header name is empty or holds a space, tab, CR, LF or ':'")
        if len(values) and _has(values, r"[\r\n]"):
            raise ValueError("a header value holds a CR or LF")
        lines = _join(pc.cast(keys, _BIN), _lit(b": "), pc.cast(values, _BIN), _lit(b"\r\n"))
        per_row = pa.LargeListArray.from_arrays(rebased, lines)
        joined = pc.binary_join(per_row, _lit(b""))
        parts.append(pc.if_else(pc.greater(lengths, 0), joined, _lit(b"")))
        present = pc.or_(present, pc.greater(lengths, 0))
    if not parts:
        return pa.nulls(count, _BIN)
    block = _join(_lit(b"NATS/1.0\r\n"), *parts, _lit(b"\r\n"))
    return pc.if_else(present, block, pa.scalar(None, _BIN))


def publish_frames(
    subjects: pa.Array,
    data: pa.Array,
    *,
    reply_prefix: bytes,
    first: int,
    headers: pa.Array | None = None,
) -> pa.Array:
    """One ``PUB`` (or ``HPUB`` where ``headers`` is not null) frame per row.

    ``subjects`` (string, no nulls) and ``data`` (binary or string; null is an
    empty payload) are the rows; row ``i`` asks for its ack on
    ``<reply_prefix><first + i>``; ``headers`` are header blocks from
    :func:`header_blocks`. The frames are back to back in the value buffer of the
    returned ``large_binary`` array (offsets start at 0).

    Raises:
        ValueError: an empty subject, or one with whitespace.
    """
    count = len(subjects)
    subj = pc.cast(subjects, pa.string())
    if subj.null_count:
        raise ValueError("a subject is null")
    if count and _has(subj, r"[\s]|^$"):
        raise ValueError("a subject is empty or holds whitespace")
    payload = pc.fill_null(pc.cast(data, _BIN), _lit(b""))
    size = pc.binary_length(payload)
    replies = _text(pa.array(range(first, first + count), pa.int64()))
    head = _join(_lit(b" "), _lit(reply_prefix), replies, _lit(b" "))
    if headers is None or headers.null_count == count:
        return _join(
            _lit(b"PUB "),
            pc.cast(subj, _BIN),
            head,
            _text(size),
            _lit(b"\r\n"),
            payload,
            _lit(b"\r\n"),
        )
    has = pc.is_valid(headers)
    block = pc.fill_null(headers, _lit(b""))
    hsize = pc.binary_length(block)
    sizes = pc.if_else(
        has, _join(_text(hsize), _lit(b" "), _text(pc.add(hsize, size))), _text(size)
    )
    verb = pc.if_else(has, _lit(b"HPUB "), _lit(b"PUB "))
    return _join(
        verb, pc.cast(subj, _BIN), head, sizes, _lit(b"\r\n"), block, payload, _lit(b"\r\n")
    )


def frame_bytes(frames: pa.Array, start: int, stop: int) -> memoryview:
    """The bytes of rows ``[start, stop)`` of :func:`publish_frames`' result."""
    _, raw_offsets, values = frames.buffers()
    offsets = pa.Array.from_buffers(
        pa.int64(), len(frames) + 1, [None, raw_offsets], offset=frames.offset
    )
    lo = offsets[start].as_py()
    hi = offsets[stop].as_py()
    return memoryview(values)[lo:hi] if values is not None else memoryview(b"")


def _is_duplicate(payload: bytes) -> bool:
    try:
        return json.loads(payload).get("duplicate") is True
    except (ValueError, AttributeError):
        return False


@dataclass(frozen=True, slots=True)
class AckFailure:
    """A publish the server refused: its row number and the reason."""

    row: int
    reason: str


class AckParser:
    """Counts JetStream publish acks on ``<reply_prefix><row>``; keeps control events."""

    def __init__(self, reply_prefix: bytes) -> None:
        self._prefix = reply_prefix
        self._plen = len(reply_prefix)
        self._buf = bytearray()
        self.stored = 0
        self.duplicates = 0
        self.failed = 0
        self.first_failure: AckFailure | None = None

    @property
    def settled(self) -> int:
        return self.stored + self.duplicates + self.failed

    def _row(self, subject: bytes) -> int:
        if not subject.startswith(self._prefix) or not subject[self._plen :].isdigit():
            raise RemoteProtocolError(f"a reply on an unexpected subject {subject[:80]!r}")
        return int(subject[self._plen :])

    def _fail(self, row: int, reason: str) -> None:
        self.failed += 1
        if self.first_failure is None:
            self.first_failure = AckFailure(row, reason)

    def _ack(self, subject: bytes, payload: bytes) -> None:
        row = self._row(subject)
        if b'"error"' in payload:
            try:
                error = json.loads(payload)["error"]
                reason = f"{error.get('description', error)} (code {error.get('code')})"
            except (ValueError, TypeError, KeyError, AttributeError):
                reason = payload[:200].decode("utf-8", "replace")
            self._fail(row, reason)
        elif payload.startswith(b'{"stream"'):
            # nats-server writes '"duplicate": true' (with a space); parse to be sure.
            if b'"duplicate"' in payload and _is_duplicate(payload):
                self.duplicates += 1
            else:
                self.stored += 1
        else:
            self._fail(row, f"unexpected ack {payload[:200]!r}")

    def _status(self, subject: bytes, block: bytes) -> None:
        row = self._row(subject)
        first = block.split(b"\r\n", 1)[0]  # NATS/1.0 503 [description]
        status = first[len(b"NATS/1.0") :].strip().decode("utf-8", "replace")
        if status.startswith("503"):
            self._fail(row, "no stream takes the subject (503 no responders)")
        else:
            self._fail(row, f"status {status or '?'} instead of an ack")

    def receive_data(self, data: bytes) -> list[object]:
        """Consume ``data``; return the control events (Ping, Pong, ServerInfo, ServerErr).

        Raises:
            RemoteProtocolError: bytes that are not NATS server protocol.
        """
        buf = self._buf
        buf += data
        events: list[object] = []
        pos = 0
        n = len(buf)
        while pos < n:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            if buf.startswith(b"MSG ", pos):
                fields = bytes(buf[pos + 4 : end]).split()
                if len(fields) not in (3, 4) or not fields[-1].isdigit():
                    raise RemoteProtocolError(f"bad MSG line {bytes(buf[pos:end])[:100]!r}")
                stop = end + 2 + int(fields[-1])
                if stop + 2 > n:
                    break
                if buf[stop : stop + 2] != b"\r\n":
                    raise RemoteProtocolError("a MSG payload does not end with CRLF")
                self._ack(fields[0], bytes(buf[end + 2 : stop]))
                pos = stop + 2
            elif buf.startswith(b"HMSG ", pos):
                fields = bytes(buf[pos + 5 : end]).split()
                if len(fields) not in (4, 5) or not (fields[-1] + fields[-2]).isdigit():
                    raise RemoteProtocolError(f"bad HMSG line {bytes(buf[pos:end])[:100]!r}")
                stop = end + 2 + int(fields[-1])
                if stop + 2 > n:
                    break
                if buf[stop : stop + 2] != b"\r\n":
                    raise RemoteProtocolError("an HMSG payload does not end with CRLF")
                self._status(fields[0], bytes(buf[end + 2 : end + 2 + int(fields[-2])]))
                pos = stop + 2
            else:
                line = bytes(buf[pos:end])
                pos = end + 2
                if line == b"PING":
                    events.append(Ping())
                elif line == b"PONG":
                    events.append(Pong())
                elif line == b"+OK":
                    pass
                elif line.startswith(b"-ERR"):
                    events.append(ServerErr(line[4:].strip(b" '").decode("utf-8", "replace")))
                elif line.startswith(b"INFO "):
                    try:
                        events.append(ServerInfo(json.loads(line[5:])))
                    except ValueError:
                        raise RemoteProtocolError("bad INFO from the server") from None
                else:
                    raise RemoteProtocolError(f"unexpected server line {line[:100]!r}")
        del buf[:pos]
        return events
