"""HeldBatches: the pure bookkeeping behind the nsq streaming source (no Spark, no I/O)."""

from __future__ import annotations

import pytest

from aioclients.spark._protocol._held_batches import HeldBatches


def test_plan_honours_the_limit_and_numbers_batches_after_the_checkpoint() -> None:
    held: HeldBatches[str] = HeldBatches(touch_interval=10.0, last_batch=4)
    assert held.plan(100) == 4, "nothing pending: no new batch"
    for i in range(250):
        held.receive(f"m{i}", now=0.0)
    assert held.plan(100) == 5
    assert held.plan(100) == 6
    assert held.plan(None) == 7
    assert held.plan(100) == 7
    assert [len(held.messages(n - 1, n)) for n in (5, 6, 7)] == [100, 100, 50]
    assert held.messages(4, 7) == [f"m{i}" for i in range(250)], "in order of arrival"
    assert held.messages(0, 3) == [], "batches of an earlier run are not held"


def test_commit_returns_each_message_once_and_only_up_to_end() -> None:
    held: HeldBatches[int] = HeldBatches(touch_interval=10.0)
    for i in range(10):
        held.receive(i, now=0.0)
    held.plan(4)
    held.plan(4)
    assert held.commit(1) == [0, 1, 2, 3]
    assert held.commit(1) == []
    assert held.batches() == [2]
    assert held.held == 6
    assert held.commit(2) == [4, 5, 6, 7]
    assert held.release() == [8, 9]
    assert held.held == 0


def test_touch_rounds_cover_everything_held_until_it_is_committed() -> None:
    held: HeldBatches[str] = HeldBatches(touch_interval=5.0)
    assert held.get_timer() is None
    held.receive("a", now=1.0)
    assert held.get_timer() == 6.0
    held.receive("b", now=2.0)
    held.plan(1)
    assert list(held.handle_timer(5.9)) == [], "not due yet"
    assert list(held.handle_timer(6.0)) == ["a", "b"]
    assert held.get_timer() == 11.0
    held.commit(1)
    assert list(held.handle_timer(11.0)) == ["b"]
    held.release()
    assert held.get_timer() is None


def test_touch_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="touch_interval"):
        HeldBatches(touch_interval=0)
