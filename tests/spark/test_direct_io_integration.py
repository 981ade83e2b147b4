"""The lean Direct Get reader (no Spark) against the real nats-server."""

from __future__ import annotations

import random
import socket
from typing import Any

import pytest

from aioclients import ConnectError, jetstream
from aioclients.spark._arrow import ARROW_SCHEMA, to_record_batch
from aioclients.spark._direct_io import (
    DirectGetConnection,
    count_from,
    count_in_range,
    read_sequence_range,
)
from aioclients.spark._jetstream import ReadConfig, SequenceRange, read_partition
from aioclients.spark._protocol._pushdown import Bounds, JetStreamSelection, to_micros

pytestmark = pytest.mark.spark


@pytest.fixture
async def filled(js: jetstream.JetStream, unique_name: str) -> str:
    """A stream of 250 messages on three subjects, seq 5 with headers, seq 7..9 deleted."""
    name = unique_name
    stream = await js.create_stream(name, subjects=[f"{name}.>"], allow_direct=True)
    for i in range(1, 251):
        headers = {"H": ["1", "2"], "K": "v"} if i == 5 else None
        await js.publish_async(f"{name}.{i % 3}", f"m{i}".encode(), headers=headers)
    await js.publish_async_complete(timeout=10)
    for seq in (7, 8, 9):
        await stream.delete_msg(seq)
    return name


def _large_payload(i: int, plain: bool) -> bytes:
    """0.6-3 KB payloads; unless ``plain``, some with a bare LF, a CRLF or random bytes."""
    kind = 0 if plain else i % 5
    if kind == 1:
        return b"line\n" * (120 + i)
    if kind == 2:
        return b"a\r\nb" * (150 + i)
    if kind == 3:
        return random.Random(i).randbytes(600 + i)
    return b"x" * (600 + 7 * i)


@pytest.fixture
async def large(js: jetstream.JetStream, unique_name: str) -> str:
    """Streams ``<name>`` and ``<name>P`` (plain payloads) of 300 large messages each
    (see ``_large_payload``); in ``<name>`` every 50th has headers."""
    name = unique_name
    for stream, plain in ((name, False), (f"{name}P", True)):
        await js.create_stream(stream, subjects=[f"{stream}.>"], allow_direct=True)
        for i in range(1, 301):
            headers = {"K": str(i)} if i % 50 == 0 and not plain else None
            payload = _large_payload(i, plain)
            await js.publish_async(f"{stream}.{i % 3}", payload, headers=headers)
    await js.publish_async_complete(timeout=10)
    return name


async def _read(
    url: str, name: str, first: int, last: int, received: list[int] | None = None, **kw: object
) -> list[int]:
    """The sequences read in ``[first, last]``; ``received`` gets every row the server
    sent (batches run past ``last``; the caller drops those rows)."""
    conn = await DirectGetConnection.open([url], timeout=5)
    try:
        seqs: list[int] = []
        async for columns in read_sequence_range(
            conn,
            name,
            first=first,
            last=last,
            subject=kw.get("subject"),  # type: ignore[arg-type]
            batch_size=kw.get("batch_size", 16),  # type: ignore[arg-type]
            matching=kw.get("matching"),  # type: ignore[arg-type]
        ):
            if received is not None:
                received.extend(int(s) for s in columns.sequences)
            batch = to_record_batch(columns, up_to=last)
            assert batch.schema.equals(ARROW_SCHEMA)
            seqs.extend(batch.column("sequence").to_pylist())
        return seqs
    finally:
        await conn.close()


async def test_ranges_are_read_exactly(nats_server: object, filled: str) -> None:
    url = nats_server.url  # type: ignore[attr-defined]
    expected = [s for s in range(1, 251) if s not in (7, 8, 9)]
    assert await _read(url, filled, 1, 250) == expected
    assert await _read(url, filled, 6, 10) == [6, 10]
    assert await _read(url, filled, 7, 9) == []
    assert await _read(url, filled, 240, 400) == list(range(240, 251))
    assert await _read(url, filled, 300, 400) == []
    assert await _read(url, filled, 1, 250, batch_size=1) == expected


