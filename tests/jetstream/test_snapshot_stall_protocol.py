"""The snapshot scan's end when its messages vanish while it reads them
(``SnapshotScan.get_timer`` / ``handle_timer`` / ``stalled``): synchronous, a
clock moved by hand, and a hypothesis property over vanishing snapshots."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients.jetstream._protocol._snapshot import ScanVerdict, SnapshotScan


def test_no_timer_until_started_and_none_once_done() -> None:
    scan = SnapshotScan(10, latest_only=False, stall_after=2.0)
    assert scan.get_timer() is None
    scan.opened(10)
    scan.start_timer(100.0)
    assert scan.get_timer() == 102.0
    assert SnapshotScan(0, latest_only=False).get_timer() is None
    with pytest.raises(ValueError, match="stall_after"):
        SnapshotScan(1, latest_only=False, stall_after=0)


def test_a_look_is_asked_only_after_a_quiet_interval() -> None:
    scan = SnapshotScan(10, latest_only=False, stall_after=1.0)
    scan.opened(10)
    scan.start_timer(0.0)
    assert scan.deliver(1) is ScanVerdict.TAKE
    assert scan.handle_timer(1.0) is False  # a delivery came: no look
    assert scan.get_timer() == 2.0
    assert scan.handle_timer(2.0) is True  # quiet for a whole interval: look
    assert scan.get_timer() == 3.0


def test_a_consumer_with_nothing_left_ends_a_scan_whose_messages_vanished() -> None:
    scan = SnapshotScan(10, latest_only=False)
    scan.opened(10)
    scan.start_timer(0.0)
    for seq in (1, 2, 3):
        assert scan.deliver(seq) is ScanVerdict.TAKE
    # Something still pending, or a delivery in flight: no stall.
    assert scan.stall_suspected(1, num_pending=5, delivered=3) is False
    assert scan.stall_suspected(1, num_pending=0, delivered=4) is False
    # Nothing pending and every delivery judged: ask the stream from 4 on.
    assert scan.stall_suspected(1, num_pending=0, delivered=3) is True
    assert scan.resume_from == 4
    assert not scan.done
    # A message of the snapshot is still stored: a delivery is due, no stall.
    assert scan.stalled(1, first_left=7) is False
    assert not scan.done
    # None up to last_seq (only later writes, or nothing): the rest (4..10) vanished.
    assert scan.stalled(1, first_left=11) is True
    assert scan.done
    assert scan.taken == 3
    assert scan.get_timer() is None
    assert scan.stall_suspected(1, num_pending=0, delivered=3) is False  # over already
    assert scan.deliver(11) is ScanVerdict.AFTER


def test_a_consumer_that_sends_nothing_while_holding_messages_is_stuck() -> None:
    scan = SnapshotScan(10, latest_only=True)
    scan.opened(10)
    for seq in (1, 2, 3):
        assert scan.deliver(seq) is ScanVerdict.TAKE
    consumer = scan.consumers
    # Messages held for it, a pull waiting, nothing sent beyond what was judged.
    assert scan.stuck(consumer, num_pending=7, num_waiting=1, delivered=3) is True
    # A delivery on its way, no pull waiting, or nothing held: not stuck.
    assert scan.stuck(consumer, num_pending=7, num_waiting=1, delivered=4) is False
    assert scan.stuck(consumer, num_pending=7, num_waiting=0, delivered=3) is False
    assert scan.stuck(consumer, num_pending=0, num_waiting=1, delivered=3) is False
    # The answer about a consumer replaced since is not taken.
    scan.opened(7)
    assert scan.stuck(consumer, num_pending=7, num_waiting=1, delivered=0) is False
    assert scan.stuck(scan.consumers, num_pending=7, num_waiting=1, delivered=0) is True
    # Over (a restarted consumer reached beyond the snapshot): never stuck.
    assert scan.deliver(11) is ScanVerdict.RESUME
    assert scan.stuck(scan.consumers, num_pending=7, num_waiting=1, delivered=1) is False


def test_nothing_stored_at_all_ends_the_scan() -> None:
    scan = SnapshotScan(5, latest_only=True)
    scan.opened(5)
    assert scan.deliver(2) is ScanVerdict.TAKE
    assert scan.stall_suspected(1, num_pending=0, delivered=1) is True
    assert scan.resume_from == 3
    assert scan.stalled(1, first_left=None) is True
    assert scan.taken == 1


def test_the_answer_about_a_replaced_consumer_is_not_taken() -> None:
    scan = SnapshotScan(10, latest_only=True)
    scan.opened(10)
    assert scan.deliver(1) is ScanVerdict.TAKE
    asked_of = scan.consumers
    scan.opened(9)  # a reset: a replacement starts over
    assert scan.resume_from == 2  # what is left to take lies after the delivery
    assert scan.stall_suspected(asked_of, num_pending=0, delivered=1) is False
    assert scan.stalled(asked_of, first_left=None) is False
    assert not scan.done


def test_a_replacement_that_delivered_nothing_looks_after_the_last_delivery() -> None:
    # Every revision (a watch with include_history): the replacement resumes after
    # the last delivery; the messages delivered before the reset are still stored.
    scan = SnapshotScan(10, latest_only=False)
    scan.opened(10)
    for seq in (1, 2, 3):
        assert scan.deliver(seq) is ScanVerdict.TAKE
    scan.opened(7)  # the reset's replacement, created at 4 with 4..10 pending
    assert scan.stall_suspected(2, num_pending=0, delivered=0) is True  # 4..10 vanished
    assert scan.resume_from == 4  # not 1: 1..3, delivered, are no delivery due
    assert scan.stalled(2, first_left=None) is True
    assert scan.taken == 3
    # Resumed from a revision: after the last delivery all the same.
    scan = SnapshotScan(10, latest_only=False, first_seq=5)
    scan.opened(6)
    assert scan.resume_from == 5
    assert scan.deliver(5) is ScanVerdict.TAKE
    scan.opened(5)
    assert scan.resume_from == 6
    assert scan.stalled(2, first_left=11) is True


@given(
    last_seq=st.integers(min_value=2, max_value=60),
    delivered=st.integers(min_value=1, max_value=60),
    kept=st.sets(st.integers(min_value=1, max_value=70), max_size=8),
    latest_only=st.booleans(),
)
def test_after_a_reset_a_stall_ends_the_scan_exactly_when_nothing_is_left_to_take(
    last_seq: int, delivered: int, kept: set[int], latest_only: bool
) -> None:
    # ``delivered`` messages reached the scan, then a reset; its replacement had
    # some pending but delivered none: of the stream, only ``kept`` is stored now.
    delivered = min(delivered, last_seq - 1)
    scan = SnapshotScan(last_seq, latest_only=latest_only)
    scan.opened(last_seq)
    for seq in range(1, delivered + 1):
        assert scan.deliver(seq) is ScanVerdict.TAKE
    scan.opened(last_seq if latest_only else last_seq - delivered)
    assert scan.stall_suspected(2, num_pending=0, delivered=0) is True
    left = sorted(seq for seq in kept if seq >= scan.resume_from)
    ended = scan.stalled(2, first_left=left[0] if left else None)
    # Something is left to take exactly when a message lies after the last delivery
    # and within the snapshot; one delivered already (at or below it) is not.
    assert ended is not any(delivered < seq <= last_seq for seq in kept)
    assert scan.taken == delivered


@given(
    last_seq=st.integers(min_value=1, max_value=60),
    delivered=st.integers(min_value=0, max_value=60),
    in_flight=st.integers(min_value=0, max_value=5),
    kept=st.sets(st.integers(min_value=1, max_value=70), max_size=5),
)
def test_a_scan_ends_on_a_stall_exactly_when_nothing_of_it_is_left(
    last_seq: int, delivered: int, in_flight: int, kept: set[int]
) -> None:
    # The consumer had every message pending; ``delivered`` of them reached the
    # scan and ``in_flight`` more were sent but not judged. Of the rest, only the
    # sequences in ``kept`` are still stored (beyond last_seq: later writes).
    delivered = min(delivered, last_seq - 1)
    in_flight = min(in_flight, last_seq - 1 - delivered)
    scan = SnapshotScan(last_seq, latest_only=False)
    scan.opened(last_seq)
    taken = [seq for seq in range(1, delivered + 1) if scan.deliver(seq) is ScanVerdict.TAKE]
    assert taken == list(range(1, delivered + 1))
    suspected = scan.stall_suspected(1, num_pending=0, delivered=delivered + in_flight)
    assert suspected is (in_flight == 0)
    left = sorted(seq for seq in kept if seq >= scan.resume_from)
    ended = suspected and scan.stalled(1, first_left=left[0] if left else None)
    assert ended is (in_flight == 0 and not any(seq <= last_seq for seq in left))
    assert scan.done is ended
    assert scan.taken == delivered  # nothing invented, nothing lost of what came
