"""The NATS frame scanner: every frame kind, any chunking, and malformed input."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients._errors import RemoteProtocolError
from aioclients.jetstream._protocol._wire import (
    _NUMBERS,
    _NUMBERS_MAX,
    ERR,
    INFO,
    MAX_CONTROL_LINE,
    MAX_INFO_LINE,
    MSG,
    OK,
    PING,
    PONG,
    first_header_delivery_sid,
    scan,
    scan_deliveries,
    scan_header_deliveries,
    single_message,
)

STREAM = (
    b'INFO {"server_id":"x","max_payload":1048576}\r\n'
    b"MSG foo.bar 7 5\r\nhello\r\n"
    b"MSG foo.bar 7 _INBOX.a 0\r\n\r\n"
    b"HMSG s 9 $JS.ACK.S.C.1.2.3.4.5 12 15\r\nNATS/1.0\r\n\r\nabc\r\n"
    b"HMSG s 9 32 32\r\nNATS/1.0 408 Request Timeout\r\n\r\n\r\n"
    b"PING\r\nPONG\r\n+OK\r\n-ERR 'Stale Connection'\r\n"
    b"MSG\tt\t3\t2\r\nhi\r\n"
)

EXPECTED = [
    (INFO, b'{"server_id":"x","max_payload":1048576}'),
    (MSG, b"foo.bar", 7, b"", None, b"hello"),
    (MSG, b"foo.bar", 7, b"_INBOX.a", None, b""),
    (MSG, b"s", 9, b"$JS.ACK.S.C.1.2.3.4.5", b"NATS/1.0\r\n\r\n", b"abc"),
    (MSG, b"s", 9, b"", b"NATS/1.0 408 Request Timeout\r\n\r\n", b""),
    (PING,),
    (PONG,),
    (OK,),
    (ERR, b"'Stale Connection'"),
    (MSG, b"t", 3, b"", None, b"hi"),
]


def test_every_frame_kind() -> None:
    frames, used, need = scan(STREAM)
    assert frames == EXPECTED
    assert used == len(STREAM)
    assert need == 0


def test_payload_containing_crlf_and_protocol_words() -> None:
    body = b"PING\r\nMSG x 1 2\r\n"
    frames, _, _ = scan(b"MSG a 1 %d\r\n%s\r\n" % (len(body), body))
    assert frames == [(MSG, b"a", 1, b"", None, body)]


@given(st.lists(st.integers(0, len(STREAM)), max_size=8))
def test_any_chunking_gives_the_same_frames(cuts: list[int]) -> None:
    rest = b""
    frames: list[tuple[object, ...]] = []
    previous = 0
    for cut in [*sorted(cuts), len(STREAM)]:
        buffer = rest + STREAM[previous:cut]
        previous = cut
        got, used, _ = scan(buffer)
        frames.extend(got)
        rest = buffer[used:]
    assert frames == EXPECTED
    assert rest == b""


def test_a_large_message_is_left_to_scan() -> None:
    """single_message reads buffers of up to 32 KiB (it copies what follows the
    control line once); a larger message is scan's, which slices it out alone."""
    small = b"MSG a 1 %d\r\n%s\r\n" % (32 * 1024 - 17, b"x" * (32 * 1024 - 17))
    assert len(small) == 32 * 1024
    assert single_message(small) == scan(small)[0][0]
    large = b"MSG a 1 %d\r\n%s\r\n" % (32 * 1024, b"x" * (32 * 1024))
    assert single_message(large) is None
    assert scan(large)[0][0][5] == b"x" * (32 * 1024)


