"""The pure Direct Get reply parser and option parsing: bytes in, columns and events out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients import RemoteProtocolError
from aioclients.spark import DataSourceOptionError
from aioclients.spark._protocol._direct_reader import (
    BatchEnd,
    DirectReplyParser,
    Ping,
    Pong,
    ServerErr,
    ServerInfo,
    StatusReply,
    join_header_values,
)
from aioclients.spark._protocol._options import OptionReader

pytestmark = pytest.mark.spark

INBOX = b"_INBOX.spark.abc"
STAMP = b"2026-01-02T03:04:05.123456789Z"


def hmsg(header_block: bytes, payload: bytes, *, sid: bytes = b"1") -> bytes:
    total = len(header_block) + len(payload)
    return b"HMSG %s %s %d %d\r\n%s%s\r\n" % (
        INBOX,
        sid,
        len(header_block),
        total,
        header_block,
        payload,
    )


def stored(seq: int, subject: bytes, payload: bytes, user: bytes = b"") -> bytes:
    block = (
        b"NATS/1.0\r\n" + user + b"Nats-Stream: S\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\n"
        b"Nats-Time-Stamp: %s\r\nNats-Num-Pending: 5\r\nNats-Last-Sequence: %d\r\n\r\n"
        % (subject, seq, STAMP, seq - 1)
    )
    return hmsg(block, payload)


def eob(pending: int, last: int) -> bytes:
    return hmsg(
        b"NATS/1.0 204 EOB\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n\r\n"
        % (pending, last),
        b"",
    )


BATCH = (
    stored(1, b"a.b", b"hello")
    + stored(2, b"a.c", b"", user=b"X-One: 1\r\nTag: p\r\nTag: q\r\n")
    + b"PING\r\n"
    + stored(3, b"a.b", b"HMSG fake 1 0 0\r\n\r\n")
    + eob(7, 3)
)


def test_a_batch_becomes_columns_and_an_end() -> None:
    parser = DirectReplyParser()
    events = parser.receive_data(BATCH)
    assert events == [Ping(), BatchEnd(num_pending=7, last_seq=3)]
    cols = parser.take_columns()
    assert cols.subjects == [b"a.b", b"a.c", b"a.b"]
    assert cols.sequences == [b"1", b"2", b"3"]
    assert cols.stamps == [STAMP] * 3
    assert cols.data == [b"hello", b"", b"HMSG fake 1 0 0\r\n\r\n"]
    assert cols.headers == {1: [("X-One", "1"), ("Tag", "p, q")]}
    assert len(parser.take_columns()) == 0


@given(st.lists(st.integers(min_value=1, max_value=len(BATCH) - 1), max_size=30))
def test_any_split_of_the_bytes_gives_the_same_result(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    pieces = [BATCH[a:b] for a, b in zip([0, *points], [*points, len(BATCH)], strict=True)]
    parser = DirectReplyParser()
    events = [e for piece in pieces for e in parser.receive_data(piece)]
    assert events == [Ping(), BatchEnd(num_pending=7, last_seq=3)]
    cols = parser.take_columns()
    assert cols.sequences == [b"1", b"2", b"3"]
    assert cols.data == [b"hello", b"", b"HMSG fake 1 0 0\r\n\r\n"]
    assert cols.headers == {1: [("X-One", "1"), ("Tag", "p, q")]}


@given(st.binary(max_size=300), st.integers(min_value=1, max_value=50))
def test_payloads_of_any_bytes_survive_any_chunking(payload: bytes, chunk: int) -> None:
    data = stored(9, b"x", payload) + eob(0, 9)
    parser = DirectReplyParser()
    events = []
    for i in range(0, len(data), chunk):
        events += parser.receive_data(data[i : i + chunk])
    assert events == [BatchEnd(num_pending=0, last_seq=9)]
    assert parser.take_columns().data == [payload]


def test_control_lines() -> None:
    parser = DirectReplyParser()
    events = parser.receive_data(
        b"INFO {\"max_payload\":1024}\r\n+OK\r\nPONG\r\n-ERR 'Authorization Violation'\r\n"
    )
    assert events == [
        ServerInfo({"max_payload": 1024}),
        Pong(),
        ServerErr("Authorization Violation"),
    ]


def test_statuses() -> None:
    parser = DirectReplyParser()
    events = parser.receive_data(
        hmsg(b"NATS/1.0 404 Message Not Found\r\n\r\n", b"")
        + hmsg(b"NATS/1.0 503\r\n\r\n", b"")
        + hmsg(b"NATS/1.0 408 Bad Request\r\n\r\n", b"")
    )
    assert events == [
        BatchEnd(num_pending=0, last_seq=None, not_found=True),
        StatusReply("503", ""),
        StatusReply("408", "Bad Request"),
    ]


def test_a_large_frame_arriving_in_many_chunks_is_joined_once() -> None:
    payload = bytes(range(256)) * 4000
    data = stored(1, b"big", payload)
    parser = DirectReplyParser()
    for i in range(0, len(data) - 1, 4096):
        assert parser.receive_data(data[i : min(i + 4096, len(data) - 1)]) == []
    assert len(parser.columns) == 0
    assert parser.receive_data(data[-1:]) == []
    assert parser.take_columns().data == [payload]


@pytest.mark.parametrize(
    ("data", "offset"),
    [
        (b"BOGUS\r\n", 0),
        (b"PING\r\nHMSG x 1 5\r\n", 6),
        (b"HMSG x 1 10 5\r\n" + b"z" * 20, 0),
        (hmsg(b"NATS/1.0\r\nNats-Sequence: 1\r\n\r\n", b"p")[:-2] + b"!!", 0),
        (hmsg(b"NATS/1.0\r\nNats-Subject: a\r\n\r\n", b""), 0),
        (stored(1, b"a", b"x").replace(b" 1 ", b" 2 ", 1), 0),
        (b"MSG x 1 1\r\na\r\n", 0),
        (b"INFO nope\r\n", 0),
        (stored(1, b"a", b"x") + b"HMSG " + b"y" * 70000, len(stored(1, b"a", b"x"))),
    ],
)
def test_bad_bytes_raise_with_their_position(data: bytes, offset: int) -> None:
    parser = DirectReplyParser()
    with pytest.raises(RemoteProtocolError) as excinfo:
        parser.receive_data(data)
    assert excinfo.value.offset == offset


def test_the_offset_counts_bytes_consumed_earlier() -> None:
    parser = DirectReplyParser()
    parser.receive_data(b"PING\r\n")
    with pytest.raises(RemoteProtocolError) as excinfo:
        parser.receive_data(b"PONG\r\nWHAT\r\n")
    assert excinfo.value.offset == 12


def test_repeated_headers_are_joined_in_first_position() -> None:
    assert join_header_values([("A", "1"), ("B", "2"), ("A", "3")]) == [("A", "1, 3"), ("B", "2")]


# -- options ----------------------------------------------------------------------------------


def test_options_are_case_insensitive_and_typed() -> None:
    opts = OptionReader({"SERVERS": "a:4222, tls://b:4443", "batchsize": "5"}, "jetstream")
    assert opts.servers() == ["nats://a:4222", "tls://b:4443"]
    assert opts.integer("batchSize", default=1, minimum=1) == 5
    assert opts.integer("numPartitions", default=3, minimum=1) == 3
    assert opts.seconds("timeout", default=2.5) == 2.5
    assert opts.sequence("startSequence", words=("earliest",)) is None
    assert OptionReader({"startsequence": "Earliest"}, "j").sequence(
        "startSequence", words=("earliest",)
    ) == ("earliest")
    assert opts.unknown({"servers", "batchSize"}) == []
    assert OptionReader({"sever": "x"}, "j").unknown({"servers"}) == ["sever"]


@pytest.mark.parametrize(
    ("options", "call", "message"),
    [
        ({}, lambda o: o.servers(), "needs the option 'servers'"),
        ({"servers": " "}, lambda o: o.servers(), "needs the option 'servers'"),
        ({"servers": "http://x"}, lambda o: o.servers(), "not a NATS URL"),
        ({"n": "0"}, lambda o: o.integer("n", default=1, minimum=1), "integer >= 1"),
        ({"n": "1.5"}, lambda o: o.integer("n", default=1, minimum=1), "integer >= 1"),
        ({"t": "-1"}, lambda o: o.seconds("t", default=1.0), "seconds > 0"),
        ({"t": "inf"}, lambda o: o.seconds("t", default=1.0), "seconds > 0"),
        ({"s": "0"}, lambda o: o.sequence("s"), "a sequence >= 1"),
        ({"s": "first"}, lambda o: o.sequence("s", words=("earliest",)), "'earliest' or"),
    ],
)
def test_bad_options_name_the_option_and_a_fix(options, call, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DataSourceOptionError, match=message) as excinfo:
        call(OptionReader(options, "jetstream"))
    assert '.option("' in str(excinfo.value)
