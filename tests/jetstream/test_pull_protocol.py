"""The pull-consumer core (ADR-37 / ADR-42), driven synchronously with a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients._errors import InvalidArgumentError, LocalProtocolError
from aioclients.jetstream._protocol._pull import (
    BYTES_MODE_BATCH,
    NO_RESPONDERS_RETRIES,
    CheckConsumer,
    Disconnected,
    HeartbeatMissed,
    Mode,
    Pinned,
    PullBuffer,
    PullEnded,
    PullRequest,
    PullState,
    Reconnected,
    StatusKind,
    StatusWarning,
    Terminated,
    Unpinned,
    classify_status,
    consume_options,
    fetch_options,
    message_size,
)


def started(mode: Mode = Mode.CONSUME, now: float = 0.0, **options: object) -> PullBuffer:
    opts = consume_options(**options) if mode is Mode.CONSUME else fetch_options(**options)
    buf = PullBuffer(opts, mode)
    buf.start(now)
    return buf


def pulls(events: list[object]) -> list[PullRequest]:
    return [e for e in events if isinstance(e, PullRequest)]


# -- options ---------------------------------------------------------------------------------


def test_consume_defaults_follow_adr_37() -> None:
    opts = consume_options()
    assert opts.max_messages == 500
    assert opts.max_bytes is None
    assert opts.expires == 30.0
    assert opts.idle_heartbeat == 15.0  # half of expires
    assert opts.threshold_messages == 250  # 50 %


@pytest.mark.parametrize(
    ("expires", "heartbeat"),
    [(1.0, 0.5), (1.5, 0.75), (30.0, 15.0), (60.0, 30.0), (600.0, 30.0)],
)
def test_consume_heartbeat_is_half_of_expires_within_bounds(
    expires: float, heartbeat: float
) -> None:
    assert consume_options(expires=expires).idle_heartbeat == heartbeat


def test_max_bytes_sets_a_large_batch_and_byte_threshold() -> None:
    opts = consume_options(max_bytes=10_000)
    assert opts.max_messages == BYTES_MODE_BATCH
    assert opts.max_bytes == 10_000
    assert opts.threshold_bytes == 5_000


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_messages": 10, "max_bytes": 10}, "not both"),
        ({"max_messages": 10, "threshold_messages": 11}, "cannot be above"),
        ({"max_bytes": 10, "threshold_bytes": 11}, "cannot be above"),
        ({"max_bytes": 10, "threshold_messages": 1}, "threshold_messages goes with"),
        ({"max_messages": 10, "threshold_bytes": 1}, "threshold_bytes goes with"),
        ({"expires": 0.5}, "expires"),
        ({"expires": float("nan")}, "expires"),
        ({"expires": True}, "expires"),
        ({"idle_heartbeat": 0.1}, "idle_heartbeat"),
        ({"idle_heartbeat": 31}, "idle_heartbeat"),
        ({"expires": 2, "idle_heartbeat": 1.5}, "half of expires"),
        ({"max_messages": 0}, "max_messages"),
        ({"max_messages": 1.5}, "max_messages"),
        ({"max_bytes": -1}, "max_bytes"),
        ({"group": "bad group"}, "group"),
        ({"group": "g" * 17}, "group"),
        ({"group": 5}, "group"),
        ({"min_pending": 5}, "need group"),
        ({"group": "g", "min_pending": -1}, "min_pending"),
        ({"group": "g", "priority": 10}, "priority"),
    ],
)
def test_consume_rejects_bad_options(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidArgumentError, match=fragment):
        consume_options(**kwargs)


def test_fetch_defaults() -> None:
    opts = fetch_options()
    assert opts.max_messages == 1
    assert opts.idle_heartbeat is None  # only for expiries above 30 s
    assert fetch_options(expires=90).idle_heartbeat == 30.0
    assert fetch_options(expires=40).idle_heartbeat == 20.0
    assert opts.client_timeout > opts.expires
    with pytest.raises(InvalidArgumentError, match="not both"):
        fetch_options(max_messages=1, max_bytes=1)


def test_pull_request_json_uses_nanoseconds_and_adr_42_fields() -> None:
    req = PullRequest(
        batch=5,
        max_bytes=100,
        expires=1.5,
        idle_heartbeat=0.5,
        group="jobs",
        pin_id="abc",
        min_pending=10,
        min_ack_pending=3,
        priority=2,
    )
    assert req.to_json() == {
        "batch": 5,
        "expires": 1_500_000_000,
        "max_bytes": 100,
        "idle_heartbeat": 500_000_000,
        "group": "jobs",
        "id": "abc",
        "min_pending": 10,
        "min_ack_pending": 3,
        "priority": 2,
    }
    assert PullRequest(batch=1, max_bytes=None, expires=1, idle_heartbeat=None).to_json() == {
        "batch": 1,
        "expires": 1_000_000_000,
    }


# -- status table ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "description", "kind"),
    [
        (100, "Idle Heartbeat", StatusKind.HEARTBEAT),
        (400, "Bad Request", StatusKind.TERMINAL),
        (409, "Consumer Deleted", StatusKind.TERMINAL),
        (409, "Consumer is push based", StatusKind.TERMINAL),
        (409, "Exceeded MaxRequestBatch of 10", StatusKind.WARNING),
        (409, "Exceeded MaxRequestExpires of 1s", StatusKind.WARNING),
        (409, "Exceeded MaxRequestMaxBytes of 100", StatusKind.WARNING),
        (409, "Exceeded MaxWaiting", StatusKind.WARNING),
        (404, "No Messages", StatusKind.SILENT),
        (408, "Request Timeout", StatusKind.SILENT),
        (409, "Message Size Exceeds MaxBytes", StatusKind.SILENT),
        (409, "Batch Completed", StatusKind.SILENT),
        (409, "Leadership Change", StatusKind.LEADERSHIP_CHANGE),
        (409, "Server Shutdown", StatusKind.LEADERSHIP_CHANGE),
        (423, "Nats-Pin-Id mismatch", StatusKind.PIN_MISMATCH),
        (503, "", StatusKind.NO_RESPONDERS),
        (409, "Something New", StatusKind.WARNING),
        (418, "Teapot", StatusKind.WARNING),
    ],
)
def test_status_table(code: int, description: str, kind: StatusKind) -> None:
    assert classify_status(code, description) is kind


def test_message_size_counts_subject_reply_headers_and_payload() -> None:
    assert message_size("a.b", "$JS.ACK.x", 20, 100) == 3 + 9 + 20 + 100


# -- consume: buffering and thresholds --------------------------------------------------------


def test_consume_first_pull_fills_the_buffer() -> None:
    buf = started(max_messages=10, expires=5)
    (first,) = buf.events()
    assert first == PullRequest(batch=10, max_bytes=None, expires=5.0, idle_heartbeat=2.5)
    assert buf.pending_messages == 10


def test_consume_refills_exactly_the_room_at_the_threshold() -> None:
    buf = started(max_messages=10)
    buf.events()
    for _ in range(10):
        buf.receive_message(50, 1.0)
    assert (buf.pending_messages, buf.buffered_messages) == (0, 10)
    # Taking 4 leaves 6 outstanding: above the threshold of 5, no pull.
    assert [buf.take(50, 1.0) for _ in range(4)] == [None] * 4
    # The 5th take reaches the threshold: pull for the 5 free slots.
    pull = buf.take(50, 1.0)
    assert pull is not None
    assert pull.batch == 5
    assert buf.outstanding_messages == 10


def test_a_user_who_stops_taking_stops_the_pulls() -> None:
    buf = started(max_messages=4)
    buf.events()
    for _ in range(4):
        buf.receive_message(10, 1.0)
    buf.receive_status(408, "Request Timeout", 2.0, pending_messages=0)
    assert pulls(buf.events()) == []  # full buffer: no room to pull into


def test_max_messages_one_never_gets_stuck() -> None:
    buf = started(max_messages=1)
    assert pulls(buf.events())[0].batch == 1
    for i in range(5):
        buf.receive_message(10, float(i))
        pull = buf.take(10, float(i))
        assert pull is not None
        assert pull.batch == 1


def test_threshold_equal_to_the_limit_pulls_after_every_message() -> None:
    buf = started(max_messages=3, threshold_messages=3)
    buf.events()
    buf.receive_message(1, 0.0)
    pull = buf.take(1, 0.0)
    assert pull is not None
    assert pull.batch == 1


def test_expired_pull_with_pending_headers_triggers_a_refill() -> None:
    buf = started(max_messages=10)
    buf.events()
    for _ in range(3):
        buf.receive_message(10, 1.0)
        buf.take(10, 1.0)
    # The server ends the pull: 7 messages of it will never come.
    assert buf.receive_status(408, "Request Timeout", 2.0, pending_messages=7) is StatusKind.SILENT
    (pull,) = pulls(buf.events())
    assert pull.batch == 10
    assert buf.pending_messages == 10


def test_pending_headers_never_drive_counts_negative() -> None:
    buf = started(max_messages=4)
    buf.events()
    buf.receive_status(408, "Request Timeout", 1.0, pending_messages=100, pending_bytes=100)
    assert buf.pending_messages == 4  # refilled from zero, not from -96
    assert buf.pending_bytes == 0


def test_max_bytes_mode_sizes_pulls_by_bytes() -> None:
    buf = started(max_bytes=1000)
    (first,) = buf.events()
    assert first.batch == BYTES_MODE_BATCH
    assert first.max_bytes == 1000
    for _ in range(5):
        buf.receive_message(100, 1.0)
    # 500 received and buffered: outstanding bytes still 1000.
    assert buf.outstanding_bytes == 1000
    assert [buf.take(100, 1.0) for _ in range(4)] == [None] * 4
    pull = buf.take(100, 1.0)  # outstanding bytes fall to the 500 threshold
    assert pull is not None
    assert pull.max_bytes == 500
    assert buf.pending_bytes == 1000


def test_bytes_status_subtracts_pending_bytes() -> None:
    buf = started(max_bytes=1000)
    buf.events()
    buf.receive_message(300, 1.0)
    buf.take(300, 1.0)
    buf.receive_status(
        409,
        "Message Size Exceeds MaxBytes",
        1.0,
        pending_messages=BYTES_MODE_BATCH - 1,
        pending_bytes=700,
    )
    (pull,) = pulls(buf.events())
    assert pull.max_bytes == 1000


# -- consume: statuses -------------------------------------------------------------------------


@pytest.mark.parametrize("description", ["Consumer Deleted", "Consumer is push based"])
def test_terminal_409_ends_consume(description: str) -> None:
    buf = started()
    buf.events()
    buf.receive_status(409, description, 1.0)
    assert buf.events() == [Terminated(409, description)]
    assert buf.state is PullState.DONE
    assert buf.get_timer() is None


def test_400_is_terminal() -> None:
    buf = started()
    buf.events()
    buf.receive_status(400, "Bad Request", 1.0)
    assert buf.events() == [Terminated(400, "Bad Request")]


@pytest.mark.parametrize(
    "description",
    [
        "Exceeded MaxRequestBatch of 10",
        "Exceeded MaxRequestExpires of 1s",
        "Exceeded MaxRequestMaxBytes of 5",
        "Exceeded MaxWaiting",
    ],
)
def test_warnings_are_reported_and_not_terminal(description: str) -> None:
    buf = started()
    buf.events()
    buf.receive_status(409, description, 1.0)
    assert buf.events() == [StatusWarning(409, description)]
    assert buf.state is PullState.ACTIVE


@pytest.mark.parametrize(
    ("code", "description"),
    [(404, "No Messages"), (408, "Request Timeout"), (409, "Message Size Exceeds MaxBytes")],
)
def test_silent_statuses_report_nothing(code: int, description: str) -> None:
    buf = started(max_messages=10)
    buf.events()
    buf.receive_status(code, description, 1.0)
    assert [e for e in buf.events() if not isinstance(e, PullRequest)] == []


def test_heartbeat_status_only_counts_as_activity() -> None:
    buf = started(max_messages=10, expires=4)  # heartbeat 2 s -> deadline 4 s
    buf.events()
    assert buf.receive_status(100, "Idle Heartbeat", 3.0) is StatusKind.HEARTBEAT
    assert buf.events() == []
    buf.handle_timer(4.0)  # the old deadline: activity at 3 s pushes it to 7 s
    assert buf.events() == []
    assert buf.get_timer() == 7.0


def test_leadership_change_resets_pending() -> None:
    buf = started(max_messages=10)
    buf.events()
    buf.receive_status(409, "Leadership Change", 1.0)
    (pull,) = pulls(buf.events())
    assert pull.batch == 10


# -- heartbeats -------------------------------------------------------------------------------


def test_heartbeat_deadline_is_twice_the_interval_from_the_last_message() -> None:
    buf = started(now=100.0, max_messages=10, expires=10)  # heartbeat 5 s
    buf.events()
    assert buf.get_timer() == 110.0
    buf.receive_message(1, 104.0)
    buf.handle_timer(110.0)
    assert buf.events() == []
    assert buf.get_timer() == 114.0
    buf.handle_timer(114.0)
    events = buf.events()
    assert events[0] == HeartbeatMissed()
    assert pulls(events), "a missed heartbeat sends a fresh pull"
    assert buf.heartbeats_missed == 1
    assert buf.state is PullState.ACTIVE


def test_missed_heartbeat_resets_pending_then_pulls_for_the_room() -> None:
    buf = started(max_messages=10, expires=2)
    buf.events()
    for _ in range(3):
        buf.receive_message(1, 0.1)
    buf.handle_timer(10.0)
    events = buf.events()
    assert events[0] == HeartbeatMissed()
    (pull,) = pulls(events)
    assert pull.batch == 7  # 3 still buffered
    assert buf.pending_messages == 7


def test_no_heartbeat_alarm_while_the_user_holds_a_full_buffer() -> None:
    buf = started(max_messages=2, expires=2)
    buf.events()
    buf.receive_message(1, 0.0)
    buf.receive_message(1, 0.0)
    # Nothing is pending on the server, so no heartbeats are due.
    buf.handle_timer(100.0)
    assert buf.events() == []
    assert buf.get_timer() is None


def test_disconnect_pauses_heartbeats_and_reconnect_pulls_afresh() -> None:
    buf = started(max_messages=10, expires=2)
    buf.events()
    buf.receive_message(1, 0.5)
    buf.disconnected()
    assert buf.events() == [Disconnected()]
    assert buf.get_timer() is None
    buf.handle_timer(50.0)
    assert buf.events() == []
    buf.reconnected(60.0)
    events = buf.events()
    assert events[0] == Reconnected()
    (pull,) = pulls(events)
    assert pull.batch == 9  # one message still buffered
    assert buf.get_timer() == 62.0


def test_no_pulls_while_disconnected() -> None:
    buf = started(max_messages=2)
    buf.events()
    buf.receive_message(1, 0.0)
    buf.receive_message(1, 0.0)
    buf.disconnected()
    buf.events()
    assert buf.take(1, 0.0) is None
    assert buf.take(1, 0.0) is None


# -- ADR-42 pin id ------------------------------------------------------------------------------


def test_pin_id_is_stored_and_sent_in_later_pulls() -> None:
    buf = started(max_messages=2, group="jobs")
    assert pulls(buf.events())[0].pin_id is None
    buf.receive_message(1, 0.0, pin_id="P1")
    assert buf.events() == [Pinned("P1")]
    buf.receive_message(1, 0.0, pin_id="P1")
    assert buf.events() == []  # same pin: no second event
    buf.take(1, 0.0)
    pull = buf.take(1, 0.0)
    assert pull is not None
    assert pull.pin_id == "P1"
    assert pull.group == "jobs"


def test_423_clears_the_pin_zeroes_pending_and_pulls_without_it() -> None:
    buf = started(max_messages=4, group="jobs")
    buf.events()
    buf.receive_message(1, 0.0, pin_id="P1")
    buf.events()
    buf.receive_status(423, "Nats-Pin-Id mismatch", 1.0)
    events = buf.events()
    assert events[0] == Unpinned()
    (pull,) = pulls(events)
    assert pull.pin_id is None
    assert pull.batch == 3  # pending zeroed; one message buffered
    assert buf.pin_id is None


def test_a_new_pin_id_replaces_the_old() -> None:
    buf = started(max_messages=4, group="jobs")
    buf.events()
    buf.receive_message(1, 0.0, pin_id="P1")
    buf.receive_message(1, 0.0, pin_id="P2")
    assert buf.events() == [Pinned("P1"), Pinned("P2")]
    assert buf.pin_id == "P2"


# -- draining and stopping ----------------------------------------------------------------------


def test_drain_stops_pulls_but_keeps_the_buffer() -> None:
    buf = started(max_messages=2)
    buf.events()
    buf.receive_message(1, 0.0)
    buf.receive_message(1, 0.0)
    buf.drain()
    assert buf.finished
    assert buf.take(1, 0.0) is None
    assert buf.take(1, 0.0) is None
    buf.receive_status(408, "Request Timeout", 1.0)
    assert buf.events() == []
    assert buf.get_timer() is None


def test_take_without_a_message_is_a_local_error() -> None:
    buf = started()
    with pytest.raises(LocalProtocolError):
        buf.take(1, 0.0)


def test_start_twice_is_a_local_error() -> None:
    buf = started()
    with pytest.raises(LocalProtocolError):
        buf.start(1.0)


# -- fetch ------------------------------------------------------------------------------------


def test_fetch_is_exactly_one_pull_and_ends_with_the_batch() -> None:
    buf = started(Mode.FETCH, max_messages=3, expires=5)
    (pull,) = buf.events()
    assert isinstance(pull, PullRequest)
    assert pull.batch == 3
    assert pull.idle_heartbeat is None
    for _ in range(2):
        buf.receive_message(1, 0.0)
        assert buf.take(1, 0.0) is None
    assert not buf.finished
    buf.receive_message(1, 0.0)
    assert buf.events() == [PullEnded("complete")]
    assert buf.finished


@pytest.mark.parametrize(
    ("code", "description", "reason"),
    [
        (404, "No Messages", "no_messages"),
        (408, "Request Timeout", "expired"),
        (409, "Message Size Exceeds MaxBytes", "complete"),
        (409, "Batch Completed", "complete"),
    ],
)
def test_fetch_ends_on_the_pull_ending_statuses(code: int, description: str, reason: str) -> None:
    buf = started(Mode.FETCH, max_messages=10)
    buf.events()
    buf.receive_status(code, description, 1.0)
    assert buf.events() == [PullEnded(reason)]


def test_fetch_by_bytes_ends_when_the_bytes_arrive() -> None:
    buf = started(Mode.FETCH, max_bytes=250)
    buf.events()
    buf.receive_message(100, 0.0)
    buf.receive_message(100, 0.0)
    assert buf.events() == []
    buf.receive_message(100, 0.0)
    assert buf.events() == [PullEnded("complete")]


def test_fetch_client_side_deadline_is_above_the_expiry() -> None:
    buf = started(Mode.FETCH, now=10.0, max_messages=1, expires=5)
    buf.events()
    deadline = buf.get_timer()
    assert deadline is not None
    assert deadline > 15.0
    buf.handle_timer(15.0)
    assert buf.events() == []
    buf.handle_timer(deadline)
    assert buf.events() == [PullEnded("timeout")]


def test_fetch_heartbeat_miss_ends_it() -> None:
    buf = started(Mode.FETCH, max_messages=5, expires=10, idle_heartbeat=1)
    buf.events()
    buf.handle_timer(2.0)
    assert buf.events() == [HeartbeatMissed(), PullEnded("heartbeat")]


def test_fetch_terminal_status() -> None:
    buf = started(Mode.FETCH, max_messages=5)
    buf.events()
    buf.receive_status(409, "Consumer Deleted", 1.0)
    assert buf.events() == [Terminated(409, "Consumer Deleted")]


def test_fetch_ends_quietly_when_the_server_shuts_down() -> None:
    buf = started(Mode.FETCH, max_messages=5)
    buf.events()
    buf.receive_status(409, "Server Shutdown", 1.0)
    assert buf.events() == [PullEnded("terminated")]


def test_a_refused_fetch_ends_with_the_refusal() -> None:
    buf = started(Mode.FETCH, max_messages=5)
    buf.events()
    buf.receive_status(409, "Exceeded MaxRequestBatch of 2", 1.0)
    assert buf.events() == [Terminated(409, "Exceeded MaxRequestBatch of 2")]


def test_fetch_reconnect_ends_it() -> None:
    buf = started(Mode.FETCH, max_messages=5)
    buf.events()
    buf.disconnected()
    buf.reconnected(1.0)
    assert buf.events() == [Disconnected(), Reconnected(), PullEnded("expired")]


# -- properties ---------------------------------------------------------------------------------

_actions = st.lists(
    st.one_of(
        st.tuples(st.just("msg"), st.integers(1, 500)),
        st.tuples(st.just("take"), st.just(0)),
        st.tuples(st.just("status"), st.sampled_from([404, 408, 409, 423, 100, 4091])),
        st.tuples(st.just("pending_hdr"), st.integers(0, 2000)),
        st.tuples(st.just("timer"), st.floats(0, 100)),
        st.tuples(st.just("disconnect"), st.just(0)),
        st.tuples(st.just("reconnect"), st.just(0)),
    ),
    max_size=120,
)


def _run(buf: PullBuffer, actions: list[tuple[str, float]]) -> None:
    now = 0.0
    sizes: list[int] = []
    for kind, arg in actions:
        now += 0.25
        if kind == "msg":
            buf.receive_message(int(arg), now, pin_id="P" if arg % 7 == 0 else None)
            sizes.append(int(arg))
        elif kind == "take":
            if sizes:
                buf.take(sizes.pop(0), now)
        elif kind == "status":
            code = int(arg)
            desc = {404: "No Messages", 408: "Request Timeout", 409: "Exceeded MaxWaiting"}.get(
                code, "Message Size Exceeds MaxBytes" if code == 4091 else "x"
            )
            buf.receive_status(409 if code == 4091 else code, desc, now)
        elif kind == "pending_hdr":
            buf.receive_status(408, "Request Timeout", now, int(arg), int(arg) * 10)
        elif kind == "timer":
            now += arg
            buf.handle_timer(now)
        elif kind == "disconnect":
            buf.disconnected()
        elif kind == "reconnect":
            buf.reconnected(now)
        buf.events()
        yield_check(buf)


def yield_check(buf: PullBuffer) -> None:
    opts = buf.options
    assert buf.pending_messages >= 0
    assert buf.pending_bytes >= 0
    assert buf.buffered_messages >= 0
    # What is requested never exceeds the room: outstanding is bounded by the limit,
    # except for messages the server sends beyond what we still count as pending
    # (after a reset), which are buffered but never requested again.
    assert buf.pending_messages <= opts.max_messages
    if opts.max_bytes is not None:
        assert buf.pending_bytes <= opts.max_bytes
    if buf.mode is Mode.CONSUME and buf.state is PullState.ACTIVE and buf.connected:
        # A pull is in flight whenever the buffer has room below the threshold.
        out = buf.outstanding_messages
        if opts.max_bytes is None:
            assert out > opts.threshold_messages or out >= opts.max_messages
        else:
            outb = buf.outstanding_bytes
            assert (
                outb >= opts.max_bytes
                or out >= opts.max_messages
                or (outb > opts.threshold_bytes and out > opts.threshold_messages)
            )


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(1, 50),
    threshold=st.one_of(st.none(), st.integers(0, 50)),
    actions=_actions,
)
def test_consume_invariants_by_messages(
    limit: int, threshold: int | None, actions: list[tuple[str, float]]
) -> None:
    if threshold is not None and threshold > limit:
        threshold = limit
    buf = started(max_messages=limit, threshold_messages=threshold, expires=2, group="g")
    buf.events()
    _run(buf, actions)


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(1, 5000), actions=_actions)
def test_consume_invariants_by_bytes(limit: int, actions: list[tuple[str, float]]) -> None:
    buf = started(max_bytes=limit, expires=2)
    buf.events()
    _run(buf, actions)


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(1, 20), actions=_actions)
def test_fetch_sends_exactly_one_pull(limit: int, actions: list[tuple[str, float]]) -> None:
    buf = PullBuffer(fetch_options(max_messages=limit, expires=2, idle_heartbeat=1), Mode.FETCH)
    buf.start(0.0)
    assert len(pulls(buf.events())) == 1
    now = 0.0
    for kind, arg in actions:
        now += 0.1
        if kind == "msg":
            buf.receive_message(int(arg), now)
        elif kind == "timer":
            buf.handle_timer(now + arg)
        elif kind == "reconnect":
            buf.reconnected(now)
        assert pulls(buf.events()) == []
        assert buf.pulls == 1
        assert buf.pending_messages >= 0


def test_fetch_no_responders_before_any_message_asks_for_a_check() -> None:
    buf = started(Mode.FETCH, max_messages=5, expires=10)
    buf.events()
    assert buf.receive_status(503, "", 1.0) is StatusKind.NO_RESPONDERS
    assert buf.events() == [CheckConsumer(503, "No Responders", 10.0)]
    assert buf.state is PullState.ACTIVE
    assert buf.pending_messages == 0  # the pull is gone


def test_fetch_pulls_again_for_the_time_left_when_the_consumer_exists() -> None:
    buf = started(Mode.FETCH, max_messages=5, expires=10)
    buf.events()
    buf.receive_status(503, "", 1.0)
    buf.events()
    buf.consumer_exists(2.5)
    assert buf.events() == [PullRequest(batch=5, max_bytes=None, expires=7.5, idle_heartbeat=None)]
    assert buf.pulls == 2
    assert buf.pending_messages == 5
    buf.receive_message(10, 3.0)
    assert buf.received == 1
    assert buf.state is PullState.ACTIVE


def test_fetch_retried_pull_by_bytes_asks_for_all_the_bytes_again() -> None:
    buf = started(Mode.FETCH, max_bytes=1000, expires=10)
    buf.events()
    buf.receive_status(503, "", 1.0)
    buf.events()
    buf.consumer_exists(1.0)
    (pull,) = pulls(buf.events())
    assert pull.max_bytes == 1000
    assert pull.expires == 9.0
    assert buf.pending_bytes == 1000


def test_fetch_no_responders_after_the_retries_is_terminal() -> None:
    buf = started(Mode.FETCH, max_messages=5, expires=10)
    buf.events()
    for attempt in range(NO_RESPONDERS_RETRIES):
        buf.receive_status(503, "", 1.0 + attempt)
        assert isinstance(buf.events()[0], CheckConsumer)
        buf.consumer_exists(1.5 + attempt)
        assert len(pulls(buf.events())) == 1
    buf.receive_status(503, "", 5.0)
    assert buf.events() == [Terminated(503, "No Responders")]
    assert buf.state is PullState.DONE
    assert buf.pulls == 1 + NO_RESPONDERS_RETRIES


def test_fetch_check_finding_no_consumer_terminates() -> None:
    buf = started(Mode.FETCH, max_messages=5, expires=10)
    buf.events()
    buf.receive_status(503, "", 1.0)
    buf.events()
    buf.terminate(503, "No Responders")
    assert buf.events() == [Terminated(503, "No Responders")]
    assert buf.get_timer() is None
    buf.consumer_exists(2.0)  # a late answer changes nothing
    assert buf.events() == []


@pytest.mark.parametrize(
    ("options", "at_503", "at_answer"),
    [
        ({"expires": 10}, 9.95, None),  # too little left to ask
        ({"expires": 10, "idle_heartbeat": 2}, 6.5, None),  # the server wants >= 2 * hb
        ({"expires": 10}, 1.0, 9.95),  # the time ran out during the check
    ],
)
def test_fetch_no_responders_without_time_left_is_terminal(
    options: dict[str, float], at_503: float, at_answer: float | None
) -> None:
    buf = started(Mode.FETCH, max_messages=5, **options)
    buf.events()
    buf.receive_status(503, "", at_503)
    if at_answer is not None:
        assert isinstance(buf.events()[0], CheckConsumer)
        buf.consumer_exists(at_answer)
    assert buf.events() == [Terminated(503, "No Responders")]
    assert buf.pulls == 1


def test_fetch_no_responders_after_a_message_is_terminal() -> None:
    buf = started(Mode.FETCH, max_messages=5, expires=10)
    buf.events()
    buf.receive_message(10, 0.5)
    buf.receive_status(503, "", 1.0)
    assert buf.events() == [Terminated(503, "No Responders")]


def test_fetch_timeout_during_the_check_ends_it_and_the_answer_is_ignored() -> None:
    buf = started(Mode.FETCH, max_messages=5, expires=10)
    buf.events()
    buf.receive_status(503, "", 1.0)
    buf.events()
    assert buf.get_timer() == buf.options.client_timeout  # no heartbeat timer meanwhile
    buf.handle_timer(buf.options.client_timeout)
    assert buf.events() == [PullEnded("timeout")]
    buf.consumer_exists(2.0)
    assert buf.events() == []
    assert buf.pulls == 1


def test_fetch_a_second_503_during_the_check_is_ignored() -> None:
    buf = started(Mode.FETCH, max_messages=5, expires=10)
    buf.events()
    buf.receive_status(503, "", 1.0)
    buf.events()
    buf.receive_status(503, "", 1.1)
    assert buf.events() == []
    buf.consumer_exists(1.2)
    assert len(pulls(buf.events())) == 1


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(1, 20),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["503", "exists", "gone", "msg", "408", "timer"]),
            st.floats(0.0, 3.0),
        ),
        max_size=25,
    ),
)
def test_fetch_no_responder_retries_stay_within_the_pull_expiry(
    limit: int, steps: list[tuple[str, float]]
) -> None:
    expires = 10.0
    buf = started(Mode.FETCH, max_messages=limit, expires=expires)
    (first,) = pulls(buf.events())
    assert first.expires == expires
    now = 0.0
    sent = 1
    checks = 0
    for kind, dt in steps:
        now += dt
        if kind == "503":
            buf.receive_status(503, "", now)
        elif kind == "exists":
            buf.consumer_exists(now)
        elif kind == "gone":
            buf.terminate(503, "No Responders")
        elif kind == "msg":
            buf.receive_message(10, now)
        elif kind == "408":
            buf.receive_status(408, "Request Timeout", now)
        else:
            buf.handle_timer(now)
        events = buf.events()
        new = pulls(events)
        checks += sum(isinstance(e, CheckConsumer) for e in events)
        for pull in new:
            # A retry expires no later than the first pull would have.
            assert 0 < pull.expires <= expires - now + 1e-9
            assert pull.batch == limit
        sent += len(new)
        assert sent <= 1 + checks <= 1 + NO_RESPONDERS_RETRIES + 1
        assert sent == buf.pulls
        assert sent <= 1 + NO_RESPONDERS_RETRIES
        if buf.state is PullState.DONE:
            assert buf.get_timer() is None


def test_consume_no_responders_is_a_warning_for_the_driver_to_check() -> None:
    buf = started(max_messages=5)
    buf.events()
    assert buf.receive_status(503, "", 1.0) is StatusKind.NO_RESPONDERS
    assert buf.events() == [StatusWarning(503, "")]
    assert buf.state is PullState.ACTIVE


def test_a_message_larger_than_max_bytes_ends_consume_instead_of_spinning() -> None:
    buf = started(max_bytes=50)
    buf.events()
    # The whole buffer was asked for and nothing came: it can never fit.
    buf.receive_status(
        409,
        "Message Size Exceeds MaxBytes",
        1.0,
        pending_messages=BYTES_MODE_BATCH,
        pending_bytes=50,
    )
    assert buf.events() == [Terminated(409, "Message Size Exceeds MaxBytes")]


def test_size_exceeded_on_a_partial_pull_just_pulls_again() -> None:
    buf = started(max_bytes=1000)
    buf.events()
    buf.receive_message(600, 1.0)
    buf.take(600, 1.0)  # outstanding 400 -> pull for 600 more
    # The rest of the first pull (400 bytes) cannot hold the next message.
    buf.receive_status(
        409,
        "Message Size Exceeds MaxBytes",
        1.0,
        pending_messages=BYTES_MODE_BATCH - 1,
        pending_bytes=400,
    )
    events = buf.events()
    assert not any(isinstance(e, Terminated) for e in events)
    assert buf.state is PullState.ACTIVE


def test_infinite_durations_are_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match="expires"):
        consume_options(expires=float("inf"))
    with pytest.raises(InvalidArgumentError, match="expires"):
        fetch_options(expires=float("inf"))


# -- batch accounting (the ordered consumers' BatchStream) ------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    max_messages=st.integers(min_value=1, max_value=50),
    batches=st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=20),
)
def test_batch_accounting_keeps_the_pull_window(max_messages: int, batches: list[int]) -> None:
    """receive_batch/take_batch of n messages count as n calls of
    receive_message/take do, and the pull then due refills the window exactly:
    never more than max_messages outstanding, never idle at or below the threshold."""
    one = started(max_messages=max_messages)
    many = started(max_messages=max_messages)
    threshold = many.options.threshold_messages
    for n in batches:
        n = min(n, one.pending_messages, many.pending_messages)
        if n == 0:
            break
        for _ in range(n):
            one.receive_message(10, 1.0)
            one.take(10, 1.0)
        many.receive_batch(n, 10 * n, 1.0)
        pull = many.take_batch(n, 10 * n, 1.0)
        for name in ("received", "received_bytes", "buffered_messages", "delivered"):
            assert getattr(one, name) == getattr(many, name), name
        outstanding = many.pending_messages + many.buffered_messages
        assert outstanding <= max_messages
        if pull is not None:
            assert outstanding == max_messages
        else:
            assert outstanding > threshold or outstanding >= max_messages


def test_batch_accounting_refuses_what_it_cannot_account() -> None:
    buf = started(max_messages=10)
    with pytest.raises(LocalProtocolError):
        buf.take_batch(1, 10, 1.0)  # nothing buffered
    fetch = started(Mode.FETCH, max_messages=10, expires=5)
    with pytest.raises(LocalProtocolError):
        fetch.receive_batch(1, 10, 1.0)  # fetches count each message (they end on it)
    grouped = started(max_messages=10, group="g")
    with pytest.raises(LocalProtocolError):
        grouped.receive_batch(1, 10, 1.0)  # pins come per message


@settings(max_examples=300, deadline=None)
@given(
    max_messages=st.integers(min_value=1, max_value=60),
    threshold=st.one_of(st.none(), st.integers(min_value=0, max_value=60)),
    steps=st.lists(
        st.tuples(st.sampled_from(["recv", "take"]), st.integers(min_value=1, max_value=40)),
        min_size=1,
        max_size=40,
    ),
)
def test_taking_by_credit_pulls_when_taking_one_by_one_does(
    max_messages: int, threshold: int | None, steps: list[tuple[str, int]]
) -> None:
    """A driver that tells the core of takes only when takes_before_pull() of them
    are done (and of receipts only then) sends the same pulls after the same take
    as one that tells it of each message at once."""
    if threshold is not None and threshold > max_messages:
        threshold = max_messages
    one = started(max_messages=max_messages, threshold_messages=threshold)
    lazy = started(max_messages=max_messages, threshold_messages=threshold)
    (first,) = pulls(one.events())
    assert pulls(lazy.events()) == [first]
    received = taken = credit = 0  # the lazy driver's untold counts
    for kind, n in steps:
        for _ in range(n):
            if kind == "recv":
                if one.pending_messages == 0:
                    break  # the server sends no more than was pulled
                one.receive_message(7, 1.0)
                received += 1
                continue
            if one.buffered_messages == 0:
                break
            expected = one.take(7, 1.0)
            taken += 1
            got = None
            if taken >= credit:
                if received:
                    lazy.receive_batch(received, 7 * received, 1.0)
                got = lazy.take_batch(taken, 7 * taken, 1.0)
                received = taken = 0
                credit = lazy.takes_before_pull()
                assert credit >= 1
            assert got == expected
    if received:
        lazy.receive_batch(received, 7 * received, 1.0)
    if taken:
        assert lazy.take_batch(taken, 7 * taken, 1.0) is None
    assert (lazy.pending_messages, lazy.buffered_messages, lazy.pulls, lazy.delivered) == (
        one.pending_messages,
        one.buffered_messages,
        one.pulls,
        one.delivered,
    )


def test_takes_before_pull_is_one_where_each_take_must_be_told() -> None:
    assert started(max_bytes=1000).takes_before_pull() == 1
    assert started(Mode.FETCH, max_messages=10).takes_before_pull() == 1
    buf = started(max_messages=10)
    assert buf.takes_before_pull() == 5  # 10 pending, threshold 5
    buf.drain()
    assert buf.takes_before_pull() == 1
