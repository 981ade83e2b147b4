"""Atomic batch publish (ADR-50): the messages, their headers and the answers.

A batch is ordinary publishes carrying ``Nats-Batch-Id`` (the same on every
message, at most 64 characters) and ``Nats-Batch-Sequence`` (1, 2, ... with no
gap); the last one also carries ``Nats-Batch-Commit: 1``. The server holds the
messages back and stores them all when the commit arrives, or none of them:

- the first message is a request: the server answers an empty message (the
  batch is open) or an error pub ack (``allow_atomic`` is off, 10174; a bad
  id, 10179);
- messages in the middle need no reply (an empty one comes where a reply
  subject is set), so they are pipelined;
- the commit is answered by a pub ack with the last message's ``seq``, the
  ``batch`` id and the ``count``, or by an error pub ack when the batch failed
  (a gap or a message the server refused, 10176; more than 1,000 messages,
  10199; a failed expectation such as 10071), and then nothing is stored;
- a batch without traffic for 10 seconds is dropped without a word.

Nothing here does I/O: :func:`collect_batch` checks what the caller gave,
:func:`batch_header_block` builds each message's ``NATS/1.0`` block, and
:func:`open_reply_error` / :func:`parse_batch_ack` read the server's answers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from aioclients._errors import InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream._errors import BatchAbortedError, MaxPayloadError
from aioclients.jetstream._protocol._headers import encode_headers
from aioclients.jetstream._protocol._names import validate_publish_subject

__all__ = (
    "BATCH_COMMIT",
    "BATCH_ID",
    "BATCH_SEQUENCE",
    "MAX_BATCH_ID_LENGTH",
    "MAX_BATCH_MESSAGES",
    "BatchAck",
    "BatchMessage",
    "batch_error",
    "batch_header_block",
    "check_sizes",
    "collect_batch",
    "middle_frames",
    "open_reply_error",
    "parse_batch_ack",
)

BATCH_ID = "Nats-Batch-Id"
BATCH_SEQUENCE = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"

#: The server's limit on the messages of one batch (nats-server's default).
MAX_BATCH_MESSAGES = 1000
#: The server refuses longer batch ids (10179).
MAX_BATCH_ID_LENGTH = 64

_RESERVED = frozenset(name.lower() for name in (BATCH_ID, BATCH_SEQUENCE, BATCH_COMMIT))
_HEADER_LINE = b"NATS/1.0\r\n"

# What to do about each refusal the server can give (ADR-50, "Server Errors").
_HINTS: dict[int, str] = {
    10174: "the stream does not allow atomic batches; enable it with "
    "update_stream(name, allow_atomic=True)",
    10175: "a message lacked Nats-Batch-Sequence",
    10176: "a message of the batch was lost or refused, so the server dropped the batch; "
    "publish it again",
    10177: "the server refuses Nats-Msg-Id and Nats-Expected-Last-Msg-Id in a batch",
    10179: "the batch id is invalid (at most 64 characters)",
    10199: "the server takes at most 1,000 messages per batch; split it",
    10200: "the commit header is invalid",
    10071: "an expectation failed (Nats-Expected-Last-Sequence is checked against the "
    "stream as it was before the batch)",
}


class BatchMessage(NamedTuple):
    """One message of a batch, checked (a tuple: cheap to build, 1,000 at a time)."""

    subject: str
    payload: bytes
    headers: Mapping[str, str | list[str]] | None


@dataclass(frozen=True, slots=True)
class BatchAck:
    """The stream's acknowledgement of a committed atomic batch.

    Attributes:
        stream: the stream that stored the batch.
        seq: the stream sequence of the batch's last message (the others precede it).
        batch_id: the batch's ``Nats-Batch-Id``.
        count: how many messages were stored.
        domain: the JetStream domain, where the server names one.
    """

    stream: str
    seq: int
    batch_id: str
    count: int
    domain: str | None = None


def batch_error(
    code: int | None, err_code: int | None, description: str, *, before: str = ""
) -> BatchAbortedError:
    """The :class:`BatchAbortedError` for a refusal (``before``: what to say first)."""
    text = f"atomic batch not stored: {description or 'refused'}"
    if before:
        text = f"{before}: {text}"
    return BatchAbortedError(text, code=code, err_code=err_code, hint=_HINTS.get(err_code or 0))


def collect_batch(messages: object) -> list[BatchMessage]:
    """Check and take the messages of a batch, reading at most one more than the limit.

    Args:
        messages: an iterable of ``(subject, payload)`` or
            ``(subject, payload, headers)``.

    Raises:
        BatchAbortedError: more than :data:`MAX_BATCH_MESSAGES` messages (nothing
            is sent; the iterable is not read further).
        InvalidArgumentError: not an iterable of such tuples, an empty batch, a bad
            subject, payload or header, or a ``Nats-Batch-*`` header of the caller's.
    """
    if isinstance(messages, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(
        messages, Iterable
    ):
        raise InvalidArgumentError(
            "messages must be an iterable of (subject, payload) or "
            f"(subject, payload, headers) tuples, got {type(messages).__name__}"
        )
    out: list[BatchMessage] = []
    for index, item in enumerate(messages):
        if index >= MAX_BATCH_MESSAGES:
            raise BatchAbortedError(
                f"atomic batch not sent: more than {MAX_BATCH_MESSAGES:,} messages",
                hint=f"the server takes at most {MAX_BATCH_MESSAGES:,} messages per batch; "
                "split it into several batches (each is atomic on its own)",
            )
        # The common shape, (subject, bytes), without the checks' calls; anything
        # else (or a bad subject) takes _message, which says what is wrong.
        if type(item) is tuple and len(item) == 2 and type(item[1]) is bytes:
            try:
                out.append(BatchMessage(validate_publish_subject(item[0]), item[1], None))
                continue
            except InvalidArgumentError:
                pass
        out.append(_message(index, item))
    if not out:
        raise InvalidArgumentError("an atomic batch needs at least one message")
    return out


def _message(index: int, item: object) -> BatchMessage:
    if not isinstance(item, tuple) or len(item) not in (2, 3):
        raise InvalidArgumentError(
            f"messages[{index}] must be (subject, payload) or (subject, payload, headers), "
            f"got {type(item).__name__}"
        )
    subject, payload = item[0], item[1]
    headers = item[2] if len(item) == 3 else None
    try:
        validate_publish_subject(subject)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"messages[{index}]: {exc}") from None
    if isinstance(payload, (bytearray, memoryview)):
        payload = bytes(payload)
    elif not isinstance(payload, bytes):
        raise InvalidArgumentError(
            f"messages[{index}]: payload must be bytes, got {type(payload).__name__}"
        )
    if headers is not None:
        if not isinstance(headers, Mapping):
            raise InvalidArgumentError(
                f"messages[{index}]: headers must be a mapping of str to str or list[str], "
                f"got {type(headers).__name__}"
            )
        for name in headers:
            if isinstance(name, str) and name.lower() in _RESERVED:
                raise InvalidArgumentError(
                    f"messages[{index}]: header {name!r} is set by publish_batch itself"
                )
        headers = headers or None
    return BatchMessage(subject, payload, headers)


def batch_header_block(
    batch_id: str,
    sequence: int,
    headers: Mapping[str, str | list[str]] | None = None,
    *,
    commit: bool = False,
) -> bytes:
    """The ``NATS/1.0`` header block of message ``sequence`` (from 1) of a batch.

    Raises:
        InvalidArgumentError: a bad header name or value of the caller's.
    """
    lines = [
        _HEADER_LINE,
        f"{BATCH_ID}: {batch_id}\r\n{BATCH_SEQUENCE}: {sequence}\r\n".encode(),
    ]
    if commit:
        lines.append(f"{BATCH_COMMIT}: 1\r\n".encode())
    if headers:
        # encode_headers checks names and values; drop its NATS/1.0 line.
        lines.append(encode_headers(headers)[len(_HEADER_LINE) :])
    else:
        lines.append(b"\r\n")
    return b"".join(lines)


def check_sizes(batch_id: str, messages: list[BatchMessage], max_payload: int) -> None:
    """Check every message of the batch, headers and all, against ``max_payload``
    (0: no limit) and check the caller's headers, before anything is sent.

    Raises:
        MaxPayloadError: a message is too large with its headers.
        InvalidArgumentError: a bad header of the caller's.
    """
    last = len(messages)
    # What every message's block holds besides its own headers (the commit's
    # header counted on all: a bound, exact for the last).
    base = len(batch_header_block(batch_id, 0, None, commit=True)) - 1
    for sequence, message in enumerate(messages, start=1):
        if message.headers:
            block = len(batch_header_block(batch_id, sequence, message.headers, commit=True))
        else:
            block = base + len(str(sequence))
        if sequence != last:
            block -= len(f"{BATCH_COMMIT}: 1\r\n")
        total = block + len(message.payload)
        if max_payload and total > max_payload:
            raise MaxPayloadError(
                f"message {sequence} of the batch is {total} bytes with its headers, over "
                f"the server's max_payload of {max_payload}; nothing was sent"
            )


def middle_frames(
    batch_id: str, messages: list[BatchMessage], *, chunk: int = 65536
) -> Iterator[bytes]:
    """The HPUB frames (without reply subject) of messages 2 .. n-1, joined into
    writes of about ``chunk`` bytes, made as they are taken (so that at most one
    write is held besides what the connection buffers). :func:`check_sizes` first.
    """
    # Messages without headers of their own share everything up to the sequence number.
    prefix = f"NATS/1.0\r\n{BATCH_ID}: {batch_id}\r\n{BATCH_SEQUENCE}: ".encode()
    parts: list[bytes] = []
    size = 0
    for sequence in range(2, len(messages)):
        message = messages[sequence - 1]
        if message.headers:
            block = batch_header_block(batch_id, sequence, message.headers)
        else:
            block = b"%s%d\r\n\r\n" % (prefix, sequence)
        payload = message.payload
        total = len(block) + len(payload)
        parts += (
            b"HPUB %s %d %d\r\n" % (message.subject.encode(), len(block), total),
            block,
            payload,
            b"\r\n",
        )
        size += total
        if size >= chunk:
            yield b"".join(parts)
            parts.clear()
            size = 0
    if parts:
        yield b"".join(parts)


def _error_of(answer: Any) -> tuple[int | None, int | None, str] | None:
    err = answer.get("error") if isinstance(answer, dict) else None
    if err is None:
        return None
    if not isinstance(err, dict):
        return None, None, str(err)
    code, err_code = err.get("code"), err.get("err_code")
    return (
        code if isinstance(code, int) else None,
        err_code if isinstance(err_code, int) else None,
        str(err.get("description", "")),
    )


def _decode(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise RemoteProtocolError(f"{what} answered non-JSON: {data[:200]!r}") from None


def open_reply_error(data: bytes, status: str | None) -> BatchAbortedError | None:
    """The error in the answer to a batch's first message, or ``None`` (it is open).

    ``status`` is the reply's ``Status`` header (``"503"``: no stream stores the
    subject).
    """
    if status == "503":
        return BatchAbortedError(
            "atomic batch not stored: no stream stores the first message's subject",
            code=503,
            hint="create a stream (with allow_atomic=True) whose subjects include it",
        )
    if not data:
        return None
    found = _error_of(_decode(data, "the first message of the batch"))
    if found is None:
        return None  # not an error: an ack of some kind; the batch goes on
    return batch_error(*found)


def parse_batch_ack(data: bytes, status: str | None, batch_id: str) -> BatchAck:
    """The :class:`BatchAck` in the answer to the commit.

    Raises:
        BatchAbortedError: the server refused the batch (nothing is stored).
        RemoteProtocolError: the answer is not a pub ack.
    """
    if status == "503":
        raise BatchAbortedError(
            "atomic batch not stored: no stream answered the commit",
            code=503,
            hint="the stream may have been deleted while the batch was sent",
        )
    answer = _decode(data, "the commit of the batch")
    found = _error_of(answer)
    if found is not None:
        raise batch_error(*found)
    if not isinstance(answer, dict):
        raise RemoteProtocolError(f"the commit was answered with {data[:200]!r}")
    stream, seq = answer.get("stream"), answer.get("seq")
    count = answer.get("count")
    if not isinstance(stream, str) or not isinstance(seq, int) or not isinstance(count, int):
        raise RemoteProtocolError(
            f"the commit's ack lacks stream/seq/count (is the server older than 2.12?): "
            f"{data[:200]!r}"
        )
    got_id = answer.get("batch")
    if got_id is not None and got_id != batch_id:
        raise RemoteProtocolError(f"the commit's ack names batch {got_id!r}, not {batch_id!r}")
    domain = answer.get("domain")
    return BatchAck(stream, seq, batch_id, count, domain if isinstance(domain, str) else None)
