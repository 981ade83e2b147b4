"""Messages delivered by a pull consumer, and their acknowledgements.

Acks are one-way publishes to the message's reply subject (``+ACK``, ``-NAK``,
``+WPI``, ``+TERM``); ``ack_sync`` sends ``+ACK`` as a request, and the server's
empty answer confirms it was recorded ("double ack").
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

from aioclients._errors import InvalidArgumentError
from aioclients.jetstream._errors import JetStreamError, MessageAlreadyAckedError
from aioclients.jetstream._protocol._headers import Headers, decode_headers
from aioclients.jetstream._protocol._metadata import MsgMetadata, parse_ack_subject

if TYPE_CHECKING:
    from aioclients.jetstream._api import JetStreamApi

__all__ = (
    "Msg",
    "header_block_of",
    "keep_deliveries",
    "keep_run",
    "make_msgs",
    "message_size",
)

_ACK = b"+ACK"
_NAK = b"-NAK"
_WPI = b"+WPI"
_TERM = b"+TERM"


class Msg:
    """A message from a JetStream consumer.

    Attributes:
        data: the payload.
    """

    __slots__ = (
        "_acked",
        "_api",
        "_header_block",
        "_headers",
        "_metadata",
        "_reply",
        "_subject",
        "data",
    )

    def __init__(
        self,
        api: JetStreamApi,
        subject: str | bytes,
        reply: str | bytes,
        data: bytes,
        header_block: bytes | None,
    ) -> None:
        # subject and reply may come as the bytes on the wire: decoded when read
        # (most consumers never read them; an ack sends the reply's bytes as they are).
        # make_msgs() (keep_run, keep_deliveries) sets the same attributes: keep the two in
        # step. What the pull buffer counts for a message is message_size(msg).
        self._api = api
        self._subject = subject
        self._reply = reply
        self.data = data
        self._header_block = header_block
        self._headers: Headers | None = None
        self._metadata: MsgMetadata | None = None
        self._acked = False

    def __repr__(self) -> str:
        return f"<Msg {self.subject} reply={self.reply!r} {len(self.data)}B>"

    @property
    def subject(self) -> str:
        """The subject it was published to."""
        subject = self._subject
        if not isinstance(subject, str):
            subject = self._subject = subject.decode("utf-8", "replace")
        return subject

    @property
    def reply(self) -> str:
        """The ack subject (it also encodes :attr:`metadata`)."""
        reply = self._reply
        if not isinstance(reply, str):
            reply = self._reply = reply.decode("utf-8", "replace")
        return reply

    @property
    def headers(self) -> Headers | None:
        """The message headers (a repeated name maps to a list), or None."""
        if self._headers is None and self._header_block is not None:
            self._headers = decode_headers(self._header_block)
        return self._headers

    @property
    def metadata(self) -> MsgMetadata:
        """Stream, consumer, sequences, delivery count, pending and timestamp.

        Raises:
            RemoteProtocolError: the reply is not a JetStream ack subject.
        """
        if self._metadata is None:
            self._metadata = parse_ack_subject(self.reply)
        return self._metadata

    @property
    def acked(self) -> bool:
        """Whether ``ack``, ``ack_sync``, ``nak`` or ``term`` was already sent."""
        return self._acked

    def _claim(self, what: str) -> None:
        if self._acked:
            raise MessageAlreadyAckedError(
                f"cannot {what}: this message was already acknowledged (ack, nak or term)"
            )
        if not self._reply:
            raise JetStreamError(
                f"cannot {what}: the message has no reply subject (not delivered by a consumer)"
            )
        self._acked = True

    def _send(self, body: bytes) -> None:
        reply = self._reply
        if isinstance(reply, str):
            reply = reply.encode()
        self._api.transport.send_nowait(b"PUB %s %d\r\n%s\r\n" % (reply, len(body), body))

    async def ack(self) -> None:
        """Acknowledge the message (fire and forget).

        Raises:
            MessageAlreadyAckedError: it was acknowledged already.
        """
        reply = self._reply
        if self._acked or not reply:
            self._claim("ack")  # raises
        self._acked = True
        if type(reply) is not bytes and isinstance(reply, str):  # bytes: the usual
            reply = reply.encode()
        self._api.transport.send_nowait(b"PUB %s 4\r\n+ACK\r\n" % reply)

    async def ack_sync(self, timeout: float | None = None) -> None:
        """Acknowledge and wait until the server confirms it recorded the ack.

        Raises:
            MessageAlreadyAckedError: it was acknowledged already.
            APITimeoutError: no confirmation in time (the ack may be lost; the
                message can be retried with ``ack_sync`` again).
        """
        self._claim("ack")
        api = self._api
        try:
            await api.requests.request(self.reply, _ACK, timeout or api.timeout, "ack")
        except BaseException:
            self._acked = False  # unconfirmed: let the caller try again
            raise

    async def nak(self, delay: float | None = None) -> None:
        """Ask for redelivery, after ``delay`` seconds if given.

        Raises:
            MessageAlreadyAckedError: it was acknowledged already.
        """
        if delay is not None and (
            not isinstance(delay, (int, float))
            or isinstance(delay, bool)
            or math.isnan(delay)
            or delay < 0
            or math.isinf(delay)
        ):
            raise InvalidArgumentError(f"delay must be seconds >= 0, got {delay!r}")
        self._claim("nak")
        if delay is None:
            self._send(_NAK)
        else:
            body = json.dumps({"delay": round(delay * 1_000_000_000)}).encode()
            self._send(_NAK + b" " + body)

    async def in_progress(self) -> None:
        """Tell the server the message is still being worked on (resets its ack wait)."""
        if self._acked:
            raise MessageAlreadyAckedError("cannot mark in progress: already acknowledged")
        if not self._reply:
            raise JetStreamError("the message has no reply subject (not delivered by a consumer)")
        self._send(_WPI)

    async def term(self, reason: str | None = None) -> None:
        """Stop redelivery of this message for good, with an optional reason.

        Raises:
            MessageAlreadyAckedError: it was acknowledged already.
        """
        if reason is not None and (not isinstance(reason, str) or "\r" in reason or "\n" in reason):
            raise InvalidArgumentError("reason must be a str without CR or LF")
        self._claim("term")
        self._send(_TERM + (b" " + reason.encode() if reason else b""))


def message_size(msg: Msg) -> int:
    """What a pull buffer counts for ``msg``: its subject, reply, headers and payload,
    as they came (read before the subject or reply is decoded, as every buffered
    message is)."""
    header = msg._header_block
    size = len(msg._subject) + len(msg._reply) + len(msg.data)
    return size if header is None else size + len(header)


def keep_run(
    api: JetStreamApi,
    frames: Iterable[tuple[Any, ...]],
    keep: Callable[[list[Msg]], object],
) -> int:
    """Make a :class:`Msg` of each delivery of a run (``(MSG, subject, sid, reply,
    header_or_None, payload)`` as the frame scanner gives them, subject and reply
    undecoded), hand them to ``keep`` in a list, in order, and return their sizes in
    all (as the pull buffer counts them: subject, reply, headers and payload).
    """
    run = list(frames)
    if not run:
        return 0
    _, subjects, _, replies, headers, payloads = zip(*run, strict=True)
    keep(make_msgs(api, subjects, replies, headers, payloads))
    size = _size(subjects, replies, payloads)
    if headers.count(None) == len(headers):
        return size
    return size + sum(map(len, filter(None, headers)))


def keep_deliveries(
    api: JetStreamApi,
    subjects: Sequence[bytes],
    replies: Sequence[bytes],
    payloads: Sequence[bytes],
    keep: Callable[[list[Msg]], object],
) -> int:
    """:func:`keep_run` for a run read as columns (``scan_deliveries``: every
    message with a reply and no headers), with no frame per message."""
    keep(make_msgs(api, subjects, replies, repeat(None, len(payloads)), payloads))
    return _size(subjects, replies, payloads)


def _size(subjects: Iterable[bytes], replies: Iterable[bytes], payloads: Iterable[bytes]) -> int:
    # A join of the short subjects and replies costs a quarter of sum(map(len, ...)).
    return len(b"".join(subjects)) + len(b"".join(replies)) + sum(map(len, payloads))


def make_msgs(
    api: JetStreamApi,
    subjects: Iterable[bytes],
    replies: Iterable[bytes],
    headers: Iterable[bytes | None],
    payloads: Sequence[bytes],
) -> list[Msg]:
    """``[Msg(api, subject, reply, data, header), ...]`` for the columns of a run."""
    # The same objects ``Msg(api, subject, reply, data, header)`` makes, without a
    # Python ``__init__`` call per message (a third of their cost): keep the two in
    # step. The objects are made by one ``map`` and handed over in one list; no
    # size per message (the pull buffer counts a run's bytes at once, and a
    # message's when it needs it, with message_size).
    msgs = list(map(object.__new__, repeat(Msg, len(payloads))))
    for msg, subject, reply, header, data in zip(
        msgs, subjects, replies, headers, payloads, strict=True
    ):
        msg._api = api
        msg._subject = subject
        msg._reply = reply
        msg.data = data
        msg._header_block = header
        msg._headers = None
        msg._metadata = None
        msg._acked = False
    return msgs


def header_block_of(msg: Msg) -> bytes | None:
    """The message's raw ``NATS/1.0`` header block, undecoded (``None``: no headers)."""
    return msg._header_block
