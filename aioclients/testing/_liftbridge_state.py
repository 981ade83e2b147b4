"""Cluster state shared by every emulated Liftbridge broker.

A real Liftbridge cluster replicates its metadata with Raft and each partition
log among its replicas. The emulator keeps one copy of everything in process:
the brokers only differ in which partitions they lead, so a leader change never
loses or duplicates a message (what a real cluster guarantees for committed
messages).

A partition log stores each message twice over: the serialized ``Message``
that Subscribe sends (built once, when the message is appended) and its
timestamp (for TIMESTAMP start and stop positions). Readers that reach the end
wait on one future per partition, resolved by the next append or state change,
so a burst of appends wakes each reader once.

What a real cluster does with lag, the emulator reproduces on purpose (the
client must cope with it; the real numbers are in the class docstrings):

* Metadata (streams, partitions, pause / read-only flags, consumer groups) is
  applied at once on the metadata leader (the first live broker) and
  ``metadata_delay`` seconds later on the others, like Raft apply lag. A
  partition's leader sees a new stream at once (CreateStream waits for it), and
  with it every earlier change (Raft applies in log order: the leader of a
  re-created stream has applied the old one's delete); later deletes, pauses
  and read-only flips reach it through the same lag. Every broker answers from
  its own view (:meth:`ClusterState.view_time`).
* The high watermark of a replicated partition (ISR > 1) advances only after
  the followers fetch (:meth:`ClusterState.replicate`): a follower that is
  caught up sleeps ``replica_max_idle_wait`` and is woken by the leader when
  data comes, except for the first message of a new partition (as in
  Liftbridge v1.9.0, where that message waits for the idle fetch).
"""

from __future__ import annotations

import asyncio
import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aioclients.liftbridge._pb import api_pb2
from aioclients.testing._liftbridge_log import (
    LogConfig,
    SegmentedLog,
    TimestampLookupError,
    record_size,
)

__all__ = (
    "CURSORS_STREAM",
    "ClusterState",
    "ConsumerGroup",
    "EventTimestamps",
    "GroupMember",
    "GroupSnapshot",
    "MonotonicTimer",
    "Partition",
    "RpcError",
    "Stream",
)

CURSORS_STREAM = "__cursors"
_RESERVED_STREAMS = (CURSORS_STREAM, "__activity")


