"""Partitioners: which partition of a stream a published message goes to.

Rules (liftbridge client guide, "Partitioner Implementation"): an explicit
partition wins; otherwise a partitioner picks one from the stream's partition
count in the metadata; otherwise partition 0. :class:`PartitionByKey` hashes
the key with CRC-32 (IEEE, ``zlib.crc32``) modulo the partition count, a
missing key hashing like the empty key; :class:`PartitionByRoundRobin` keeps a
counter per stream. A stream unknown to the metadata maps to partition 0.
"""

from __future__ import annotations

import zlib
from typing import Protocol, runtime_checkable

from aioclients.liftbridge._protocol._metadata import Metadata

__all__ = ("PartitionByKey", "PartitionByRoundRobin", "Partitioner", "choose_partition")


@runtime_checkable
class Partitioner(Protocol):
    """Maps a message to a partition of ``stream``."""

    def partition(self, stream: str, key: bytes | None, value: bytes, metadata: Metadata) -> int:
        """Return the partition (``0 <= p < partition count``) for this message."""
        ...


class PartitionByKey:
    """CRC-32 (IEEE) of the key modulo the stream's partition count."""

    __slots__ = ()

    def partition(self, stream: str, key: bytes | None, value: bytes, metadata: Metadata) -> int:
        count = metadata.partition_count(stream)
        if count == 0:
            return 0
        return zlib.crc32(key or b"") % count

    def __repr__(self) -> str:
        return "PartitionByKey()"


class PartitionByRoundRobin:
    """Cycles through the stream's partitions, one counter per stream."""

    __slots__ = ("_counters",)

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}

    def partition(self, stream: str, key: bytes | None, value: bytes, metadata: Metadata) -> int:
        count = metadata.partition_count(stream)
        if count == 0:
            return 0
        n = self._counters.get(stream, 0)
        self._counters[stream] = n + 1
        return n % count

    def __repr__(self) -> str:
        return f"PartitionByRoundRobin(counters={self._counters!r})"


def choose_partition(
    stream: str,
    key: bytes | None,
    value: bytes,
    *,
    partition: int | None,
    partitioner: Partitioner | None,
    metadata: Metadata,
) -> int:
    """Apply the rules above: explicit partition, then partitioner, then 0."""
    if partition is not None:
        return partition
    if partitioner is not None:
        return partitioner.partition(stream, key, value, metadata)
    return 0
