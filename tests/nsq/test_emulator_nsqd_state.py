"""The nsqd emulator's topic / channel / in-flight state (``_nsqd_state.py``), alone.

Synchronous, command level (SUB, RDY, FIN, REQ, TOUCH, CLS, publish, the HTTP
admin calls), on a clock the tests move by hand: no event loop, no socket. The
expected behaviour is nsqd v1.3's (``topic.go``, ``channel.go``). At the end,
hypothesis drives random command sequences against a reference model.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients.testing._nsqd_state import (
    Consumer,
    Message,
    NsqdState,
    RegistryChange,
)

T0 = 1000.0
TS = 1_700_000_000_000_000_000  # a message time stamp (ns)


def new_state(seed: int = 1) -> NsqdState:
    return NsqdState(random.Random(seed))


def delivered(state: NsqdState, now: float) -> dict[Consumer, list[Message]]:
    out: dict[Consumer, list[Message]] = {}
    for consumer, msgs in state.dispatch(now):
        assert consumer not in out, "one batch per consumer per dispatch"
        out[consumer] = msgs
    return out


def bodies(msgs: list[Message]) -> list[bytes]:
    return [m.body for m in msgs]


def sub(
    state: NsqdState,
    rdy: int = 0,
    *,
    now: float = T0,
    msg_timeout: float = 60.0,
    sample_rate: int = 0,
) -> Consumer:
    consumer = state.subscribe("t", "c", now, msg_timeout=msg_timeout, sample_rate=sample_rate)
    if rdy:
        consumer.channel.ready(consumer, rdy)
    return consumer


def pub(state: NsqdState, *items: bytes, now: float = T0, defer: float = 0.0) -> list[Message]:
    return state.publish("t", items, now, TS, defer)


# -- topics and channels ------------------------------------------------------------------


def test_a_topic_keeps_messages_until_its_first_channel() -> None:
    state = new_state()
    pub(state, b"a", b"b")
    topic = state.topics["t"]
    assert (topic.depth, topic.message_count, topic.message_bytes) == (2, 2, 2)
    first = state.channel("t", "first", T0)
    assert (topic.depth, first.depth, first.message_count) == (0, 2, 2)
    second = state.channel("t", "second", T0)
    assert second.depth == 0, "only the first channel gets what the topic kept"
    pub(state, b"c")
    assert (first.depth, second.depth) == (3, 1)


def test_every_channel_gets_its_own_copy_with_the_same_id() -> None:
    state = new_state()
    one, two = state.channel("t", "one", T0), state.channel("t", "two", T0)
    [msg] = pub(state, b"x")
    assert one.queue[0] is msg
    assert two.queue[0] is not msg
    assert (two.queue[0].id, two.queue[0].body, two.queue[0].timestamp) == (msg.id, b"x", TS)


def test_registry_changes_come_in_order_once() -> None:
    state = new_state()
    state.channel("t", "c", T0)
    pub(state, b"x")
    assert state.has_registry_changes
    assert state.take_registry_changes() == [
        RegistryChange("t", None, True),
        RegistryChange("t", "c", True),
    ]
    assert not state.has_registry_changes
    assert state.take_registry_changes() == []
    assert state.registrations() == [
        RegistryChange("t", None, True),
        RegistryChange("t", "c", True),
    ]


def test_message_ids_are_unique_hex_and_follow_the_seed() -> None:
    a, b = new_state(7), new_state(7)
    ids = [m.id for m in pub(a, *[b"m"] * 50)]
    assert ids == [m.id for m in pub(b, *[b"m"] * 50)]
    assert len(set(ids)) == 50
    assert all(len(i) == 16 and int(i, 16) >= 0 for i in ids)
    assert [m.id for m in pub(new_state(8), b"m")] != ids[:1]


# -- delivery -------------------------------------------------------------------------------


def test_rdy_bounds_what_a_consumer_gets() -> None:
    state = new_state()
    pub(state, *[b"%d" % i for i in range(5)])
    consumer = sub(state)
    assert delivered(state, T0) == {}, "RDY 0"
    consumer.channel.ready(consumer, 2)
    assert state.dispatch_pending
    got = delivered(state, T0)
    assert bodies(got[consumer]) == [b"0", b"1"]
    assert [m.attempts for m in got[consumer]] == [1, 1]
    assert (consumer.in_flight, consumer.message_count, consumer.channel.depth) == (2, 2, 3)
    assert not state.dispatch_pending
    assert delivered(state, T0) == {}


def test_a_fin_makes_room_for_the_next_message() -> None:
    state = new_state()
    pub(state, b"a", b"b")
    consumer = sub(state, 1)
    [first] = delivered(state, T0)[consumer]
    consumer.channel.finish(consumer, first.id)
    assert (consumer.in_flight, consumer.finish_count) == (0, 1)
    assert state.dispatch_pending
    assert bodies(delivered(state, T0)[consumer]) == [b"b"]


def test_consumers_share_a_channel_round_robin_one_batch_each() -> None:
    state = new_state()
    a, b = sub(state, 10), sub(state, 10)
    pub(state, *[b"%d" % i for i in range(6)])
    got = delivered(state, T0)
    assert sorted(len(v) for v in got.values()) == [3, 3]
    assert sorted(bodies(got[a] + got[b])) == [b"%d" % i for i in range(6)]


def test_fin_of_an_unknown_or_foreign_id_fails_with_nsqds_text() -> None:
    state = new_state()
    a, b = sub(state, 1), sub(state, 1)
    pub(state, b"x")
    got = delivered(state, T0)
    [(holder, [msg])] = got.items()
    other = b if holder is a else a
    with pytest.raises(LookupError, match="ID not in flight"):
        holder.channel.finish(holder, b"0" * 16)
    with pytest.raises(LookupError, match="client does not own message"):
        other.channel.finish(other, msg.id)
    with pytest.raises(LookupError, match="client does not own message"):
        other.channel.requeue(other, msg.id, 0, T0)
    with pytest.raises(LookupError, match="client does not own message"):
        other.channel.touch(other, msg.id, T0, 900)
    assert holder.in_flight == 1
    holder.channel.finish(holder, msg.id)
    with pytest.raises(LookupError, match="ID not in flight"):
        holder.channel.finish(holder, msg.id)


def test_req_queues_again_and_the_next_delivery_counts_one_more_attempt() -> None:
    state = new_state()
    consumer = sub(state, 1)
    pub(state, b"x")
    [msg] = delivered(state, T0)[consumer]
    consumer.channel.requeue(consumer, msg.id, 0, T0)
    assert (consumer.requeue_count, consumer.channel.requeue_count) == (1, 1)
    [again] = delivered(state, T0)[consumer]
    assert (again.id, again.attempts) == (msg.id, 2)


def test_req_with_a_delay_defers_until_the_delay_has_passed() -> None:
    state = new_state()
    consumer = sub(state, 1)
    pub(state, b"x")
    [msg] = delivered(state, T0)[consumer]
    channel = consumer.channel
    channel.requeue(consumer, msg.id, 2.5, T0 + 1)
    assert (channel.deferred_count, channel.depth, channel.in_flight_count) == (1, 0, 0)
    assert state.next_deadline() == T0 + 3.5
    state.handle_timer(T0 + 3.4)
    assert delivered(state, T0 + 3.4) == {}
    state.handle_timer(T0 + 3.5)
    assert channel.deferred_count == 0
    [again] = delivered(state, T0 + 3.5)[consumer]
    assert (again.id, again.attempts) == (msg.id, 2)


def test_dpub_waits_its_delay_once_at_the_channel() -> None:
    state = new_state()
    consumer = sub(state, 5)
    pub(state, b"later", now=T0, defer=10.0)
    channel = consumer.channel
    assert (channel.depth, channel.deferred_count, channel.message_count) == (0, 1, 1)
    assert state.next_deadline() == T0 + 10
    state.handle_timer(T0 + 9.999)
    assert delivered(state, T0 + 9.999) == {}
    state.handle_timer(T0 + 10)
    assert bodies(delivered(state, T0 + 10)[consumer]) == [b"later"]


def test_a_dpub_kept_by_a_topic_waits_from_when_a_channel_gets_it() -> None:
    state = new_state()
    pub(state, b"later", now=T0, defer=10.0)
    channel = state.channel("t", "c", T0 + 100)
    assert state.next_deadline() == T0 + 110
    assert channel.deferred_count == 1


# -- in-flight deadlines ----------------------------------------------------------------------


def test_a_message_times_out_at_its_deadline_and_comes_back() -> None:
    state = new_state()
    consumer = sub(state, 1, msg_timeout=5.0)
    pub(state, b"x")
    [msg] = delivered(state, T0)[consumer]
    assert state.next_deadline() == T0 + 5
    state.handle_timer(T0 + 4.999)
    assert consumer.in_flight == 1
    state.handle_timer(T0 + 5)
    channel = consumer.channel
    assert (consumer.in_flight, channel.timeout_count, channel.depth) == (0, 1, 1)
    [again] = delivered(state, T0 + 5)[consumer]
    assert (again.id, again.attempts) == (msg.id, 2)
    with pytest.raises(LookupError, match="client does not own message"):
        channel.finish(sub(state), msg.id)


def test_a_later_deadline_does_not_hold_back_an_earlier_one() -> None:
    """A channel with a timer far out (a DPUB) still times out a short msg_timeout on
    time (before the state was split out, the emulator did so only at the far timer)."""
    state = new_state()
    consumer = sub(state, 1, msg_timeout=0.25)
    pub(state, b"far", defer=30.0)
    assert state.next_deadline() == T0 + 30
    pub(state, b"now")
    [msg] = delivered(state, T0 + 1)[consumer]
    assert state.next_deadline() == T0 + 1.25
    state.handle_timer(T0 + 1.25)
    assert consumer.channel.timeout_count == 1
    assert delivered(state, T0 + 1.25)[consumer][0].id == msg.id


def test_touch_moves_the_deadline_up_to_max_msg_timeout_after_delivery() -> None:
    state = new_state()
    consumer = sub(state, 1, msg_timeout=10.0)
    pub(state, b"x")
    [msg] = delivered(state, T0)[consumer]
    consumer.channel.touch(consumer, msg.id, T0 + 8, 15.0)
    assert msg.deadline == T0 + 15  # capped: delivered at T0, max 15 s
    state.handle_timer(T0 + 10)
    assert consumer.in_flight == 1, "the first deadline was touched away"
    state.handle_timer(T0 + 15)
    assert (consumer.in_flight, consumer.channel.timeout_count) == (0, 1)


def test_a_disconnected_consumers_messages_stay_in_flight_until_they_time_out() -> None:
    state = new_state()
    leaving = sub(state, 1, msg_timeout=5.0)
    staying = sub(state, 1, now=T0, msg_timeout=5.0)
    pub(state, b"x", b"y")
    got = delivered(state, T0)
    [held] = got[leaving]
    state.unsubscribe(leaving)
    channel = staying.channel
    channel.finish(staying, got[staying][0].id)
    assert delivered(state, T0 + 1) == {}
    assert channel.in_flight_count == 1
    state.handle_timer(T0 + 5)
    assert [m.id for m in delivered(state, T0 + 5)[staying]] == [held.id]


# -- CLS, pause, empty, delete ------------------------------------------------------------------


def test_cls_stops_deliveries_and_ignores_rdy_but_fin_still_works() -> None:
    state = new_state()
    consumer = sub(state, 2)
    pub(state, b"a", b"b", b"c")
    got = delivered(state, T0)[consumer]
    channel = consumer.channel
    channel.close_wait(consumer)
    assert (consumer.rdy, consumer.closing) == (0, True)
    channel.ready(consumer, 5)
    assert consumer.rdy == 0
    channel.finish(consumer, got[0].id)
    assert delivered(state, T0) == {}
    assert channel.depth == 1


def test_a_paused_channel_keeps_its_queue_and_times_out_what_is_in_flight() -> None:
    state = new_state()
    consumer = sub(state, 1, msg_timeout=5.0)
    channel = consumer.channel
    pub(state, b"a")
    [msg] = delivered(state, T0)[consumer]
    channel.pause()
    pub(state, b"b")
    channel.finish(consumer, msg.id)  # FIN works while paused
    assert delivered(state, T0) == {}
    assert (channel.depth, channel.paused) == (1, True)
    channel.unpause()
    assert bodies(delivered(state, T0)[consumer]) == [b"b"]
    channel.pause()
    state.handle_timer(T0 + 5)
    assert (channel.timeout_count, channel.depth) == (1, 1)
    assert delivered(state, T0 + 5) == {}


def test_a_channel_paused_with_a_delivery_pending_delivers_nothing() -> None:
    state = new_state()
    consumer = sub(state, 5)
    pub(state, b"a")
    assert state.dispatch_pending
    consumer.channel.pause()
    assert delivered(state, T0) == {}
    consumer.channel.unpause()
    assert bodies(delivered(state, T0)[consumer]) == [b"a"]


def test_each_deadline_of_a_channel_comes_at_its_own_time() -> None:
    state = new_state()
    consumer = sub(state, 2, msg_timeout=1.0)
    pub(state, b"a", b"b")
    _, second = delivered(state, T0)[consumer]
    channel = consumer.channel
    channel.requeue(consumer, second.id, 1.25, T0)
    state.handle_timer(T0 + 1)  # a times out; b is due a quarter second later
    assert (channel.timeout_count, channel.depth, channel.deferred_count) == (1, 1, 1)
    assert state.next_deadline() == T0 + 1.25
    state.handle_timer(T0 + 1.25)
    assert (channel.depth, channel.deferred_count) == (2, 0)


def test_a_paused_topic_keeps_new_messages_for_all_its_channels() -> None:
    state = new_state()
    old = state.channel("t", "old", T0)
    state.pause_topic("t", True, T0)
    pub(state, b"a", b"b")
    new = state.channel("t", "new", T0)
    topic = state.topics["t"]
    assert (topic.depth, topic.paused, old.depth, new.depth) == (2, True, 0, 0)
    state.pause_topic("t", False, T0)
    assert (topic.depth, old.depth, new.depth) == (0, 2, 2)


def test_emptying_a_channel_drops_everything_and_resets_in_flight_counts() -> None:
    state = new_state()
    consumer = sub(state, 1, msg_timeout=5.0)
    channel = consumer.channel
    pub(state, b"a", b"b")
    pub(state, b"c", defer=3.0)
    [msg] = delivered(state, T0)[consumer]
    channel.empty()
    assert (channel.depth, channel.in_flight_count, channel.deferred_count) == (0, 0, 0)
    assert consumer.in_flight == 0
    assert channel.message_count == 3, "counts are kept"
    with pytest.raises(LookupError, match="ID not in flight"):
        channel.finish(consumer, msg.id)
    state.handle_timer(T0 + 10)
    assert (channel.timeout_count, delivered(state, T0 + 10)) == (0, {})


def test_emptying_a_topic_drops_only_what_it_keeps() -> None:
    state = new_state()
    pub(state, b"a")
    state.empty_topic("t")
    channel = state.channel("t", "c", T0)
    pub(state, b"b")
    state.pause_topic("t", True, T0)
    pub(state, b"c")
    state.empty_topic("t")
    assert (state.topics["t"].depth, channel.depth) == (0, 1)
    with pytest.raises(LookupError):
        state.empty_topic("nope")


def test_deleting_a_channel_returns_its_consumers_and_unregisters_it() -> None:
    state = new_state()
    consumer = sub(state, 1)
    pub(state, b"a")
    delivered(state, T0)
    state.take_registry_changes()
    assert state.delete_channel("t", "c") == [consumer]
    assert "c" not in state.topics["t"].channels
    assert state.take_registry_changes() == [RegistryChange("t", "c", False)]
    state.unsubscribe(consumer)  # its connection closes afterwards: nothing to do
    assert state.take_registry_changes() == []
    with pytest.raises(LookupError, match="does not exist"):
        state.delete_channel("t", "c")
    assert state.next_deadline() is None


def test_deleting_a_topic_returns_every_consumer_and_unregisters_all() -> None:
    state = new_state()
    a = state.subscribe("t", "a", T0, msg_timeout=60)
    b = state.subscribe("t", "b", T0, msg_timeout=60)
    state.take_registry_changes()
    assert state.delete_topic("t") == [a, b]
    assert state.take_registry_changes() == [
        RegistryChange("t", "a", False),
        RegistryChange("t", "b", False),
        RegistryChange("t", None, False),
    ]
    assert dict(state.topics) == {}
    with pytest.raises(LookupError, match="does not exist"):
        state.delete_topic("t")


def test_an_ephemeral_channel_goes_with_its_last_consumer_and_takes_an_ephemeral_topic() -> None:
    state = new_state()
    a = state.subscribe("e#ephemeral", "c#ephemeral", T0, msg_timeout=60)
    b = state.subscribe("e#ephemeral", "c#ephemeral", T0, msg_timeout=60)
    state.take_registry_changes()
    state.unsubscribe(a)
    assert "e#ephemeral" in state.topics
    state.unsubscribe(b)
    assert "e#ephemeral" not in state.topics
    assert state.take_registry_changes() == [
        RegistryChange("e#ephemeral", "c#ephemeral", False),
        RegistryChange("e#ephemeral", None, False),
    ]


def test_a_durable_channel_stays_without_consumers() -> None:
    state = new_state()
    consumer = sub(state)
    state.unsubscribe(consumer)
    assert list(state.topics["t"].channels) == ["c"]


def test_sample_rate_drops_the_others_messages() -> None:
    state = new_state(3)
    consumer = sub(state, 2500, sample_rate=30)
    pub(state, *[b"m"] * 1000)
    got = delivered(state, T0)[consumer]
    assert 200 < len(got) < 400
    assert consumer.channel.depth == 0, "what is not sampled is dropped, not queued"


# -- stop and start ---------------------------------------------------------------------------


def test_flush_for_restart_queues_in_flight_and_deferred_after_the_queued() -> None:
    state = new_state()
    consumer = sub(state, 2)
    pub(state, b"a", b"b", b"c")
    got = delivered(state, T0)[consumer]
    pub(state, b"d", defer=5.0)
    state.subscribe("t", "e#ephemeral", T0, msg_timeout=60)
    state.flush_for_restart()
    channel = state.topics["t"].channels["c"]
    assert list(state.topics["t"].channels) == ["c"]
    assert bodies(list(channel.queue)) == [b"c", b"a", b"b", b"d"]
    assert [m.attempts for m in channel.queue] == [0, 1, 1, 0]
    assert channel.consumers == []
    assert channel.in_flight_count == 0
    assert state.next_deadline() is None
    assert not state.dispatch_pending
    again = sub(state, 10)
    assert [m.id for m in delivered(state, T0 + 1)[again]][1:3] == [m.id for m in got]


def test_clear_forgets_everything() -> None:
    state = new_state()
    sub(state, 1)
    pub(state, b"a", defer=1.0)
    state.clear()
    assert dict(state.topics) == {}
    assert state.next_deadline() is None
    state.handle_timer(T0 + 10)
    assert state.take_registry_changes() == []


# -- properties -----------------------------------------------------------------------------

TIMEOUTS = (1.0, 2.5)
MAX_MSG_TIMEOUT = 4.0


@dataclass
class Model:
    """Where each message is, as nsqd's rules put it, independently of the state."""

    queued: set[bytes] = field(default_factory=set)
    deferred: dict[bytes, float] = field(default_factory=dict)  # id -> due
    flight: dict[bytes, tuple[int, float, float]] = field(
        default_factory=dict
    )  # consumer, deadline, delivered
    attempts: dict[bytes, int] = field(default_factory=dict)
    finished: int = 0
    emptied: int = 0
    published: int = 0

    def expire(self, now: float) -> None:
        for mid, due in list(self.deferred.items()):
            if due <= now:
                del self.deferred[mid]
                self.queued.add(mid)
        for mid, (_, deadline, _) in list(self.flight.items()):
            if deadline <= now:
                del self.flight[mid]
                self.queued.add(mid)

    def next_deadline(self) -> float | None:
        dues = [*self.deferred.values(), *(d for _, d, _ in self.flight.values())]
        return min(dues) if dues else None

    def held_by(self, idx: int) -> list[bytes]:
        return sorted(mid for mid, (c, _, _) in self.flight.items() if c == idx)