class RpcError(Exception):
    """An RPC failure: the status code name (``grpc.StatusCode`` member) and details."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details


def now_ns() -> int:
    return time.time_ns()


_NEVER = -math.inf


@dataclass(slots=True)
class EventTimestamps:
    """First and latest time (ns) something happened; 0 = never."""

    first: int = 0
    latest: int = 0

    def update(self, ts: int) -> None:
        if self.first == 0:
            self.first = ts
        self.latest = ts

    def to_proto(self) -> api_pb2.PartitionEventTimestamps:
        return api_pb2.PartitionEventTimestamps(
            firstTimestamp=self.first, latestTimestamp=self.latest
        )


@dataclass(slots=True)
class GroupMember:
    """The one consumer of a group subscribed to a partition (a newer epoch replaces it)."""

    consumer_id: str
    epoch: int
    replaced: bool = False


class Partition:
    """One stream partition: its log, its leader and replica set, pause/readonly flags."""

    def __init__(self, stream: Stream, partition_id: int, replicas: list[str]) -> None:
        self.stream = stream
        self.id = partition_id
        self.subject = stream.subject if partition_id == 0 else f"{stream.subject}.{partition_id}"
        self.replicas = list(replicas)
        self.isr = list(replicas)
        self.leader = replicas[0]
        self.leader_epoch = 0
        #: the log: segments, retention and compaction as Liftbridge keeps them
        #: (removed entries are emptied but keep their place: offsets stay indexes)
        self.log = SegmentedLog(stream.log_config, created=now_ns())
        #: the cleaner's timer (see ClusterState.arm_cleaner)
        self.cleaner: asyncio.TimerHandle | None = None
        self.paused = False
        self.readonly = False
        self.deleted = False
        self.messages_received = EventTimestamps()
        self.pause_timestamps = EventTimestamps()
        self.readonly_timestamps = EventTimestamps()
        self.subscriber_count = 0
        self.last_activity = now_ns()  # last append or resume, for auto-pause
        self.group_members: dict[str, GroupMember] = {}
        self._waiter: asyncio.Future[None] | None = None
        #: entries committed (high watermark + 1) on the leader
        self.committed = 0
        #: set on replicated partitions: called after each append instead of committing
        self.on_append: Callable[[Partition], None] | None = None
        #: per follower: entries it has fetched, and the high watermark it last learned
        self.follower_end: dict[str, int] = {}
        self.follower_hw: dict[str, int] = {}
        #: whether the leader wakes caught-up followers on the next append (not
        #: for the first message of a new partition: see ClusterState.replicate)
        self.notify_armed = False
        self.last_fetch = time.monotonic()  # the followers' last fetch round
        self.fetch_timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self.fetch_idle = False  # fetch_timer is the followers' idle wait (a notify preempts it)
        #: ALL-policy acks waiting for the high watermark: (offset, send)
        self.pending_acks: list[tuple[int, Callable[[], None]]] = []
        #: (monotonic time, paused, readonly) after each recent flag change, for
        #: the brokers that apply it later; empty when nothing lags
        self.flag_history: list[tuple[float, bool, bool]] = []
        #: when the partition was first paused: Liftbridge v1.9.0 reports
        #: ``paused`` true from then on, even after a resume
        self.first_paused_at: float | None = None
        self.deleted_at = math.inf

    # -- log ---------------------------------------------------------------

    @property
    def entries(self) -> list[bytes]:
        """Serialized ``Message`` by offset (b"" where retention or compaction removed it)."""
        return self.log.entries

    @property
    def timestamps(self) -> list[int]:
        return self.log.timestamps

    @property
    def newest_offset(self) -> int:
        return self.log.newest_offset

    @property
    def oldest_offset(self) -> int:
        """The oldest offset kept (-1: none, the log is empty or emptied by retention)."""
        return self.log.oldest_offset

    def append(
        self,
        *,
        key: bytes,
        value: bytes,
        headers: dict[str, bytes],
        subject: str,
        reply: str,
        timestamp: int | None = None,
    ) -> tuple[int, int]:
        """Append a message received at ``timestamp`` (ns, default now); returns its
        (offset, timestamp)."""
        msg = api_pb2.Message(
            key=key, value=value, subject=subject, replySubject=reply, headers=headers
        )
        return self.append_message(msg, timestamp)

    def append_message(
        self, msg: api_pb2.Message, timestamp: int | None = None, size: int | None = None
    ) -> tuple[int, int]:
        """Append ``msg`` (key, value, subject, reply subject and headers set) received
        at ``timestamp`` (ns, default now); this fills in its offset, timestamp, stream
        and partition. ``size``: its :func:`record_size` when the caller knows it.
        Returns its (offset, timestamp)."""
        ts = now_ns() if timestamp is None else timestamp
        log = self.log
        timestamps = log.timestamps
        if timestamps and ts < timestamps[-1]:
            ts = timestamps[-1]  # keep the log's timestamps monotonic
        offset = log.next_offset
        msg.offset = offset
        msg.timestamp = ts
        msg.stream = self.stream.name
        msg.partition = self.id
        if size is None:
            size = record_size(msg.key, msg.value, msg.headers)
        # The server stamps the message and checks the segment's age at the same time.
        log.append(msg.SerializeToString(), size=size, key=msg.key, timestamp=ts, now=ts)
        self.messages_received.update(ts)
        self.last_activity = max(self.last_activity, ts)
        hook = self.on_append
        if hook is None:
            self.committed = offset + 1
            self.wake()
        else:
            hook(self)
        return offset, ts

    def commit(self, count: int) -> None:
        """Advance the high watermark to ``count - 1``; send the acks it covers."""
        if count <= self.committed:
            return
        self.committed = count
        pending = self.pending_acks
        if pending:
            i = 0
            while i < len(pending) and pending[i][0] < count:
                pending[i][1]()
                i += 1
            del pending[:i]
        self.wake()

    def replica_hw(self, broker_id: str) -> int:
        """The high watermark broker ``broker_id`` knows (its own log's, -1 for a non-replica)."""
        if broker_id == self.leader:
            return self.committed - 1
        if broker_id not in self.replicas:
            return -1
        if self.on_append is None:
            return self.committed - 1
        return self.follower_hw.get(broker_id, -1)

    def replica_newest(self, broker_id: str) -> int:
        """The newest offset in broker ``broker_id``'s copy of the log (-1 for a non-replica)."""
        if broker_id == self.leader:
            return len(self.entries) - 1
        if broker_id not in self.replicas:
            return -1
        if self.on_append is None:
            return len(self.entries) - 1
        return self.follower_end.get(broker_id, 0) - 1

    def flags_at(self, t: float | None) -> tuple[bool, bool]:
        """(paused, readonly) as applied by time ``t`` (None: now)."""
        if t is not None:
            for ts, paused, readonly in reversed(self.flag_history):
                if ts <= t:
                    return paused, readonly
        return self.paused, self.readonly

    def deleted_by(self, t: float | None) -> bool:
        """Whether the stream's deletion is applied by time ``t`` (None: now)."""
        return self.deleted and (t is None or self.deleted_at <= t)

    def offset_at_or_after(self, ts: int) -> int:
        """Where a TIMESTAMP start position starts (the first kept offset whose
        timestamp is >= ``ts``, searched segment by segment as the server does).

        Raises:
            RpcError: INTERNAL, when the search meets a segment a clean closed.
        """
        try:
            return self.log.earliest_offset_after_timestamp(ts)
        except TimestampLookupError as e:
            raise RpcError("INTERNAL", f"Failed to lookup offset for timestamp: {e}") from None

    def offset_at_or_before(self, ts: int) -> int:
        """Where a STOP_TIMESTAMP subscription stops.

        Raises:
            RpcError: INTERNAL, as the server answers when the lookup fails (``ts`` before
                the first kept message, or an empty segment met on the way).
        """
        try:
            return self.log.latest_offset_before_timestamp(ts)
        except TimestampLookupError as e:
            raise RpcError("INTERNAL", f"Failed to lookup offset for timestamp: {e}") from None

    # -- waiting -----------------------------------------------------------

    def wake(self) -> None:
        """Wake every reader waiting for this partition to change."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def changed(self) -> asyncio.Future[None]:
        """A future resolved at the next append or state change."""
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter

    # -- metadata ----------------------------------------------------------

    def to_proto(
        self, broker_id: str | None = None, t: float | None = None
    ) -> api_pb2.PartitionMetadata:
        """The metadata broker ``broker_id`` gives (its own offsets and view at time
        ``t``; the leader's when None)."""
        who = self.leader if broker_id is None else broker_id
        paused, readonly = self.flags_at(t)
        first = self.first_paused_at
        return api_pb2.PartitionMetadata(
            id=self.id,
            leader=self.leader,
            replicas=self.replicas,
            isr=self.isr,
            highWatermark=self.replica_hw(who),
            newestOffset=self.replica_newest(who),
            # Sticky, as on Liftbridge v1.9.0 (see first_paused_at).
            paused=paused or (first is not None and (t is None or first <= t)),
            readonly=readonly,
            messagesReceivedTimestamps=self.messages_received.to_proto(),
            pauseTimestamps=self.pause_timestamps.to_proto(),
            readonlyTimestamps=self.readonly_timestamps.to_proto(),
        )


class Stream:
    """A stream: a name, a NATS subject, its partitions and its creation options."""

    def __init__(self, request: api_pb2.CreateStreamRequest) -> None:
        self.name = request.name
        self.subject = request.subject
        self.group = request.group
        self.config = api_pb2.CreateStreamRequest()
        self.config.CopyFrom(request)
        self.creation_timestamp = now_ns()
        self.created_at = time.monotonic()
        self.deleted_at = math.inf
        self.log_config = log_config(self.config)
        self.partitions: dict[int, Partition] = {}
        self.resume_all = False
        #: optimistic concurrency control (checked for every message, so kept as a flag)
        self.concurrency_control = self.config.HasField("optimisticConcurrencyControl") and bool(
            self.config.optimisticConcurrencyControl.value
        )

    def leaders(self) -> set[str]:
        return {p.leader for p in self.partitions.values()}

    def to_proto(
        self, broker_id: str | None = None, t: float | None = None
    ) -> api_pb2.StreamMetadata:
        return api_pb2.StreamMetadata(
            name=self.name,
            subject=self.subject,
            partitions={pid: p.to_proto(broker_id, t) for pid, p in self.partitions.items()},
            creationTimestamp=self.creation_timestamp,
        )


@dataclass(slots=True)
class ConsumerGroup:
    """A consumer group: members, the streams each wants, assignments by epoch."""

    group_id: str
    coordinator: str
    epoch: int = 0
    members: dict[str, list[str]] = field(default_factory=dict)  # consumer -> streams
    last_seen: dict[str, float] = field(default_factory=dict)
    assignments: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    #: members that reported the coordinator, and until when their reports count
    witnesses: set[str] = field(default_factory=set)
    witnesses_until: float = 0.0

    def snapshot(self) -> GroupSnapshot:
        return GroupSnapshot(
            self.coordinator,
            self.epoch,
            frozenset(self.members),
            {m: {s: list(p) for s, p in a.items()} for m, a in self.assignments.items()},
        )


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """A consumer group as one broker knows it (what it answers from)."""

    coordinator: str
    epoch: int
    members: frozenset[str]
    assignments: dict[str, dict[str, list[int]]]


def log_config(req: api_pb2.CreateStreamRequest) -> LogConfig:
    """The log limits a CreateStream request sets (the server's defaults for the rest)."""

    def opt(name: str) -> Any:
        return getattr(req, name).value if req.HasField(name) else None

    return LogConfig.from_stream_config(
        segment_max_bytes=opt("segmentMaxBytes"),
        segment_max_age_ms=opt("segmentMaxAge"),
        retention_max_bytes=opt("retentionMaxBytes"),
        retention_max_messages=opt("retentionMaxMessages"),
        retention_max_age_ms=opt("retentionMaxAge"),
        cleaner_interval_ms=opt("cleanerInterval"),
        compact=opt("compactEnabled"),
    )


def is_valid_subject(subject: str) -> bool:
    """A NATS subject as the server checks it: no whitespace, no empty token."""
    if not subject or any(c in subject for c in " \t\r\n"):
        return False
    return all(subject.split("."))


class ClusterState:
    """Streams, cursors and consumer groups of one emulated cluster."""

    def __init__(
        self,
        broker_ids: list[str],
        *,
        cursor_partitions: int = 1,
        metadata_delay: float = 0.0,
        replica_max_idle_wait: float = 0.0,
        clean_duration: float = 0.0,
    ) -> None:
        self.broker_ids = list(broker_ids)
        #: seconds a log's Clean() takes per segment it deletes or rewrites (readers
        #: see the old segments meanwhile)
        self.clean_duration = clean_duration
        #: seconds the brokers other than the metadata leader apply metadata late
        self.metadata_delay = metadata_delay
        #: seconds a caught-up follower waits between fetches (0: commit at once)
        self.replica_max_idle_wait = replica_max_idle_wait
        #: from this monotonic time on every broker's view is the current state
        self.quiet_at = _NEVER
        #: per broker: a (monotonic) time up to which it has applied metadata in
        #: any case (the creation of a stream whose partition it leads, and so,
        #: in Raft log order, everything before it)
        self.applied_at: dict[str, float] = {}
        #: a Raft log index: one per metadata change; group epochs are taken from it
        self.raft_index = 2
        #: deleted streams that a lagging broker may still see
        self.deleted_streams: list[Stream] = []
        #: per group: (monotonic time, group as of then or None) for lagging brokers
        self.group_history: dict[str, list[tuple[float, GroupSnapshot | None]]] = {}
        self.live: set[str] = set(broker_ids)
        self.streams: dict[str, Stream] = {}
        self.cursors: dict[tuple[str, str, int], int] = {}
        self.groups: dict[str, ConsumerGroup] = {}
        # Ack inboxes owned by the emulator's own brokers (Publish and PublishAsync
        # sessions): the ingester hands their acks over in process instead of
        # through NATS (see Ingester.send_ack).
        self.local_acks: dict[str, Callable[[api_pb2.Ack], None]] = {}
        self._placement = 0
        #: whether partition cleaners run (between start_cleaners and stop_cleaners)
        self.cleaners_running = False
        if cursor_partitions > 0:
            cursors = self._create(
                api_pb2.CreateStreamRequest(
                    name=CURSORS_STREAM,
                    subject=f"_liftbridge.{CURSORS_STREAM}",
                    partitions=cursor_partitions,
                    replicationFactor=1,
                )
            )
            cursors.created_at = _NEVER  # there from the start, on every broker

    # -- lagging views -------------------------------------------------------

    @property
    def metadata_leader(self) -> str:
        """The broker that applies metadata changes first (the first live one)."""
        for b in self.broker_ids:
            if b in self.live:
                return b
        return self.broker_ids[0]

    def view_time(self, broker_id: str) -> float | None:
        """The (monotonic) time up to which broker ``broker_id`` has applied metadata
        changes; None when its view is the current state (the usual, cheap case)."""
        if self.metadata_delay <= 0:
            return None
        now = time.monotonic()
        if now >= self.quiet_at or broker_id == self.metadata_leader:
            return None
        t = now - self.metadata_delay
        return max(t, self.applied_at.get(broker_id, t))

    def stream_view(self, broker_id: str, name: str) -> Stream | None:
        """Stream ``name`` as broker ``broker_id`` knows it (None: unknown to it)."""
        s = self.streams.get(name)
        t = self.view_time(broker_id)
        if t is None:
            return s
        if s is not None and (s.created_at <= t or broker_id in s.leaders()):
            return s  # a partition leader has it at once: CreateStream waits for it
        for d in reversed(self.deleted_streams):
            if d.name == name and d.deleted_at > t and (d.created_at <= t):
                return d
        return None

    def streams_view(self, broker_id: str) -> dict[str, Stream]:
        """Every stream broker ``broker_id`` knows."""
        t = self.view_time(broker_id)
        if t is None:
            return self.streams
        out = {
            n: s for n, s in self.streams.items() if s.created_at <= t or broker_id in s.leaders()
        }
        for d in self.deleted_streams:
            if d.name not in out and d.created_at <= t < d.deleted_at:
                out[d.name] = d
        return out

    def partition_view(self, broker_id: str, stream: str, partition: int) -> Partition | None:
        s = self.stream_view(broker_id, stream)
        return None if s is None else s.partitions.get(partition)

    def group_view(self, broker_id: str, group_id: str) -> GroupSnapshot | None:
        """Consumer group ``group_id`` as broker ``broker_id`` knows it."""
        t = self.view_time(broker_id)
        hist = self.group_history.get(group_id)
        if t is None or not hist:
            g = self.groups.get(group_id)
            return None if g is None else g.snapshot()
        for ts, snap in reversed(hist):
            if ts <= t:
                return snap
        return None

    def _next_index(self) -> int:
        self.raft_index += 1
        return self.raft_index

    def _lagging(self) -> float | None:
        """Start recording a change for lagging brokers: returns now, or None when
        nothing lags; ``fresh`` history (older than the lag) may be dropped."""
        if self.metadata_delay <= 0:
            return None
        return time.monotonic()

    def _extend(self, now: float) -> None:
        self.quiet_at = max(self.quiet_at, now + self.metadata_delay)

    def _record_flags(self, p: Partition, paused: bool, readonly: bool) -> None:
        """Record a flag change of ``p`` (its flags before were ``paused``, ``readonly``)."""
        now = self._lagging()
        if now is None:
            return
        history = p.flag_history
        if now >= self.quiet_at:
            history.clear()  # every broker had the previous state
        if not history:
            history.append((_NEVER, paused, readonly))
        history.append((now, p.paused, p.readonly))
        self._extend(now)
        _later(self.metadata_delay, p.wake)  # readers on lagging brokers look again

    def record_group(self, group_id: str) -> None:
        now = self._lagging()
        if now is None:
            return
        hist = self.group_history.setdefault(group_id, [])
        if now >= self.quiet_at and hist:
            hist[:] = [(_NEVER, hist[-1][1])]
        g = self.groups.get(group_id)
        hist.append((now, None if g is None else g.snapshot()))
        self._extend(now)

    # -- replication -----------------------------------------------------------

    def _on_replicated_append(self, p: Partition) -> None:
        """After an append to a replicated partition: schedule the followers' fetch.

        A caught-up follower waits ``replica_max_idle_wait`` between fetches; the
        leader wakes it when new data comes, but (Liftbridge v1.9.0) not for the
        first message of a new partition, which so waits for the idle fetch."""
        timer = p.fetch_timer
        if timer is not None:
            if not (p.fetch_idle and p.notify_armed):
                return  # a fetch is coming
            timer.cancel()  # the leader wakes the idle followers
            p.fetch_timer = None
        if len(p.isr) <= 1:
            p.commit(len(p.entries))
            return
        loop = asyncio.get_running_loop()
        p.fetch_idle = False
        if p.notify_armed:
            p.fetch_timer = loop.call_soon(self._fetch_round, p)
            return
        wait = self.replica_max_idle_wait
        now = loop.time()
        due = p.last_fetch + wait
        if due < now:
            due = p.last_fetch + wait * math.ceil((now - p.last_fetch) / wait)
        p.fetch_timer = loop.call_later(due - now, self._fetch_round, p)

    def _fetch_round(self, p: Partition) -> None:
        """Every live ISR follower fetches from the leader once: the leader learns
        what they have (and commits it), they get the rest and the high watermark
        as it was before (the leader commits asynchronously: measured on v1.9.0, a
        follower learns a new high watermark on its next fetch, up to an idle wait
        later)."""
        p.fetch_timer = None
        p.fetch_idle = False
        if p.deleted:
            return
        end = len(p.entries)
        followers = [f for f in p.isr if f != p.leader and f in self.live]
        hw = p.committed - 1
        if followers:
            p.commit(min(end, min(p.follower_end.get(f, 0) for f in followers)))
        else:
            p.commit(end)
        got = False
        for f in followers:
            if p.follower_end.get(f, 0) < end:
                p.follower_end[f] = end
                got = True
            p.follower_hw[f] = hw
        loop = asyncio.get_running_loop()
        p.last_fetch = loop.time()
        if got:
            # A follower that got data fetches again at once (which commits it).
            p.fetch_timer = loop.call_soon(self._fetch_round, p)
        else:
            if end > 0:
                p.notify_armed = True
            if hw < p.committed - 1:
                # Caught up, but behind on the high watermark until the idle fetch.
                p.fetch_timer = loop.call_later(self.replica_max_idle_wait, self._fetch_round, p)
                p.fetch_idle = True
        p.wake()  # readers on followers see their new high watermark

    def _settle_replicas(self, p: Partition) -> None:
        """Leadership or the ISR changed: the emulator's logs are shared, so every
        replica has everything; commit it."""
        end = len(p.entries)
        for f in p.replicas:
            if f != p.leader:
                p.follower_end[f] = end
                p.follower_hw[f] = end - 1
        p.commit(end)

    # -- the cleaner -----------------------------------------------------------

    def start_cleaners(self) -> None:
        """Run every open partition's cleaner (on the running loop)."""
        self.cleaners_running = True
        for stream in self.streams.values():
            for p in stream.partitions.values():
                if not p.paused:
                    self.arm_cleaner(p)

    def stop_cleaners(self) -> None:
        self.cleaners_running = False
        for stream in self.streams.values():
            for p in stream.partitions.values():
                self.disarm_cleaner(p)

    def arm_cleaner(self, p: Partition) -> None:
        """Schedule the next cleaner tick of ``p``'s log (when the cleaners run)."""
        if not self.cleaners_running or p.deleted:
            return
        self.disarm_cleaner(p)
        delay = max(0.0, (p.log.get_timer() - now_ns()) / 1e9)
        p.cleaner = asyncio.get_running_loop().call_later(delay, self._clean, p)

    @staticmethod
    def disarm_cleaner(p: Partition) -> None:
        if p.cleaner is not None:
            p.cleaner.cancel()
            p.cleaner = None
        p.log.settle()  # a clean in progress ends with the log's closing

    def _clean(self, p: Partition) -> None:
        p.cleaner = None
        # Readers are not woken: one waiting for data meets a deleted segment
        # when it reads next, as on the server.
        log = p.log
        log.handle_timer(now_ns(), hw=p.committed - 1, hold=self.clean_duration > 0)
        if log.cleaning:
            # Clean() takes a while, for each segment it deletes or rewrites: readers
            # see the old segments until it is done.
            p.cleaner = asyncio.get_running_loop().call_later(
                self.clean_duration * log.touched, self._settle, p
            )
            return
        self.arm_cleaner(p)

    def _settle(self, p: Partition) -> None:
        p.cleaner = None
        p.log.settle()
        self.arm_cleaner(p)

    # -- streams -----------------------------------------------------------

    def create_stream(self, req: api_pb2.CreateStreamRequest) -> None:
        if not req.name:
            raise RpcError("INVALID_ARGUMENT", "Name cannot be empty")
        if not is_valid_subject(req.subject):
            raise RpcError("INVALID_ARGUMENT", "Subject is invalid")
        if req.name in _RESERVED_STREAMS:
            raise RpcError("INVALID_ARGUMENT", "Stream is reserved")
        if req.partitions < 0:
            raise RpcError("INVALID_ARGUMENT", f"Invalid number of partitions {req.partitions}")
        if req.name in self.streams:
            raise RpcError("ALREADY_EXISTS", "stream already exists")
        self._create(req)

    def _create(self, req: api_pb2.CreateStreamRequest) -> Stream:
        rf = req.replicationFactor or 1
        live = [b for b in self.broker_ids if b in self.live]
        if rf == -1:
            rf = len(live)
        if rf <= 0:
            raise RpcError("INVALID_ARGUMENT", f"Invalid replicationFactor {rf}")
        if rf > len(live):
            raise RpcError(
                "INVALID_ARGUMENT", f"Invalid replicationFactor {rf}, cluster size {len(live)}"
            )
        try:
            stream = Stream(req)
        except ValueError as e:
            # Liftbridge v1.9.0 takes these and then misbehaves (a negative cleaner
            # interval panics its ticker); the emulator refuses them.
            raise RpcError("INVALID_ARGUMENT", str(e)) from None
        replicated = rf > 1 and self.replica_max_idle_wait > 0
        for pid in range(req.partitions or 1):
            # Spread leaders over the live brokers in turn, as a balanced cluster would.
            start = self._placement % len(live)
            self._placement += 1
            replicas = [live[(start + i) % len(live)] for i in range(rf)]
            p = stream.partitions[pid] = Partition(stream, pid, replicas)
            if replicated:
                p.on_append = self._on_replicated_append
            self.arm_cleaner(p)
        self.streams[stream.name] = stream
        self._next_index()
        now = self._lagging()
        if now is not None:
            self._extend(now)
            # CreateStream waits for the partition leaders to apply it: from now
            # on they also see every change made before it (a delete of a stream
            # of the same name among them), not a view older than the creation.
            for leader in stream.leaders():
                self.applied_at[leader] = max(self.applied_at.get(leader, 0.0), stream.created_at)
        return stream

    def delete_stream(self, name: str) -> Stream:
        if name in _RESERVED_STREAMS:
            raise RpcError("INVALID_ARGUMENT", "Stream is reserved")
        stream = self.streams.pop(name, None)
        if stream is None:
            raise RpcError("NOT_FOUND", "stream does not exist")
        self._next_index()
        now = self._lagging()
        if now is not None:
            if now >= self.quiet_at:
                self.deleted_streams.clear()
            stream.deleted_at = now
            self.deleted_streams.append(stream)
            self._extend(now)
        for partition in stream.partitions.values():
            self.disarm_cleaner(partition)
            partition.deleted = True
            partition.deleted_at = stream.deleted_at
            partition.pending_acks.clear()
            partition.wake()
            if now is not None:
                _later(self.metadata_delay, partition.wake)
        for group in self.groups.values():
            if any(name in streams for streams in group.members.values()):
                self.rebalance(group)
        return stream

    def get_partition(self, stream: str, partition: int) -> Partition | None:
        s = self.streams.get(stream)
        return None if s is None else s.partitions.get(partition)

    def partitions_for(self, name: str, ids: list[int]) -> list[Partition]:
        """The named partitions (all of them when ``ids`` is empty) of stream ``name``."""
        stream = self.streams.get(name)
        if stream is None:
            raise RpcError("NOT_FOUND", "stream not found")
        if not ids:
            return list(stream.partitions.values())
        result = []
        for pid in ids:
            p = stream.partitions.get(pid)
            if p is None:
                raise RpcError("NOT_FOUND", "partition does not exist")
            result.append(p)
        return result

    def pause(self, name: str, ids: list[int], resume_all: bool) -> list[Partition]:
        partitions = self.partitions_for(name, ids)
        ts = now_ns()
        self._next_index()
        for p in partitions:
            if not p.paused:
                self._pause(p, ts)
        self.streams[name].resume_all = resume_all
        return partitions

    def _pause(self, p: Partition, ts: int) -> None:
        # The paused partition's log is closed, and its cleaner with it.
        self.disarm_cleaner(p)
        p.paused = True
        p.pause_timestamps.update(ts)
        if p.first_paused_at is None:
            p.first_paused_at = time.monotonic()
        self._record_flags(p, False, p.readonly)
        p.wake()

    def resume(self, partition: Partition) -> list[Partition]:
        """Resume ``partition`` (or every paused one when the stream asked for resume-all)."""
        stream = partition.stream
        if stream.resume_all:
            targets = [p for p in stream.partitions.values() if p.paused]
            stream.resume_all = False
        else:
            targets = [partition] if partition.paused else []
        ts = now_ns()
        if targets:
            self._next_index()
        for p in targets:
            p.paused = False
            p.pause_timestamps.update(ts)
            p.last_activity = ts
            # Resuming opens the log again: its cleaner ticks from now on.
            p.log.reopen(ts)
            self.arm_cleaner(p)
            if p.leader not in self.live:
                # Its leader died while it was paused: the replicas report it
                # once they replicate again, and a live one takes over (after
                # replica.max.leader.timeout on a real cluster; here at once, as
                # for a stopped broker).
                for gone in [b for b in p.isr if b not in self.live and b != p.leader]:
                    p.isr.remove(gone)
                self._move_leadership(p)
                if p.on_append is not None:
                    self._settle_replicas(p)
            # At once on every broker (a simplification: the publish or subscribe
            # that resumes must find the partition open where it goes next).
            p.flag_history.clear()
            p.wake()
        return targets

    def auto_pause(self, now: int) -> list[Partition]:
        """Pause partitions idle for longer than their stream's ``autoPauseTime`` (ms)."""
        paused = []
        for stream in self.streams.values():
            config = stream.config
            if not config.HasField("autoPauseTime") or config.autoPauseTime.value <= 0:
                continue
            idle_ns = config.autoPauseTime.value * 1_000_000
            spare_if_subscribed = config.HasField("autoPauseDisableIfSubscribers") and bool(
                config.autoPauseDisableIfSubscribers.value
            )
            for p in stream.partitions.values():
                if p.paused or now - p.last_activity <= idle_ns:
                    continue
                if spare_if_subscribed and p.subscriber_count > 0:
                    continue
                self._pause(p, now)
                paused.append(p)
        return paused

    def set_readonly(self, name: str, ids: list[int], readonly: bool) -> None:
        ts = now_ns()
        self._next_index()
        for p in self.partitions_for(name, ids):
            if p.readonly != readonly:
                p.readonly = readonly
                p.readonly_timestamps.update(ts)
                self._record_flags(p, p.paused, not readonly)
                p.wake()

    # -- brokers -----------------------------------------------------------

    def broker_down(self, broker_id: str) -> list[Partition]:
        """Mark a broker down; move leadership of its partitions. Returns the moved ones."""
        self.live.discard(broker_id)
        moved = []
        for stream in self.streams.values():
            for p in stream.partitions.values():
                if p.paused:
                    # A paused partition is closed on every replica: nothing
                    # replicates, so no follower reports its leader gone, and the
                    # dead broker leads it (and stays in its ISR) until it is
                    # resumed (Liftbridge v1.9.0; see resume()).
                    continue
                if broker_id in p.isr and len(p.isr) > 1:
                    p.isr.remove(broker_id)
                if p.leader == broker_id and self._move_leadership(p):
                    moved.append(p)
            for p in stream.partitions.values():
                if p.on_append is not None:
                    self._settle_replicas(p)
        # A group's coordinator stays where it is: Liftbridge v1.9.0 moves it only
        # when a majority of the members report it (ReportConsumerGroupCoordinator,
        # server/failover.go), which they do after the coordinator timeout.
        return moved

    def _move_leadership(self, p: Partition) -> bool:
        """Give the partition of a broker that is down to a live one (False: none is)."""
        gone = p.leader
        candidates = [b for b in p.isr if b in self.live]
        candidates += [b for b in self.broker_ids if b in self.live and b not in candidates]
        if not candidates:
            return False  # no broker left: the partition waits for one
        new_leader = candidates[0]
        p.leader = new_leader
        p.leader_epoch += 1
        if new_leader not in p.replicas:
            # The log is shared, so an outside broker can take over the
            # partition; it becomes a replica.
            p.replicas.append(new_leader)
        if new_leader not in p.isr:
            p.isr.append(new_leader)
        if gone in p.isr:
            p.isr.remove(gone)
        p.wake()
        return True

    def broker_up(self, broker_id: str) -> list[Partition]:
        """Mark a broker up; it rejoins the ISR of its partitions and leads orphaned ones."""
        self.live.add(broker_id)
        led = []
        for stream in self.streams.values():
            for p in stream.partitions.values():
                if p.leader not in self.live and not p.paused:
                    p.leader = broker_id
                    p.leader_epoch += 1
                    if broker_id not in p.replicas:
                        p.replicas.append(broker_id)
                    p.isr = [broker_id]
                    led.append(p)
                    p.wake()
                elif broker_id in p.replicas and broker_id not in p.isr:
                    p.isr.append(broker_id)
                if p.on_append is not None:
                    self._settle_replicas(p)
        return led

    def leader_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        partitions: dict[str, int] = {}
        leaders: dict[str, int] = {}
        for stream in self.streams.values():
            for p in stream.partitions.values():
                leaders[p.leader] = leaders.get(p.leader, 0) + 1
                for r in p.replicas:
                    partitions[r] = partitions.get(r, 0) + 1
        return partitions, leaders

    # -- cursors -----------------------------------------------------------

    def cursors_partition(self, cursor_id: str, stream: str, partition: int) -> Partition:
        """The ``__cursors`` partition that stores this cursor (CRC-32 of its key)."""
        cursors = self.streams.get(CURSORS_STREAM)
        if cursors is None:
            raise RpcError("INTERNAL", "Cursors stream does not exist")
        key = f"{cursor_id},{stream},{partition}".encode()
        pid = zlib.crc32(key) % len(cursors.partitions)
        return cursors.partitions[pid]

    # -- consumer groups ---------------------------------------------------

    def expire_members(self, now: float, timeout: float) -> None:
        """Drop members that have not fetched assignments for ``timeout`` seconds; an
        emptied group disappears, the others rebalance (what the coordinator does)."""
        for group_id, group in list(self.groups.items()):
            stale = [c for c, seen in group.last_seen.items() if now - seen > timeout]
            if not stale:
                continue
            for consumer in stale:
                group.members.pop(consumer, None)
                group.last_seen.pop(consumer, None)
            if group.members:
                self.rebalance(group)
            else:
                del self.groups[group_id]
                self.record_group(group_id)

    def rebalance(self, group: ConsumerGroup, *, epoch: int | None = None) -> None:
        """Assign every partition of the members' streams round-robin; the new epoch is
        ``epoch`` or the index of this change in the (Raft) log, as on the server."""
        group.epoch = self._next_index() if epoch is None else epoch
        self._assign(group)
        self.record_group(group.group_id)

    def _assign(self, group: ConsumerGroup) -> None:
        group.assignments = {member: {} for member in group.members}
        members = sorted(group.members)
        wanted: dict[str, list[str]] = {}
        for member in members:
            for s in group.members[member]:
                wanted.setdefault(s, []).append(member)
        for s in sorted(wanted):
            stream = self.streams.get(s)
            if stream is None:
                continue
            subscribers = wanted[s]
            for i, pid in enumerate(sorted(stream.partitions)):
                member = subscribers[i % len(subscribers)]
                group.assignments[member].setdefault(s, []).append(pid)


class MonotonicTimer:
    """Calls ``fn`` on ``loop`` once ``time.monotonic()`` has reached ``due``.

    The lag bookkeeping here runs on ``time.monotonic()``; ``loop.call_later`` alone
    may fire early by that clock on a loop whose own clock differs (uvloop's counts
    whole milliseconds from the start of the loop iteration), and a reader woken
    early would see the old state and wait for a wake that never comes. So the
    timer re-arms until the time has really come.
    """

    __slots__ = ("_due", "_fn", "_handle", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, due: float, fn: Callable[[], Any]) -> None:
        self._loop = loop
        self._due = due
        self._fn = fn
        self._handle = loop.call_later(max(0.0, due - time.monotonic()), self._fire)

    def _fire(self) -> None:
        left = self._due - time.monotonic()
        if left > 0:
            self._handle = self._loop.call_later(left, self._fire)
            return
        self._fn()

    def cancel(self) -> None:
        self._handle.cancel()


def _later(delay: float, fn: Callable[[], Any]) -> None:
    """Call ``fn`` in ``delay`` seconds (by ``time.monotonic()``) on the running loop
    (not at all without one)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    MonotonicTimer(loop, time.monotonic() + delay, fn)
