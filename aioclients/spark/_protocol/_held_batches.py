"""Messages an NSQ streaming source holds in flight until Spark commits them (pure).

Theory of operation. NSQ keeps no replayable log, so the ``nsq`` streaming source
keeps every message it received in flight at nsqd (unanswered) until the Spark
micro-batch that contains it is committed:

- ``receive`` adds a delivered message to the *pending* list;
- ``plan(limit)`` (Spark's ``latestOffset``) moves up to ``limit`` pending
  messages into a new batch, numbered one past the last (offsets are batch
  numbers, monotonically increasing);
- ``messages(start, end)`` (Spark's ``partitions``) returns the batches
  ``start + 1 .. end``;
- ``commit(end)`` (Spark's ``commit``) removes the batches up to ``end`` and
  returns their messages, which the driver then FINishes.

Everything held (pending or planned) must be TOUCHed before nsqd's msg_timeout:
``get_timer()`` is the next touch round, ``handle_timer(now)`` returns what to
touch then. Time is an argument (``now``); nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

__all__ = ("HeldBatches",)

M = TypeVar("M")


class HeldBatches(Generic[M]):
    """Pending and planned messages, by micro-batch number.

    Args:
        touch_interval: seconds between touch rounds (a third of msg_timeout
            leaves two rounds' slack).
        last_batch: the last batch number already used (from the checkpoint).
    """

    def __init__(self, touch_interval: float, last_batch: int = 0) -> None:
        if touch_interval <= 0:
            raise ValueError("touch_interval must be > 0")
        self.touch_interval = touch_interval
        self.last_batch = last_batch
        self._pending: list[M] = []
        self._batches: dict[int, list[M]] = {}
        self._next_touch: float | None = None

    @property
    def pending(self) -> int:
        """Messages received and not yet in a batch."""
        return len(self._pending)

    @property
    def held(self) -> int:
        """Every message held: pending and planned."""
        return len(self._pending) + sum(len(b) for b in self._batches.values())

    def batches(self) -> list[int]:
        """Numbers of the planned batches not yet committed."""
        return sorted(self._batches)

    def continue_after(self, batch: int) -> None:
        """Number new batches after ``batch`` (the checkpoint's), unless already past it."""
        self.last_batch = max(self.last_batch, batch)

    def receive(self, message: M, now: float) -> None:
        self._pending.append(message)
        if self._next_touch is None:
            self._next_touch = now + self.touch_interval

    def plan(self, limit: int | None) -> int:
        """Put up to ``limit`` pending messages (all when None) in a new batch.

        Returns:
            The new batch's number, or the last one when nothing is pending.
        """
        if not self._pending:
            return self.last_batch
        count = len(self._pending) if limit is None else max(1, min(limit, len(self._pending)))
        self.last_batch += 1
        self._batches[self.last_batch] = self._pending[:count]
        del self._pending[:count]
        return self.last_batch

    def messages(self, start: int, end: int) -> list[M]:
        """The messages of batches ``start + 1 .. end`` that are held (in order)."""
        out: list[M] = []
        for number in range(start + 1, end + 1):
            out.extend(self._batches.get(number, ()))
        return out

    def commit(self, end: int) -> list[M]:
        """Forget batches up to ``end``; returns their messages (to finish)."""
        done: list[M] = []
        for number in [n for n in self._batches if n <= end]:
            done.extend(self._batches.pop(number))
        if not self.held:
            self._next_touch = None
        return done

    def release(self) -> list[M]:
        """Forget everything (the query stops); returns every message held."""
        out = [m for n in sorted(self._batches) for m in self._batches[n]]
        out.extend(self._pending)
        self._batches.clear()
        self._pending.clear()
        self._next_touch = None
        return out

    def get_timer(self) -> float | None:
        """When the next touch round is due (None when nothing is held)."""
        return self._next_touch

    def handle_timer(self, now: float) -> Iterable[M]:
        """The messages to TOUCH now (every one held), when a round is due."""
        if self._next_touch is None or now < self._next_touch:
            return []
        self._next_touch = now + self.touch_interval if self.held else None
        return [*(m for n in sorted(self._batches) for m in self._batches[n]), *self._pending]
