"""The ``liftbridge`` Spark data source: batch and streaming reads and writes.

Theory of operation (pyspark's Python Data Source API, ``pyspark.sql.datasource``):

- Planning runs in a Python process next to the driver: the reader connects
  once (``aioclients.liftbridge``), checks that the stream and the partitions
  exist, asks each partition's leader for its high watermark (the newest
  committed offset) and turns ``startingOffsets`` / ``endingOffsets`` (see
  :mod:`aioclients.spark._lb_offsets`) into one :class:`OffsetRange` per
  Liftbridge partition. Everything ``read()`` needs travels in the range.
- ``read()`` runs on an executor: one event loop and one client per Spark
  partition; it subscribes from the range's first offset with ``stop_offset``
  at its last, so the same range always yields the same messages (offsets are
  immutable once committed, and ranges never pass the high watermark). That is
  what makes a streaming query restarted from its checkpoint exact.
- Streaming offsets are ``{"stream": <name>, "offsets": {"<partition>": <next>}}``;
  a micro-batch covers ``[start, end - 1]`` of every partition. The latest offset
  is each partition's high watermark + 1, capped by ``maxMessagesPerTrigger``
  (shared out between partitions, through ``getDefaultReadLimit`` /
  ``latestOffset(start, limit)``) and, for ``Trigger.AvailableNow``, by the
  offsets when the query started. ``commit()`` has nothing to release: reading
  does not consume. Offsets also carry the stream's creation timestamp, so that
  a stream deleted and recreated under a query (offsets from 0 again) is noticed.
- Data loss (``failOnDataLoss``, default true): the planner learns each
  partition's oldest kept offset (a start-at-time subscription from the epoch,
  which the broker refuses at once when nothing is kept; else, when its time
  index is inconclusive, an ``EARLIEST`` one: see ``_oldest_kept``). When a
  micro-batch would start below it (retention) or the stream was recreated, the
  query fails with :class:`DataLossError` naming the lost offsets; with
  ``false`` it logs a warning and goes on from the oldest kept. A batch read
  whose ``startingOffsets`` lie below it does the same, and so does a task
  whose segment the cleaner deletes while it reads (``SegmentDeletedError``).
- Writers publish each row on the PublishAsync stream (``AckPolicy.LEADER``) of
  one client per task, with columns converted in C and publish_async's per-call
  checks done once per task (see ``_publish``), and wait for every ack; a
  failed or missing ack fails the task with :class:`PublishFailedError`
  naming the row. A retried task publishes its rows again (at-least-once).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    Filter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aioclients import liftbridge
from aioclients._errors import AioClientsError
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.spark._errors import DataSourceOptionError, PublishFailedError
from aioclients.spark._lb_offsets import (
    EARLIEST,
    LATEST,
    cap_offsets,
    checkpoint_offsets,
    parse_brokers,
    parse_offsets,
    parse_partitions,
    resolve_end,
    resolve_start,
    to_checkpoint,
)
from aioclients.spark._protocol._data_loss import OPTION as FAIL_ON_DATA_LOSS
from aioclients.spark._protocol._data_loss import lost_range, report_data_loss
from aioclients.spark._protocol._options import OptionReader
from aioclients.spark._protocol._pushdown import LiftbridgeSelection, plan_liftbridge
from aioclients.spark._pushdown import to_predicate

__all__ = (
    "LIFTBRIDGE_ARROW_SCHEMA",
    "LIFTBRIDGE_SCHEMA",
    "LiftbridgeDataSource",
    "OffsetRange",
    "data_source",
)

log = logging.getLogger("aioclients.spark.liftbridge")

FORMAT = "liftbridge"
LIFTBRIDGE_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("timestamp", TimestampType()),
        StructField("headers", MapType(StringType(), BinaryType())),
    ]
)
HEADERS_TYPE = pa.map_(pa.string(), pa.binary())
LIFTBRIDGE_ARROW_SCHEMA = pa.schema(
    [
        pa.field("stream", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("headers", HEADERS_TYPE),
    ]
)
DEFAULT_BATCH_SIZE = 10_000
DEFAULT_TIMEOUT = 30.0
COMMON_READ_OPTIONS = {
    "brokers",
    "stream",
    "partitions",
    "startingOffsets",
    "batchSize",
    "timeout",
    FAIL_ON_DATA_LOSS,
}
BATCH_READ_OPTIONS = COMMON_READ_OPTIONS | {"endingOffsets"}
STREAM_READ_OPTIONS = COMMON_READ_OPTIONS | {"maxMessagesPerTrigger"}
WRITE_OPTIONS = {"brokers", "stream", "partitioner", "timeout", "maxPending"}
WRITE_COLUMNS = {"value", "key", "partition", "headers"}
# Options Spark itself passes on to sources and sinks.
SPARK_OPTIONS = {"path", "checkpointLocation", "queryName"}

T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine on a fresh event loop (planning code is synchronous)."""
    return asyncio.run(coro)


def _check_options(opts: OptionReader, known: set[str], what: str) -> None:
    unknown = opts.unknown(known | SPARK_OPTIONS)
    if unknown:
        raise DataSourceOptionError(
            f"unknown option(s) {unknown} for the {FORMAT} {what}; "
            f"it takes {sorted(known)} (names are case-insensitive)"
        )


def _stream_name(opts: OptionReader) -> str:
    return opts.required("stream", "orders-stream", "the Liftbridge stream")


async def _connect(brokers: tuple[str, ...], timeout: float, **options: Any) -> liftbridge.Client:
    try:
        return await liftbridge.connect(
            list(brokers),
            ack_wait_time=timeout,
            rpc_timeout=min(timeout, 10.0),
            max_rpc_attempts=3,
            **options,
        )
    except liftbridge.LiftbridgeConnectError as exc:
        raise liftbridge.LiftbridgeConnectError(
            f"{exc}; check the 'brokers' option ({', '.join(brokers)})"
        ) from None


