"""JetStream Key-Value buckets as Spark tables: the ``jetstream`` format with ``bucket``.

Theory of operation. A bucket ``B`` is the stream ``KV_B`` storing one subject per
key, ``$KV.B.<key>``; each message is an operation (``PUT``, or a ``DEL`` / ``PURGE``
marker, told by the ``KV-Operation`` header), and a key's revision is the sequence
of its last message (NATS ADR-8; the layout of nats.go, nats-py and
:class:`aioclients.jetstream.KeyValue`). Columns: ``key string, value binary,
revision long, created timestamp, operation string``.

- ``spark.read`` (the live keys): the planner lists the bucket's live keys
  (``KeyValue.keys()``), then notes the stream's last sequence ``L``; the keys are
  split between the partitions (:class:`KeyChunk`). An executor reads its keys with
  ``multi_last`` Direct Get (ADR-31; at most 1024 subjects per request) as of ``L``
  (``up_to_seq``) and keeps those whose last operation then is a ``PUT``: the rows
  are the bucket as of ``L``, and a retried task reads the same values (as long as
  the bucket keeps them). A key deleted between the listing and ``L`` is absent; a
  key created after the listing is not read.
- ``spark.read`` with ``history`` ``true``: every message the stream keeps, markers
  included, read by sequence ranges like a stream (``_stream_read``).
- ``spark.readStream``: the bucket's change feed, the ``jetstream`` stream reader
  over ``KV_B`` with these columns (``ReadConfig.bucket``).
- ``df.write``: each row a put (a publish to ``$KV.B.<key>``, no headers, as
  ``KeyValue.put`` and nats-py's ``put``); a task publishes its rows in order and
  checks every ack, so within a task the last row of a key is its new value, and a
  refused put fails the task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aioclients import jetstream
from aioclients._errors import InvalidArgumentError
from aioclients.jetstream._protocol._direct import MAX_MULTI_SUBJECTS
from aioclients.jetstream._protocol._kv import (
    PUT,
    stream_name,
    subject_prefix,
    validate_bucket,
)
from aioclients.spark._arrow import to_entry_batch
from aioclients.spark._direct_io import DirectGetConnection, TlsFiles, read_last_for
from aioclients.spark._errors import DataSourceOptionError, PublishFailedError
from aioclients.spark._protocol._data_loss import OPTION as FAIL_ON_DATA_LOSS
from aioclients.spark._protocol._options import OptionReader
from aioclients.spark._stream_read import (
    ROWS_PER_PARTITION,
    ReadConfig,
    SequenceRange,
    check_options,
    nats_tls,
    read_partition,
    run,
    split_range,
    stream_bounds,
    tls_files,
)
from aioclients.spark._write_io import publish_and_check

__all__ = (
    "BUCKET_BATCH_OPTIONS",
    "BUCKET_STREAM_OPTIONS",
    "KV_SCHEMA",
    "KeyChunk",
    "KeyValueBatchReader",
    "KeyValueStreamWriter",
    "KeyValueWriter",
    "bucket_read_config",
    "bucket_write_config",
    "read_keys",
)

log = logging.getLogger("aioclients.spark.jetstream")

FORMAT = "jetstream"
KV_SCHEMA = StructType(
    [
        StructField("key", StringType()),
        StructField("value", BinaryType()),
        StructField("revision", LongType()),
        StructField("created", TimestampType()),
        StructField("operation", StringType()),
    ]
)
_COMMON = {"servers", "bucket", "batchSize", "timeout", "tlsCaFile", "tlsCertFile", "tlsKeyFile"}
BUCKET_BATCH_OPTIONS = _COMMON | {"history", "numPartitions"}
BUCKET_STREAM_OPTIONS = _COMMON | {
    "startSequence",
    "maxMessagesPerTrigger",
    "numPartitions",
    FAIL_ON_DATA_LOSS,
}
WRITE_OPTIONS = {"servers", "bucket", "timeout", "maxPending", "tlsCaFile", "tlsCertFile"} | {
    "tlsKeyFile"
}
DEFAULT_BATCH_SIZE = 50_000
DEFAULT_TIMEOUT = 30.0
# A key: tokens of [-/_=a-zA-Z0-9] joined by single dots (ADR-8), in RE2 for Arrow.
_KEY = r"^[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)*$"


def bucket_read_config(opts: OptionReader) -> ReadConfig:
    """A read of the bucket named by the ``bucket`` option (stream ``KV_<bucket>``)."""
    bucket = _bucket(opts)
    batch_size = opts.integer("batchSize", default=DEFAULT_BATCH_SIZE, minimum=1, example="10000")
    assert batch_size is not None
    return ReadConfig(
        servers=tuple(opts.servers()),
        stream=stream_name(bucket),
        subject=subject_prefix(bucket) + ">",
        batch_size=batch_size,
        timeout=opts.seconds("timeout", default=DEFAULT_TIMEOUT),
        tls=tls_files(opts),
        bucket=bucket,
    )


def _bucket(opts: OptionReader) -> str:
    bucket = opts.required("bucket", "config", "the Key-Value bucket")
    try:
        return validate_bucket(bucket)
    except InvalidArgumentError:
        raise DataSourceOptionError(
            f"option 'bucket': {bucket!r} is not a bucket name (letters, digits, '_' and '-')"
        ) from None


# -- reading --------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyChunk(InputPartition):
    """Keys of a bucket to read as of sequence ``up_to_seq`` (their last ``PUT`` then)."""

    config: ReadConfig
    keys: tuple[str, ...]
    up_to_seq: int


async def _live_keys(config: ReadConfig) -> tuple[list[str], int]:
    """The bucket's live keys, sorted, then the stream's last sequence."""
    assert config.bucket is not None
    await stream_bounds(config)  # the bucket exists and allows Direct Get, or say so
    js = await jetstream.connect(
        list(config.servers), timeout=min(config.timeout, 10.0), **nats_tls(config.tls)
    )
    async with js:
        kv = await js.key_value(config.bucket)
        async with kv.keys() as listed:
            keys = sorted([key async for key in listed])
        stream = await js.stream(config.stream)
        return keys, stream.cached_info.state.last_seq


def _chunks(keys: list[str], parts: int) -> list[tuple[str, ...]]:
    """``keys`` in at most ``parts`` contiguous runs of near-equal size."""
    return [tuple(keys[a - 1 : b]) for a, b in split_range(1, len(keys), parts)]


def read_keys(chunk: KeyChunk) -> Iterator[pa.RecordBatch]:
    """The live entries of ``chunk``'s keys as of its sequence: one loop, one connection."""
    config = chunk.config
    assert config.bucket is not None
    prefix = subject_prefix(config.bucket)
    if not chunk.keys:
        return
    loop = asyncio.new_event_loop()
    try:
        conn = loop.run_until_complete(
            DirectGetConnection.open(list(config.servers), timeout=config.timeout, tls=config.tls)
        )
        try:
            for start in range(0, len(chunk.keys), MAX_MULTI_SUBJECTS):
                subjects = [prefix + key for key in chunk.keys[start : start + MAX_MULTI_SUBJECTS]]
                pages = read_last_for(
                    conn,
                    config.stream,
                    subjects,
                    up_to_seq=chunk.up_to_seq,
                    batch_size=min(config.batch_size, len(subjects)),
                )
                try:
                    while True:
                        try:
                            columns = loop.run_until_complete(anext(pages))
                        except StopAsyncIteration:
                            break
                        batch = to_entry_batch(columns, prefix)
                        batch = batch.filter(pc.equal(batch.column("operation"), PUT))
                        if batch.num_rows:
                            yield batch
                finally:
                    loop.run_until_complete(pages.aclose())  # type: ignore[attr-defined]
        finally:
            loop.run_until_complete(conn.close())
    finally:
        loop.close()


