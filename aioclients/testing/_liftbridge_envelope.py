"""The Liftbridge envelope, as the emulated brokers read and write it on NATS.

Kept apart from the client's codec on purpose: the emulator must not share
code with the library it tests, so that a bug on one side cannot hide on the
other.

Layout (big-endian), as the Liftbridge server defines it::

    0..3  magic      B9 0E 43 B4
    4     version    0x00
    5     headerLen  8, or 12 when a CRC follows
    6     flags      bit 0: a CRC-32C of the payload follows the 8 header bytes
    7     msgType    0 = publish (a ``Message``), 1 = ``Ack``
    8..   [CRC-32C]  then the protobuf payload

The server treats anything that does not parse as a publish envelope as a raw
message whose value is the whole NATS payload.
"""

from __future__ import annotations

import struct

from aioclients.liftbridge._pb import api_pb2

__all__ = (
    "MAGIC",
    "TYPE_ACK",
    "TYPE_PUBLISH",
    "crc32c",
    "decode",
    "decode_ack",
    "decode_message",
    "encode",
)

MAGIC = b"\xb9\x0e\x43\xb4"
TYPE_PUBLISH = 0
TYPE_ACK = 1
_VERSION = 0
_MIN_HEADER = 8
_FLAG_CRC = 0x01


def _make_crc32c_table() -> list[int]:
    poly = 0x82F63B78  # Castagnoli, reflected
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C_TABLE = _make_crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``; slow, used only for envelopes that ask for it."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def encode(payload: bytes, msg_type: int, *, with_crc: bool = False) -> bytes:
    """Wrap a serialized protobuf in an envelope of the given type."""
    if with_crc:
        header = MAGIC + bytes((_VERSION, _MIN_HEADER + 4, _FLAG_CRC, msg_type))
        return header + struct.pack(">I", crc32c(payload)) + payload
    return MAGIC + bytes((_VERSION, _MIN_HEADER, 0, msg_type)) + payload


def decode(data: bytes, msg_type: int) -> bytes | None:
    """The protobuf payload of an envelope of ``msg_type``, or None when ``data`` is not one.

    None covers everything the server would not accept: too short, wrong magic,
    unknown version, another message type, a bad header length or a CRC mismatch.
    """
    if len(data) < _MIN_HEADER or data[:4] != MAGIC or data[4] != _VERSION:
        return None
    header_len = data[5]
    flags = data[6]
    if data[7] != msg_type or header_len < _MIN_HEADER or header_len > len(data):
        return None
    payload = data[header_len:]
    if flags & _FLAG_CRC:
        if header_len != _MIN_HEADER + 4:
            return None
        (crc,) = struct.unpack_from(">I", data, _MIN_HEADER)
        if crc32c(payload) != crc:
            return None
    return bytes(payload)


def decode_message(data: bytes) -> api_pb2.Message | None:
    """A publish envelope's ``Message``, or None when ``data`` is not a valid one."""
    payload = decode(data, TYPE_PUBLISH)
    if payload is None:
        return None
    msg = api_pb2.Message()
    try:
        msg.ParseFromString(payload)
    except Exception:  # protobuf raises its DecodeError (or others on garbage)
        return None
    return msg


def decode_ack(data: bytes) -> api_pb2.Ack | None:
    """An ack envelope's ``Ack``, or None when ``data`` is not a valid one."""
    payload = decode(data, TYPE_ACK)
    if payload is None:
        return None
    ack = api_pb2.Ack()
    try:
        ack.ParseFromString(payload)
    except Exception:
        return None
    return ack
