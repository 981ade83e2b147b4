"""Value types of the Liftbridge API: positions, ack policies, messages and acks.

The enums carry the wire numbers of liftbridge-api v1.9 (``StartPosition``,
``StopPosition``, ``AckPolicy``). :class:`Message` is an immutable view over a
decoded protobuf message: a subscription creates one per message, so it copies
nothing until a field is read. :class:`Ack` is a frozen dataclass.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aioclients.liftbridge._pb import api_pb2 as pb

__all__ = ("Ack", "AckPolicy", "Message", "StartPosition", "StopPosition")


class StartPosition(enum.IntEnum):
    """Where a subscription starts in a partition."""

    NEW_ONLY = 0  #: only messages committed after the subscription starts
    OFFSET = 1  #: at ``start_offset``
    EARLIEST = 2  #: at the oldest message kept
    LATEST = 3  #: at the newest message, then everything after it
    TIMESTAMP = 4  #: at the first message received at or after ``start_time``


class StopPosition(enum.IntEnum):
    """Where a subscription stops (it then ends with ``StopAsyncIteration``)."""

    ON_CANCEL = 0  #: never: it runs until closed
    OFFSET = 1  #: after ``stop_offset``
    LATEST = 2  #: after the newest message at subscribe time
    TIMESTAMP = 3  #: after the last message received at or before ``stop_time``


class AckPolicy(enum.IntEnum):
    """When the cluster acknowledges a published message."""

    LEADER = 0  #: once the partition leader has written it
    ALL = 1  #: once every in-sync replica has written it
    NONE = 2  #: never (fire and forget)


def _ack_policy(value: int) -> AckPolicy:
    try:
        return AckPolicy(value)
    except ValueError:
        return AckPolicy.LEADER


class Message:
    """A message of a stream partition (read-only).

    Attributes:
        stream, partition, offset: where it is stored.
        key: the key, or ``None``.  value: the payload.
        timestamp: when the broker received it, in nanoseconds since the epoch.
        headers: ``dict[str, bytes]`` (a fresh copy on each read).
        subject, reply_subject: the NATS subject it arrived on and its reply subject.
        ack_inbox, correlation_id, ack_policy: the publisher's ack settings.
    """

    __slots__ = ("_pb",)

    _pb: pb.Message

    def __init__(
        self,
        value: bytes = b"",
        *,
        stream: str = "",
        partition: int = 0,
        offset: int = 0,
        key: bytes | None = None,
        timestamp: int = 0,
        headers: Mapping[str, bytes] | None = None,
        subject: str = "",
        reply_subject: str | None = None,
        ack_inbox: str | None = None,
        correlation_id: str | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
    ) -> None:
        self._pb = pb.Message(
            value=value,
            stream=stream,
            partition=partition,
            offset=offset,
            key=key or b"",
            timestamp=timestamp,
            headers=dict(headers or {}),
            subject=subject,
            replySubject=reply_subject or "",
            ackInbox=ack_inbox or "",
            correlationId=correlation_id or "",
            ackPolicy=int(ack_policy),  # type: ignore[arg-type]
        )

    @classmethod
    def _wrap(cls, message: pb.Message) -> Message:
        """The fast path: view a decoded protobuf message without copying it."""
        self = object.__new__(cls)
        self._pb = message
        return self

    @property
    def stream(self) -> str:
        return self._pb.stream

    @property
    def partition(self) -> int:
        return self._pb.partition

    @property
    def offset(self) -> int:
        return self._pb.offset

    @property
    def key(self) -> bytes | None:
        return self._pb.key or None

    @property
    def value(self) -> bytes:
        return self._pb.value

    @property
    def timestamp(self) -> int:
        return self._pb.timestamp

    @property
    def headers(self) -> dict[str, bytes]:
        return dict(self._pb.headers)

    @property
    def subject(self) -> str:
        return self._pb.subject

    @property
    def reply_subject(self) -> str | None:
        return self._pb.replySubject or None

    @property
    def ack_inbox(self) -> str | None:
        return self._pb.ackInbox or None

    @property
    def correlation_id(self) -> str | None:
        return self._pb.correlationId or None

    @property
    def ack_policy(self) -> AckPolicy:
        return _ack_policy(self._pb.ackPolicy)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return bool(self._pb == other._pb)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Message(stream={self.stream!r}, partition={self.partition}, offset={self.offset}, "
            f"key={self.key!r}, value={self.value[:32]!r}{'...' if len(self.value) > 32 else ''})"
        )


@dataclass(frozen=True, slots=True)
class Ack:
    """The cluster's acknowledgement of a published message.

    Attributes:
        stream: the stream name.  partition: the partition the client published
            to (``None`` where unknown, e.g. from ``unmarshal_ack``).
        offset: the offset the message was committed at.
        partition_subject: the NATS subject of that partition.  msg_subject: the
            subject the message was received on.
        ack_inbox, correlation_id, ack_policy: echoed from the message.
        reception_timestamp, commit_timestamp: nanoseconds since the epoch.
        ack_error: ``None``, or the server's error name (``"INCORRECT_OFFSET"``,
            ``"TOO_LARGE"``, ``"ENCRYPTION"``, ``"UNKNOWN"``).
    """

    stream: str
    partition: int | None
    offset: int
    partition_subject: str
    msg_subject: str
    ack_inbox: str | None
    correlation_id: str | None
    ack_policy: AckPolicy
    reception_timestamp: int
    commit_timestamp: int
    ack_error: str | None = None

    @classmethod
    def _from_pb(cls, ack: Any, partition: int | None = None) -> Ack:
        error = ack.ackError
        return cls(
            stream=ack.stream,
            partition=partition,
            offset=ack.offset,
            partition_subject=ack.partitionSubject,
            msg_subject=ack.msgSubject,
            ack_inbox=ack.ackInbox or None,
            correlation_id=ack.correlationId or None,
            ack_policy=_ack_policy(ack.ackPolicy),
            reception_timestamp=ack.receptionTimestamp,
            commit_timestamp=ack.commitTimestamp,
            ack_error=None if error == 0 else _ack_error_name(error),
        )


def _ack_error_name(code: int) -> str:
    try:
        return str(pb.Ack.Error.Name(code))
    except ValueError:
        return f"ERROR_{code}"