@pytest.mark.parametrize(
    "data",
    [
        b"BOGUS\r\n",
        b"MSG a b 3\r\nabc\r\n",  # sid not a number
        b"MSG a 1 x\r\nabc\r\n",
        b"MSG a 1\r\n",
        b"HMSG a 1 5 3\r\nabcde\r\n",  # header larger than the total
        b"MSG a 1 3\r\nabcXY",  # payload not followed by CRLF
        b"MSGX a 1 3\r\nabc\r\n",
        b"X" * 5000,
    ],
)
def test_malformed_input_raises_with_an_offset(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        scan(data)
    assert info.value.offset is not None


def test_an_incomplete_frame_waits() -> None:
    # The control line is there: the caller learns the whole frame's size.
    assert scan(b"MSG a 1 10\r\nabc") == ([], 0, len(b"MSG a 1 10\r\n") + 10 + 2)
    assert scan(b"PING\r\nMSG a 1 10\r\n") == ([(PING,)], 6, 24)
    assert scan(b"PIN") == ([], 0, 0)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_only_raise_remote_protocol_error(data: bytes) -> None:
    try:
        _frames, used, need = scan(data)
    except RemoteProtocolError:
        return
    assert 0 <= used <= len(data)
    assert need == 0 or need > len(data) - used


def _frame_bytes() -> list[bytes]:
    """Each frame of STREAM as its own buffer (cut where scan first sees it whole)."""
    out, pos = [], 0
    while pos < len(STREAM):
        cut = next(c for c in range(pos + 1, len(STREAM) + 1) if scan(STREAM[pos:c])[0])
        out.append(STREAM[pos:cut])
        pos = cut
    assert [scan(f)[0][0] for f in out] == EXPECTED
    return out


FRAMES = _frame_bytes()


@pytest.mark.parametrize("data", FRAMES)
def test_a_buffer_of_exactly_one_message_is_read_alone_as_scan_reads_it(data: bytes) -> None:
    frames, used, _ = scan(data)
    one = single_message(data)
    if frames[0][0] == MSG and b"\t" not in data.split(b"\r\n", 1)[0]:
        assert one == frames[0]
        assert used == len(data)
    else:
        assert one is None  # not a message, or a control line single_message leaves to scan


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"MSG a 1 3\r\nabc",  # cut short
        b"MSG a 1 3\r\nabc\r\nPING\r\n",  # more after it
        b"MSG a 1 3\r\nabc\r\nMSG a 1 3\r\nabc\r\n",
        b"MSG a b 3\r\nabc\r\n",
        b"MSG a 1 -3\r\nabc\r\n",
        b"HMSG a 1 5 3\r\nabcde\r\n",
        b"MSG a 1 3\r\nabcXY",
        b"MSGX a 1 3\r\nabc\r\n",
        b"MSG  1 3\r\nabc\r\n",
    ],
)
def test_anything_but_exactly_one_whole_message_is_left_to_scan(data: bytes) -> None:
    assert single_message(data) is None


@pytest.mark.parametrize(
    "data",
    [
        b"MSG a 1 +3\r\nabc\r\n",
        b"MSG a +1 3\r\nabc\r\n",
        b"HMSG a 1 +0 3\r\nabc\r\n",
        b"MSG a 1 3_\r\nabc\r\n",
        b"MSG a 1 \xd9\xa3\r\nabc\r\n",  # an Arabic-Indic 3
    ],
)
def test_numbers_int_reads_but_a_control_line_may_not_hold_stay_refused(data: bytes) -> None:
    """single_message reads its numbers from a cache of texts of digits: a text that
    int() reads (and that scan's own cache may hold) is refused, before and after
    a message whose line holds the same number written plainly."""
    with contextlib.suppress(RemoteProtocolError):
        scan(data)  # whatever scan makes of it, and caches
    for _ in range(2):
        assert single_message(data) is None
        assert single_message(b"MSG a 1 3\r\nabc\r\n") == (MSG, b"a", 1, b"", None, b"abc")


@given(
    st.lists(
        st.tuples(st.integers(1, 10**6), st.integers(0, 300), st.integers(0, 300)),
        min_size=1,
        max_size=30,
    )
)
def test_single_message_reads_each_line_s_own_numbers_seen_before_or_not(
    lines: list[tuple[int, int, int]],
) -> None:
    for _ in range(2):  # the second pass reads every number from the cache
        for sid, size, hsize in lines:
            data = b"HMSG s %d %d %d\r\n%s%s\r\n" % (
                sid,
                hsize,
                hsize + size,
                b"h" * hsize,
                b"p" * size,
            )
            one = single_message(data)
            assert one is not None
            assert (one[2], len(one[4] or b""), len(one[5])) == (sid, hsize, size)


