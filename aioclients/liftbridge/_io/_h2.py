"""The Liftbridge client's HTTP/2 channel, under its old import path.

The transport itself is the package :mod:`aioclients._grpc_h2`; the Liftbridge
package reaches it through ``_io._grpc`` only (its one door), which configures
the channel (user agent, logger). This name stays for code that imported it here.
"""

from aioclients.liftbridge._io._grpc import Http2Channel

__all__ = ("Http2Channel",)
