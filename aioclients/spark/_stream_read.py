"""The jetstream data source's reading half, shared by its stream and bucket readers.

A read is planned on the driver (the stream's bounds, Direct Get ``start_time``
lookups, counts of subject matches) and split into :class:`SequenceRange`
partitions; ``read_partition`` reads one on an executor with the lean Direct Get
reader of :mod:`aioclients.spark._direct_io`, one subject filter after the other,
and yields Arrow record batches of messages, or of a Key-Value bucket's entries
(``ReadConfig.bucket``). A range read is exact: the same range always yields the
same rows, which is what makes streaming replay after a restart exact.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from aioclients import jetstream
from aioclients._core import redact_url
from aioclients.jetstream._protocol._kv import subject_prefix
from aioclients.spark._arrow import keep_in, to_entry_batch, to_record_batch
from aioclients.spark._direct_io import (
    DirectGetConnection,
    TlsFiles,
    count_in_range,
    read_sequence_range,
)
from aioclients.spark._errors import DataSourceOptionError
from aioclients.spark._protocol._direct_reader import Columns
from aioclients.spark._protocol._options import OptionReader
from aioclients.spark._protocol._partitions import ROWS_PER_PARTITION
from aioclients.spark._protocol._pushdown import JetStreamSelection

__all__ = (
    "ROWS_PER_PARTITION",
    "SPARK_OPTIONS",
    "ReadConfig",
    "SequenceRange",
    "StreamBounds",
    "bounds_and_times",
    "check_options",
    "expected_rows",
    "keep_selected",
    "nats_tls",
    "read_partition",
    "run",
    "split_range",
    "stream_bounds",
    "tls_files",
)

log = logging.getLogger("aioclients.spark.jetstream")

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine on a fresh event loop (planning code is synchronous)."""
    return asyncio.run(coro)


# -- reading --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadConfig:
    """What a partition reader needs besides its range (pickled with every partition)."""

    servers: tuple[str, ...] = field(repr=False)  # the URLs may carry credentials
    stream: str
    subject: str | None
    batch_size: int
    timeout: float
    tls: TlsFiles = field(default_factory=TlsFiles)
    #: A Key-Value bucket's change feed or history (``stream`` is ``KV_<bucket>``):
    #: rows are entries (``key``, ``value``, ``revision``...), not messages.
    bucket: str | None = None


@dataclass(frozen=True)
class SequenceRange(InputPartition):
    """The sequences ``first`` to ``last`` (inclusive) of one stream.

    ``subjects``: the subject filters to read one after the other (pushed filters
    and the ``subject`` option together; ``None``: the option alone). ``residual``:
    the pushed selection, when rows must be checked against it as they are read
    (time bounds, ``IN`` lists). ``to_end``: ``last`` was the stream's last sequence
    when the read was planned, so a filtered pass reads up to the stream's end
    without first counting its matches (see :func:`_read_pass`).
    """

    config: ReadConfig
    first: int
    last: int
    subjects: tuple[str | None, ...] | None = None
    residual: JetStreamSelection | None = None
    to_end: bool = False


def split_range(first: int, last: int, parts: int) -> list[tuple[int, int]]:
    """Split ``[first, last]`` into at most ``parts`` contiguous ranges of near-equal size."""
    count = last - first + 1
    if count <= 0:
        return []
    parts = max(1, min(parts, count))
    size, extra = divmod(count, parts)
    ranges = []
    start = first
    for i in range(parts):
        end = start + size - 1 + (1 if i < extra else 0)
        ranges.append((start, end))
        start = end + 1
    return ranges


def tls_files(opts: OptionReader) -> TlsFiles:
    """The TLS options, checked here (on the driver) so that a bad file fails the plan."""
    tls = TlsFiles(opts.get("tlsCaFile"), opts.get("tlsCertFile"), opts.get("tlsKeyFile"))
    if tls:
        tls.context()
    return tls


def nats_tls(tls: TlsFiles) -> dict[str, Any]:
    """``jetstream.connect`` options for ``tls``."""
    return {"tls": tls.context()} if tls else {}


# Options Spark itself passes on to sources and sinks.
SPARK_OPTIONS = {"path", "checkpointLocation", "queryName"}


def check_options(opts: OptionReader, known: set[str], what: str, fmt: str) -> None:
    unknown = opts.unknown(known | SPARK_OPTIONS)
    if unknown:
        raise DataSourceOptionError(
            f"unknown option(s) {unknown} for the {fmt} {what}; "
            f"it takes {sorted(known)} (names are case-insensitive)"
        )


@dataclass(frozen=True, slots=True)
class StreamBounds:
    """The stream's first and last sequence and when it was created (ISO text or None)."""

    first: int
    last: int
    created: str | None


async def stream_bounds(config: ReadConfig) -> StreamBounds:
    """The stream's first and last sequence; checks that it exists and allows Direct Get."""
    bounds, _ = await bounds_and_times(config, [])
    return bounds


