"""Exponential backoff with jitter.

The delay for attempt ``n`` (0-based) is ``min(initial * multiplier**n, maximum)``,
then jittered: with ``jitter = j`` the result is drawn uniformly from
``[delay * (1 - j), delay * (1 + j)]`` and capped again at ``maximum``.
The random source is injected so that tests can replay any sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from random import Random

__all__ = ("Backoff",)


@dataclass(slots=True)
class Backoff:
    """Exponential backoff state.

    Args:
        initial: delay of the first attempt, seconds (> 0).
        maximum: cap on any delay, seconds (>= initial).
        multiplier: growth per attempt (>= 1).
        jitter: fraction of the delay to randomise, 0 to 1.
        rng: the random source; required when ``jitter`` > 0 (a seeded
            ``random.Random`` in tests, ``random.Random()`` in drivers).
    """

    initial: float
    maximum: float
    multiplier: float = 2.0
    jitter: float = 0.0
    rng: Random | None = None
    attempts: int = 0

    def __post_init__(self) -> None:
        if self.initial <= 0:
            raise ValueError(f"initial must be > 0, got {self.initial!r}")
        if self.maximum < self.initial:
            raise ValueError(f"maximum ({self.maximum!r}) must be >= initial ({self.initial!r})")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier!r}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be between 0 and 1, got {self.jitter!r}")
        if self.jitter and self.rng is None:
            raise ValueError("jitter needs an injected rng (a random.Random)")

    def base_delay(self, attempt: int) -> float:
        """The un-jittered delay of ``attempt`` (0-based), capped at ``maximum``."""
        if attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {attempt!r}")
        delay = self.initial
        # Multiply step by step so that huge attempt counts cannot overflow a float.
        for _ in range(attempt):
            delay *= self.multiplier
            if delay >= self.maximum:
                return self.maximum
        return min(delay, self.maximum)

    def next_delay(self) -> float:
        """Return the jittered delay for the current attempt and advance to the next."""
        delay = self.base_delay(self.attempts)
        self.attempts += 1
        if self.jitter and self.rng is not None:
            low = delay * (1.0 - self.jitter)
            high = delay * (1.0 + self.jitter)
            delay = min(self.rng.uniform(low, high), self.maximum)
        return delay

    def reset(self) -> None:
        """Start again from the first attempt (after a success)."""
        self.attempts = 0
