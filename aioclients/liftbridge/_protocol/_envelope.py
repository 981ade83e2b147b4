"""Liftbridge envelopes: how messages and acks travel over plain NATS.

Layout (all integers big-endian)::

    0   4 bytes  magic B9 0E 43 B4
    4   1 byte   version, 0x00
    5   1 byte   header length: 8, or 12 when a CRC follows
    6   1 byte   flags; bit 0: a CRC-32C of the payload is in bytes 8..11
    7   1 byte   message type: 0 = publish Message, 1 = Ack
    8   4 bytes  CRC-32C of the payload (only when flag bit 0 is set)
    hl  ...      the protobuf payload (Message or Ack)

Before this envelope, Liftbridge used a 4-byte cookie ``LIFT`` followed by the
protobuf; the decoders still read that form. Rules: data that does not start
with either marker is "not an envelope" (``unmarshal_message`` returns None,
``unmarshal_ack`` raises); data that starts with one but is short, of another
version or type, has a bad CRC or an undecodable payload raises
:class:`EnvelopeError`, with the offending byte position where there is one.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf.message import DecodeError

from aioclients._errors import InvalidArgumentError
from aioclients.liftbridge._errors import EnvelopeError
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._protocol._crc32c import crc32c
from aioclients.liftbridge._protocol._types import Ack, AckPolicy, Message

__all__ = (
    "LEGACY_COOKIE",
    "MAGIC",
    "MSG_TYPE_ACK",
    "MSG_TYPE_MESSAGE",
    "decode_envelope",
    "encode_envelope",
    "new_message",
    "unmarshal_ack",
    "unmarshal_message",
)

MAGIC = b"\xb9\x0e\x43\xb4"
LEGACY_COOKIE = b"LIFT"
VERSION = 0x00
MIN_HEADER = 8
CRC_HEADER = 12
FLAG_CRC = 0x01
MSG_TYPE_MESSAGE = 0
MSG_TYPE_ACK = 1
_TYPE_NAMES = {MSG_TYPE_MESSAGE: "Message", MSG_TYPE_ACK: "Ack"}


def encode_envelope(payload: bytes, msg_type: int, *, crc: bool = False) -> bytes:
    """Wrap a serialized protobuf in an envelope header (with a CRC-32C if ``crc``)."""
    if msg_type not in _TYPE_NAMES:
        raise InvalidArgumentError(f"msg_type must be 0 (Message) or 1 (Ack), got {msg_type!r}")
    if crc:
        header = MAGIC + bytes((VERSION, CRC_HEADER, FLAG_CRC, msg_type))
        return header + crc32c(payload).to_bytes(4, "big") + payload
    return MAGIC + bytes((VERSION, MIN_HEADER, 0, msg_type)) + payload


def decode_envelope(data: bytes, expected_type: int) -> bytes | None:
    """Return the protobuf payload of an envelope of ``expected_type``.

    Returns None when ``data`` carries neither the magic number nor the legacy
    cookie; raises :class:`EnvelopeError` when it carries one but is malformed.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"data must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if data[:4] == LEGACY_COOKIE:
        return data[4:]
    if data[:4] != MAGIC:
        return None
    if len(data) < MIN_HEADER:
        raise EnvelopeError(f"envelope truncated: {len(data)} bytes, need at least 8")
    version, header_len, flags, msg_type = data[4], data[5], data[6], data[7]
    if version != VERSION:
        raise EnvelopeError(f"unknown envelope version {version}", offset=4)
    if msg_type != expected_type:
        want = _TYPE_NAMES[expected_type]
        got = _TYPE_NAMES.get(msg_type, f"unknown type {msg_type}")
        raise EnvelopeError(f"expected an envelope of a {want}, got {got}", offset=7)
    if flags & FLAG_CRC:
        if header_len != CRC_HEADER:
            raise EnvelopeError(
                f"CRC flag set but header length is {header_len}, expected 12", offset=5
            )
        if len(data) < CRC_HEADER:
            raise EnvelopeError(f"envelope truncated: {len(data)} bytes, need at least 12")
        payload = data[CRC_HEADER:]
        expected = int.from_bytes(data[MIN_HEADER:CRC_HEADER], "big")
        actual = crc32c(payload)
        if actual != expected:
            raise EnvelopeError(
                f"envelope CRC-32C mismatch: header says {expected:#010x}, "
                f"payload has {actual:#010x}",
                offset=8,
            )
        return payload
    if header_len != MIN_HEADER:
        raise EnvelopeError(f"header length {header_len} without CRC flag, expected 8", offset=5)
    return data[MIN_HEADER:]


