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
    # Something still pending, or a delivery in flight: the scan goes on.
    assert scan.stalled(1, num_pending=5, delivered=3) is False
    assert scan.stalled(1, num_pending=0, delivered=4) is False
    assert not scan.done
    # Nothing pending and every delivery judged: the rest (4..10) vanished.
    assert scan.stalled(1, num_pending=0, delivered=3) is True
    assert scan.done
    assert scan.taken == 3
    assert scan.get_timer() is None
    assert scan.deliver(11) is ScanVerdict.AFTER


def test_the_answer_about_a_replaced_consumer_is_not_taken() -> None:
    scan = SnapshotScan(10, latest_only=True)
    scan.opened(10)
    assert scan.deliver(1) is ScanVerdict.TAKE
    asked_of = scan.consumers
    scan.opened(9)  # a reset: a replacement starts over
    assert scan.stalled(asked_of, num_pending=0, delivered=1) is False
    assert not scan.done


@given(
    last_seq=st.integers(min_value=1, max_value=60),
    delivered=st.integers(min_value=0, max_value=60),
    in_flight=st.integers(min_value=0, max_value=5),
)
def test_a_vanished_rest_ends_the_scan_exactly_when_nothing_is_in_flight(
    last_seq: int, delivered: int, in_flight: int
) -> None:
    # The consumer had every message pending; ``delivered`` of them reached the
    # scan, ``in_flight`` more were sent but not judged, and the rest vanished.
    delivered = min(delivered, last_seq - 1)
    in_flight = min(in_flight, last_seq - 1 - delivered)
    scan = SnapshotScan(last_seq, latest_only=False)
    scan.opened(last_seq)
    taken = [seq for seq in range(1, delivered + 1) if scan.deliver(seq) is ScanVerdict.TAKE]
    assert taken == list(range(1, delivered + 1))
    ended = scan.stalled(1, num_pending=0, delivered=delivered + in_flight)
    assert ended is (in_flight == 0)
    assert scan.done is ended
    assert scan.taken == delivered  # nothing invented, nothing lost of what came
