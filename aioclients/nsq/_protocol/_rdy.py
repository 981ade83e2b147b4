"""RDY distribution and backoff across a consumer's nsqd connections (pure).

Theory of operation (client library guide, "RDY State" and "Backoff"; behaviour of
go-nsq's ``perConnMaxInFlight``/``redistributeRDY`` and pynsq's backoff block):

RDY is NSQ's flow control: ``RDY n`` lets nsqd keep up to ``n`` messages in flight on
that connection. For each connection this module keeps ``rdy`` (the last value sent,
which is what nsqd holds), ``remaining`` (``rdy`` minus the messages received since)
and ``in_flight`` (received, not yet FIN'd/REQ'd). The rules:

1. A new connection gets ``RDY 1`` (the final number of connections is unknown, so
   the first ones must not be favoured); after its first message it is refilled to
   its share, ``max_in_flight // connections`` (at least 1), never above the
   connection's ``max_rdy_count``.
2. Budget: a connection is granted at most ``max_in_flight`` minus what the others
   hold, counting for each other connection the larger of its RDY and its messages
   in flight. So the sum of RDY never exceeds ``max_in_flight`` (the tests check
   this), and neither does the number of messages in flight against modern nsqd.
3. Refill: after a message, a connection whose ``remaining`` fell to 0 or under 25 %
   of its ``rdy`` is sent its share again.
4. Rotation, when there are more connections than ``max_in_flight`` (or than 1 during
   backoff): shares are 0 or 1. A holder of RDY loses it after
   ``low_rdy_idle_timeout`` without a message, or after holding it for
   ``HOLD_FACTOR`` times that while others wait; freed RDY goes to waiting
   connections in a freshly shuffled order (injected ``random.Random``), so every
   producer is served within a bounded number of rounds.
5. Backoff: a failure raises the level (capped where the duration reaches
   ``max_backoff_duration``) and opens a window of ``multiplier * 2**(level-1)``
   seconds with RDY 0 everywhere; results reported inside a window are ignored (one
   result per window). When the window closes, RDY 1 goes to a single connection to
   test the waters. A success lowers the level: at 0 the full distribution returns,
   above 0 another (shorter) window opens. A failure opens a longer one.

The answer to nearly every message, a FIN outside backoff with no connection short
of its share, only frees a slot: while :attr:`RdyDistributor.settled` says so, the
driver may count it in :attr:`RdyDistributor.finishes` instead of calling in, and
the distributor folds those counts into the connections' in-flight counts at its
next input or query, which then sees exactly the state one call per FIN would have
left (the tests check this against :meth:`RdyDistributor.on_response`).

Timers follow the sans-I/O convention: :meth:`RdyDistributor.get_timer` is the next
deadline (window end or rotation), :meth:`RdyDistributor.handle_timer` acts on it.
Every method returns the :class:`RdyUpdate` commands the driver must send.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from aioclients._core import Backoff, check_int
from aioclients._errors import InvalidArgumentError

if TYPE_CHECKING:
    from random import Random

__all__ = ("HOLD_FACTOR", "BackoffState", "RdyDistributor", "RdyUpdate")

HOLD_FACTOR: Final = 2.0
_NO_UPDATES: Final[tuple[RdyUpdate, ...]] = ()


@dataclass(frozen=True, slots=True)
class RdyUpdate:
    """Send ``RDY count`` on connection ``conn``."""

    conn: Hashable
    count: int


class BackoffState:
    """The backoff level and the current window (pure; see the module docstring).

    Args:
        max_backoff_duration: cap on a window, seconds; 0 disables backoff.
        multiplier: length of the first window, seconds.
    """

    __slots__ = ("_backoff", "level", "max_level", "window_until")

    def __init__(self, max_backoff_duration: float, multiplier: float = 1.0) -> None:
        if max_backoff_duration < 0 or multiplier <= 0:
            raise InvalidArgumentError(
                "max_backoff_duration must be >= 0 and backoff_multiplier > 0"
            )
        self.level = 0
        self.window_until: float | None = None
        if max_backoff_duration == 0:
            self._backoff: Backoff | None = None
            self.max_level = 0
        else:
            self._backoff = Backoff(
                initial=min(multiplier, max_backoff_duration), maximum=max_backoff_duration
            )
            self.max_level = 1 + max(0, math.ceil(math.log2(max_backoff_duration / multiplier)))

    @property
    def enabled(self) -> bool:
        return self._backoff is not None

    def duration(self, level: int) -> float:
        """Length of a window at ``level`` (>= 1)."""
        assert self._backoff is not None
        return self._backoff.base_delay(level - 1)

    @property
    def in_window(self) -> bool:
        return self.window_until is not None

    @property
    def active(self) -> bool:
        """In backoff: in a window, or testing the waters between windows."""
        return self.level > 0 or self.window_until is not None

    def record(self, success: bool, now: float) -> str:
        """Count one result. Returns ``"ignored"``, ``"window"`` (a window opened),
        ``"exit"`` (backoff is over) or ``"none"``."""
        if self._backoff is None or self.window_until is not None:
            return "ignored"
        if success:
            if self.level == 0:
                return "none"
            self.level -= 1
            if self.level == 0:
                return "exit"
        else:
            self.level = min(self.level + 1, self.max_level)
        self.window_until = now + self.duration(self.level)
        return "window"

    def window_expired(self, now: float) -> bool:
        """Close the window when ``now`` passed its end; True if it just closed."""
        if self.window_until is not None and now >= self.window_until:
            self.window_until = None
            return True
        return False


class _Conn:
    __slots__ = (
        "bootstrapped",
        "granted_at",
        "in_flight",
        "key",
        "last_message_at",
        "max_rdy",
        "rdy",
        "remaining",
    )

    def __init__(self, key: Hashable, max_rdy: int, now: float) -> None:
        self.key = key
        self.max_rdy = max_rdy
        self.rdy = 0
        self.remaining = 0
        self.in_flight = 0
        self.last_message_at = now
        self.granted_at = now
        self.bootstrapped = False


class RdyDistributor:
    """Decides the RDY count of every connection of one consumer.

    Args:
        max_in_flight: messages the consumer handles at once (0 pauses).
        rng: the random source for rotation order.
        low_rdy_idle_timeout: seconds without a message after which a connection's
            RDY may move to another one when RDY is scarce.
        max_backoff_duration: cap on a backoff window (0 disables backoff).
        backoff_multiplier: length of the first backoff window, seconds.
    """

    def __init__(
        self,
        max_in_flight: int,
        *,
        rng: Random,
        low_rdy_idle_timeout: float = 10.0,
        max_backoff_duration: float = 128.0,
        backoff_multiplier: float = 1.0,
    ) -> None:
        self._max_in_flight = check_int("max_in_flight", max_in_flight, minimum=0)
        if low_rdy_idle_timeout <= 0:
            raise InvalidArgumentError("low_rdy_idle_timeout must be > 0 seconds")
        self._rng = rng
        self._idle = float(low_rdy_idle_timeout)
        self.backoff = BackoffState(max_backoff_duration, backoff_multiplier)
        self._conns: dict[Hashable, _Conn] = {}
        self._rotation: list[Hashable] = []
        self._deficit = False
        self._now = 0.0  # time of the call being handled (set by every input)
        #: True while a success changes nothing but its connection's in-flight count:
        #: not in backoff, and no connection short of its share. Kept up to date by
        #: every input. While it is True a FIN may be counted in ``finishes``.
        self.settled = True
        #: FINs counted while ``settled``, by connection (every known connection has
        #: an entry): a driver adds 1 per FIN instead of calling
        #: ``on_response(key, now, True)``; folded in at the next input or query.
        self.finishes: dict[Hashable, int] = {}

    # ---- queries ----------------------------------------------------------------------

    @property
    def max_in_flight(self) -> int:
        return self._max_in_flight

    @property
    def connections(self) -> tuple[Hashable, ...]:
        return tuple(self._conns)

    def rdy(self, key: Hashable) -> int:
        """The RDY count last sent on ``key``."""
        return self._conns[key].rdy

    def in_flight(self, key: Hashable) -> int:
        self._fold()
        return self._conns[key].in_flight

    @property
    def total_rdy(self) -> int:
        return sum(c.rdy for c in self._conns.values())

    @property
    def total_in_flight(self) -> int:
        self._fold()
        return sum(c.in_flight for c in self._conns.values())

    def is_starved(self) -> bool:
        """True when some connection has at least 85 % of its RDY in flight (the
        guide's ``is_starved``): a batching handler should process its batch now."""
        self._fold()
        for c in self._conns.values():
            if c.in_flight > 0 and c.in_flight >= c.rdy * 0.85:
                return True
        return False

    # ---- inputs -----------------------------------------------------------------------

    def add_connection(self, key: Hashable, max_rdy_count: int, now: float) -> list[RdyUpdate]:
        """A connection finished SUB; ``max_rdy_count`` comes from IDENTIFY."""
        if key in self._conns:
            raise InvalidArgumentError(f"connection {key!r} is already known")
        self._fold()
        self._now = now
        self._conns[key] = _Conn(key, max(0, max_rdy_count), now)
        self.finishes[key] = 0
        try:
            return self._rebalance(now)
        finally:
            self._update_settled()

    def remove_connection(self, key: Hashable, now: float) -> list[RdyUpdate]:
        """A connection is gone; its share goes to the others."""
        if key not in self._conns:
            return []
        self._fold()
        del self._conns[key]
        del self.finishes[key]
        self._now = now
        try:
            return self._rebalance(now)
        finally:
            self._update_settled()

    def set_max_in_flight(self, max_in_flight: int, now: float) -> list[RdyUpdate]:
        """Change ``max_in_flight`` at run time (0 pauses every connection)."""
        self._max_in_flight = check_int("max_in_flight", max_in_flight, minimum=0)
        self._fold()
        self._now = now
        try:
            return self._rebalance(now)
        finally:
            self._update_settled()

    def on_message(self, key: Hashable, now: float) -> tuple[RdyUpdate, ...] | list[RdyUpdate]:
        """A message arrived on ``key``."""
        c = self._conns.get(key)
        if c is None:
            return _NO_UPDATES
        self._fold()
        c.in_flight += 1
        c.remaining -= 1
        c.last_message_at = now
        c.bootstrapped = True
        if self.backoff.active:
            return _NO_UPDATES
        remaining = c.remaining
        if remaining > 0 and remaining * 4 >= c.rdy:
            return _NO_UPDATES
        eff = self._max_in_flight
        n = len(self._conns)
        if n > eff:
            target = 1 if c.rdy > 0 else 0  # rotation: holders keep 1, waiters wait
        else:
            target = eff // n
        self._now = now
        try:
            return self._grant(c, target, resend=True)
        finally:
            self._update_settled()

    def on_messages(
        self, key: Hashable, count: int, now: float
    ) -> tuple[RdyUpdate, ...] | list[RdyUpdate]:
        """``count`` messages arrived on ``key`` (the messages of one read).

        Exactly ``count`` calls of :meth:`on_message` (the same updates, the same
        state), with the messages before a refill falls due counted in one step.
        """
        c = self._conns.get(key)
        if c is None:
            return _NO_UPDATES
        self._fold()
        backoff = self.backoff
        updates: list[RdyUpdate] = []
        while count > 0:
            if backoff.level > 0 or backoff.window_until is not None:
                safe = count  # in backoff on_message only counts
            else:
                # on_message refills once `remaining` falls below max(1, rdy/4)
                # (rounded up); the messages before that only count.
                safe = c.remaining - max(1, -(-c.rdy // 4))
            if safe > 0:
                if safe > count:
                    safe = count
                c.in_flight += safe
                c.remaining -= safe
                c.last_message_at = now
                c.bootstrapped = True
                count -= safe
                if not count:
                    break
            updates.extend(self.on_message(key, now))
            count -= 1
        return updates if updates else _NO_UPDATES

    def on_response(self, key: Hashable, now: float, success: bool | None) -> list[RdyUpdate]:
        """The message from ``key`` was FIN'd (``success=True``), REQ'd with backoff
        (``False``) or REQ'd without backoff (``None``)."""
        self._fold()
        try:
            return self._on_response(key, now, success)
        finally:
            self._update_settled()

    def _on_response(self, key: Hashable, now: float, success: bool | None) -> list[RdyUpdate]:
        c = self._conns.get(key)
        if c is not None and c.in_flight > 0:
            c.in_flight -= 1
        self._now = now
        backoff = self.backoff
        # A success outside backoff changes nothing there (record() would say
        # "none"): skipped, as it is the answer to nearly every message.
        if success is not None and not (
            success and backoff.level == 0 and backoff.window_until is None
        ):
            outcome = backoff.record(success, now)
            if outcome == "window":
                return self._zero_all()
            if outcome == "exit":
                return self._rebalance(now)
        if self._deficit:
            return self._rebalance(now)
        return []

    # ---- timers -----------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """The next deadline: the end of the backoff window or a rotation."""
        if self.backoff.window_until is not None:
            return self.backoff.window_until
        eff = self._effective_max()
        if eff == 0 or len(self._conns) <= eff:
            return None
        due = math.inf
        for c in self._conns.values():
            if c.rdy > 0:
                due = min(due, self._due(c))
        return None if due == math.inf else due

    def handle_timer(self, now: float) -> list[RdyUpdate]:
        """Close an expired backoff window (RDY 1 to one connection) and rotate RDY."""
        self._fold()
        try:
            return self._handle_timer(now)
        finally:
            self._update_settled()

    def _handle_timer(self, now: float) -> list[RdyUpdate]:
        self._now = now
        if self.backoff.window_until is not None:
            if not self.backoff.window_expired(now):
                return []
            return self._rebalance(now)
        eff = self._effective_max()
        if eff == 0 or len(self._conns) <= eff:
            return []
        updates: list[RdyUpdate] = []
        for c in self._conns.values():
            if c.rdy > 0 and now >= self._due(c):
                updates.extend(self._send(c, 0))
        updates.extend(self._rebalance(now))
        return updates

    # ---- internals --------------------------------------------------------------------

    def _fold(self) -> None:
        """Count the FINs of ``finishes`` as freed slots (as many ``on_response(key,
        now, True)`` calls would have while ``settled``: nothing but that)."""
        finishes = self.finishes
        for key, n in finishes.items():
            if n:
                finishes[key] = 0
                c = self._conns[key]
                c.in_flight = c.in_flight - n if c.in_flight > n else 0

    def _update_settled(self) -> None:
        backoff = self.backoff
        self.settled = not (backoff.level or backoff.window_until is not None or self._deficit)

    def _due(self, c: _Conn) -> float:
        active = max(c.last_message_at, c.granted_at)
        return min(active + self._idle, c.granted_at + HOLD_FACTOR * self._idle)

    def _effective_max(self) -> int:
        if self.backoff.in_window or self._max_in_flight == 0:
            return 0
        if self.backoff.level > 0:
            return 1
        return self._max_in_flight

    def _held_by_others(self, c: _Conn) -> int:
        held = 0
        for o in self._conns.values():
            if o is not c:
                held += o.rdy if o.rdy > o.in_flight else o.in_flight
        return held

    def _send(self, c: _Conn, count: int, resend: bool = False) -> list[RdyUpdate]:
        if count == c.rdy and not resend:
            return []
        if count == 0 and c.rdy == 0:
            return []
        if c.rdy == 0 and count > 0:
            c.granted_at = self._now
        c.rdy = count
        c.remaining = count
        return [RdyUpdate(c.key, count)]

    def _grant(self, c: _Conn, target: int, *, resend: bool) -> list[RdyUpdate]:
        target = min(target, c.max_rdy)
        budget = self._effective_max() - self._held_by_others(c)
        count = max(0, min(target, budget))
        if count < target:
            self._deficit = True
        return self._send(c, count, resend=resend)

    def _zero_all(self) -> list[RdyUpdate]:
        updates: list[RdyUpdate] = []
        for c in self._conns.values():
            updates.extend(self._send(c, 0))
        self._deficit = False
        return updates

    def _rebalance(self, now: float) -> list[RdyUpdate]:
        """Recompute every connection's RDY from scratch (rare: connects, removals,
        max_in_flight changes, backoff transitions, timers)."""
        self._deficit = False
        eff = self._effective_max()
        conns = list(self._conns.values())
        if eff == 0 or not conns:
            return self._zero_all()
        updates: list[RdyUpdate] = []
        if len(conns) <= eff:
            per = eff // len(conns)
            targets = {c.key: min(per if c.bootstrapped else 1, c.max_rdy) for c in conns}
            for c in conns:  # lower first, so that raising finds the budget
                if c.rdy > targets[c.key]:
                    updates.extend(self._send(c, targets[c.key]))
            for c in conns:
                if c.rdy < targets[c.key]:
                    updates.extend(self._grant(c, targets[c.key], resend=False))
            return updates
        # Rotation: at most `eff` holders of RDY 1.
        holders = [c for c in conns if c.rdy > 0]
        for c in holders:
            if c.rdy > 1:
                updates.extend(self._send(c, 1))
        if len(holders) > eff:
            holders.sort(key=lambda c: c.last_message_at)
            for c in holders[: len(holders) - eff]:
                updates.extend(self._send(c, 0))
            holders = holders[len(holders) - eff :]
        wanted = eff - len(holders)
        tried = 0
        while wanted > 0 and tried < 2 * len(conns):
            waiting = self._next_waiting()
            tried += 1
            if waiting is None:
                break
            granted = self._grant(waiting, 1, resend=False)
            if not granted:
                break  # the budget is held by messages in flight; retry on a response
            updates.extend(granted)
            wanted -= 1
        if wanted > 0:
            self._deficit = True
        return updates

    def _next_waiting(self) -> _Conn | None:
        for _ in range(2):
            while self._rotation:
                key = self._rotation.pop()
                c = self._conns.get(key)
                if c is not None and c.rdy == 0:
                    return c
            waiting = [k for k, c in self._conns.items() if c.rdy == 0]
            if not waiting:
                return None
            self._rng.shuffle(waiting)
            self._rotation = waiting
        return None
