"""Columns of Direct Get replies to Arrow record batches, converted column-wise.

The Arrow schema must equal what Spark derives from the source's schema
(``to_arrow_schema(schema, timezone="UTC")``), or Spark rejects the batch:
``timestamp`` is microseconds in UTC, ``headers`` a map of string to string.
"""

from __future__ import annotations

import re
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from aioclients._errors import RemoteProtocolError
from aioclients.jetstream._protocol._kv import PUT, operation_of
from aioclients.spark._protocol._direct_reader import Columns
from aioclients.spark._protocol._pushdown import Bounds

__all__ = ("ARROW_SCHEMA", "ENTRY_ARROW_SCHEMA", "keep_in", "to_entry_batch", "to_record_batch")

HEADERS_TYPE = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema(
    [
        pa.field("subject", pa.string()),
        pa.field("sequence", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("headers", HEADERS_TYPE),
        pa.field("data", pa.binary()),
    ]
)

#: A Key-Value bucket's entries (``spark.read.format("jetstream").option("bucket", ...)``).
ENTRY_ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string()),
        pa.field("value", pa.binary()),
        pa.field("revision", pa.int64()),
        pa.field("created", pa.timestamp("us", tz="UTC")),
        pa.field("operation", pa.string()),
    ]
)

_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d+))?Z")


def _timestamps(stamps: list[bytes]) -> pa.Array:
    """``Nats-Time-Stamp`` values (RFC 3339, nanoseconds, UTC) to microseconds."""
    text = pa.array(stamps, pa.binary()).cast(pa.string())
    try:
        nanos = text.cast(pa.timestamp("ns", tz="UTC"))
        return nanos.cast(pa.timestamp("us", tz="UTC"), safe=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass  # an unusual form somewhere in the column: parse one by one
    values = []
    for raw in stamps:
        m = _STAMP.fullmatch(raw.decode("ascii", "replace"))
        if m is None:
            raise RemoteProtocolError(f"unparseable Nats-Time-Stamp {raw[:60]!r}")
        frac = (m[3] or "")[:6].ljust(6, "0")
        values.append(datetime.fromisoformat(f"{m[1]}T{m[2]}.{frac}+00:00"))
    return pa.array(values, pa.timestamp("us", tz="UTC"))


def _headers(columns: Columns, count: int) -> pa.Array:
    if not columns.headers:
        return pa.nulls(count, HEADERS_TYPE)
    rows: list[list[tuple[str, str]] | None] = [None] * count
    for index, pairs in columns.headers.items():
        if index < count:
            rows[index] = pairs
    return pa.array(rows, HEADERS_TYPE)


def _within(columns: Columns, up_to: int | None) -> tuple[Columns, pa.Array]:
    """The received messages up to sequence ``up_to``, and their sequences as integers."""
    sequences = pa.array(columns.sequences, pa.binary()).cast(pa.string()).cast(pa.int64())
    count = len(sequences)
    if up_to is not None and count and sequences[count - 1].as_py() > up_to:
        # Sequences arrive in increasing order: keep the prefix within the range.
        count = pc.sum(pc.less_equal(sequences, up_to)).as_py() or 0
        sequences = sequences.slice(0, count)
        columns = Columns(
            subjects=columns.subjects[:count],
            sequences=columns.sequences[:count],
            stamps=columns.stamps[:count],
            data=columns.data[:count],
            headers=columns.headers,
        )
    return columns, sequences


def to_record_batch(columns: Columns, *, up_to: int | None = None) -> pa.RecordBatch:
    """One record batch of the received messages, without those past sequence ``up_to``."""
    columns, sequences = _within(columns, up_to)
    count = len(sequences)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(columns.subjects, pa.binary()).cast(pa.string()),
            sequences,
            _timestamps(columns.stamps),
            _headers(columns, count),
            pa.array(columns.data, pa.binary()),
        ],
        schema=ARROW_SCHEMA,
    )


def keep_in(
    batch: pa.RecordBatch,
    *,
    times: Bounds,
    time_column: str,
    numbers: frozenset[int] | None = None,
    number_column: str = "",
) -> pa.RecordBatch:
    """The rows of ``batch`` whose time (microseconds) is within ``times`` and, with
    ``numbers``, whose ``number_column`` is one of them: the part of a pushed filter
    the server cannot apply itself (see ``_protocol._pushdown``)."""
    masks = []
    if times.lo is not None or times.hi is not None:
        micros = pc.cast(batch.column(time_column), pa.int64())
        if times.lo is not None:
            masks.append(pc.greater_equal(micros, times.lo))
        if times.hi is not None:
            masks.append(pc.less_equal(micros, times.hi))
    if numbers is not None:
        masks.append(pc.is_in(batch.column(number_column), pa.array(sorted(numbers), pa.int64())))
    if not masks or not batch.num_rows:
        return batch
    mask = masks[0]
    for more in masks[1:]:
        mask = pc.and_(mask, more)
    return batch.filter(mask)


def to_entry_batch(columns: Columns, prefix: str, up_to: int | None = None) -> pa.RecordBatch:
    """A bucket's messages as entries: the key is the subject after ``prefix``
    (``$KV.<bucket>.``), the revision the sequence, the operation ``PUT``, ``DEL`` or
    ``PURGE`` from the headers (as ``KeyValue`` and nats-py read them)."""
    columns, sequences = _within(columns, up_to)
    count = len(sequences)
    subjects = pa.array(columns.subjects, pa.binary()).cast(pa.string())
    operations = [PUT] * count
    for index, pairs in columns.headers.items():
        if index < count:
            operations[index] = operation_of(dict(pairs))
    return pa.RecordBatch.from_arrays(
        [
            pc.utf8_slice_codeunits(subjects, len(prefix)),
            pa.array(columns.data, pa.binary()),
            sequences,
            _timestamps(columns.stamps),
            pa.array(operations, pa.string()),
        ],
        schema=ENTRY_ARROW_SCHEMA,
    )
