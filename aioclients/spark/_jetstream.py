"""The ``jetstream`` Spark data source: batch and streaming reads and writes.

Theory of operation (pyspark's Python Data Source API, ``pyspark.sql.datasource``):

- Planning runs in a Python process next to the driver: ``partitions()`` looks up
  the stream once (``aioclients.jetstream``; pushed time bounds' Direct Get
  ``start_time`` lookups on the same connection), checks ``allow_direct``, and splits
  the sequence range into :class:`SequenceRange` partitions. Everything ``read()``
  needs travels inside the partition (it is pickled to the executors, where
  another process, with another reader instance, does the reading). The reading
  half (partitions, the Direct Get passes) is :mod:`aioclients.spark._stream_read`.
- Filter pushdown (:class:`JetStreamPushdownReader`, registered by
  ``register_data_sources``): ``pushFilters`` folds Spark's filters into a
  selection (:mod:`aioclients.spark._protocol._pushdown`); planning turns its times
  into sequences (Direct Get ``start_time``) and reads its subjects one pass each.
- With the ``bucket`` option the format reads and writes a Key-Value bucket
  (:mod:`aioclients.spark._kv_table`); the stream reader is then its change feed.
- With the ``objectStore`` option a batch read lists an Object Store's objects
  (:mod:`aioclients.spark._object_table`).
- ``read()`` runs on an executor: one event loop and one NATS connection per
  partition, reading the range with batched Direct Get (ADR-31) through the lean
  reader in :mod:`aioclients.spark._direct_io`, and yielding Arrow record batches.
  A range read is exact: the same range always yields the same rows, which is
  what makes streaming replay after a restart exact.
- Streaming offsets are ``{"stream": <name>, "sequence": <last sequence covered>}``;
  a micro-batch covers the sequences after its start up to its end. The latest
  offset is the stream's last sequence, capped by ``maxMessagesPerTrigger``
  (through ``getDefaultReadLimit`` / ``latestOffset(start, limit)``) and, for
  ``Trigger.AvailableNow``, by the last sequence when the query started.
  ``commit()`` has nothing to release: the stream is read, never consumed.
  Offsets also carry the stream's ``created`` time, so that a stream deleted and
  recreated under a query (sequences start again at 1) is noticed.
- Data loss (``failOnDataLoss``, default true): when a micro-batch would start
  below the stream's first sequence (retention, purge, deletion) or the stream
  was recreated, the query fails with :class:`DataLossError` naming the lost
  sequences; with ``false`` it logs a warning and goes on from the first message
  kept. A batch read whose ``startSequence`` is below the first kept does the same.
- Writers turn each Arrow batch into NATS publish frames column-wise and send
  them on one lean connection per task (:mod:`aioclients.spark._write_io`),
  keeping at most ``maxPending`` publishes waiting for their acks; every ack is
  awaited and checked, and a failed or missing ack fails the task. A ``msg_id``
  column becomes ``Nats-Msg-Id``, so a retried task adds no duplicates within
  the stream's duplicate window.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    Filter,
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
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aioclients.spark._direct_io import TlsFiles
from aioclients.spark._errors import DataSourceOptionError
from aioclients.spark._kv_table import (
    BUCKET_STREAM_OPTIONS,
    KV_SCHEMA,
    KeyValueBatchReader,
    KeyValueStreamWriter,
    KeyValueWriter,
    bucket_read_config,
    bucket_write_config,
)
from aioclients.spark._object_table import OBJECT_STORE_SCHEMA, ObjectStoreBatchReader
from aioclients.spark._protocol._data_loss import OPTION as FAIL_ON_DATA_LOSS
from aioclients.spark._protocol._data_loss import lost_range, report_data_loss
from aioclients.spark._protocol._options import OptionReader
from aioclients.spark._protocol._partitions import partition_count, rows_matter
from aioclients.spark._protocol._pushdown import (
    JetStreamSelection,
    filter_tokens,
    plan_jetstream,
)
from aioclients.spark._pushdown import to_predicate
from aioclients.spark._stream_read import (
    ReadConfig,
    SequenceRange,
    StreamBounds,
    bounds_and_times,
    check_options,
    expected_rows,
    read_partition,
    run,
    split_range,
    stream_bounds,
    tls_files,
)
from aioclients.spark._write_io import publish_and_check

__all__ = (
    "JETSTREAM_SCHEMA",
    "KV_SCHEMA",
    "JetStreamDataSource",
    "ReadConfig",
    "SequenceRange",
    "read_partition",
    "split_range",
)

log = logging.getLogger("aioclients.spark.jetstream")

FORMAT = "jetstream"
JETSTREAM_SCHEMA = StructType(
    [
        StructField("subject", StringType()),
        StructField("sequence", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("data", BinaryType()),
    ]
)
# Fewer, larger Direct Get requests: nats-server's cost per request grows with the
# stream's size (1M stored messages: ~11 us of server CPU per row read with 10000
# per request, ~7.5 with 50000), and Spark gains nothing from smaller Arrow batches.
DEFAULT_BATCH_SIZE = 50_000
DEFAULT_TIMEOUT = 30.0
READ_OPTIONS = {
    "servers",
    "stream",
    "subject",
    "startSequence",
    "endSequence",
    "numPartitions",
    "batchSize",
    "maxMessagesPerTrigger",
    "timeout",
    FAIL_ON_DATA_LOSS,
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
}
WRITE_OPTIONS = {
    "servers",
    "subject",
    "timeout",
    "maxPending",
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
}
WRITE_COLUMNS = {"subject", "data", "headers", "msg_id"}


def _read_config(opts: OptionReader) -> ReadConfig:
    servers = opts.servers()
    stream = opts.required("stream", "ORDERS", "the JetStream stream to read")
    if any(c in stream for c in " .*>\t\r\n"):
        raise DataSourceOptionError(
            f"option 'stream': {stream!r} is not a stream name (no spaces, '.', '*' or '>')"
        )
    batch_size = opts.integer("batchSize", default=DEFAULT_BATCH_SIZE, minimum=1, example="10000")
    assert batch_size is not None
    return ReadConfig(
        servers=tuple(servers),
        stream=stream,
        subject=opts.get("subject"),
        batch_size=batch_size,
        timeout=opts.seconds("timeout", default=DEFAULT_TIMEOUT),
        tls=tls_files(opts),
    )


def _check_schema(schema: StructType, fixed: StructType = JETSTREAM_SCHEMA) -> None:
    if schema != fixed:
        raise DataSourceOptionError(
            f"the {FORMAT} source has a fixed schema ({fixed.simpleString()}); "
            "do not pass .schema(...) to the reader"
        )


class JetStreamBatchReader(DataSourceReader):
    """``spark.read.format("jetstream")``: a sequence range split into partitions."""

    def __init__(self, options: Mapping[str, str], default_partitions: int) -> None:
        opts = OptionReader(options, FORMAT)
        check_options(opts, READ_OPTIONS - {"maxMessagesPerTrigger"}, "batch reader", FORMAT)
        self.config = _read_config(opts)
        start = opts.sequence("startSequence")
        end = opts.sequence("endSequence")
        parts = opts.integer("numPartitions", default=None, minimum=1, example="4")
        # Without the option: the session's parallelism, but fewer partitions for a
        # read expected to be small (a Spark task costs more than a small read).
        self.parts = parts if parts is not None else default_partitions
        self.adapt_parts = parts is None
        if isinstance(start, int) and isinstance(end, int) and start > end:
            raise DataSourceOptionError(
                f"option 'startSequence' ({start}) is after 'endSequence' ({end}); "
                "swap them or drop one"
            )
        self.start = start if isinstance(start, int) else None
        self.end = end if isinstance(end, int) else None
        self.fail_on_data_loss = opts.boolean(FAIL_ON_DATA_LOSS, default=True)
        # What pushFilters (a subclass) leaves to the server; everything by default.
        self.selection = JetStreamSelection()

    def partitions(self) -> list[SequenceRange]:
        config = self.config
        # The stream is looked up here, not in __init__: with the times pushFilters
        # asks for, on one connection (Spark plans in the process that made the reader).
        bounds, found = run(bounds_and_times(config, self.selection.time_lookups()))
        first, last = bounds.first, bounds.last
        plan = self.selection.read(
            subject=config.subject,
            start=self.start,
            end=self.end,
            first=first,
            last=last,
            at_or_after=found,
        )
        lo = plan.first
        lost = None if plan.empty else lost_range(lo, first, plan.last)
        if lost is not None:
            report_data_loss(
                f"option 'startSequence' is {lo}, but stream {config.stream!r} now "
                f"starts at sequence {first}: sequences {lost[0]}..{lost[1]} are no longer "
                "kept (retention, purge or deletion)",
                fail=self.fail_on_data_loss,
                resume=f"sequence {first}",
                log=log,
            )
            lo = first
        parts = self.parts
        if self.adapt_parts and not plan.empty and parts > 1:
            # Fewer partitions for a small read; but a filtered pass makes the server
            # walk its whole range, so a wide range gets every core however few rows
            # match (and then the count of matches is not asked for).
            walked = (plan.last - lo + 1) * len(plan.subjects)
            rows = None
            if rows_matter(parts, walked):
                rows = run(expected_rows(config, plan.subjects, lo, plan.last))
            parts = partition_count(parts, walked, rows)
        ranges = [] if plan.empty else split_range(lo, plan.last, parts)
        # An empty range still needs one partition: with none, Spark plans its own.
        return [
            SequenceRange(
                config, a, b, subjects=plan.subjects, residual=plan.residual, to_end=b >= last
            )
            for a, b in ranges or [(1, 0)]
        ]

    def read(self, partition: SequenceRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_partition(partition)


class JetStreamPushdownReader(JetStreamBatchReader):
    """The batch reader with filter pushdown (see :mod:`aioclients.spark._pushdown`).

    ``subject`` (=, IN, LIKE 'prefix.%'), ``sequence`` ranges and ``timestamp``
    bounds become the Direct Get requests' subject filters, sequence range and
    start time; the rest is returned to Spark.
    """

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        predicates = [to_predicate(f) for f in filters]
        if self.config.subject is not None and filter_tokens(self.config.subject) is None:
            # An option we cannot reason about: leave subject filters to Spark.
            predicates = [
                None if p is not None and p.column.lower() == "subject" else p for p in predicates
            ]
        self.selection, pushed = plan_jetstream(predicates)
        log.debug("jetstream pushdown: %s (pushed %s)", self.selection, pushed)
        return [f for f, exact in zip(filters, pushed, strict=True) if not exact]


def _offset(stream: str, sequence: int, created: str | None = None) -> dict[str, Any]:
    offset: dict[str, Any] = {"stream": stream, "sequence": sequence}
    if created is not None:
        offset["created"] = created
    return offset


def _recreated_between(start: Mapping[str, Any], end: Mapping[str, Any]) -> bool:
    """Whether ``end`` belongs to a stream recreated after ``start`` (sequences restarted)."""
    before, after = start.get("created"), end.get("created")
    if before is not None and after is not None and before != after:
        return True
    return bool(end["sequence"] < start["sequence"])


class JetStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("jetstream")``: micro-batches of sequence ranges."""

    def __init__(self, options: Mapping[str, str], default_partitions: int) -> None:
        opts = OptionReader(options, FORMAT)
        if opts.get("bucket") is not None:
            # A bucket's change feed: its stream, every key, the entries' columns.
            check_options(opts, BUCKET_STREAM_OPTIONS, "bucket change feed", FORMAT)
            self.config = bucket_read_config(opts)
        else:
            check_options(opts, READ_OPTIONS - {"endSequence"}, "stream reader", FORMAT)
            self.config = _read_config(opts)
        self.start = opts.sequence("startSequence", words=("earliest", "latest"))
        self.max_per_trigger = opts.integer(
            "maxMessagesPerTrigger", default=None, minimum=1, example="10000"
        )
        parts = opts.integer("numPartitions", default=default_partitions, minimum=1, example="4")
        assert parts is not None
        self.num_partitions = parts
        self.fail_on_data_loss = opts.boolean(FAIL_ON_DATA_LOSS, default=True)
        self._target: int | None = None  # Trigger.AvailableNow: read no further than this
        self._latest: int | None = None
        # The start latestOffset checked last, and the stream's first sequence then.
        self._checked: tuple[dict[str, Any], int] | None = None
        # No server call here: executors build their own instance only to call read();
        # a bad stream fails in initialOffset / latestOffset, on the driver.

    def _sequence(self, offset: Mapping[str, Any]) -> int:
        if offset.get("stream") != self.config.stream or not isinstance(
            offset.get("sequence"), int
        ):
            raise DataSourceOptionError(
                f"the checkpoint's offset {dict(offset)} is not of stream "
                f"{self.config.stream!r}; use a new checkpointLocation for a different stream"
            )
        sequence: int = offset["sequence"]
        return sequence

    def initialOffset(self) -> dict[str, Any]:
        bounds = run(stream_bounds(self.config))
        if self.start == "latest":
            sequence = bounds.last
        elif isinstance(self.start, int):
            sequence = self.start - 1
            lost = lost_range(self.start, bounds.first)
            if lost is not None and self.config.bucket is None:
                report_data_loss(
                    f"option 'startSequence' is {self.start}, but stream "
                    f"{self.config.stream!r} now starts at sequence {bounds.first}: sequences "
                    f"{lost[0]}..{lost[1]} are no longer kept (retention, purge or deletion)",
                    fail=self.fail_on_data_loss,
                    resume=f"sequence {bounds.first}",
                    log=log,
                )
        else:
            sequence = max(bounds.first, 1) - 1
        return _offset(self.config.stream, sequence, bounds.created)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.max_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = run(stream_bounds(self.config)).last

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        covered = self._sequence(start)
        bounds = run(stream_bounds(self.config))
        first, last = bounds.first, bounds.last
        if _recreated_between(start, _offset(self.config.stream, last, bounds.created)):
            self._recreated(start, bounds)
            covered = 0  # the new stream's sequences start again at 1
            self._target = None
        else:
            self._check_kept(start, first, None)
        self._checked = (start, first)
        self._latest = last
        top = last if self._target is None else min(last, self._target)
        if isinstance(limit, ReadMaxRows):
            # At most max_rows sequences, so at most max_rows messages.
            top = min(top, max(covered, first - 1) + limit.max_rows)
        return _offset(self.config.stream, max(top, covered), bounds.created)

    def _check_kept(self, start: Mapping[str, Any], first: int, last_wanted: int | None) -> None:
        if self.config.bucket is not None:
            # A bucket drops a key's older revisions by design (its history setting, a
            # purge, a TTL): what is below the first kept sequence was replaced, and the
            # feed goes on with what replaced it. Not data loss.
            return
        lost = lost_range(self._sequence(start) + 1, first, last_wanted)
        if lost is not None:
            report_data_loss(
                f"the query's next micro-batch starts at sequence {lost[0]} of stream "
                f"{self.config.stream!r}, which now starts at sequence {first}: sequences "
                f"{lost[0]}..{lost[1]} are no longer kept (retention, purge or deletion)",
                fail=self.fail_on_data_loss,
                resume=f"sequence {first}",
                log=log,
            )

    def _recreated(self, start: Mapping[str, Any], bounds: StreamBounds) -> None:
        covered = self._sequence(start)
        before = start.get("created") or "unknown"
        kept = (
            f"; the new stream no longer keeps sequences 1..{bounds.first - 1} either"
            if bounds.first > 1
            else ""
        )
        report_data_loss(
            f"stream {self.config.stream!r} was deleted and recreated under the query "
            f"(created {before} before, {bounds.created or 'unknown'} now; it ends at "
            f"sequence {bounds.last}): whatever the old stream held after sequence "
            f"{covered} was not read{kept}",
            fail=self.fail_on_data_loss,
            resume=f"the new stream's first message (sequence {max(bounds.first, 1)})",
            log=log,
        )

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else _offset(self.config.stream, self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[SequenceRange]:
        last = self._sequence(end)
        if _recreated_between(start, end):
            first = 1  # the batch reads the new stream from its beginning
        else:
            first = self._sequence(start) + 1
            if self._checked is not None and self._checked[0] == start:
                kept = self._checked[1]
            elif first <= last:
                # Not planned by this reader (replayed after a restart): check it here.
                kept = run(stream_bounds(self.config)).first
                self._check_kept(start, kept, last)
            else:
                kept = first
            first = max(first, kept)  # split only what is kept between the partitions
        ranges = split_range(first, last, self.num_partitions)
        return [SequenceRange(self.config, a, b) for a, b in ranges]

    def read(self, partition: SequenceRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the stream is read by sequence, not consumed."""


# -- writing --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteConfig:
    servers: tuple[str, ...] = field(repr=False)  # the URLs may carry credentials
    subject: str | None
    timeout: float
    max_pending: int
    data_is_text: bool
    tls: TlsFiles = field(default_factory=TlsFiles)


@dataclass(frozen=True)
class WriteResult(WriterCommitMessage):
    """What one task published: messages stored and messages the stream saw before."""

    stored: int
    duplicates: int


def _write_config(options: Mapping[str, str], schema: StructType) -> WriteConfig:
    opts = OptionReader(options, FORMAT)
    check_options(opts, WRITE_OPTIONS, "writer", FORMAT)
    servers = opts.servers()
    fields: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    extra = sorted(set(fields) - WRITE_COLUMNS)
    if extra:
        raise DataSourceOptionError(
            f"unexpected column(s) {extra} for the {FORMAT} writer; it takes "
            "data (binary or string), and optionally subject (string), headers "
            "(map<string,string>) and msg_id (string): select or rename them first"
        )
    data_type = fields.get("data")
    if not isinstance(data_type, (BinaryType, StringType)):
        raise DataSourceOptionError(
            f"the {FORMAT} writer needs a 'data' column of binary or string type "
            f"(got {data_type.simpleString() if data_type else 'none'}); "
            "e.g. df.select(to_json(struct('*')).alias('data'))"
        )
    for name, wanted in (
        ("subject", StringType()),
        ("msg_id", StringType()),
        ("headers", MapType(StringType(), StringType())),
    ):
        if name in fields and fields[name] != wanted:
            raise DataSourceOptionError(
                f"column {name!r} must be {wanted.simpleString()}, "
                f"got {fields[name].simpleString()}"
            )
    subject = opts.get("subject")
    if subject is None and "subject" not in fields:
        raise DataSourceOptionError(
            f"the {FORMAT} writer needs a subject: add a 'subject' column or "
            '.option("subject", "orders.totals")'
        )
    max_pending = opts.integer("maxPending", default=4000, minimum=1, example="4000")
    assert max_pending is not None
    return WriteConfig(
        servers=tuple(servers),
        subject=subject,
        timeout=opts.seconds("timeout", default=DEFAULT_TIMEOUT),
        max_pending=max_pending,
        data_is_text=isinstance(data_type, StringType),
        tls=tls_files(opts),
    )


async def _publish(config: WriteConfig, batches: Iterator[pa.RecordBatch]) -> WriteResult:
    """Publish every row column-wise (see :mod:`aioclients.spark._write_io`); check every ack."""
    stored, duplicates = await publish_and_check(
        list(config.servers),
        batches,
        timeout=config.timeout,
        tls=config.tls,
        window=config.max_pending,
        subject=config.subject,
        retry_note="its retry publishes again; a msg_id column de-duplicates",
    )
    return WriteResult(stored=stored, duplicates=duplicates)


def _write(config: WriteConfig, batches: Iterator[pa.RecordBatch]) -> WriteResult:
    return run(_publish(config, batches))


def _log_commit(messages: list[WriteResult | None], what: str) -> None:
    stored = sum(m.stored for m in messages if m is not None)
    duplicates = sum(m.duplicates for m in messages if m is not None)
    log.info("%s: %d messages stored, %d duplicates ignored", what, stored, duplicates)


class JetStreamWriter(DataSourceArrowWriter):
    """``df.write.format("jetstream")``: every row published, every ack checked."""

    def __init__(self, config: WriteConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return _write(self.config, iterator)

    def commit(self, messages: list[WriteResult | None]) -> None:  # type: ignore[override]
        _log_commit(messages, "jetstream write")


class JetStreamStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("jetstream")``: each micro-batch as the batch writer does."""

    def __init__(self, config: WriteConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return _write(self.config, iterator)

    def commit(self, messages: list[WriteResult | None], batchId: int) -> None:  # type: ignore[override]
        _log_commit(messages, f"jetstream micro-batch {batchId}")

    def abort(self, messages: list[WriteResult | None], batchId: int) -> None:  # type: ignore[override]
        log.warning("jetstream micro-batch %d aborted; its retry de-duplicates by msg_id", batchId)


class JetStreamDataSource(DataSource):
    """The ``jetstream`` format (see the module docstring and docs/spark.md)."""

    #: numPartitions when the option is not given (``register_data_sources`` sets
    #: it to the session's default parallelism).
    default_partitions = 2
    #: Whether batch reads take filter pushdown (``pushFilters``). pyspark refuses a
    #: reader that defines it unless ``spark.sql.python.filterPushdown.enabled`` is
    #: true, so it is off here (a session that registers this class itself reads as
    #: before) and ``register_data_sources`` turns it on with the setting.
    filter_pushdown = False

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _bucket(self) -> bool:
        return OptionReader(self.options, FORMAT).get("bucket") is not None

    def _object_store(self) -> bool:
        """Whether this reads an Object Store's listing (batch reads only)."""
        opts = OptionReader(self.options, FORMAT)
        if opts.get("objectStore") is None:
            return False
        if opts.get("bucket") is not None:
            raise DataSourceOptionError(
                "options 'bucket' and 'objectStore' name different things; give one"
            )
        return True

    def _not_an_object_store(self, what: str) -> None:
        if self._object_store():
            raise DataSourceOptionError(
                f"an Object Store listing ('objectStore') is read with spark.read only, "
                f"not {what}; watch the store with ObjectStore.watch for its changes"
            )

    def schema(self) -> StructType:
        if self._object_store():
            return OBJECT_STORE_SCHEMA
        return KV_SCHEMA if self._bucket() else JETSTREAM_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        if self._object_store():
            _check_schema(schema, OBJECT_STORE_SCHEMA)
            return ObjectStoreBatchReader(self.options)
        if self._bucket():
            _check_schema(schema, KV_SCHEMA)
            return KeyValueBatchReader(self.options, self.default_partitions)
        _check_schema(schema)
        kind = JetStreamPushdownReader if self.filter_pushdown else JetStreamBatchReader
        return kind(self.options, self.default_partitions)

    def streamReader(self, schema: StructType) -> JetStreamStreamReader:
        self._not_an_object_store("spark.readStream")
        _check_schema(schema, KV_SCHEMA if self._bucket() else JETSTREAM_SCHEMA)
        return JetStreamStreamReader(self.options, self.default_partitions)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        self._not_an_object_store("df.write")
        _check_overwrite(overwrite)
        if self._bucket():
            return KeyValueWriter(bucket_write_config(self.options, schema))
        return JetStreamWriter(_write_config(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        self._not_an_object_store("df.writeStream")
        # Complete output mode asks to overwrite: a stream is a log, so every
        # trigger's full result is appended (readers take the last per subject), and
        # a bucket takes every row as a put.
        if self._bucket():
            return KeyValueStreamWriter(bucket_write_config(self.options, schema))
        return JetStreamStreamWriter(_write_config(self.options, schema))


def _check_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise DataSourceOptionError(
            f"the {FORMAT} writer appends to streams; use .mode('append') "
            "(a stream cannot be overwritten; purge it first if you mean to)"
        )
