"""Resubscriber: keeps a subscription's place and decides when to re-open it.

States::

    STREAMING --connection_lost(now)--> WAITING --handle_timer(now)--> ATTEMPTING
    ATTEMPTING --resubscribed()--> STREAMING (generation + 1)
    ATTEMPTING --attempt_failed(now)--> WAITING, or GAVE_UP past the deadline
    any --close()--> CLOSED

Rules (liftbridge client guide, "Subscribe Implementation"): the resubscribe
window is ``wait_time`` seconds from the first loss; attempts are spaced by a
random 10-500 ms (injected ``random.Random``); each attempt starts at
``last_offset + 1`` (or at the original start position when nothing was
received), keeping the stop position, so that nothing is skipped or repeated.
:meth:`on_message` drops any offset at or below the last one delivered (a
replica replaying what we already have), any below ``start_offset`` (a broker
asked to start past the end starts at its next message) and messages of an
older generation.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aioclients._errors import LocalProtocolError

if TYPE_CHECKING:
    from random import Random

__all__ = ("ResubscribeAttempt", "Resubscriber", "ResubscriberState")

MIN_WAIT = 0.010
MAX_WAIT = 0.500


class ResubscriberState(enum.Enum):
    STREAMING = "streaming"
    WAITING = "waiting"
    ATTEMPTING = "attempting"
    GAVE_UP = "gave_up"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class ResubscribeAttempt:
    """Open the subscription again; ``start_offset`` None keeps the original start."""

    generation: int
    start_offset: int | None
    attempt: int


class Resubscriber:
    """Position tracking and retry timing of one subscription.

    Args:
        wait_time: how long to keep trying after a loss (``resubscribe_wait_time``).
        rng: the random source for the jittered waits.
        min_wait, max_wait: bounds of one wait, seconds.
        start_offset: the requested start offset (OFFSET subscriptions): lower
            offsets are dropped.
    """

    def __init__(
        self,
        *,
        wait_time: float,
        rng: Random,
        min_wait: float = MIN_WAIT,
        max_wait: float = MAX_WAIT,
        start_offset: int | None = None,
    ) -> None:
        if wait_time < 0:
            raise ValueError(f"wait_time must be >= 0, got {wait_time!r}")
        if not 0 <= min_wait <= max_wait:
            raise ValueError(f"need 0 <= min_wait <= max_wait, got {min_wait!r}, {max_wait!r}")
        self.wait_time = wait_time
        self.rng = rng
        self.min_wait = min_wait
        self.max_wait = max_wait
        self.state = ResubscriberState.STREAMING
        self.last_offset: int | None = None
        # Offsets at or below this are dropped: the last delivered one, or
        # before that start_offset - 1 (a Liftbridge broker asked to start past
        # the end delivers from the next message, whatever its offset).
        self._floor = -1 if start_offset is None else start_offset - 1
        self.generation = 0
        self.attempts = 0
        self.deadline: float | None = None
        self._next_attempt: float | None = None

    # -- messages -------------------------------------------------------------

    def on_message(self, offset: int, generation: int | None = None) -> bool:
        """Record a received offset; False means "drop it" (stale or repeated)."""
        if generation is not None and generation != self.generation:
            return False
        if offset <= self._floor:
            return False
        self._floor = self.last_offset = offset
        return True

    def resume_offset(self) -> int | None:
        """The offset to restart at: ``last_offset + 1``, or None (original start)."""
        return None if self.last_offset is None else self.last_offset + 1

    # -- loss and retry ---------------------------------------------------------

    def connection_lost(self, now: float) -> None:
        """The stream broke (UNAVAILABLE, leader moved): start or continue the window."""
        if self.state in (ResubscriberState.CLOSED, ResubscriberState.GAVE_UP):
            return
        if self.deadline is None:
            self.deadline = now + self.wait_time
            self.attempts = 0
        self._schedule(now)

    def _schedule(self, now: float) -> None:
        assert self.deadline is not None
        if now >= self.deadline:
            self.state = ResubscriberState.GAVE_UP
            self._next_attempt = None
            return
        wait = self.rng.uniform(self.min_wait, self.max_wait)
        self._next_attempt = min(now + wait, self.deadline)
        self.state = ResubscriberState.WAITING

    def get_timer(self) -> float | None:
        """When the next attempt is due (None when not waiting)."""
        return self._next_attempt if self.state is ResubscriberState.WAITING else None

    def handle_timer(self, now: float) -> ResubscribeAttempt | None:
        """If an attempt is due at ``now``, return it (state ATTEMPTING)."""
        if self.state is not ResubscriberState.WAITING or self._next_attempt is None:
            return None
        if now < self._next_attempt:
            return None
        self.state = ResubscriberState.ATTEMPTING
        self._next_attempt = None
        self.attempts += 1
        return ResubscribeAttempt(self.generation + 1, self.resume_offset(), self.attempts)

    def attempt_failed(self, now: float) -> None:
        """The attempt failed with a retriable error: wait again, or give up."""
        if self.state is not ResubscriberState.ATTEMPTING:
            raise LocalProtocolError(f"attempt_failed() in state {self.state.value}")
        self._schedule(now)

    def resubscribed(self) -> int:
        """The attempt succeeded: stream again; returns the new generation."""
        if self.state is not ResubscriberState.ATTEMPTING:
            raise LocalProtocolError(f"resubscribed() in state {self.state.value}")
        self.state = ResubscriberState.STREAMING
        self.generation += 1
        self.deadline = None
        self.attempts = 0
        return self.generation

    @property
    def gave_up(self) -> bool:
        return self.state is ResubscriberState.GAVE_UP

    def close(self) -> None:
        self.state = ResubscriberState.CLOSED
        self._next_attempt = None
