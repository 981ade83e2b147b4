"""The asyncio driver of the lean Direct Get reader used by Spark partition readers.

One connection per Spark task: an ``asyncio.Protocol`` feeds received bytes to the
pure :class:`DirectReplyParser`, answers PINGs, and resolves the future of the one
outstanding batch request when its end arrives. :func:`read_sequence_range` walks
a sequence range batch by batch, sending the next request as soon as the previous
batch has ended, so the server fills the socket while Spark consumes a batch.

Why not nats-py: its per-message parsing and callback dispatch cost more than
everything else in a Spark read put together (see benchmarks/spark_jetstream_read.py).
Only what a Direct Get reader needs is here: plain or TLS connections (a private CA
and a client certificate through :class:`TlsFiles`), user and password or token from
the URL, INFO/CONNECT/SUB/PUB/PING/PONG.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast
from urllib.parse import unquote, urlsplit

from aioclients._core import redact_text, redact_url
from aioclients._errors import ConnectError, OperationTimeoutError, RemoteProtocolError
from aioclients.jetstream import DirectGetUnavailableError, JetStreamError
from aioclients.spark._errors import DataSourceOptionError
from aioclients.spark._protocol._direct_reader import (
    BatchEnd,
    Columns,
    DirectReplyParser,
    Ping,
    ServerErr,
    ServerInfo,
    StatusReply,
)

__all__ = (
    "DirectGetConnection",
    "TlsFiles",
    "count_from",
    "count_in_range",
    "read_last_for",
    "read_sequence_range",
)

log = logging.getLogger("aioclients.spark.jetstream")

T = TypeVar("T")

#: Reply bytes asked for per request: bounds what the server queues for us (well under
#: nats-server's default 64 MB max_pending, past which it drops a slow consumer) while
#: leaving room for a default batch (50000 messages of ~600 bytes with their headers).
DEFAULT_MAX_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files for TLS: a CA to trust instead of the system's, and a client certificate.

    Plain paths, so that a partition carries them to every Spark executor (where the
    files must exist too); each side builds its own :class:`ssl.SSLContext`.
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def __bool__(self) -> bool:
        return bool(self.ca_file or self.cert_file or self.key_file)

    def context(self) -> ssl.SSLContext:
        """An SSLContext that verifies the server (against ``ca_file`` when given).

        Raises:
            DataSourceOptionError: a file is missing, unreadable or not PEM; the
                message names its option.
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificate and host
        if self.ca_file:
            try:
                context.load_verify_locations(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as exc:  # ssl.SSLError is an OSError too
                raise DataSourceOptionError(
                    f"option 'tlsCaFile': cannot load {self.ca_file!r} as PEM CA "
                    f"certificates ({_reason(exc)}); give the path of a PEM file"
                ) from None
        else:
            context.load_default_certs()
        if self.key_file and not self.cert_file:
            raise DataSourceOptionError(
                "option 'tlsKeyFile' needs 'tlsCertFile' (the client certificate it belongs to)"
            )
        if self.cert_file:
            try:
                context.load_cert_chain(self.cert_file, self.key_file or None)
            except (OSError, ssl.SSLError) as exc:
                option = "tlsCertFile" if not self.key_file else "tlsCertFile/tlsKeyFile"
                raise DataSourceOptionError(
                    f"option '{option}': cannot load the client certificate "
                    f"{self.cert_file!r}{f' with key {self.key_file!r}' if self.key_file else ''}"
                    f" ({_reason(exc)}); give PEM files of a certificate and its private key"
                ) from None
        return context


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return redact_text(getattr(exc, "reason", None) or str(exc) or type(exc).__name__)


class DirectGetConnection(asyncio.Protocol):
    """A NATS connection that sends batched Direct Get requests, one at a time."""

    def __init__(self, timeout: float, ssl_context: ssl.SSLContext | None = None) -> None:
        self._timeout = timeout
        self._ssl_context = ssl_context
        self._parser = DirectReplyParser(sid=b"1")
        self._transport: asyncio.Transport | None = None
        self._info: asyncio.Future[dict[str, object]] | None = None
        self._pong: asyncio.Future[None] | None = None
        self._batch: asyncio.Future[tuple[Columns, BatchEnd]] | None = None
        self._failure: BaseException | None = None
        self.inbox = f"_INBOX.spark.{uuid.uuid4().hex}"

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # cast, not isinstance: uvloop's transports are not asyncio.Transport subclasses
        self._transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        try:
            events = self._parser.receive_data(data)
        except RemoteProtocolError as exc:
            self._fail(exc)
            return
        for event in events:
            if isinstance(event, BatchEnd):
                self._settle(self._batch, (self._parser.take_columns(), event))
            elif isinstance(event, Ping):
                if self._transport is not None:
                    self._transport.write(b"PONG\r\n")
            elif isinstance(event, ServerInfo):
                self._settle(self._info, event.info)
            elif isinstance(event, StatusReply):
                self._fail_batch(self._status_error(event))
            elif isinstance(event, ServerErr):
                self._fail(ConnectError(f"NATS server error: {redact_text(event.message)}"))
            else:  # Pong
                self._settle(self._pong, None)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f": {redact_text(str(exc))}" if exc else ""
        self._fail(ConnectError(f"NATS connection lost{reason}"))

    # -- helpers ----------------------------------------------------------------------------

    @staticmethod
    def _settle(future: asyncio.Future[Any] | None, value: object) -> None:
        if future is not None and not future.done():
            future.set_result(value)

    def _fail_batch(self, exc: BaseException) -> None:
        if self._batch is not None and not self._batch.done():
            self._batch.set_exception(exc)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        for future in (self._info, self._pong, self._batch):
            if future is not None and not future.done():
                future.set_exception(exc)
        if self._transport is not None:
            self._transport.abort()

    def _status_error(self, status: StatusReply) -> JetStreamError:
        code = int(status.code) if status.code.isdigit() else None
        if status.code == "503":
            return DirectGetUnavailableError(
                "no Direct Get responder for the stream",
                code=503,
                hint="the stream was deleted or has allow_direct off; enable it with "
                "update_stream(name, allow_direct=True)",
            )
        return JetStreamError(f"Direct Get failed: {status.description or status.code}", code=code)

    async def _wait(self, future: asyncio.Future[T], what: str) -> T:
        try:
            return await asyncio.wait_for(future, self._timeout)
        except asyncio.TimeoutError:
            exc = OperationTimeoutError(f"no {what} from the NATS server within {self._timeout}s")
            self._fail(exc)
            raise exc from None

    # -- connecting -------------------------------------------------------------------------

    @classmethod
    async def open(
        cls, servers: list[str], *, timeout: float, tls: TlsFiles | None = None
    ) -> DirectGetConnection:
        """Connect to the first server of ``servers`` that answers.

        With ``tls`` files, the connection is TLS (with that CA and client
        certificate) even where the URL says ``nats://``.

        Raises:
            ConnectError: no server could be reached (or it refused us).
            DataSourceOptionError: a TLS file cannot be used.
        """
        context = tls.context() if tls else None
        errors = []
        for url in servers:
            try:
                return await cls._open_one(url, timeout, context)
            except (OSError, ConnectError, OperationTimeoutError) as exc:
                errors.append(f"{redact_url(url)}: {redact_text(str(exc) or type(exc).__name__)}")
        raise ConnectError(
            f"cannot connect to NATS ({'; '.join(errors)}); check the 'servers' option"
        )

    @classmethod
    async def _open_one(
        cls, url: str, timeout: float, context: ssl.SSLContext | None
    ) -> DirectGetConnection:
        parts = urlsplit(url)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or 4222
        loop = asyncio.get_running_loop()
        conn = cls(timeout, context)
        conn._info = loop.create_future()
        await asyncio.wait_for(loop.create_connection(lambda: conn, host, port), timeout)
        try:
            info = await conn._wait(conn._info, "INFO")
            assert isinstance(info, dict)
            if parts.scheme == "tls" or info.get("tls_required") or context is not None:
                await conn._start_tls(host)
            connect: dict[str, object] = {
                "verbose": False,
                "pedantic": False,
                "headers": True,
                "no_responders": True,
                "protocol": 1,
                "lang": "python-aioclients-spark",
                "version": "1",
                "name": "aioclients-spark-reader",
            }
            if parts.username and parts.password is not None:
                connect["user"] = unquote(parts.username)
                connect["pass"] = unquote(parts.password)
            elif parts.username:
                connect["auth_token"] = unquote(parts.username)
            conn._pong = loop.create_future()
            conn._write(f"CONNECT {json.dumps(connect)}\r\nSUB {conn.inbox} 1\r\nPING\r\n".encode())
            await conn._wait(conn._pong, "PONG after CONNECT")
        except BaseException:
            conn.abort()
            raise
        return conn

    async def _start_tls(self, host: str) -> None:
        assert self._transport is not None
        loop = asyncio.get_running_loop()
        context = self._ssl_context or ssl.create_default_context()
        transport = await asyncio.wait_for(
            loop.start_tls(self._transport, self, context, server_hostname=host), self._timeout
        )
        self._transport = cast("asyncio.Transport", transport)  # uvloop's: no subclass

    def _write(self, data: bytes) -> None:
        if self._failure is not None:
            raise self._failure
        assert self._transport is not None
        self._transport.write(data)

    # -- requests ---------------------------------------------------------------------------

    def request(
        self,
        stream: str,
        *,
        seq: int,
        batch: int,
        subject: str | None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> asyncio.Future[tuple[Columns, BatchEnd]]:
        """Send one batched Direct Get; the future resolves when its batch has ended."""
        body: dict[str, object] = {"seq": seq, "batch": batch, "max_bytes": max_bytes}
        if subject is not None:
            body["next_by_subj"] = subject
        return self._send(stream, body)

    def request_last_for(
        self,
        stream: str,
        subjects: list[str],
        *,
        up_to_seq: int,
        batch: int,
        seq: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> asyncio.Future[tuple[Columns, BatchEnd]]:
        """Send one ``multi_last`` Direct Get: the last message of each of ``subjects``
        (at most 1024) stored up to sequence ``up_to_seq``, from sequence ``seq`` on."""
        body: dict[str, object] = {
            "multi_last": subjects,
            "up_to_seq": up_to_seq,
            "batch": batch,
            "max_bytes": max_bytes,
        }
        if seq is not None:
            body["seq"] = seq
        return self._send(stream, body)

    def _send(
        self, stream: str, body: dict[str, object]
    ) -> asyncio.Future[tuple[Columns, BatchEnd]]:
        if self._batch is not None and not self._batch.done():
            raise RuntimeError("one Direct Get batch at a time per connection")
        payload = json.dumps(body, separators=(",", ":")).encode()
        future: asyncio.Future[tuple[Columns, BatchEnd]] = (
            asyncio.get_running_loop().create_future()
        )
        self._batch = future
        self._write(
            b"PUB $JS.API.DIRECT.GET.%s %s %d\r\n%s\r\n"
            % (stream.encode(), self.inbox.encode(), len(payload), payload)
        )
        return future

    async def result(
        self, future: asyncio.Future[tuple[Columns, BatchEnd]]
    ) -> tuple[Columns, BatchEnd]:
        return await self._wait(future, "Direct Get batch")

    def abort(self) -> None:
        """Close at once; a request still outstanding is cancelled, not failed."""
        for future in (self._info, self._pong, self._batch):
            if future is not None and not future.done():
                future.cancel()
        if self._transport is not None:
            self._transport.abort()

    async def close(self) -> None:
        self.abort()
        await asyncio.sleep(0)  # let the transport run connection_lost


async def count_from(conn: DirectGetConnection, stream: str, subject: str, seq: int) -> int:
    """How many stored messages match ``subject`` at or after sequence ``seq``.

    One single-message batch: the server counts what follows (``Nats-Num-Pending``).
    """
    columns, end = await conn.result(conn.request(stream, seq=seq, batch=1, subject=subject))
    if end.not_found:
        return 0
    return len(columns) + end.num_pending


async def count_in_range(
    conn: DirectGetConnection, stream: str, subject: str, first: int, last: int
) -> int:
    """About how many messages in ``[first, last]`` match ``subject``: a hint for batch sizes.

    The end is counted first, so messages stored meanwhile make the count too high,
    not too low; a deletion meanwhile can make it low, which costs a request more.
    """
    after = await count_from(conn, stream, subject, last + 1)
    return max(0, await count_from(conn, stream, subject, first) - after)


async def read_sequence_range(
    conn: DirectGetConnection,
    stream: str,
    *,
    first: int,
    last: int,
    subject: str | None,
    batch_size: int,
    matching: int | None = None,
) -> AsyncIterator[Columns]:
    """Yield the messages with sequences in ``[first, last]`` (filtered by ``subject``).

    Batches may run past ``last`` when sequences are missing (deleted, or not
    matching the filter); the caller drops those rows. ``matching`` (how many
    messages of the range match ``subject``, see :func:`count_in_range`) sizes the
    requests of a filtered read, which the server would otherwise fill with matches
    from beyond the range. The request that should end the range asks for one message
    more: when the count is right, that one is the first match past ``last`` (or there
    is none), and the read ends without another request. Once the count is used up
    short of ``last`` (it is a hint, taken while the stream may change), single-message
    requests, growing while matches still come, find the range's end. The request for
    the next batch is sent before the current one is yielded.
    """
    if first > last:
        return
    left = matching
    probe = 1  # once the count is used up: ask for 1 message, doubling while they still come

    def size(seq: int) -> int:
        nonlocal probe
        wanted = min(batch_size, last - seq + 1)
        if left is None:
            return wanted
        if left > 0:
            return min(wanted, left + 1)
        ask, probe = probe, probe * 2
        return min(wanted, ask)

    seq = first
    pending: asyncio.Future[tuple[Columns, BatchEnd]] | None = conn.request(
        stream, seq=seq, batch=size(seq), subject=subject
    )
    while pending is not None:
        columns, end = await conn.result(pending)
        pending = None
        if left is not None:
            left -= len(columns)
        if not end.not_found and end.last_seq is not None:
            if end.num_pending > 0 and end.last_seq < last:
                seq = end.last_seq + 1
                pending = conn.request(stream, seq=seq, batch=size(seq), subject=subject)
        if len(columns):
            yield columns


async def read_last_for(
    conn: DirectGetConnection,
    stream: str,
    subjects: list[str],
    *,
    up_to_seq: int,
    batch_size: int,
) -> AsyncIterator[Columns]:
    """Yield the last message of each of ``subjects`` (at most 1024, literal) stored up
    to sequence ``up_to_seq``, in pages of at most ``batch_size``, in sequence order."""
    seq: int | None = None
    while True:
        columns, end = await conn.result(
            conn.request_last_for(stream, subjects, up_to_seq=up_to_seq, batch=batch_size, seq=seq)
        )
        if len(columns):
            yield columns
        if end.not_found or not end.num_pending or end.last_seq is None:
            return
        seq = end.last_seq + 1
