"""How many partitions a jetstream batch read gets when ``numPartitions`` is not given.

Two costs decide it. The rows a read yields: a Spark task costs more than a small
read, so no more than one partition per :data:`ROWS_PER_PARTITION` expected rows.
And the server's walk: a subject-filtered Direct Get pass makes nats-server look at
every stored message of its range that may match (one subject of 100 interleaved
ones: each file block holds every subject), about 0.1 s per million messages with
the blocks cached and 0.25-0.7 s without, for 100 B to 1 KB messages. That walk
runs on one server goroutine per request, so a narrow selection over a wide range
is read faster by several partitions, one request each, than by one, however few
rows it yields. Both are capped by the session's parallelism.

Pure: the reader measures (the range, the passes, the server's count of matches)
and asks :func:`partition_count`; :func:`rows_matter` tells it when the count of
matches, a server request, cannot change the answer and need not be made.
"""

from __future__ import annotations

__all__ = (
    "ROWS_PER_PARTITION",
    "WALK_PER_PARTITION",
    "partition_count",
    "rows_matter",
)

#: At most one partition per this many rows a read is expected to yield.
ROWS_PER_PARTITION = 20_000

#: At most one partition per this many stored messages the server walks (the range's
#: size once per subject pass). Walking these costs nats-server about 25-175 ms here,
#: more than a second Spark task does; a smaller range is walked by one request.
WALK_PER_PARTITION = 250_000


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def partition_count(parallelism: int, walked: int, rows: int | None = None) -> int:
    """The partitions of a read that walks ``walked`` stored messages and yields at
    most ``rows`` (``None``: not counted, which :func:`rows_matter` allows), at most
    ``parallelism`` and at least one."""
    wanted = _ceil_div(max(0, walked), WALK_PER_PARTITION)
    if rows is not None:
        wanted = max(wanted, _ceil_div(max(0, rows), ROWS_PER_PARTITION))
    return max(1, min(parallelism, wanted))


def rows_matter(parallelism: int, walked: int) -> bool:
    """Whether the count of rows can change :func:`partition_count` (else the walk
    alone already asks for every partition the session runs at once)."""
    return partition_count(parallelism, walked) < parallelism