async def test_a_subject_filter_stops_at_the_range_end(nats_server: object, filled: str) -> None:
    url = nats_server.url  # type: ignore[attr-defined]
    got = await _read(url, filled, 1, 100, subject=f"{filled}.1", batch_size=1000)
    assert got == [s for s in range(1, 101, 3) if s != 7]


async def test_counting_matches_of_a_subject(nats_server: object, filled: str) -> None:
    conn = await DirectGetConnection.open([nats_server.url], timeout=5)  # type: ignore[attr-defined]
    try:
        # Subject <name>.1 holds the sequences 1, 4, 7, ... 250 (7 deleted).
        assert await count_from(conn, filled, f"{filled}.1", 1) == 83
        assert await count_from(conn, filled, f"{filled}.1", 248) == 1
        assert await count_from(conn, filled, f"{filled}.1", 251) == 0
        assert await count_from(conn, filled, f"{filled}.>", 240) == 11
        assert await count_in_range(conn, filled, f"{filled}.1", 1, 100) == 33
        assert await count_in_range(conn, filled, f"{filled}.1", 7, 9) == 0
    finally:
        await conn.close()


async def test_a_counted_filter_asks_for_no_more_than_the_range_holds(
    nats_server: object, filled: str
) -> None:
    """Without a count, the server fills a filtered batch with matches from far past the
    range's end (which the reader then drops); with one, it sends about what is needed."""
    url = nats_server.url  # type: ignore[attr-defined]
    subject = f"{filled}.1"
    expected = [s for s in range(1, 100, 3) if s != 7]  # 1, 4, ... 97 of 1..99
    uncounted: list[int] = []
    assert await _read(url, filled, 1, 99, uncounted, subject=subject, batch_size=1000) == expected
    assert max(uncounted) == 250, "the server went on to the end of the stream"
    counted: list[int] = []
    got = await _read(
        url, filled, 1, 99, counted, subject=subject, batch_size=1000, matching=len(expected)
    )
    assert got == expected
    assert counted == [*expected, 100], "one message past the range ends the read"
    # A count that is too low costs requests, never rows.
    low: list[int] = []
    assert await _read(url, filled, 1, 99, low, subject=subject, matching=3) == expected