async def _stream_info(client: liftbridge.Client, stream: str, brokers: tuple[str, ...]) -> Any:
    info = (await client.fetch_metadata()).get_stream(stream)
    if info is None:
        raise DataSourceOptionError(
            f"option 'stream': there is no Liftbridge stream {stream!r} at "
            f"{', '.join(brokers)}; create it or fix the option"
        )
    return info


# -- reading --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadConfig:
    """What a partition reader needs besides its range (pickled with every partition)."""

    brokers: tuple[str, ...]
    stream: str
    batch_size: int
    timeout: float
    #: the ``failOnDataLoss`` option: a task that finds part of its range deleted by
    #: retention under it fails (true) or warns and goes on from the oldest kept
    fail_on_data_loss: bool = True


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """The offsets ``first`` to ``last`` (inclusive) of one Liftbridge partition.

    ``residual``: the pushed selection, when rows must be checked against it as they
    are read (time bounds, ``IN`` lists).
    """

    config: ReadConfig
    partition: int
    first: int
    last: int
    residual: LiftbridgeSelection | None = None


def _read_config(opts: OptionReader) -> tuple[ReadConfig, str | None]:
    brokers = parse_brokers(opts.get("brokers"))
    stream = _stream_name(opts)
    batch_size = opts.integer("batchSize", default=DEFAULT_BATCH_SIZE, minimum=1, example="10000")
    assert batch_size is not None
    config = ReadConfig(
        brokers=tuple(brokers),
        stream=stream,
        batch_size=batch_size,
        timeout=opts.seconds("timeout", default=DEFAULT_TIMEOUT),
        fail_on_data_loss=opts.boolean(FAIL_ON_DATA_LOSS, default=True),
    )
    return config, opts.get("partitions")


async def _high_watermarks_async(config: ReadConfig, partitions: str | None) -> dict[int, int]:
    client = await _connect(config.brokers, config.timeout)
    async with client:
        info = await _stream_info(client, config.stream, config.brokers)
        chosen = parse_partitions(partitions, info.partitions, config.stream)
        out: dict[int, int] = {}
        for p in chosen:
            meta = await client.fetch_partition_metadata(config.stream, p)
            out[p] = meta.high_watermark
        return out


def high_watermarks(config: ReadConfig, partitions: str | None) -> dict[int, int]:
    """Each chosen partition's newest committed offset (-1 when empty)."""
    return _run(_high_watermarks_async(config, partitions))


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Per chosen partition: newest committed offset (-1 when empty) and oldest kept
    offset (high watermark + 1 when nothing is kept); the stream's creation time (ns)."""

    high_watermarks: dict[int, int]
    earliest: dict[int, int]
    created: int


async def _oldest_kept(
    client: liftbridge.Client, config: ReadConfig, partition: int, high_watermark: int
) -> int:
    """The offset of the oldest message the partition still keeps up to
    ``high_watermark`` (retention trims it), or ``high_watermark + 1`` when it keeps
    none of them (the cleaner emptied the partition)."""
    if high_watermark < 0:
        return 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.timeout
    while True:
        try:
            found = await _oldest_by_time(client, config, partition, high_watermark, deadline)
            if found is None:
                found = await _oldest_by_reading(
                    client, config, partition, high_watermark, deadline
                )
            return found
        except liftbridge.SegmentDeletedError:
            # The partition's cleaner deleted the segment under the probe: the
            # oldest offset just moved; look again.
            if loop.time() < deadline:
                continue
            raise


#: how long an EARLIEST probe waits for a first message once the broker has confirmed
#: it, when the time index says that nothing up to the high watermark may be kept
_EMPTIED_WAIT = 2.0


def _stop_before_start(exc: liftbridge.LiftbridgeServerError) -> bool:
    return exc.code == "INVALID_ARGUMENT" and "before start offset" in str(exc)


async def _oldest_by_time(
    client: liftbridge.Client,
    config: ReadConfig,
    partition: int,
    high_watermark: int,
    deadline: float,
) -> int | None:
    """The oldest kept offset by a start-at-time subscription from the epoch (the
    first entry of the first segment's time index), which never waits on a partition
    the cleaner emptied: the broker then starts past the high watermark and refuses
    the subscription (stop before start). None: it refused, which it also does when
    the log's newest segment is empty and it reads that as the end of the log (only
    when the log has one or two segments), so the answer is not final."""
    loop = asyncio.get_running_loop()
    subscription = client.subscribe(
        config.stream, partition=partition, start_time=1, stop_offset=high_watermark
    )
    try:
        async with subscription as sub:
            try:
                msg = await asyncio.wait_for(sub.__anext__(), max(deadline - loop.time(), 0))
            except StopAsyncIteration:
                return high_watermark + 1
            except TimeoutError:
                raise _probe_timeout(config, partition) from None
            return min(int(msg.offset), high_watermark + 1)
    except liftbridge.LiftbridgeServerError as e:
        if isinstance(e, liftbridge.SegmentDeletedError) or not _stop_before_start(e):
            raise
        return None


