"""Deadlines on an injected clock.

A :class:`Deadline` is an absolute point on some monotonic clock. It never reads
the clock itself: every question takes ``now``, which keeps protocol cores pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ("Deadline",)


@dataclass(frozen=True, slots=True)
class Deadline:
    """An absolute deadline; ``at = inf`` means "never"."""

    at: float

    @classmethod
    def after(cls, now: float, timeout: float | None) -> Deadline:
        """A deadline ``timeout`` seconds after ``now``; ``None`` means no deadline."""
        if timeout is None:
            return cls(math.inf)
        if timeout < 0 or math.isnan(timeout):
            raise ValueError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
        return cls(now + timeout)

    @classmethod
    def never(cls) -> Deadline:
        return cls(math.inf)

    def remaining(self, now: float) -> float | None:
        """Seconds left (never negative), or ``None`` when there is no deadline."""
        if math.isinf(self.at):
            return None
        return max(0.0, self.at - now)

    def expired(self, now: float) -> bool:
        return now >= self.at

    def earliest(self, other: Deadline) -> Deadline:
        return self if self.at <= other.at else other
