"""Partitioners and metadata snapshots (pure)."""

from __future__ import annotations

import copy
import pickle
import zlib
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients.liftbridge import (
    BrokerInfo,
    Metadata,
    PartitionByKey,
    PartitionByRoundRobin,
    Partitioner,
    PartitionInfo,
    StreamInfo,
)
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._protocol._metadata import MetadataCache, partition_subject
from aioclients.liftbridge._protocol._partition import choose_partition


def _metadata(**counts: int) -> Metadata:
    streams = [
        StreamInfo(name, f"subj.{name}", {i: PartitionInfo(i, "b1") for i in range(n)})
        for name, n in counts.items()
    ]
    return Metadata([BrokerInfo("b1", "127.0.0.1", 9292)], streams)


@pytest.mark.parametrize(
    ("subject", "partition", "expected"),
    [("foo", 0, "foo"), ("foo", 1, "foo.1"), ("foo", 2, "foo.2"), ("a.b", 10, "a.b.10")],
)
def test_partition_subjects(subject: str, partition: int, expected: str) -> None:
    assert partition_subject(subject, partition) == expected
    assert StreamInfo("s", subject).partition_subject(partition) == expected


# CRC-32 (IEEE) of the key modulo 3: crc32(b"")=0, crc32(b"a")=0xE8B7BE43,
# crc32(b"foo")=0x8C736521, crc32(b"123456789")=0xCBF43926.
@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (None, 0),
        (b"", 0),
        (b"a", 0xE8B7BE43 % 3),
        (b"foo", 0x8C736521 % 3),
        (b"123456789", 0xCBF43926 % 3),
    ],
)
def test_partition_by_key_table(key: bytes | None, expected: int) -> None:
    assert PartitionByKey().partition("s", key, b"v", _metadata(s=3)) == expected


@given(st.binary(max_size=30), st.integers(min_value=1, max_value=50))
def test_partition_by_key_is_crc32_mod_count(key: bytes, count: int) -> None:
    p = PartitionByKey().partition("s", key, b"", _metadata(s=count))
    assert p == zlib.crc32(key) % count
    assert 0 <= p < count


def test_round_robin_counts_per_stream() -> None:
    rr = PartitionByRoundRobin()
    md = _metadata(a=3, b=2)
    seq_a = [rr.partition("a", None, b"", md) for _ in range(7)]
    seq_b = [rr.partition("b", None, b"", md) for _ in range(5)]
    assert seq_a == [0, 1, 2, 0, 1, 2, 0]
    assert seq_b == [0, 1, 0, 1, 0]


def test_unknown_streams_map_to_partition_zero() -> None:
    md = _metadata(a=3)
    assert PartitionByKey().partition("zzz", b"key", b"", md) == 0
    assert PartitionByRoundRobin().partition("zzz", None, b"", md) == 0


def test_explicit_partition_wins_then_partitioner_then_zero() -> None:
    md = _metadata(s=4)
    rr = PartitionByRoundRobin()
    kw = {"metadata": md}
    assert choose_partition("s", b"k", b"", partition=3, partitioner=PartitionByKey(), **kw) == 3
    assert choose_partition("s", b"k", b"", partition=None, partitioner=rr, **kw) == 0
    assert choose_partition("s", b"k", b"", partition=None, partitioner=rr, **kw) == 1
    assert choose_partition("s", b"k", b"", partition=None, partitioner=None, **kw) == 0


def test_partitioners_satisfy_the_protocol() -> None:
    assert isinstance(PartitionByKey(), Partitioner)
    assert isinstance(PartitionByRoundRobin(), Partitioner)


def _response() -> pb.FetchMetadataResponse:
    resp = pb.FetchMetadataResponse(
        brokers=[
            pb.Broker(id="b1", host="127.0.0.1", port=1001),
            pb.Broker(id="b2", host="::1", port=1002),
        ]
    )
    s = resp.streamMetadata.add(name="orders", subject="ord")
    s.partitions[0].CopyFrom(
        pb.PartitionMetadata(id=0, leader="b1", replicas=["b1", "b2"], isr=["b1", "b2"])
    )
    s.partitions[1].CopyFrom(
        pb.PartitionMetadata(
            id=1, leader="b2", replicas=["b2"], isr=["b2"], newestOffset=7, paused=True
        )
    )
    resp.streamMetadata.add(name="ghost", subject="", error=1)
    resp.streamMetadata.add(name="other", subject="ord").partitions[0].CopyFrom(
        pb.PartitionMetadata(id=0, leader="b9")
    )
    return resp


def test_metadata_snapshot_from_a_response() -> None:
    wall = datetime(2026, 1, 1, tzinfo=timezone.utc)
    md = Metadata.from_response(
        _response(), now=5.0, wall=wall, seed_addresses=["seed:1", "127.0.0.1:1001"]
    )
    assert md.last_updated == wall
    assert [b.id for b in md.brokers()] == ["b1", "b2"]
    assert md.addresses() == ("127.0.0.1:1001", "[::1]:1002", "seed:1")
    assert md.get_stream("ghost") is None  # UNKNOWN_STREAM entries are dropped
    orders = md.get_stream("orders")
    assert orders is not None
    assert orders.subject == "ord"
    assert orders.partitions[1] == PartitionInfo(1, "b2", ("b2",), ("b2",), 0, 7, True, False)
    assert md.leader_address("orders", 0) == "127.0.0.1:1001"
    assert md.leader_address("orders", 1) == "[::1]:1002"
    assert md.leader_address("orders", 2) is None
    assert md.leader_address("other", 0) is None  # leader not a known broker
    assert md.leader_address("nope", 0) is None
    assert md.isr_addresses("orders", 0) == ("127.0.0.1:1001", "[::1]:1002")
    assert md.partition_counts_for_subject("ord") == {"orders": 2, "other": 1}
    assert md.partition_counts_for_subject("ord.*") == {}
    assert md.partition_count("orders") == 2
    assert md.partition_count("nope") == 0