@given(st.binary(max_size=120), st.sampled_from(FRAMES[1:5]), st.integers(0, 3))
def test_whatever_single_message_reads_scan_reads_the_same(
    noise: bytes, frame: bytes, where: int
) -> None:
    for data in (noise, frame[:where] + noise + frame[where:], frame + noise, noise + frame):
        one = single_message(data)
        if one is None:
            continue
        frames, used, _ = scan(data)
        assert frames == [one]
        assert used == len(data)


@given(
    st.lists(
        st.tuples(st.integers(1, 10**6), st.integers(0, 3000), st.integers(0, 300)),
        min_size=1,
        max_size=30,
    )
)
def test_numbers_read_again_from_the_cache_are_the_numbers_on_the_wire(
    lines: list[tuple[int, int, int]],
) -> None:
    """sids and sizes come from a cache of numbers seen before: seen or not, each
    frame has the values of its own control line."""
    data = b"".join(
        b"HMSG s %d r %d %d\r\n%s%s\r\n" % (sid, hsize, hsize + size, b"h" * hsize, b"p" * size)
        for sid, size, hsize in lines
    )
    for _ in range(2):  # the second pass reads every number from the cache
        frames, used, need = scan(data)
        assert (used, need) == (len(data), 0)
        assert [(f[2], len(f[4] or b""), len(f[5])) for f in frames] == [
            (sid, hsize, size) for sid, size, hsize in lines
        ]


def test_the_number_cache_stays_bounded_and_refuses_what_int_refuses() -> None:
    data = b"".join(b"MSG s 1 %d\r\n%s\r\n" % (size, b"p" * size) for size in range(6000))
    assert len(scan(data)[0]) == 6000
    assert len(_NUMBERS) <= _NUMBERS_MAX
    for _ in range(2):  # a number int() reads but a size may not be: refused, cached or not
        with pytest.raises(RemoteProtocolError):
            scan(b"MSG s 1 -1\r\n\r\n")
        with pytest.raises(RemoteProtocolError):
            scan(b"HMSG s 1 5 4\r\nNATS/\r\n")


def _delivery(seq: int, payload: bytes = b"x" * 10, sid: int = 7) -> bytes:
    reply = b"$JS.ACK.S.C.1.%d.%d.1764168000000000000.0" % (seq, seq)
    return b"MSG s.%d %d %s %d\r\n%s\r\n" % (seq % 3, sid, reply, len(payload), payload)


def _as_columns(frames: list[tuple[object, ...]]) -> tuple[object, ...]:
    return (
        tuple(f[1] for f in frames),
        tuple(f[3] for f in frames),
        [f[5] for f in frames],
        [len(f[5]) for f in frames],  # type: ignore[arg-type]
    )


def test_a_read_of_deliveries_comes_as_columns_up_to_what_follows() -> None:
    run = b"".join(_delivery(seq) for seq in range(1, 6))
    for tail in (b"", b"MSG s.1 7 r 10\r\nxx", b"PING\r\n", b"MSG s.1 7 r", b"\r"):
        data = run + tail
        frames, used, need = scan(data)
        got = scan_deliveries(data, {7})
        assert got is not None
        sid, *columns, upto = got
        assert (sid, upto) == (7, len(run))
        assert tuple(columns) == _as_columns(frames[:5])
        # what follows the run is scan's, from there on, as it would read it
        assert scan(data, upto) == (frames[5:], used, need)


def test_what_follows_deliveries_is_read_on_and_may_be_malformed() -> None:
    data = _delivery(1) + b"MSG s 7 r -3\r\n"
    got = scan_deliveries(data, {7})
    assert got is not None
    with pytest.raises(RemoteProtocolError):
        scan(data, got[5])


