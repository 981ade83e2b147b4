"""gRPC calls over the library's own HTTP/2 code: a transport of its own, no client's.

Layers (top-down; a module imports only from the ones below it):

* :mod:`aioclients._grpc_h2._io._h2` -- the asyncio driver: :class:`Http2Channel`,
  which looks like a ``grpc.aio.Channel`` to a generated stub, and its calls,
  which look like ``grpc.aio`` calls (errors are ``grpc.aio.AioRpcError``), so a
  client can serve both transports with one error mapping.
* :mod:`aioclients._grpc_h2._tls` -- the TLS context of those connections
  (ALPN ``h2``), built from PEM files or another context's CA certificates.
* :mod:`aioclients._grpc_h2._protocol._http2` -- the pure core: bytes in,
  events and bytes out (no asyncio, socket or clock; tests enforce it).

Nothing here knows a particular service: the user agent and the logger of a
channel are arguments. A client package reaches this package through one
module of its own (its transport layer), which sets them.
"""

from aioclients._grpc_h2._io._h2 import Http2Channel
from aioclients._grpc_h2._tls import check_roots, load_client_pair, read_pem, stream_ssl_context

__all__ = ("Http2Channel", "check_roots", "load_client_pair", "read_pem", "stream_ssl_context")
