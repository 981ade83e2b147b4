"""How a Reader's messages are answered: FIN, REQ and TOUCH, and the requeue delay.

Theory of operation. A :class:`~aioclients.nsq.Message` knows only a
:class:`~aioclients.nsq._message.MessageResponder`; the Reader hands each message
its :class:`ReaderResponder`. An answer goes into the core of the connection that
delivered the message and is written at the end of the loop iteration with the
other answers of the batch (earlier when the first has waited about 1 ms, so that
nsqd can refill while the application works: ``NsqdConnection.answered``),
counted, and reported to the :class:`RdyDistributor`: a slot is free, and the
message succeeded (FIN), failed (REQ with backoff) or neither (REQ without
backoff). The RDY changes that follow go out through the Reader's ``apply``.

An answer on a connection that is gone is dropped (nsqd re-delivers the message
after its msg_timeout). The requeue delay, when the application gives none, is
``requeue_delay * attempts`` capped at ``max_requeue_delay`` (the client library
guide's default).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from aioclients._core import check_float
from aioclients.nsq._io import _connection as _driver
from aioclients.nsq._message import Message
from aioclients.nsq._protocol._connection import ConnectionState
from aioclients.nsq._protocol._rdy import RdyDistributor, RdyUpdate

__all__ = ("ReaderResponder",)

_CLOSED: Final = ConnectionState.CLOSED  # a global: no lookup through the enum class


class ReaderResponder:
    """Answers the messages of one Reader (a :class:`MessageResponder`).

    Args:
        dist: the Reader's RDY distributor (told of every answer).
        apply: sends RDY updates and re-arms the Reader's timer.
        clock: the loop's clock.
        requeue_delay: default REQ delay per attempt, seconds.
        max_requeue_delay: cap on the default REQ delay, seconds.

    Attributes:
        finished, requeued: messages answered so far.
    """

    __slots__ = ("_apply", "_clock", "_delay", "_dist", "_max_delay", "finished", "requeued")

    def __init__(
        self,
        dist: RdyDistributor,
        apply: Callable[[Iterable[RdyUpdate]], None],
        clock: Callable[[], float],
        *,
        requeue_delay: float,
        max_requeue_delay: float,
    ) -> None:
        self._dist = dist
        self._apply = apply
        self._clock = clock
        self._delay = requeue_delay
        self._max_delay = max_requeue_delay
        self.finished = 0
        self.requeued = 0

    def requeue_delay_ms(self, msg: Message, delay: float | None) -> int:
        """The REQ delay for ``msg``: ``delay`` seconds, or the default policy.

        Raises:
            InvalidArgumentError: a negative or non-numeric delay.
        """
        if delay is None:
            seconds = min(self._delay * msg.attempts, self._max_delay)
        else:
            seconds = check_float("delay", delay, minimum=0.0, inclusive=True)
        return int(seconds * 1000)

    def finish(self, msg: Message) -> Awaitable[None] | None:
        """FIN (success for backoff). Returns what to await while the socket's
        buffer is full, else ``None`` (no coroutine made per message).

        The answer to nearly every message, in one call: the core's
        ``fin_if_in_flight`` (the state not CLOSED, the id popped from
        ``in_flight``, appended to the core's ``fins``) and the connection's
        :meth:`~aioclients.nsq._io._connection.NsqdConnection.answered` (the write
        at the end of the loop iteration, or now when the first answer waiting has
        waited ``EARLY_FLUSH_DELAY``) are inlined; a call is a Python frame, some
        400 instructions of the 11,500 a consumed message costs."""
        conn = msg._conn
        core = conn.core
        if core.state is _CLOSED:  # (lost: the core is CLOSED)
            return None  # nsqd re-delivers it after its timeout; nothing to say on a dead link
        message_id = msg.id
        dist = self._dist
        if core.in_flight.pop(message_id, None) is None:
            # The same id was delivered again (msg_timeout expired) and that copy was
            # answered already: nothing to send, but this copy still frees its slot.
            self._apply(dist.on_response(conn.address, self._clock(), None))
            return None
        core.fins.append(message_id)
        conn.finished += 1
        if conn._flush_scheduled:
            if _driver.perf_counter() - conn._flush_since >= _driver.EARLY_FLUSH_DELAY:
                conn.flush()
        else:
            conn._flush_scheduled = True
            conn._flush_since = _driver.perf_counter()
            conn._loop.call_soon(conn.flush)
        self.finished += 1
        if dist.settled:
            # no backoff, no RDY owed: the success only frees its slot, counted
            # without a call (the distributor folds it in at its next input)
            try:
                dist.finishes[conn.address] += 1
            except KeyError:
                pass  # not one of the distributor's connections (any more)
        else:
            # in backoff, or RDY owed somewhere (_apply also re-arms the timer: a
            # backoff window may have ended)
            self._apply(dist.on_response(conn.address, self._clock(), True))
        if conn._paused:
            return conn.drain()
        return None

    async def requeue(self, msg: Message, delay_ms: int, backoff: bool) -> None:
        """REQ after ``delay_ms``; a failure for backoff when ``backoff``."""
        conn = msg._conn
        if not conn.usable:
            return
        core = conn.core
        dist = self._dist
        if msg.id not in core.in_flight:
            self._apply(dist.on_response(conn.address, self._clock(), None))
            return
        core.req(msg.id, delay_ms)
        conn.requeued += 1
        self.requeued += 1
        conn.answered()
        success = False if backoff else None
        updates = dist.on_response(conn.address, self._clock(), success)
        if updates or backoff or dist.backoff.active:
            self._apply(updates)  # also re-arms the timer: a backoff window may have opened
        if conn._paused:
            await conn.drain()

    async def touch(self, msg: Message) -> None:
        """TOUCH: another msg_timeout before nsqd re-queues the message."""
        conn = msg._conn
        if conn.usable and msg.id in conn.core.in_flight:
            conn.core.touch(msg.id)
            conn.schedule_flush()
            await conn.drain()

    def give_up(self, msg: Message, now: float) -> None:
        """FIN a message the application never sees (neither success nor failure
        for backoff; it still frees its RDY slot)."""
        conn = msg._conn
        msg._responded = True
        conn.core.fin(msg.id)
        conn.finished += 1
        self.finished += 1
        conn.schedule_flush()
        dist = self._dist
        dist.on_message(conn.address, now)
        self._apply(dist.on_response(conn.address, now, None))