@pytest.mark.parametrize(
    ("sizes", "read"),
    [
        ((b"3", b"3", b"3"), True),  # one size, read from one text
        ((b"3", b"03", b"3"), True),  # one size, written otherwise once: each read
        ((b"4", b"4", b"4"), False),  # one text, not the payloads' size
        ((b"3", b"3", b"4"), False),  # the last one's size not its payload's
        ((b"x", b"x", b"x"), False),  # no number
    ],
)
def test_a_run_of_one_size_is_read_only_when_every_line_says_it(
    sizes: tuple[bytes, ...], read: bool
) -> None:
    data = b"".join(b"MSG s 7 r.%d %s\r\nabc\r\n" % (seq, size) for seq, size in enumerate(sizes))
    got = scan_deliveries(data, {7})
    if not read:
        assert got is None
        return
    assert got is not None
    sid, *columns, upto = got
    assert (sid, upto) == (7, len(data))
    assert tuple(columns) == _as_columns(scan(data)[0])


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"MSG s 7 r 10\r\nxx",  # no whole message
        _delivery(1, sid=8) + _delivery(2),  # another sid first
        _delivery(1) + _delivery(2, sid=8),  # another sid among them
        _delivery(1) + _delivery(2, b"a\r\nb") + _delivery(3),  # a CRLF in a payload
        _delivery(1) + b"HMSG s 7 r 12 12\r\nNATS/1.0\r\n\r\n\r\n",  # headers
        _delivery(1) + b"MSG s 7 10\r\nxxxxxxxxxx\r\n",  # no reply
        _delivery(1) + b"MSG s 7 r 0 10\r\nxxxxxxxxxx\r\n",  # a sixth word
        _delivery(1) + b"PING\r\n" + _delivery(2),
        _delivery(1) + b"MSG s 7 r 9\r\nxxxxxxxxxx\r\n",  # size not the payload's
        _delivery(1) + b"MSG s 7 r 1x\r\nxxxxxxxxxx\r\n",
        b"MSG s x r 1\r\nx\r\n",
        b"MSGX s 7 r 1\r\nx\r\n",
    ],
)
def test_anything_else_is_left_to_scan(data: bytes) -> None:
    assert scan_deliveries(data, {7}) is None


_PIECES = st.sampled_from(
    [
        _delivery(1),
        _delivery(2, b""),
        _delivery(3, b"a\r\nMSG s 7 r 1\r\nb"),
        _delivery(4, b"\r\n"),
        _delivery(5, sid=8),
        b"HMSG s 7 r 12 12\r\nNATS/1.0\r\n\r\n\r\n",
        b"MSG s 7 3\r\nabc\r\n",
        b"MSG\ts\t7\tr\t3\r\nabc\r\n",
        b"PING\r\n",
        b"MSG s 7 r 3\r\nabcd\r\n",
        b"MSG s 7 r -3\r\n",
        b"MSG s 7 r x 3\r\nabc\r\n",
        b"MSG s 7 r 03\r\nabc\r\n",
        b"MSG s 7 r.2 3\r\nabc\r\n",
        b"MSG s 7 r.3 4\r\nabc\r\n",
    ]
)


def _read_as_scan_reads(
    data: bytes,
    got: tuple[Any, ...],
    counted: int,
    as_columns: Callable[[list[tuple[object, ...]]], tuple[object, ...]],
    header_ok: Callable[[Any], bool],
) -> None:
    """What a column scanner read of ``data`` (``got``: the subscription, its columns,
    where it stopped) is what ``scan`` reads: the same deliveries (as many as column
    ``counted`` holds, each for subscription 7 with a header ``header_ok`` takes),
    then the same frames from where it stopped."""
    sid, *columns, upto = got
    count = len(columns[counted])
    assert count > 0
    assert sid == 7
    try:
        frames, used, need = scan(data)
    except RemoteProtocolError:
        # malformed after the deliveries: reading on from them fails the same way
        # (and the parser reads on before it hands them over)
        with pytest.raises(RemoteProtocolError):
            scan(data, upto)
        return
    assert tuple(columns) == as_columns(frames[:count])
    assert all(f[2] == 7 and header_ok(f[4]) for f in frames[:count])
    assert scan(data, upto) == (frames[count:], used, need)


@settings(max_examples=300)
@given(st.lists(_PIECES, max_size=12), st.integers(0, 400))
def test_whatever_scan_deliveries_reads_scan_reads_the_same(pieces: list[bytes], cut: int) -> None:
    data = b"".join(pieces)
    data = data[: len(data) - cut % (len(data) + 1)]  # cut anywhere, or not at all
    got = scan_deliveries(data, {7})
    if got is not None:
        _read_as_scan_reads(data, got, 3, _as_columns, lambda header: header is None)


