"""Publishing to nsqd: over TCP (:class:`Producer`) and over HTTP (:class:`HTTPProducer`).

Theory of operation. TCP: one connection; every PUB, MPUB or DPUB gets exactly one
answer (``OK`` or an error frame), in order, so a FIFO of futures matches them;
many publishes may be in flight at once (pipelining). nsqd closes the connection
after an error (all publish errors are fatal); the publishes still waiting then fail
with :class:`NSQConnectError` (they may or may not have been applied) and the next
call connects again. HTTP: nsqd's ``/pub``, ``/mpub?binary=true`` and ``defer=``.
Input is checked before anything is sent: topic names, bytes bodies, sizes, empty
MPUB.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import io
import socket
import ssl
from collections.abc import Iterable
from types import TracebackType
from typing import Any

import aiohttp

from aioclients._core import check_float, check_int, redact_url
from aioclients._errors import InvalidArgumentError, LocalProtocolError, OperationTimeoutError
from aioclients.nsq._errors import NSQClosedError, NSQConnectError, NSQError
from aioclients.nsq._io._connection import NsqdConnection
from aioclients.nsq._io._lookupd import http_failure, read_body
from aioclients.nsq._protocol import _frames as F
from aioclients.nsq._protocol._connection import (
    ConnectionCore,
    MessageReceived,
    OversizedMessage,
)
from aioclients.nsq._protocol._lookup import lookupd_url, parse_address
from aioclients.nsq._reader import USER_AGENT, check_auth_secret, check_identity, heartbeat_ms

__all__ = ("HTTPProducer", "Producer")

#: The largest answer to a publish read from nsqd's HTTP API ("OK", a JSON error).
_MAX_HTTP_ANSWER = 64 * 1024


def _delay_ms(delay: object) -> int:
    return round(check_float("delay", delay, inclusive=True) * 1000)


class Producer:
    """Publish to one nsqd over TCP.

    Args:
        nsqd_tcp_address: ``"host:port"`` of nsqd's TCP listener.
        tls: ``True`` or an :class:`ssl.SSLContext` to upgrade to TLS after IDENTIFY.
        auth_secret: sent with AUTH when nsqd requires it.
        heartbeat_interval: nsqd's heartbeat interval, seconds (``None``: nsqd's default).
            nsqd accepts 1 s up to its ``--max-heartbeat-interval`` (60 s by default)
            and refuses other values with an :class:`NSQError` (``settings_refused``).
        max_message_size: largest body accepted before sending (nsqd's ``--max-msg-size``).
        connect_timeout: seconds for connecting and the handshake.
        timeout: seconds to wait for nsqd's answer to one publish.
        deflate: negotiate deflate compression.
        deflate_level: the deflate level to ask for.
        snappy: negotiate snappy compression.
        client_id: identification sent in IDENTIFY.
        hostname: identification sent in IDENTIFY.
        user_agent: identification sent in IDENTIFY.
    """

    def __init__(
        self,
        nsqd_tcp_address: str,
        *,
        tls: bool | ssl.SSLContext | None = None,
        auth_secret: str | bytes | None = None,
        heartbeat_interval: float | None = 30.0,
        max_message_size: int = 1024 * 1024,
        connect_timeout: float = 10.0,
        timeout: float = 30.0,
        deflate: bool = False,
        deflate_level: int = 6,
        snappy: bool = False,
        client_id: str | None = None,
        hostname: str | None = None,
        user_agent: str | None = None,
    ) -> None:
        host, port = parse_address(nsqd_tcp_address)
        self.address = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
        if tls is True:
            self._tls_context: ssl.SSLContext | None = ssl.create_default_context()
        elif isinstance(tls, ssl.SSLContext):
            self._tls_context = tls
        elif tls in (None, False):
            self._tls_context = None
        else:
            raise InvalidArgumentError("tls must be None, True or an ssl.SSLContext")
        if snappy and deflate:
            raise InvalidArgumentError("choose snappy or deflate, not both")
        self._auth_secret = check_auth_secret(auth_secret)
        self._max_message_size = check_int("max_message_size", max_message_size, minimum=1)
        self._connect_timeout = check_float("connect_timeout", connect_timeout)
        self._timeout = check_float("timeout", timeout)
        self._heartbeat_interval = (
            None
            if heartbeat_interval is None
            else check_float("heartbeat_interval", heartbeat_interval)
        )
        hb_ms = heartbeat_ms(self._heartbeat_interval)
        if check_int("deflate_level", deflate_level, minimum=1) > 9:
            raise InvalidArgumentError(f"deflate_level must be 1 to 9, got {deflate_level}")
        check_identity("user_agent", user_agent)
        check_identity("client_id", client_id)
        check_identity("hostname", hostname)
        identify: dict[str, Any] = {
            "client_id": client_id or socket.gethostname().split(".")[0],
            "hostname": hostname or socket.gethostname(),
            "user_agent": user_agent or USER_AGENT,
            "tls_v1": self._tls_context is not None,
            "snappy": bool(snappy),
            "deflate": bool(deflate),
            "deflate_level": deflate_level,
        }
        if hb_ms is not None:
            identify["heartbeat_interval"] = hb_ms
        self._identify = identify
        self._conn: NsqdConnection | None = None
        self._pending: collections.deque[asyncio.Future[None]] = collections.deque()
        self._lock: asyncio.Lock | None = None
        self._closed = False

    async def __aenter__(self) -> Producer:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the connection now (publishing does it on demand).

        Raises:
            NSQConnectError: nsqd unreachable, TLS refused, AUTH missing.
            NSQError: nsqd refused AUTH.
            NSQClosedError: the producer was closed.
        """
        await self._connection()

    async def _connection(self) -> NsqdConnection:
        if self._closed:
            raise NSQClosedError("this Producer is closed; create a new one")
        conn = self._conn
        if conn is not None and conn.loop is not asyncio.get_running_loop():
            # Its socket and lock belong to that loop (often closed by asyncio.run):
            # the publish would wait for an answer that never comes.
            raise LocalProtocolError(
                "this Producer connected on another event loop; make the Producer and "
                "use it on one loop (e.g. inside the coroutine that asyncio.run runs)"
            )
        if conn is not None and conn.usable:
            return conn
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            conn = self._conn
            if conn is not None and conn.usable:
                return conn
            if conn is not None:
                conn.abort()
            if self._closed:
                raise NSQClosedError("this Producer is closed; create a new one")
            core = ConnectionCore(
                identify=self._identify,
                auth_secret=self._auth_secret,
                tls=self._tls_context is not None,
                max_message_size=self._max_message_size,
                handshake_timeout=self._connect_timeout,
                heartbeat_interval=self._heartbeat_interval,
            )
            conn = NsqdConnection(self.address, core, self, tls_context=self._tls_context)
            await conn.open(self._connect_timeout)
            self._conn = conn
            return conn

    async def _send(self, command: bytes) -> None:
        conn = await self._connection()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        conn.core.publish(command)
        self._pending.append(fut)
        if len(self._pending) == 1:
            conn.flush()  # alone: no one to batch with, write now
        else:
            conn.schedule_flush()  # pipelined: one write per loop iteration
        timer = loop.call_later(self._timeout, self._on_timeout, conn, fut)
        try:
            if conn._paused:
                await conn.drain()
            await fut
        finally:
            timer.cancel()

    def _on_timeout(self, conn: NsqdConnection, fut: asyncio.Future[None]) -> None:
        if fut.done():
            return
        fut.set_exception(
            OperationTimeoutError(f"nsqd at {self.address} did not answer within {self._timeout}s")
        )
        conn.abort()  # later answers could no longer be matched; start over

    async def publish(self, topic: str, body: bytes) -> None:
        """Publish one message (PUB).

        Raises:
            InvalidArgumentError: invalid topic, body not bytes or too large.
            NSQError: nsqd refused it (``.code`` e.g. ``"E_BAD_MESSAGE"``).
            NSQConnectError: nsqd unreachable or the connection was lost (the message
                may or may not have been published).
            OperationTimeoutError: no answer within ``timeout``.
        """
        await self._send(F.encode_pub(topic, body, self._max_message_size))

    async def mpublish(self, topic: str, bodies: Iterable[bytes]) -> None:
        """Publish several messages atomically (MPUB).

        Raises:
            InvalidArgumentError: invalid topic, no bodies, a body not bytes or too large.
            NSQError, NSQConnectError, OperationTimeoutError: as :meth:`publish`.
        """
        await self._send(F.encode_mpub(topic, list(bodies), self._max_message_size))

    async def dpublish(self, topic: str, body: bytes, delay: float) -> None:
        """Publish one message that nsqd delivers after ``delay`` seconds (DPUB).

        Raises:
            InvalidArgumentError: invalid topic, body or delay.
            NSQError, NSQConnectError, OperationTimeoutError: as :meth:`publish`.
        """
        await self._send(F.encode_dpub(topic, _delay_ms(delay), body, self._max_message_size))

    async def close(self) -> None:
        """Close the connection; publishes still waiting fail with NSQClosedError."""
        if self._closed:
            return
        self._closed = True
        conn = self._conn
        if conn is not None and not conn.lost:
            await conn.close()
        self._fail_pending(NSQClosedError("the Producer was closed"))

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- connection callbacks ----------------------------------------------------------

    def _fail_pending(self, exc: BaseException) -> None:
        while self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(exc)

    def on_message(self, conn: NsqdConnection, event: MessageReceived, now: float) -> None:
        conn.abort()  # a publishing connection never subscribed

    def on_messages(self, conn: NsqdConnection, items: list[Any], now: float) -> None:
        conn.abort()  # never: a publisher's core makes no messages

    def on_oversized_message(
        self, conn: NsqdConnection, event: OversizedMessage, now: float
    ) -> None:
        conn.abort()

    def on_response(self, conn: NsqdConnection, data: bytes) -> None:
        if self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_result(None)

    def on_error(self, conn: NsqdConnection, error: NSQError) -> None:
        if self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(error)

    def on_lost(self, conn: NsqdConnection, exc: BaseException | None) -> None:
        if conn is self._conn:
            self._fail_pending(
                NSQConnectError(
                    f"connection to nsqd at {self.address} lost ({exc or 'closed by nsqd'}); "
                    "the message may or may not have been published"
                )
            )


class HTTPProducer:
    """Publish through nsqd's HTTP API (``/pub``, ``/mpub?binary=true``, ``defer``).

    Args:
        nsqd_http_address: ``"host:port"`` or ``"http://host:port"``.
        timeout: seconds for one request.
        max_message_size: largest body accepted before sending.
    """

    def __init__(
        self,
        nsqd_http_address: str,
        *,
        timeout: float = 30.0,
        max_message_size: int = 1024 * 1024,
    ) -> None:
        self.url = lookupd_url(nsqd_http_address)
        self._timeout = check_float("timeout", timeout)
        self._max_message_size = check_int("max_message_size", max_message_size, minimum=1)
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    async def __aenter__(self) -> HTTPProducer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _post(self, path: str, params: dict[str, str], body: bytes) -> None:
        if self._closed:
            raise NSQClosedError("this HTTPProducer is closed; create a new one")
        if self._session is None:
            self._session = aiohttp.ClientSession()
        url = f"{self.url}{path}"
        # aiohttp streams large bodies from a file-like object without warning
        data: bytes | io.BytesIO = io.BytesIO(body) if len(body) > 512 * 1024 else body
        try:
            async with self._session.post(
                url, params=params, data=data, timeout=aiohttp.ClientTimeout(total=self._timeout)
            ) as response:
                status = response.status
                # nsqd answers "OK" or a short JSON error: anything long is not nsqd
                text = await read_body(response, _MAX_HTTP_ANSWER, f"nsqd {redact_url(url)}")
        except asyncio.TimeoutError:
            raise OperationTimeoutError(
                f"nsqd {redact_url(url)} did not answer within {self._timeout}s"
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            if getattr(exc, "errno", None) == errno.ECONNREFUSED:
                raise NSQConnectError(
                    f"nsqd HTTP API at {redact_url(self.url)} unreachable (connection "
                    "refused): start nsqd with `aioclients-servers` or `nsqd`, or check "
                    "that this is its HTTP address"
                ) from None
            raise NSQConnectError(
                f"nsqd HTTP API at {redact_url(self.url)} unreachable: "
                f"{http_failure(exc, 'nsqd', 4151)}"
            ) from None
        if status == 200:
            return
        code = f"HTTP_{status}"
        with contextlib.suppress(ValueError, AttributeError):
            import json

            doc = json.loads(text)
            code = str(doc.get("message") or doc.get("status_txt") or code)
        raise NSQError(code, f"(HTTP {status} from {redact_url(url)})")

    async def publish(self, topic: str, body: bytes) -> None:
        """POST one message to ``/pub``.

        Raises:
            InvalidArgumentError: invalid topic, body not bytes or too large.
            NSQError: nsqd refused it (``.code`` is its message, e.g. ``"MSG_TOO_BIG"``).
            NSQConnectError: nsqd unreachable.
            OperationTimeoutError: no answer within ``timeout``.
        """
        data = F.encode_pub(topic, body, self._max_message_size)
        await self._post("/pub", {"topic": topic}, data[data.index(b"\n") + 5 :])

    async def mpublish(self, topic: str, bodies: Iterable[bytes]) -> None:
        """POST several messages to ``/mpub?binary=true`` (atomic).

        Raises:
            InvalidArgumentError: invalid topic, no bodies, a body not bytes or too large.
            NSQError, NSQConnectError, OperationTimeoutError: as :meth:`publish`.
        """
        F.check_topic(topic)
        payload = F.mpub_body(list(bodies), self._max_message_size)
        await self._post("/mpub", {"topic": topic, "binary": "true"}, payload)

    async def dpublish(self, topic: str, body: bytes, delay: float) -> None:
        """POST one message to ``/pub?defer=<ms>``.

        Raises:
            InvalidArgumentError: invalid topic, body or delay.
            NSQError, NSQConnectError, OperationTimeoutError: as :meth:`publish`.
        """
        ms = _delay_ms(delay)
        data = F.encode_pub(topic, body, self._max_message_size)
        await self._post("/pub", {"topic": topic, "defer": str(ms)}, data[data.index(b"\n") + 5 :])

    async def close(self) -> None:
        """Close the HTTP session."""
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None
