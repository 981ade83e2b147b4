"""RdyDistributor and backoff: exact rules on a fake clock, and hypothesis properties."""

from __future__ import annotations

import random
from collections.abc import Hashable, Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients import InvalidArgumentError
from aioclients.nsq._protocol._rdy import HOLD_FACTOR, BackoffState, RdyDistributor, RdyUpdate


def rdys(updates: Iterable[RdyUpdate]) -> dict[Hashable, int]:
    return {u.conn: u.count for u in updates}


def make(mif: int, **kw: float) -> RdyDistributor:
    return RdyDistributor(mif, rng=random.Random(7), **kw)  # type: ignore[arg-type]


def test_new_connection_gets_rdy_1_then_its_share() -> None:
    d = make(100)
    assert d.add_connection("a", 2500, 0.0) == [RdyUpdate("a", 1)]
    assert d.on_message("a", 0.1) == [RdyUpdate("a", 100)]
    assert rdys(d.add_connection("b", 2500, 0.2)) == {"a": 50, "b": 1}
    assert d.on_message("b", 0.3) == [RdyUpdate("b", 50)]
    assert d.total_rdy == 100


def test_share_is_capped_by_max_rdy_count() -> None:
    d = make(100)
    d.add_connection("a", 30, 0.0)
    assert d.on_message("a", 0.0) == [RdyUpdate("a", 30)]


def test_refill_when_under_a_quarter() -> None:
    d = make(100)
    d.add_connection("a", 2500, 0.0)
    d.on_message("a", 0.0)  # -> RDY 100
    for i in range(75):
        assert d.on_message("a", 0.0) == (), i
        d.on_response("a", 0.0, True)
    assert d.on_message("a", 0.0) == [RdyUpdate("a", 100)]  # 24 left < 25


def test_budget_counts_messages_in_flight_elsewhere() -> None:
    d = make(4)
    d.add_connection("a", 2500, 0.0)
    d.on_message("a", 0.0)  # RDY 4
    for _ in range(3):
        d.on_message("a", 0.0)  # 4 in flight on a, remaining 0 -> refill 4 (others hold 0)
    assert d.in_flight("a") == 4
    d.add_connection("b", 2500, 0.0)
    # a is lowered to its share 2; b gets nothing while a still has 4 in flight
    assert d.rdy("a") == 2
    assert d.rdy("b") == 0
    assert d.on_response("a", 0.0, None) == [RdyUpdate("b", 1)]  # 3 in flight on a: room for 1
    assert d.on_message("b", 0.0) == [RdyUpdate("b", 1)]  # b's share is 2, but a holds 3
    assert d.on_response("a", 0.0, None) == [RdyUpdate("b", 2)]


def test_is_starved() -> None:
    d = make(10)
    d.add_connection("a", 2500, 0.0)
    assert not d.is_starved()
    d.on_message("a", 0.0)  # in flight 1 >= 0.85 * 1 -> starved before the refill
    assert d.rdy("a") == 10
    assert not d.is_starved()
    for _ in range(8):
        d.on_message("a", 0.0)
    assert d.is_starved()  # 9 in flight >= 8.5


def test_set_max_in_flight_zero_pauses_and_back() -> None:
    d = make(10)
    d.add_connection("a", 2500, 0.0)
    d.on_message("a", 0.0)
    d.on_response("a", 0.0, True)
    assert d.set_max_in_flight(0, 1.0) == [RdyUpdate("a", 0)]
    assert d.set_max_in_flight(6, 1.0) == [RdyUpdate("a", 6)]
    with pytest.raises(InvalidArgumentError):
        d.set_max_in_flight(-1, 1.0)


def test_rotation_when_fewer_rdy_than_connections() -> None:
    d = make(1, low_rdy_idle_timeout=10.0)
    d.add_connection("a", 2500, 0.0)
    d.add_connection("b", 2500, 0.0)
    d.add_connection("c", 2500, 0.0)
    assert [d.rdy(k) for k in "abc"] == [1, 0, 0]
    assert d.get_timer() == 10.0  # a is idle for low_rdy_idle_timeout
    updates = d.handle_timer(10.0)
    assert updates[0] == RdyUpdate("a", 0)
    holder = updates[1].conn
    assert updates[1] == RdyUpdate(holder, 1)
    assert holder in ("b", "c")
    assert d.total_rdy == 1


def test_busy_holder_is_rotated_after_the_hold_limit() -> None:
    d = make(1, low_rdy_idle_timeout=1.0)
    for k in "ab":
        d.add_connection(k, 2500, 0.0)
    now = 0.0
    while now < HOLD_FACTOR * 1.0 - 0.1:  # a keeps receiving messages
        now += 0.1
        d.on_message("a", now)
        d.on_response("a", now, None)
    assert d.rdy("a") == 1
    timer = d.get_timer()
    assert timer == pytest.approx(HOLD_FACTOR)
    d.handle_timer(timer)  # type: ignore[arg-type]
    assert d.rdy("a") == 0
    assert d.rdy("b") == 1


