"""The push-consumer core: flow control, heartbeats and the bounded buffer, driven
synchronously with a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients._errors import InvalidArgumentError, LocalProtocolError
from aioclients.jetstream._protocol._pull import (
    Disconnected,
    HeartbeatMissed,
    Reconnected,
    StatusWarning,
    Terminated,
)
from aioclients.jetstream._protocol._push import (
    DEFAULT_PUSH_MAX_MESSAGES,
    OVERFLOW_FACTOR,
    UNBOUNDED,
    FlowControlReply,
    PushFlow,
    PushState,
    PushStatus,
    classify_push_status,
    push_options,
)

FC = "FlowControl Request"
HB = "Idle Heartbeat"


def started(now: float = 0.0, **options: object) -> PushFlow:
    flow = PushFlow(push_options(**options))
    flow.start(now)
    return flow


def replies(events: list[object]) -> list[str]:
    return [e.subject for e in events if isinstance(e, FlowControlReply)]


# -- options -----------------------------------------------------------------------------


def test_options_defaults_and_bounds() -> None:
    opts = push_options()
    assert opts.max_messages == DEFAULT_PUSH_MAX_MESSAGES
    assert opts.max_bytes is None
    assert opts.idle_heartbeat is None
    assert opts.overflow_messages == OVERFLOW_FACTOR * DEFAULT_PUSH_MAX_MESSAGES
    # Acks bound what is in flight: no drop below max_ack_pending.
    assert push_options(max_messages=10, max_ack_pending=5000).overflow_messages == 5000
    assert push_options(max_messages=10, max_ack_pending=-1).overflow_messages == 40
    # With flow control the server's window is the bound: nothing is dropped.
    fc = push_options(max_messages=10, max_bytes=100, flow_control=True)
    assert (fc.overflow_messages, fc.overflow_bytes) == (UNBOUNDED, None)
    assert push_options(max_bytes=100).overflow_bytes == OVERFLOW_FACTOR * 100
    assert push_options(idle_heartbeat=0).idle_heartbeat is None
    assert push_options(idle_heartbeat=5).idle_heartbeat == 5.0


@pytest.mark.parametrize(
    "options",
    [
        {"max_messages": 0},
        {"max_messages": True},
        {"max_bytes": 0},
        {"idle_heartbeat": -1},
        {"idle_heartbeat": "5s"},
        {"idle_heartbeat": float("nan")},
    ],
)
def test_bad_options(options: dict[str, object]) -> None:
    with pytest.raises(InvalidArgumentError):
        push_options(**options)


def test_statuses_are_classified() -> None:
    assert classify_push_status(100, HB) is PushStatus.HEARTBEAT
    assert classify_push_status(100, FC) is PushStatus.FLOW_CONTROL
    assert classify_push_status(409, "Consumer Deleted") is PushStatus.TERMINAL
    assert classify_push_status(409, "Leadership Change") is PushStatus.WARNING
    assert classify_push_status(503, "") is PushStatus.WARNING


# -- flow control --------------------------------------------------------------------------


def test_flow_control_is_answered_at_once_while_the_buffer_has_room() -> None:
    flow = started(max_messages=10)
    flow.receive_batch(9, 900, 1.0)
    assert flow.receive_status(100, FC, 1.0, reply="$JS.FC.a") is PushStatus.FLOW_CONTROL
    assert replies(flow.events()) == ["$JS.FC.a"]
    assert flow.flow_control_replies == 1
    assert flow.held_reply is None


def test_a_full_buffer_holds_the_reply_until_taken_down_to_half() -> None:
    flow = started(max_messages=10)
    flow.receive_batch(10, 1000, 1.0)
    flow.receive_status(100, FC, 1.0, reply="$JS.FC.a")
    assert flow.events() == []
    assert flow.held_reply == "$JS.FC.a"
    assert flow.takes_before_reply() == 5  # 10 buffered, released at 5
    assert flow.take_batch(4, 400, 2.0) is None
    assert flow.takes_before_reply() == 1
    assert flow.take_batch(1, 100, 2.0) == FlowControlReply("$JS.FC.a")
    assert flow.held_reply is None
    assert flow.flow_control_replies == 1
    assert flow.take_batch(5, 500, 2.0) is None  # nothing held any more


def test_a_stalled_heartbeat_names_the_subject_to_answer() -> None:
    flow = started(max_messages=10)
    # Room: a heartbeat saying the server is stalled (a lost reply) is answered.
    flow.receive_status(100, HB, 1.0, stalled="$JS.FC.lost")
    assert replies(flow.events()) == ["$JS.FC.lost"]
    assert flow.stalled_heartbeats == 1
    # Full: the newest subject replaces the held one.
    flow.receive_batch(10, 10, 2.0)
    flow.receive_status(100, FC, 2.0, reply="$JS.FC.old")
    flow.receive_status(100, HB, 3.0, stalled="$JS.FC.new")
    assert flow.events() == []
    assert flow.held_reply == "$JS.FC.new"
    assert flow.take_batch(10, 10, 4.0) == FlowControlReply("$JS.FC.new")


def test_the_byte_limit_holds_replies_too() -> None:
    flow = started(max_messages=100, max_bytes=1000)
    flow.receive_batch(2, 1000, 1.0)
    assert not flow.has_room
    flow.receive_status(100, FC, 1.0, reply="r")
    assert flow.events() == []
    assert flow.takes_before_reply() == 1  # by bytes: every take counts
    assert flow.take_batch(1, 400, 2.0) is None  # 600 bytes left, above half
    assert flow.take_batch(1, 600, 2.0) == FlowControlReply("r")


def test_no_reply_after_drain_or_stop() -> None:
    flow = started(max_messages=2)
    flow.receive_batch(2, 2, 1.0)
    flow.receive_status(100, FC, 1.0, reply="r")
    flow.drain()
    assert flow.finished
    assert flow.take_batch(2, 2, 2.0) is None
    flow.receive_status(100, FC, 2.0, reply="r2")
    assert flow.events() == []
    flow.stop()
    assert flow.state is PushState.DONE
    assert flow.get_timer() is None


def test_overflow_is_measured_against_the_bound() -> None:
    flow = started(max_messages=1, max_bytes=10)  # overflow at 4 messages or 40 bytes
    flow.receive_batch(3, 30, 1.0)
    assert not flow.overflowing(10)
    assert flow.overflowing(11)
    flow.receive_batch(1, 1, 1.0)
    assert flow.overflowing()
    flow.drop(2)
    assert flow.dropped == 2


def test_take_batch_of_more_than_is_buffered_is_a_local_error() -> None:
    flow = started()
    flow.receive_batch(1, 10, 0.0)
    with pytest.raises(LocalProtocolError):
        flow.take_batch(2, 10, 0.0)
    with pytest.raises(LocalProtocolError):
        flow.start(0.0)


# -- heartbeats ----------------------------------------------------------------------------


def test_no_heartbeat_no_timer() -> None:
    flow = started()
    assert flow.get_timer() is None
    flow.handle_timer(100.0)
    assert flow.events() == []


def test_heartbeat_deadline_is_twice_the_interval_after_activity() -> None:
    flow = started(now=10.0, idle_heartbeat=5)
    assert flow.get_timer() == 20.0
    flow.receive_batch(1, 1, 14.0)
    flow.handle_timer(20.0)
    assert flow.events() == []
    assert flow.get_timer() == 24.0  # pushed out
    flow.receive_status(100, HB, 23.0)
    flow.handle_timer(24.0)
    assert flow.get_timer() == 33.0
    flow.handle_timer(33.0)
    assert flow.events() == [HeartbeatMissed()]
    assert flow.heartbeats_missed == 1


def test_missed_heartbeats_are_reported_once_per_two_intervals_not_in_a_storm() -> None:
    flow = started(now=0.0, idle_heartbeat=1)
    missed = 0
    now = 0.0
    while now < 20.0:  # the timer fired far more often than needed
        now += 0.01
        when = flow.get_timer()
        assert when is not None
        if now >= when:
            flow.handle_timer(now)
            missed += sum(isinstance(e, HeartbeatMissed) for e in flow.events())
    assert 9 <= missed <= 10  # one per 2 s of silence


def test_disconnect_pauses_the_heartbeat_check() -> None:
    flow = started(now=0.0, idle_heartbeat=1)
    flow.disconnected()
    assert flow.events() == [Disconnected()]
    assert flow.get_timer() is None
    flow.handle_timer(50.0)
    assert flow.events() == []
    flow.disconnected()  # once
    assert flow.events() == []
    flow.reconnected(60.0)
    assert flow.events() == [Reconnected()]
    assert flow.get_timer() == 62.0


def test_a_paused_consumer_beats_and_nothing_is_missed() -> None:
    # Paused: no message for a long time, but the server's heartbeats keep coming.
    flow = started(now=0.0, idle_heartbeat=1)
    for beat in range(1, 100):
        now = float(beat)
        flow.receive_status(100, HB, now)
        when = flow.get_timer()
        if when is not None and when <= now:
            flow.handle_timer(now)
    assert flow.events() == []
    assert flow.heartbeats_missed == 0


# -- terminal and warnings --------------------------------------------------------------------


def test_consumer_deleted_is_terminal_and_leadership_change_a_warning() -> None:
    flow = started(idle_heartbeat=1)
    flow.receive_status(409, "Leadership Change", 1.0)
    assert flow.events() == [StatusWarning(409, "Leadership Change")]
    assert flow.state is PushState.ACTIVE
    flow.receive_status(409, "Consumer Deleted", 2.0)
    assert flow.events() == [Terminated(409, "Consumer Deleted")]
    assert flow.state is PushState.DONE
    assert flow.get_timer() is None
    flow.terminate(409, "again")
    assert flow.events() == []


def test_terminate_from_outside() -> None:
    flow = started()
    flow.terminate(409, "Consumer Deleted")
    assert flow.events() == [Terminated(409, "Consumer Deleted")]
    assert flow.finished


# -- properties ------------------------------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("receive"), st.integers(0, 30), st.integers(0, 3000)),
        st.tuples(st.just("take"), st.integers(0, 30), st.integers(0, 3000)),
        st.tuples(st.just("fc"), st.integers(0, 5), st.integers(0, 0)),
        st.tuples(st.just("stalled"), st.integers(0, 5), st.integers(0, 0)),
        st.tuples(st.just("beat"), st.integers(0, 0), st.integers(0, 0)),
        st.tuples(st.just("tick"), st.integers(0, 0), st.integers(0, 0)),
    ),
    max_size=80,
)


@given(
    max_messages=st.integers(1, 40),
    max_bytes=st.one_of(st.none(), st.integers(1, 5000)),
    ops=_ops,
)
def test_flow_control_never_answers_over_a_full_buffer_nor_holds_over_an_empty_one(
    max_messages: int, max_bytes: int | None, ops: list[tuple[str, int, int]]
) -> None:
    flow = started(max_messages=max_messages, max_bytes=max_bytes, idle_heartbeat=1)
    now = 0.0
    received = delivered = 0
    asked: list[str] = []  # subjects the server waits on, newest last
    answered: list[str] = []
    for op, n, size in ops:
        now += 0.3
        room_before = flow.has_room
        if op == "receive":
            flow.receive_batch(n, size, now)
            received += n
        elif op == "take":
            n = min(n, flow.buffered_messages)
            size = min(size, flow.buffered_bytes) if n else 0
            if n == flow.buffered_messages:
                size = flow.buffered_bytes
            reply = flow.take_batch(n, size, now)
            delivered += n
            if reply is not None:
                answered.append(reply.subject)
                # Released only once the buffer is down to half.
                assert flow.buffered_messages <= max_messages // 2
        elif op in ("fc", "stalled"):
            subject = f"fc.{len(asked)}"
            asked.append(subject)
            if op == "fc":
                flow.receive_status(100, FC, now, reply=subject)
            else:
                flow.receive_status(100, HB, now, stalled=subject)
            got = replies(flow.events())
            if room_before:
                assert got == [subject]  # room: answered at once
                assert flow.held_reply is None
            else:
                assert got == []
                assert flow.held_reply == subject  # the newest is held
            answered.extend(got)
        elif op == "beat":
            flow.receive_status(100, HB, now)
        else:
            when = flow.get_timer()
            if when is not None and now >= when:
                flow.handle_timer(now)
        flow.events()
        assert flow.buffered_messages == received - delivered
        assert flow.buffered_messages >= 0
        if flow.held_reply is not None:
            # Something is held only while the buffer is above half of a limit.
            over_msgs = flow.buffered_messages > max_messages // 2
            over_bytes = max_bytes is not None and flow.buffered_bytes > max_bytes // 2
            assert over_msgs or over_bytes
        # Every request is answered, or is the one held, or was superseded by a newer one.
        assert set(answered) <= set(asked)
    assert flow.flow_control_replies == len(answered)


@given(
    max_messages=st.integers(2, 60),
    fill=st.integers(0, 60),
    chunks=st.lists(st.integers(1, 10), max_size=40),
)
def test_taking_in_credits_never_releases_a_held_reply_late(
    max_messages: int, fill: int, chunks: list[int]
) -> None:
    """The driver tells the core of takes only every ``takes_before_reply()``
    takes: the reply still goes out exactly when the buffer reaches half."""
    flow = started(max_messages=max_messages)
    flow.receive_batch(max(fill, max_messages), 0, 0.0)
    flow.receive_status(100, FC, 0.0, reply="r")
    assert flow.events() == []
    while flow.buffered_messages:
        credit = flow.takes_before_reply()
        step = min(credit, flow.buffered_messages)
        reply = flow.take_batch(step, 0, 1.0)
        if reply is not None:
            assert flow.buffered_messages == max_messages // 2 or (
                flow.buffered_messages < max_messages // 2 and step == 1
            )
            break
    else:
        pytest.fail("the held reply was never released")
