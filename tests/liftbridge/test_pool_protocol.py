"""Subscribe connection pool bookkeeping on a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients import LocalProtocolError
from aioclients.liftbridge._protocol._pool import BrokerPool, SubscribePool


def test_opens_up_to_max_then_shares_the_least_used() -> None:
    pool: BrokerPool[str] = BrokerPool(max_conns=2, keepalive_time=30.0)
    assert pool.acquire(0.0) is None
    pool.add("c1", 0.0)
    assert pool.acquire(0.0) is None  # below the limit: open another
    pool.add("c2", 0.0)
    assert pool.acquire(0.0) in ("c1", "c2")
    assert pool.acquire(0.0) in ("c1", "c2")
    assert pool.users("c1") == 2
    assert pool.users("c2") == 2
    assert len(pool) == 2


def test_idle_connection_is_reused_before_it_expires() -> None:
    pool: BrokerPool[str] = BrokerPool(max_conns=2, keepalive_time=30.0)
    pool.add("c1", 0.0)
    pool.release("c1", 10.0)
    assert pool.get_timer() == 40.0
    assert pool.handle_timer(39.9) == []
    assert pool.acquire(20.0) == "c1"  # taken again: no expiry any more
    assert pool.get_timer() is None
    assert pool.handle_timer(1000.0) == []


def test_idle_connection_expires_after_keepalive() -> None:
    pool: BrokerPool[str] = BrokerPool(max_conns=2, keepalive_time=30.0)
    pool.add("c1", 0.0)
    pool.add("c2", 0.0)
    pool.release("c1", 5.0)
    pool.release("c2", 8.0)
    assert pool.get_timer() == 35.0
    assert pool.handle_timer(35.0) == ["c1"]
    assert pool.get_timer() == 38.0
    assert pool.handle_timer(38.0) == ["c2"]
    assert len(pool) == 0
    assert pool.get_timer() is None


def test_busy_connection_never_expires() -> None:
    pool: BrokerPool[str] = BrokerPool(max_conns=1, keepalive_time=1.0)
    pool.add("c1", 0.0)
    assert pool.acquire(0.0) == "c1"
    pool.release("c1", 1.0)  # one user left
    assert pool.get_timer() is None
    assert pool.handle_timer(100.0) == []


def test_discard_and_close() -> None:
    pool: BrokerPool[str] = BrokerPool(max_conns=2, keepalive_time=1.0)
    pool.add("c1", 0.0)
    pool.add("c2", 0.0)
    assert pool.discard("c1")
    assert not pool.discard("c1")
    pool.release("c1", 0.0)  # releasing a discarded connection is harmless
    assert pool.close() == ["c2"]
    assert len(pool) == 0


def test_misuse_raises() -> None:
    pool: BrokerPool[str] = BrokerPool(max_conns=1, keepalive_time=1.0)
    pool.add("c1", 0.0)
    with pytest.raises(LocalProtocolError):
        pool.add("c1", 0.0)
    pool.release("c1", 0.0)
    with pytest.raises(LocalProtocolError):
        pool.release("c1", 0.0)
    with pytest.raises(ValueError, match="max_conns"):
        BrokerPool(max_conns=0, keepalive_time=1.0)


def test_pools_are_per_broker() -> None:
    pool: SubscribePool[str] = SubscribePool(max_conns_per_broker=1, keepalive_time=10.0)
    assert pool.acquire("a:1", 0.0) is None
    pool.add("a:1", "ca", 0.0)
    assert pool.acquire("b:1", 0.0) is None  # another broker: its own limit
    pool.add("b:1", "cb", 0.0)
    assert pool.acquire("a:1", 0.0) == "ca"
    assert (pool.connections("a:1"), pool.connections("b:1"), pool.connections("c:1")) == (1, 1, 0)
    pool.release("b:1", "cb", 1.0)
    assert pool.get_timer() == 11.0
    assert pool.handle_timer(11.0) == ["cb"]
    assert sorted(pool.close()) == ["ca"]


@given(
    st.integers(1, 4),
    st.lists(
        st.tuples(st.sampled_from(["acquire", "release", "tick"]), st.floats(0, 5)), max_size=80
    ),
)
def test_never_more_than_max_connections_and_users_never_negative(
    max_conns: int, ops: list[tuple[str, float]]
) -> None:
    pool: BrokerPool[int] = BrokerPool(max_conns=max_conns, keepalive_time=3.0)
    now = 0.0
    held: list[int] = []
    next_id = 0
    for op, dt in ops:
        now += dt
        if op == "acquire":
            conn = pool.acquire(now)
            if conn is None:
                next_id += 1
                conn = next_id
                pool.add(conn, now)
            held.append(conn)
        elif op == "release" and held:
            pool.release(held.pop(0), now)
        else:
            for conn in pool.handle_timer(now):
                assert conn not in held  # only unused connections expire
        assert len(pool) <= max_conns
        for conn in set(held):
            assert pool.users(conn) == held.count(conn)
