"""Channels, TLS credentials and the one place gRPC errors become ours.

The Liftbridge package's transport layer and its only door to the general
HTTP/2 gRPC transport :mod:`aioclients._grpc_h2` (no other module of the
package imports it): :class:`ChannelFactory` opens ``grpc.aio`` channels for
ordinary RPCs and ``_grpc_h2`` channels (Liftbridge's user agent and logger)
for the Subscribe and PublishAsync streams.

Every call into ``grpc.aio`` made by the client goes through code that catches
``grpc.aio.AioRpcError`` and passes it to :func:`map_rpc_error`; nothing of
grpc's escapes the package (the httpcore ``map_exceptions`` rule). This module
owns the rule "which failure means the connection broke"
(:func:`is_connection_failure`); what is done about it (drop the broker, retry
elsewhere) is the broker layer's rule, in ``_brokers``.

TLS: gRPC cannot use an ``ssl.SSLContext`` (it has its own TLS stack). Given
one, :func:`channel_credentials` copies the CA certificates loaded into it
(``load_verify_locations``) into ``grpc.ssl_channel_credentials``, or uses
gRPC's bundled roots when it holds none; its client certificate cannot be read
back, so mutual TLS needs ``grpc.ssl_channel_credentials(...)`` passed as
``tls``, or the ``tls_client_cert``/``tls_client_key`` paths. A context that
does not verify certificates is refused (gRPC always verifies).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from aioclients import _grpc_h2
from aioclients._core import redact_text
from aioclients._errors import InvalidArgumentError
from aioclients._grpc_h2 import check_roots, load_client_pair, read_pem, stream_ssl_context
from aioclients.liftbridge._errors import (
    IncorrectOffsetError,
    LiftbridgeClosedError,
    LiftbridgeConnectError,
    LiftbridgeError,
    LiftbridgeServerError,
    LiftbridgeTimeoutError,
    NoSuchConsumerGroupError,
    NoSuchPartitionError,
    NoSuchStreamError,
    ReadonlyPartitionError,
    StreamExistsError,
)

__all__ = (
    "USER_AGENT",
    "ChannelFactory",
    "Http2Channel",
    "channel_credentials",
    "is_connection_failure",
    "map_rpc_error",
    "stream_ssl_context",
)

log = logging.getLogger("aioclients.liftbridge.grpc")
_h2_log = logging.getLogger("aioclients.liftbridge.h2")

#: the user agent of the client's own HTTP/2 connections
USER_AGENT = "aioclients-liftbridge"

StatusCode = grpc.StatusCode

# Notice dead brokers under idle calls; let large messages through (the
# server's own limit applies). Liftbridge leaves Go gRPC's keepalive policy at
# its default, which closes a connection pinged more than once per 5 minutes
# ("too_many_pings"): ping after 5.5 minutes of silence.
_DEFAULT_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 330_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.enable_retries", 0),
    # A channel of its own per broker connection: with gRPC's global subchannel
    # pool, the channel opened after a broker refused connections inherits the
    # old one's reconnect backoff (1 s, growing to 2 min) and fails at once for
    # that long, although the broker is back.
    ("grpc.use_local_subchannel_pool", 1),
)


def channel_credentials(
    tls: object,
    *,
    root_certificates: str | Path | None = None,
    client_cert: str | Path | None = None,
    client_key: str | Path | None = None,
) -> grpc.ChannelCredentials | None:
    """Turn the ``tls`` argument of ``connect`` into gRPC channel credentials."""
    if (client_cert is None) != (client_key is None):
        raise InvalidArgumentError("tls_client_cert and tls_client_key go together; give both")
    roots = read_pem("tls_root_certificates", root_certificates)
    chain = read_pem("tls_client_cert", client_cert)
    key = read_pem("tls_client_key", client_key)
    # gRPC checks none of these until it connects, and then only logs why the
    # handshake failed: check them here, naming the option to fix.
    if roots is not None and root_certificates is not None:
        check_roots(root_certificates, roots)
    if client_cert is not None and client_key is not None:
        load_client_pair(ssl.create_default_context(), client_cert, client_key)
    if tls is None:
        if roots is None and chain is None:
            return None
        return grpc.ssl_channel_credentials(roots, key, chain)
    if isinstance(tls, grpc.ChannelCredentials):
        return tls
    if isinstance(tls, ssl.SSLContext):
        if tls.verify_mode == ssl.CERT_NONE:
            raise InvalidArgumentError(
                "gRPC always verifies the broker's certificate: pass an SSLContext that "
                "verifies (check_hostname/verify_mode) and give it the CA with "
                "load_verify_locations"
            )
        if roots is None:
            ders = tls.get_ca_certs(binary_form=True)
            pems = [ssl.DER_cert_to_PEM_cert(der) for der in ders]
            roots = "".join(pems).encode() if pems else None
        return grpc.ssl_channel_credentials(roots, key, chain)
    raise InvalidArgumentError(
        f"tls must be None, an ssl.SSLContext or grpc.ChannelCredentials, got {type(tls).__name__}"
    )


class Http2Channel(_grpc_h2.Http2Channel):
    """The general HTTP/2 gRPC channel with Liftbridge's user agent and logger."""

    def __init__(self, address: str, **kwargs: Any) -> None:
        kwargs.setdefault("user_agent", USER_AGENT)
        kwargs.setdefault("logger", _h2_log)
        super().__init__(address, **kwargs)


