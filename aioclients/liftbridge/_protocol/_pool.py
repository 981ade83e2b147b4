"""Bookkeeping of the per-broker connection pool used by Subscribe.

Subscriptions are long-lived streams, each on a connection to the leader of
its partition. Rules (liftbridge client guide, "Connection Pooling", adapted
to HTTP/2 where one connection carries many streams):

* a broker has at most ``max_conns`` connections; :meth:`acquire` returns the
  least used one once that many are open, or asks the caller to open a new one;
* :meth:`release` (a subscription ended) lowers the count; a connection nobody
  uses expires ``keepalive_time`` seconds later (``get_timer``/``handle_timer``),
  unless :meth:`acquire` takes it again first;
* :meth:`discard` drops a broken connection at once.

Connections are opaque handles (the driver's channels); this module never
touches one, it only says which to close.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from aioclients._errors import LocalProtocolError

__all__ = ("BrokerPool", "SubscribePool")

C = TypeVar("C", bound=Hashable)


@dataclass(slots=True)
class _Entry(Generic[C]):
    conn: C
    users: int = 0
    idle_since: float | None = None


class BrokerPool(Generic[C]):
    """The connections to one broker.

    Args:
        max_conns: the most connections to keep open to the broker (>= 1).
        keepalive_time: seconds an unused connection stays open.
    """

    def __init__(self, *, max_conns: int, keepalive_time: float) -> None:
        if max_conns < 1:
            raise ValueError(f"max_conns must be >= 1, got {max_conns!r}")
        if keepalive_time < 0:
            raise ValueError(f"keepalive_time must be >= 0, got {keepalive_time!r}")
        self.max_conns = max_conns
        self.keepalive_time = keepalive_time
        self._entries: dict[C, _Entry[C]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def acquire(self, now: float) -> C | None:
        """A connection to use (its user count goes up), or None: open one and :meth:`add` it."""
        if not self._entries:
            return None
        idle = [e for e in self._entries.values() if e.users == 0]
        if idle:
            entry = idle[0]
        elif len(self._entries) < self.max_conns:
            return None
        else:
            entry = min(self._entries.values(), key=lambda e: e.users)
        entry.users += 1
        entry.idle_since = None
        return entry.conn

    def add(self, conn: C, now: float) -> None:
        """Register a connection the caller just opened, in use by one subscription."""
        if conn in self._entries:
            raise LocalProtocolError("connection added to the pool twice")
        self._entries[conn] = _Entry(conn, users=1)

    def release(self, conn: C, now: float) -> None:
        """A subscription stopped using ``conn``; unused, it expires after keepalive_time."""
        entry = self._entries.get(conn)
        if entry is None:
            return  # discarded meanwhile
        if entry.users <= 0:
            raise LocalProtocolError("connection released more often than acquired")
        entry.users -= 1
        if entry.users == 0:
            entry.idle_since = now

    def discard(self, conn: C) -> bool:
        """Forget a broken connection; True if it was in the pool (the caller closes it)."""
        return self._entries.pop(conn, None) is not None

    def users(self, conn: C) -> int:
        entry = self._entries.get(conn)
        return 0 if entry is None else entry.users

    def get_timer(self) -> float | None:
        """When the next idle connection expires (None: none is idle)."""
        times = [e.idle_since for e in self._entries.values() if e.idle_since is not None]
        return min(times) + self.keepalive_time if times else None

    def handle_timer(self, now: float) -> list[C]:
        """Remove and return the connections idle for keepalive_time (the caller closes them)."""
        expired = [
            e.conn
            for e in self._entries.values()
            if e.idle_since is not None and now >= e.idle_since + self.keepalive_time
        ]
        for conn in expired:
            del self._entries[conn]
        return expired

    def close(self) -> list[C]:
        """Remove and return every connection."""
        conns = list(self._entries)
        self._entries.clear()
        return conns


class SubscribePool(Generic[C]):
    """One :class:`BrokerPool` per broker address."""

    def __init__(self, *, max_conns_per_broker: int, keepalive_time: float) -> None:
        if max_conns_per_broker < 1:
            raise ValueError(f"max_conns_per_broker must be >= 1, got {max_conns_per_broker!r}")
        self.max_conns_per_broker = max_conns_per_broker
        self.keepalive_time = keepalive_time
        self._brokers: dict[str, BrokerPool[C]] = {}

    def broker(self, address: str) -> BrokerPool[C]:
        pool = self._brokers.get(address)
        if pool is None:
            pool = BrokerPool(
                max_conns=self.max_conns_per_broker, keepalive_time=self.keepalive_time
            )
            self._brokers[address] = pool
        return pool

    def acquire(self, address: str, now: float) -> C | None:
        return self.broker(address).acquire(now)

    def add(self, address: str, conn: C, now: float) -> None:
        self.broker(address).add(conn, now)

    def release(self, address: str, conn: C, now: float) -> None:
        self.broker(address).release(conn, now)

    def discard(self, address: str, conn: C) -> bool:
        return self.broker(address).discard(conn)

    def connections(self, address: str) -> int:
        pool = self._brokers.get(address)
        return 0 if pool is None else len(pool)

    def get_timer(self) -> float | None:
        times = [t for p in self._brokers.values() if (t := p.get_timer()) is not None]
        return min(times) if times else None

    def handle_timer(self, now: float) -> list[C]:
        expired: list[C] = []
        for pool in self._brokers.values():
            expired.extend(pool.handle_timer(now))
        return expired

    def close(self) -> list[C]:
        conns: list[C] = []
        for pool in self._brokers.values():
            conns.extend(pool.close())
        self._brokers.clear()
        return conns
