"""aioclients: asyncio-native clients for NSQ, NATS JetStream and Liftbridge.

Protocol packages are imported on demand: ``aioclients.jetstream``,
``aioclients.nsq``, ``aioclients.liftbridge``, ``aioclients.spark``.
"""

from aioclients._errors import (
    AioClientsError,
    BrokenResourceError,
    ClientClosedError,
    ConnectError,
    InvalidArgumentError,
    LocalProtocolError,
    OperationTimeoutError,
    ProtocolError,
    RemoteProtocolError,
    ServerError,
)
from aioclients._version import __version__

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
    "__version__",
)
