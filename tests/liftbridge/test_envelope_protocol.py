"""Envelope codec: golden bytes, round trips, every malformed form, fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients.liftbridge import (
    AckPolicy,
    EnvelopeError,
    new_message,
    unmarshal_ack,
    unmarshal_message,
)
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._protocol._crc32c import crc32c
from aioclients.liftbridge._protocol._envelope import encode_envelope

MAGIC = bytes.fromhex("b90e43b4")
ACK_PAYLOAD = bytes.fromhex("0a01732005")  # Ack(stream="s", offset=5)


def test_crc32c_known_values() -> None:
    # The standard check value and the RFC 3720 (iSCSI) test vectors.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(b"") == 0
    assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283


def test_new_message_golden_bytes() -> None:
    # header: magic, version 0, header length 8, no flags, type 0 (Message);
    # payload: offset=-1 (expected offset "next"), value="hello".
    assert new_message(b"hello") == bytes.fromhex(
        "b90e43b4 00 08 00 00 08ffffffffffffffffff01 1a0568656c6c6f".replace(" ", "")
    )


def test_new_message_with_crc_golden_bytes() -> None:
    data = new_message(
        b"hello",
        key=b"k",
        headers={"h": b"v"},
        ack_inbox="in",
        correlation_id="c1",
        ack_policy=AckPolicy.ALL,
        crc=True,
    )
    assert data[:8] == MAGIC + bytes([0, 12, 1, 0])
    payload = data[12:]
    assert data[8:12] == crc32c(payload).to_bytes(4, "big") == bytes.fromhex("058823ac")
    # offset -1, key "k", value "hello", headers {"h": "v"}, ackInbox "in",
    # correlationId "c1", ackPolicy ALL
    expected = (
        "08ffffffffffffffffff01 12016b 1a0568656c6c6f 4a060a0168120176 5202696e 5a026331 6001"
    )
    assert payload == bytes.fromhex(expected.replace(" ", ""))


def test_ack_golden_bytes_plain_and_with_crc() -> None:
    plain = MAGIC + bytes([0, 8, 0, 1]) + ACK_PAYLOAD
    with_crc = MAGIC + bytes([0, 12, 1, 1]) + (0xDBA5396E).to_bytes(4, "big") + ACK_PAYLOAD
    assert encode_envelope(ACK_PAYLOAD, 1) == plain
    assert encode_envelope(ACK_PAYLOAD, 1, crc=True) == with_crc
    for data in (plain, with_crc):
        ack = unmarshal_ack(data)
        assert (ack.stream, ack.offset, ack.partition, ack.ack_error) == ("s", 5, None, None)


def test_message_round_trip_keeps_every_field() -> None:
    for crc in (False, True):
        data = new_message(
            b"v" * 100,
            key=b"key",
            headers={"a": b"1", "b": b""},
            ack_inbox="acks",
            correlation_id="cid",
            ack_policy=AckPolicy.NONE,
            crc=crc,
        )
        msg = unmarshal_message(data)
        assert msg is not None
        assert msg.value == b"v" * 100
        assert msg.key == b"key"
        assert msg.headers == {"a": b"1", "b": b""}
        assert msg.ack_inbox == "acks"
        assert msg.correlation_id == "cid"
        assert msg.ack_policy is AckPolicy.NONE
        assert msg.offset == -1  # the expected-offset slot: "next"


def test_expected_offset_travels_in_the_offset_field() -> None:
    msg = unmarshal_message(new_message(b"x", expected_offset=41))
    assert msg is not None
    assert msg.offset == 41


def test_ack_round_trip_with_every_field() -> None:
    ack_pb = pb.Ack(
        stream="st",
        partitionSubject="sub.2",
        msgSubject="sub.2",
        offset=99,
        ackInbox="in",
        correlationId="c",
        ackPolicy=1,
        receptionTimestamp=10,
        commitTimestamp=11,
        ackError=2,
    )
    ack = unmarshal_ack(encode_envelope(ack_pb.SerializeToString(), 1, crc=True))
    assert ack.partition_subject == "sub.2"
    assert ack.msg_subject == "sub.2"
    assert ack.offset == 99
    assert ack.ack_policy is AckPolicy.ALL
    assert (ack.reception_timestamp, ack.commit_timestamp) == (10, 11)
    assert ack.ack_error == "INCORRECT_OFFSET"
    assert (ack.ack_inbox, ack.correlation_id) == ("in", "c")


def test_legacy_lift_cookie_is_read() -> None:
    msg_pb = pb.Message(value=b"old", key=b"k")
    msg = unmarshal_message(b"LIFT" + msg_pb.SerializeToString())
    assert msg is not None
    assert (msg.value, msg.key) == (b"old", b"k")
    ack = unmarshal_ack(b"LIFT" + ACK_PAYLOAD)
    assert (ack.stream, ack.offset) == ("s", 5)


@pytest.mark.parametrize("data", [b"", b"hello", b"\x00" * 20, b"LIF", MAGIC[:3], b"\xb9"])
def test_non_envelopes(data: bytes) -> None:
    assert unmarshal_message(data) is None
    with pytest.raises(EnvelopeError, match="not a Liftbridge envelope"):
        unmarshal_ack(data)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (MAGIC, "truncated"),
        (MAGIC + b"\x00\x08\x00", "truncated"),
        (MAGIC + bytes([1, 8, 0, 0]) + b"x", "version 1"),
        (MAGIC + bytes([0, 8, 0, 1]) + ACK_PAYLOAD, "expected an envelope of a Message, got Ack"),
        (MAGIC + bytes([0, 8, 0, 7]), "unknown type 7"),
        (MAGIC + bytes([0, 9, 0, 0]), "header length 9"),
        (MAGIC + bytes([0, 8, 1, 0]) + b"abcd", "CRC flag set but header length is 8"),
        (MAGIC + bytes([0, 12, 1, 0]) + b"ab", "truncated"),
        (MAGIC + bytes([0, 12, 1, 0]) + b"\x00\x00\x00\x00" + b"\x1a\x01x", "CRC-32C mismatch"),
        (MAGIC + bytes([0, 8, 0, 0]) + b"\xff\xff", "no valid Message"),
    ],
)
def test_malformed_message_envelopes(data: bytes, match: str) -> None:
    with pytest.raises(EnvelopeError, match=match):
        unmarshal_message(data)


def test_envelope_error_names_the_offending_byte() -> None:
    with pytest.raises(EnvelopeError) as info:
        unmarshal_message(MAGIC + bytes([0, 12, 1, 0]) + b"\x00\x00\x00\x01" + b"\x1a\x01x")
    assert info.value.offset == 8
    with pytest.raises(EnvelopeError) as info:
        unmarshal_ack(new_message(b"x"))
    assert info.value.offset == 7


def test_a_flipped_payload_bit_fails_the_crc() -> None:
    data = bytearray(new_message(b"payload", crc=True))
    data[-1] ^= 0x01
    with pytest.raises(EnvelopeError, match="CRC"):
        unmarshal_message(bytes(data))


def test_new_message_rejects_bad_types() -> None:
    from aioclients import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="value must be bytes"):
        new_message("text")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="key must be bytes"):
        new_message(b"x", key="k")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="headers must map str to bytes"):
        new_message(b"x", headers={"a": "b"})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgumentError, match="data must be bytes"):
        unmarshal_message("text")  # type: ignore[arg-type]


@given(st.binary(max_size=64))
def test_fuzz_arbitrary_bytes_give_none_a_message_or_envelope_error(data: bytes) -> None:
    try:
        result = unmarshal_message(data)
    except EnvelopeError:
        return
    assert result is None or result.value is not None


@given(
    st.binary(max_size=48),
    st.sampled_from(
        [b"", MAGIC, MAGIC + b"\x00\x08\x00\x00", MAGIC + b"\x00\x0c\x01\x01", b"LIFT"]
    ),
)
def test_fuzz_envelope_prefixed_bytes_only_raise_envelope_error(tail: bytes, prefix: bytes) -> None:
    data = prefix + tail
    for decode in (unmarshal_message, unmarshal_ack):
        try:
            decode(data)
        except EnvelopeError:
            pass


@given(
    st.binary(max_size=200),
    st.one_of(st.none(), st.binary(min_size=1, max_size=20)),
    st.dictionaries(st.text(max_size=5), st.binary(max_size=5), max_size=3),
    st.booleans(),
)
def test_fuzz_round_trip(
    value: bytes, key: bytes | None, headers: dict[str, bytes], crc: bool
) -> None:
    msg = unmarshal_message(new_message(value, key=key, headers=headers, crc=crc))
    assert msg is not None
    assert (msg.value, msg.key, msg.headers) == (value, key, headers)