async def _oldest_by_reading(
    client: liftbridge.Client,
    config: ReadConfig,
    partition: int,
    high_watermark: int,
    deadline: float,
) -> int:
    """The oldest kept offset by an EARLIEST subscription: a kept message comes right
    after the broker confirms it; on a partition the cleaner emptied the broker waits
    for the next message instead, so no message within ``_EMPTIED_WAIT`` (or the
    timeout, when shorter) means that none up to the high watermark is kept."""
    loop = asyncio.get_running_loop()
    subscription = client.subscribe(
        config.stream,
        partition=partition,
        start_at=liftbridge.StartPosition.EARLIEST,
        stop_offset=high_watermark,
    )
    try:
        async with subscription as sub:
            wait = min(_EMPTIED_WAIT, max(deadline - loop.time(), 0))
            try:
                msg = await asyncio.wait_for(sub.__anext__(), wait)
            except (StopAsyncIteration, TimeoutError):
                return high_watermark + 1
            return min(int(msg.offset), high_watermark + 1)
    except liftbridge.LiftbridgeServerError as e:
        if isinstance(e, liftbridge.SegmentDeletedError) or not _stop_before_start(e):
            raise
        return high_watermark + 1  # the oldest kept is past it


def _probe_timeout(config: ReadConfig, partition: int) -> liftbridge.LiftbridgeTimeoutError:
    return liftbridge.LiftbridgeTimeoutError(
        f"no message of {config.stream}/{partition} within {config.timeout}s while "
        "looking up its oldest offset; raise the 'timeout' option if the brokers "
        "are slow"
    )


async def _partition_state_async(config: ReadConfig, partitions: str | None) -> PartitionState:
    client = await _connect(config.brokers, config.timeout)
    async with client:
        info = await _stream_info(client, config.stream, config.brokers)
        chosen = parse_partitions(partitions, info.partitions, config.stream)
        hws: dict[int, int] = {}
        earliest: dict[int, int] = {}
        for p in chosen:
            meta = await client.fetch_partition_metadata(config.stream, p)
            hws[p] = meta.high_watermark
            earliest[p] = await _oldest_kept(client, config, p, meta.high_watermark)
        return PartitionState(hws, earliest, int(info.creation_timestamp))


def partition_state(config: ReadConfig, partitions: str | None) -> PartitionState:
    """High watermarks, oldest kept offsets and creation time (for data loss checks)."""
    return _run(_partition_state_async(config, partitions))


def _losses_text(stream: str, losses: Mapping[int, tuple[int, int]]) -> str:
    ranges = ", ".join(f"partition {p}: offsets {a}..{b}" for p, (a, b) in sorted(losses.items()))
    return f"of stream {stream!r}, {ranges} are no longer kept (retention or deletion)"


def _recreated_between(start: Mapping[str, Any], end: Mapping[str, Any], stream: str) -> bool:
    """Whether ``end`` belongs to a stream recreated after ``start`` (offsets restarted)."""
    before, after = start.get("created"), end.get("created")
    if before and after and before != after:
        return True
    first, last = checkpoint_offsets(start, stream), checkpoint_offsets(end, stream)
    return any(last[p] < first.get(p, 0) for p in last)


def _to_record_batch(stream: str, partition: int, messages: list[liftbridge.Message]) -> Any:
    count = len(messages)
    headers: list[list[tuple[str, bytes]] | None] = []
    for m in messages:
        h = m.headers
        headers.append(list(h.items()) if h else None)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([stream] * count, pa.string()),
            pa.array([partition] * count, pa.int32()),
            pa.array([m.offset for m in messages], pa.int64()),
            pa.array([m.key for m in messages], pa.binary()),
            pa.array([m.value for m in messages], pa.binary()),
            pa.array([m.timestamp // 1000 for m in messages], pa.timestamp("us", tz="UTC")),
            pa.array(headers, HEADERS_TYPE),
        ],
        schema=LIFTBRIDGE_ARROW_SCHEMA,
    )


async def _read_messages(part: OffsetRange) -> AsyncIterator[list[liftbridge.Message]]:
    """The range's messages in lists of up to ``batch_size``.

    The planner checked that ``part.first`` was kept, but retention goes on while the
    task reads: when the cleaner deletes the segment the task reads from
    (``SegmentDeletedError``), or everything left of the range (the read then waits
    for the next message until the timeout), the offsets from the next one to read up
    to the oldest kept are lost. ``failOnDataLoss`` (in ``part.config``) then fails the
    task naming them, or warns and reads on from the oldest kept.
    """
    config = part.config
    residual = part.residual
    client = await _connect(config.brokers, config.timeout)
    async with client:
        chunk: list[liftbridge.Message] = []
        next_offset = part.first  # the next offset the range needs
        while next_offset <= part.last:
            subscription = client.subscribe(
                config.stream,
                partition=part.partition,
                start_offset=next_offset,
                stop_offset=part.last,
            )
            try:
                async with subscription as sub:
                    while True:
                        try:
                            msg = await asyncio.wait_for(sub.__anext__(), config.timeout)
                        except StopAsyncIteration:
                            next_offset = part.last + 1
                            break
                        except TimeoutError:
                            kept = await _oldest_kept(client, config, part.partition, part.last)
                            if kept <= next_offset:
                                raise liftbridge.LiftbridgeTimeoutError(
                                    f"no message of {config.stream}/{part.partition} within "
                                    f"{config.timeout}s while reading offsets {part.first}.."
                                    f"{part.last} (next: {next_offset}); raise the 'timeout' "
                                    "option if the brokers are slow"
                                ) from None
                            next_offset = _lost_under_read(part, next_offset, kept)
                            break
                        if msg.offset > part.last:
                            next_offset = part.last + 1
                            break
                        next_offset = msg.offset + 1
                        if residual is None or residual.admits(
                            part.partition, msg.offset, msg.timestamp // 1000
                        ):
                            chunk.append(msg)
                        if len(chunk) >= config.batch_size:
                            yield chunk
                            chunk = []
                        if msg.offset >= part.last:
                            break
            except liftbridge.SegmentDeletedError:
                kept = await _oldest_kept(client, config, part.partition, part.last)
                next_offset = _lost_under_read(part, next_offset, kept)
        if chunk:
            yield chunk


