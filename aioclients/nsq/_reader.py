"""The NSQ consumer: connections, discovery, RDY, backoff, iteration and handlers.

Theory of operation (client library guide, every section): the Reader owns one
:class:`NsqdConnection` per nsqd (given directly or discovered through nsqlookupd)
and one pure :class:`RdyDistributor`. Each connection's core makes the
:class:`Message` of every frame as it decodes it (``make_message``), and the
connection hands the Reader one read's worth at once (``on_messages``): counted,
told to the distributor in one call, appended to a deque (bounded by RDY, so by
``max_in_flight``), and the one waiting consumer woken. A message delivered more than
``max_attempts`` times comes alone (``on_message``) and is given up on. The
message answers (FIN, REQ, TOUCH) through the Reader's :class:`ReaderResponder`
(``_responder.py``), which writes into the connection's buffer, flushed once per
loop iteration, and tells the distributor. The distributor's RDY decisions are
applied as they are returned; its deadline (backoff window, RDY rotation) is one
``loop.call_at`` handle.

Reconnection: an nsqd given in ``nsqd_tcp_addresses`` is retried with exponential
backoff (``reconnect_delay`` doubling up to ``max_reconnect_delay``, jittered); an
nsqd found through nsqlookupd is reconnected only when a later poll finds it again.

Bounds: nsqd may hold at most RDY messages in flight on a connection; one that
sends more is closed (a protocol error, then the usual reconnect), and the queued
messages of a lost connection are dropped (nsqd re-delivers them), so the queue
never holds more than the RDY given to live connections.

Tasks: the reconnect loops, the nsqlookupd poll loop, connects to discovered
nsqd and awaited ``on_give_up`` results belong to one :class:`TaskOwner`. One
that fails with an error it cannot retry ends the iteration with that error
(:meth:`Reader.__anext__` raises it); closing cancels and awaits them all.

Closing: CLS on every connection, wait for CLOSE_WAIT, close. Messages received but
not answered (still queued, or held by the application) are neither finished nor
requeued: nsqd re-delivers them when their msg_timeout expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import random
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, NamedTuple

import aiohttp

from aioclients._core import Backoff, check_float, check_int, redact_text, redact_url
from aioclients._errors import (
    ConnectError,
    InvalidArgumentError,
    RemoteProtocolError,
    ServerError,
)
from aioclients._tasks import TaskOwner
from aioclients._version import __version__
from aioclients.nsq._errors import NSQClosedError, NSQConnectError, NSQError
from aioclients.nsq._io._connection import NsqdConnection
from aioclients.nsq._io._lookupd import query_lookupd
from aioclients.nsq._message import Message, new_message, new_messages
from aioclients.nsq._protocol._connection import (
    ConnectionCore,
    MessageReceived,
    OversizedMessage,
)
from aioclients.nsq._protocol._frames import check_channel, check_topic
from aioclients.nsq._protocol._lookup import lookupd_url, parse_address, poll_delay
from aioclients.nsq._protocol._rdy import RdyDistributor, RdyUpdate
from aioclients.nsq._responder import ReaderResponder

__all__ = ("ConnectionStatistics", "Reader", "ReaderStatistics")

log = logging.getLogger("aioclients.nsq.reader")

USER_AGENT = f"aioclients/{__version__}"
# What a reconnect or discovery loop logs and retries: an nsqd or nsqlookupd that is
# down, slow, refusing or talking nonsense. Anything else is a bug or a setting that
# cannot work; it ends the Reader's iteration instead (see Reader._fail).
_TRANSIENT_ERRORS = (ConnectError, ServerError, RemoteProtocolError, OSError, TimeoutError)


def _settings_refused(exc: BaseException) -> bool:
    """nsqd refused our IDENTIFY (e.g. heartbeat_interval below its 1 s minimum): a
    setting that cannot work with this nsqd, so retrying would only repeat it."""
    return isinstance(exc, NSQError) and exc.settings_refused


class ConnectionStatistics(NamedTuple):
    """One nsqd connection of a Reader."""

    address: str
    rdy: int
    in_flight: int
    max_rdy_count: int
    messages_received: int
    messages_finished: int
    messages_requeued: int


class ReaderStatistics(NamedTuple):
    """A snapshot of a Reader (see :meth:`Reader.statistics`)."""

    connections: tuple[ConnectionStatistics, ...]
    max_in_flight: int
    total_rdy: int
    in_flight: int
    buffered: int
    messages_received: int
    messages_finished: int
    messages_requeued: int
    messages_given_up: int
    backoff_level: int
    in_backoff: bool


def _positive(name: str, value: object, *, allow_zero: bool = False) -> float:
    return check_float(name, value, minimum=0.0, inclusive=allow_zero)


def check_auth_secret(value: object) -> str | bytes | None:
    """``auth_secret`` is None, or a non-empty str or bytes (never shown in the error)."""
    if value is None:
        return None
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if not isinstance(value, (str, bytes)):
        raise InvalidArgumentError(
            f"auth_secret must be a str or bytes, got a {type(value).__name__}"
        )
    if not value:
        raise InvalidArgumentError("auth_secret is empty: pass the secret, or None for no AUTH")
    return value


def check_identity(name: str, value: object) -> str | None:
    """``client_id``, ``hostname``, ``user_agent``: None or a string."""
    if value is not None and not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a str or None, got {type(value).__name__}")
    return value


def heartbeat_ms(value: object) -> int | None:
    """The IDENTIFY ``heartbeat_interval`` (ms) for ``heartbeat_interval`` seconds."""
    if value is None:
        return None
    return max(1, round(check_float("heartbeat_interval", value) * 1000))


class Reader:
    """Consume ``topic`` on ``channel`` from every nsqd that has it.

    Args:
        topic: a name of ``[.a-zA-Z0-9_-]`` (1-64 characters, optionally ending in
            ``#ephemeral``).
        channel: a name of the same form.
        nsqd_tcp_addresses: nsqd to connect to directly, ``"host:port"``.
        lookupd_http_addresses: nsqlookupd to poll, ``"http://host:port"`` or ``"host:port"``.
        max_in_flight: messages held at once across all connections.
        max_attempts: a message delivered more often than this is finished and handed
            to ``on_give_up`` instead of the application (0: no limit).
        requeue_delay: default REQ delay per attempt, seconds.
        max_requeue_delay: cap on the default REQ delay, seconds.
        max_backoff_duration: cap on a backoff window, seconds (0 disables backoff).
        lookupd_poll_interval: seconds between nsqlookupd polls.
        lookupd_poll_jitter: share of the interval added at random to each poll (0-1).
        low_rdy_idle_timeout: when RDY is scarcer than connections, seconds without a
            message after which a connection's RDY moves elsewhere.
        heartbeat_interval: nsqd's heartbeat interval, seconds (``None``: nsqd's default).
            nsqd accepts 1 s up to its ``--max-heartbeat-interval`` (60 s by default)
            and refuses other values with an :class:`NSQError` (``settings_refused``).
        msg_timeout: nsqd's in-flight timeout for this client, seconds.
        tls: ``True`` or an :class:`ssl.SSLContext` to upgrade to TLS after IDENTIFY.
        snappy: negotiate snappy compression.
        deflate: negotiate deflate compression.
        deflate_level: the deflate level to ask for.
        sample_rate: percentage of messages nsqd delivers (0: all).
        auth_secret: sent with AUTH when nsqd requires it.
        user_agent: identification sent in IDENTIFY.
        client_id: identification sent in IDENTIFY.
        hostname: identification sent in IDENTIFY.
        output_buffer_size: nsqd's buffering toward us, bytes.
        output_buffer_timeout: nsqd's buffering toward us, seconds.
        on_give_up: called with each message the Reader finishes without handing it
            to the application (may be a coroutine function): one delivered more than
            ``max_attempts`` times, or one whose body is above ``max_message_size``
            (then ``body`` is empty and ``body_size`` the real size);
            ``message.give_up_reason`` says which. By default the message is logged.
        reconnect_delay: first backoff delay for direct nsqd reconnects, seconds.
        max_reconnect_delay: cap on that backoff, seconds.
        backoff_multiplier: length of the first backoff window, seconds.
        max_message_size: largest message body accepted (nsqd's ``--max-msg-size``); a
            larger message is read past without being held, finished, logged and
            handed to ``on_give_up``; the connection stays.
        connect_timeout: seconds for connecting and the handshake.
        close_timeout: seconds to wait for CLOSE_WAIT in :meth:`close`.
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        *,
        nsqd_tcp_addresses: Iterable[str] = (),
        lookupd_http_addresses: Iterable[str] = (),
        max_in_flight: int = 1,
        max_attempts: int = 5,
        requeue_delay: float = 90.0,
        max_requeue_delay: float = 900.0,
        max_backoff_duration: float = 128.0,
        lookupd_poll_interval: float = 60.0,
        lookupd_poll_jitter: float = 0.3,
        low_rdy_idle_timeout: float = 10.0,
        heartbeat_interval: float | None = 30.0,
        msg_timeout: float | None = None,
        tls: bool | ssl.SSLContext | None = None,
        snappy: bool = False,
        deflate: bool = False,
        deflate_level: int = 6,
        sample_rate: int = 0,
        auth_secret: str | bytes | None = None,
        user_agent: str | None = None,
        client_id: str | None = None,
        hostname: str | None = None,
        output_buffer_size: int | None = None,
        output_buffer_timeout: float | None = None,
        on_give_up: Callable[[Message], object] | None = None,
        reconnect_delay: float = 8.0,
        max_reconnect_delay: float = 128.0,
        backoff_multiplier: float = 1.0,
        max_message_size: int = 1024 * 1024,
        connect_timeout: float = 10.0,
        close_timeout: float = 5.0,
    ) -> None:
        check_topic(topic)
        check_channel(channel)
        self.topic = topic
        self.channel = channel
        if isinstance(nsqd_tcp_addresses, str) or isinstance(lookupd_http_addresses, str):
            raise InvalidArgumentError("pass addresses as a list of strings, not one string")
        self._direct = [
            f"{h}:{p}" if ":" not in h else f"[{h}]:{p}"
            for h, p in map(parse_address, nsqd_tcp_addresses)
        ]
        self._lookupds = [lookupd_url(a) for a in lookupd_http_addresses]
        if not self._direct and not self._lookupds:
            raise InvalidArgumentError(
                "give nsqd_tcp_addresses or lookupd_http_addresses (or both)"
            )
        self._max_in_flight = check_int("max_in_flight", max_in_flight, minimum=0)
        self._max_attempts = check_int("max_attempts", max_attempts, minimum=0)
        if self._max_attempts > 65535:
            raise InvalidArgumentError("max_attempts must be <= 65535 (nsqd counts in 16 bits)")
        self._requeue_delay = _positive("requeue_delay", requeue_delay, allow_zero=True)
        self._max_requeue_delay = _positive("max_requeue_delay", max_requeue_delay, allow_zero=True)
        self._max_backoff = _positive("max_backoff_duration", max_backoff_duration, allow_zero=True)
        self._poll_interval = _positive("lookupd_poll_interval", lookupd_poll_interval)
        jitter = _positive("lookupd_poll_jitter", lookupd_poll_jitter, allow_zero=True)
        if jitter > 1:
            raise InvalidArgumentError("lookupd_poll_jitter must be between 0 and 1")
        self._poll_jitter = jitter
        self._low_rdy_idle = _positive("low_rdy_idle_timeout", low_rdy_idle_timeout)
        self._reconnect = (
            _positive("reconnect_delay", reconnect_delay),
            _positive("max_reconnect_delay", max_reconnect_delay),
        )
        self._backoff_multiplier = _positive("backoff_multiplier", backoff_multiplier)
        self._max_message_size = check_int("max_message_size", max_message_size, minimum=1)
        self._connect_timeout = _positive("connect_timeout", connect_timeout)
        self._close_timeout = _positive("close_timeout", close_timeout, allow_zero=True)
        if check_int("deflate_level", deflate_level, minimum=1) > 9:
            raise InvalidArgumentError(f"deflate_level must be 1 to 9, got {deflate_level}")
        if check_int("sample_rate", sample_rate, minimum=0) > 99:
            raise InvalidArgumentError(f"sample_rate must be 0 to 99 (percent), got {sample_rate}")
        if output_buffer_size is not None:
            check_int("output_buffer_size", output_buffer_size, minimum=-1)
        check_identity("user_agent", user_agent)
        check_identity("client_id", client_id)
        check_identity("hostname", hostname)
        if on_give_up is not None and not callable(on_give_up):
            raise InvalidArgumentError("on_give_up must be a callable taking a Message")
        if snappy and deflate:
            raise InvalidArgumentError("choose snappy or deflate, not both (nsqd refuses both)")
        self._tls_context: ssl.SSLContext | None
        if tls is True:
            self._tls_context = ssl.create_default_context()
        elif isinstance(tls, ssl.SSLContext):
            self._tls_context = tls
        elif tls in (None, False):
            self._tls_context = None
        else:
            raise InvalidArgumentError("tls must be None, True or an ssl.SSLContext")
        self._auth_secret = check_auth_secret(auth_secret)
        self._heartbeat_interval = (
            None
            if heartbeat_interval is None
            else _positive("heartbeat_interval", heartbeat_interval)
        )
        identify: dict[str, Any] = {
            "client_id": client_id or socket.gethostname().split(".")[0],
            "hostname": hostname or socket.gethostname(),
            "user_agent": user_agent or USER_AGENT,
            "tls_v1": self._tls_context is not None,
            "snappy": bool(snappy),
            "deflate": bool(deflate),
            "deflate_level": deflate_level,
            "sample_rate": sample_rate,
        }
        if self._heartbeat_interval is not None:
            identify["heartbeat_interval"] = heartbeat_ms(self._heartbeat_interval)
        if msg_timeout is not None:
            identify["msg_timeout"] = int(_positive("msg_timeout", msg_timeout) * 1000)
        if output_buffer_size is not None:
            identify["output_buffer_size"] = output_buffer_size
        if output_buffer_timeout is not None:
            identify["output_buffer_timeout"] = int(
                _positive("output_buffer_timeout", output_buffer_timeout) * 1000
            )
        self._identify = identify
        self._on_give_up = on_give_up
        self._rng = random.Random()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dist: RdyDistributor | None = None
        self._responder: ReaderResponder | None = None
        self._conns: dict[str, NsqdConnection] = {}
        self._connecting: dict[str, asyncio.Task[None]] = {}
        self._tasks = TaskOwner(f"Reader({topic}/{channel})", self._task_failed)
        self._queue: deque[Message] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._session: aiohttp.ClientSession | None = None
        self._lookupd_errors: list[str] = []  # why each nsqlookupd failed the last poll
        self._started = False
        self._closed = False
        self._failure: BaseException | None = None
        self._received = self._given_up = 0

    # ---- lifecycle --------------------------------------------------------------------

    async def __aenter__(self) -> Reader:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect to the nsqd given directly and poll nsqlookupd once.

        Raises:
            NSQConnectError: no nsqd given directly could be reached, or no nsqlookupd
                answered (the reader is closed again).
            NSQError: nsqd refused the subscription (bad topic, unauthorized ...) or
                the Reader's settings (``settings_refused``).
            NSQClosedError: the reader was closed.
        """
        if self._closed:
            raise NSQClosedError("this Reader is closed; create a new one")
        if self._started:
            return
        self._started = True
        self._loop = asyncio.get_running_loop()
        self._dist = RdyDistributor(
            self._max_in_flight,
            rng=self._rng,
            low_rdy_idle_timeout=self._low_rdy_idle,
            max_backoff_duration=self._max_backoff,
            backoff_multiplier=self._backoff_multiplier,
        )
        self._responder = ReaderResponder(
            self._dist,
            self._apply,
            self._loop.time,
            requeue_delay=self._requeue_delay,
            max_requeue_delay=self._max_requeue_delay,
        )
        try:
            errors: list[BaseException] = []
            if self._direct:
                results = await asyncio.gather(
                    *(self._connect(a) for a in self._direct), return_exceptions=True
                )
                for address, result in zip(self._direct, results, strict=True):
                    if isinstance(result, BaseException):
                        if isinstance(result, NSQError) and result.fatal:
                            raise result
                        if not isinstance(result, Exception):
                            raise result
                        errors.append(result)
                        self._schedule_reconnect(
                            address, Backoff(*self._reconnect, jitter=0.2, rng=self._rng)
                        )
            if self._lookupds:
                self._session = aiohttp.ClientSession()
                ok = await self._poll_once()
                if not ok and not self._conns:
                    raise NSQConnectError(
                        "no nsqlookupd answered: " + "; ".join(self._lookupd_errors)
                    )
                if self._failure is not None:  # e.g. a discovered nsqd refused our settings
                    raise self._failure
                self._spawn(self._poll_loop(), "poll nsqlookupd")
            elif errors and not self._conns:
                raise NSQConnectError(
                    "could not connect to any nsqd: " + "; ".join(str(e) for e in errors)
                )
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop consuming: CLS to every nsqd, wait for CLOSE_WAIT, close the sockets.

        Messages not yet answered are left to nsqd's msg_timeout (it re-delivers them).
        Iteration ends; calling it twice is harmless.
        """
        if self._closed:
            return
        self._closed = True
        await self._tasks.aclose()
        self._cancel_timer()
        conns = list(self._conns.values())
        # In flight and no longer buffered: given to the application, never answered
        # (a loop left with break before msg.finish()). nsqd waits its msg_timeout.
        held = sum(len(c.core.in_flight) for c in conns) - len(self._queue)
        if held > 0:
            log.warning(
                "closing with %d message(s) received but neither finished nor requeued: "
                "nsqd delivers them again after its msg_timeout (60 s by default)",
                held,
            )
        if conns:
            await asyncio.gather(
                *(c.close(self._close_timeout) for c in conns), return_exceptions=True
            )
        self._conns.clear()
        self._queue.clear()
        self._wake()
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- consuming --------------------------------------------------------------------

    def __aiter__(self) -> Reader:
        return self

    async def __anext__(self) -> Message:
        """The next message; ends when the Reader is closed.

        Raises:
            NSQClosedError: the Reader was never started.
            NSQError: an nsqd refused the Reader's IDENTIFY settings (``settings_refused``,
                e.g. ``heartbeat_interval`` below nsqd's 1 s minimum); not retried.
            Exception: the error that stopped a reconnect or discovery loop for good
                (a bug, not a network or server failure: those are retried); raised
                again by every later call.
        """
        queue = self._queue
        while True:  # _take_queued is the first turn of this loop for telemetry
            if self._failure is not None:
                raise self._failure
            if queue:
                return queue.popleft()
            if self._closed:
                raise StopAsyncIteration
            if not self._started:
                raise NSQClosedError("start the Reader first: async with Reader(...) as reader")
            loop = self._loop
            assert loop is not None
            waiter = self._waiter
            if waiter is None or waiter.done():
                waiter = self._waiter = loop.create_future()
            await waiter

    # run()'s workers wait for a message with this: the same coroutine function, under
    # a name of its own (instrumentation wraps ``__anext__``, the user's iteration).
    _next_for_run = __anext__

    def _take_queued(self) -> Message | None:
        """:meth:`__anext__`'s fast path as a plain call: the next queued message, or
        None where ``__anext__`` would wait, end or raise. For run()'s workers and
        ``aioclients.telemetry``, which then need no coroutine per queued message;
        ``__anext__`` keeps its own loop, so that the path of ``async for`` is not
        one call longer."""
        queue = self._queue
        if queue and self._failure is None:
            return queue.popleft()
        return None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def run(
        self,
        handler: Callable[[Message], Awaitable[object] | object],
        *,
        concurrency: int | None = None,
    ) -> None:
        """Call ``handler(message)`` for every message until the Reader is closed.

        A handler that returns finishes the message (unless it answered itself); one
        that raises requeues it with backoff (default delay).

        Args:
            handler: a coroutine function (or plain function) taking a :class:`Message`.
            concurrency: handlers running at once; default ``max_in_flight`` (at least 1).
        """
        n = concurrency if concurrency is not None else max(1, self._max_in_flight)
        check_int("concurrency", n, minimum=1)
        workers = [asyncio.ensure_future(self._worker(handler)) for _ in range(n)]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            for w in workers:
                with contextlib.suppress(BaseException):
                    await w

    async def _worker(self, handler: Callable[[Message], Awaitable[object] | object]) -> None:
        # A queued message is taken with a plain call; only when there is none does
        # the worker wait in __anext__'s loop (which also ends it, or raises).
        take = self._take_queued
        while True:
            msg = take()
            if msg is None:
                try:
                    msg = await self._next_for_run()
                except StopAsyncIteration:
                    return
            try:
                result = handler(msg)
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("handler failed on %r; requeueing it", msg)
                if not msg.has_responded:
                    await msg.requeue()
            else:
                if not msg._responded:
                    await msg._finish_for_run()

    def is_starved(self) -> bool:
        """Whether some connection has (nearly) all its RDY in flight: a batching
        handler should process what it holds now (sync)."""
        return self._dist.is_starved() if self._dist is not None else False

    def set_max_in_flight(self, n: int | None = None, *, max_in_flight: int | None = None) -> None:
        """Change ``max_in_flight`` now (0 pauses delivery) (sync).

        Args:
            n: the new maximum, positionally or as ``n=`` (the API contract's name) or
                ``max_in_flight=`` (pynsq's).

        Raises:
            InvalidArgumentError: neither or both given, or not an int >= 0.
        """
        if (n is None) == (max_in_flight is None):
            raise InvalidArgumentError("set_max_in_flight takes n (or max_in_flight=), once")
        max_in_flight = check_int(
            "max_in_flight", n if max_in_flight is None else max_in_flight, minimum=0
        )
        self._max_in_flight = max_in_flight
        if self._dist is not None and self._loop is not None:
            self._apply(self._dist.set_max_in_flight(max_in_flight, self._loop.time()))

    def statistics(self) -> ReaderStatistics:
        """Per-connection RDY and in-flight counts, message counters, backoff (sync)."""
        dist = self._dist
        conns = []
        for address, c in self._conns.items():
            known = dist is not None and address in dist.connections
            conns.append(
                ConnectionStatistics(
                    address=address,
                    rdy=dist.rdy(address) if known and dist else 0,
                    in_flight=len(c.core.in_flight),
                    max_rdy_count=c.max_rdy_count,
                    messages_received=c.messages_received,
                    messages_finished=c.finished,
                    messages_requeued=c.requeued,
                )
            )
        return ReaderStatistics(
            connections=tuple(conns),
            max_in_flight=self._max_in_flight,
            total_rdy=dist.total_rdy if dist else 0,
            in_flight=sum(len(c.core.in_flight) for c in self._conns.values()),
            buffered=len(self._queue),
            messages_received=self._received,
            messages_finished=self._responder.finished if self._responder else 0,
            messages_requeued=self._responder.requeued if self._responder else 0,
            messages_given_up=self._given_up,
            backoff_level=dist.backoff.level if dist else 0,
            in_backoff=dist.backoff.active if dist else False,
        )

    # ---- connection callbacks (synchronous, from the drivers) -------------------------

    def on_message(self, conn: NsqdConnection, event: MessageReceived, now: float) -> None:
        self._received += 1
        responder = self._responder
        assert responder is not None
        msg = Message(event.id, event.body, event.timestamp, event.attempts, conn, responder)
        max_attempts = self._max_attempts
        if max_attempts and event.attempts > max_attempts:
            self._give_up(
                msg,
                now,
                f"delivered {event.attempts} times, more than max_attempts={max_attempts}",
            )
            return
        dist = self._dist
        assert dist is not None
        updates = dist.on_message(conn.address, now)
        if updates:
            self._apply(updates)
        self._queue.append(msg)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_messages(self, conn: NsqdConnection, items: list[Any], now: float) -> None:
        """The messages of one read, made by the core (``make_message``; none of
        them above ``max_attempts``): counted and queued in one go."""
        self._received += len(items)
        dist = self._dist
        assert dist is not None
        updates = dist.on_messages(conn.address, len(items), now)
        self._queue.extend(items)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if updates:
            # after the wake-up: the consumer's step comes first in the loop's queue,
            # so that the RDY goes out in one write with the FINs it makes
            self._apply(updates)

    def on_oversized_message(
        self, conn: NsqdConnection, event: OversizedMessage, now: float
    ) -> None:
        """A body above max_message_size was read past: FIN it and hand it to
        ``on_give_up`` with an empty body, rather than losing the connection (and
        the other messages in flight on it) to it at every delivery."""
        self._received += 1
        assert self._responder is not None
        msg = Message(event.id, b"", event.timestamp, event.attempts, conn, self._responder)
        msg._body_size = event.body_size
        reason = (
            f"body of {event.body_size} bytes is larger than max_message_size="
            f"{self._max_message_size} (raise it to nsqd's --max-msg-size); "
            "finished without delivery"
        )
        self._give_up(msg, now, reason, always_log=True)

    def on_response(self, conn: NsqdConnection, data: bytes) -> None:
        log.debug("nsqd %s: unexpected response %r", conn.address, data[:80])

    def on_error(self, conn: NsqdConnection, error: NSQError) -> None:
        pass  # logged by the connection; fatal ones end in on_lost

    def on_lost(self, conn: NsqdConnection, exc: BaseException | None) -> None:
        address = conn.address
        queue = self._queue
        if queue:
            # Not handed out yet and no longer answerable: nsqd re-delivers them after
            # msg_timeout. Dropping them keeps the queue within the RDY of live
            # connections (so a server flooding us then reconnecting cannot grow it).
            kept = [m for m in queue if m._conn is not conn]
            if len(kept) != len(queue):
                queue.clear()
                queue.extend(kept)
        if self._conns.get(address) is conn:
            del self._conns[address]
            if self._dist is not None and self._loop is not None:
                self._apply(self._dist.remove_connection(address, self._loop.time()))
        if self._closed:
            return
        log.warning("lost nsqd %s: %s", address, exc or "closed by nsqd")
        if address in self._direct:
            self._schedule_reconnect(address, Backoff(*self._reconnect, jitter=0.2, rng=self._rng))

    def _give_up(self, msg: Message, now: float, reason: str, *, always_log: bool = False) -> None:
        self._given_up += 1
        msg._give_up_reason = reason
        conn = msg._conn
        assert self._responder is not None
        self._responder.give_up(msg, now)
        callback = self._on_give_up
        if callback is None or always_log:
            log.warning(
                "nsqd %s: giving up on message %s: %s",
                conn.address,
                msg.id.decode(errors="replace"),
                reason,
            )
        if callback is None:
            return
        try:
            result = callback(msg)
        except Exception:
            log.exception("on_give_up failed for %r", msg)
            return
        if inspect.isawaitable(result):
            self._spawn(self._await_give_up(result, msg), "on_give_up")

    async def _await_give_up(self, result: Awaitable[object], msg: Message) -> None:
        try:
            await result
        except Exception:
            log.exception("on_give_up failed for %r", msg)

    # ---- RDY ---------------------------------------------------------------------------

    def _apply(self, updates: Iterable[RdyUpdate]) -> None:
        for update in updates:
            conn = self._conns.get(update.conn)  # type: ignore[call-overload]
            if conn is not None:
                conn.send_rdy(update.count)
        self._arm_timer()

    def _arm_timer(self) -> None:
        dist = self._dist
        loop = self._loop
        if dist is None or loop is None or self._closed:
            return
        deadline = dist.get_timer()
        if deadline == self._timer_at:
            return
        self._cancel_timer()
        if deadline is not None:
            self._timer_at = deadline
            self._timer = loop.call_at(deadline, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at = None

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        if self._dist is None or self._loop is None or self._closed:
            return
        self._apply(self._dist.handle_timer(self._loop.time()))

    # ---- connections and discovery ------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None] | None:
        if self._tasks.closed:
            coro.close()  # closing: nothing starts any more
            return None
        return self._tasks.start(coro, name=name)

    def _wire(self, conn: NsqdConnection) -> None:
        """The core makes each Message as it decodes it (on_messages gets a read's
        worth); those delivered too often come to on_message, to be given up."""
        core = conn.core
        assert self._responder is not None
        core.make_message = new_message
        core.make_messages = new_messages
        core.make_with = (conn, self._responder)
        core.attempts_limit = self._max_attempts

    async def _connect(self, address: str) -> None:
        core = ConnectionCore(
            identify=self._identify,
            topic=self.topic,
            channel=self.channel,
            auth_secret=self._auth_secret,
            tls=self._tls_context is not None,
            max_message_size=self._max_message_size,
            handshake_timeout=self._connect_timeout,
            heartbeat_interval=self._heartbeat_interval,
        )
        conn = NsqdConnection(address, core, self, tls_context=self._tls_context)
        self._wire(conn)
        await conn.open(self._connect_timeout)
        if self._closed:
            conn.abort()
            raise NSQClosedError("the Reader was closed while connecting")
        old = self._conns.get(address)
        if old is not None and not old.lost:
            conn.abort()
            return
        self._conns[address] = conn
        log.info("subscribed to %s/%s on nsqd %s", self.topic, self.channel, address)
        dist = self._dist
        loop = self._loop
        assert dist is not None
        assert loop is not None
        self._apply(dist.add_connection(address, conn.max_rdy_count, loop.time()))

    def _forget_connecting(self, address: str, task: asyncio.Task[None]) -> None:
        if self._connecting.get(address) is task:
            del self._connecting[address]

    def _schedule_reconnect(self, address: str, backoff: Backoff) -> None:
        if self._closed or address in self._connecting:
            return
        task = self._spawn(self._reconnect_loop(address, backoff), f"reconnect {address}")
        if task is None:
            return
        self._connecting[address] = task
        task.add_done_callback(functools.partial(self._forget_connecting, address))

    async def _reconnect_loop(self, address: str, backoff: Backoff) -> None:
        while not self._closed:
            delay = backoff.next_delay()
            log.info("reconnecting to nsqd %s in %.1fs", address, delay)
            await asyncio.sleep(delay)
            try:
                await self._connect(address)
                return
            except _TRANSIENT_ERRORS as exc:
                if _settings_refused(exc):
                    self._fail(exc, f"reconnecting to nsqd {address}")
                    return
                log.warning("reconnect to nsqd %s failed: %s", address, redact_text(str(exc)))
            except Exception as exc:
                self._fail(exc, f"reconnecting to nsqd {address}")
                return

    async def _poll_once(self) -> bool:
        """Query every nsqlookupd; connect to producers not connected yet.
        True when at least one nsqlookupd answered."""
        session = self._session
        assert session is not None
        results = await asyncio.gather(
            *(
                query_lookupd(session, url, self.topic, self._connect_timeout)
                for url in self._lookupds
            ),
            return_exceptions=True,
        )
        producers: list[str] = []
        answered = False
        self._lookupd_errors = []
        for url, result in zip(self._lookupds, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, _TRANSIENT_ERRORS):
                    raise result  # a bug, or cancellation
                log.warning("nsqlookupd %s: %s", redact_url(url), redact_text(str(result)))
                self._lookupd_errors.append(redact_text(str(result)))
                continue
            answered = True
            for key in result:
                if key not in producers:
                    producers.append(key)
        new: list[asyncio.Task[None]] = []
        for address in producers:
            if address in self._conns or address in self._connecting or self._closed:
                continue
            task = self._spawn(self._connect_discovered(address), f"connect {address}")
            if task is None:
                break
            self._connecting[address] = task
            task.add_done_callback(functools.partial(self._forget_connecting, address))
            new.append(task)
        if new:
            await asyncio.gather(*new, return_exceptions=True)
        return answered

    async def _connect_discovered(self, address: str) -> None:
        try:
            await self._connect(address)
        except _TRANSIENT_ERRORS as exc:
            if _settings_refused(exc):
                self._fail(exc, f"connecting to discovered nsqd {address}")
                return
            log.warning(
                "could not connect to discovered nsqd %s: %s", address, redact_text(str(exc))
            )
        except Exception as exc:
            self._fail(exc, f"connecting to discovered nsqd {address}")

    async def _poll_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(poll_delay(self._poll_interval, self._poll_jitter, self._rng))
            try:
                await self._poll_once()
            except Exception as exc:
                self._fail(exc, "polling nsqlookupd")
                return

    def _fail(self, exc: BaseException, doing: str) -> None:
        """A background loop met an error it cannot retry (a bug, a setting that
        cannot work): end the iteration with it rather than hang or retry forever."""
        if self._closed:
            return
        log.error(
            "Reader(%s/%s) stops: %s failed with %s: %s",
            self.topic,
            self.channel,
            doing,
            type(exc).__name__,
            redact_text(str(exc)),
        )
        if self._failure is None:
            self._failure = exc
        self._wake()

    def _task_failed(self, exc: BaseException) -> None:
        """The first background task that failed: nothing may die unnoticed."""
        self._fail(exc, "a background task")

    def __repr__(self) -> str:
        return (
            f"Reader(topic={self.topic!r}, channel={self.channel!r}, "
            f"connections={list(self._conns)}, closed={self._closed})"
        )
