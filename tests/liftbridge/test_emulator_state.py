"""The emulator's cluster state on its own: placement, failover, groups, cursors, logs."""

from __future__ import annotations

import zlib

import pytest

from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.testing._liftbridge_state import (
    CURSORS_STREAM,
    ClusterState,
    ConsumerGroup,
    RpcError,
)

BROKERS = ["broker-0", "broker-1", "broker-2"]


def state(**kw: int) -> ClusterState:
    return ClusterState(BROKERS, **kw)


def create(s: ClusterState, name: str, **kw: int | str) -> None:
    s.create_stream(pb.CreateStreamRequest(name=name, subject=f"{name}.subj", **kw))  # type: ignore[arg-type]


def test_leaders_spread_and_subjects() -> None:
    s = state(cursor_partitions=0)
    create(s, "a", partitions=3, replicationFactor=2)
    parts = s.streams["a"].partitions
    assert [p.leader for p in parts.values()] == BROKERS
    assert [p.subject for p in parts.values()] == ["a.subj", "a.subj.1", "a.subj.2"]
    assert all(len(p.replicas) == 2 and p.isr == p.replicas for p in parts.values())


@pytest.mark.parametrize(
    ("req", "code"),
    [
        (pb.CreateStreamRequest(subject="s"), "INVALID_ARGUMENT"),
        (pb.CreateStreamRequest(name="n", subject="a b"), "INVALID_ARGUMENT"),
        (pb.CreateStreamRequest(name="n", subject="a."), "INVALID_ARGUMENT"),
        (pb.CreateStreamRequest(name=CURSORS_STREAM, subject="s"), "INVALID_ARGUMENT"),
        (pb.CreateStreamRequest(name="n", subject="s", replicationFactor=4), "INVALID_ARGUMENT"),
    ],
)
def test_create_stream_rejects(req: pb.CreateStreamRequest, code: str) -> None:
    with pytest.raises(RpcError) as info:
        state().create_stream(req)
    assert info.value.code == code


def test_broker_down_moves_leadership_and_up_rejoins_isr() -> None:
    s = state(cursor_partitions=0)
    create(s, "a", replicationFactor=2)
    p = s.streams["a"].partitions[0]
    old, follower = p.replicas
    moved = s.broker_down(old)
    assert moved == [p]
    assert p.leader == follower
    assert p.isr == [follower]
    assert p.leader_epoch == 1
    s.broker_up(old)
    assert p.leader == follower  # leadership does not move back
    assert sorted(p.isr) == sorted([old, follower])


def test_single_replica_partition_moves_to_any_live_broker() -> None:
    s = state(cursor_partitions=0)
    create(s, "a")
    p = s.streams["a"].partitions[0]
    old = p.leader
    s.broker_down(old)
    assert p.leader != old
    assert p.leader in s.live
    assert p.leader in p.replicas


def test_log_offsets_and_timestamps() -> None:
    s = state(cursor_partitions=0)
    create(s, "a")
    p = s.streams["a"].partitions[0]
    assert p.newest_offset == -1
    for i, ts in enumerate((100, 200, 200, 300)):
        offset, stored = p.append(
            key=b"", value=b"%d" % i, headers={}, subject="a.subj", reply="", timestamp=ts
        )
        assert (offset, stored) == (i, ts)
    # A clock that goes back does not make the log's timestamps go back.
    assert p.append(key=b"", value=b"x", headers={}, subject="", reply="", timestamp=50)[1] == 300
    assert p.offset_at_or_after(200) == 1
    assert p.offset_at_or_after(201) == 3
    assert p.offset_at_or_after(10_000) == 5
    # Liftbridge v1.9.0's LatestOffsetBeforeTimestamp: the first message stamped
    # exactly so, else the one before the first later one; before the log, an error.
    assert p.offset_at_or_before(200) == 1
    assert p.offset_at_or_before(250) == 2
    with pytest.raises(
        RpcError,
        match="INTERNAL: Failed to lookup offset for timestamp: "
        "timestamp is before the beginning of the log",
    ):
        p.offset_at_or_before(99)
    msg = pb.Message.FromString(p.entries[1])
    assert (msg.offset, msg.value, msg.timestamp, msg.stream) == (1, b"1", 200, "a")


def test_rebalance_round_robin_and_expiry() -> None:
    s = state(cursor_partitions=0)
    create(s, "a", partitions=3)
    create(s, "b", partitions=1)
    group = ConsumerGroup("g", "broker-0")
    s.groups["g"] = group
    group.members = {"c1": ["a", "b"], "c2": ["a"]}
    group.last_seen = {"c1": 0.0, "c2": 10.0}
    s.rebalance(group)
    first = group.epoch  # an index in the metadata log, as on the server (not 1, 2, ...)
    assert first > 0
    assert group.assignments == {"c1": {"a": [0, 2], "b": [0]}, "c2": {"a": [1]}}
    s.expire_members(now=12.0, timeout=5.0)
    assert list(group.members) == ["c2"]
    assert group.assignments == {"c2": {"a": [0, 1, 2]}}
    assert group.epoch > first
    s.expire_members(now=100.0, timeout=5.0)
    assert "g" not in s.groups


def test_cursor_partition_is_crc32_of_the_cursor_key() -> None:
    s = state(cursor_partitions=3)
    key = b"c1,stream,2"
    p = s.cursors_partition("c1", "stream", 2)
    assert p.stream.name == CURSORS_STREAM
    assert p.id == zlib.crc32(key) % 3
    with pytest.raises(RpcError) as info:
        state(cursor_partitions=0).cursors_partition("c1", "stream", 2)
    assert info.value.code == "INTERNAL"


# -- Raft apply order under metadata lag ----------------------------------------------
# A lag of a minute: every check below runs well inside it.


def _leaders(s: ClusterState, name: str) -> dict[int, str]:
    return {pid: p.leader for pid, p in s.streams[name].partitions.items()}


def test_a_lagging_partition_leader_lists_the_stream_as_long_as_it_takes_messages() -> None:
    # Broker-0 (the metadata leader) applies at once; the partition leaders applied
    # the creation at once (CreateStream waits for them) but apply the delete late.
    # Until then a real leader still has the partition open and lists the stream:
    # FetchMetadata must not say "gone" while the old log still stores messages.
    s = state(cursor_partitions=1, metadata_delay=60)
    create(s, "a", partitions=2)
    leaders = _leaders(s, "a")
    assert "broker-0" not in leaders.values()
    old = s.delete_stream("a")
    for pid, broker in leaders.items():
        t = s.view_time(broker)
        assert not old.partitions[pid].deleted_by(t)
        assert s.stream_view(broker, "a") is old
        assert "a" in s.streams_view(broker)


def test_the_leader_of_a_recreated_stream_has_applied_the_old_ones_delete() -> None:
    # Raft applies in log order: a broker that applied the new stream's creation
    # has applied the delete before it, so no old partition of the same name (on
    # the same NATS subjects) still takes the new stream's messages there.
    s = state(cursor_partitions=1, metadata_delay=60)
    create(s, "a", partitions=2)
    old = s.delete_stream("a")
    create(s, "a", partitions=2)
    new = s.streams["a"]
    shared = set(_leaders(s, "a").values()) & {p.leader for p in old.partitions.values()}
    assert shared  # the placement puts a new partition on an old leader
    for broker in shared:
        t = s.view_time(broker)
        assert all(p.deleted_by(t) for p in old.partitions.values())
        assert s.stream_view(broker, "a") is new
