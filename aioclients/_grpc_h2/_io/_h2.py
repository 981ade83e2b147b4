"""gRPC calls over our own HTTP/2 connection: the asyncio driver of ``_grpc_h2``.

Theory of operation. :class:`Http2Channel` looks like a ``grpc.aio.Channel``
to the generated stub (``unary_unary``, ``unary_stream``, ``stream_stream``,
``close``) and its calls look like ``grpc.aio`` calls (``read()`` returning
``grpc.aio.EOF`` at the end, ``write``, ``done_writing``, ``cancel``, errors as
``grpc.aio.AioRpcError``), so a client's streaming code and its error
mapping serve both transports. Underneath, one asyncio
Protocol per connection feeds the pure :class:`H2Connection`; a socket read
becomes every message it completes, queued on its call, and a ``read()`` that
finds one queued returns without suspending. Writes are gathered and sent once
per event-loop turn, so pipelined requests share a syscall.

A channel opens its connection on the first call and opens a new one when the
old one broke or the server sent GOAWAY, as gRPC channels do. While calls are
open it sends a PING after ``keepalive_time`` without receiving anything (Go
gRPC servers take at most one PING per 5 minutes by
default and drop clients that ping more often) and drops the connection when no
answer comes within ``keepalive_timeout``: the calls end UNAVAILABLE, which a
client treats as a lost server.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import grpc
import grpc.aio

from aioclients._core import redact_text, redact_url
from aioclients._errors import AioClientsError
from aioclients._grpc_h2._protocol._http2 import (
    ConnectionTerminated,
    H2Connection,
    Messages,
    PingAcked,
    ResponseHeaders,
    StatusCode,
    StreamEnded,
)
from aioclients._tasks import wait_within

__all__ = ("Http2Channel",)

_DEFAULT_LOG = logging.getLogger("aioclients.grpc_h2")
DEFAULT_USER_AGENT = "aioclients-grpc-h2"

_CODES = {code.value[0]: code for code in grpc.StatusCode}
_WRITE_HIGH_WATER = 1 << 20  # queued outgoing bytes of one call before write() waits
_TOO_MANY_PINGS = "too_many_pings"
_CLOSE_TIMEOUT = 2.0  # seconds a close may take to write what is queued before the drop


def _rpc_error(code: int, details: str) -> grpc.aio.AioRpcError:
    status = _CODES.get(code, grpc.StatusCode.UNKNOWN)
    return grpc.aio.AioRpcError(
        status, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details, debug_error_string=None
    )


class _Protocol(asyncio.Protocol):
    def __init__(self, connection: _Connection) -> None:
        self._connection = connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Before create_connection() returns: the server's SETTINGS may follow at once.
        # cast, not isinstance: uvloop's transports are not asyncio.Transport subclasses
        self._connection.made(cast("asyncio.Transport", transport))

    def data_received(self, data: bytes) -> None:
        self._connection._data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection._lost(exc)

    def pause_writing(self) -> None:
        self._connection._pause_writing()

    def resume_writing(self) -> None:
        self._connection._resume_writing()


class _Connection:
    """One HTTP/2 connection: the socket, the pure core and the calls on it."""

    def __init__(
        self,
        channel: Http2Channel,
        authority: str,
        scheme: str,
        max_message_size: int,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._channel = channel
        self.h2 = H2Connection(
            authority=authority,
            scheme=scheme,
            max_message_size=max_message_size,
            user_agent=channel.user_agent,
        )
        self.transport: asyncio.Transport | None = None
        self.calls: dict[int, _Call] = {}
        self.dead = False
        self._paused = False
        self._flush_scheduled = False
        self._writers: list[asyncio.Future[None]] = []
        self._ping_timer: asyncio.TimerHandle | None = None
        self._ping_deadline: asyncio.TimerHandle | None = None
        self._ping_payload = b""
        self._last_received = self._loop.time()
        self._close_timer: asyncio.TimerHandle | None = None
        self._closed_waiter: asyncio.Future[None] = self._loop.create_future()

    # -- socket side ---------------------------------------------------------------

    def made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.h2.initiate()
        self.flush()

    def _data_received(self, data: bytes) -> None:
        self._last_received = self._loop.time()
        try:
            events = self.h2.receive(data)
        except AioClientsError as exc:
            self._channel.log.warning(
                "HTTP/2 connection to %s broken: %s", self._channel.shown, exc
            )
            self._fail_connection(f"protocol error from the server: {exc}")
            return
        calls = self.calls
        for event in events:
            if type(event) is Messages:
                call = calls.get(event.stream_id)
                if call is not None:
                    call._messages(event.messages)
            elif type(event) is StreamEnded:
                call = calls.pop(event.stream_id, None)
                if call is not None:
                    call._ended(event.status, event.message)
            elif type(event) is ResponseHeaders:
                pass
            elif type(event) is PingAcked:
                if event.payload == self._ping_payload and self._ping_deadline is not None:
                    self._ping_deadline.cancel()
                    self._ping_deadline = None
                    self._arm_keepalive()
            elif type(event) is ConnectionTerminated:
                self._channel.log.info(
                    "broker %s sent GOAWAY (code %d%s)",
                    self._channel.shown,
                    event.error_code,
                    f", {redact_text(event.debug)}" if event.debug else "",
                )
                if _TOO_MANY_PINGS in event.debug:
                    self._channel._keepalive_time *= 2
        if self.h2.has_output():
            # Later in this turn of the loop, after the calls this read woke: a
            # PING or SETTINGS ACK then leaves with the next request in one write
            # (a Go server PINGs with every request it reads, to size its windows).
            self.schedule_flush()
        if self._writers:
            # A WINDOW_UPDATE or SETTINGS may have released queued request data.
            self._wake_writers()
        if self.h2.goaway is not None and not self.calls:
            self.close()

    def _lost(self, exc: Exception | None) -> None:
        self.dead = True
        self._cancel_timers()
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None
        reason = f"the connection to {self._channel.shown} was lost"
        if exc is not None:
            reason += f": {redact_text(str(exc))}"
        for event in self.h2.connection_lost(reason):
            call = self.calls.pop(event.stream_id, None)
            if call is not None:
                call._ended(event.status, event.message)
        for call in list(self.calls.values()):
            call._ended(StatusCode.UNAVAILABLE, reason)
        self.calls.clear()
        self._wake_writers()
        if not self._closed_waiter.done():
            self._closed_waiter.set_result(None)

    def _end_calls(self, reason: str) -> None:
        self.dead = True
        for call in list(self.calls.values()):
            call._ended(StatusCode.UNAVAILABLE, reason)
        self.calls.clear()

    def _abort(self, reason: str) -> None:
        self._end_calls(reason)
        if self.transport is not None:
            self.transport.abort()

    def _fail_connection(self, reason: str) -> None:
        """The server broke HTTP/2: fail the calls, send the core's GOAWAY, close (bounded)."""
        self._end_calls(reason)
        self._cancel_timers()
        self.flush(force=True)
        self._close_transport()

    # -- writing -------------------------------------------------------------------

    def flush(self, force: bool = False) -> None:
        """Write what the core has queued; while the transport is paused it stays in
        the core (which caps what may pile up there), unless ``force`` (closing)."""
        self._flush_scheduled = False
        if self._paused and not force:
            return
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def _pause_writing(self) -> None:
        self._paused = True
        self.h2.set_output_paused(True)

    def _resume_writing(self) -> None:
        self._paused = False
        self.h2.set_output_paused(False)
        self.flush()
        self._wake_writers()

    def _wake_writers(self) -> None:
        writers, self._writers = self._writers, []
        for fut in writers:
            if not fut.done():
                fut.set_result(None)

    async def wait_writable(self) -> None:
        fut = self._loop.create_future()
        self._writers.append(fut)
        await fut

    # -- calls ---------------------------------------------------------------------

    def start(
        self, call: _Call, path: str, timeout: float | None, metadata: tuple[tuple[str, str], ...]
    ) -> int:
        stream_id = self.h2.start_request(path, timeout=timeout, metadata=metadata)
        self.calls[stream_id] = call
        self._arm_keepalive()
        return stream_id

    def finished(self) -> None:
        """A call left: close the connection if it is idle and no longer in use
        (the server is going away, or the channel moved on to another one)."""
        if not self.calls:
            self._cancel_timers()
            if self.h2.goaway is not None or self._channel._conn is not self:
                self.close()

    # -- keepalive -----------------------------------------------------------------

    def _arm_keepalive(self) -> None:
        if self._ping_timer is not None or self._ping_deadline is not None or self.dead:
            return
        self._ping_timer = self._loop.call_later(self._channel._keepalive_time, self._send_ping)

    def _send_ping(self) -> None:
        self._ping_timer = None
        if self.dead or not self.calls:
            return
        # gRPC keepalive: ping only a connection that has been silent that long
        # (servers count pings while data flows as abuse).
        quiet = self._loop.time() - self._last_received
        if quiet < self._channel._keepalive_time:
            self._ping_timer = self._loop.call_later(
                self._channel._keepalive_time - quiet, self._send_ping
            )
            return
        self._ping_payload = os.urandom(8)
        self.h2.ping(self._ping_payload)
        self.flush()
        self._ping_deadline = self._loop.call_later(
            self._channel._keepalive_timeout, self._ping_timed_out
        )

    def _ping_timed_out(self) -> None:
        self._ping_deadline = None
        self._channel.log.warning(
            "broker %s did not answer a keepalive PING within %.1fs; dropping the connection",
            self._channel.shown,
            self._channel._keepalive_timeout,
        )
        self._abort("keepalive watchdog timeout")

    def _cancel_timers(self) -> None:
        for timer in (self._ping_timer, self._ping_deadline):
            if timer is not None:
                timer.cancel()
        self._ping_timer = self._ping_deadline = None

    def close(self) -> None:
        if self.dead:
            return
        self.dead = True
        self._cancel_timers()
        self.h2.close()
        self.flush(force=True)
        self._close_transport()

    def _close_transport(self) -> None:
        """Close the socket after what is queued is written, within ``_CLOSE_TIMEOUT``.

        One path for plaintext and TLS: a server that stopped reading keeps
        the queued bytes (and a plain ``close()``) waiting forever, and a TLS
        close also waits for the server's close_notify, which gRPC servers do
        not send (asyncio gives up only after 30 s). So the socket is dropped
        once the timer fires; with nothing left to write, a TLS socket is
        dropped at once.
        """
        transport = self.transport
        if transport is None or self._close_timer is not None:
            return
        if transport.get_write_buffer_size() == 0 and transport.get_extra_info("ssl_object"):
            transport.abort()
            return
        transport.close()
        self._close_timer = self._loop.call_later(_CLOSE_TIMEOUT, transport.abort)

    async def wait_closed(self) -> None:
        await self._closed_waiter


