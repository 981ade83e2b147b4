"""The message object handed to consumers, and what answers it.

A :class:`Message` answers nsqd through a :class:`MessageResponder`, handed to it
by the Reader that received it (``nsq/_responder.py``); it knows no Reader.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Protocol

from aioclients.nsq._errors import MessageRespondedError

if TYPE_CHECKING:
    from aioclients.nsq._io._connection import NsqdConnection

__all__ = ("Message", "MessageResponder", "new_message", "new_messages")


class MessageResponder(Protocol):
    """What answers a :class:`Message` to nsqd: FIN, REQ, TOUCH and the REQ delay."""

    def requeue_delay_ms(self, msg: Message, delay: float | None) -> int:
        """The REQ delay for ``msg``: ``delay`` seconds, or the default policy when
        ``None``; raises ``InvalidArgumentError`` for a bad delay."""
        ...

    def finish(self, msg: Message) -> Awaitable[None] | None:
        """Send FIN for ``msg`` (nothing when its connection is gone); returns
        something to await (e.g. a coroutine: ``async def finish`` fits), or
        ``None`` when there is nothing to wait for."""
        ...

    async def requeue(self, msg: Message, delay_ms: int, backoff: bool) -> None:
        """Send REQ for ``msg``; ``backoff``: count it as a failure."""
        ...

    async def touch(self, msg: Message) -> None:
        """Send TOUCH for ``msg``."""
        ...


class Message:
    """One message delivered by nsqd.

    Attributes:
        id: nsqd's 16-byte message id (ASCII hex).
        body: the payload.
        timestamp: when nsqd received it, nanoseconds since the epoch.
        attempts: delivery attempts so far (1 on the first delivery).
        nsqd_address: ``"host:port"`` of the nsqd that delivered it.
        give_up_reason: ``None``, or for a message handed to ``on_give_up``, why
            (too many attempts, or a body above ``max_message_size``).
        body_size: the body's size as nsqd sent it; for a message above
            ``max_message_size`` this is the real size while ``body`` is empty
            (the body was read past, never held).

    Answer each message once, with :meth:`finish` or :meth:`requeue`, within nsqd's
    msg_timeout (:meth:`touch` buys more time). A message left unanswered is
    re-queued by nsqd when its timeout expires.
    """

    __slots__ = (
        "_body_size",  # set only for an oversized message (body dropped)
        "_conn",
        "_give_up_reason",  # set only when handed to on_give_up
        "_responded",
        "_responder",
        "_telemetry",  # set only by aioclients.telemetry, when instrumented
        "attempts",
        "body",
        "id",
        "nsqd_address",
        "timestamp",
    )
    # Left unset on normal deliveries (no cost per message); read through the
    # properties below.
    _body_size: int
    _give_up_reason: str
    _telemetry: object

    def __init__(
        self,
        message_id: bytes,
        body: bytes,
        timestamp: int,
        attempts: int,
        conn: NsqdConnection,
        responder: MessageResponder,
    ) -> None:
        self.id = message_id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self.nsqd_address = conn.address
        self._conn = conn
        self._responder = responder
        self._responded = False

    @property
    def give_up_reason(self) -> str | None:
        """Why the Reader gave up on this message (``None`` for a normal delivery)."""
        return getattr(self, "_give_up_reason", None)

    @property
    def body_size(self) -> int:
        """The size of the body nsqd sent (larger than ``len(body)`` when it was dropped)."""
        size: int | None = getattr(self, "_body_size", None)
        return len(self.body) if size is None else size

    @property
    def has_responded(self) -> bool:
        """Whether :meth:`finish` or :meth:`requeue` was called (sync)."""
        return self._responded

    def _claim(self, what: str) -> None:
        if self._responded:
            raise MessageRespondedError(
                f"{what}: message {self.id.decode(errors='replace')} was already answered"
            )
        self._responded = True

    async def finish(self) -> None:
        """Tell nsqd the message is done (FIN).

        If the connection that delivered it is gone, nsqd will re-deliver the message
        anyway, and this does nothing.

        Raises:
            MessageRespondedError: the message was already finished or requeued.
        """
        if self._responded:
            self._claim("finish()")  # raises
        self._responded = True
        waiting = self._responder.finish(self)
        if waiting is not None:
            await waiting

    # Reader.run's own FIN after a handler that returned: the same call, under a name
    # of its own (instrumentation wraps ``finish``, the user's call, and not this).
    _finish_for_run = finish

    async def requeue(self, delay: float | None = None, *, backoff: bool = True) -> None:
        """Give the message back to nsqd for a later attempt (REQ).

        Args:
            delay: seconds before nsqd delivers it again; ``None`` means the Reader's
                ``requeue_delay * attempts``, capped at ``max_requeue_delay``.
            backoff: count this as a failure for the Reader's backoff (slowing down
                every connection); ``False`` requeues without slowing down.

        Raises:
            MessageRespondedError: the message was already finished or requeued.
            InvalidArgumentError: a negative delay.
        """
        delay_ms = self._responder.requeue_delay_ms(self, delay)
        self._claim("requeue()")
        await self._responder.requeue(self, delay_ms, backoff)

    async def touch(self) -> None:
        """Ask nsqd for another msg_timeout before it re-queues the message (TOUCH).

        Raises:
            MessageRespondedError: the message was already finished or requeued.
        """
        if self._responded:
            raise MessageRespondedError("touch(): the message was already answered")
        await self._responder.touch(self)

    def __repr__(self) -> str:
        return (
            f"Message(id={self.id!r}, attempts={self.attempts}, "
            f"nsqd_address={self.nsqd_address!r}, body={self.body[:32]!r})"
        )


_new = object.__new__


def new_message(
    message_id: bytes,
    body: bytes,
    timestamp: int,
    attempts: int,
    conn: NsqdConnection,
    responder: MessageResponder,
) -> Message:
    """``Message(message_id, body, timestamp, attempts, conn, responder)``: the same
    slots set to the same values, without calling a class whose ``__init__`` is in
    Python (CPython 3.11 runs that through a C call and a frame of its own, about
    40% of the cost of making a message). What a Reader's connections make each
    delivered message with (``ConnectionCore.make_message``)."""
    msg: Message = _new(Message)
    msg.id = message_id
    msg.body = body
    msg.timestamp = timestamp
    msg.attempts = attempts
    msg.nsqd_address = conn.address
    msg._conn = conn
    msg._responder = responder
    msg._responded = False
    return msg


def new_messages(
    rows: Iterable[tuple[int, int, bytes, bytes]],
    conn: NsqdConnection,
    responder: MessageResponder,
) -> list[Message]:
    """:func:`new_message` for each ``(timestamp, attempts, id, body)`` row of a
    read (the same slots, the same values), in one call: a call per message is a
    Python frame each (``ConnectionCore.make_messages``)."""
    address = conn.address
    out: list[Message] = []
    append = out.append
    for timestamp, attempts, message_id, body in rows:
        msg: Message = _new(Message)
        msg.id = message_id
        msg.body = body
        msg.timestamp = timestamp
        msg.attempts = attempts
        msg.nsqd_address = address
        msg._conn = conn
        msg._responder = responder
        msg._responded = False
        append(msg)
    return out
