"""A JetStream Object Store's listing as a Spark table: the ``jetstream`` format with
``objectStore``.

Theory of operation. An Object Store ``S`` is the stream ``OBJ_S``; each object's
meta (name, size, chunk count, SHA-256 digest, description, metadata, a link's
target) is the last message on its meta subject (NATS ADR-20; the layout of
nats.go, nats-py and :class:`aioclients.jetstream.ObjectStore`). The table has one
row per object, its contents left in the store: pipelines that index what is
stored read this, then fetch the objects they want with ``ObjectStore.get``.

- The planner checks that the store exists (a missing store fails the query on
  the driver, naming it) and plans one partition: a listing is one pass over the
  metas, as ``ObjectStore.list()`` does it, a snapshot of the store as the
  partition's read starts (objects written after are not listed, none is listed
  twice).
- ``showDeleted`` ``true`` also lists the delete markers (``deleted`` true).
- Batch reads only: a listing has no order to stream from (watch the store with
  ``ObjectStore.watch`` for changes), and nothing is written through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timezone

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import (
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aioclients import jetstream
from aioclients._errors import InvalidArgumentError
from aioclients.jetstream import ObjectInfo
from aioclients.jetstream._protocol._kv import validate_bucket
from aioclients.spark._direct_io import TlsFiles
from aioclients.spark._errors import DataSourceOptionError
from aioclients.spark._protocol._options import OptionReader
from aioclients.spark._stream_read import check_options, nats_tls, run, tls_files

__all__ = (
    "OBJECT_STORE_OPTIONS",
    "OBJECT_STORE_SCHEMA",
    "ObjectListing",
    "ObjectStoreBatchReader",
    "read_listing",
)

FORMAT = "jetstream"
OBJECT_STORE_SCHEMA = StructType(
    [
        StructField("name", StringType()),
        StructField("size", LongType()),
        StructField("chunks", LongType()),
        StructField("digest", StringType()),
        StructField("modified", TimestampType()),
        StructField("deleted", BooleanType()),
        StructField("description", StringType()),
        StructField("metadata", MapType(StringType(), StringType())),
        StructField("link", StringType()),
        StructField("nuid", StringType()),
    ]
)
_ARROW_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("chunks", pa.int64()),
        pa.field("digest", pa.string()),
        pa.field("modified", pa.timestamp("us", tz="UTC")),
        pa.field("deleted", pa.bool_()),
        pa.field("description", pa.string()),
        pa.field("metadata", pa.map_(pa.string(), pa.string())),
        pa.field("link", pa.string()),
        pa.field("nuid", pa.string()),
    ]
)
OBJECT_STORE_OPTIONS = {
    "servers",
    "objectStore",
    "showDeleted",
    "batchSize",
    "timeout",
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
}
DEFAULT_BATCH_SIZE = 10_000
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class ObjectListing(InputPartition):
    """The one partition of a listing (pickled to the executor that reads it)."""

    servers: tuple[str, ...] = field(repr=False)  # the URLs may carry credentials
    store: str
    show_deleted: bool
    batch_size: int
    timeout: float
    tls: TlsFiles = field(default_factory=TlsFiles)


def _store_name(opts: OptionReader) -> str:
    name = opts.required("objectStore", "files", "the Object Store")
    try:
        return validate_bucket(name)
    except InvalidArgumentError:
        raise DataSourceOptionError(
            f"option 'objectStore': {name!r} is not a store name (letters, digits, '_' and '-')"
        ) from None


def _link_text(info: ObjectInfo) -> str | None:
    """``store/name`` for an object link, ``store`` for a link to a whole store."""
    link = info.link
    if link is None:
        return None
    return link.bucket if link.name is None else f"{link.bucket}/{link.name}"


def _to_batch(infos: list[ObjectInfo]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "name": [i.name for i in infos],
            "size": [i.size for i in infos],
            "chunks": [i.chunks for i in infos],
            "digest": [i.digest or None for i in infos],
            "modified": [i.modified.astimezone(timezone.utc) for i in infos],
            "deleted": [i.deleted for i in infos],
            "description": [i.description for i in infos],
            "metadata": [list(i.metadata.items()) if i.metadata else None for i in infos],
            "link": [_link_text(i) for i in infos],
            "nuid": [i.nuid for i in infos],
        },
        schema=_ARROW_SCHEMA,
    )


async def _connect(listing: ObjectListing) -> jetstream.JetStream:
    return await jetstream.connect(
        list(listing.servers), timeout=min(listing.timeout, 10.0), **nats_tls(listing.tls)
    )


async def _check_store(listing: ObjectListing) -> None:
    async with await _connect(listing) as js:
        try:
            await js.object_store(listing.store)
        except jetstream.BucketNotFoundError:
            raise DataSourceOptionError(
                f"option 'objectStore': there is no Object Store {listing.store!r} on that server"
            ) from None


async def _next(infos: AsyncIterator[ObjectInfo], timeout: float) -> ObjectInfo:
    return await asyncio.wait_for(infos.__anext__(), timeout)


def read_listing(listing: ObjectListing) -> Iterator[pa.RecordBatch]:
    """The store's objects, ``batch_size`` rows per Arrow batch: one loop, one
    connection, the listing's memory bounded by the batch."""
    loop = asyncio.new_event_loop()
    try:
        js = loop.run_until_complete(_connect(listing))
        try:
            store = loop.run_until_complete(
                asyncio.wait_for(js.object_store(listing.store), listing.timeout)
            )
            infos = store.list(show_deleted=listing.show_deleted)
            try:
                batch: list[ObjectInfo] = []
                while True:
                    try:
                        info = loop.run_until_complete(_next(infos, listing.timeout))
                    except StopAsyncIteration:
                        break
                    batch.append(info)
                    if len(batch) >= listing.batch_size:
                        yield _to_batch(batch)
                        batch = []
                if batch:
                    yield _to_batch(batch)
            finally:
                loop.run_until_complete(infos.aclose())
        finally:
            loop.run_until_complete(js.close())
    finally:
        loop.close()


class ObjectStoreBatchReader(DataSourceReader):
    """``spark.read.format("jetstream").option("objectStore", ...)``: the listing."""

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = OptionReader(options, FORMAT)
        check_options(opts, OBJECT_STORE_OPTIONS, "Object Store reader", FORMAT)
        batch_size = opts.integer(
            "batchSize", default=DEFAULT_BATCH_SIZE, minimum=1, example="10000"
        )
        assert batch_size is not None
        self.listing = ObjectListing(
            servers=tuple(opts.servers()),
            store=_store_name(opts),
            show_deleted=opts.boolean("showDeleted", default=False),
            batch_size=batch_size,
            timeout=opts.seconds("timeout", default=DEFAULT_TIMEOUT),
            tls=tls_files(opts),
        )
        run(_check_store(self.listing))

    def partitions(self) -> list[InputPartition]:
        return [self.listing]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ObjectListing)
        return read_listing(partition)