def test_backoff_window_then_test_the_waters_then_recover() -> None:
    d = make(10, max_backoff_duration=8.0, backoff_multiplier=1.0)
    for k in "ab":
        d.add_connection(k, 2500, 0.0)
        d.on_message(k, 0.0)
    assert d.total_rdy == 10
    assert rdys(d.on_response("a", 1.0, False)) == {"a": 0, "b": 0}  # level 1 -> 1 s
    assert d.get_timer() == 2.0
    assert d.on_response("b", 1.5, False) == []  # ignored inside the window
    assert d.backoff.level == 1
    assert d.handle_timer(1.9) == []
    (update,) = d.handle_timer(2.0)
    assert update.count == 1
    assert d.total_rdy == 1
    d.on_message(update.conn, 2.1)
    assert rdys(d.on_response(update.conn, 2.2, False)) == {update.conn: 0}  # level 2 -> 2 s
    assert d.backoff.level == 2
    assert d.get_timer() == pytest.approx(4.2)
    (update,) = d.handle_timer(4.2)
    d.on_message(update.conn, 4.3)
    assert rdys(d.on_response(update.conn, 4.4, True)) == {update.conn: 0}  # level 1: 1 s
    assert d.get_timer() == pytest.approx(5.4)
    (update,) = d.handle_timer(5.4)
    d.on_message(update.conn, 5.5)
    out = rdys(d.on_response(update.conn, 5.6, True))  # level 0: full flow again
    assert d.backoff.level == 0
    assert not d.backoff.active
    assert d.total_rdy == 10
    assert sum(out.values()) >= 9


def test_backoff_duration_is_exponential_and_capped() -> None:
    b = BackoffState(max_backoff_duration=10.0, multiplier=1.0)
    durations = []
    now = 0.0
    for _ in range(8):
        assert b.record(False, now) == "window"
        assert b.window_until is not None
        durations.append(b.window_until - now)
        now = b.window_until
        assert b.window_expired(now)
    assert durations == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0, 10.0]
    assert b.level == b.max_level == 5


def test_backoff_disabled() -> None:
    d = make(5, max_backoff_duration=0.0)
    d.add_connection("a", 2500, 0.0)
    d.on_message("a", 0.0)
    assert d.on_response("a", 0.0, False) == []
    assert not d.backoff.active
    assert d.rdy("a") == 5


def test_new_connection_during_backoff_window_gets_nothing() -> None:
    d = make(5, max_backoff_duration=4.0)
    d.add_connection("a", 2500, 0.0)
    d.on_message("a", 0.0)
    d.on_response("a", 0.0, False)
    assert d.add_connection("b", 2500, 0.5) == []
    assert d.total_rdy == 0


# ---- hypothesis properties ----------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("connect"), st.integers(1, 3000)),
        st.tuples(st.just("disconnect"), st.integers(0, 20)),
        st.tuples(st.just("message"), st.integers(0, 20)),
        st.tuples(st.just("finish"), st.integers(0, 20), st.sampled_from([True, False, None])),
        st.tuples(st.just("set_max_in_flight"), st.integers(0, 40)),
        st.tuples(st.just("advance"), st.floats(0.0, 30.0)),
    ),
    max_size=80,
)


class Server:
    """nsqd's view: RDY n lets up to n messages be in flight on a connection."""

    def __init__(self) -> None:
        self.rdy: dict[Hashable, int] = {}
        self.in_flight: dict[Hashable, int] = {}

    def apply(self, updates: Iterable[RdyUpdate]) -> None:
        for u in updates:
            if u.conn in self.rdy:
                self.rdy[u.conn] = u.count