_KEY_HEADER = b"NATS/1.0\r\nNats-Msg-Size: 100\r\n\r\n"


def _headed(
    seq: int, header: bytes = _KEY_HEADER, payload: bytes = b"", sid: int = 7, reply: bool = True
) -> bytes:
    """An HMSG delivery as a headers-only consumer gets it (header, empty body)."""
    ack = b" $JS.ACK.S.C.1.%d.%d.1764168000000000000.0" % (seq, seq) if reply else b""
    size = len(header) + len(payload)
    return b"HMSG $KV.b.k%d %d%s %d %d\r\n%s%s\r\n" % (
        seq,
        sid,
        ack,
        len(header),
        size,
        header,
        payload,
    )


def _as_header_columns(frames: list[tuple[object, ...]]) -> tuple[object, ...]:
    return (
        [f[1] for f in frames],
        [f[3] for f in frames],
        [f[4] for f in frames],
        [f[5] for f in frames],
    )


@pytest.mark.parametrize(
    "offs",
    [(0, 0, 0, 0), (1, 1, 1, 1), (-1, -1, -1, -1), (0, 1, 0, 0)],
)
def test_a_headers_only_run_of_one_size_is_read_only_when_its_size_is_right(
    offs: tuple[int, ...],
) -> None:
    size = len(_KEY_HEADER)
    line = b"HMSG $KV.b.k%d 7 r.%d %d %d\r\n"
    data = b"".join(
        line % (seq, seq, size + off, size + off) + _KEY_HEADER + b"\r\n"
        for seq, off in enumerate(offs)
    )
    got = scan_header_deliveries(data, {7})
    if any(offs):
        assert got is None
        return
    assert got is not None
    sid, *columns, upto = got
    assert (sid, upto) == (7, len(data))
    assert tuple(columns) == _as_header_columns(scan(data)[0])


def test_a_read_of_deliveries_with_headers_comes_as_columns_up_to_what_follows() -> None:
    run = b"".join(_headed(seq) for seq in range(1, 6)) + _headed(6, payload=b"v\r\nHMS")
    beat = b"NATS/1.0 100 Idle Heartbeat\r\n\r\n"
    status = b"HMSG _INBOX.x 7 %d %d\r\n%s\r\n" % (len(beat), len(beat), beat)
    for tail in (b"", b"HMSG s 7 r 10 10\r\nxx", b"PING\r\n", _headed(7)[:-1], status, b"\r"):
        data = run + tail
        frames, used, need = scan(data)
        got = scan_header_deliveries(data, {7})
        assert got is not None
        sid, *columns, upto = got
        assert (sid, upto) == (7, len(run))
        assert tuple(columns) == _as_header_columns(frames[:6])
        # what follows the run is scan's, from there on, as it would read it
        assert scan(data, upto) == (frames[6:], used, need)
    assert first_header_delivery_sid(run) == 7


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"HMSG s 7 r 10 10\r\nxx",  # no whole message
        _headed(1)[:-2],  # its CRLF still to come
        _headed(1, sid=8) + _headed(2),  # another sid first
        _headed(1) + _headed(2, sid=8),  # another sid among them
        _headed(1) + _headed(2, payload=b"a\r\nHMSG b") + _headed(3),  # the joint in a body
        _headed(1, header=b"NATS/1.0\r\n\r\nHMSG x\r\n\r\n") + _headed(2),  # in a header
        _headed(1) + _headed(2, header=b"NATS/1.0 100 Idle Heartbeat\r\n\r\n") + _headed(3),
        _headed(1) + _headed(2, reply=False) + _headed(3),  # no reply
        _headed(1) + _headed(2, header=b"NATS/1.0 409 x\r\n\r\n"),  # a status with a reply
        _headed(1) + _headed(2, header=b"") + _headed(3),  # hsize 0
        _headed(1) + b"HMSG s 7 r 40 38\r\n" + b"x" * 38 + b"\r\n" + _headed(2),  # hsize > size
        _headed(1) + b"HMSG s 7 r -2 2\r\nxx\r\n" + _headed(2),
        _headed(1) + b"HMSG s 7 r 2 1x\r\nxx\r\n" + _headed(2),
        _headed(1) + b"PING\r\n" + _headed(2),
        _headed(1) + b"MSG s 7 r 3\r\nabc\r\n" + _headed(2),
        b"HMSG s x r 2 2\r\nxx\r\n",
        b"HMSG s 07 r 2 2\r\nxx\r\n",
        b"HMSGX s 7 r 2 2\r\nxx\r\n",
        b"HMSG\ts 7 r 2 2\r\nxx\r\n",
        # no reply, read as one by a split at single spaces (an empty word)
        _headed(1) + b"HMSG $KV.b.k 7  12 12\r\nNATS/1.0\r\n\r\n\r\n" + _headed(2),
        # six words to scan (a vertical tab is whitespace), five at single spaces
        _headed(1) + b"HMSG $KV.b.k 7 r\x0b12 12 12\r\nNATS/1.0\r\n\r\n\r\n" + _headed(2),
        # a line of six words, then one of four: as many words as two lines of five
        _headed(1)
        + b"HMSG a 7 b 12 12 x\r\nNATS/1.0\r\n\r\n\r\n"
        + b"HMSG 7 d 12 12\r\nNATS/1.0\r\n\r\n\r\n"
        + _headed(2),
        _delivery(1),
    ],
)
def test_anything_else_with_headers_is_left_to_scan(data: bytes) -> None:
    assert scan_header_deliveries(data, {7}) is None


