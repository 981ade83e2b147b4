"""Cluster metadata: an immutable snapshot, and the cache that replaces it.

A :class:`Metadata` is built from one FetchMetadata response and never changes;
:class:`MetadataCache` holds the current one and swaps it on each refresh. The
client asks the cache for the addresses to try (resilient RPCs), the leader of
a partition (Subscribe, cursors) and partition counts (partitioners). Time is
injected: ``now`` is a monotonic reading used for staleness, ``last_updated``
a wall-clock ``datetime`` for users (the guide's ``LastUpdated``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn

__all__ = (
    "BrokerInfo",
    "Metadata",
    "MetadataCache",
    "PartitionInfo",
    "PartitionMap",
    "StreamInfo",
)

_UNCHANGING = "a metadata snapshot does not change: fetch_metadata() gives a new one"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker of the cluster."""

    id: str
    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port``, as passed to gRPC."""
        host = self.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # an IPv6 literal
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A stream partition: its leader and replicas are broker ids."""

    id: int
    leader: str
    replicas: tuple[str, ...] = ()
    isr: tuple[str, ...] = ()
    high_watermark: int = -1
    newest_offset: int = -1
    paused: bool = False
    readonly: bool = False


class PartitionMap(dict[int, PartitionInfo]):
    """A stream's partitions by id: a ``dict`` that refuses changes.

    The client routes by the snapshot it hands out, so a change made through a
    user's reference would move the client's own publishes and subscriptions.
    Copies and pickles are plain values; ``|`` makes a new, ordinary ``dict``.
    """

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(_UNCHANGING)

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    pop = _refuse
    popitem = _refuse
    clear = _refuse
    update = _refuse
    setdefault = _refuse

    def __reduce__(self) -> tuple[type[PartitionMap], tuple[dict[int, PartitionInfo]]]:
        return (PartitionMap, (dict(self),))


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream: its name, the NATS subject of partition 0, its partitions by id
    (a :class:`PartitionMap`, whatever mapping it was given)."""

    name: str
    subject: str
    partitions: Mapping[int, PartitionInfo] = field(default_factory=dict)
    creation_timestamp: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.partitions, PartitionMap):
            object.__setattr__(self, "partitions", PartitionMap(self.partitions))

    def partition_subject(self, partition: int) -> str:
        """The NATS subject of ``partition`` (``subject`` for 0, ``subject.N`` otherwise)."""
        return partition_subject(self.subject, partition)


def partition_subject(subject: str, partition: int) -> str:
    """Partition 0 is the stream's subject, partition ``n`` is ``"<subject>.<n>"``."""
    return subject if partition == 0 else f"{subject}.{partition}"


def partition_from_pb(p: Any) -> PartitionInfo:
    return PartitionInfo(
        id=p.id,
        leader=p.leader,
        replicas=tuple(p.replicas),
        isr=tuple(p.isr),
        high_watermark=p.highWatermark,
        newest_offset=p.newestOffset,
        paused=p.paused,
        readonly=p.readonly,
    )


class Metadata:
    """An immutable snapshot of the cluster's brokers and streams.

    Attributes:
        last_updated: when it was fetched (an aware ``datetime``).
    """

    __slots__ = ("_addresses", "_brokers", "_streams", "fetched_at", "last_updated")

    def __init__(
        self,
        brokers: Iterable[BrokerInfo] = (),
        streams: Iterable[StreamInfo] = (),
        *,
        last_updated: datetime | None = None,
        fetched_at: float = float("-inf"),
        seed_addresses: Iterable[str] = (),
    ) -> None:
        self._brokers: dict[str, BrokerInfo]
        self._streams: dict[str, StreamInfo]
        self._addresses: tuple[str, ...]
        self.last_updated: datetime | None
        self.fetched_at: float
        brokers_by_id = {b.id: b for b in brokers}
        addresses = [b.address for b in brokers_by_id.values()]
        # Seeds stay in the list: a broker can be missing from the metadata
        # (not yet joined) and still answer.
        for seed in seed_addresses:
            if seed not in addresses:
                addresses.append(seed)
        set_once = object.__setattr__
        set_once(self, "_brokers", brokers_by_id)
        set_once(self, "_streams", {s.name: s for s in streams})
        set_once(self, "_addresses", tuple(addresses))
        set_once(self, "last_updated", last_updated)
        set_once(self, "fetched_at", fetched_at)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot set {name!r}: {_UNCHANGING}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete {name!r}: {_UNCHANGING}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Copies and pickles are built as the original was (setting attributes is refused).
        # The addresses after the brokers' own are the seeds that stay known.
        return (
            _rebuild_metadata,
            (self.brokers(), self.streams(), self.last_updated, self.fetched_at, self._addresses),
        )

    @classmethod
    def from_response(
        cls,
        response: Any,
        *,
        now: float,
        wall: datetime | None,
        seed_addresses: Iterable[str] = (),
    ) -> Metadata:
        """Build a snapshot from a ``FetchMetadataResponse``."""
        brokers = [BrokerInfo(b.id, b.host, b.port) for b in response.brokers]
        streams = []
        for s in response.streamMetadata:
            if s.error != 0:  # UNKNOWN_STREAM: asked for by name but absent
                continue
            parts = {pid: partition_from_pb(p) for pid, p in s.partitions.items()}
            streams.append(
                StreamInfo(s.name, s.subject, dict(sorted(parts.items())), s.creationTimestamp)
            )
        return cls(
            brokers, streams, last_updated=wall, fetched_at=now, seed_addresses=seed_addresses
        )

    def brokers(self) -> tuple[BrokerInfo, ...]:
        """Every broker of the cluster."""
        return tuple(self._brokers.values())

    def broker(self, broker_id: str) -> BrokerInfo | None:
        """The broker with that id, or None."""
        return self._brokers.get(broker_id)

    def addresses(self) -> tuple[str, ...]:
        """Every known broker address (``host:port``), seeds included."""
        return self._addresses

    def streams(self) -> tuple[StreamInfo, ...]:
        """Every stream."""
        return tuple(self._streams.values())

    def get_stream(self, name: str) -> StreamInfo | None:
        """The stream called ``name``, or None."""
        return self._streams.get(name)

    def get_streams(self, subject: str) -> tuple[StreamInfo, ...]:
        """The streams attached to exactly ``subject`` (no wildcard matching)."""
        return tuple(s for s in self._streams.values() if s.subject == subject)

    def partition_counts_for_subject(self, subject: str) -> dict[str, int]:
        """Stream name -> partition count for the streams attached to ``subject``."""
        return {s.name: len(s.partitions) for s in self.get_streams(subject)}

    def partition_count(self, stream: str) -> int:
        """The number of partitions of ``stream`` (0 when unknown)."""
        info = self._streams.get(stream)
        return 0 if info is None else len(info.partitions)

    def leader_address(self, stream: str, partition: int) -> str | None:
        """The address of the partition's leader, or None when unknown."""
        info = self._streams.get(stream)
        part = None if info is None else info.partitions.get(partition)
        if part is None:
            return None
        broker = self._brokers.get(part.leader)
        return None if broker is None else broker.address

    def isr_addresses(self, stream: str, partition: int) -> tuple[str, ...]:
        """The addresses of the partition's in-sync replicas that are known brokers."""
        info = self._streams.get(stream)
        part = None if info is None else info.partitions.get(partition)
        if part is None:
            return ()
        return tuple(self._brokers[b].address for b in part.isr if b in self._brokers)

    def age(self, now: float) -> float:
        """Seconds since the snapshot was fetched (``inf`` for the empty seed snapshot)."""
        return now - self.fetched_at

    def __repr__(self) -> str:
        return (
            f"Metadata(brokers={sorted(self._brokers)}, streams={sorted(self._streams)}, "
            f"last_updated={self.last_updated!r})"
        )


