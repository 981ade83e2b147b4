"""Requests and publish acks over one reply subscription each.

:class:`ReplyMux` sends requests with reply subjects ``<inbox>.<n>`` under one
wildcard subscription; ``n`` is a counter, so correlating a reply is one dict
lookup. Every outstanding request has a deadline; one timer, armed for the
earliest deadline, fails the overdue ones, so nothing waits forever on a reply
that will not come. ``close()`` fails everything outstanding at once.

:class:`AckMux` is the publish side: replies become ``PubAck``s, and at most
``max_pending`` acks are outstanding. ``publish`` waits for room (back-pressure)
in FIFO order: a freed slot is handed to the longest waiter and reserved for it,
so a task publishing in a loop cannot starve one that is waiting. Everything
that can be checked is checked before waiting, so a waiter that is handed a
slot always uses it (or, if cancelled, hands it on).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from nats.aio.msg import Msg as NatsMsg

from aioclients._core._checks import check_float, check_int
from aioclients._errors import RemoteProtocolError
from aioclients.jetstream._errors import (
    APITimeoutError,
    JetStreamClosedError,
    JetStreamError,
    NoStreamResponseError,
    api_error,
)
from aioclients.jetstream._models import PubAck
from aioclients.jetstream._protocol._headers import decode_headers
from aioclients.jetstream._protocol._names import validate_publish_subject
from aioclients.jetstream._transport import NatsTransport, RawSubscription, send_timeout_error

__all__ = (
    "PUBLISH_RETRY_ATTEMPTS",
    "PUBLISH_RETRY_WAIT",
    "AckMux",
    "ReplyMux",
    "check_publish_retries",
    "future_and_clock",
    "json_answer",
    "parse_pub_ack",
    "what_text",
)

log = logging.getLogger("aioclients.jetstream.publish")

T = TypeVar("T")

#: What a publish keeps to be sent again after "no responders": its frame while it
#: has the default tries left, else (frame, tries left, wait); None for a request.
Resend = bytes | tuple[bytes, int, float] | None

#: What a request is, for its errors: the text, or ``(format, *args)`` for ``%``, so
#: that a request that is answered (the usual case) never formats it.
What = str | tuple[Any, ...]


def what_text(what: What) -> str:
    """The text of a :data:`What`."""
    if what.__class__ is str:
        return what
    return what[0] % what[1:]


# The server writes acks as {"stream":..,["domain":..,]"seq":N[,"duplicate":true]} (and a
# counter's as {..,"seq":N,"val":"T"}); matching that shape is several times cheaper than
# json.loads. Anything else takes the JSON path.
_ACK = re.compile(
    rb'\{"stream":"([^"\\]+)",(?:"domain":"([^"\\]*)",)?"seq":(\d+)(,"duplicate":true)?'
    rb'(?:,"val":"([+-]?\d+)")?\}'
)


def json_answer(data: bytes, what: str) -> dict[str, Any]:
    """Decode a JSON API answer; raise the error it carries or a protocol error."""
    try:
        answer = json.loads(data)
    except ValueError:
        raise RemoteProtocolError(f"{what} answered non-JSON: {data[:200]!r}") from None
    if not isinstance(answer, dict):
        raise RemoteProtocolError(f"{what} answered JSON that is not an object: {data[:200]!r}")
    err = answer.get("error")
    if err is not None:
        if not isinstance(err, dict):
            raise RemoteProtocolError(f"{what} answered a malformed error: {data[:200]!r}")
        code, err_code = err.get("code"), err.get("err_code")
        raise api_error(
            code if isinstance(code, int) else None,
            err_code if isinstance(err_code, int) else None,
            str(err.get("description", "")),
        )
    return answer


def parse_pub_ack(msg: NatsMsg, subject: str) -> PubAck:
    """Turn an ack reply into a :class:`PubAck` or raise the error it carries."""
    headers = msg.headers
    if not headers:
        m = _ACK.fullmatch(msg.data)
        if m is not None:
            stream, domain, seq, dup, value = m.groups()
            if value is None:
                return PubAck(
                    stream.decode(), int(seq), dup is not None, domain.decode() if domain else None
                )
            return PubAck(
                stream.decode(),
                int(seq),
                dup is not None,
                domain.decode() if domain else None,
                value.decode(),
            )
    elif headers.get("Status") == "503":
        raise NoStreamResponseError(
            f"no stream stores subject {subject!r}",
            code=503,
            hint="create a stream whose subjects include it",
        )
    data = json_answer(msg.data, f"the publish to {subject!r}")
    stream, seq = data.get("stream"), data.get("seq")
    if not isinstance(stream, str) or not isinstance(seq, int):
        raise RemoteProtocolError(f"publish ack lacks stream/seq: {msg.data[:200]!r}")
    domain = data.get("domain")
    value = data.get("val")
    return PubAck(
        stream,
        seq,
        data.get("duplicate") is True,
        domain or None,
        value if isinstance(value, str) else None,
    )


#: ADR-22: a publish answered "no responders" (status 503) is sent again after a
#: pause, as nats.go does by default, for publish and publish_async alike: twice,
#: 250 ms apart, within the publish's timeout.
PUBLISH_RETRY_ATTEMPTS = 2
PUBLISH_RETRY_WAIT = 0.25


def check_publish_retries(attempts: object, wait: object) -> None:
    """Refuse a bad ``retry_attempts`` (an int >= 0) or ``retry_wait`` (seconds > 0)."""
    check_int("retry_attempts", attempts, minimum=0)
    check_float("retry_wait", wait)


def _msg_headers(block: bytes | None) -> dict[str, Any] | None:
    """A reply's headers as nats-py's ``Msg.headers`` has them (our parsing of them)."""
    if not block:
        return None
    try:
        return decode_headers(block, strict=False) or None
    except RemoteProtocolError as exc:  # not even NATS/1.0: keep the message, not them
        log.warning("ignoring malformed message headers: %s", exc)
        return None


def _no_loop() -> Any:
    raise AssertionError("the raw inbox is not open")


def future_and_clock(
    loop: asyncio.AbstractEventLoop,
) -> tuple[Callable[[], asyncio.Future[Any]], Callable[[], float]]:
    """``loop.create_future`` and ``loop.time``, or what they do, called directly.

    asyncio's own loops implement both in Python, around ``asyncio.Future(loop=loop)``
    and ``time.monotonic()``; calling those instead saves a Python frame each (some
    700 instructions a KV get). A loop that overrides either (uvloop's are C
    methods already; a test's loop may keep a clock of its own) keeps its own.
    """
    base = asyncio.BaseEventLoop
    new_future: Callable[[], asyncio.Future[Any]] = loop.create_future
    clock: Callable[[], float] = loop.time
    if type(loop).create_future is base.create_future:
        new_future = functools.partial(asyncio.Future, loop=loop)
    if type(loop).time is base.time:
        clock = time.monotonic
    return new_future, clock


class ReplyMux(Generic[T]):
    """Outstanding requests of one JetStream context, correlated by a counter token."""

    #: How often and how far apart a publish answered "no responders" is sent again
    #: (an entry's ``resend`` may carry other numbers).
    retry_attempts = PUBLISH_RETRY_ATTEMPTS
    retry_wait = PUBLISH_RETRY_WAIT

    def __init__(
        self,
        transport: NatsTransport,
        *,
        kind: str = "reply",
        raw_frame_header: re.Pattern[bytes] | None = None,
    ) -> None:
        self._transport = transport
        self._kind = kind
        # The header block of the usual raw reply: such a reply is read whole with
        # one match, from the socket's read callback (see start_raw's future), and
        # the Nones that stand for its groups in the reading of any other reply.
        self._raw_frame_header = raw_frame_header
        self._raw_blanks: tuple[None, ...] = (None,) * (
            raw_frame_header.groups if raw_frame_header is not None else 0
        )
        self._prefix = ""
        self._prefix_len = 0
        self._sub: RawSubscription | None = None
        # Replies taken raw (header block and payload, straight from the read loop):
        # a second wildcard inbox, sharing the counter and the table of outstanding requests.
        self._raw_prefix = ""
        self._raw_sub: RawSubscription | None = None
        self._open_lock = asyncio.Lock()
        self._counter = 0
        # token -> (future, what, deadline, resend): ``resend`` is None for a
        # request; for a publish it is what a "no responders" answer needs to send
        # the frame again (see _try_again). A raw request's token is its whole reply
        # subject (a str): its reply is found without reading the number out of it.
        self._pending: dict[int | str, tuple[asyncio.Future[T], What, float, Resend]] = {}
        # Publishes waiting to be sent again, with their timers (close() stops them).
        self._resends: dict[int, asyncio.TimerHandle] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._closed = False
        # The loop the raw inbox was opened in (start_raw's futures and deadlines),
        # and its create_future and time (see future_and_clock).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._new_future: Callable[[], asyncio.Future[Any]] = _no_loop
        self._clock: Callable[[], float] = _no_loop
        # _settled, when a subclass gives it work (the raw path skips a no-op call)
        self._settle: Callable[[], None] | None = (
            None if type(self)._settled is ReplyMux._settled else self._settled
        )

    @property
    def outstanding(self) -> int:
        return len(self._pending)

    def _check_open(self) -> None:
        if self._closed:
            raise JetStreamClosedError("this JetStream context is closed")
        self._transport.check_open()

    async def _ensure_open(self) -> None:
        # The first requests may race here; one subscribes, the others wait. If
        # subscribing fails, that caller gets the error and the next one tries again.
        async with self._open_lock:
            if self._sub is not None:
                return
            inbox = self._transport.new_inbox()
            self._sub = await self._transport.subscribe_raw(
                inbox + ".*", self._on_raw_msg, replies=True
            )
            self._prefix = inbox + "."
            self._prefix_len = len(self._prefix)

    async def _ensure_raw_open(self) -> None:
        async with self._open_lock:
            if self._raw_sub is not None:
                return
            inbox = self._transport.new_inbox()
            # A reply read whole goes from the read callback straight to its future
            # in the table (no call of ours), unless leaving the table has work to
            # do (_settled): then every reply comes to _on_raw_reply.
            whole = self._settle is None and self._raw_frame_header is not None
            self._raw_sub = await self._transport.subscribe_raw(
                inbox + ".*",
                self._on_raw_reply,
                replies=True,
                frame_header=self._raw_frame_header if whole else None,
                waiters=self._pending if whole else None,  # type: ignore[arg-type]
            )
            self._raw_prefix = inbox + "."
            self._loop = loop = asyncio.get_running_loop()
            self._new_future, self._clock = future_and_clock(loop)

    def _convert(self, msg: NatsMsg, what: str) -> T:
        """Turn a reply into the future's result (or raise the error it carries)."""
        return msg  # type: ignore[return-value]

    def _settled(self) -> None:
        """Called whenever an outstanding request leaves the table."""

    def _describe(self, what: str) -> str:
        return what

    def _on_raw_msg(self, subject: str, reply: str, payload: bytes, header: bytes | None) -> None:
        # A raw subscription: on our own client the reply skips nats-py's message
        # processing, and one that arrives alone reaches the waiter from the socket's
        # read callback. The NatsMsg is what nats-py would have built.
        self._on_reply(
            NatsMsg(
                _client=self._transport.nc,
                subject=subject,
                reply=reply,
                data=payload,
                headers=_msg_headers(header),
            )
        )

    def _on_reply(self, msg: NatsMsg) -> None:
        try:
            token = int(msg.subject[self._prefix_len :])
        except ValueError:
            return
        entry = self._pending.pop(token, None)
        if entry is None:
            return  # timed out or abandoned earlier
        future, what, _, resend = entry
        if not future.done():
            try:
                # (a publish's what is its subject: no call to format it per ack)
                text = what if what.__class__ is str else what_text(what)
                future.set_result(self._convert(msg, text))
            except NoStreamResponseError as exc:
                if resend is None or not self._try_again(token, entry):
                    future.set_exception(exc)
            except Exception as exc:
                future.set_exception(exc)
        self._settled()

    def _try_again(self, token: int, entry: tuple[asyncio.Future[T], What, float, Resend]) -> bool:
        """Put a publish answered "no responders" back in the table, to be sent
        again after its wait (ADR-22; nats.go's async publish does the same).

        A 503 means no stream took the message, so sending it again cannot store
        it twice. Returns False when its tries are used up, or when its deadline
        would pass before the next one: the caller fails it with the 503.
        """
        future, what, deadline, resend = entry
        if isinstance(resend, bytes):  # the defaults, no try yet
            frame, left, wait = resend, self.retry_attempts, self.retry_wait
        else:
            assert resend is not None
            frame, left, wait = resend
        loop = asyncio.get_running_loop()
        if left <= 0 or loop.time() + wait >= deadline or self._closed:
            return False
        log.debug(
            "no stream answered the publish to %r; trying again (%d left)",
            what_text(what),
            left - 1,
        )
        self._pending[token] = (future, what, deadline, (frame, left - 1, wait))
        self._resends[token] = loop.call_later(wait, self._send_again, token)
        return True

    def _send_again(self, token: int) -> None:
        self._resends.pop(token, None)
        entry = self._pending.get(token)
        if entry is None or entry[0].done():
            return  # timed out, closed or abandoned meanwhile
        resend = entry[3]
        assert isinstance(resend, tuple)
        try:
            self._transport.send_nowait(resend[0])
        except Exception as exc:  # closed, or disconnected with a full reconnect buffer
            del self._pending[token]
            entry[0].set_exception(exc)
            self._settled()

    def _on_raw_reply(self, subject: str, reply: str, payload: bytes, header: bytes | None) -> None:
        entry = self._pending.pop(subject, None)
        if entry is None:
            return  # timed out or abandoned earlier (or not one of ours)
        future = entry[0]
        if not future.done():
            # the shape of a frame's groups (see start_raw)
            future.set_result((None, None, header, *self._raw_blanks, payload))  # type: ignore[arg-type]
        if self._settle is not None:
            self._settle()

    def _next_token(self) -> tuple[int, str]:
        self._counter += 1
        return self._counter, self._prefix + str(self._counter)

    def _register(
        self,
        token: int | str,
        what: What,
        timeout: float,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> tuple[asyncio.Future[T], float]:
        """Enter ``token`` in the table of outstanding requests, with its deadline
        (``loop``: the running one, if the caller has it at hand)."""
        if loop is None:
            loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        deadline = loop.time() + timeout
        self._pending[token] = (future, what, deadline, None)
        # Armed before sending: the send itself may wait (a server that does not
        # read), and the call's timeout bounds that wait too.
        if deadline < self._timer_at:
            self._arm(loop, deadline)
        return future, deadline

    def _unregister(self, token: int | str, future: asyncio.Future[T]) -> None:
        """Take back a request whose frame could not be sent."""
        if self._pending.pop(token, None) is not None:
            self._settled()
        if future.done() and not future.cancelled():
            future.exception()  # the sweep failed it meanwhile; nobody will look
        else:
            future.cancel()

    async def _queue(self, frame: bytes, deadline: float, what: What) -> None:
        try:
            await self._transport.send(frame, deadline)
        except APITimeoutError:  # the only timeout send raises: the server does not read
            raise send_timeout_error(self._describe(what_text(what)), self._transport.nc) from None

    async def _send(
        self,
        token: int,
        frame: bytes,
        what: str,
        timeout: float,
        *,
        immediate: bool = False,
        resend: Resend = None,
    ) -> asyncio.Future[T]:
        """Register ``token`` with a deadline, then send ``frame`` (``immediate``: see
        :meth:`NatsTransport.send`; ``resend``: see ``_pending``)."""
        # Inline rather than through _register/_queue: publish_async's path, per message.
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        deadline = loop.time() + timeout
        self._pending[token] = (future, what, deadline, resend)
        # Armed before sending: the send itself may wait (a server that does not
        # read), and the call's timeout bounds that wait too.
        if deadline < self._timer_at:
            self._arm(loop, deadline)
        try:
            try:
                await self._transport.send(frame, deadline, immediate=immediate)
            except APITimeoutError:  # as in _queue
                raise send_timeout_error(self._describe(what), self._transport.nc) from None
        except BaseException:
            self._unregister(token, future)
            raise
        return future

    async def request(
        self,
        subject: str,
        payload: bytes,
        timeout: float,
        what: str,
        headers: Mapping[str, str | list[str]] | None = None,
    ) -> T:
        """Send a request (with ``headers``, if given) and wait for its reply."""
        self._check_open()
        if self._sub is None:
            await self._ensure_open()
        token, reply = self._next_token()
        frame = self._transport.frame(subject, payload, reply, headers)
        future = await self._send(token, frame, what, timeout, immediate=True)
        try:
            return await future
        finally:
            # A caller that stops waiting (cancelled) takes its entry with it.
            if self._pending.pop(token, None) is not None:
                self._settled()

    async def request_raw(
        self, subject: str, timeout: float, what: What
    ) -> tuple[bytes | None, bytes]:
        """Send a request without payload; return its reply's header block and payload.

        The reply skips nats-py's ``Msg`` and header parsing: the caller reads the
        raw ``NATS/1.0`` block (e.g. a Direct Get reply, whose few headers are
        found without decoding them all).
        """
        self._check_open()
        if self._raw_sub is None:
            await self._ensure_raw_open()
        self._counter += 1
        token = self._raw_prefix + str(self._counter)  # see _pending
        # No payload: nothing for frame() to check against max_payload.
        frame = f"PUB {subject} {token} 0\r\n\r\n".encode()
        future, deadline = self._register(token, what, timeout)
        try:
            if not self._transport.write_now(frame):
                await self._queue(frame, deadline, what)
        except BaseException:
            self._unregister(token, future)
            raise
        try:
            got: tuple[Any, ...] = await future  # type: ignore[assignment]
            return got[2], got[-1]  # (see start_raw)
        finally:
            # A caller that stops waiting (cancelled) takes its entry with it.
            if self._pending.pop(token, None) is not None:
                self._settled()

    def start_raw(
        self, prefix: str, name: str, timeout: float, what: What
    ) -> tuple[str, asyncio.Future[tuple[Any, ...]]] | None:
        """:meth:`request_raw` of the subject ``prefix + name`` (passed apart: the
        frame is formatted in one go) without a coroutine of its own, when that is
        possible at once: the raw inbox is open and the request went to the socket.
        Returns the token and the future of the reply; the caller awaits the future
        and, if that raises (a timeout, a close, a cancel), calls :meth:`forget`
        with the token. ``None``: nothing happened, use :meth:`request_raw`.

        The future's result: ``(subject, sizes, header block, *groups, payload)``,
        the groups of the reply's frame when it matched ``raw_frame_header`` and was
        read whole (see :data:`~aioclients.jetstream._transport.FrameWaiters`),
        ``groups`` those of ``raw_frame_header``; for any other reply the same
        shape, all ``None`` but the header block (or ``None``) and the payload.

        Raises:
            JetStreamClosedError: the context or the connection is closed.
            ConnectError: disconnected, and the reconnect buffer is full.
        """
        if self._closed:
            raise JetStreamClosedError("this JetStream context is closed")
        loop = self._loop
        if loop is None:  # the raw inbox is not open yet
            self._transport.check_open()
            return None
        counter = self._counter + 1
        token = self._raw_prefix + str(counter)  # see _pending
        # Written before the request is entered in the table: nothing is read (no
        # reply can come) before this returns, and a frame not written leaves
        # nothing to take back. write_now raises what check_open would.
        if not self._transport.write_now(f"PUB {prefix}{name} {token} 0\r\n\r\n".encode()):
            return None
        self._counter = counter
        # _register, inline (once per get): the future, its deadline, the timer
        future: asyncio.Future[T] = self._new_future()
        deadline = self._clock() + timeout
        self._pending[token] = (future, what, deadline, None)
        if deadline < self._timer_at:
            self._arm(loop, deadline)
        return token, future  # type: ignore[return-value]

    def forget(self, token: int | str) -> None:
        """Drop ``token`` from the outstanding requests, if it is still there."""
        if self._pending.pop(token, None) is not None:
            self._settled()

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._sweep)

    def _overdue_error(self, what: str) -> Exception:
        if self._transport.nc.is_closed:
            return JetStreamClosedError(f"the NATS connection closed before {what} was answered")
        return APITimeoutError(f"no {self._kind} to {what} in time")

    def _sweep(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        loop = asyncio.get_running_loop()
        now = loop.time()
        overdue = [t for t, entry in self._pending.items() if entry[2] <= now]
        for token in overdue:
            future, what, _, _ = self._pending.pop(token)
            if not future.done():
                future.set_exception(self._overdue_error(what_text(what)))
            self._settled()
        if self._pending:
            self._arm(loop, min(entry[2] for entry in self._pending.values()))

    def _fail_all(self, error: Callable[[str], Exception] | None = None) -> None:
        # (emptied in place: the transport holds the table, see _ensure_raw_open)
        make_error = error or self._closed_error
        pending = dict(self._pending)
        self._pending.clear()
        resends, self._resends = self._resends, {}
        for timer in resends.values():
            timer.cancel()
        for future, what, _, _ in pending.values():
            if not future.done():
                future.set_exception(make_error(what_text(what)))
            self._settled()

    def connection_closed(self) -> None:
        """The connection closed for good (not by the context): fail what is
        outstanding now, as its deadline would (no answer can come any more)."""
        self._fail_all(self._overdue_error)

    def _closed_error(self, what: str) -> JetStreamError | JetStreamClosedError:
        return JetStreamClosedError(f"the JetStream context closed before {what} was answered")

    async def close(self) -> None:
        """Fail everything outstanding and drop the subscription. Idempotent."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = math.inf
        self._fail_all()
        sub, self._sub = self._sub, None
        if sub is not None:
            sub.unsubscribe_nowait()
        raw, self._raw_sub = self._raw_sub, None
        if raw is not None:
            raw.unsubscribe_nowait()


class AckMux(ReplyMux[PubAck]):
    """Outstanding publish acks, at most ``max_pending`` of them."""

    def __init__(self, transport: NatsTransport, *, max_pending: int) -> None:
        super().__init__(transport, kind="publish ack")
        self.max_pending = max_pending
        self._room_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        # Slots handed to woken waiters that have not registered their publish yet.
        self._reserved = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def _convert(self, msg: NatsMsg, what: str) -> PubAck:
        return parse_pub_ack(msg, what)

    def _describe(self, what: str) -> str:
        return f"the publish to {what!r}"

    def _overdue_error(self, what: str) -> Exception:
        err = super()._overdue_error(f"the publish to {what!r}")
        if isinstance(err, APITimeoutError):
            return APITimeoutError(
                f"no publish ack for {what!r} in time; the message may or may not be stored "
                "(publish with msg_id to retry safely)"
            )
        return err

    def _closed_error(self, what: str) -> JetStreamClosedError:
        return JetStreamClosedError(
            f"closed before the ack for {what!r} arrived; the message may or may not be stored"
        )

    def _settled(self) -> None:
        self._hand_on()
        if not self._pending and not self._reserved:
            self._idle.set()

    def _hand_on(self) -> None:
        """Give a free slot to the longest waiter, reserving it."""
        waiters = self._room_waiters
        while waiters and len(self._pending) + self._reserved < self.max_pending:
            waiter = waiters.popleft()
            if not waiter.done():
                self._reserved += 1
                waiter.set_result(None)

    async def _wait_for_room(self) -> None:
        """Return holding a reserved slot (``_reserved`` counts it)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._room_waiters.append(waiter)
        self._hand_on()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # We were handed a slot but will not use it: pass it on.
                self._reserved -= 1
                self._settled()
            raise

    async def publish(
        self,
        subject: str,
        payload: bytes | bytearray | memoryview,
        headers: Mapping[str, str | list[str]] | None,
        timeout: float,
        *,
        immediate: bool = False,
        retry: tuple[int, float] | None = None,
    ) -> asyncio.Future[PubAck]:
        """Send one message once there is room; return the future of its ack
        (``immediate``: see :meth:`NatsTransport.send`, for a caller that waits
        for the ack at once). A "no responders" answer sends it again, within
        ``timeout``: ``retry`` (attempts, wait) or the defaults."""
        self._check_open()
        validate_publish_subject(subject)
        if self._sub is None:
            await self._ensure_open()
        token, reply = self._next_token()
        # Build (and so validate) the frame before waiting, so that a waiter that
        # is handed a slot cannot fail afterwards and strand the slot.
        frame = self._transport.frame(subject, payload, reply, headers)
        if self._room_waiters or len(self._pending) + self._reserved >= self.max_pending:
            await self._wait_for_room()
            self._reserved -= 1
            if self._closed:  # close() woke us: nothing may be sent any more
                self._settled()
                raise JetStreamClosedError("this JetStream context is closed")
        self._idle.clear()
        resend: Resend = frame
        if retry is not None and retry != (self.retry_attempts, self.retry_wait):
            resend = (frame, *retry)
        return await self._send(token, frame, subject, timeout, immediate=immediate, resend=resend)

    async def wait_idle(self, timeout: float | None) -> None:
        if not self._pending and not self._reserved:
            return
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            raise APITimeoutError(
                f"{len(self._pending)} publish acks still outstanding after {timeout}s"
            ) from None

    async def close(self) -> None:
        self._closed = True
        await super().close()
        # Wake every waiter; each sees the context closed and raises.
        for waiter in self._room_waiters:
            if not waiter.done():
                self._reserved += 1
                waiter.set_result(None)
        self._room_waiters.clear()
        self._idle.set()
