"""A Direct Get reply read whole with one match (``reply_frame_pattern`` over
``PLAIN_PUT_REPLY``): bytes in, groups out, and whatever it reads,
``single_message`` and ``plain_put_match`` read the same way.

The read callback takes a match only where :func:`frame_sizes` of its size text
are the lengths of the header block and of header block and payload: ``read``
below is that rule.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients.jetstream._protocol._kv import PLAIN_PUT_REPLY, plain_put_match
from aioclients.jetstream._protocol._wire import (
    _SIZE_PAIRS,
    _SIZE_PAIRS_MAX,
    MSG,
    frame_sizes,
    reply_frame_match,
    reply_frame_pattern,
    single_message,
)

SID = 7
MATCH = reply_frame_match(SID, PLAIN_PUT_REPLY)


def read(data: bytes) -> tuple[Any, ...] | None:
    """The groups the read callback hands on for ``data``, or None (the old path's)."""
    m = MATCH(data)
    if m is None:
        return None
    groups = m.groups()
    hsize, size = len(groups[2]), len(groups[-1])
    if frame_sizes(groups[1]) != (hsize, hsize + size):
        return None
    return groups


def header(
    seq: int = 78,
    stamp: bytes = b"2026-11-27T21:29:42.070310463Z",
    stream: bytes = b"KV_B",
    subject: bytes = b"$KV.B.k",
    extra: bytes = b"",
) -> bytes:
    return (
        b"NATS/1.0\r\n%sNats-Stream: %s\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\n"
        % (
            extra,
            stream,
            subject,
            seq,
        )
        + b"Nats-Time-Stamp: %s\r\n\r\n" % stamp
    )


def frame(
    block: bytes | None,
    payload: bytes,
    *,
    subject: bytes = b"_INBOX.x.1",
    sid: int = SID,
    reply: bytes = b"",
    hsize: int | None = None,
    total: int | None = None,
) -> bytes:
    block = block or b""
    hsize = len(block) if hsize is None else hsize
    total = len(block) + len(payload) if total is None else total
    line = b" ".join(x for x in (b"HMSG", subject, b"%d" % sid, reply) if x)
    return b"%s %d %d\r\n%s%s\r\n" % (line, hsize, total, block, payload)


def test_a_plain_value_s_reply_is_read_whole() -> None:
    block = header()
    data = frame(block, b"v" * 100)
    assert read(data) == (
        b"_INBOX.x.1",
        b"%d %d" % (len(block), len(block) + 100),
        block,
        b"78",
        b"2026-11-27T21:29:42.070310",
        None,
        b"v" * 100,
    )


def test_a_late_day_is_read_as_a_group_of_its_own() -> None:
    got = read(frame(header(stamp=b"2024-01-31T03:04:05.654321Z"), b"v"))
    assert got is not None
    assert got[3:6] == (b"78", b"2024-01-31T03:04:05.654321", b"31")


@pytest.mark.parametrize(
    "data",
    [
        frame(b"NATS/1.0 404 Message Not Found\r\n\r\n", b""),
        frame(b"NATS/1.0 408 Request Timeout\r\n\r\n", b""),
        frame(b"NATS/1.0 503\r\n\r\n", b""),
        frame(header(extra=b"X-Trace: 1\r\n"), b"v"),  # a value with headers of its own
        frame(header() + b"X", b"v"),  # a header block with more after its end
        frame(header(), b"v", sid=SID + 1),  # another subscription's
        frame(header(), b"v", sid=SID * 10 + SID),
        frame(header(), b"v", reply=b"_INBOX.r"),  # a message with a reply subject
        frame(header(), b"v", hsize=len(header()) - 1),  # sizes that lie
        frame(header(), b"v", hsize=len(header()) + 1, total=len(header()) + 2),
        frame(header(), b"v", total=len(header())),
        frame(header(), b"v") * 2,  # two frames in one read
        frame(header(), b"v\r\n")[:-2],  # cut short where its payload has a CRLF
        frame(header(), b"v") + b"PING\r\n",
        b"PONG\r\n" + frame(header(), b"v"),
        frame(None, b"v"),
        b"MSG _INBOX.x.1 7 1\r\nv\r\n",
        frame(header(), b"v").replace(b"HMSG", b"HMSG "),
        frame(header(), b"v").replace(b" 7 ", b" 7  "),
        frame(header(), b"v").replace(b"\r\n", b"\n", 1),
    ],
)
def test_anything_else_is_not_read_whole(data: bytes) -> None:
    assert read(data) is None


def test_a_payload_holding_frames_and_crlfs_is_read_as_the_sizes_say() -> None:
    inner = frame(header(), b"x") + b"\r\n\r\nHMSG a 7 1 2\r\n"
    got = read(frame(header(), inner))
    assert got is not None
    assert got[-1] == inner


@pytest.mark.parametrize(
    ("text", "sizes"),
    [
        (b"135 235", (135, 235)),
        (b"0 0", (0, 0)),
        (b"007 08", (7, 8)),
        (b"", (-1, -1)),
        (b"135", (-1, -1)),
        (b"135  235", (-1, -1)),
        (b" 135 235", (-1, -1)),
        (b"135 235 ", (-1, -1)),
        (b"+1 2", (-1, -1)),
        (b"1 -2", (-1, -1)),
        (b"1\t2", (-1, -1)),
        (b"1 2 3", (-1, -1)),
        (b"r 1 2", (-1, -1)),
        (b"1 \xd9\xa3", (-1, -1)),  # an Arabic-Indic 3
    ],
)
def test_frame_sizes_reads_two_runs_of_digits_only(text: bytes, sizes: tuple[int, int]) -> None:
    for _ in range(2):  # the second time from what it remembered
        assert frame_sizes(text) == sizes


def test_frame_sizes_stays_bounded() -> None:
    for n in range(_SIZE_PAIRS_MAX + 10):
        assert frame_sizes(b"%d %d" % (n, n + 1)) == (n, n + 1)
    assert len(_SIZE_PAIRS) <= _SIZE_PAIRS_MAX


_TEXT = st.binary(min_size=1, max_size=30).filter(lambda b: b" " not in b and b"\r" not in b)


def _stamp_texts(ranges: list[tuple[int, int]], digits: list[int]) -> st.SearchStrategy[bytes]:
    """Stamps in the server's form: year, month, day, hour, minute and second each
    drawn from its range in ``ranges``, and one of ``digits`` fraction digits."""
    return st.tuples(
        *(st.integers(low, high) for low, high in ranges), st.sampled_from(digits)
    ).map(
        lambda t: b"%04d-%02d-%02dT%02d:%02d:%02d.%sZ" % (*t[:6], b"1234567890"[: t[6]])  # type: ignore[str-bytes-safe]
    )


# any digits in the stamp's places, in range or not, and any other value
_STAMPS = st.one_of(
    _stamp_texts([(0, 9999), (0, 19), (0, 39), (0, 29), (0, 69), (0, 69)], [3, 6, 9, 10]),
    st.binary(max_size=32).filter(lambda b: b"\r" not in b),
)
_BLOCKS = st.one_of(
    st.builds(
        header,
        seq=st.integers(0, 10**15),
        stamp=_STAMPS,
        stream=_TEXT,
        subject=_TEXT,
        extra=st.sampled_from([b"", b"", b"X-A: 1\r\n"]),
    ),
    st.sampled_from(
        [
            b"NATS/1.0 404 Message Not Found\r\n\r\n",
            b"NATS/1.0 408 Request Timeout\r\n\r\n",
            b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n",
        ]
    ),
)
_PAYLOADS = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"", b"\r\n", b"v\r\nHMSG _INBOX.x.2 7 3 3\r\nabc\r\n", b"\r\n\r\n"]),
)