def _lost_under_read(part: OffsetRange, next_offset: int, kept: int) -> int:
    """Report ``next_offset .. kept - 1`` of the range lost to retention under the
    read (``failOnDataLoss``); return where the read goes on."""
    lost = lost_range(next_offset, kept, part.last)
    if lost is not None:
        report_data_loss(
            f"of stream {part.config.stream!r}, partition {part.partition}: offsets "
            f"{lost[0]}..{lost[1]} are no longer kept (retention deleted them while a task "
            f"read offsets {part.first}..{part.last})",
            fail=part.config.fail_on_data_loss,
            resume="the oldest offset kept",
            log=log,
        )
    return max(next_offset, kept)


def read_partition(part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Read one range: one event loop and one client for the whole range."""
    if part.first > part.last:
        return
    loop = asyncio.new_event_loop()
    try:
        chunks = _read_messages(part)
        try:
            while True:
                try:
                    messages = loop.run_until_complete(anext(chunks))
                except StopAsyncIteration:
                    break
                yield _to_record_batch(part.config.stream, part.partition, messages)
        finally:
            loop.run_until_complete(chunks.aclose())  # type: ignore[attr-defined]
    finally:
        loop.close()


def _check_schema(schema: StructType) -> None:
    if schema != LIFTBRIDGE_SCHEMA:
        raise DataSourceOptionError(
            f"the {FORMAT} source has a fixed schema ({LIFTBRIDGE_SCHEMA.simpleString()}); "
            "do not pass .schema(...) to the reader"
        )


class LiftbridgeBatchReader(DataSourceReader):
    """``spark.read.format("liftbridge")``: one offset range per Liftbridge partition."""

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = OptionReader(options, FORMAT)
        _check_options(opts, BATCH_READ_OPTIONS, "batch reader")
        self.config, partitions = _read_config(opts)
        stream = self.config.stream
        start_spec = parse_offsets(
            "startingOffsets",
            opts.get("startingOffsets"),
            default=EARLIEST,
            words=("earliest", "latest"),
            stream=stream,
        )
        end_spec = parse_offsets(
            "endingOffsets",
            opts.get("endingOffsets"),
            default=LATEST,
            words=("latest",),
            stream=stream,
        )
        self.fail_on_data_loss = opts.boolean(FAIL_ON_DATA_LOSS, default=True)
        state = partition_state(self.config, partitions)
        hws = state.high_watermarks
        start = resolve_start(start_spec, hws, stream=stream, earliest=state.earliest)
        end = resolve_end(end_spec, hws, stream=stream)
        for p in sorted(hws):
            if end[p] > hws[p]:
                raise DataSourceOptionError(
                    f"option 'endingOffsets': partition {p} ends at {end[p]}, past its newest "
                    f"committed offset {hws[p]}; use 'latest' or an offset <= {hws[p]}"
                )
            if isinstance(start_spec, dict) and isinstance(end_spec, dict) and p in start_spec:
                if p in end_spec and start[p] > end[p] + 1:
                    raise DataSourceOptionError(
                        f"option 'startingOffsets' ({start[p]}) is after 'endingOffsets' "
                        f"({end[p]}) for partition {p}; the ending offset is inclusive"
                    )
        self.state = state
        self.start = start
        self.end = end
        # What pushFilters (a subclass) leaves to the brokers; everything by default.
        self.selection = LiftbridgeSelection()

    def partitions(self) -> list[OffsetRange]:
        selection, state, stream = self.selection, self.state, self.config.stream
        chosen = selection.choose(state.high_watermarks)
        found = _run(_first_offsets_at_or_after(self.config, state, chosen, selection))
        windows = {
            p: selection.offset_window(self.start[p], self.end[p], found.get(p, {})) for p in chosen
        }
        losses = {}
        for p, window in windows.items():
            assert window.lo is not None
            assert window.hi is not None
            lost = lost_range(window.lo, state.earliest[p], window.hi)
            if lost is not None:
                losses[p] = lost
                windows[p] = window.narrow(lo=state.earliest[p])
        if losses:
            report_data_loss(
                "option 'startingOffsets' starts below the oldest offsets kept: "
                + _losses_text(stream, losses),
                fail=self.fail_on_data_loss,
                resume="the oldest offsets kept",
                log=log,
            )
        residual = selection if selection.residual else None
        ranges = [
            OffsetRange(self.config, p, w.lo, w.hi, residual)
            for p, w in sorted(windows.items())
            if w.lo is not None and w.hi is not None and w.lo <= w.hi
        ]
        # An empty read still needs one partition: with none, Spark plans its own.
        return ranges or [OffsetRange(self.config, 0, 0, -1)]

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_partition(partition)


class LiftbridgePushdownReader(LiftbridgeBatchReader):
    """The batch reader with filter pushdown (see :mod:`aioclients.spark._pushdown`).

    ``partition`` (=, IN), ``offset`` ranges and ``timestamp`` bounds become the
    partitions read, their offset ranges and start-at-time positions; the rest is
    returned to Spark.
    """

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        predicates = [to_predicate(f) for f in filters]
        self.selection, pushed = plan_liftbridge(predicates, self.config.stream)
        log.debug("liftbridge pushdown: %s (pushed %s)", self.selection, pushed)
        return [f for f, exact in zip(filters, pushed, strict=True) if not exact]


async def _first_offsets_at_or_after(
    config: ReadConfig,
    state: PartitionState,
    partitions: list[int],
    selection: LiftbridgeSelection,
) -> dict[int, dict[int, int | None]]:
    """Per partition, the first offset with a timestamp at or after each time lookup."""
    times = selection.time_lookups()
    if not times or not partitions:
        return {}
    client = await _connect(config.brokers, config.timeout)
    async with client:
        found: dict[int, dict[int, int | None]] = {}
        for p in partitions:
            hw = state.high_watermarks[p]
            if state.earliest[p] > hw:
                # Nothing kept (the cleaner emptied it): no message at or after any
                # time, and a lookup would wait for the next message.
                found[p] = dict.fromkeys(times)
                continue
            found[p] = {t: await _offset_at_or_after(client, config, p, hw, t) for t in times}
        return found


async def _offset_at_or_after(
    client: liftbridge.Client, config: ReadConfig, partition: int, high_watermark: int, micros: int
) -> int | None:
    """The partition's first offset stamped at or after ``micros`` (None: there is none).

    Liftbridge finds it by time (a start-at-time subscription, exact while a
    partition's times do not go backwards); the newest message is looked at first,
    because a start time past it would leave nothing to read up to the high watermark.
    """
    if high_watermark < 0:
        return None
    nanos = micros * 1000
    newest = await _first_message(
        client, config, partition, high_watermark, start_offset=high_watermark
    )
    if newest is None or newest.timestamp < nanos:
        return None
    try:
        found = await _first_message(client, config, partition, high_watermark, start_time=nanos)
    except liftbridge.LiftbridgeServerError as e:
        if isinstance(e, liftbridge.SegmentDeletedError) or not _stop_before_start(e):
            raise
        # The newest message is at or after the time, yet the broker started past it:
        # its time lookup stops at an empty segment (the newest one, just sealed) and
        # answers the end of the log. Search by offset instead.
        return await _offset_at_or_after_by_offset(client, config, partition, high_watermark, nanos)
    return None if found is None else int(found.offset)


async def _offset_at_or_after_by_offset(
    client: liftbridge.Client, config: ReadConfig, partition: int, high_watermark: int, nanos: int
) -> int | None:
    """The first offset stamped at or after ``nanos`` by a binary search over the kept
    offsets, one single-message subscription per step (times do not go backwards
    along a partition; compaction may leave gaps, each step reads the first message
    at or after its offset)."""
    lo = await _oldest_kept(client, config, partition, high_watermark)
    hi = high_watermark
    while lo < hi:
        mid = (lo + hi) // 2
        msg = await _first_message(client, config, partition, high_watermark, start_offset=mid)
        if msg is None:
            return None
        if msg.timestamp >= nanos:
            hi = mid
        else:
            lo = int(msg.offset) + 1
    if lo > high_watermark:
        return None
    msg = await _first_message(client, config, partition, high_watermark, start_offset=lo)
    return None if msg is None or msg.timestamp < nanos else int(msg.offset)


async def _first_message(
    client: liftbridge.Client,
    config: ReadConfig,
    partition: int,
    high_watermark: int,
    **start: Any,
) -> liftbridge.Message | None:
    subscription = client.subscribe(
        config.stream, partition=partition, stop_offset=high_watermark, **start
    )
    async with subscription as sub:
        try:
            return await asyncio.wait_for(sub.__anext__(), config.timeout)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            raise liftbridge.LiftbridgeTimeoutError(
                f"no message of {config.stream}/{partition} within {config.timeout}s while "
                "looking up an offset by time; raise the 'timeout' option if the brokers "
                "are slow"
            ) from None


class LiftbridgeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("liftbridge")``: micro-batches of per-partition ranges."""

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = OptionReader(options, FORMAT)
        _check_options(opts, STREAM_READ_OPTIONS, "stream reader")
        self.config, self.partition_option = _read_config(opts)
        self.start_spec = parse_offsets(
            "startingOffsets",
            opts.get("startingOffsets"),
            default=LATEST,
            words=("earliest", "latest"),
            stream=self.config.stream,
        )
        self.max_per_trigger = opts.integer(
            "maxMessagesPerTrigger", default=None, minimum=1, example="10000"
        )
        self.fail_on_data_loss = opts.boolean(FAIL_ON_DATA_LOSS, default=True)
        self._target: dict[int, int] | None = None  # Trigger.AvailableNow: no further
        self._latest: dict[int, int] | None = None
        # The start latestOffset checked last, and the oldest kept offsets then.
        self._checked: tuple[dict[str, Any], dict[int, int]] | None = None
        # Fail at start on a bad stream, partition or offsets.
        resolve_start(self.start_spec, self._next_offsets(), stream=self.config.stream)

    def _next_offsets(self) -> dict[int, int]:
        """The first offset not yet written, per partition (high watermark + 1)."""
        return {p: hw + 1 for p, hw in high_watermarks(self.config, self.partition_option).items()}

    def _checkpointed(self, offset: Mapping[str, Any], latest: Mapping[int, int]) -> dict[int, int]:
        offsets = checkpoint_offsets(offset, self.config.stream)
        if set(offsets) != set(latest):
            raise DataSourceOptionError(
                f"the checkpoint covers partitions {sorted(offsets)} of stream "
                f"{self.config.stream!r}, the query reads {sorted(latest)}; keep the "
                "'partitions' option as it was or use a new checkpointLocation"
            )
        return offsets

    def _state(self) -> PartitionState:
        return partition_state(self.config, self.partition_option)

    def _report(self, what: str, resume: str) -> None:
        report_data_loss(what, fail=self.fail_on_data_loss, resume=resume, log=log)

    def initialOffset(self) -> dict[str, Any]:
        state = self._state()
        hws = state.high_watermarks
        start = resolve_start(
            self.start_spec, hws, stream=self.config.stream, earliest=state.earliest
        )
        losses = {}
        for p, first in start.items():
            if first > hws[p] + 1:
                raise DataSourceOptionError(
                    f"option 'startingOffsets': partition {p} starts at {first}, past its next "
                    f"offset {hws[p] + 1}; use 'latest' or an offset <= {hws[p] + 1}"
                )
            lost = lost_range(first, state.earliest[p])
            if lost is not None:
                losses[p] = lost
            start[p] = max(first, state.earliest[p])
        if losses:
            self._report(
                "option 'startingOffsets' starts below the oldest offsets kept: "
                + _losses_text(self.config.stream, losses),
                "the oldest offsets kept",
            )
        return to_checkpoint(self.config.stream, start, state.created)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.max_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._next_offsets()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        state = self._state()
        latest = {p: hw + 1 for p, hw in state.high_watermarks.items()}
        covered = self._checkpointed(start, latest)
        now = to_checkpoint(self.config.stream, latest, state.created)
        if _recreated_between(start, now, self.config.stream):
            self._report(
                f"stream {self.config.stream!r} was deleted and recreated under the query "
                f"(created at {start.get('created', 'unknown')} ns before, {state.created} ns "
                f"now; it ends at offsets {latest}): whatever the old stream held from "
                f"offsets {covered} on was not read",
                "the new stream's oldest offsets",
            )
            covered = dict(state.earliest)
            self._target = None
        else:
            losses = {}
            for p in sorted(covered):
                lost = lost_range(covered[p], state.earliest[p])
                if lost is not None:
                    losses[p] = lost
            if losses:
                self._report(
                    "the query's next micro-batch starts below the oldest offsets kept: "
                    + _losses_text(self.config.stream, losses),
                    "the oldest offsets kept",
                )
            covered = {p: max(n, state.earliest[p]) for p, n in covered.items()}
        self._checked = (start, dict(state.earliest))
        self._latest = latest
        top = dict(latest)
        if self._target is not None:
            top = {p: min(n, self._target.get(p, n)) for p, n in top.items()}
        top = {p: max(n, covered[p]) for p, n in top.items()}
        if isinstance(limit, ReadMaxRows):
            top = cap_offsets(covered, top, limit.max_rows)
        return to_checkpoint(self.config.stream, top, state.created)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else to_checkpoint(self.config.stream, self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[OffsetRange]:
        stream = self.config.stream
        after = checkpoint_offsets(end, stream)
        kept = self._checked[1] if self._checked and self._checked[0] == start else None
        if _recreated_between(start, end, stream):
            first = dict(kept) if kept is not None else dict.fromkeys(after, 0)
        else:
            first = checkpoint_offsets(start, stream)
            if kept is None:
                # Not planned by this reader (replayed after a restart): check it here.
                kept = self._state().earliest
                losses = {}
                for p in sorted(after):
                    lost = lost_range(first.get(p, 0), kept.get(p, 0), after[p] - 1)
                    if lost is not None:
                        losses[p] = lost
                if losses:
                    self._report(
                        "the micro-batch replayed from the checkpoint starts below the "
                        "oldest offsets kept: " + _losses_text(stream, losses),
                        "the oldest offsets kept",
                    )
            first = {p: max(first.get(p, 0), kept.get(p, 0)) for p in after}
        return [
            OffsetRange(self.config, p, first.get(p, 0), after[p] - 1)
            for p in sorted(after)
            if first.get(p, 0) < after[p]
        ]

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: partitions are read by offset, not consumed."""


# -- writing --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteConfig:
    brokers: tuple[str, ...]
    stream: str
    partitioner: str | None
    timeout: float
    max_pending: int
    text_columns: frozenset[str]


@dataclass(frozen=True)
class WriteResult(WriterCommitMessage):
    """What one task published (every message acked by its partition leader)."""

    published: int


_BYTES_OR_TEXT = (BinaryType, StringType)


def _write_config(options: Mapping[str, str], schema: StructType) -> WriteConfig:
    opts = OptionReader(options, FORMAT)
    _check_options(opts, WRITE_OPTIONS, "writer")
    brokers = tuple(parse_brokers(opts.get("brokers")))
    stream = _stream_name(opts)
    fields: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    extra = sorted(set(fields) - WRITE_COLUMNS)
    if extra:
        raise DataSourceOptionError(
            f"unexpected column(s) {extra} for the {FORMAT} writer; it takes value "
            "(binary or string) and optionally key (binary or string), partition (int) "
            "and headers (map<string,binary>): select or rename them first"
        )
    for name in ("value", "key"):
        kind = fields.get(name)
        if (name == "value" or kind is not None) and not isinstance(kind, _BYTES_OR_TEXT):
            raise DataSourceOptionError(
                f"the {FORMAT} writer needs a {name!r} column of binary or string type "
                f"(got {kind.simpleString() if kind else 'none'}); "
                f"e.g. df.select(to_json(struct('*')).alias('{name}'))"
            )
    if "partition" in fields and not isinstance(fields["partition"], (IntegerType, ShortType)):
        raise DataSourceOptionError(
            f"column 'partition' must be int, got {fields['partition'].simpleString()}; "
            "cast it: col('partition').cast('int')"
        )
    headers = fields.get("headers")
    if headers is not None and not (
        isinstance(headers, MapType)
        and isinstance(headers.keyType, StringType)
        and isinstance(headers.valueType, _BYTES_OR_TEXT)
    ):
        raise DataSourceOptionError(
            f"column 'headers' must be map<string,binary> or map<string,string>, "
            f"got {headers.simpleString()}"
        )
    partitioner = opts.get("partitioner")
    if partitioner is not None and partitioner not in ("key", "round_robin"):
        raise DataSourceOptionError(
            f"option 'partitioner' must be 'key' or 'round_robin', got {partitioner!r}; "
            "without it (and without a 'partition' column) rows go to partition 0"
        )
    max_pending = opts.integer("maxPending", default=1024, minimum=1, example="1024")
    assert max_pending is not None
    text = {n for n in ("value", "key") if isinstance(fields.get(n), StringType)}
    if isinstance(headers, MapType) and isinstance(headers.valueType, StringType):
        text.add("headers")
    config = WriteConfig(
        brokers=brokers,
        stream=stream,
        partitioner=partitioner,
        timeout=opts.seconds("timeout", default=DEFAULT_TIMEOUT),
        max_pending=max_pending,
        text_columns=frozenset(text),
    )
    _run(_check_stream(config))
    return config


async def _check_stream(config: WriteConfig) -> None:
    client = await _connect(config.brokers, config.timeout)
    async with client:
        await _stream_info(client, config.stream, config.brokers)


def _task_partition() -> int | None:
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        return None if context is None else context.partitionId()
    except Exception:  # pragma: no cover - outside a task
        return None


class _Acks:
    """The publishes of one task in order: their futures are looked at once settled.

    No callback per row: the futures sit in a queue, and the settled ones at its
    front are counted (``reap``) every few hundred rows, so an ack costs the event
    loop nothing beyond resolving its future. The first failure and its row are
    kept for the error.
    """

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.acked = 0
        self.failed = 0
        self.first: tuple[int, int | None, BaseException] | None = None
        self.queue: collections.deque[tuple[int, int | None, asyncio.Future[Any]]] = (
            collections.deque()
        )

    def reap(self) -> None:
        """Count the settled publishes at the front of the queue."""
        queue = self.queue
        while queue and queue[0][2].done():
            row, target, future = queue.popleft()
            self.settle(row, target, future)

    def settle(self, row: int, target: int | None, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            error: BaseException | None = PublishFailedError("the publish was cancelled")
        else:
            error = future.exception()
        if error is None:
            self.acked += 1
        else:
            self.failed += 1
            if self.first is None:
                self.first = (row, target, error)

    async def wait_front(self, timeout: float) -> None:
        """Wait (at most ``timeout``) for the oldest publish to settle, then reap."""
        if self.queue and not self.queue[0][2].done():
            await asyncio.wait([self.queue[0][2]], timeout=timeout)
        self.reap()

    async def wait_all(self, timeout: float) -> None:
        """Wait until every queued publish has settled (or ``timeout`` passed)."""
        rest = [future for _, _, future in self.queue if not future.done()]
        if rest:
            await asyncio.wait(rest, timeout=timeout)
        self.reap()

    def forget(self) -> None:
        """Mark what is left as seen (no "exception never retrieved" once the client closes)."""
        for _, _, future in self.queue:
            if future.done() and not future.cancelled():
                future.exception()
            else:
                future.add_done_callback(_retrieve)
        self.queue.clear()

    def check(self) -> None:
        if self.first is None:
            return
        row, target, error = self.first
        where = "" if target is None else f" to partition {target}"
        task = _task_partition()
        task_text = "" if task is None else f" of Spark partition {task}"
        raise PublishFailedError(
            f"{self.failed} publish(es) to liftbridge stream {self.stream!r} failed; the "
            f"first was row {row}{task_text}{where}: {error}; the task fails so that "
            "nothing is dropped (a retry publishes its rows again)"
        ) from error


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _encode(value: Any, text: bool) -> bytes:
    if value is None:
        return b""
    return value.encode() if text else bytes(value)


def _bytes_column(column: pa.Array) -> list[bytes]:
    """A binary or string column as bytes per row (null: empty), converted in C."""
    return pc.fill_null(pc.cast(column, pa.binary()), b"").to_pylist()  # type: ignore[no-any-return]


def _partitions(batch: pa.RecordBatch, first_row: int) -> list[int | None] | None:
    """The ``partition`` column (null: none given), checked column-wise."""
    if "partition" not in batch.schema.names:
        return None
    column = batch.column("partition")
    low = pc.min(column).as_py()
    if low is not None and low < 0:
        index = pc.index(column, low).as_py()
        raise PublishFailedError(
            f"row {first_row + index} has partition {low}; partitions are numbered from 0"
        )
    return column.to_pylist()  # type: ignore[no-any-return]


#: Rows between two looks at the settled acks (and the fail-fast check).
REAP_EVERY = 512


async def _publish(config: WriteConfig, batches: Iterator[pa.RecordBatch]) -> WriteResult:
    acks = _Acks(config.stream)
    client = await _connect(config.brokers, config.timeout, publish_async_window=config.max_pending)
    # Without a partitioner to ask, the requests are built here from columns converted
    # in C and handed to the client's PublishAsync stream: publish_async's per-call
    # argument checks are done once for the whole task (options and schema checked
    # on the driver, partitions above). With a partitioner, publish_async picks.
    # Fields left at their proto3 default (partition 0, empty key, AckPolicy.LEADER)
    # are not set: the request encodes the same.
    lean = config.partitioner is None
    send = client._publisher.send
    next_id = client._publisher.next_correlation_id
    request = pb.PublishRequest
    stream = config.stream
    wait = config.timeout
    queue = acks.queue
    append = queue.append
    # The queue holds at most the window (unsettled) plus what settled behind a slow
    # front; past this, wait for the front rather than grow.
    most_queued = 4 * config.max_pending + REAP_EVERY
    row = 0
    target: int | None = None
    try:
        for batch in batches:
            names = batch.schema.names
            count = batch.num_rows
            values = _bytes_column(batch.column("value"))
            keys = _bytes_column(batch.column("key")) if "key" in names else None
            parts = _partitions(batch, row)
            headers = batch.column("headers").to_pylist() if "headers" in names else None
            text_headers = "headers" in config.text_columns
            if lean and keys is None and parts is None and headers is None:
                target = 0
                for start in range(0, count, REAP_EVERY):
                    for value in values[start : start + REAP_EVERY]:
                        future = await send(
                            request(
                                stream=stream,
                                value=value,
                                correlationId=next_id(),
                                expectedOffset=-1,
                            ),
                            partition=0,
                            timeout=wait,
                        )
                        append((row, 0, future))
                        row += 1
                    acks.reap()
                    acks.check()  # fail fast: stop publishing once something failed
                    while len(queue) > most_queued:
                        await _wait_front(acks, wait)
                continue
            for i in range(count):
                target = parts[i] if parts is not None else None
                hdrs = None
                if headers is not None and headers[i]:
                    hdrs = {k: _encode(v, text_headers) for k, v in headers[i]}
                if lean:
                    target = target or 0
                    req = request(
                        stream=stream,
                        partition=target,
                        key=keys[i] if keys is not None else b"",
                        value=values[i],
                        correlationId=next_id(),
                        expectedOffset=-1,
                    )
                    if hdrs:
                        req.headers.update(hdrs)
                    future = await send(req, partition=target, timeout=wait)
                else:
                    future = await client.publish_async(
                        stream,
                        values[i],
                        key=keys[i] if keys is not None else None,
                        headers=hdrs,
                        partition=target,
                        partitioner=None if target is not None else config.partitioner,
                        ack_policy=liftbridge.AckPolicy.LEADER,
                    )
                append((row, target, future))
                row += 1
                if row % REAP_EVERY == 0:
                    acks.reap()
                    acks.check()
                    while len(queue) > most_queued:
                        await _wait_front(acks, wait)
            acks.reap()
            acks.check()  # fail fast: stop publishing once something failed
        # Every future has its own ack deadline (``wait``); this bound is a safety net.
        await acks.wait_all(config.timeout + 5.0)
        acks.check()
        if acks.acked < row:
            raise PublishFailedError(
                f"{row - acks.acked} publish(es) to liftbridge stream {config.stream!r} got no "
                "ack or error in time; the task fails so that nothing is dropped"
            )
    except PublishFailedError:
        raise
    except (AioClientsError, TimeoutError) as exc:
        # Refused before sending (bad partition, broker gone...): that row fails the task.
        acks.reap()
        acks.settle(row, target, _failed(exc))
        acks.check()
        raise  # pragma: no cover - check() raised
    finally:
        try:
            await client.close()
        finally:
            acks.forget()
    return WriteResult(published=acks.acked)


async def _wait_front(acks: _Acks, wait: float) -> None:
    """The oldest publish has not settled while many behind it have: wait for it."""
    front = acks.queue[0]
    await acks.wait_front(wait + 5.0)
    if acks.queue and acks.queue[0] is front:
        raise PublishFailedError(
            f"row {front[0]} to liftbridge stream {acks.stream!r} got no ack or error in "
            "time; the task fails so that nothing is dropped"
        )
    acks.check()


def _failed(exc: BaseException) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    future.exception()  # retrieved: no "never retrieved" warning
    return future


def _write(config: WriteConfig, batches: Iterator[pa.RecordBatch]) -> WriteResult:
    return _run(_publish(config, batches))


def _log_commit(messages: list[WriteResult | None], what: str) -> None:
    published = sum(m.published for m in messages if m is not None)
    log.info("%s: %d messages published and acked", what, published)


class LiftbridgeWriter(DataSourceArrowWriter):
    """``df.write.format("liftbridge")``: every row published, every ack checked."""

    def __init__(self, config: WriteConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return _write(self.config, iterator)

    def commit(self, messages: list[WriteResult | None]) -> None:  # type: ignore[override]
        _log_commit(messages, "liftbridge write")


class LiftbridgeStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("liftbridge")``: each micro-batch as the batch writer does."""

    def __init__(self, config: WriteConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return _write(self.config, iterator)

    def commit(self, messages: list[WriteResult | None], batchId: int) -> None:  # type: ignore[override]
        _log_commit(messages, f"liftbridge micro-batch {batchId}")

    def abort(self, messages: list[WriteResult | None], batchId: int) -> None:  # type: ignore[override]
        log.warning("liftbridge micro-batch %d aborted; its retry publishes it again", batchId)


class LiftbridgeDataSource(DataSource):
    """The ``liftbridge`` format (see the module docstring and docs/spark.md)."""

    #: Whether batch reads take filter pushdown (see ``JetStreamDataSource``).
    filter_pushdown = False

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return LIFTBRIDGE_SCHEMA

    def reader(self, schema: StructType) -> LiftbridgeBatchReader:
        _check_schema(schema)
        kind = LiftbridgePushdownReader if self.filter_pushdown else LiftbridgeBatchReader
        return kind(self.options)

    def streamReader(self, schema: StructType) -> LiftbridgeStreamReader:
        _check_schema(schema)
        return LiftbridgeStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> LiftbridgeWriter:
        if overwrite:
            raise DataSourceOptionError(
                f"the {FORMAT} writer appends to streams; use .mode('append')"
            )
        return LiftbridgeWriter(_write_config(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> LiftbridgeStreamWriter:
        # Complete output mode asks to overwrite: a stream is a log, so every
        # trigger's full result is appended.
        return LiftbridgeStreamWriter(_write_config(self.options, schema))


def data_source() -> type[DataSource]:
    """The data source class for the ``liftbridge`` format."""
    return LiftbridgeDataSource