def _parse(message: pb.Message | pb.Ack, payload: bytes, what: str) -> None:
    try:
        message.ParseFromString(payload)
    except DecodeError as exc:
        raise EnvelopeError(f"envelope holds no valid {what} protobuf: {exc}") from None


def new_message(
    value: bytes,
    *,
    key: bytes | None = None,
    headers: Mapping[str, bytes] | None = None,
    ack_inbox: str | None = None,
    correlation_id: str | None = None,
    ack_policy: AckPolicy = AckPolicy.LEADER,
    expected_offset: int | None = None,
    crc: bool = False,
) -> bytes:
    """Serialize a message envelope ready to publish on a NATS subject.

    A stream attached to that subject stores the message with its key and
    headers, and sends an Ack envelope to ``ack_inbox`` (unless ``ack_policy``
    is NONE); read it with :func:`unmarshal_ack`.

    Args:
        value: the payload.
        key: the message key (partitioning, compaction).
        headers: ``dict[str, bytes]``.
        ack_inbox: NATS subject for the ack.
        correlation_id: echoed in the ack.
        ack_policy: when to ack.
        expected_offset: the offset the message must land at (streams with
            optimistic concurrency control); default "next".
        crc: add a CRC-32C of the payload to the header.

    Returns:
        The envelope bytes.

    Raises:
        InvalidArgumentError: a value of the wrong type.
    """
    if not isinstance(value, (bytes, bytearray)):
        raise InvalidArgumentError(f"value must be bytes, got {type(value).__name__}")
    if key is not None and not isinstance(key, (bytes, bytearray)):
        raise InvalidArgumentError(f"key must be bytes or None, got {type(key).__name__}")
    message = pb.Message(
        value=bytes(value),
        key=bytes(key or b""),
        ackInbox=ack_inbox or "",
        correlationId=correlation_id or "",
        ackPolicy=int(AckPolicy(ack_policy)),  # type: ignore[arg-type]
        # The offset field carries the expected offset; -1 means "whatever is next".
        offset=-1 if expected_offset is None else expected_offset,
    )
    if headers:
        for name, header in headers.items():
            if not isinstance(name, str) or not isinstance(header, (bytes, bytearray)):
                raise InvalidArgumentError(
                    f"headers must map str to bytes, got {name!r}: {type(header).__name__}"
                )
            message.headers[name] = bytes(header)
    return encode_envelope(message.SerializeToString(), MSG_TYPE_MESSAGE, crc=crc)


def unmarshal_message(data: bytes) -> Message | None:
    """Decode a message envelope (as published with :func:`new_message`).

    Returns:
        The :class:`Message`, or ``None`` when ``data`` is not an envelope at all
        (e.g. a plain NATS payload).

    Raises:
        EnvelopeError: ``data`` starts like an envelope but is malformed or holds an Ack.
    """
    payload = decode_envelope(data, MSG_TYPE_MESSAGE)
    if payload is None:
        return None
    message = pb.Message()
    _parse(message, payload, "Message")
    return Message._wrap(message)


def unmarshal_ack(data: bytes) -> Ack:
    """Decode an Ack envelope received on an ``ack_inbox``.

    Returns:
        The :class:`Ack` (its ``partition`` is ``None``: the envelope does not say).

    Raises:
        EnvelopeError: ``data`` is not an Ack envelope.
    """
    payload = decode_envelope(data, MSG_TYPE_ACK)
    if payload is None:
        raise EnvelopeError("not a Liftbridge envelope: no magic number and no LIFT cookie")
    ack = pb.Ack()
    _parse(ack, payload, "Ack")
    return Ack._from_pb(ack)