class ChannelFactory:
    """Opens channels with the client's credentials and options.

    :meth:`open` gives a ``grpc.aio`` channel (ordinary RPCs); :meth:`open_stream`
    gives a channel for the Subscribe and PublishAsync streams: our own HTTP/2
    (:class:`Http2Channel`) unless ``http2_streams`` is False.
    """

    def __init__(
        self,
        credentials: grpc.ChannelCredentials | None,
        *,
        server_name: str | None = None,
        options: Sequence[tuple[str, Any]] = (),
        http2_streams: bool = False,
        stream_ssl: ssl.SSLContext | None = None,
    ) -> None:
        self.credentials = credentials
        self.http2_streams = http2_streams
        self.stream_ssl = stream_ssl
        self.server_name = server_name
        # Later settings win: gRPC itself would take the first of two equal keys.
        opts = dict(_DEFAULT_OPTIONS)
        if server_name:
            opts["grpc.ssl_target_name_override"] = server_name
        opts.update(dict(options))
        self.options = tuple(opts.items())
        self.max_send = int(opts["grpc.max_send_message_length"])

    def open(self, address: str) -> grpc.aio.Channel:
        if self.credentials is None:
            return grpc.aio.insecure_channel(address, options=self.options)
        return grpc.aio.secure_channel(address, self.credentials, options=self.options)

    def open_stream(self, address: str) -> Any:
        """A channel for the streaming calls (same stub surface as ``grpc.aio``)."""
        if not self.http2_streams:
            return self.open(address)
        opts = dict(self.options)
        return Http2Channel(
            address,
            ssl_context=self.stream_ssl,
            server_hostname=self.server_name,
            keepalive_time=float(opts.get("grpc.keepalive_time_ms", 330_000)) / 1000,
            keepalive_timeout=float(opts.get("grpc.keepalive_timeout_ms", 10_000)) / 1000,
            max_message_size=int(opts.get("grpc.max_receive_message_length", 64 * 1024 * 1024)),
        )


def _details(exc: grpc.aio.AioRpcError) -> str:
    """gRPC's details, which may quote the target address, safe to print."""
    return redact_text(exc.details() or exc.code().name)


def is_connection_failure(exc: grpc.aio.AioRpcError) -> bool:
    """UNAVAILABLE, or an INTERNAL status made by gRPC itself when the connection
    broke under a stream (a reset stream), rather than one sent by the broker."""
    code = exc.code()
    if code is StatusCode.UNAVAILABLE:
        return True
    details = (exc.details() or "").lower()
    return code is StatusCode.INTERNAL and ("from core" in details or "rst_stream" in details)


def _no_such_group(code: StatusCode, details: str) -> bool:
    """Whether the broker said the consumer group does not exist: NOT_FOUND "consumer
    group does not exist" (server/metadata.go ErrConsumerGroupNotFound, from a join, a
    leave or an assignments fetch), FAILED_PRECONDITION "No such consumer group <id>"
    (server/metadata.go ReportGroupCoordinator)."""
    text = details.lower()
    if code is StatusCode.NOT_FOUND:
        return "consumer group" in text
    return code is StatusCode.FAILED_PRECONDITION and "no such consumer group" in text


def map_rpc_error(
    exc: grpc.aio.AioRpcError,
    *,
    what: str,
    closed: bool = False,
    not_found: type[LiftbridgeServerError] = NoSuchStreamError,
) -> LiftbridgeError:
    """The aioclients error for a failed RPC (``what`` names the operation)."""
    code = exc.code()
    details = _details(exc)
    name = code.name
    if closed and code is StatusCode.CANCELLED:
        return LiftbridgeClosedError(f"{what}: the client was closed")
    if code is StatusCode.ALREADY_EXISTS:
        return StreamExistsError(f"{what}: {details}", code=name)
    if _no_such_group(code, details):
        return NoSuchConsumerGroupError(f"{what}: {details}", code=name)
    if code is StatusCode.NOT_FOUND:
        cls = not_found
        if "partition" in details.lower() and cls is NoSuchStreamError:
            cls = NoSuchPartitionError
        return cls(f"{what}: {details}", code=name)
    if code is StatusCode.DEADLINE_EXCEEDED:
        return LiftbridgeTimeoutError(
            f"{what}: no answer (or no ack) in time; "
            "raise timeout/ack_wait_time or check the broker"
        )
    if is_connection_failure(exc):
        return LiftbridgeConnectError(f"{what}: broker unavailable: {details}")
    if code is StatusCode.INVALID_ARGUMENT:
        return LiftbridgeServerError(
            f"{what}: the broker refused the request: {details}", code=name
        )
    if code is StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details.lower():
        if "received" in details.lower():
            # refused as its length prefix arrived: nothing of it was buffered
            return LiftbridgeServerError(
                f"{what}: the broker sent a message larger than this client accepts "
                f"({details}); raise grpc.max_receive_message_length in grpc_options if "
                "the broker's messages are that large",
                code=name,
            )
        return LiftbridgeServerError(
            f"{what}: the message is too large ({details}); send smaller values", code=name
        )
    if "incorrect expected offset" in details.lower():
        return IncorrectOffsetError(f"{what}: {details}", code=name)
    if code is StatusCode.RESOURCE_EXHAUSTED or (
        code is StatusCode.FAILED_PRECONDITION and "readonly" in details.lower()
    ):
        return ReadonlyPartitionError(f"{what}: {details}", code=name)
    return LiftbridgeServerError(f"{what}: {details} ({name})", code=name)
