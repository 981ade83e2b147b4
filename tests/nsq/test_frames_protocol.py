"""Byte-level tests of the NSQ frame decoder and command encoders."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients import InvalidArgumentError
from aioclients.nsq import NSQProtocolError
from aioclients.nsq._errors import NSQError, parse_error_frame
from aioclients.nsq._protocol import _frames as F


def frame(ftype: int, data: bytes) -> bytes:
    return struct.pack(">II", len(data) + 4, ftype) + data


def message(body: bytes, attempts: int = 1, ts: int = 1_700_000_000_000_000_000) -> bytes:
    return struct.pack(">qH", ts, attempts) + b"0123456789abcdef" + body


def test_single_response_frame() -> None:
    assert F.FrameDecoder().feed(b"\x00\x00\x00\x06\x00\x00\x00\x00OK") == [(0, b"OK")]


def test_error_and_message_frames() -> None:
    data = frame(1, b"E_BAD_TOPIC bad") + frame(2, message(b"hi", attempts=3))
    frames = F.FrameDecoder().feed(data)
    assert frames[0] == (1, b"E_BAD_TOPIC bad")
    ts, attempts, mid, body = F.parse_message(frames[1][1])
    assert (ts, attempts, mid, body) == (1_700_000_000_000_000_000, 3, b"0123456789abcdef", b"hi")


def test_every_split_point_gives_the_same_frames() -> None:
    data = frame(0, b"_heartbeat_") + frame(2, message(b"x" * 50)) + frame(0, b"OK")
    whole = F.FrameDecoder().feed(data)
    for cut in range(len(data) + 1):
        d = F.FrameDecoder()
        assert d.feed(data[:cut]) + d.feed(data[cut:]) == whole
    d = F.FrameDecoder()
    got = [f for i in range(len(data)) for f in d.feed(data[i : i + 1])]
    assert got == whole
    assert d.buffered == 0
    assert d.offset == len(data)


def test_empty_frame_data_is_allowed() -> None:
    assert F.FrameDecoder().feed(frame(0, b"")) == [(0, b"")]


def test_size_below_four_names_the_offset() -> None:
    d = F.FrameDecoder()
    d.feed(frame(0, b"OK"))
    with pytest.raises(NSQProtocolError, match=r"below the 4 bytes.*offset 10"):
        d.feed(b"\x00\x00\x00\x03\x00\x00\x00\x00")


def test_unknown_frame_type_names_the_offset() -> None:
    with pytest.raises(NSQProtocolError, match=r"unknown frame type 7.*offset 4") as err:
        F.FrameDecoder().feed(struct.pack(">II", 6, 7) + b"OK")
    assert err.value.offset == 4


def test_short_message_frame_is_rejected() -> None:
    with pytest.raises(NSQProtocolError, match="shorter than the 26-byte"):
        F.FrameDecoder().feed(frame(2, b"x" * 25))


def test_oversized_frame_is_rejected_from_its_header_alone() -> None:
    d = F.FrameDecoder(max_frame_size=100)
    assert d.feed(frame(0, b"x" * 100)) == [(0, b"x" * 100)]
    with pytest.raises(NSQProtocolError, match="larger than the maximum of 100"):
        d.feed(struct.pack(">II", 105 + 4, 0))  # only the header: nothing buffered first


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain", "HTTP/1.1 400 Bad Request"),
        (b'INFO {"server_id":"NDQ","version":"2.11.0"}\r\n', 'INFO {"server_id":"NDQ",'),
    ],
)
def test_text_at_the_start_says_this_is_not_an_nsqd_tcp_port(answer: bytes, shown: str) -> None:
    # Was: "frame of 1213486156 bytes is larger than the maximum ..." (b"HTTP" as a size).
    with pytest.raises(NSQProtocolError) as err:
        F.FrameDecoder().feed(answer)
    message = str(err.value)
    assert f"the server answered with text ({shown!r}), not the NSQ protocol" in message
    assert "nsqd's TCP port (4150 by default" in message
    assert err.value.offset == 0


def test_text_after_the_first_frame_is_only_a_malformed_frame() -> None:
    d = F.FrameDecoder()
    d.feed(frame(0, b"OK"))
    with pytest.raises(NSQProtocolError) as err:
        d.feed(b"HTTP/1.1 400 Bad Request\r\n")
    assert "answered with text" not in str(err.value)


def test_limit_leaves_frames_buffered() -> None:
    d = F.FrameDecoder()
    data = frame(0, b"A") + frame(0, b"B")
    assert d.feed(data, limit=1) == [(0, b"A")]
    assert d.take_buffered() == frame(0, b"B")
    assert d.offset == len(data)


def oversized(mid: bytes, body_size: int, attempts: int = 1) -> tuple[bytes, tuple[int, bytes]]:
    """An oversized message frame and the pseudo-frame the decoder returns for it."""
    head = struct.pack(">qH", 1_700_000_000_000_000_000, attempts) + mid
    return (
        frame(2, head + bytes(range(256)) * (body_size // 256) + b"z" * (body_size % 256)),
        (F.FRAME_OVERSIZED_MESSAGE, head + struct.pack(">I", body_size)),
    )


def test_an_oversized_message_is_reported_from_its_header_and_its_body_read_past() -> None:
    limit = 100
    big, pseudo = oversized(b"big0123456789abc", 1000, attempts=4)
    after = frame(2, message(b"small")) + frame(0, b"_heartbeat_")
    stream = big + after
    d = F.FrameDecoder(max_frame_size=limit)
    got: list[tuple[int, bytes]] = []
    for i in range(len(stream)):
        got += d.feed(stream[i : i + 1])
        if i + 1 < 34:  # size, type and the 26-byte message header
            assert got == []
        elif i + 1 < len(big):
            assert got == [pseudo]
            assert d.skipping == len(big) - (i + 1)
            assert d.buffered == 0  # the body is never held
    assert got == [pseudo, (2, message(b"small")), (0, b"_heartbeat_")]
    assert F.parse_oversized_message(pseudo[1]) == (
        1_700_000_000_000_000_000,
        4,
        b"big0123456789abc",
        1000,
    )
    assert d.offset == len(stream)
    assert d.skipping == 0


def test_an_oversized_message_in_one_chunk_and_with_a_limit() -> None:
    big, pseudo = oversized(b"big0123456789abc", 500)
    d = F.FrameDecoder(max_frame_size=100)
    data = frame(0, b"A") + big + frame(0, b"B")
    assert d.feed(data, limit=2) == [(0, b"A"), pseudo]
    assert d.feed(b"") == [(0, b"B")]


def test_an_oversized_response_or_error_frame_is_still_an_error() -> None:
    for ftype in (0, 1):
        with pytest.raises(NSQProtocolError, match="larger than the maximum of 100"):
            F.FrameDecoder(max_frame_size=100).feed(struct.pack(">II", 200, ftype))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(max_size=60), max_size=4),
    st.integers(101, 3000),
    st.lists(st.binary(max_size=60), max_size=4),
    st.data(),
)
def test_an_oversized_message_in_any_chunking_is_skipped_and_the_stream_goes_on(
    before: list[bytes], body_size: int, after: list[bytes], data: st.DataObject
) -> None:
    limit = 100 + F.MESSAGE_HEADER_SIZE  # a Reader with max_message_size=100
    big, pseudo = oversized(b"0123456789abcdef", body_size)
    expected = [(2, message(b)) for b in before] + [pseudo] + [(2, message(b)) for b in after]
    stream = b"".join(frame(2, message(b)) for b in before) + big
    stream += b"".join(frame(2, message(b)) for b in after)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    d = F.FrameDecoder(max_frame_size=limit)
    got: list[tuple[int, bytes]] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        got += d.feed(stream[prev:cut])
        prev = cut
        assert d.buffered < limit + 8  # never more than one acceptable frame held
    assert got == expected
    assert (d.offset, d.buffered, d.skipping) == (len(stream), 0, 0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=12), st.integers(10, 200))
def test_fuzz_only_protocol_errors_escape(chunks: list[bytes], limit: int) -> None:
    d = F.FrameDecoder(max_frame_size=limit)
    try:
        for chunk in chunks:
            for ftype, data in d.feed(chunk):
                assert ftype in (0, 1, 2, F.FRAME_OVERSIZED_MESSAGE)
                if ftype == F.FRAME_OVERSIZED_MESSAGE:
                    assert F.parse_oversized_message(data)[3] > limit - F.MESSAGE_HEADER_SIZE
                else:
                    assert len(data) <= limit
                if ftype == 2:
                    F.parse_message(data)
            # never more than one incomplete, acceptable frame is held
            assert d.buffered < limit + 8
    except NSQProtocolError as err:
        offset = err.offset
        assert offset is not None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.binary(max_size=60)), max_size=8), st.data())
def test_fuzz_valid_streams_round_trip(
    frames: list[tuple[int, bytes]], data: st.DataObject
) -> None:
    frames = [(t, message(b) if t == 2 else b) for t, b in frames]
    stream = b"".join(frame(t, b) for t, b in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    d = F.FrameDecoder()
    got = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        got += d.feed(stream[prev:cut])
        prev = cut
    assert got == frames


@pytest.mark.parametrize(
    "name", ["a", "topic", "a.b-c_d", "x" * 64, "t#ephemeral", "x" * 54 + "#ephemeral"]
)
def test_valid_names(name: str) -> None:
    assert F.is_valid_name(name)
    assert F.check_topic(name) == name.encode()


@pytest.mark.parametrize(
    "name",
    ["", "x" * 65, "x" * 55 + "#ephemeral", "a b", "a/b", "#ephemeral", "é", "t#eph", 5, None],
)
def test_invalid_names(name: object) -> None:
    assert not F.is_valid_name(name)
    with pytest.raises(InvalidArgumentError, match="not valid for NSQ"):
        F.check_channel(name)


def test_command_encodings() -> None:
    mid = b"0123456789abcdef"
    assert F.encode_sub("t", "c") == b"SUB t c\n"
    assert F.encode_pub("t", b"hello") == b"PUB t\n\x00\x00\x00\x05hello"
    assert F.encode_mpub("t", [b"a", b"bc"]) == (
        b"MPUB t\n\x00\x00\x00\x0f\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x02bc"
    )
    assert F.mpub_body([b"a"]) == b"\x00\x00\x00\x01\x00\x00\x00\x01a"
    assert F.encode_dpub("t", 1500, b"x") == b"DPUB t 1500\n\x00\x00\x00\x01x"
    assert F.encode_rdy(0) == b"RDY 0\n"
    assert F.encode_rdy(2500) == b"RDY 2500\n"
    assert F.encode_fin(mid) == b"FIN " + mid + b"\n"
    assert F.encode_req(mid, 0) == b"REQ " + mid + b" 0\n"
    assert F.encode_touch(mid) == b"TOUCH " + mid + b"\n"
    assert F.encode_cls() == b"CLS\n"
    assert F.encode_nop() == b"NOP\n"
    assert F.encode_auth("s3cret") == b"AUTH\n\x00\x00\x00\x06s3cret"
    assert F.encode_identify({"b": 1, "a": True}) == b'IDENTIFY\n\x00\x00\x00\x10{"a":true,"b":1}'


def test_bad_command_input() -> None:
    with pytest.raises(InvalidArgumentError, match="at least one body"):
        F.encode_mpub("t", [])
    with pytest.raises(InvalidArgumentError, match="list of bodies"):
        F.encode_mpub("t", b"abc")
    with pytest.raises(InvalidArgumentError, match="larger than the maximum message size of 3"):
        F.encode_pub("t", b"abcd", max_size=3)
    with pytest.raises(InvalidArgumentError, match="body #1 of 4 bytes"):
        F.encode_mpub("t", [b"a", b"abcd"], max_size=3)
    with pytest.raises(InvalidArgumentError, match="must be bytes"):
        F.encode_pub("t", "text")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="16 bytes"):
        F.encode_fin(b"short")
    with pytest.raises(InvalidArgumentError, match="milliseconds"):
        F.encode_req(b"0123456789abcdef", -1)
    with pytest.raises(InvalidArgumentError, match="RDY count"):
        F.encode_rdy(-1)
    with pytest.raises(InvalidArgumentError, match="not valid"):
        F.encode_pub("bad topic", b"x")


def test_error_frame_parsing() -> None:
    err = parse_error_frame(b"E_INVALID RDY count 51 out of range 0-50")
    assert isinstance(err, NSQError)
    assert err.code == "E_INVALID"
    assert err.fatal
    assert err.description == "RDY count 51 out of range 0-50"
    assert not parse_error_frame(b"E_FIN_FAILED FIN abc failed").fatal
    assert parse_error_frame(b"").code == "E_UNKNOWN"