def _rebuild_metadata(
    brokers: tuple[BrokerInfo, ...],
    streams: tuple[StreamInfo, ...],
    last_updated: datetime | None,
    fetched_at: float,
    addresses: tuple[str, ...],
) -> Metadata:
    return Metadata(
        brokers,
        streams,
        last_updated=last_updated,
        fetched_at=fetched_at,
        seed_addresses=addresses,
    )


class MetadataCache:
    """Holds the current :class:`Metadata`; every refresh replaces it whole.

    Args:
        seed_addresses: the addresses given to ``connect``; they stay known even
            when the cluster does not list them.
        max_age: after this many seconds a snapshot counts as stale (the client
            refreshes before it needs a leader).
    """

    def __init__(self, seed_addresses: Iterable[str], *, max_age: float = 60.0) -> None:
        self.seeds = tuple(seed_addresses)
        self.max_age = max_age
        self._current = Metadata(seed_addresses=self.seeds)
        self.generation = 0

    def get(self) -> Metadata:
        """The current snapshot (empty until the first update)."""
        return self._current

    def update(self, response: Any, *, now: float, wall: datetime | None = None) -> Metadata:
        """Replace the snapshot with one built from a ``FetchMetadataResponse``.

        A broker that the response's partitions name (leader, replica or in-sync
        replica) but its broker list omits keeps the address the previous
        snapshot gave it. A Liftbridge v1.9.0 broker lists the peers that
        answered its last survey and reuses that list for
        ``metadata.cache.max.age`` (2 min): a survey made while a peer was down
        leaves the peer out for that long after it is back, although it leads
        partitions (measured: every partition of a stream created then was led
        by the restarted broker, and could not be subscribed to).
        """
        md = Metadata.from_response(response, now=now, wall=wall, seed_addresses=self.seeds)
        previous = self._current
        named = {
            broker_id
            for stream in md.streams()
            for p in stream.partitions.values()
            for broker_id in (p.leader, *p.replicas, *p.isr)
        }
        kept = [
            b
            for broker_id in sorted(named)
            if md.broker(broker_id) is None and (b := previous.broker(broker_id)) is not None
        ]
        if kept:
            md = Metadata(
                (*md.brokers(), *kept),
                md.streams(),
                last_updated=md.last_updated,
                fetched_at=md.fetched_at,
                seed_addresses=self.seeds,
            )
        self._current = md
        self.generation += 1
        return md

    def addresses(self) -> tuple[str, ...]:
        """Every address to try for an ordinary RPC."""
        return self._current.addresses()

    def leader_address(self, stream: str, partition: int) -> str | None:
        """The cached leader address of a partition (None: refresh and ask again)."""
        return self._current.leader_address(stream, partition)

    def last_updated(self) -> datetime | None:
        return self._current.last_updated

    def staleness(self, now: float) -> float:
        """Seconds since the last update (``inf`` before the first one)."""
        return self._current.age(now)

    def is_stale(self, now: float) -> bool:
        """True when the snapshot is older than ``max_age`` (or there is none)."""
        return self.staleness(now) > self.max_age
