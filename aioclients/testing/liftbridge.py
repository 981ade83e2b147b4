"""An in-process emulator of a Liftbridge v1.9 cluster, for tests and benchmarks.

Each broker is a ``grpc.aio`` server on its own loopback port, serving the
Liftbridge client API (``proto.API``) with the semantics a client relies on:
streams attached to NATS subjects on a real nats-server (anything published
there, raw or enveloped, lands in the partition log), offsets from 0, every
start and stop position, leaders and FAILED_PRECONDITION from non-leaders,
NOT_FOUND / ALREADY_EXISTS, ack policies and ack inboxes, cursors, pause /
read-only (and auto-pause), consumer groups and optional TLS.
:meth:`LiftbridgeCluster.stop_broker` closes a broker's port (its subscriptions
end with UNAVAILABLE) and moves leadership of its partitions to a live broker;
the logs are shared in process, so nothing is lost. Each partition log keeps
segments as Liftbridge v1.9.0 does (``_liftbridge_log``): the stream options
``segment_max_bytes`` / ``segment_max_age`` roll them (sizes counted in the
server's bytes), and every ``cleaner_interval`` the partition's cleaner applies
``retention_max_age`` / ``retention_max_messages`` / ``retention_max_bytes`` by
whole segments, never the active one, then compaction (``compact_enabled``), with
the server's defaults (256 MiB segments, 7 days, a 5-minute cleaner); nothing is
removed when a publish goes past a limit, only when the cleaner runs. What it
does not emulate: encryption at rest, authorization, and a replica falling out
of sync (followers share the leader's log). Behaviours taken from the Liftbridge
server source are listed in ``_liftbridge_broker``'s docstring.

Like a real cluster (measured against Liftbridge v1.9.0), it lags where a
client must cope with lag:

* metadata reaches the brokers other than the metadata leader (the first live
  broker) ``metadata_delay`` seconds late, and each broker answers from its own
  view: right after ``CreateStream`` another broker may answer NOT_FOUND, right
  after ``DeleteStream`` or a pause it may still show the old state, and a
  group's coordinator may not know a member (or the group) that just joined;
  the partition leader applies delete / pause / read-only late as well (a
  publish during a read-only flip can be dropped without an ack);
* the high watermark of a replicated partition moves only when the followers
  fetch, and the first message of a new partition waits for their idle fetch,
  ``replica_max_idle_wait`` seconds after the partition was created (AckPolicy.ALL
  acks and readers wait for it too);
* offsets in FetchMetadata are the answering broker's own (-1 on a broker that
  holds no replica); ``paused`` stays true once a partition was paused (a
  Liftbridge v1.9.0 bug); group epochs are log indexes (0 for a new group);
* a partition's cleaner takes ``clean_duration`` seconds per segment it deletes or
  rewrites (compaction rewrites every sealed segment, every time); a reader opened
  meanwhile on one of them fails with INTERNAL "Failed to create stream reader:
  segment has been closed" (the answer for a paused partition too), and a reader
  inside a deleted segment fails with UNKNOWN "failed to read message headers:
  segment has been closed".

The lags are on by default (``REALISTIC_METADATA_DELAY``,
``REALISTIC_REPLICA_MAX_IDLE_WAIT``, ``REALISTIC_CLEAN_DURATION``), so that what
passes here also holds on a real cluster. With ``metadata_delay=0``,
``replica_max_idle_wait=0`` and ``clean_duration=0`` every broker sees every
change at once, replicated partitions commit at once and cleaning is instant; the
rest above holds always.

Not thread-safe: use it from one event loop.

Usage::

    async with NatsServer() as nats, LiftbridgeCluster(3, nats_url=nats.url) as cluster:
        client = await aioclients.liftbridge.connect(cluster.addresses)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from types import TracebackType

import grpc

from aioclients._core import check_float, check_int
from aioclients._errors import InvalidArgumentError
from aioclients._tasks import TaskOwner
from aioclients.testing._liftbridge_broker import Broker, Ingester
from aioclients.testing._liftbridge_state import ClusterState, MonotonicTimer
from aioclients.testing.nats_server import NatsServer

__all__ = (
    "REALISTIC_CLEAN_DURATION",
    "REALISTIC_METADATA_DELAY",
    "REALISTIC_REPLICA_MAX_IDLE_WAIT",
    "LiftbridgeCluster",
)

log = logging.getLogger("aioclients.testing.liftbridge")

_AUTO_PAUSE_CHECK = 0.05  # seconds between idle checks for auto-pause
#: a ``metadata_delay`` like a real cluster's Raft apply lag (a few ms on loopback,
#: made longer so that a test meets it every time)
REALISTIC_METADATA_DELAY = 0.05
#: a ``replica_max_idle_wait`` that keeps tests fast (the server's default is 10 s)
REALISTIC_REPLICA_MAX_IDLE_WAIT = 0.2
#: a ``clean_duration``: how long a partition's cleaner takes per segment it deletes
#: or rewrites (readers opened meanwhile can meet a closed segment, as on the server)
REALISTIC_CLEAN_DURATION = 0.01
# The lag is on by default: the client copes with it (create_stream and friends wait
# for every broker, publish retries NOT_FOUND), and tests must too.
DEFAULT_METADATA_DELAY = REALISTIC_METADATA_DELAY
DEFAULT_REPLICA_MAX_IDLE_WAIT = REALISTIC_REPLICA_MAX_IDLE_WAIT
DEFAULT_CLEAN_DURATION = REALISTIC_CLEAN_DURATION


def _broker_index(i: int | None, index: int | None) -> int:
    """The one broker index given as ``i`` or ``index``.

    Raises:
        InvalidArgumentError: neither or both given.
    """
    if i is not None and index is None:
        return i
    if index is not None and i is None:
        return index
    raise InvalidArgumentError("give the broker's index once: as i (or index=)")


class LiftbridgeCluster:
    """An emulated Liftbridge cluster of ``brokers`` brokers sharing one NATS server.

    Usable as ``async with LiftbridgeCluster(...) as cluster`` (or ``await
    cluster.start()`` / ``await cluster.stop()``).

    Args:
        brokers: number of brokers (>= 1); their ids are ``"broker-0"``, ``"broker-1"``, ...
        nats_url: the NATS server the brokers use. When ``None`` the cluster starts
            (and stops) a nats-server of its own.
        host: the loopback address the brokers listen on.
        cursor_partitions: partitions of the internal ``__cursors`` stream (0 disables
            cursors, as on a server without ``cursors.stream.partitions``).
        server_credentials: serve TLS with these credentials (e.g.
            ``grpc.ssl_server_credentials([(key, chain)])``) instead of plaintext.
        metadata_delay: seconds after which brokers other than the metadata leader
            apply a metadata change (Raft apply lag); the default,
            ``REALISTIC_METADATA_DELAY`` (0.05 s), behaves like a real cluster; 0: at once.
        replica_max_idle_wait: seconds a caught-up follower waits between fetches
            (Liftbridge's ``clustering.replica.max.idle.wait``, 10 s by default on
            the server); the default, ``REALISTIC_REPLICA_MAX_IDLE_WAIT`` (0.2 s), keeps
            tests fast; 0: replicated partitions commit at once.
        clean_duration: seconds a partition's cleaner takes for each segment it
            deletes or rewrites (compaction rewrites every sealed segment each time);
            meanwhile a reader opened on one of them fails, as on the server ("Failed
            to create stream reader: segment has been closed"). The default,
            ``REALISTIC_CLEAN_DURATION`` (0.01 s); 0: at once.
        ports: the brokers' ports, one per broker in broker order (0: a free one);
            free ports when ``None``. A port in use fails :meth:`start` with ``OSError``.
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        nats_url: str | None = None,
        host: str = "127.0.0.1",
        cursor_partitions: int = 1,
        server_credentials: grpc.ServerCredentials | None = None,
        metadata_delay: float = DEFAULT_METADATA_DELAY,
        replica_max_idle_wait: float = DEFAULT_REPLICA_MAX_IDLE_WAIT,
        clean_duration: float = DEFAULT_CLEAN_DURATION,
        ports: Sequence[int] | None = None,
    ) -> None:
        check_int("brokers", brokers, minimum=1)
        if ports is not None:
            ports = list(ports)
            if len(ports) != brokers:
                raise InvalidArgumentError(
                    f"ports must give one port per broker ({brokers}), got {ports}"
                )
            for port in ports:
                if check_int("port", port, minimum=0) > 65535:
                    raise InvalidArgumentError(f"port must be at most 65535, got {port}")
        check_int("cursor_partitions", cursor_partitions, minimum=0)
        metadata_delay = check_float("metadata_delay", metadata_delay, inclusive=True)
        replica_max_idle_wait = check_float(
            "replica_max_idle_wait", replica_max_idle_wait, inclusive=True
        )
        clean_duration = check_float("clean_duration", clean_duration, inclusive=True)
        self._nats_url = nats_url
        self._own_nats: NatsServer | None = None
        self._host = host
        ids = [f"broker-{i}" for i in range(brokers)]
        self._state = ClusterState(
            ids,
            cursor_partitions=cursor_partitions,
            metadata_delay=metadata_delay,
            replica_max_idle_wait=replica_max_idle_wait,
            clean_duration=clean_duration,
        )
        self._brokers = [Broker(i, self._state, "", host, self) for i in ids]
        for i, b in enumerate(self._brokers):
            b.credentials = server_credentials
            b.port = ports[i] if ports is not None else 0
        self._ingester = Ingester(self._state)
        self._lock = asyncio.Lock()
        self._started = False
        # the auto-pause loop and the resyncs; a new owner for each start()
        self._tasks = TaskOwner("LiftbridgeCluster")
        self._resync: MonotonicTimer | None = None  # once lagging brokers caught up

    # -- public API ----------------------------------------------------------

    @property
    def addresses(self) -> list[str]:
        """``"host:port"`` of every broker, in broker order (stopped ones included)."""
        return [b.address for b in self._brokers]

    @property
    def nats_url(self) -> str:
        """The URL of the NATS server the brokers use."""
        if self._nats_url is None:
            raise RuntimeError("the cluster is not started: use `async with` or `await start()`")
        return self._nats_url

    @property
    def broker_ids(self) -> list[str]:
        """The broker ids, in broker order."""
        return [b.id for b in self._brokers]

    def is_running(self, index: int) -> bool:
        """Whether broker ``index`` is serving."""
        return self._broker(index).running

    async def start(self) -> None:
        """Start the NATS server (when the cluster owns one) and every broker."""
        if self._started:
            return
        if self._nats_url is None:
            self._own_nats = NatsServer(jetstream=False)
            await asyncio.to_thread(self._own_nats.start)
            self._nats_url = self._own_nats.url
        self._started = True
        try:
            await self._ingester.start(self._nats_url)
            for b in self._brokers:
                b.nats_url = self._nats_url
                await b.start()
            await self._ingester.sync()
            self._state.start_cleaners()
            self._tasks = TaskOwner("LiftbridgeCluster")
            self._tasks.start(self._auto_pause_loop(), name="auto-pause")
        except BaseException:
            await self.stop()
            raise
        log.debug("liftbridge emulator up: %s", self.addresses)

    async def stop(self) -> None:
        """Stop every broker (and the NATS server the cluster started).

        Raises:
            Exception: the first error a task of the cluster (auto-pause, resync)
                failed with, once everything is stopped.
        """
        self._state.stop_cleaners()
        if self._resync is not None:
            self._resync.cancel()
            self._resync = None
        await self._tasks.aclose()
        for b in self._brokers:
            await b.stop()
        await self._ingester.stop()
        self._started = False
        if self._own_nats is not None:
            await asyncio.to_thread(self._own_nats.close)  # its temporary folder too
            self._own_nats = None
            self._nats_url = None
        failure = self._tasks.failure
        if failure is not None:
            self._tasks = TaskOwner("LiftbridgeCluster")  # raised once
            raise failure

    def advertise(self, index: int, address: str | None) -> None:
        """Make broker ``index`` give ``address`` (``"host:port"``) as its own in the
        cluster metadata, e.g. a ``FaultProxy`` in front of it, so clients reach it only
        through that address; ``None`` gives its real address again.

        Raises:
            IndexError: for an index outside ``range(brokers)``.
            InvalidArgumentError: ``address`` is not ``"host:port"``.
        """
        broker = self._broker(index)
        if address is None:
            broker.advertised = None
            return
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise InvalidArgumentError(f"address must be 'host:port', got {address!r}")
        broker.advertised = (host, int(port))

    async def stop_broker(self, i: int | None = None, *, index: int | None = None) -> None:
        """Stop broker ``i``: its port closes, its subscriptions end with UNAVAILABLE,
        and leadership of its partitions moves to a live broker.

        Args:
            i: the broker's index, positionally or as ``i=`` (the API contract's
                name) or ``index=``.

        Raises:
            IndexError: for an index outside ``range(brokers)``.
        """
        broker = self._broker(_broker_index(i, index))
        async with self._lock:
            if not broker.running:
                return
            await broker.stop()
            self._state.broker_down(broker.id)
            await self._sync_all()

    async def start_broker(self, i: int | None = None, *, index: int | None = None) -> None:
        """Start broker ``i`` again on the same port; it rejoins the ISR of its
        partitions (leadership stays where it moved).

        Args:
            i: the broker's index, as for :meth:`stop_broker`.

        Raises:
            IndexError: for an index outside ``range(brokers)``.
        """
        broker = self._broker(_broker_index(i, index))
        async with self._lock:
            if broker.running:
                return
            self._state.broker_up(broker.id)
            await broker.start()
            await self._sync_all()

    async def __aenter__(self) -> LiftbridgeCluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- hooks used by the brokers ------------------------------------------

    def live_brokers(self) -> list[Broker]:
        return [b for b in self._brokers if b.running]

    async def leadership_changed(self) -> None:
        await self._sync_all()

    # -- internals -------------------------------------------------------------

    def _broker(self, index: int) -> Broker:
        check_int("index", index, minimum=0)
        if index >= len(self._brokers):
            raise IndexError(
                f"broker index {index} out of range: the cluster has {len(self._brokers)} brokers"
            )
        return self._brokers[index]

    async def _sync_all(self) -> None:
        await self._ingester.sync()
        state = self._state
        if state.metadata_delay > 0 and self._started:
            # The partition leaders apply deletes and pauses late: subscribe
            # again (unsubscribe) once they have.
            loop = asyncio.get_running_loop()
            if state.quiet_at > time.monotonic():
                if self._resync is not None:
                    self._resync.cancel()
                self._resync = MonotonicTimer(loop, state.quiet_at + 0.001, self._resync_now)

    def _resync_now(self) -> None:
        self._resync = None
        if not self._started or self._tasks.closed:
            return
        self._tasks.start(self._ingester.sync(), name="resync")

    async def _auto_pause_loop(self) -> None:
        # Streams created with autoPauseTime pause when idle, like on the server.
        while True:
            await asyncio.sleep(_AUTO_PAUSE_CHECK)
            if self._state.auto_pause(time.time_ns()):
                await self._sync_all()