op = st.one_of(
    st.tuples(st.just("sub"), st.sampled_from(TIMEOUTS)),
    st.tuples(st.just("unsub"), st.integers(0, 7)),
    st.tuples(st.just("rdy"), st.integers(0, 7), st.integers(0, 4)),
    st.tuples(st.just("pub"), st.integers(1, 4), st.sampled_from([0.0, 0.0, 0.5, 3.0])),
    st.tuples(st.just("fin"), st.integers(0, 7), st.integers(0, 9)),
    st.tuples(st.just("req"), st.integers(0, 7), st.integers(0, 9), st.sampled_from([0, 0, 1.5])),
    st.tuples(st.just("touch"), st.integers(0, 7), st.integers(0, 9)),
    st.tuples(st.just("advance"), st.sampled_from([0.25, 0.5, 1.0, 2.5])),
    st.tuples(st.just("dispatch")),
    st.tuples(st.just("dispatch")),
    st.tuples(st.just("cls"), st.integers(0, 7)),
    st.tuples(st.just("pause"), st.booleans()),
    st.tuples(st.just("empty")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(op, min_size=20, max_size=100), st.integers(0, 2**32))
def test_any_command_sequence_keeps_nsqds_rules(ops: list[tuple], seed: int) -> None:  # type: ignore[type-arg]
    """For any sequence of commands, against a model of where each message is:

    * a message is delivered only when queued: never while in flight on another
      consumer (or the same), never before its deferral ends, never after its FIN;
    * each delivery counts one more attempt (a timed-out or re-queued message
      comes back with attempts + 1);
    * no consumer gets more than its RDY allows (in flight <= RDY after a
      delivery), none after CLS, none on a paused channel;
    * queued + in flight + deferred = published - finished - emptied;
    * FIN / REQ / TOUCH fail exactly when the message is not in flight on the
      consumer that sends them;
    * the next deadline is never later than the model's (no timer fires late).
    """
    state = new_state(seed)
    model = Model()
    now = T0
    channel = state.channel("t", "c", now)
    consumers: list[Consumer] = []
    subscribed: list[bool] = []
    closing: list[bool] = []
    rdy: list[int] = []
    paused = False

    def pick(idx: int) -> int | None:
        return idx % len(consumers) if consumers else None

    def held(i: int, n: int) -> bytes:
        mine = model.held_by(i)
        unknown = b"%016x" % n
        return mine[n % len(mine)] if mine and n % 3 else unknown

    for step in ops:
        kind = step[0]
        if kind == "sub":
            consumers.append(state.subscribe("t", "c", now, msg_timeout=step[1]))
            subscribed.append(True)
            closing.append(False)
            rdy.append(0)
        elif kind == "unsub" and (i := pick(step[1])) is not None:
            state.unsubscribe(consumers[i])
            subscribed[i] = False
        elif kind == "rdy" and (i := pick(step[1])) is not None and subscribed[i]:
            channel.ready(consumers[i], step[2])
            if not closing[i]:
                rdy[i] = step[2]
        elif kind == "pub":
            msgs = state.publish("t", [b"m"] * step[1], now, TS, step[2])
            model.published += len(msgs)
            for m in msgs:
                model.attempts[m.id] = 0
                if step[2]:
                    model.deferred[m.id] = now + step[2]
                else:
                    model.queued.add(m.id)
        elif kind in ("fin", "req", "touch") and (i := pick(step[1])) is not None and subscribed[i]:
            mid = held(i, step[2])
            owned = mid in model.flight and model.flight[mid][0] == i
            c = consumers[i]
            try:
                if kind == "fin":
                    channel.finish(c, mid)
                elif kind == "req":
                    channel.requeue(c, mid, step[3], now)
                else:
                    channel.touch(c, mid, now, MAX_MSG_TIMEOUT)
            except LookupError:
                assert not owned, f"{kind} of a message {i} holds failed"
            else:
                assert owned, f"{kind} of a message {i} does not hold succeeded"
                _, deadline, at = model.flight.pop(mid)
                if kind == "fin":
                    model.finished += 1
                elif kind == "req" and step[3]:
                    model.deferred[mid] = now + step[3]
                elif kind == "req":
                    model.queued.add(mid)
                else:
                    deadline = min(now + c.msg_timeout, at + MAX_MSG_TIMEOUT)
                    model.flight[mid] = (i, deadline, at)
        elif kind == "advance":
            now += step[1]
            due = state.next_deadline()
            if due is not None and due <= now:
                state.handle_timer(now)
            model.expire(now)
        elif kind == "dispatch":
            in_flight_before = [c.in_flight for c in consumers]
            for c, msgs in state.dispatch(now):
                i = consumers.index(c)
                assert subscribed[i]
                assert not closing[i]
                assert not paused
                assert in_flight_before[i] + len(msgs) <= rdy[i]
                for m in msgs:
                    assert m.id in model.queued, "delivered a message that was not queued"
                    model.queued.discard(m.id)
                    model.attempts[m.id] += 1
                    assert m.attempts == model.attempts[m.id]
                    model.flight[m.id] = (i, now + c.msg_timeout, now)
            if model.queued and not paused:  # no wake-up lost: nobody with room is left waiting
                for i, c in enumerate(consumers):
                    assert not subscribed[i] or closing[i] or c.in_flight >= rdy[i]
        elif kind == "cls" and (i := pick(step[1])) is not None and subscribed[i]:
            channel.close_wait(consumers[i])
            closing[i] = True
            rdy[i] = 0
        elif kind == "pause":
            paused = step[1]
            channel.pause() if paused else channel.unpause()
        elif kind == "empty":
            model.emptied += len(model.queued) + len(model.deferred) + len(model.flight)
            model.queued.clear()
            model.deferred.clear()
            model.flight.clear()
            channel.empty()

        assert channel.depth == len(model.queued)
        assert channel.deferred_count == len(model.deferred)
        assert channel.in_flight_count == len(model.flight)
        assert set(channel.in_flight) == set(model.flight)
        assert (
            channel.depth + channel.in_flight_count + channel.deferred_count
            == model.published - model.finished - model.emptied
        )
        for i, c in enumerate(consumers):
            if subscribed[i]:
                assert c.in_flight == len(model.held_by(i))
        for mid, msg in channel.in_flight.items():
            assert msg.consumer is consumers[model.flight[mid][0]]
        expected = model.next_deadline()
        if expected is not None:
            got = state.next_deadline()
            assert got is not None, "a deadline without a timer"
            assert got <= expected, "a timer would fire late"


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("pub"), st.integers(1, 3)),
            st.tuples(st.just("channel"), st.integers(0, 3)),
            st.tuples(st.just("pause"), st.booleans()),
            st.tuples(st.just("empty_topic")),
        ),
        min_size=5,
        max_size=40,
    )
)
def test_each_channel_gets_each_message_published_after_it_came(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    """Fan-out: a channel gets every message published (or released by an unpause)
    while it exists; the first channel also gets what the topic kept before it."""
    state = new_state()
    state.topic("t")
    expected: dict[str, list[bytes]] = {}
    kept: list[bytes] = []
    paused = False
    n = 0
    for step in ops:
        if step[0] == "pub":
            items = [b"%d" % (n + k) for k in range(step[1])]
            n += step[1]
            state.publish("t", items, T0, TS)
            if paused or not expected:
                kept += items
            else:
                for name in expected:
                    expected[name] += items
        elif step[0] == "channel":
            name = f"c{step[1]}"
            state.channel("t", name, T0)
            if name not in expected:
                expected[name] = []
                if not paused and len(expected) == 1:
                    expected[name] += kept
                    kept = []
        elif step[0] == "pause":
            paused = step[1]
            state.pause_topic("t", paused, T0)
            if not paused and expected:
                for name in expected:
                    expected[name] += kept
                kept = []
        else:
            state.empty_topic("t")
            kept = []
        assert state.topics["t"].depth == len(kept)
        for name, items in expected.items():
            assert bodies(list(state.topics["t"].channels[name].queue)) == items
