"""aioclients: asyncio-native clients for NSQ, NATS JetStream and Liftbridge.

Protocol packages are imported on demand: ``aioclients.jetstream``,
``aioclients.nsq``, ``aioclients.liftbridge``, ``aioclients.spark``.
"""

import logging

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
from aioclients._errors import name_public_module as _name_public_module
from aioclients._version import __version__

# A library does not decide where logs go: without configuration they are dropped
# (not printed through Python's last-resort handler); the application configures
# the "aioclients" loggers.
logging.getLogger("aioclients").addHandler(logging.NullHandler())

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


# Errors carry the name users import them by (aioclients.<package>.XError), in tracebacks
# and in pickles.
_name_public_module(__name__, globals())
