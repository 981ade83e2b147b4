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
"""

from __future__ import annotations

import asyncio
import bisect
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from aioclients.liftbridge._pb import api_pb2

__all__ = (
    "CURSORS_STREAM",
    "ClusterState",
    "ConsumerGroup",
    "EventTimestamps",
    "GroupMember",
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
        self.entries: list[bytes] = []
        #: The oldest offset still kept: retention (``retentionMaxMessages``) moves it up;
        #: entries below it are emptied but keep their place, so offsets stay indexes.
        self.log_start = 0
        self.timestamps: list[int] = []
        self.keys: list[bytes] = []
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

    # -- log ---------------------------------------------------------------

    @property
    def newest_offset(self) -> int:
        return len(self.entries) - 1

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

    def append_message(self, msg: api_pb2.Message, timestamp: int | None = None) -> tuple[int, int]:
        """Append ``msg`` (key, value, subject, reply subject and headers set) received
        at ``timestamp`` (ns, default now); this fills in its offset, timestamp, stream
        and partition. Returns its (offset, timestamp)."""
        ts = now_ns() if timestamp is None else timestamp
        timestamps = self.timestamps
        if timestamps and ts < timestamps[-1]:
            ts = timestamps[-1]  # keep the log's timestamps monotonic
        offset = len(self.entries)
        msg.offset = offset
        msg.timestamp = ts
        msg.stream = self.stream.name
        msg.partition = self.id
        self.entries.append(msg.SerializeToString())
        limit = self.stream.retention_max_messages
        if limit and offset + 1 - self.log_start > limit:
            # Liftbridge deletes whole segments; the emulator trims message by message
            # (as if every message had a segment of its own).
            start = offset + 1 - limit
            for old in range(self.log_start, start):
                self.entries[old] = b""
            self.log_start = start
        timestamps.append(ts)
        self.keys.append(msg.key)
        self.messages_received.update(ts)
        self.last_activity = max(self.last_activity, ts)
        self.wake()
        return offset, ts

    def offset_at_or_after(self, ts: int) -> int:
        """The first offset whose timestamp is >= ``ts`` (newest + 1 when none is)."""
        return bisect.bisect_left(self.timestamps, ts)

    def offset_at_or_before(self, ts: int) -> int:
        """The last offset whose timestamp is <= ``ts`` (-1 when none is)."""
        return bisect.bisect_right(self.timestamps, ts) - 1

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

    def to_proto(self) -> api_pb2.PartitionMetadata:
        newest = self.newest_offset
        return api_pb2.PartitionMetadata(
            id=self.id,
            leader=self.leader,
            replicas=self.replicas,
            isr=self.isr,
            highWatermark=newest,
            newestOffset=newest,
            paused=self.paused,
            readonly=self.readonly,
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
        self.retention_max_messages = (
            self.config.retentionMaxMessages.value
            if self.config.HasField("retentionMaxMessages")
            else 0
        )
        self.partitions: dict[int, Partition] = {}
        self.resume_all = False
        #: optimistic concurrency control (checked for every message, so kept as a flag)
        self.concurrency_control = self.config.HasField("optimisticConcurrencyControl") and bool(
            self.config.optimisticConcurrencyControl.value
        )

    def to_proto(self) -> api_pb2.StreamMetadata:
        return api_pb2.StreamMetadata(
            name=self.name,
            subject=self.subject,
            partitions={pid: p.to_proto() for pid, p in self.partitions.items()},
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


def is_valid_subject(subject: str) -> bool:
    """A NATS subject as the server checks it: no whitespace, no empty token."""
    if not subject or any(c in subject for c in " \t\r\n"):
        return False
    return all(subject.split("."))


class ClusterState:
    """Streams, cursors and consumer groups of one emulated cluster."""

    def __init__(self, broker_ids: list[str], *, cursor_partitions: int = 1) -> None:
        self.broker_ids = list(broker_ids)
        self.live: set[str] = set(broker_ids)
        self.streams: dict[str, Stream] = {}
        self.cursors: dict[tuple[str, str, int], int] = {}
        self.groups: dict[str, ConsumerGroup] = {}
        # Ack inboxes owned by the emulator's own brokers (Publish and PublishAsync
        # sessions): the ingester hands their acks over in process instead of
        # through NATS (see Ingester.send_ack).
        self.local_acks: dict[str, Callable[[api_pb2.Ack], None]] = {}
        self._placement = 0
        if cursor_partitions > 0:
            self._create(
                api_pb2.CreateStreamRequest(
                    name=CURSORS_STREAM,
                    subject=f"_liftbridge.{CURSORS_STREAM}",
                    partitions=cursor_partitions,
                    replicationFactor=1,
                )
            )

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
        stream = Stream(req)
        for pid in range(req.partitions or 1):
            # Spread leaders over the live brokers in turn, as a balanced cluster would.
            start = self._placement % len(live)
            self._placement += 1
            replicas = [live[(start + i) % len(live)] for i in range(rf)]
            stream.partitions[pid] = Partition(stream, pid, replicas)
        self.streams[stream.name] = stream
        return stream

    def delete_stream(self, name: str) -> Stream:
        if name in _RESERVED_STREAMS:
            raise RpcError("INVALID_ARGUMENT", "Stream is reserved")
        stream = self.streams.pop(name, None)
        if stream is None:
            raise RpcError("NOT_FOUND", "stream does not exist")
        for partition in stream.partitions.values():
            partition.deleted = True
            partition.wake()
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
        for p in partitions:
            if not p.paused:
                p.paused = True
                p.pause_timestamps.update(ts)
                p.wake()
        self.streams[name].resume_all = resume_all
        return partitions

    def resume(self, partition: Partition) -> list[Partition]:
        """Resume ``partition`` (or every paused one when the stream asked for resume-all)."""
        stream = partition.stream
        if stream.resume_all:
            targets = [p for p in stream.partitions.values() if p.paused]
            stream.resume_all = False
        else:
            targets = [partition] if partition.paused else []
        ts = now_ns()
        for p in targets:
            p.paused = False
            p.pause_timestamps.update(ts)
            p.last_activity = ts
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
                p.paused = True
                p.pause_timestamps.update(now)
                p.wake()
                paused.append(p)
        return paused

    def set_readonly(self, name: str, ids: list[int], readonly: bool) -> None:
        ts = now_ns()
        for p in self.partitions_for(name, ids):
            if p.readonly != readonly:
                p.readonly = readonly
                p.readonly_timestamps.update(ts)
                p.wake()

    # -- brokers -----------------------------------------------------------

    def broker_down(self, broker_id: str) -> list[Partition]:
        """Mark a broker down; move leadership of its partitions. Returns the moved ones."""
        self.live.discard(broker_id)
        moved = []
        for stream in self.streams.values():
            for p in stream.partitions.values():
                if broker_id in p.isr and len(p.isr) > 1:
                    p.isr.remove(broker_id)
                if p.leader != broker_id:
                    continue
                candidates = [b for b in p.isr if b in self.live]
                candidates += [b for b in self.broker_ids if b in self.live and b not in candidates]
                if not candidates:
                    continue  # no broker left: the partition waits for one
                new_leader = candidates[0]
                p.leader = new_leader
                p.leader_epoch += 1
                if new_leader not in p.replicas:
                    # The log is shared, so an outside broker can take over the
                    # partition; it becomes a replica.
                    p.replicas.append(new_leader)
                if new_leader not in p.isr:
                    p.isr.append(new_leader)
                if broker_id in p.isr:
                    p.isr.remove(broker_id)
                moved.append(p)
                p.wake()
        for group in self.groups.values():
            if group.coordinator == broker_id:
                live = [b for b in self.broker_ids if b in self.live]
                if live:
                    group.coordinator = live[0]
                    group.epoch += 1
        return moved

    def broker_up(self, broker_id: str) -> list[Partition]:
        """Mark a broker up; it rejoins the ISR of its partitions and leads orphaned ones."""
        self.live.add(broker_id)
        led = []
        for stream in self.streams.values():
            for p in stream.partitions.values():
                if p.leader not in self.live:
                    p.leader = broker_id
                    p.leader_epoch += 1
                    if broker_id not in p.replicas:
                        p.replicas.append(broker_id)
                    p.isr = [broker_id]
                    led.append(p)
                    p.wake()
                elif broker_id in p.replicas and broker_id not in p.isr:
                    p.isr.append(broker_id)
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

    def rebalance(self, group: ConsumerGroup) -> None:
        """Assign every partition of the members' streams round-robin; bump the epoch."""
        group.epoch += 1
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