@given(
    _BLOCKS,
    _PAYLOADS,
    st.sampled_from([SID, SID, 1, 70]),
    st.sampled_from([b"", b"", b"_INBOX.r"]),
    st.integers(-2, 2),
    st.integers(-2, 2),
    st.sampled_from(["alone", "alone", "two", "cut", "more"]),
    st.integers(0, 400),
)
def test_whatever_is_read_whole_single_message_and_plain_put_match_read_the_same(
    block: bytes,
    payload: bytes,
    sid: int,
    reply: bytes,
    hsize_off: int,
    total_off: int,
    how: str,
    cut: int,
) -> None:
    hsize = max(0, len(block) + hsize_off)
    total = max(0, len(block) + len(payload) + total_off)
    one = frame(block, payload, sid=sid, reply=reply, hsize=hsize, total=total)
    data = {
        "alone": one,
        "two": one + frame(block, payload),
        "cut": one[: cut % (len(one) + 1)],
        "more": one + b"PING\r\n",
    }[how]
    got = read(data)
    if got is None:
        # never refused when it is one whole reply of the usual form, alone
        usual = plain_put_match(block)
        whole = (sid, reply, hsize_off, total_off, how) == (SID, b"", 0, 0, "alone")
        assert not (whole and usual is not None)
        return
    assert single_message(data) == (MSG, got[0], SID, b"", got[2], got[-1])
    usual = plain_put_match(got[2])
    assert usual is not None
    assert usual.groups() == got[3:6]


