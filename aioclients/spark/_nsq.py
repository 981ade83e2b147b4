"""The ``nsq`` Spark data source: batch and streaming writes in MPUB batches.

Theory of operation: each write task opens one :class:`aioclients.nsq.Producer`
(TCP) on its own event loop and sends its rows as MPUB commands of up to
``batchSize`` messages (and ``maxBatchBytes`` bytes, under nsqd's
``--max-body-size``), built column-wise from the Arrow batches, with a few MPUBs
in flight and every ``OK`` awaited in order. nsqd applies an MPUB atomically and
closes the connection on a failed one (so nothing after it is applied): a
failure leaves the earlier batches published and fails the task with
:class:`PublishFailedError`; Spark's retry
publishes the task's rows again (NSQ delivery is at-least-once anyway).

Reading: ``spark.readStream.format("nsq")`` is at-least-once, holding each
micro-batch's messages in flight until Spark commits it (see
:mod:`aioclients.spark._nsq_source`). There is no batch reader: NSQ keeps no log
to plan a batch read from (a channel hands each message to one consumer and
forgets it once finished); ``spark.read.format("nsq")`` fails saying so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import NoReturn

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, DataType, StringType, StructType

from aioclients import nsq
from aioclients.nsq._protocol._frames import is_valid_name
from aioclients.spark._errors import (
    DataSourceOptionError,
    DataSourceUnavailableError,
    PublishFailedError,
)
from aioclients.spark._nsq_source import NSQ_SCHEMA, NsqStreamReader, check_schema
from aioclients.spark._protocol._mpub_frames import Mpub, MpubBuilder, MpubRowError
from aioclients.spark._protocol._options import OptionReader
from aioclients.spark._write_io import nsq_publish

__all__ = ("NsqDataSource", "data_source")

log = logging.getLogger("aioclients.spark.nsq")

FORMAT = "nsq"
DEFAULT_BATCH_SIZE = 500
DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024  # nsqd's --max-body-size is 5 MiB by default
DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024  # nsqd's --max-msg-size
DEFAULT_TIMEOUT = 30.0
WRITE_OPTIONS = {"nsqd", "topic", "batchSize", "maxBatchBytes", "maxMessageSize", "timeout"}
SPARK_OPTIONS = {"path", "checkpointLocation", "queryName"}
BODY_COLUMNS = ("data", "body")


@dataclass(frozen=True, slots=True)
class WriteConfig:
    nsqd: str
    topic: str
    column: str
    text: bool
    batch_size: int
    max_batch_bytes: int
    max_message_size: int
    timeout: float


@dataclass(frozen=True)
class WriteResult(WriterCommitMessage):
    """What one task published: messages and MPUB commands, every one answered OK."""

    published: int
    mpubs: int


def _write_config(options: Mapping[str, str], schema: StructType) -> WriteConfig:
    opts = OptionReader(options, FORMAT)
    unknown = opts.unknown(WRITE_OPTIONS | SPARK_OPTIONS)
    if unknown:
        raise DataSourceOptionError(
            f"unknown option(s) {unknown} for the {FORMAT} writer; "
            f"it takes {sorted(WRITE_OPTIONS)} (names are case-insensitive)"
        )
    address = opts.required("nsqd", "127.0.0.1:4150", "the TCP address of nsqd")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DataSourceOptionError(
            f"option 'nsqd': {address!r} is not host:port of nsqd's TCP listener; "
            'use .option("nsqd", "127.0.0.1:4150")'
        )
    topic = opts.required("topic", "events", "the NSQ topic to publish to")
    if not is_valid_name(topic):
        raise DataSourceOptionError(
            f"option 'topic': {topic!r} is not a valid NSQ topic name (1 to 64 characters "
            "of letters, digits, '.', '_', '-', optionally ending in '#ephemeral')"
        )
    fields: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    present = [c for c in BODY_COLUMNS if c in fields]
    extra = sorted(set(fields) - set(BODY_COLUMNS))
    if len(present) != 1 or extra:
        raise DataSourceOptionError(
            f"the {FORMAT} writer takes exactly one column, 'data' or 'body' (binary or "
            f"string), got {sorted(fields)}; e.g. df.select(to_json(struct('*')).alias('data'))"
        )
    column = present[0]
    if not isinstance(fields[column], (BinaryType, StringType)):
        raise DataSourceOptionError(
            f"column {column!r} must be binary or string, got {fields[column].simpleString()}; "
            f"cast it: col('{column}').cast('string')"
        )
    batch_size = opts.integer("batchSize", default=DEFAULT_BATCH_SIZE, minimum=1, example="500")
    max_bytes = opts.integer(
        "maxBatchBytes", default=DEFAULT_MAX_BATCH_BYTES, minimum=1, example="4194304"
    )
    max_message = opts.integer(
        "maxMessageSize", default=DEFAULT_MAX_MESSAGE_SIZE, minimum=1, example="1048576"
    )
    assert batch_size is not None
    assert max_bytes is not None
    assert max_message is not None
    return WriteConfig(
        nsqd=address,
        topic=topic,
        column=column,
        text=isinstance(fields[column], StringType),
        batch_size=batch_size,
        max_batch_bytes=max_bytes,
        max_message_size=max_message,
        timeout=opts.seconds("timeout", default=DEFAULT_TIMEOUT),
    )


async def _publish(config: WriteConfig, batches: Iterator[pa.RecordBatch]) -> WriteResult:
    """MPUB commands built column-wise, a few in flight (see :mod:`aioclients.spark._write_io`)."""
    producer = nsq.Producer(
        config.nsqd,
        timeout=config.timeout,
        connect_timeout=min(config.timeout, 10.0),
        max_message_size=config.max_message_size,
    )
    builder = MpubBuilder(
        config.topic,
        batch_size=config.batch_size,
        max_batch_bytes=config.max_batch_bytes,
        max_message_size=config.max_message_size,
    )

    def failed(mpub: Mpub, exc: BaseException) -> NoReturn:
        hint = ""
        if isinstance(exc, nsq.NSQConnectError):
            hint = f"; check the 'nsqd' option ({config.nsqd})"
        last = mpub.first_row + mpub.rows - 1
        raise PublishFailedError(
            f"MPUB of rows {mpub.first_row}..{last} to NSQ topic {config.topic!r} failed: "
            f"{exc}{hint}; the task fails so that nothing is dropped ({mpub.first_row} rows "
            "before them were published; a retry publishes them again)"
        ) from exc

    try:
        try:
            published, mpubs = await nsq_publish(
                producer, builder, config.column, batches, on_failure=failed
            )
        except MpubRowError as exc:
            if exc.reason.startswith("an empty"):
                raise PublishFailedError(
                    f"row {exc.row} has an empty or null {config.column!r}; nsqd rejects empty "
                    f'messages: filter them out first (e.g. df.where("length({config.column}) '
                    '> 0"))'
                ) from None
            raise PublishFailedError(
                f"row {exc.row} has {exc.reason}; nsqd would refuse it (raise the option "
                "together with nsqd's --max-msg-size, or filter such rows out)"
            ) from None
    finally:
        await producer.close()
    return WriteResult(published=published, mpubs=mpubs)


def _write(config: WriteConfig, batches: Iterator[pa.RecordBatch]) -> WriteResult:
    return asyncio.run(_publish(config, batches))


def _log_commit(messages: list[WriteResult | None], what: str) -> None:
    published = sum(m.published for m in messages if m is not None)
    mpubs = sum(m.mpubs for m in messages if m is not None)
    log.info("%s: %d messages published in %d MPUB commands", what, published, mpubs)


class NsqWriter(DataSourceArrowWriter):
    """``df.write.format("nsq")``: MPUB batches, each one's OK awaited."""

    def __init__(self, config: WriteConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return _write(self.config, iterator)

    def commit(self, messages: list[WriteResult | None]) -> None:  # type: ignore[override]
        _log_commit(messages, "nsq write")


class NsqStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("nsq")``: each micro-batch as the batch writer does."""

    def __init__(self, config: WriteConfig) -> None:
        self.config = config

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return _write(self.config, iterator)

    def commit(self, messages: list[WriteResult | None], batchId: int) -> None:  # type: ignore[override]
        _log_commit(messages, f"nsq micro-batch {batchId}")

    def abort(self, messages: list[WriteResult | None], batchId: int) -> None:  # type: ignore[override]
        log.warning("nsq micro-batch %d aborted; its retry publishes it again", batchId)


def _no_batch_reads() -> NoReturn:
    raise DataSourceUnavailableError(
        "the 'nsq' data source is not available for batch reads: NSQ keeps no log "
        "(a channel hands each message to one consumer and forgets it once finished), so "
        "there is nothing to plan a batch read from. Read it as a stream with "
        "spark.readStream.format('nsq') (at least once), or consume with aioclients.nsq.Reader"
    )


class NsqDataSource(DataSource):
    """The ``nsq`` format: writes and streaming reads (module docstring, docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return NSQ_SCHEMA

    def reader(self, schema: StructType) -> NoReturn:
        _no_batch_reads()

    def streamReader(self, schema: StructType) -> NsqStreamReader:
        check_schema(schema)
        return NsqStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> NsqWriter:
        if overwrite:
            raise DataSourceOptionError(
                f"the {FORMAT} writer publishes to a topic; use .mode('append')"
            )
        return NsqWriter(_write_config(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> NsqStreamWriter:
        return NsqStreamWriter(_write_config(self.options, schema))


def data_source() -> type[DataSource]:
    """The data source class for the ``nsq`` format."""
    return NsqDataSource
