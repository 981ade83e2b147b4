"""The Spark writers' column-wise frame builders and the JetStream ack parser (pure)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from aioclients._errors import RemoteProtocolError
from aioclients.nsq._protocol._frames import encode_mpub
from aioclients.spark._protocol._direct_reader import Ping, ServerErr
from aioclients.spark._protocol._mpub_frames import MpubBuilder, MpubRowError
from aioclients.spark._protocol._publish_frames import (
    AckParser,
    frame_bytes,
    header_blocks,
    publish_frames,
)

HEADERS = pa.map_(pa.string(), pa.string())


def _frames(subjects: list[str], data: list[bytes | None], **kw: object) -> bytes:
    frames = publish_frames(
        pa.array(subjects, pa.string()), pa.array(data, pa.binary()), reply_prefix=b"_I.", **kw
    )
    return bytes(frame_bytes(frames, 0, len(subjects)))


def test_pub_frames_are_built_column_wise() -> None:
    assert _frames(["a.b", "c"], [b"xy", None], first=7) == (
        b"PUB a.b _I.7 2\r\nxy\r\nPUB c _I.8 0\r\n\r\n"
    )


def test_hpub_only_for_rows_with_a_msg_id_or_headers() -> None:
    headers = pa.array([None, [("K", "v"), ("J", "w")], []], HEADERS).slice(0, 3)
    blocks = header_blocks(pa.array(["id-1", None, ""]), headers, 3)
    out = _frames(["s1", "s2", "s3"], [b"1", b"2", b"3"], first=0, headers=blocks)
    assert out == (
        b"HPUB s1 _I.0 31 32\r\nNATS/1.0\r\nNats-Msg-Id: id-1\r\n\r\n1\r\n"
        b"HPUB s2 _I.1 24 25\r\nNATS/1.0\r\nK: v\r\nJ: w\r\n\r\n2\r\n"
        b"PUB s3 _I.2 1\r\n3\r\n"
    )


def test_a_sliced_headers_column_keeps_its_rows() -> None:
    headers = pa.array([[("A", "1")], [("B", "2")]], HEADERS).slice(1)
    assert header_blocks(None, headers, 1).to_pylist() == [b"NATS/1.0\r\nB: 2\r\n\r\n"]


@pytest.mark.parametrize(
    ("subjects", "msg_ids", "headers", "match"),
    [
        (["a b"], None, None, "subject"),
        ([""], None, None, "subject"),
        (["a"], ["x\r\ny"], None, "msg_id"),
        (["a"], None, [[("K", "v\r\nX: 1")]], "header value"),
        (["a"], None, [[("K:", "v")]], "header name"),
    ],
)
def test_rows_that_would_break_a_frame_are_refused(
    subjects: list[str], msg_ids: list[str] | None, headers: object, match: str
) -> None:
    def build() -> None:
        blocks = header_blocks(
            None if msg_ids is None else pa.array(msg_ids),
            None if headers is None else pa.array(headers, HEADERS),
            len(subjects),
        )
        publish_frames(
            pa.array(subjects), pa.array([b"x"]), reply_prefix=b"_I.", first=0, headers=blocks
        )

    with pytest.raises(ValueError, match=match):
        build()


def _msg(row: int, payload: bytes) -> bytes:
    return b"MSG _I.%d 2 %d\r\n%s\r\n" % (row, len(payload), payload)


def test_ack_parser_counts_acks_split_anywhere() -> None:
    stream = (
        _msg(0, b'{"stream":"S","seq":1}')
        + b"PING\r\n"
        + _msg(1, b'{"stream":"S","seq":2,"duplicate": true}')  # as nats-server writes it
        + b"HMSG _I.2 2 16 16\r\nNATS/1.0 503\r\n\r\n\r\n"
        + _msg(
            3,
            b'{"error":{"code":503,"err_code":10077,"description":"maximum messages'
            b' exceeded"},"stream":"S"}',
        )
        + b"-ERR 'Slow Consumer'\r\n"
    )
    for cut in range(1, len(stream)):
        parser = AckParser(b"_I.")
        events = parser.receive_data(stream[:cut]) + parser.receive_data(stream[cut:])
        assert events == [Ping(), ServerErr("Slow Consumer")]
        assert (parser.stored, parser.duplicates, parser.failed) == (1, 1, 2)
        assert parser.first_failure is not None
        assert parser.first_failure.row == 2
        assert "503" in parser.first_failure.reason


def test_ack_parser_refuses_what_is_not_an_ack() -> None:
    with pytest.raises(RemoteProtocolError):
        AckParser(b"_I.").receive_data(_msg(0, b"{}")[:-2] + b"XX")
    with pytest.raises(RemoteProtocolError):
        AckParser(b"_I.").receive_data(b"MSG other.1 2 2\r\n{}\r\n")
    parser = AckParser(b"_I.")
    parser.receive_data(_msg(0, b"nonsense") + _msg(1, b'{"stream":"S","seq":1,"duplicate":true}'))
    assert (parser.failed, parser.duplicates) == (1, 1)


def _row_by_row(rows: list[bytes], batch: int, max_bytes: int) -> list[bytes]:
    """What the writer sent before it was column-wise: greedy, row by row."""
    out: list[bytes] = []
    chunk: list[bytes] = []
    size = 0
    for body in rows:
        if chunk and (len(chunk) >= batch or size + len(body) + 4 > max_bytes):
            out.append(encode_mpub("t", chunk))
            chunk, size = [], 0
        chunk.append(body)
        size += len(body) + 4
    if chunk:
        out.append(encode_mpub("t", chunk))
    return out


def test_mpub_commands_equal_the_row_by_row_ones() -> None:
    rng = random.Random(13)
    for _ in range(200):
        big = rng.random() < 0.1
        rows = [
            bytes([65 + rng.randrange(26)]) * rng.randint(1, 70_000 if big else 300)
            for _ in range(rng.randint(1, 120))
        ]
        batch, max_bytes = rng.randint(1, 40), rng.randint(1, 3000)
        builder = MpubBuilder(
            "t", batch_size=batch, max_batch_bytes=max_bytes, max_message_size=10**6
        )
        got: list[bytes] = []
        i = 0
        while i < len(rows):  # record batches of any size, empty ones too
            n = rng.randint(0, 50)
            got += [m.command for m in builder.add(pa.array(rows[i : i + n], pa.binary()))]
            i += n
        got += [m.command for m in builder.finish()]
        assert got == _row_by_row(rows, batch, max_bytes), (batch, max_bytes)


def test_mpub_rows_nsqd_would_refuse_are_named() -> None:
    builder = MpubBuilder("t", batch_size=2, max_batch_bytes=100, max_message_size=10)
    first = list(builder.add(pa.array(["a", "b", "c"])))
    assert [(m.first_row, m.rows) for m in first] == [(0, 2)]
    with pytest.raises(MpubRowError) as excinfo:
        list(builder.add(pa.array(["d", None])))
    assert excinfo.value.row == 4
    builder = MpubBuilder("t", batch_size=2, max_batch_bytes=100, max_message_size=10)
    with pytest.raises(MpubRowError, match="over maxMessageSize") as excinfo:
        list(builder.add(pa.array(["ok", "x" * 11])))
    assert excinfo.value.row == 1