async def bounds_and_times(
    config: ReadConfig, times: list[int]
) -> tuple[StreamBounds, dict[int, int | None]]:
    """:func:`stream_bounds`, and the sequence of the first message stored at or after
    each of ``times`` (microseconds; ``None``: none), on one connection: a batch read
    is planned with one connect and one stream lookup, whatever its filters."""
    try:
        js = await jetstream.connect(
            list(config.servers), timeout=min(config.timeout, 10.0), **nats_tls(config.tls)
        )
    except jetstream.JetStreamConnectError as exc:
        raise jetstream.JetStreamConnectError(f"{exc}; check the 'servers' option") from None
    async with js:
        try:
            stream = await js.stream(config.stream)
        except jetstream.StreamNotFoundError:
            where = ", ".join(redact_url(u) for u in config.servers)
            if config.bucket is not None:
                raise DataSourceOptionError(
                    f"option 'bucket': there is no Key-Value bucket {config.bucket!r} (stream "
                    f"{config.stream!r}) at {where}; create it or fix the option"
                ) from None
            raise DataSourceOptionError(
                f"option 'stream': there is no stream {config.stream!r} at "
                f"{where}; create it or fix the option"
            ) from None
        info = stream.cached_info
        if not info.config.get("allow_direct"):
            raise jetstream.DirectGetUnavailableError(
                f"stream {config.stream!r} does not allow Direct Get, which the jetstream "
                "data source reads with",
                hint=f"enable it with update_stream({config.stream!r}, allow_direct=True) "
                f"(nats CLI: nats stream edit {config.stream} --allow-direct)",
            )
        created = info.created.isoformat() if info.created is not None else None
        found: dict[int, int | None] = {}
        for micros in times:
            when = _EPOCH + timedelta(microseconds=micros)
            try:
                found[micros] = (await stream.direct_get(start_time=when)).seq
            except jetstream.MessageNotFoundError:
                found[micros] = None
        return StreamBounds(info.state.first_seq, info.state.last_seq, created), found


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


async def expected_rows(
    config: ReadConfig, subjects: tuple[str | None, ...], first: int, last: int
) -> int:
    """At most how many messages a read of ``first..last`` yields: the range's size, or
    what the server counts for its subject filters."""
    if None in subjects:
        return last - first + 1
    conn = await DirectGetConnection.open(
        list(config.servers), timeout=config.timeout, tls=config.tls
    )
    try:
        total = 0
        for subject in subjects:
            assert subject is not None
            total += await count_in_range(conn, config.stream, subject, first, last)
        return total
    finally:
        await conn.close()


def _stream_rows(columns: Columns, last: int) -> pa.RecordBatch:
    return to_record_batch(columns, up_to=last)


def keep_selected(batch: pa.RecordBatch, selection: JetStreamSelection) -> pa.RecordBatch:
    """The rows of a stream read's ``batch`` that ``selection``'s times and ``IN`` admit."""
    return keep_in(
        batch,
        times=selection.times,
        time_column="timestamp",
        numbers=selection.sequence_set,
        number_column="sequence",
    )


def read_partition(partition: SequenceRange) -> Iterator[pa.RecordBatch]:
    """Read one partition's range: one event loop and one connection for the whole range.

    Rows are messages, or a bucket's entries when the read is of a bucket.
    """
    bucket = partition.config.bucket
    if bucket is None:
        return _read_range(partition, _stream_rows)
    prefix = subject_prefix(bucket)
    return _read_range(partition, lambda columns, last: to_entry_batch(columns, prefix, last))


def _read_range(
    partition: SequenceRange, convert: Callable[[Columns, int], pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The record batches (``convert(columns, last)``) of ``partition``'s passes."""
    config = partition.config
    if partition.first > partition.last:
        return
    subjects = (config.subject,) if partition.subjects is None else partition.subjects
    loop = asyncio.new_event_loop()
    try:
        conn = loop.run_until_complete(
            DirectGetConnection.open(list(config.servers), timeout=config.timeout, tls=config.tls)
        )
        try:
            for subject in subjects:
                yield from _read_pass(loop, conn, partition, subject, convert)
        finally:
            loop.run_until_complete(conn.close())
    finally:
        loop.close()


def _read_pass(
    loop: asyncio.AbstractEventLoop,
    conn: DirectGetConnection,
    partition: SequenceRange,
    subject: str | None,
    convert: Callable[[Columns, int], pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """One subject filter's messages in the partition's range."""
    config = partition.config
    matching = None
    if subject is not None and not partition.to_end:
        # How many match in the range, so that no request reaches far past it (the
        # server fills a filtered batch from wherever the matches are). A range that
        # ends where the stream ended when planned needs no count (two requests, and
        # the server scans a file block for the one from mid-stream): past its end
        # there is nothing to walk but what was stored since, and those rows are
        # dropped like any past ``last``.
        matching = loop.run_until_complete(
            count_in_range(conn, config.stream, subject, partition.first, partition.last)
        )
        if matching == 0:
            return
    batches = read_sequence_range(
        conn,
        config.stream,
        first=partition.first,
        last=partition.last,
        subject=subject,
        batch_size=config.batch_size,
        matching=matching,
    )
    try:
        while True:
            try:
                columns = loop.run_until_complete(anext(batches))
            except StopAsyncIteration:
                break
            batch = convert(columns, partition.last)
            if partition.residual is not None:
                batch = keep_selected(batch, partition.residual)
            if batch.num_rows:
                yield batch
    finally:
        loop.run_until_complete(batches.aclose())  # type: ignore[attr-defined]
