"""The asyncio driver of one nsqd connection: socket <-> :class:`ConnectionCore`.

Theory of operation: an :class:`asyncio.Protocol`, so received bytes are handled
in ``data_received`` without a task or a queue per message. Each read cycle is
read -> (decompress) -> ``core.receive_data`` -> events to the owner (Reader or
Producer) -> one write of everything queued (RDY, NOP, FIN...). Messages made by
the owner's ``make_message`` in the core go to the owner as one list per read
(``on_messages``). Responses made outside a read cycle (``Message.finish()``) are
queued in the core and written by one ``call_soon`` flush per loop iteration, so a
burst of FINs is one write (earlier when the first has waited ``EARLY_FLUSH_DELAY``).
A read that delivered messages writes the same way (its RDY refill then leaves with
the FINs of those messages, one write a read); any other read writes at once.
The core's one deadline (handshake timeout, heartbeat watchdog) is one
``loop.call_at`` handle, re-armed when it fires (deadlines only move later while
data flows, so it never needs re-arming per read).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable

# the early write's clock, exported: ReaderResponder.finish reads it here too (one
# clock for a test to stand in for)
from time import perf_counter as perf_counter
from typing import Any, Protocol

from aioclients._tasks import wait_within
from aioclients.nsq._errors import NSQConnectError, NSQError
from aioclients.nsq._io._compression import Codec, make_codec
from aioclients.nsq._protocol._connection import (
    CloseWait,
    ConnectionCore,
    ConnectionState,
    ErrorReceived,
    Heartbeat,
    Identified,
    MessageReceived,
    OversizedMessage,
    Ready,
    Response,
    Subscribed,
    TimedOut,
    UpgradeCompression,
    UpgradeTLS,
)
from aioclients.nsq._protocol._lookup import parse_address

__all__ = ("ConnectionOwner", "NsqdConnection")

log = logging.getLogger("aioclients.nsq.connection")


#: Seconds an answer made outside a read may wait for the end of the loop iteration
#: (where the answers of a batch go out in one write) before it is written early.
EARLY_FLUSH_DELAY = 0.001


class ConnectionOwner(Protocol):
    """What a connection reports to its Reader or Producer (all synchronous)."""

    def on_message(self, conn: NsqdConnection, event: MessageReceived, now: float) -> None: ...
    def on_messages(self, conn: NsqdConnection, items: list[Any], now: float) -> None: ...
    def on_oversized_message(
        self, conn: NsqdConnection, event: OversizedMessage, now: float
    ) -> None: ...
    def on_response(self, conn: NsqdConnection, data: bytes) -> None: ...
    def on_error(self, conn: NsqdConnection, error: NSQError) -> None: ...
    def on_lost(self, conn: NsqdConnection, exc: BaseException | None) -> None: ...


class NsqdConnection(asyncio.Protocol):
    """One TCP (optionally TLS, deflate or snappy) connection to nsqd.

    Args:
        address: ``"host:port"``.
        core: the pure state machine (consumer or publisher).
        owner: receives messages, answers, errors and the loss of the connection.
        tls_context: used when the core asks for the TLS upgrade.
        clock: the loop's clock by default.
    """

    def __init__(
        self,
        address: str,
        core: ConnectionCore,
        owner: ConnectionOwner,
        *,
        tls_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.address = address
        self.host, self.port = parse_address(address)
        self.core = core
        self._owner = owner
        self._tls_context = tls_context
        self._loop = asyncio.get_running_loop()
        self._clock = clock or self._loop.time
        self._transport: asyncio.Transport | None = None
        self._codec: Codec | None = None
        self._early = b""  # what the peer sent before start(): nsqd never speaks first
        self._handshake: asyncio.Future[str] | None = None
        self._close_wait: asyncio.Future[None] | None = None
        self._closed = self._loop.create_future()
        self._flush_scheduled = False
        self._flush_since = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self.max_rdy_count = 2500
        self.lost = False
        self.messages_received = 0
        self.finished = 0
        self.requeued = 0

    @property
    def usable(self) -> bool:
        """Open, and not condemned by a fatal error."""
        return not self.lost and self.core.state is not ConnectionState.CLOSED

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the connection was opened on, the only one it works on."""
        return self._loop

    # ---- opening ----------------------------------------------------------------------

    async def open(self, timeout: float) -> None:
        """Connect and run the handshake (IDENTIFY, TLS, compression, AUTH, SUB).

        Raises:
            NSQConnectError: unreachable, refused, timed out or the connection dropped.
            NSQError: nsqd refused a step (bad topic, auth failed ...).
        """
        self._handshake = self._loop.create_future()
        try:
            try:
                await wait_within(
                    self._loop.create_connection(lambda: self, self.host, self.port), timeout
                )
            except asyncio.TimeoutError:
                raise NSQConnectError(
                    f"could not connect to nsqd at {self.address} within {timeout}s"
                ) from None
            except ConnectionRefusedError as exc:
                raise NSQConnectError(
                    f"could not connect to nsqd at {self.address} (connection refused): "
                    "start one with `aioclients-servers` or `nsqd`, or check that this is "
                    "its TCP address"
                ) from exc
            except OSError as exc:
                raise NSQConnectError(
                    f"could not connect to nsqd at {self.address}: {exc} "
                    "(is nsqd running and is this its TCP address?)"
                ) from exc
            self.core.start(self._clock())
            self.flush()
            self._arm_timer()
            if self._early:
                # Another server (nats-server's INFO) greeted us: decoded now, it
                # fails the handshake with what it said, not with start()'s state.
                early, self._early = self._early, b""
                self.data_received(early)
            while True:
                step = await self._handshake
                if step == "done":
                    return
                # step == "tls": upgrade, then nsqd's OK arrives over TLS
                assert self._transport is not None
                self._handshake = self._loop.create_future()
                context = self._tls_context or ssl.create_default_context()
                try:
                    transport = await self._loop.start_tls(
                        self._transport, self, context, server_hostname=self.host
                    )
                except (OSError, ssl.SSLError) as exc:
                    raise NSQConnectError(f"TLS with nsqd at {self.address} failed: {exc}") from exc
                if transport is None:  # pragma: no cover - the loop closed it
                    raise NSQConnectError(f"TLS with nsqd at {self.address} failed")
                self._transport = transport
                self.core.tls_started()
        except BaseException:
            # No one awaits the handshake now (the caller gets the error raised here):
            # the loss of the connection, reported by abort() or later by the
            # transport (a failed TLS handshake closes it afterwards), must not fail
            # a waiter whose exception nobody retrieves.
            waiter, self._handshake = self._handshake, None
            self.abort()
            if waiter is not None and waiter.done() and not waiter.cancelled():
                waiter.exception()  # failed before abort(): mark it retrieved
            raise

    def _handshake_event(self, event: object) -> None:
        waiter = self._handshake
        if isinstance(event, Identified):
            log.debug("%s: IDENTIFY answer %s", self.address, event.response)
            self.max_rdy_count = event.response.max_rdy_count
        elif isinstance(event, UpgradeTLS):
            if waiter is not None and not waiter.done():
                waiter.set_result("tls")
        elif isinstance(event, UpgradeCompression):
            self._codec = codec = make_codec(event.kind, event.level)
            rest = self.core.take_buffered()
            if rest:
                for chunk in codec.decode(rest):
                    self._feed(chunk)
        elif isinstance(event, (Subscribed, Ready)):
            if waiter is not None and not waiter.done():
                waiter.set_result("done")

    # ---- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            codec = self._codec
            if codec is None:
                delivered = self._feed(data)
            else:
                delivered = False
                for chunk in codec.decode(data):
                    if self._feed(chunk):
                        delivered = True
                    if self.lost:
                        return
        except Exception as exc:  # bad bytes, a refused handshake step
            if self.core.state is ConnectionState.INIT:
                self._early += data  # before open() started the core; fed after it
                return
            self._fail(exc)
            return
        if delivered:
            # The owner answers these messages in the callbacks of this loop
            # iteration: what the read queued (a RDY refill, a NOP) goes out with
            # those answers in one write, as an answer would (answered).
            self.answered()
        else:
            self.flush()

    def _feed(self, data: bytes) -> bool:
        """Decode ``data`` and tell the owner; True when it delivered messages."""
        now = self._clock()
        core = self.core
        events = core.receive_data(data, now)
        owner = self._owner
        made = core.received
        if made:  # the messages of this read, made by the owner's make_message
            core.received = []
            self.messages_received += len(made)
            owner.on_messages(self, made, now)
        if not events:
            return bool(made)
        for event in events:
            if type(event) is MessageReceived:  # the hot path: one per message
                self.messages_received += 1
                owner.on_message(self, event, now)
            elif isinstance(event, Heartbeat):
                pass
            elif isinstance(event, Response):
                owner.on_response(self, event.data)
            elif isinstance(event, ErrorReceived):
                error = event.error
                if error.fatal:
                    log.warning("nsqd %s: %s (nsqd closes the connection)", self.address, error)
                else:
                    log.info("nsqd %s: %s", self.address, error)
                owner.on_error(self, error)
                if error.fatal:
                    self._close_transport()
            elif isinstance(event, OversizedMessage):
                self.messages_received += 1
                owner.on_oversized_message(self, event, now)
            elif isinstance(event, CloseWait):
                if self._close_wait is not None and not self._close_wait.done():
                    self._close_wait.set_result(None)
            else:
                self._handshake_event(event)
        return bool(made)

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost:
            return
        self.lost = True
        self.core.connection_lost()
        self._cancel_timer()
        self._transport = None
        error = exc or ConnectionResetError("nsqd closed the connection")
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(
                NSQConnectError(f"connection to nsqd at {self.address} lost: {error}")
            )
        if self._close_wait is not None and not self._close_wait.done():
            self._close_wait.set_result(None)
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)
        if not self._closed.done():
            self._closed.set_result(None)
        try:
            self._owner.on_lost(self, exc)
        except Exception:  # pragma: no cover - owners must not raise here
            log.exception("owner failed to handle the loss of %s", self.address)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)

    # ---- writing -----------------------------------------------------------------------

    def flush(self) -> None:
        self._flush_scheduled = False
        transport = self._transport
        if transport is None or not self.core.has_data_to_send:
            return
        data = self.core.data_to_send()
        if self._codec is not None:
            data = self._codec.encode(data)
        transport.write(data)

    def answered(self) -> None:
        """An answer (FIN, REQ) was queued in the core outside a read: write it at
        the end of this loop iteration with the others, or now when the first one
        waiting has waited ``EARLY_FLUSH_DELAY`` (an application that works long on
        the messages it holds lets nsqd refill meanwhile). A Reader's FIN inlines
        this (``ReaderResponder.finish``): a change here changes that too."""
        if self._flush_scheduled:
            if perf_counter() - self._flush_since >= EARLY_FLUSH_DELAY:
                self.flush()
        else:
            self._flush_scheduled = True
            self._flush_since = perf_counter()
            self._loop.call_soon(self.flush)

    def schedule_flush(self) -> None:
        """Write what the core has queued at the end of this loop iteration."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._flush_since = perf_counter()  # what answered()'s early write counts from
            self._loop.call_soon(self.flush)

    async def drain(self) -> None:
        """Wait while the socket's write buffer is above its high-water mark."""
        if self._paused and not self.lost:
            if self._drain_waiter is None or self._drain_waiter.done():
                self._drain_waiter = self._loop.create_future()
            await self._drain_waiter

    def send_rdy(self, count: int) -> None:
        if self.lost:
            return
        self.core.send_rdy(count)
        self.schedule_flush()

    # ---- timer -------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        deadline = self.core.get_timer()
        if deadline == self._timer_at:
            return
        self._cancel_timer()
        if deadline is not None:
            self._timer_at = deadline
            self._timer = self._loop.call_at(deadline, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at = None

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        for event in self.core.handle_timer(self._clock()):
            if isinstance(event, TimedOut):
                self._fail(NSQConnectError(f"nsqd at {self.address}: {event.reason}"))
                return
        self._arm_timer()

    # ---- closing -----------------------------------------------------------------------

    def _fail(self, exc: BaseException) -> None:
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(exc)
        else:
            log.warning("connection to nsqd at %s failed: %s", self.address, exc)
        self.abort()

    def _close_transport(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Drop the connection now (no CLS)."""
        transport = self._transport
        if transport is not None:
            transport.abort()
        else:
            self.connection_lost(None)

    async def close(self, timeout: float = 5.0) -> None:
        """Send CLS (consumers), wait for CLOSE_WAIT, then close the socket.

        Messages still in flight are not answered: nsqd re-queues them when their
        msg_timeout expires.
        """
        if self.lost:
            return
        try:
            if self.core.state is ConnectionState.SUBSCRIBED:
                self._close_wait = self._loop.create_future()
                self.core.cls()
                self.flush()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._close_wait), timeout)
            self.flush()
            self._close_transport()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._closed), timeout)
        finally:
            if not self.lost:
                self.abort()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)