_HEADED_PIECES = st.sampled_from(
    [
        _headed(1),
        _headed(2, payload=b"value"),
        _headed(3, payload=b"a\r\nHMSG s 7 r 2 2\r\nb"),
        _headed(4, header=b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n"),
        _headed(5, payload=b"\r\n"),
        _headed(6, sid=8),
        _headed(7, reply=False),
        _headed(8, header=b"NATS/1.0 100 Idle Heartbeat\r\n\r\n"),
        _delivery(9),
        b"HMSG s 7 r 2 1\r\nabc\r\n",
        b"HMSG s 7 r 3 2\r\nab\r\n",
        # whitespace the line's split skips: before its CRLF, or instead of it
        b"HMSG s 7  r 12 12\t\r\nNATS/1.0\r\n\r\n\r\n",
        b"HMSG s 7 r 12 12\n\nNATS/1.0\r\n\r\n\r\n",
        b"HMSG s 7 r 13 13\r\n NATS/1.0\r\n\r\n\r\n",
        b"PING\r\n",
        b"HMSG s 7 r 2 -3\r\n",
        # lines of six words and of four
        b"HMSG a 7 b 12 12 x\r\nNATS/1.0\r\n\r\n\r\n",
        b"HMSG 7 d 12 12\r\nNATS/1.0\r\n\r\n\r\n",
    ]
)


@settings(max_examples=300)
@given(st.lists(_HEADED_PIECES, max_size=12), st.integers(0, 500))
def test_whatever_scan_header_deliveries_reads_scan_reads_the_same(
    pieces: list[bytes], cut: int
) -> None:
    data = b"".join(pieces)
    data = data[: len(data) - cut % (len(data) + 1)]  # cut anywhere, or not at all
    got = scan_header_deliveries(data, {7})
    if got is not None:
        _read_as_scan_reads(
            data, got, 0, _as_header_columns, lambda header: header[:10] == b"NATS/1.0\r\n"
        )


def test_a_long_info_line_cut_short_waits_but_other_long_lines_do_not() -> None:
    # A large cluster's INFO (connect_urls) can be longer than max_control_line and
    # arrive in pieces: it waits for its end, within MAX_INFO_LINE.
    info = b'INFO {"connect_urls":[' + b'"10.0.0.1:4222",' * 400 + b'"x"]}\r\n'
    assert len(info) > MAX_CONTROL_LINE
    assert scan(info[:-10]) == ([], 0, 0)
    frames, used, _ = scan(info + b"PING\r\n")
    assert [f[0] for f in frames] == [INFO, PING]
    assert used == len(info) + 6
    with pytest.raises(RemoteProtocolError, match="too long"):
        scan(b"+OK " + b"x" * MAX_CONTROL_LINE)
    with pytest.raises(RemoteProtocolError, match="too long"):
        scan(b"INFO {" + b"x" * MAX_INFO_LINE)
