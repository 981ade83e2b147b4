"""The emulator's own envelope codec (kept apart from the client's on purpose)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.testing import _liftbridge_envelope as env

MAGIC = bytes.fromhex("b90e43b4")


def test_crc32c_check_value() -> None:
    # The standard CRC-32C check value of "123456789".
    assert env.crc32c(b"123456789") == 0xE3069283
    assert env.crc32c(b"") == 0


def test_encode_golden_bytes() -> None:
    payload = pb.Ack(offset=5).SerializeToString()
    assert payload == b"\x20\x05"
    assert env.encode(payload, env.TYPE_ACK) == MAGIC + b"\x00\x08\x00\x01" + payload
    crc = struct.pack(">I", env.crc32c(payload))
    assert env.encode(payload, env.TYPE_PUBLISH, with_crc=True) == (
        MAGIC + b"\x00\x0c\x01\x00" + crc + payload
    )


def test_decode_round_trips_and_checks_type() -> None:
    msg = pb.Message(key=b"k", value=b"v", correlationId="c")
    data = env.encode(msg.SerializeToString(), env.TYPE_PUBLISH)
    assert env.decode_message(data) == msg
    assert env.decode_ack(data) is None  # a publish envelope is not an ack
    crc_data = env.encode(msg.SerializeToString(), env.TYPE_PUBLISH, with_crc=True)
    assert env.decode_message(crc_data) == msg
    ack = pb.Ack(offset=9, stream="s")
    assert env.decode_ack(env.encode(ack.SerializeToString(), env.TYPE_ACK)) == ack


def test_decode_rejects_what_the_server_rejects() -> None:
    payload = pb.Message(value=b"v").SerializeToString()
    good = env.encode(payload, env.TYPE_PUBLISH, with_crc=True)
    bad_crc = good[:8] + bytes([good[8] ^ 1]) + good[9:]
    cases = [
        b"",
        MAGIC,  # shorter than a header
        b"LIFT" + good[4:],  # wrong magic
        MAGIC + b"\x01" + good[5:],  # unknown version
        bad_crc,
        MAGIC + b"\x00\x08\x01\x00" + payload,  # CRC flag without room for a CRC
        MAGIC + b"\x00\x40\x00\x00" + payload,  # header longer than the data
        MAGIC + b"\x00\x08\x00\x00" + b"\xff\xff",  # not a protobuf
    ]
    for data in cases:
        assert env.decode_message(data) is None, data


@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_to_none_or_a_message(data: bytes) -> None:
    for candidate in (data, MAGIC + data, MAGIC + b"\x00\x08\x00\x00" + data):
        result = env.decode_message(candidate)
        assert result is None or isinstance(result, pb.Message)
    ack = env.decode_ack(MAGIC + b"\x00\x08\x00\x01" + data)
    assert ack is None or isinstance(ack, pb.Ack)


@given(st.binary(max_size=64), st.binary(max_size=16), st.booleans())
def test_round_trip(value: bytes, key: bytes, with_crc: bool) -> None:
    msg = pb.Message(key=key, value=value)
    data = env.encode(msg.SerializeToString(), env.TYPE_PUBLISH, with_crc=with_crc)
    assert env.decode_message(data) == msg
