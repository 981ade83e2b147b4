"""The lean Direct Get reader (no Spark) against the real nats-server."""

from __future__ import annotations

import socket

import pytest

from aioclients import ConnectError, jetstream
from aioclients.spark._arrow import ARROW_SCHEMA, to_record_batch
from aioclients.spark._direct_io import DirectGetConnection, read_sequence_range
from aioclients.spark._jetstream import ReadConfig, SequenceRange, read_partition

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


async def _read(url: str, name: str, first: int, last: int, **kw: object) -> list[int]:
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
        ):
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