class KeyValueBatchReader(DataSourceReader):
    """``spark.read.format("jetstream").option("bucket", ...)``: the live keys, or with
    ``history`` every kept revision (markers included)."""

    def __init__(self, options: Mapping[str, str], default_partitions: int) -> None:
        opts = OptionReader(options, FORMAT)
        check_options(opts, BUCKET_BATCH_OPTIONS, "bucket reader", FORMAT)
        self.config = bucket_read_config(opts)
        self.history = opts.boolean("history", default=False)
        given = opts.integer("numPartitions", default=None, minimum=1, example="4")
        parts = given if given is not None else default_partitions
        config = self.config
        self.chunks: list[KeyChunk] = []
        self.ranges: list[SequenceRange] = []
        if self.history:
            bounds = run(stream_bounds(config))
            first = max(bounds.first, 1)
            if given is None:  # as the stream reader: no partition for fewer rows than this
                parts = max(1, min(parts, -(-(bounds.last - first + 1) // ROWS_PER_PARTITION)))
            ranges = split_range(first, bounds.last, parts)
            self.ranges = [SequenceRange(config, a, b) for a, b in ranges]
        else:
            keys, last = run(_live_keys(config))
            if given is None:
                parts = max(1, min(parts, -(-len(keys) // ROWS_PER_PARTITION)))
            self.chunks = [KeyChunk(config, chunk, last) for chunk in _chunks(keys, parts)]

    def partitions(self) -> list[InputPartition]:
        # An empty read still needs one partition: with none, Spark plans its own.
        found: list[InputPartition] = [*self.ranges, *self.chunks]
        return found or [KeyChunk(self.config, (), 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, KeyChunk):
            return read_keys(partition)
        assert isinstance(partition, SequenceRange)
        return read_partition(partition)


# -- writing --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BucketWriteConfig:
    servers: tuple[str, ...]
    bucket: str
    timeout: float
    max_pending: int
    tls: TlsFiles


@dataclass(frozen=True)
class PutResult(WriterCommitMessage):
    """What one task put: every row's ack checked."""

    stored: int


def bucket_write_config(options: Mapping[str, str], schema: StructType) -> BucketWriteConfig:
    """The options and columns of a write into a bucket, checked on the driver."""
    opts = OptionReader(options, FORMAT)
    check_options(opts, WRITE_OPTIONS, "bucket writer", FORMAT)
    fields: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    if set(fields) != {"key", "value"}:
        raise DataSourceOptionError(
            f"the {FORMAT} bucket writer takes exactly the columns key (string) and value "
            f"(binary or string), got {sorted(fields)}: select or rename them first"
        )
    if not isinstance(fields["key"], StringType):
        raise DataSourceOptionError(
            f"column 'key' must be string, got {fields['key'].simpleString()}"
        )
    if not isinstance(fields["value"], (BinaryType, StringType)):
        raise DataSourceOptionError(
            f"column 'value' must be binary or string, got {fields['value'].simpleString()}; "
            "e.g. to_json(struct(...)).alias('value')"
        )
    max_pending = opts.integer("maxPending", default=4000, minimum=1, example="4000")
    assert max_pending is not None
    config = BucketWriteConfig(
        servers=tuple(opts.servers()),
        bucket=_bucket(opts),
        timeout=opts.seconds("timeout", default=DEFAULT_TIMEOUT),
        max_pending=max_pending,
        tls=tls_files(opts),
    )
    run(_check_bucket(config))
    return config


async def _check_bucket(config: BucketWriteConfig) -> None:
    js = await jetstream.connect(
        list(config.servers), timeout=min(config.timeout, 10.0), **nats_tls(config.tls)
    )
    async with js:
        try:
            await js.key_value(config.bucket)
        except jetstream.BucketNotFoundError:
            raise DataSourceOptionError(
                f"option 'bucket': there is no Key-Value bucket {config.bucket!r}; create it "
                "first (js.create_key_value(...), nats kv add)"
            ) from None


def _puts(bucket: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each batch of ``key``/``value`` rows as publishes: ``subject``, ``data``; a bad row
    fails the task before anything of its batch is sent."""
    prefix = subject_prefix(bucket)
    row = 0
    for batch in batches:
        keys = batch.column("key")
        values = batch.column("value")
        bad = pc.invert(pc.fill_null(pc.match_substring_regex(keys, _KEY), False))
        if keys.null_count or pc.any(bad).as_py():
            index = pc.index(bad, True).as_py()
            raise PublishFailedError(
                f"row {row + index} has the key {keys[index].as_py()!r}, which is not a "
                "key (letters, digits and '-/_=.', no empty token); the task fails and "
                "puts nothing more"
            )
        if values.null_count:
            index = pc.index(pc.is_null(values), True).as_py()
            raise PublishFailedError(
                f"row {row + index} (key {keys[index].as_py()!r}) has a null value; put an "
                "empty one instead (deletes are not written through Spark)"
            )
        subjects = pc.binary_join_element_wise(pa.scalar(prefix), keys, "")
        yield pa.RecordBatch.from_arrays(
            [subjects, pc.cast(values, pa.binary())], names=["subject", "data"]
        )
        row += batch.num_rows


async def _put_all(config: BucketWriteConfig, batches: Iterator[pa.RecordBatch]) -> PutResult:
    stored, _ = await publish_and_check(
        list(config.servers),
        _puts(config.bucket, batches),
        timeout=config.timeout,
        tls=config.tls,
        window=config.max_pending,
        subject=None,
        retry_note="its retry puts its rows again",
    )
    return PutResult(stored=stored)


def _log_commit(messages: list[PutResult | None], what: str) -> None:
    stored = sum(m.stored for m in messages if m is not None)
    log.info("%s: %d puts stored", what, stored)


class KeyValueWriter(DataSourceArrowWriter):
    """``df.write.format("jetstream").option("bucket", ...)``: every row a put."""

    def __init__(self, config: BucketWriteConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PutResult:
        return run(_put_all(self.config, iterator))

    def commit(self, messages: list[PutResult | None]) -> None:  # type: ignore[override]
        _log_commit(messages, f"bucket {self.config.bucket} write")


class KeyValueStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("jetstream").option("bucket", ...)``: each micro-batch's
    rows are puts (a retried micro-batch puts them again: the same values)."""

    def __init__(self, config: BucketWriteConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PutResult:
        return run(_put_all(self.config, iterator))

    def commit(self, messages: list[PutResult | None], batchId: int) -> None:  # type: ignore[override]
        _log_commit(messages, f"bucket {self.config.bucket} micro-batch {batchId}")
