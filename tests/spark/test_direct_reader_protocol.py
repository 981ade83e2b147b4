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


def regular_run(count: int) -> bytes:
    return b"".join(
        stored(seq, b"s.%d" % (seq % 7), b"p" * (seq % 5)) for seq in range(1, count + 1)
    )


_row = st.tuples(
    st.sampled_from([b"a", b"a.b", b"HMSG", b"\xc3\xa9.x"]),
    st.binary(max_size=40) | st.sampled_from([b"\r\nHMSG ", b"a\r\nb", b"\r\n", b"1 2 3"]),
    st.sampled_from([b"", b"X-One: 1\r\n", b"Nats-Subject: no\r\n"]),
)


@given(st.lists(_row, min_size=1, max_size=12), st.integers(min_value=1, max_value=400))
def test_runs_of_replies_give_the_same_columns_whole_or_chunked(
    rows: list[tuple[bytes, bytes, bytes]], chunk: int
) -> None:
    data = b"".join(
        stored(seq, subject, payload, user)
        for seq, (subject, payload, user) in enumerate(rows, start=1)
    ) + eob(0, len(rows))
    for size in (len(data), chunk):
        parser = DirectReplyParser()
        events = []
        for i in range(0, len(data), size):
            events += parser.receive_data(data[i : i + size])
        assert events == [BatchEnd(num_pending=0, last_seq=len(rows))]
        cols = parser.take_columns()
        # A user header named like a bookkeeping one comes first and loses to the server's.
        assert cols.subjects == [subject for subject, _, _ in rows]
        assert cols.sequences == [b"%d" % seq for seq in range(1, len(rows) + 1)]
        assert cols.stamps == [STAMP] * len(rows)
        assert cols.data == [payload for _, payload, _ in rows]
        assert cols.headers == {
            i: [("X-One", "1")] for i, row in enumerate(rows) if row[2][:1] == b"X"
        }


def test_a_long_run_of_regular_replies_is_taken_whole() -> None:
    parser = DirectReplyParser()
    data = regular_run(500)
    assert parser.receive_data(data + eob(0, 500)[:10]) == []
    cols = parser.take_columns()
    assert cols.sequences == [b"%d" % seq for seq in range(1, 501)]
    assert cols.subjects[:8] == [b"s.1", b"s.2", b"s.3", b"s.4", b"s.5", b"s.6", b"s.0", b"s.1"]
    assert cols.data[:6] == [b"p", b"pp", b"ppp", b"pppp", b"", b"p"]
    assert cols.headers == {}


@pytest.mark.parametrize(
    "bad",
    [
        stored(51, b"a", b"x").replace(b" 1 ", b" 2 ", 1),  # another sid
        stored(51, b"a", b"xy").replace(b" 2\r\n", b" 1\r\n", 1)[:-3] + b"\r\n",  # short total
        b"HMSG x 1 10 5\r\n" + b"z" * 20,  # header longer than the message
        stored(51, b"a", b"x").replace(b"NATS/1.0\r\n", b"NATS/1.1\r\n"),
        b"HMSG x 1\r\n",
    ],
)
def test_a_bad_frame_after_a_run_of_regular_ones_is_reported_at_its_offset(bad: bytes) -> None:
    parser = DirectReplyParser()
    run = regular_run(50)
    with pytest.raises(RemoteProtocolError) as excinfo:
        parser.receive_data(run + bad + stored(52, b"a", b"x"))
    assert excinfo.value.offset == len(run)


@pytest.mark.parametrize(
    "lie",
    [
        (b" 156 ", b" 157 "),  # header length one too large
        (b" 156 ", b" 155 "),
        (b" 160\r\n", b" 161\r\n"),  # total one too large: swallows the CRLF
        (b"Nats-Sequence: 3\r\n", b"Nats-Sequence: 3a\r\n"),
        # Not a blank line after the headers; the payload's length still as declared.
        (b"\r\n\r\npppp", b"\r\nX\r\npppp"),
    ],
)
def test_a_reply_whose_sizes_or_fields_lie_is_reported_at_its_offset(
    lie: tuple[bytes, bytes],
) -> None:
    frame = stored(3, b"a", b"pppp")
    assert lie[0] in frame
    data = regular_run(2) + frame.replace(*lie, 1) + regular_run(2)
    with pytest.raises(RemoteProtocolError) as excinfo:
        DirectReplyParser().receive_data(data)
    assert excinfo.value.offset == len(regular_run(2))


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