@settings(max_examples=400, deadline=None)
@given(ops, st.integers(0, 30), st.integers(0, 1000))
def test_rdy_invariants_hold_for_any_sequence(operations: list, mif: int, seed: int) -> None:
    d = RdyDistributor(
        mif, rng=random.Random(seed), low_rdy_idle_timeout=5.0, max_backoff_duration=16.0
    )
    server = Server()
    max_rdy: dict[Hashable, int] = {}
    now = 0.0
    next_id = 0
    for op in operations:
        kind = op[0]
        conns = list(server.rdy)
        if kind == "connect":
            key = f"c{next_id}"
            next_id += 1
            server.rdy[key] = 0
            server.in_flight[key] = 0
            max_rdy[key] = op[1]
            server.apply(d.add_connection(key, op[1], now))
        elif kind == "disconnect" and conns:
            key = conns[op[1] % len(conns)]
            del server.rdy[key], server.in_flight[key]
            server.apply(d.remove_connection(key, now))
        elif kind == "message" and conns:
            key = conns[op[1] % len(conns)]
            if server.in_flight[key] < server.rdy[key]:
                server.in_flight[key] += 1
                server.apply(d.on_message(key, now))
        elif kind == "finish" and conns:
            key = conns[op[1] % len(conns)]
            if server.in_flight[key]:
                server.in_flight[key] -= 1
                server.apply(d.on_response(key, now, op[2]))
        elif kind == "set_max_in_flight":
            mif = op[1]
            server.apply(d.set_max_in_flight(mif, now))
        elif kind == "advance":
            now += op[1]
            timer = d.get_timer()
            while timer is not None and timer <= now:
                server.apply(d.handle_timer(timer))
                nxt = d.get_timer()
                assert nxt is None or nxt > timer
                timer = nxt
        assert sum(server.rdy.values()) <= mif
        assert all(server.rdy[k] <= max_rdy[k] for k in server.rdy)
        assert all(server.rdy[k] == d.rdy(k) for k in server.rdy)
        if d.backoff.in_window:
            assert sum(server.rdy.values()) == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.integers(1, 12), st.integers(0, 10_000))
def test_no_producer_with_messages_starves(conns: int, mif: int, seed: int) -> None:
    """Every producer always has messages; each one is served within a bounded time."""
    idle = 1.0
    d = RdyDistributor(mif, rng=random.Random(seed), low_rdy_idle_timeout=idle)
    server = Server()
    served: set[Hashable] = set()
    now = 0.0
    for i in range(conns):
        server.rdy[i] = 0
        server.in_flight[i] = 0
        server.apply(d.add_connection(i, 2500, now))
    rounds = conns // max(1, mif) + 2
    end = rounds * HOLD_FACTOR * idle + 1.0
    while now < end and len(served) < conns:
        now += 0.05
        for key in list(server.rdy):
            while server.in_flight[key] < server.rdy[key]:  # producers always have messages
                server.in_flight[key] += 1
                served.add(key)
                server.apply(d.on_message(key, now))
        for key in list(server.rdy):  # the handler finishes everything promptly
            while server.in_flight[key]:
                server.in_flight[key] -= 1
                server.apply(d.on_response(key, now, True))
        timer = d.get_timer()
        while timer is not None and timer <= now:
            server.apply(d.handle_timer(now))
            timer = d.get_timer()
        assert sum(server.rdy.values()) <= mif
    assert served == set(range(conns))


batch_ops = st.lists(
    st.one_of(
        st.tuples(st.just("connect"), st.integers(1, 3000)),
        st.tuples(st.just("disconnect"), st.integers(0, 20)),
        st.tuples(st.just("messages"), st.integers(0, 20), st.integers(0, 300)),
        st.tuples(st.just("finish"), st.integers(0, 20), st.sampled_from([True, False, None])),
        st.tuples(st.just("set_max_in_flight"), st.integers(0, 800)),
        st.tuples(st.just("advance"), st.floats(0.0, 30.0)),
    ),
    max_size=60,
)


def _state(d: RdyDistributor) -> tuple[object, ...]:
    return (
        [(k, d.rdy(k), d.in_flight(k)) for k in d.connections],
        [(c.remaining, c.last_message_at, c.bootstrapped) for c in d._conns.values()],
        d.get_timer(),
        d.is_starved(),
        d.backoff.level,
        d.backoff.window_until,
        d._deficit,
    )


@settings(max_examples=400, deadline=None)
@given(batch_ops, st.integers(0, 800), st.integers(0, 1000))
def test_on_messages_is_that_many_on_message(operations: list, mif: int, seed: int) -> None:
    """The messages of one read told at once: the same updates and state as one by one."""
    one = RdyDistributor(
        mif, rng=random.Random(seed), low_rdy_idle_timeout=5.0, max_backoff_duration=16.0
    )
    batch = RdyDistributor(
        mif, rng=random.Random(seed), low_rdy_idle_timeout=5.0, max_backoff_duration=16.0
    )
    now = 0.0
    next_id = 0
    for op in operations:
        kind = op[0]
        conns = list(one.connections)
        if kind == "connect":
            key = f"c{next_id}"
            next_id += 1
            assert one.add_connection(key, op[1], now) == batch.add_connection(key, op[1], now)
        elif kind == "disconnect" and conns:
            key = conns[op[1] % len(conns)]
            assert one.remove_connection(key, now) == batch.remove_connection(key, now)
        elif kind == "messages" and conns:
            key = conns[op[1] % len(conns)]
            expected: list[RdyUpdate] = []
            for _ in range(op[2]):
                expected.extend(one.on_message(key, now))
            assert list(batch.on_messages(key, op[2], now)) == expected
        elif kind == "finish" and conns:
            key = conns[op[1] % len(conns)]
            assert one.on_response(key, now, op[2]) == batch.on_response(key, now, op[2])
        elif kind == "set_max_in_flight":
            assert one.set_max_in_flight(op[1], now) == batch.set_max_in_flight(op[1], now)
        elif kind == "advance":
            now += op[1]
            timer = one.get_timer()
            if timer is not None and timer <= now:
                assert one.handle_timer(timer) == batch.handle_timer(timer)
        assert _state(one) == _state(batch)
    # unknown connections and empty reads change nothing
    assert batch.on_messages("gone", 5, now) == ()
    assert _state(one) == _state(batch)


