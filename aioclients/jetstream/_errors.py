"""JetStream errors and the mapping of the server's API errors onto them.

Every API error the server returns carries ``code`` (an HTTP-like status),
``err_code`` (JetStream's own stable number) and ``description``; the mapping
picks the most specific class by ``err_code`` and falls back to status codes.
"""

from __future__ import annotations

from typing import Any

from aioclients._errors import (
    ClientClosedError,
    ConnectError,
    InvalidArgumentError,
    OperationTimeoutError,
    ServerError,
)

__all__ = (
    "APITimeoutError",
    "BatchAbortedError",
    "BatchTimeoutError",
    "BucketNotFoundError",
    "BucketSealedError",
    "ConsumerDeletedError",
    "ConsumerExistsError",
    "ConsumerNotFoundError",
    "DigestMismatchError",
    "DirectGetUnavailableError",
    "JetStreamClosedError",
    "JetStreamConnectError",
    "JetStreamError",
    "JetStreamNotEnabledError",
    "KeyDeletedError",
    "KeyExistsError",
    "KeyNotFoundError",
    "KeyWrongRevisionError",
    "LinkIsABucketError",
    "MaxPayloadError",
    "MessageAlreadyAckedError",
    "MessageNotFoundError",
    "NoHeartbeatError",
    "NoMessagesError",
    "NoStreamResponseError",
    "ObjectDeletedError",
    "ObjectExistsError",
    "ObjectIncompleteError",
    "ObjectNotFoundError",
    "ServerTooOldError",
    "StreamNameInUseError",
    "StreamNotFoundError",
    "TooManySubjectsError",
    "WrongExpectedStreamError",
    "WrongLastMsgIdError",
    "WrongLastSequenceError",
    "api_error",
)


class JetStreamError(ServerError):
    """An error reported by JetStream (root of this package's server errors).

    Attributes:
        code: HTTP-like status (e.g. 404), or ``None``.
        err_code: JetStream's error number (e.g. 10059), or ``None``.
        description: the server's text.
    """

    def __init__(
        self,
        description: str,
        *,
        code: int | None = None,
        err_code: int | None = None,
        hint: str | None = None,
    ) -> None:
        parts = [description]
        if code is not None or err_code is not None:
            parts.append(f"(code={code}, err_code={err_code})")
        if hint:
            parts.append(f"- {hint}")
        super().__init__(" ".join(parts), code=code)
        self.code: int | None = code
        self.err_code = err_code
        self.description = description


class StreamNotFoundError(JetStreamError):
    """The stream does not exist."""


class StreamNameInUseError(JetStreamError):
    """A stream with this name exists already with a different configuration."""


class ConsumerNotFoundError(JetStreamError):
    """The consumer does not exist."""


class ConsumerExistsError(JetStreamError):
    """``create_consumer`` found a consumer of that name with a different config."""


class MessageNotFoundError(JetStreamError):
    """No stored message matches the request."""


class NoMessagesError(JetStreamError, OperationTimeoutError):
    """A pull ended without a message (also a ``TimeoutError``)."""


class ConsumerDeletedError(JetStreamError):
    """The consumer was deleted while messages were being consumed."""


class NoHeartbeatError(JetStreamError, OperationTimeoutError):
    """Idle heartbeats stopped arriving."""


class MessageAlreadyAckedError(JetStreamError):
    """The message was acknowledged already."""


class TooManySubjectsError(JetStreamError):
    """A multi-subject Direct Get matched more subjects than the server allows (413)."""


class DirectGetUnavailableError(JetStreamError):
    """Nobody answers Direct Get for this stream (``allow_direct`` off, or no such stream)."""


class ServerTooOldError(JetStreamError):
    """The server does not support the requested feature."""


class NoStreamResponseError(JetStreamError):
    """A publish reached no stream: no stream listens on the subject (503)."""


class WrongLastSequenceError(JetStreamError):
    """``expected_last_seq`` / ``expected_last_subject_seq`` did not match."""


class WrongLastMsgIdError(JetStreamError):
    """``expected_last_msg_id`` did not match."""


class WrongExpectedStreamError(JetStreamError):
    """``expected_stream`` did not match the stream that stored the message."""


class JetStreamNotEnabledError(JetStreamError):
    """JetStream is not enabled on the server or for the account."""


class JetStreamClosedError(ClientClosedError):
    """The JetStream context (or its NATS connection) is closed."""


class APITimeoutError(OperationTimeoutError):
    """A JetStream API request got no answer in time."""


class MaxPayloadError(InvalidArgumentError):
    """The message (headers + payload) exceeds the server's ``max_payload``."""


class JetStreamConnectError(ConnectError):
    """The NATS connection under JetStream could not be opened."""