def test_public_names_are_exported() -> None:
    import aioclients.spark as spark_pkg
    from aioclients import AioClientsError

    assert isinstance(spark_pkg.__all__, tuple)
    assert len(set(spark_pkg.__all__)) == len(spark_pkg.__all__)
    for name in spark_pkg.__all__:
        assert hasattr(spark_pkg, name), name
    assert callable(spark_pkg.register_data_sources)
    for error in (
        spark_pkg.DataSourceOptionError,
        spark_pkg.DataSourceUnavailableError,
        spark_pkg.PublishFailedError,
    ):
        assert issubclass(error, AioClientsError)
    assert issubclass(spark_pkg.DataSourceOptionError, ValueError)


def _parse_all(data: bytes, chunk: int, *, lf_from: int | None) -> tuple[object, ...]:
    parser = DirectReplyParser()
    parser._lf_from = lf_from  # 0: every run split at LF first; None: at CRLF
    events: list[object] = []
    try:
        for i in range(0, len(data), chunk):
            events += parser.receive_data(data[i : i + chunk])
    except RemoteProtocolError as exc:
        events.append(("error", exc.offset))
    cols = parser.take_columns()
    return events, cols.subjects, cols.sequences, cols.stamps, cols.data, cols.headers


_payload = st.binary(max_size=40) | st.sampled_from(
    [b"\n", b"a\nb", b"\r", b"a\r", b"\r\r\n", b"\n\r", b"x" * 30]
)
_frame = st.one_of(
    st.builds(lambda seq, payload: stored(seq, b"a.b", payload), st.integers(1, 99), _payload),
    st.builds(
        lambda seq, payload: stored(seq, b"a", payload, user=b"X-One: 1\r\n"),
        st.integers(1, 99),
        _payload,
    ),
    st.builds(eob, st.integers(0, 9), st.integers(1, 99)),
    st.just(b"PING\r\n"),
    st.sampled_from([b"HMSG x 1 10 5\r\n" + b"z" * 20, b"\r\n", b"HMSG x 1\r\n"]),
)


@given(st.lists(_frame, max_size=12), st.integers(min_value=1, max_value=400))
def test_splitting_runs_at_lf_or_at_crlf_gives_the_same_result(
    frames: list[bytes], chunk: int
) -> None:
    data = b"".join(frames)
    for size in (len(data) or 1, chunk):
        assert _parse_all(data, size, lf_from=0) == _parse_all(data, size, lf_from=None)


def test_runs_are_split_at_lf_until_a_payload_has_a_bare_lf() -> None:
    parser = DirectReplyParser()
    parser._lf_from = 0
    parser.receive_data(regular_run(50) + eob(0, 50))
    assert parser._lf_from == 0  # the LF split took the run
    assert parser.take_columns().data == [b"p" * (seq % 5) for seq in range(1, 51)]
    data = regular_run(3) + stored(4, b"a", b"one\ntwo\r") + regular_run(3) + eob(0, 4)
    assert parser.receive_data(data) == [BatchEnd(num_pending=0, last_seq=4)]
    assert parser._lf_from is None  # from now on at CRLF
    short = [b"p", b"pp", b"ppp"]
    assert parser.take_columns().data == [*short, b"one\ntwo\r", *short]


def test_only_runs_of_large_payloads_are_split_at_lf() -> None:
    # Small payloads, one with a bare LF: split at CRLF, so no LF split failed.
    small = stored(1, b"a", b"x\n") + regular_run(2)
    large = b"".join(stored(seq, b"a", b"x" * 600) for seq in range(1, 4))
    for data in (small, large):
        parser = DirectReplyParser()
        parser.receive_data(data)
        assert parser._lf_from == 512
        assert len(parser.take_columns()) == 3
    # A bare LF in a large payload: the LF split fails once, CRLF from then on.
    parser = DirectReplyParser()
    parser.receive_data(stored(1, b"a", b"x\n" * 300) + stored(2, b"a", b"x" * 600))
    assert parser._lf_from is None
    assert parser.take_columns().data == [b"x\n" * 300, b"x" * 600]
