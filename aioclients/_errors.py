"""The error root shared by every protocol package, and its families.

Every exception the library raises derives from :class:`AioClientsError`.
The families below say *what kind* of failure happened, so that callers can
write one ``except`` for "the server said no" or "this timed out" whatever
the protocol; each protocol package adds its specific errors beneath them.
Each error carries ``retriable``: whether repeating the same call may succeed.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping

__all__ = (
    "AioClientsError",
    "BrokenResourceError",
    "ClientClosedError",
    "ConnectError",
    "InvalidArgumentError",
    "LocalProtocolError",
    "OperationTimeoutError",
    "ProtocolError",
    "RemoteProtocolError",
    "ServerError",
)


class AioClientsError(Exception):
    """Root of every error raised by aioclients."""

    retriable: bool = False


class InvalidArgumentError(AioClientsError, ValueError):
    """A call was given a value it cannot use; the message names the argument and the fix."""


class ProtocolError(AioClientsError):
    """The protocol was broken, by us (local) or by the peer (remote)."""


class LocalProtocolError(ProtocolError):
    """We were asked to do something the protocol state does not allow."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that do not follow the protocol.

    ``offset`` is the position of the offending byte in the peer's stream when known.
    """

    def __init__(self, message: str, *, offset: int | None = None) -> None:
        super().__init__(message if offset is None else f"{message} (at byte offset {offset})")
        self.offset = offset


class ConnectError(AioClientsError, builtins.ConnectionError):
    """A connection could not be opened or was lost."""

    retriable = True


class OperationTimeoutError(AioClientsError, builtins.TimeoutError):
    """An operation did not finish in time. Also a builtin :class:`TimeoutError`."""

    retriable = True


class ClientClosedError(AioClientsError):
    """The client (or resource) was closed by its owner; the call cannot proceed."""


class BrokenResourceError(AioClientsError):
    """The resource was broken by something external (server gone, stream ended)."""


class ServerError(AioClientsError):
    """The server answered with an error.

    Attributes:
        code: the server's status or error code (its type depends on the protocol).
    """

    def __init__(self, message: str, *, code: object = None) -> None:
        super().__init__(message)
        self.code = code


def name_public_module(package: str, namespace: Mapping[str, object]) -> None:
    """Give each error class ``package`` exports the package's name as ``__module__``.

    A traceback then says ``aioclients.jetstream.JetStreamConnectError``, the name users
    import and catch, not the private module that defines it; pickle (Spark ships errors
    between processes) finds the class under that name too. Classes defined outside the
    package (a shared family re-exported) keep their own public name.

    Args:
        package: the public package, ``__name__`` of its ``__init__``.
        namespace: the package's globals, with its ``__all__``.
    """
    names = namespace["__all__"]
    assert isinstance(names, tuple)
    for name in names:
        obj = namespace[name]
        if (
            isinstance(obj, type)
            and issubclass(obj, BaseException)
            and obj.__module__.startswith(package + "._")
        ):
            obj.__module__ = package
