"""Liftbridge errors, and the mapping of gRPC status codes onto them.

Every error derives from :class:`LiftbridgeError` and from one of the shared
families in :mod:`aioclients._errors`, so callers can catch "any timeout" or
"the server said no" without knowing the protocol. gRPC exceptions never leave
the package: :func:`status_error` turns a status code and its details into one
of these.
"""

from __future__ import annotations

from aioclients._errors import (
    AioClientsError,
    BrokenResourceError,
    ClientClosedError,
    ConnectError,
    OperationTimeoutError,
    RemoteProtocolError,
    ServerError,
)

__all__ = (
    "EnvelopeError",
    "IncorrectOffsetError",
    "LiftbridgeClosedError",
    "LiftbridgeConnectError",
    "LiftbridgeError",
    "LiftbridgeServerError",
    "LiftbridgeTimeoutError",
    "NoSuchConsumerGroupError",
    "NoSuchPartitionError",
    "NoSuchStreamError",
    "PartitionPausedError",
    "ReadonlyPartitionError",
    "SegmentDeletedError",
    "StreamDeletedError",
    "StreamExistsError",
    "SubscriptionLostError",
)


class LiftbridgeError(AioClientsError):
    """Root of every error raised by :mod:`aioclients.liftbridge`."""


class LiftbridgeServerError(LiftbridgeError, ServerError):
    """A broker answered with an error status.

    Attributes:
        code: the gRPC status code name (``"NOT_FOUND"``, ``"INTERNAL"`` ...) or ``None``.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.code: str | None = code


class StreamExistsError(LiftbridgeServerError):
    """``create_stream``: a stream of that name exists already (ALREADY_EXISTS)."""


class NoSuchStreamError(LiftbridgeServerError):
    """The stream does not exist (NOT_FOUND, or absent from the cluster metadata)."""


class NoSuchConsumerGroupError(NoSuchStreamError):
    """The consumer group does not exist (Liftbridge: "consumer group does not exist").

    The coordinator answers so for a group it does not know yet (it applies a join
    through Raft a little after the join returns) or any more (the last member left
    or was evicted after the group's consumer timeout, which deletes the group).
    ``code`` is the status the broker answered: NOT_FOUND from an assignments
    fetch, a join or a leave; FAILED_PRECONDITION from a coordinator report.

    A subclass of :class:`NoSuchStreamError`, which the NOT_FOUND answers raised
    before this class existed: ``except NoSuchStreamError`` still catches them.
    Catch this class to tell a missing group from a missing stream.
    """


class NoSuchPartitionError(LiftbridgeServerError):
    """The stream or the partition does not exist (NOT_FOUND)."""


class ReadonlyPartitionError(LiftbridgeServerError):
    """The partition is readonly: publishing is refused, and a subscription ends
    once every message in it was read (or its stop position was reached)."""


class PartitionPausedError(LiftbridgeServerError):
    """The partition was paused while subscribed to; subscribe with ``resume=True``."""


class StreamDeletedError(LiftbridgeServerError):
    """The stream was deleted while subscribed to."""


class SegmentDeletedError(LiftbridgeServerError):
    """A subscription fell behind retention: the broker's cleaner deleted the log segment
    it was reading (Liftbridge answers UNKNOWN "segment has been closed").

    The messages after ``last_offset`` up to the partition's new oldest offset are gone.
    Subscribe again from ``last_offset + 1`` to go on from the oldest offset kept.

    Attributes:
        last_offset: the offset of the last message delivered, or None.
    """

    def __init__(
        self, message: str, *, code: str | None = None, last_offset: int | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.last_offset = last_offset


class IncorrectOffsetError(LiftbridgeServerError):
    """``expected_offset`` did not match (optimistic concurrency control)."""


class LiftbridgeTimeoutError(LiftbridgeError, OperationTimeoutError):
    """A call or an ack did not arrive in time (also a builtin :class:`TimeoutError`)."""


class LiftbridgeConnectError(LiftbridgeError, ConnectError):
    """No broker could be reached (every known address answered UNAVAILABLE)."""


class LiftbridgeClosedError(LiftbridgeError, ClientClosedError):
    """The client (or the subscription, or the consumer) was closed."""


class SubscriptionLostError(LiftbridgeError, BrokenResourceError):
    """A subscription broke and could not be re-established within
    ``resubscribe_wait_time``; resubscribe from ``last_offset + 1``."""

    retriable = True

    def __init__(self, message: str, *, last_offset: int | None = None) -> None:
        super().__init__(message)
        self.last_offset = last_offset


class EnvelopeError(LiftbridgeError, RemoteProtocolError):
    """Bytes that should hold a Liftbridge envelope (a Message or an Ack) do not."""