def _giving_back(pattern: bytes) -> bytes:
    """``pattern`` with its possessive repeats made plain (backtracking) again."""
    return re.sub(rb"(?<=[+*}])\+", b"", pattern)


_BACKTRACKING_HEADER = re.compile(_giving_back(PLAIN_PUT_REPLY.pattern))
_BACKTRACKING_FRAME = re.compile(
    _giving_back(reply_frame_pattern(SID, PLAIN_PUT_REPLY.pattern)), re.DOTALL
).fullmatch


@pytest.mark.skipif(sys.version_info < (3, 11), reason="no possessive repeats before 3.11")
def test_the_patterns_repeats_are_possessive() -> None:
    # what the equivalence below is about (3.11+): the hot path's matches keep no
    # backtracking state for the repeats of the control line and the header block
    assert PLAIN_PUT_REPLY.pattern != _BACKTRACKING_HEADER.pattern
    assert b"([^ ]++)" in reply_frame_pattern(SID, b"")


_USUAL_STAMPS = _stamp_texts(
    [(1000, 9999), (1, 12), (1, 31), (0, 23), (0, 59), (0, 59)], [6, 9, 10]
)
# mostly replies of the usual form (which both read), and the other blocks
_USUAL_BLOCKS = st.one_of(
    st.builds(
        header,
        seq=st.integers(0, 10**15),
        stamp=_USUAL_STAMPS,
        stream=st.sampled_from([b"KV_B", b"KV_a-b_1"]),
        subject=st.sampled_from([b"$KV.B.k", b"$KV.B.a.b=c/d"]),
    ),
    _BLOCKS,
)


@given(
    _USUAL_BLOCKS,
    _PAYLOADS,
    st.sampled_from([SID, SID, 1]),
    st.sampled_from([0, 0, -1, 1]),
    st.sampled_from([b"", b"", b"", b"0", b"Z", b"-", b" ", b"\r", b"\n", b"9\r\n"]),
    st.integers(0, 400),
)
def test_possessive_repeats_read_what_backtracking_ones_read(
    block: bytes, payload: bytes, sid: int, total_off: int, noise: bytes, at: int
) -> None:
    # Each possessive repeat stops at a byte it does not take (a space, a CR, a
    # dash, a Z), so giving nothing back changes no match: the same groups, or none,
    # for frames and header blocks with a byte put in anywhere.
    total = max(0, len(block) + len(payload) + total_off)
    data = frame(block, payload, sid=sid, total=total)
    at %= len(data) + 1
    data = data[:at] + noise + data[at:]
    m, b = MATCH(data), _BACKTRACKING_FRAME(data)
    assert (m and m.groups()) == (b and b.groups())
    at %= len(block) + 1
    block = block[:at] + noise + block[at:]
    m, b = plain_put_match(block), _BACKTRACKING_HEADER.fullmatch(block)
    assert (m and m.groups()) == (b and b.groups())