async def test_a_right_count_ends_a_filtered_read_in_one_request(
    nats_server: object, filled: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request that should end the range asks for one match more, the first past
    the range: no request of one message to find the end."""
    url = nats_server.url  # type: ignore[attr-defined]
    subject = f"{filled}.1"
    expected = [s for s in range(1, 100, 3) if s != 7]  # 1, 4, ... 97 of 1..99
    sizes: list[int] = []
    request = DirectGetConnection.request

    def recorded(self: DirectGetConnection, stream: str, **kw: Any) -> Any:
        sizes.append(kw["batch"])
        return request(self, stream, **kw)

    monkeypatch.setattr(DirectGetConnection, "request", recorded)
    got = await _read(url, filled, 1, 99, subject=subject, batch_size=1000, matching=33)
    assert (got, sizes) == (expected, [34])
    sizes.clear()
    assert await _read(url, filled, 1, 99, subject=subject, batch_size=20, matching=33) == expected
    assert sizes == [20, 14]
    sizes.clear()
    # Nothing matches past the range: the stream's end ends the read.
    tail = list(range(202, 251, 3))  # 202, 205, ... 250
    got = await _read(url, filled, 200, 260, subject=subject, batch_size=1000, matching=17)
    assert got == tail
    assert sizes == [len(tail) + 1]


def test_read_partition_yields_columns_and_headers(nats_server: object, filled: str) -> None:
    url = nats_server.url  # type: ignore[attr-defined]
    config = ReadConfig((url,), filled, None, 10, 5.0)
    rows = [r for b in read_partition(SequenceRange(config, 4, 6)) for r in b.to_pylist()]
    assert [(r["sequence"], r["subject"], r["data"]) for r in rows] == [
        (4, f"{filled}.1", b"m4"),
        (5, f"{filled}.2", b"m5"),
        (6, f"{filled}.0", b"m6"),
    ]
    assert rows[1]["headers"] == [("H", "1, 2"), ("K", "v")]
    assert rows[0]["headers"] is None
    assert rows[0]["timestamp"].tzinfo is not None


@pytest.mark.parametrize("plain", [True, False])
def test_large_payloads_are_read_byte_for_byte(
    nats_server: object, large: str, plain: bool
) -> None:
    url = nats_server.url  # type: ignore[attr-defined]
    stream = f"{large}P" if plain else large
    config = ReadConfig((url,), stream, None, 64, 5.0)
    rows = [r for b in read_partition(SequenceRange(config, 1, 300)) for r in b.to_pylist()]
    assert [(r["sequence"], r["subject"], r["data"]) for r in rows] == [
        (i, f"{stream}.{i % 3}", _large_payload(i, plain)) for i in range(1, 301)
    ]
    assert [r["headers"] for r in rows if r["headers"]] == [
        [("K", str(i))] for i in range(50, 301, 50) if not plain
    ]


def test_a_partition_abandoned_midway_closes_cleanly(nats_server: object, filled: str) -> None:
    url = nats_server.url  # type: ignore[attr-defined]
    config = ReadConfig((url,), filled, None, 10, 5.0)
    batches = read_partition(SequenceRange(config, 1, 250))
    first = next(batches)
    assert first.num_rows == 10
    batches.close()  # what Spark does on a LIMIT: the prefetched batch is dropped


async def test_no_direct_get_responder_is_named(
    js: jetstream.JetStream, nats_server: object, unique_name: str
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=False)
    await js.publish(f"{unique_name}.x", b"1")
    with pytest.raises(jetstream.DirectGetUnavailableError, match="allow_direct=True"):
        await _read(nats_server.url, unique_name, 1, 1)  # type: ignore[attr-defined]


async def test_unreachable_servers_fail_with_the_option_named() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectError, match="'servers' option"):
        await DirectGetConnection.open([f"nats://127.0.0.1:{port}"], timeout=2)


def test_read_partition_reads_each_subject_and_keeps_the_residual(
    nats_server: object, filled: str
) -> None:
    url = nats_server.url  # type: ignore[attr-defined]
    config = ReadConfig((url,), filled, None, 10, 5.0)
    two = (f"{filled}.1", f"{filled}.2")
    rows = [
        r["sequence"]
        for b in read_partition(SequenceRange(config, 1, 30, subjects=two))
        for r in b.to_pylist()
    ]
    assert sorted(rows) == [s for s in range(1, 31) if s % 3 != 0 and s not in (7, 8)]
    assert len(rows) == len(set(rows))
    keep = JetStreamSelection(sequence_set=frozenset({2, 5, 8, 13, 99}))
    rows = [
        r["sequence"]
        for b in read_partition(SequenceRange(config, 1, 30, subjects=two, residual=keep))
        for r in b.to_pylist()
    ]
    assert sorted(rows) == [2, 5, 13]
    # Times: keep only what is stamped at or after sequence 20's time.
    everything = [r for b in read_partition(SequenceRange(config, 1, 30)) for r in b.to_pylist()]
    stamp = to_micros(next(r["timestamp"] for r in everything if r["sequence"] == 20))
    assert stamp is not None
    late = JetStreamSelection(times=Bounds(stamp, None))
    rows = [
        r["sequence"]
        for b in read_partition(SequenceRange(config, 1, 30, residual=late))
        for r in b.to_pylist()
    ]
    expected = [r["sequence"] for r in everything if (to_micros(r["timestamp"]) or 0) >= stamp]
    assert rows == expected
    assert 20 in rows
