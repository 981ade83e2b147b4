"""The ordered-consumer cursor (ADR-17), driven synchronously against a model server."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients._errors import InvalidArgumentError, LocalProtocolError, RemoteProtocolError
from aioclients.jetstream._protocol._ordered import (
    ConsumerReset,
    CursorState,
    Delivery,
    OrderedCursor,
    ack_sequences,
    ordered_consumer_config,
)


def cursor(**user: object) -> OrderedCursor:
    args: dict[str, object] = dict(
        filter_subjects=None,
        deliver_policy="all",
        opt_start_seq=None,
        opt_start_time=None,
        headers_only=False,
    )
    args.update(user)
    return OrderedCursor(ordered_consumer_config(**args))  # type: ignore[arg-type]


def test_first_consumer_uses_the_user_start_and_adr17_settings() -> None:
    c = cursor(filter_subjects=["a.>"], headers_only=True)
    cfg = c.consumer_config()
    assert cfg == {
        "deliver_policy": "all",
        "filter_subject": "a.>",
        "headers_only": True,
        "ack_policy": "none",
        "max_deliver": 1,
        "mem_storage": True,
        "num_replicas": 1,
        "inactive_threshold": 300.0,
    }
    assert c.state is CursorState.IDLE
    assert c.next_seq == 1


def test_in_order_deliveries_are_yielded() -> None:
    c = cursor()
    gen = c.created()
    assert [c.deliver(gen, i, s) for i, s in [(1, 3), (2, 7), (3, 8)]] == [Delivery.YIELD] * 3
    assert c.stream_seq == 8
    assert c.expected == 4


def test_a_gap_resets_from_the_last_stream_sequence_plus_one() -> None:
    c = cursor(deliver_policy="last_per_subject", filter_subjects=["$KV.b.>"])
    gen = c.created()
    assert c.deliver(gen, 1, 10) is Delivery.YIELD
    assert c.deliver(gen, 3, 12) is Delivery.RESET  # consumer sequence 2 was lost
    assert c.state is CursorState.RESETTING
    assert c.gap_event() == ConsumerReset(11, "gap")
    cfg = c.consumer_config()
    assert cfg["deliver_policy"] == "by_start_sequence"
    assert cfg["opt_start_seq"] == 11
    assert cfg["filter_subject"] == "$KV.b.>"
    # Deliveries of the old consumer still in flight are dropped.
    assert c.deliver(gen, 4, 13) is Delivery.DROP
    gen2 = c.created()
    assert gen2 == gen + 1
    assert c.deliver(gen, 5, 14) is Delivery.DROP
    assert c.deliver(gen2, 1, 11) is Delivery.YIELD


def test_a_reset_before_any_delivery_keeps_the_user_start() -> None:
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    c = cursor(opt_start_time=start)
    c.created()
    assert c.reset("heartbeat") == ConsumerReset(1, "heartbeat")
    cfg = c.consumer_config()
    assert cfg["deliver_policy"] == "by_start_time"
    assert cfg["opt_start_time"] == start
    c2 = cursor(opt_start_seq=40)
    c2.created()
    assert c2.reset("deleted") == ConsumerReset(40, "deleted")


def test_only_the_first_reason_reports_a_reset() -> None:
    c = cursor()
    c.created()
    assert c.reset("reconnect") is not None
    assert c.reset("deleted") is None
    assert c.resets == 1


def test_failed_creates_back_off_on_the_injected_clock() -> None:
    c = cursor()
    c.created()
    c.reset("reconnect")
    assert c.get_timer() is None
    assert c.create_failed(10.0) == pytest.approx(10.1)
    assert c.get_timer() == pytest.approx(10.1)
    assert not c.handle_timer(10.05)
    assert c.handle_timer(10.1)
    assert c.get_timer() is None
    assert c.create_failed(11.0) == pytest.approx(11.2)
    for _ in range(10):
        at = c.create_failed(100.0)
    assert at == pytest.approx(102.0)  # capped
    c.created()
    assert c.get_timer() is None
    assert c.create_failed(0.0) == pytest.approx(0.1)  # a success resets the delay


def test_a_stopped_cursor_yields_nothing_and_cannot_restart() -> None:
    c = cursor()
    gen = c.created()
    c.stop()
    assert c.deliver(gen, 1, 1) is Delivery.DROP
    assert c.reset("gap") is None
    with pytest.raises(LocalProtocolError):
        c.created()


@pytest.mark.parametrize(
    "user",
    [
        {"deliver_policy": "sometimes"},
        {"deliver_policy": "last", "opt_start_seq": 3},
        {"opt_start_seq": 0},
        {"deliver_policy": "by_start_sequence"},
        {"deliver_policy": "by_start_time"},
        {"opt_start_time": datetime(2024, 1, 1)},
        {"filter_subjects": []},
    ],
)
def test_bad_starts_are_refused(user: dict[str, object]) -> None:
    with pytest.raises(InvalidArgumentError):
        cursor(**user)


# -- the property ------------------------------------------------------------------------


@dataclass
class ModelServer:
    """A stream and one consumer delivering it in order, as nats-server does."""

    stream: list[int]
    position: int = 0
    consumer_seq: int = 0
    generation: int = 0
    old: list[tuple[int, int, int]] = field(default_factory=list)

    def create(self, config: dict[str, object], generation: int) -> None:
        if config["deliver_policy"] == "by_start_sequence":
            start = int(config["opt_start_seq"])  # type: ignore[call-overload]
            self.position = next(
                (i for i, s in enumerate(self.stream) if s >= start), len(self.stream)
            )
        else:
            self.position = 0
        self.consumer_seq = 0
        self.generation = generation

    def next(self) -> tuple[int, int, int] | None:
        if self.generation == 0 or self.position >= len(self.stream):
            return None
        self.consumer_seq += 1
        sseq = self.stream[self.position]
        self.position += 1
        delivery = (self.generation, self.consumer_seq, sseq)
        self.old.append(delivery)
        return delivery


ACTIONS = st.sampled_from(
    [
        "deliver",
        "deliver",
        "deliver",
        "lose",
        "heartbeat",
        "reconnect",
        "deleted",
        "stale",
        "stale_aligned",
        "repeat",
        "create",
        "create_fails",
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.integers(1, 60), unique=True, max_size=40).map(sorted),
    st.lists(ACTIONS, max_size=120),
    st.randoms(use_true_random=False),
)
def test_yielded_sequences_strictly_increase_and_none_is_skipped(
    stream: list[int], actions: list[str], rnd: object
) -> None:
    c = cursor()
    server = ModelServer(stream)
    yielded: list[int] = []
    now = 0.0
    lost_tail = False

    def create() -> None:
        server.create(c.consumer_config(), c.created())

    def offer(delivery: tuple[int, int, int]) -> None:
        verdict = c.deliver(*delivery)
        if verdict is Delivery.YIELD:
            yielded.append(delivery[2])
        elif verdict is Delivery.RESET:
            assert c.gap_event().next_seq == (yielded[-1] + 1 if yielded else 1)

    create()
    for action in actions:
        now += 0.05
        if action == "deliver":
            d = server.next()
            if d is not None:
                # A later delivery reveals any loss before it (a gap). Late or repeated
                # messages (below) do not: they are not new deliveries.
                lost_tail = False
                offer(d)
        elif action == "lose":
            # Lost on the way (a slow consumer's dropped message, a broken connection).
            if server.next() is not None:
                lost_tail = True
        elif action in ("heartbeat", "reconnect", "deleted"):
            lost_tail = False
            event = c.reset(action)
            if event is not None:
                assert event.next_seq == (yielded[-1] + 1 if yielded else 1)
        elif action == "stale" and server.old:
            offer(rnd.choice(server.old))  # type: ignore[attr-defined]
        elif action == "stale_aligned":
            # A late message of a replaced consumer that carries the expected number.
            late = [d for d in server.old if d[0] != c.generation and d[1] == c.expected]
            if late:
                offer(late[0])
        elif action == "repeat" and server.old:
            offer(server.old[-1])
        elif action == "create" and c.state is CursorState.RESETTING:
            create()
        elif action == "create_fails" and c.state is CursorState.RESETTING:
            c.create_failed(now)
        assert yielded == sorted(set(yielded))
    # Then the connection behaves: everything left arrives. A loss that nothing
    # followed is noticed as a missed heartbeat (or the reconnect that caused it).
    if lost_tail:
        c.reset("heartbeat")
    for _ in range(2 * len(stream) + 2):
        if c.state is CursorState.RESETTING:
            create()
        d = server.next()
        if d is None:
            break
        offer(d)
    assert yielded == stream


def test_ack_sequences_reads_both_ack_subject_layouts() -> None:
    assert ack_sequences("$JS.ACK.S.C.1.40.7.1700000000000000000.3") == (
        40,
        7,
        3,
        1700000000000000000,
    )
    assert ack_sequences("$JS.ACK._.hash.S.C.2.41.8.1700000000000000001.0.rnd") == (
        41,
        8,
        0,
        1700000000000000001,
    )
    for bad in ("", "_INBOX.x", "$JS.ACK.S.C.1.x.7.1.3", "$JS.ACK.S.C.1.2.3"):
        with pytest.raises(RemoteProtocolError):
            ack_sequences(bad)


def test_rewind_goes_back_to_the_last_message_handed_out() -> None:
    """A stopped stream dropped messages the cursor had judged in order: the next
    consumer starts right after the last one the user got."""
    c = cursor()
    gen = c.created()
    for seq in range(1, 11):
        assert c.deliver(gen, seq, seq) is Delivery.YIELD
    with pytest.raises(LocalProtocolError):
        c.rewind(4)  # not while the consumer runs
    c.release()
    c.rewind(4)
    assert c.stream_seq == 4
    assert c.consumer_config()["opt_start_seq"] == 5
    c.rewind(7)  # never forward
    assert c.stream_seq == 4
    c.rewind(0)  # nothing handed out: the user's own start again
    assert c.consumer_config()["deliver_policy"] == "all"


def test_restart_mode_starts_each_replacement_over_at_the_user_start() -> None:
    c = cursor(deliver_policy="last_per_subject", filter_subjects=["$KV.b.>"])
    c.restart = True
    gen = c.created()
    assert c.deliver(gen, 1, 10) is Delivery.YIELD
    assert c.deliver(gen, 3, 12) is Delivery.RESET  # a gap
    assert c.gap_event() == ConsumerReset(1, "gap")
    cfg = c.consumer_config()
    assert cfg["deliver_policy"] == "last_per_subject"
    assert "opt_start_seq" not in cfg
    gen2 = c.created()
    # The replacement's skip list begins anew: lower sequences are delivered again.
    assert c.deliver(gen2, 1, 4) is Delivery.YIELD
    assert c.deliver(gen2, 2, 10) is Delivery.YIELD
    # resume_after() ends the mode: the next replacement resumes by sequence.
    c.resume_after(10)
    assert c.reset("snapshot") == ConsumerReset(11, "snapshot")
    cfg = c.consumer_config()
    assert (cfg["deliver_policy"], cfg["opt_start_seq"]) == ("by_start_sequence", 11)
    gen3 = c.created()
    assert c.deliver(gen3, 1, 11) is Delivery.YIELD
