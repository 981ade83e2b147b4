"""Resubscriber on a fake clock: window, jitter bounds, offsets, generations."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients import LocalProtocolError
from aioclients.liftbridge._protocol._resubscribe import Resubscriber, ResubscriberState


def _res(wait_time: float = 30.0, seed: int = 1) -> Resubscriber:
    return Resubscriber(wait_time=wait_time, rng=random.Random(seed))


def test_offsets_drop_repeats_and_track_resume_position() -> None:
    r = _res()
    assert r.resume_offset() is None
    assert [r.on_message(o) for o in (0, 1, 1, 0, 2, 5, 3)] == [
        True,
        True,
        False,
        False,
        True,
        True,
        False,
    ]
    assert r.last_offset == 5
    assert r.resume_offset() == 6


def test_stale_generation_is_dropped() -> None:
    r = _res()
    assert r.on_message(0, generation=0)
    assert not r.on_message(1, generation=7)
    assert r.last_offset == 0


def test_loss_then_successful_resubscribe() -> None:
    r = _res()
    r.on_message(9)
    r.connection_lost(100.0)
    assert r.state is ResubscriberState.WAITING
    assert r.deadline == 130.0
    due = r.get_timer()
    assert due is not None
    assert 100.010 <= due <= 100.500
    assert r.handle_timer(due - 0.001) is None  # not yet
    attempt = r.handle_timer(due)
    assert attempt is not None
    assert (attempt.start_offset, attempt.generation, attempt.attempt) == (10, 1, 1)
    assert r.get_timer() is None
    assert r.resubscribed() == 1
    assert r.state is ResubscriberState.STREAMING
    assert r.deadline is None


def test_nothing_received_keeps_the_original_start() -> None:
    r = _res()
    r.connection_lost(0.0)
    timer = r.get_timer()
    assert timer is not None
    attempt = r.handle_timer(timer)
    assert attempt is not None
    assert attempt.start_offset is None


def test_gives_up_after_the_wait_time() -> None:
    r = _res(wait_time=2.0)
    now = 0.0
    r.connection_lost(now)
    attempts = 0
    while not r.gave_up:
        timer = r.get_timer()
        assert timer is not None
        assert timer <= 2.0
        now = timer
        assert r.handle_timer(now) is not None
        attempts += 1
        r.attempt_failed(now)
    assert attempts >= 4  # waits are 10-500 ms
    assert r.get_timer() is None
    assert r.handle_timer(now + 100) is None


def test_zero_wait_time_gives_up_at_once() -> None:
    r = _res(wait_time=0.0)
    r.connection_lost(5.0)
    assert r.gave_up


def test_a_second_loss_after_success_opens_a_fresh_window() -> None:
    r = _res(wait_time=1.0)
    r.connection_lost(0.0)
    t = r.get_timer()
    assert t is not None
    assert r.handle_timer(t) is not None
    r.resubscribed()
    r.connection_lost(50.0)
    assert r.deadline == 51.0
    assert not r.gave_up


def test_illegal_transitions_raise() -> None:
    r = _res()
    with pytest.raises(LocalProtocolError):
        r.resubscribed()
    with pytest.raises(LocalProtocolError):
        r.attempt_failed(0.0)


def test_close_stops_everything() -> None:
    r = _res()
    r.connection_lost(0.0)
    r.close()
    assert r.get_timer() is None
    assert r.handle_timer(10.0) is None
    r.connection_lost(1.0)
    assert r.state is ResubscriberState.CLOSED


@given(st.integers(0, 2**32), st.floats(0.05, 60.0), st.lists(st.floats(0, 1), max_size=30))
def test_waits_stay_within_bounds_and_the_deadline(
    seed: int, wait_time: float, slack: list[float]
) -> None:
    r = Resubscriber(wait_time=wait_time, rng=random.Random(seed))
    now = 1000.0
    r.connection_lost(now)
    for extra in slack:
        timer = r.get_timer()
        if timer is None:
            assert r.gave_up
            return
        assert timer - now <= 0.5 + 1e-9
        assert timer <= 1000.0 + wait_time
        now = timer + extra * 0.01
        assert r.handle_timer(now) is not None
        r.attempt_failed(now)


@given(st.lists(st.integers(0, 50), max_size=60))
def test_delivered_offsets_are_strictly_increasing(offsets: list[int]) -> None:
    r = _res()
    delivered = [o for o in offsets if r.on_message(o)]
    assert delivered == sorted(set(delivered))
    assert all(b > a for a, b in itertools.pairwise(delivered))