def _settled_by_the_rules(d: RdyDistributor) -> bool:
    return not (d.backoff.level or d.backoff.window_until is not None or d._deficit)


counted_ops = st.lists(
    st.one_of(
        st.tuples(st.just("connect"), st.integers(1, 3000)),
        st.tuples(st.just("disconnect"), st.integers(0, 20)),
        st.tuples(st.just("messages"), st.integers(0, 20), st.integers(0, 300)),
        # several FINs in a row, so that counted ones pile up before an input
        st.tuples(st.just("finish"), st.integers(0, 20), st.integers(1, 40)),
        st.tuples(st.just("fail"), st.integers(0, 20), st.sampled_from([False, None])),
        st.tuples(st.just("set_max_in_flight"), st.integers(0, 800)),
        st.tuples(st.just("advance"), st.floats(0.0, 30.0)),
        st.tuples(st.just("look"), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=400, deadline=None)
@given(counted_ops, st.integers(0, 800), st.integers(0, 1000))
def test_fins_counted_while_settled_are_on_response_with_success(
    operations: list, mif: int, seed: int
) -> None:
    """A FIN counted in ``finishes`` while ``settled`` (no call), folded in at the
    next input or query: every input returns the updates, and every query the
    state, that one ``on_response(key, now, True)`` per FIN gives; ``settled`` is
    exactly "not in backoff and no RDY owed" after every input."""
    full = RdyDistributor(
        mif, rng=random.Random(seed), low_rdy_idle_timeout=5.0, max_backoff_duration=16.0
    )
    counted = RdyDistributor(
        mif, rng=random.Random(seed), low_rdy_idle_timeout=5.0, max_backoff_duration=16.0
    )
    now = 0.0
    next_id = 0
    for op in operations:
        kind = op[0]
        conns = list(full.connections)
        if kind == "connect":
            key = f"c{next_id}"
            next_id += 1
            assert full.add_connection(key, op[1], now) == counted.add_connection(key, op[1], now)
        elif kind == "disconnect" and conns:
            key = conns[op[1] % len(conns)]
            assert full.remove_connection(key, now) == counted.remove_connection(key, now)
        elif kind == "messages" and conns:
            key = conns[op[1] % len(conns)]
            assert full.on_messages(key, op[2], now) == counted.on_messages(key, op[2], now)
        elif kind == "finish" and conns:
            key = conns[op[1] % len(conns)]
            for _ in range(op[2]):
                expected = full.on_response(key, now, True)
                if counted.settled:
                    assert expected == []
                    counted.finishes[key] += 1
                else:
                    assert counted.on_response(key, now, True) == expected
        elif kind == "fail" and conns:
            key = conns[op[1] % len(conns)]
            assert full.on_response(key, now, op[2]) == counted.on_response(key, now, op[2])
        elif kind == "set_max_in_flight":
            assert full.set_max_in_flight(op[1], now) == counted.set_max_in_flight(op[1], now)
        elif kind == "advance":
            now += op[1]
            timer = full.get_timer()
            assert timer == counted.get_timer()
            if timer is not None and timer <= now:
                assert full.handle_timer(timer) == counted.handle_timer(timer)
        elif kind == "look":  # queries fold too
            assert counted.total_in_flight == full.total_in_flight
            assert counted.is_starved() == full.is_starved()
        assert counted.settled == _settled_by_the_rules(counted) == _settled_by_the_rules(full)
        assert set(counted.finishes) == set(counted.connections)
    assert _state(full) == _state(counted)


def test_fins_counted_while_settled_free_their_slots_at_the_next_input() -> None:
    d = make(4)
    d.add_connection("a", 2500, 0.0)
    d.on_messages("a", 1, 0.0)  # RDY 1, then its share: RDY 4
    assert d.rdy("a") == 4
    assert d.settled
    d.on_messages("a", 4, 0.0)
    for _ in range(3):
        d.finishes["a"] += 1
    assert d.in_flight("a") == 2  # a query folds the three in
    assert d.finishes["a"] == 0
    d.finishes["a"] += 1
    d.on_response("a", 1.0, False)  # a failure: the counted FIN first, then its slot
    assert d.in_flight("a") == 0
    assert not d.settled  # in a backoff window: FINs must be told again
