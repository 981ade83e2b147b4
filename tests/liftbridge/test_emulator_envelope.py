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


@given(
    st.text(max_size=300),
    st.text(max_size=40),
    st.integers(min_value=0, max_value=2**63 - 1),
    st.sampled_from([pb.Ack.OK, pb.Ack.INCORRECT_OFFSET]),
)
def test_hand_written_publish_response_is_what_protobuf_writes(
    correlation_id: str, stream: str, offset: int, error: pb.Ack.Error
) -> None:
    from aioclients.testing._liftbridge_broker import _ack_response

    # Correlation ids up to 300 characters: one- and two-byte length prefixes.
    ack = pb.Ack(stream=stream, offset=offset, correlationId=correlation_id, ackError=error)
    expected = pb.PublishResponse(correlationId=correlation_id, ack=ack).SerializeToString()
    assert _ack_response(ack) == expected


def test_ingest_stores_the_envelope_message_without_publish_only_fields() -> None:
    from aioclients.testing._liftbridge_broker import Ingester
    from aioclients.testing._liftbridge_state import ClusterState

    state = ClusterState(["b0"], cursor_partitions=0)
    state.create_stream(pb.CreateStreamRequest(name="s", subject="s.subj"))
    p = state.streams["s"].partitions[0]
    acks: list[pb.Ack] = []
    state.local_acks["inbox"] = acks.append
    published = pb.Message(
        key=b"k",
        value=b"v",
        headers={"h": b"1", "subject": b"spoofed"},
        ackInbox="inbox",
        correlationId="c",
        ackPolicy=pb.LEADER,
        offset=42,  # an expected offset: not the stored one
        stream="other",
    )
    Ingester(state)._ingest(p, "s.subj", "r", env.encode(published.SerializeToString(), 0))
    Ingester(state)._ingest(p, "s.subj", "", b"raw")
    stored = [pb.Message.FromString(e) for e in p.entries]
    assert stored[0] == pb.Message(
        offset=0,
        key=b"k",
        value=b"v",
        timestamp=p.timestamps[0],
        stream="s",
        partition=0,
        subject="s.subj",
        replySubject="r",
        headers={"h": b"1", "subject": b"s.subj", "reply": b"r"},
    )
    assert stored[1] == pb.Message(
        offset=1,
        value=b"raw",
        timestamp=p.timestamps[1],
        stream="s",
        subject="s.subj",
        headers={"subject": b"s.subj", "reply": b""},
    )
    (ack,) = acks  # the raw message has no ack inbox
    assert (ack.offset, ack.correlationId, ack.ackInbox, ack.msgSubject) == (
        0,
        "c",
        "inbox",
        "s.subj",
    )
    assert ack.receptionTimestamp == p.timestamps[0] <= ack.commitTimestamp
