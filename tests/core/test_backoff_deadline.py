"""The shared pure helpers: exponential backoff with injected chance, deadlines on injected time."""

from __future__ import annotations

import math
from random import Random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients._core import Backoff, Deadline


def test_backoff_grows_exponentially_then_caps() -> None:
    b = Backoff(initial=1.0, maximum=10.0, multiplier=2.0)
    assert [b.next_delay() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_backoff_reset_starts_over() -> None:
    b = Backoff(initial=0.5, maximum=8.0)
    for _ in range(4):
        b.next_delay()
    b.reset()
    assert b.next_delay() == 0.5


def test_backoff_jitter_is_replayable_with_the_same_seed() -> None:
    a = Backoff(initial=1.0, maximum=100.0, jitter=0.5, rng=Random(7))
    b = Backoff(initial=1.0, maximum=100.0, jitter=0.5, rng=Random(7))
    assert [a.next_delay() for _ in range(10)] == [b.next_delay() for _ in range(10)]


def test_backoff_base_delay_of_huge_attempt_does_not_overflow() -> None:
    assert Backoff(initial=1.0, maximum=30.0).base_delay(10_000) == 30.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial": 0, "maximum": 1},
        {"initial": 2, "maximum": 1},
        {"initial": 1, "maximum": 2, "multiplier": 0.5},
        {"initial": 1, "maximum": 2, "jitter": 1.5},
        {"initial": 1, "maximum": 2, "jitter": 0.5},
    ],
)
def test_backoff_rejects_bad_parameters(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"must be|needs an injected rng"):
        Backoff(**kwargs)


@given(
    initial=st.floats(0.001, 10),
    factor=st.floats(1, 1000),
    multiplier=st.floats(1, 4),
    jitter=st.floats(0, 1),
    seed=st.integers(0, 2**32),
    attempts=st.integers(1, 40),
)
def test_backoff_delay_always_within_bounds(
    initial: float, factor: float, multiplier: float, jitter: float, seed: int, attempts: int
) -> None:
    maximum = initial * factor
    b = Backoff(initial, maximum, multiplier, jitter, Random(seed))
    for attempt in range(attempts):
        base = b.base_delay(attempt)
        delay = b.next_delay()
        assert 0 < delay <= maximum
        assert base * (1 - jitter) - 1e-9 <= delay <= base * (1 + jitter) + 1e-9


def test_deadline_remaining_and_expiry_on_a_fake_clock() -> None:
    d = Deadline.after(100.0, 5.0)
    assert d.remaining(101.0) == 4.0
    assert not d.expired(104.999)
    assert d.expired(105.0)
    assert d.remaining(200.0) == 0.0


def test_deadline_none_means_never() -> None:
    d = Deadline.after(5.0, None)
    assert d.remaining(1e12) is None
    assert not d.expired(1e12)
    assert Deadline.never().at == math.inf


def test_deadline_earliest() -> None:
    a, b = Deadline(3.0), Deadline(7.0)
    assert a.earliest(b) is a
    assert b.earliest(a) is a


@pytest.mark.parametrize("bad", [-1.0, math.nan])
def test_deadline_rejects_bad_timeouts(bad: float) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        Deadline.after(0.0, bad)