class _Readable:
    """``async for`` over ``read()`` until ``grpc.aio.EOF``."""

    async def read(self) -> Any:
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        while True:
            msg = await self.read()
            if msg is grpc.aio.EOF:
                return
            yield msg


class _Call(_Readable):
    """One gRPC call on an :class:`Http2Channel` (the grpc.aio call surface we use)."""

    def __init__(
        self,
        channel: Http2Channel,
        path: str,
        serializer: Callable[[Any], bytes] | None,
        deserializer: Callable[[bytes], Any] | None,
        timeout: float | None,
        metadata: tuple[tuple[str, str], ...],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._channel = channel
        self._path = path
        self._serialize = serializer or _identity
        self._deserialize = deserializer or _identity
        self._deadline_at = None if timeout is None else self._loop.time() + timeout
        self._metadata = metadata
        self._conn: _Connection | None = None
        self._stream_id = 0
        self._queue: collections.deque[bytes] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._starting: asyncio.Future[None] | None = None
        self._status: tuple[int, str] | None = None
        self._cancelled = False
        self._done_writing = False
        self._deadline: asyncio.TimerHandle | None = None
        self._end_waiters: list[asyncio.Future[None]] = []  # code() / details()

    # -- opening -------------------------------------------------------------------

    async def _ensure_started(self) -> None:
        """Open the stream; returns once it is open or the call has ended."""
        while self._conn is None and self._status is None:
            starting = self._starting
            if starting is not None:
                # Another task is opening it; if that task is cancelled, the
                # loop lets this one try.
                await asyncio.wait((starting,))
                continue
            starting = self._starting = self._loop.create_future()
            try:
                # The deadline counts from the call's creation, connecting included.
                deadline = self._deadline_at
                remaining = None if deadline is None else deadline - self._loop.time()
                ready = self._channel._open_connection()
                if ready is not None and (remaining is None or remaining > 0):
                    # The channel's connection is up: what _connection() would
                    # return at once, without wait_for's task, timer and turns
                    # of the loop (most of a unary call's overhead).
                    conn = ready
                elif deadline is None:
                    conn = await self._channel._connection()
                else:
                    try:
                        conn = await wait_within(self._channel._connection(), remaining)
                    except asyncio.TimeoutError:
                        self._set_status(StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
                        continue
                    remaining = deadline - self._loop.time()
                if self._status is None:  # not cancelled meanwhile
                    self._stream_id = conn.start(self, self._path, remaining, self._metadata)
                    self._conn = conn
                    if remaining is not None:
                        self._deadline = self._loop.call_later(remaining, self._expired)
            except grpc.aio.AioRpcError as exc:
                self._set_status(exc.code().value[0], exc.details() or "")
            except AioClientsError as exc:
                self._set_status(StatusCode.UNAVAILABLE, str(exc))
            finally:
                self._starting = None
                starting.set_result(None)

    def _expired(self) -> None:
        self._deadline = None
        if self._status is None:
            self._reset()
            self._set_status(StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")

    # -- events from the connection ------------------------------------------------

    def _messages(self, messages: list[bytes]) -> None:
        self._queue.extend(messages)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _ended(self, status: int, message: str) -> None:
        self._set_status(status, message)

    def _set_status(self, status: int, message: str) -> None:
        if self._status is not None:
            return
        self._status = (status, message)
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)
        for fut in self._end_waiters:
            if not fut.done():
                fut.set_result(None)
        self._end_waiters.clear()
        conn = self._conn
        if conn is not None:
            conn.calls.pop(self._stream_id, None)
            conn.finished()
            conn._wake_writers()

    def _reset(self) -> None:
        conn = self._conn
        if conn is not None and not conn.dead and self._stream_id in conn.calls:
            conn.h2.reset_stream(self._stream_id)
            conn.schedule_flush()

    def _raise_status(self) -> Any:
        assert self._status is not None
        if self._cancelled:
            raise asyncio.CancelledError()
        code, message = self._status
        if code == StatusCode.OK:
            return grpc.aio.EOF
        raise _rpc_error(code, message)

    # -- the grpc.aio call surface ---------------------------------------------------

    async def read(self) -> Any:
        """The next response message, or ``grpc.aio.EOF`` after a clean end."""
        while True:
            queue = self._queue
            if queue:
                payload = queue.popleft()
                conn = self._conn
                if conn is not None and self._status is None:
                    conn.h2.consumed(self._stream_id, len(payload) + 5)
                    if conn.h2.has_output():
                        conn.schedule_flush()
                return self._deserialize(payload)
            if self._status is not None:
                return self._raise_status()
            if self._conn is None:
                await self._ensure_started()
                continue
            waiter = self._loop.create_future()
            self._waiter = waiter
            try:
                await waiter
            except asyncio.CancelledError:
                if self._waiter is waiter:
                    self._waiter = None
                raise

    async def write(self, request: Any) -> None:
        """Send one request message (stream-stream calls).

        Waits first while the socket is backed up or the server's window holds
        too much of this call back, then queues the message: a write cancelled
        while it waits (a caller's deadline) has queued nothing.
        """
        await self._write(request, False)

    async def write_last(self, request: Any) -> None:
        """:meth:`write` and :meth:`done_writing` at once: the request's last
        DATA frame ends the stream (a unary request is one frame, not two)."""
        await self._write(request, True)

    async def _write(self, request: Any, last: bool) -> None:
        if self._done_writing:
            raise grpc.aio.UsageError("write() after done_writing()")
        if self._conn is None:
            await self._ensure_started()
        conn = self._conn
        while (
            self._status is None
            and conn is not None
            and not conn.dead
            and (conn._paused or conn.h2.blocked_bytes(self._stream_id) > _WRITE_HIGH_WATER)
        ):
            await conn.wait_writable()
        if self._status is not None:
            self._raise_status()
        assert conn is not None
        payload = self._serialize(request)
        if last:
            self._done_writing = True
        conn.h2.send_message(self._stream_id, payload, end_stream=last)
        conn.schedule_flush()

    def write_nowait(self, request: Any) -> bool:
        """Queue a request without waiting; False when the caller should ``await write``."""
        conn = self._conn
        if conn is None or self._status is not None or self._done_writing:
            return False
        if conn._paused or conn.h2.blocked_bytes(self._stream_id) > _WRITE_HIGH_WATER:
            return False
        conn.h2.send_message(self._stream_id, self._serialize(request))
        conn.schedule_flush()
        return True

    async def done_writing(self) -> None:
        """Half-close the call: no more requests."""
        if self._done_writing:
            return
        if self._conn is None:
            await self._ensure_started()
        self._done_writing = True
        if self._status is not None:
            return
        conn = self._conn
        assert conn is not None
        conn.h2.end_stream(self._stream_id)
        conn.schedule_flush()

    def cancel(self) -> bool:
        """Cancel the call (RST_STREAM); False if it had ended already."""
        if self._status is not None:
            return False
        self._cancelled = True
        self._reset()
        self._queue.clear()  # read() raises CancelledError from now on, as grpc.aio's does
        self._set_status(StatusCode.CANCELLED, "Locally cancelled by application!")
        return True

    def done(self) -> bool:
        return self._status is not None

    def cancelled(self) -> bool:
        return self._cancelled

    async def code(self) -> grpc.StatusCode:
        while self._status is None:
            await self._wait_end()
        return _CODES.get(self._status[0], grpc.StatusCode.UNKNOWN)

    async def details(self) -> str:
        while self._status is None:
            await self._wait_end()
        return self._status[1]

    async def _wait_end(self) -> None:
        if self._conn is None:
            await self._ensure_started()
            return
        waiter = self._loop.create_future()
        self._end_waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._end_waiters:
                self._end_waiters.remove(waiter)


class _UnaryCall:
    """A unary-response call: awaitable for its one message."""

    def __init__(self, call: _Call, request: Any) -> None:
        self._call = call
        self._request = request

    def __await__(self) -> Any:
        return self._run().__await__()

    async def _run(self) -> Any:
        call = self._call
        try:
            await call.write_last(self._request)
            response = await call.read()
            if response is grpc.aio.EOF:
                raise _rpc_error(StatusCode.UNIMPLEMENTED, "the server sent no response message")
            end = await call.read()
            if end is not grpc.aio.EOF:
                raise _rpc_error(StatusCode.UNIMPLEMENTED, "the server sent two responses")
            return response
        except BaseException:
            call.cancel()
            raise

    def cancel(self) -> bool:
        return self._call.cancel()


def _identity(x: Any) -> Any:
    return x


class Http2Channel:
    """A gRPC channel to one broker over our own HTTP/2 code (see the module doc).

    Args:
        address: ``host:port`` of the broker.
        ssl_context: TLS when given; it must offer ALPN ``h2``.
        server_hostname: the name to check the broker's certificate against.
        connect_timeout: seconds to open the TCP (and TLS) connection.
        keepalive_time: seconds of silence, while calls are open, before a PING.
        keepalive_timeout: seconds to wait for a PING's answer.
        max_message_size: largest response message accepted.
        user_agent: the ``user-agent`` of the requests.
        logger: where the connection logs (the client's own logger).
    """

    def __init__(
        self,
        address: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connect_timeout: float = 10.0,
        keepalive_time: float = 330.0,
        keepalive_timeout: float = 10.0,
        max_message_size: int = 64 * 1024 * 1024,
        user_agent: str = DEFAULT_USER_AGENT,
        logger: logging.Logger = _DEFAULT_LOG,
    ) -> None:
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"broker address must be host:port, got {redact_url(address)!r}")
        self.address = address
        self.shown = redact_url(address)  # what messages and logs may print
        self._host = host.strip("[]")
        self._port = int(port)
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self._connect_timeout = connect_timeout
        self._keepalive_time = keepalive_time
        self._keepalive_timeout = keepalive_timeout
        self._max_message_size = max_message_size
        self.user_agent = user_agent
        self.log = logger
        self._conn: _Connection | None = None
        self._connecting: asyncio.Future[_Connection] | None = None
        self._old: set[_Connection] = set()
        self._closed = False

    # -- the grpc.aio.Channel surface the generated stub uses ------------------------

    def _call(
        self,
        method: str,
        serializer: Callable[[Any], bytes] | None,
        deserializer: Callable[[bytes], Any] | None,
        timeout: float | None,
        metadata: Any,
    ) -> _Call:
        return _Call(self, method, serializer, deserializer, timeout, _metadata(metadata))

    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        **_: Any,
    ) -> Callable[..., _UnaryCall]:
        def call(
            request: Any, *, timeout: float | None = None, metadata: Any = None, **_: Any
        ) -> _UnaryCall:
            c = self._call(method, request_serializer, response_deserializer, timeout, metadata)
            return _UnaryCall(c, request)

        return call

    def unary_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        **_: Any,
    ) -> Callable[..., _ServerStreamCall]:
        def call(
            request: Any, *, timeout: float | None = None, metadata: Any = None, **_: Any
        ) -> _ServerStreamCall:
            c = self._call(method, request_serializer, response_deserializer, timeout, metadata)
            return _ServerStreamCall(c, request)

        return call

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        def call(*a: Any, **k: Any) -> Any:
            raise NotImplementedError("client-streaming calls are not implemented")

        return call

    def stream_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        **_: Any,
    ) -> Callable[..., _Call]:
        def call(*, timeout: float | None = None, metadata: Any = None, **_: Any) -> _Call:
            return self._call(method, request_serializer, response_deserializer, timeout, metadata)

        return call

    async def close(self, grace: float | None = None) -> None:
        """Close the connection; open calls end CANCELLED."""
        self._closed = True
        conns = set(self._old)
        if self._conn is not None:
            conns.add(self._conn)
        self._conn = None
        for conn in conns:
            for call in list(conn.calls.values()):
                call.cancel()
            conn.close()
        for conn in conns:
            if conn.transport is not None:
                await conn.wait_closed()

    # -- connections ------------------------------------------------------------------

    def _open_connection(self) -> _Connection | None:
        """The connection a new call can use now, if there is one (no waiting)."""
        conn = self._conn
        if self._closed or conn is None or conn.dead or not conn.h2.can_start_stream():
            return None
        return conn

    async def _connection(self) -> _Connection:
        while True:
            if self._closed:
                raise _rpc_error(StatusCode.CANCELLED, "the channel is closed")
            ready = self._open_connection()
            if ready is not None:
                return ready
            conn = self._conn
            if conn is not None:
                self._conn = None
                if not conn.dead:
                    self._old.add(conn)  # going away: its calls may still finish
            pending = self._connecting
            if pending is None:
                break
            # Another call is connecting. asyncio.wait: only our own
            # cancellation raises here, not that of the task connecting.
            await asyncio.wait((pending,))
            if not pending.cancelled():
                return pending.result()  # or the error it failed with
        connecting = self._connecting = asyncio.get_running_loop().create_future()
        try:
            conn = await self._open()
        except asyncio.CancelledError:
            connecting.cancel()  # the waiters try for themselves
            raise
        except BaseException as exc:
            connecting.set_exception(exc)
            connecting.exception()  # retrieved: no "never retrieved" warning without waiters
            raise
        finally:
            self._connecting = None
        if self._closed:  # closed while connecting
            conn.close()
            exc = _rpc_error(StatusCode.CANCELLED, "the channel is closed")
            connecting.set_exception(exc)
            connecting.exception()
            raise exc
        self._conn = conn
        connecting.set_result(conn)
        return conn

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        scheme = "https" if self._ssl is not None else "http"
        conn = _Connection(self, self.address, scheme, self._max_message_size)
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Protocol(conn),
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=(self._server_hostname or self._host) if self._ssl else None,
                ),
                self._connect_timeout,
            )
        except asyncio.TimeoutError:
            raise _rpc_error(
                StatusCode.UNAVAILABLE,
                f"failed to connect to {self.shown}: no answer in {self._connect_timeout}s",
            ) from None
        except ssl.SSLError as exc:
            raise _rpc_error(
                StatusCode.UNAVAILABLE,
                f"TLS handshake with {self.shown} failed: {redact_text(str(exc))}",
            ) from None
        except OSError as exc:
            raise _rpc_error(
                StatusCode.UNAVAILABLE,
                f"failed to connect to {self.shown}: {redact_text(str(exc.strerror or exc))}",
            ) from None
        if self._ssl is not None:
            ssl_object = transport.get_extra_info("ssl_object")
            if ssl_object is None or ssl_object.selected_alpn_protocol() != "h2":
                transport.abort()
                raise _rpc_error(
                    StatusCode.UNAVAILABLE,
                    f"{self.shown} did not agree to HTTP/2 (ALPN h2) over TLS",
                )
        self._old = {c for c in self._old if not c.dead}
        return conn


class _ServerStreamCall(_Readable):
    """A unary-request, streaming-response call."""

    def __init__(self, call: _Call, request: Any) -> None:
        self._call = call
        self._request = request
        self._sent = False

    async def _send(self) -> None:
        self._sent = True
        try:
            await self._call.write_last(self._request)
        except grpc.aio.AioRpcError:
            pass  # read() reports the call's status
        except asyncio.CancelledError:
            self._call.cancel()
            raise

    async def read(self) -> Any:
        if not self._sent:
            await self._send()
        return await self._call.read()

    def cancel(self) -> bool:
        return self._call.cancel()

    def done(self) -> bool:
        return self._call.done()

    def cancelled(self) -> bool:
        return self._call.cancelled()

    async def code(self) -> grpc.StatusCode:
        if not self._sent:
            await self._send()
        return await self._call.code()

    async def details(self) -> str:
        if not self._sent:
            await self._send()
        return await self._call.details()


def _metadata(metadata: Any) -> tuple[tuple[str, str], ...]:
    if not metadata:
        return ()
    return tuple((str(k), str(v)) for k, v in metadata)