_BY_ERR_CODE: dict[int, type[JetStreamError]] = {
    10059: StreamNotFoundError,  # stream not found
    10058: StreamNameInUseError,  # stream name already in use with a different configuration
    10014: ConsumerNotFoundError,  # consumer not found
    10149: ConsumerNotFoundError,  # consumer does not exist (update action)
    10148: ConsumerExistsError,  # consumer already exists (create action)
    10013: ConsumerExistsError,  # consumer name already in use
    10037: MessageNotFoundError,  # no message found
    10071: WrongLastSequenceError,  # wrong last sequence
    # The same on a replicated stream when the leader refuses a write whose
    # expectation meets one still in flight (no number in the description;
    # nats.go treats the two alike).
    10164: WrongLastSequenceError,  # wrong last sequence
    10070: WrongLastMsgIdError,  # wrong last msg ID
    10060: WrongExpectedStreamError,  # expected stream does not match
    10039: JetStreamNotEnabledError,  # JetStream not enabled for account
    10076: JetStreamNotEnabledError,  # JetStream not enabled
    10185: ServerTooOldError,  # JetStream minimum api level required (ADR-44)
}


def api_error(code: int | None, err_code: int | None, description: str) -> JetStreamError:
    """Build the most specific error for an API error answer."""
    cls = _BY_ERR_CODE.get(err_code or 0)
    if cls is None:
        cls = JetStreamNotEnabledError if code == 503 else JetStreamError
    return cls(description, code=code, err_code=err_code)


# -- Key-Value (ADR-8) ------------------------------------------------------------------------


class BucketNotFoundError(StreamNotFoundError):
    """No Key-Value bucket of that name (its stream ``KV_<bucket>`` does not exist)."""


class KeyNotFoundError(MessageNotFoundError):
    """The key has no value in the bucket (never set, or expired)."""


class KeyDeletedError(KeyNotFoundError):
    """The key's last operation is a delete or purge marker.

    Attributes:
        entry: the marker, a :class:`KeyValueEntry` (its ``revision`` is what
            ``update`` would expect; its ``operation`` is ``"DEL"`` or ``"PURGE"``).
    """

    #: Typed Any, not object: this lowest module cannot import KeyValueEntry (the
    #: layers), and ``exc.entry.revision`` must type-check in the caller's code.
    entry: Any

    def __init__(self, description: str, *, entry: Any = None, code: int | None = None) -> None:
        super().__init__(description, code=code)
        self.entry = entry


class KeyExistsError(WrongLastSequenceError):
    """``create`` found the key holding a value."""


class KeyWrongRevisionError(WrongLastSequenceError):
    """``update`` / ``delete`` / ``purge`` with ``last``: the key's revision is another."""


# -- Atomic batch publish (ADR-50) ----------------------------------------------------------


class BatchAbortedError(JetStreamError):
    """An atomic batch was not stored: nothing of it is in the stream.

    ``err_code`` is the server's (10174 ``allow_atomic`` off, 10176 incomplete,
    10199 too large, 10071 a failed expectation, ...) where the server said why,
    ``None`` where the client refused the batch before sending it.
    """


class BatchTimeoutError(BatchAbortedError, APITimeoutError):
    """An atomic batch timed out (also a ``TimeoutError``).

    Before the commit was sent nothing is stored (the server drops an
    uncommitted batch); if the commit's answer was what did not come, the
    message says that the batch may or may not be stored, whole either way.
    """


# -- Object Store (ADR-20) --------------------------------------------------------------------


class ObjectNotFoundError(MessageNotFoundError):
    """No object of that name in the store."""


class ObjectDeletedError(ObjectNotFoundError):
    """The object was deleted (its meta is a delete marker), also while being read.

    Attributes:
        info: the delete marker's ``ObjectInfo`` (``None`` when unknown).
    """

    #: Any, not object, as KeyDeletedError.entry: ``exc.info.modified`` type-checks.
    info: Any

    def __init__(self, description: str, *, info: Any = None, code: int | None = None) -> None:
        super().__init__(description, code=code)
        self.info = info


class ObjectExistsError(JetStreamError):
    """Another object holds the name (``update_meta`` renaming onto it, ``add_link``)."""


class ObjectIncompleteError(JetStreamError):
    """A ``get`` found chunks missing or in excess: the object was deleted, replaced
    or purged while being read, or its data does not add up to its meta."""


class DigestMismatchError(JetStreamError):
    """The SHA-256 of an object's data read back differs from its meta's digest."""


class LinkIsABucketError(JetStreamError):
    """The object is a link to a whole store: it has no data of its own to get."""


class BucketSealedError(JetStreamError):
    """The store is sealed: it takes no more writes, deletes or meta updates."""