def test_metadata_cache_replaces_snapshots_and_reports_staleness() -> None:
    cache = MetadataCache(["seed:1"], max_age=10.0)
    first = cache.get()
    assert first.addresses() == ("seed:1",)
    assert cache.is_stale(0.0)
    assert cache.last_updated() is None
    snap = cache.update(_response(), now=100.0)
    assert cache.get() is snap
    assert first.addresses() == ("seed:1",)
    assert cache.generation == 1
    assert cache.staleness(104.0) == 4.0
    assert not cache.is_stale(110.0)
    assert cache.is_stale(110.5)
    assert cache.leader_address("orders", 1) == "[::1]:1002"
    assert "seed:1" in cache.addresses()


def test_a_broker_the_partitions_name_keeps_its_address_when_the_list_omits_it() -> None:
    # A broker that surveyed its peers while one was down lists the others only,
    # for 2 minutes, although the restarted one leads partitions.
    cache = MetadataCache([], max_age=10.0)
    cache.update(_response(), now=1.0)
    omitted = _response()
    del omitted.brokers[1]  # b2 left out of the list
    snap = cache.update(omitted, now=2.0)
    assert [b.id for b in snap.brokers()] == ["b1", "b2"]
    assert snap.leader_address("orders", 1) == "[::1]:1002"
    assert "[::1]:1002" in snap.addresses()
    # A broker no partition names any more is gone for good.
    unnamed = _response()
    del unnamed.brokers[1]
    del unnamed.streamMetadata[:]
    snap = cache.update(unnamed, now=3.0)
    assert [b.id for b in snap.brokers()] == ["b1"]
    # An id the client never learnt an address for stays unknown.
    assert snap.leader_address("other", 0) is None


def test_metadata_is_immutable() -> None:
    md = _metadata(s=1)
    with pytest.raises(AttributeError):
        md.get_stream("s").name = "x"  # type: ignore[union-attr,misc]
    with pytest.raises(AttributeError):
        BrokerInfo("a", "h", 1).port = 2  # type: ignore[misc]


def test_a_metadata_snapshot_cannot_be_changed_through_any_of_its_parts() -> None:
    # The client routes by the snapshot it hands out: a change made through a user's
    # reference would move its own publishes and subscriptions.
    md = Metadata.from_response(_response(), now=5.0, wall=None)
    with pytest.raises(AttributeError):
        md.last_updated = datetime(2020, 1, 1, tzinfo=timezone.utc)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        md.fetched_at = 0.0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del md.last_updated  # type: ignore[misc]
    orders = md.get_stream("orders")
    assert orders is not None
    assert isinstance(orders.partitions, dict)  # the contract's dict[int, PartitionInfo]
    for change in (
        lambda p: p.__setitem__(0, PartitionInfo(0, "b2")),
        lambda p: p.__delitem__(0),
        lambda p: p.pop(0),
        lambda p: p.popitem(),
        lambda p: p.clear(),
        lambda p: p.update({0: PartitionInfo(0, "b2")}),
        lambda p: p.setdefault(5, PartitionInfo(5, "b2")),
        lambda p: p.__ior__({0: PartitionInfo(0, "b2")}),
    ):
        with pytest.raises(TypeError):
            change(orders.partitions)
    assert md.leader_address("orders", 0) == "127.0.0.1:1001"
    assert sorted(orders.partitions) == [0, 1]


def test_a_metadata_snapshot_copies_and_pickles_whole() -> None:
    md = Metadata.from_response(
        _response(), now=5.0, wall=datetime(2026, 1, 1, tzinfo=timezone.utc), seed_addresses=["s:1"]
    )
    for back in (pickle.loads(pickle.dumps(md)), copy.deepcopy(md), copy.copy(md)):
        assert back.brokers() == md.brokers()
        assert back.streams() == md.streams()
        assert back.addresses() == md.addresses() == ("127.0.0.1:1001", "[::1]:1002", "s:1")
        assert (back.last_updated, back.fetched_at) == (md.last_updated, 5.0)
        with pytest.raises(AttributeError):
            back.fetched_at = 0.0  # type: ignore[misc]


def test_stream_info_partitions_copy_and_pickle_as_plain_values() -> None:
    info = StreamInfo("s", "subj", {0: PartitionInfo(0, "b1")})
    for back in (pickle.loads(pickle.dumps(info)), copy.deepcopy(info), copy.copy(info)):
        assert back == info
        assert back.partitions == {0: PartitionInfo(0, "b1")}
    assert info.partitions | {1: PartitionInfo(1, "b1")} == {
        0: PartitionInfo(0, "b1"),
        1: PartitionInfo(1, "b1"),
    }
