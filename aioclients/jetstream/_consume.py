"""The asyncio driver of pull consumption: ``fetch``, ``next`` and ``consume``.

One :class:`_Puller` drives one :class:`~aioclients.jetstream._protocol._pull.PullBuffer`:
a private inbox subscription whose messages arrive synchronously from the
connection's read loop, one timer (``loop.call_at``) re-armed from the core's
``get_timer()``, and the connection's disconnect/reconnect notifications. The
core decides; this module only moves bytes and wakes the iterator.

Hot path: a user message becomes a :class:`Msg` and is appended to a deque;
the iterator pops it without awaiting and, when the core says the threshold is
crossed, writes the next pull into the connection's outgoing buffer. No task,
timer or future per message.

The one background task, the check that the consumer still exists after a
reconnect (consume) or a pull answered 503 (fetch), belongs to the stream's
:class:`~aioclients._tasks.TaskOwner`: if it fails (a bug, never a JetStream
error: those it handles), iteration ends with a ``JetStreamError`` saying so,
and ``aclose()`` (and ``async with``) cancels it and waits for it to end.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
import json
import logging
import random
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple, Protocol

from aioclients._core._backoff import Backoff
from aioclients._errors import AioClientsError, InvalidArgumentError
from aioclients._tasks import TaskOwner
from aioclients.jetstream._errors import (
    ConsumerDeletedError,
    ConsumerNotFoundError,
    JetStreamClosedError,
    JetStreamError,
    NoHeartbeatError,
    NoMessagesError,
    StreamNotFoundError,
)
from aioclients.jetstream._message import Msg, keep_deliveries, keep_run, message_size
from aioclients.jetstream._models import ConsumerInfo
from aioclients.jetstream._protocol._headers import decode_headers
from aioclients.jetstream._protocol._pull import (
    CheckConsumer,
    Disconnected,
    HeartbeatMissed,
    Mode,
    Pinned,
    PullBuffer,
    PullEnded,
    PullOptions,
    PullRequest,
    Reconnected,
    StatusKind,
    StatusWarning,
    Terminated,
    Unpinned,
)
from aioclients.jetstream._protocol._wire import Frame

if TYPE_CHECKING:
    from aioclients.jetstream._api import JetStreamApi
    from aioclients.jetstream._transport import RawSubscription

__all__ = (
    "BatchStream",
    "ConsumeEvent",
    "ConsumeStatistics",
    "FetchResult",
    "MessageStream",
    "PullTarget",
    "ColumnsSink",
    "RawSink",
    "check_on_event",
)

log = logging.getLogger("aioclients.jetstream.consume")

ConsumeEvent = HeartbeatMissed | Pinned | Unpinned | StatusWarning | Disconnected | Reconnected

#: How long after a deadline (idle heartbeat, fetch) passed the core is asked about it.
#: A loop held up past the deadline (a callback that blocked, a busy machine that did
#: not run the process) finds the server's heartbeats still unread in the socket, and
#: both loops run a due timer before the connection's read loop has parsed what came:
#: deciding at once took a stalled loop for a silent server. The grace lets the read
#: loop catch up first; a miss is reported that much later.
_TIMER_GRACE = 0.05

#: The pause before a fetch sends its pull again after a 503 (times the attempt):
#: a cluster node learns of a consumer just created within moments.
_NO_RESPONDERS_PAUSE = 0.1


class PullTarget(Protocol):
    """The consumer a pull reads (a ``Consumer`` is one): its names, its cached
    config (for the ADR-42 checks) and a fresh look at it (after a reconnect)."""

    @property
    def stream_name(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def cached_info(self) -> ConsumerInfo: ...
    async def info(self) -> ConsumerInfo: ...


def check_on_event(on_event: object) -> None:
    """An ``on_event`` callback must be a plain callable (or ``None``).

    Raises:
        InvalidArgumentError: not callable, or a coroutine function.
    """
    if on_event is not None and not callable(on_event):
        raise InvalidArgumentError("on_event must be a callable taking one event")
    if on_event is not None and inspect.iscoroutinefunction(on_event):
        raise InvalidArgumentError(
            "on_event must be a plain function (it runs in the connection's read loop); "
            "to do async work, hand the event to a queue or task from it"
        )


class ConsumeStatistics(NamedTuple):
    """A snapshot of a fetch or consume."""

    #: messages handed to the caller
    delivered: int
    #: user messages received from the server
    received: int
    #: received and waiting in the buffer
    buffered_messages: int
    buffered_bytes: int
    #: requested from the server and not yet received
    pending_messages: int
    pending_bytes: int
    #: pull requests sent
    pulls: int
    heartbeats_missed: int
    reconnects: int


class _Puller:
    """Shared machinery of :class:`FetchResult` and :class:`MessageStream`."""

    # Slots: more than 30 instance attributes would put them in a plain dict
    # (CPython's shared-key limit), where every read on the hot path is slower.
    # Subclasses add theirs in a __dict__ of their own.
    __slots__ = (
        "__dict__",
        "__weakref__",
        "_api",
        "_batched",
        "_buffer",
        "_consumer",
        "_core",
        "_credit",
        "_draining",
        "_entered",
        "_error",
        "_exists_after_503",
        "_finished",
        "_graced",
        "_granted",
        "_granted_bytes",
        "_inbox",
        "_loop",
        "_on_event",
        "_ready",
        "_received",
        "_received_bytes",
        "_reconnects",
        "_recovery",
        "_runs",
        "_started",
        "_stopped",
        "_sub",
        "_subject",
        "_taken",
        "_taken_bytes",
        "_tasks",
        "_timer",
        "_timer_when",
        "_transport",
        "_waiters",
    )

    #: ``_on_raw`` takes subject and reply undecoded (Msg decodes them if read);
    #: consume() only: the inboxes of fetches stay as they were (str)
    _raw_as_bytes = False
    #: how errors and logs name what this reads ("pull on stream/consumer")
    _kind = "pull on"
    #: what a missed idle heartbeat makes it do, for the log line
    _on_missed_heartbeat = "pulling again"

    def __init__(
        self,
        api: JetStreamApi,
        consumer: PullTarget,
        options: PullOptions,
        mode: Mode,
        on_event: Callable[[ConsumeEvent], object] | None = None,
    ) -> None:
        check_on_event(on_event)
        _check_priority_options(consumer, options, mode)
        self._consumer = consumer
        self._api = api
        self._transport = api.transport
        self._core = PullBuffer(options, mode)
        self._on_event = on_event
        self._buffer: collections.deque[Msg] = collections.deque()
        # The buffered messages not granted (see _grant), in order, as runs of
        # [messages, bytes] as they came (a read's deliveries, one message alone): a
        # take or a grant counts whole runs out with no step per message, and only
        # the run it ends inside by the sizes of some of its messages
        # (message_size(msg): a Msg does not keep its size).
        self._runs: collections.deque[list[int]] = collections.deque()
        # Consume without a priority group: the core hears of messages received
        # and taken in batches, at the latest when a pull may be due (_credit).
        self._batched = mode is Mode.CONSUME and options.group is None
        self._received = self._received_bytes = 0  # received, not yet told to the core
        self._taken = self._taken_bytes = 0  # taken, not yet told to the core
        self._credit = 0  # takes left before the core must hear of them
        # Granted to the iterator's fast path (see MessageStream._grant): the first
        # _ready buffered messages may be handed out with no other step; _granted
        # (of _granted_bytes) were granted, and are counted as taken by _fold.
        self._ready = self._granted = self._granted_bytes = 0
        self._subject = api.subject(f"CONSUMER.MSG.NEXT.{consumer.stream_name}.{consumer.name}")
        self._sub: RawSubscription | None = None
        self._inbox = ""
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._error: BaseException | None = None
        self._started = False
        self._stopped = False  # stop(): end at once, buffered messages dropped
        self._finished = False  # resources released
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = 0.0
        self._graced = -1.0  # the deadline whose expiry waits out _TIMER_GRACE
        self._loop: asyncio.AbstractEventLoop | None = None
        self._recovery: asyncio.Task[None] | None = None
        self._tasks = TaskOwner(
            f"{self._kind} {consumer.stream_name}/{consumer.name}", self._task_failed
        )
        self._reconnects = 0
        self._exists_after_503 = False  # a fetch's check found the consumer
        # drain(): the buffer may still grow until the UNSUB round trip is done.
        self._draining = False
        self._entered = False  # inside ``async with``

    # -- lifecycle --

    async def _start(self) -> None:
        if self._started:
            return
        self._started = True
        api = self._api
        api.check_open()
        loop = self._loop = asyncio.get_running_loop()
        self._inbox = self._transport.new_inbox()
        self._sub = await self._subscribe(self._inbox)
        api.add_listener(self)
        self._core.start(loop.time())
        self._process_events()

    async def _subscribe(self, inbox: str) -> RawSubscription:
        return await self._transport.subscribe_raw(inbox, self._on_raw, as_bytes=self._raw_as_bytes)

    def _release(self) -> None:
        """Drop the subscription, the timer and the listener (idempotent, sync)."""
        self._fold()  # stopped or failed: no message leaves by the fast path any more
        if self._finished:
            return
        self._finished = True
        self._cancel_timer()
        self._api.remove_listener(self)
        if self._sub is not None:
            try:
                self._sub.unsubscribe_nowait()
            except AioClientsError as exc:
                log.debug("unsubscribe of %s: %s", self._inbox, exc)
        if self._recovery is not None:
            self._recovery.cancel()
        self._wake()

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._core.stop()
        self._release()

    def _task_failed(self, exc: BaseException) -> None:
        """The background task died of an error it does not handle: end the
        iteration with it (as a ``JetStreamError``), raised where the user waits."""
        if isinstance(exc, AioClientsError):
            error: BaseException = exc
        else:
            error = JetStreamError(
                f"{self._kind} {self._consumer.stream_name}/{self._consumer.name}: a background "
                f"task failed: {type(exc).__name__}: {exc}"
            )
            error.__cause__ = exc
        self._fail(error)

    # -- receive path (called from the connection's read loop) --

    def _on_raw(
        self, subject: str | bytes, reply: str | bytes, data: bytes, header: bytes | None
    ) -> None:
        # subject and reply: bytes from our client (subscribe_raw(as_bytes=True)),
        # str from another nats-py client.
        if header is None:
            size = len(subject) + len(reply) + len(data)
        elif header[8:9] == b" ":
            assert self._loop is not None
            self._on_status(header, self._loop.time())
            return
        else:
            size = len(subject) + len(reply) + len(header) + len(data)
        self._buffer.append(Msg(self._api, subject, reply, data, header))
        self._runs.append([1, size])
        if self._batched:
            self._received += 1
            self._received_bytes += size
        else:
            core = self._core
            assert self._loop is not None
            pin: str | None = None
            if header is not None and core.options.group is not None and b"Nats-Pin-Id" in header:
                value = decode_headers(header).get("Nats-Pin-Id")
                pin = value[0] if isinstance(value, list) else value
            core.receive_message(size, self._loop.time(), pin)
            if core._events:
                self._process_events()
        waiters = self._waiters
        if waiters:
            waiter = waiters.popleft()  # one message, one waiting task
            if not waiter.done():
                waiter.set_result(None)

    def _fold(self) -> None:
        """End the grant of the iterator's fast path (see ``MessageStream._grant``):
        the messages it handed out count as taken, as if each had been counted."""
        granted = self._granted
        if not granted:
            return
        ready = self._ready
        size = self._granted_bytes
        if ready:  # the rest stays buffered, for the next take, as a run of its own
            rest = sum(map(message_size, itertools.islice(self._buffer, ready)))
            self._runs.appendleft([ready, rest])
            size -= rest
            self._ready = 0
        self._granted = self._granted_bytes = 0
        self._taken += granted - ready
        self._taken_bytes += size

    def _count_out(self, count: int) -> int:
        """Take the first ``count`` buffered messages (none granted) out of the runs,
        before they leave the buffer; returns their bytes. Whole runs are counted
        out at once; a run that ends inside is split, by the sizes of its messages
        on the shorter side of the split."""
        runs = self._runs
        size = 0
        at = 0  # where runs[0] begins in the buffer
        while True:
            run = runs[0]
            messages, total = run
            if messages > count:
                break
            runs.popleft()
            size += total
            count -= messages
            if not count:
                return size
            at += messages
        if count <= messages - count:
            part = sum(map(message_size, itertools.islice(self._buffer, at, at + count)))
        else:
            rest = itertools.islice(self._buffer, at + count, at + messages)
            part = total - sum(map(message_size, rest))
        run[0] = messages - count
        run[1] = total - part
        return size + part

    def _sync(self) -> None:
        """Tell the core of the messages received and taken since it last heard;
        send the pull that may be due. Before anything else asks the core."""
        self._fold()
        core = self._core
        count = self._received
        if count:
            assert self._loop is not None
            core.receive_batch(count, self._received_bytes, self._loop.time())
            self._received = self._received_bytes = 0
        count = self._taken
        if count:
            assert self._loop is not None
            pull = core.take_batch(count, self._taken_bytes, self._loop.time())
            self._taken = self._taken_bytes = 0
            if pull is not None:
                self._send_pull(pull)
                self._rearm()
        self._credit = 0  # the next take asks the core again

    def _settle(self) -> None:
        """The takes reached the credit: tell the core, and learn the next credit."""
        self._sync()
        if self._batched:
            self._credit = self._core.takes_before_pull()

    def _on_status(self, header: bytes, now: float) -> None:
        self._sync()
        end = header.find(b"\r\n")
        line = header[9 : end if end >= 0 else len(header)].decode("utf-8", "replace")
        code_text, _, description = line.partition(" ")
        try:
            code = int(code_text)
        except ValueError:
            log.warning("ignoring a malformed status line %r on %s", line, self._inbox)
            return
        pending_messages = pending_bytes = None
        if b"Nats-Pending-" in header:
            headers = decode_headers(header)
            pending_messages = _int_header(headers.get("Nats-Pending-Messages"))
            pending_bytes = _int_header(headers.get("Nats-Pending-Bytes"))
        kind = self._core.receive_status(
            code, description.strip(), now, pending_messages, pending_bytes
        )
        self._process_events()
        if kind is StatusKind.NO_RESPONDERS and self._core.mode is Mode.CONSUME:
            # Nobody serves our pulls: find out whether the consumer still exists.
            self._start_recovery()
        self._wake()

    def _process_events(self) -> None:
        for event in self._core.events():
            if isinstance(event, PullRequest):
                self._send_pull(event)
            elif isinstance(event, Terminated):
                self._fail(
                    _terminal_error(
                        self._consumer,
                        event,
                        self._core.options.max_bytes,
                        self._exists_after_503,
                    )
                )
            elif isinstance(event, CheckConsumer):
                self._start_check(event)
            elif isinstance(event, PullEnded):
                if event.reason == "heartbeat":
                    self._error = NoHeartbeatError(
                        "no idle heartbeat from the server within twice idle_heartbeat; "
                        "check the connection and the server",
                        code=None,
                    )
                self._wake()
            else:
                self._notify(event)
        self._rearm()

    def _send_pull(self, pull: PullRequest) -> None:
        body = json.dumps(pull.to_json(), separators=(",", ":")).encode()
        transport = self._transport
        try:
            frame = transport.frame(self._subject, body, self._inbox, None)
            # To the socket at once when nothing is queued before it: a pull is due
            # while the iterator hands out buffered messages, and queued it would
            # wait for the flusher's turn, after the buffer is drained, while the
            # server may have run out of requested messages to send.
            if not transport.write_now(frame):
                transport.send_nowait(frame)
        except AioClientsError as exc:
            # Disconnected with a full buffer, or closing: the reconnect (or the
            # heartbeat check) sends a fresh pull.
            log.debug("pull on %s not sent: %s", self._subject, exc)

    def _notify(self, event: ConsumeEvent) -> None:
        callback = self._on_event
        if isinstance(event, HeartbeatMissed):
            log.warning(
                "missed idle heartbeats on %s; %s", self._consumer, self._on_missed_heartbeat
            )
        elif isinstance(event, StatusWarning):
            log.warning("%s %s: %d %s", self._kind, self._consumer, event.code, event.description)
        if callback is None:
            return
        try:
            result = callback(event)
        except Exception:
            log.exception("on_event callback failed for %r", event)
            return
        if inspect.iscoroutine(result):
            result.close()
            log.error(
                "on_event returned a coroutine, which is never awaited; pass a plain function"
            )

    def _wake(self) -> None:
        """Wake every waiting task (the stream ended, failed or changed state)."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    # -- the timer --

    def _rearm(self) -> None:
        when = self._core.get_timer()
        if when is None or self._finished:
            self._cancel_timer()
            return
        if self._timer is not None and self._timer_when <= when:
            return  # fires first; handle_timer pushes it out
        self._cancel_timer()
        assert self._loop is not None
        self._timer = self._loop.call_at(when, self._on_timer)
        self._timer_when = when

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        assert self._loop is not None
        if self._graced != self._timer_when:
            # First expiry of this deadline: decide after the grace (see _TIMER_GRACE).
            # _timer_when stays the deadline, so _rearm keeps this timer unless the
            # core's next deadline comes earlier.
            self._graced = self._timer_when
            self._timer = self._loop.call_later(_TIMER_GRACE, self._on_timer)
            return
        self._sync()
        self._core.handle_timer(self._loop.time())
        self._process_events()

    # -- connection notifications (the request layer calls these) --

    def connection_lost(self) -> None:
        if self._api.closed:
            self.context_closed()
            return
        self._core.disconnected()
        self._sync()  # after: no pull now, it would wait in the reconnect buffer
        self._process_events()

    def connection_restored(self) -> None:
        if self._finished or self._core.finished:
            return
        self._sync()
        if self._core.mode is Mode.FETCH:
            assert self._loop is not None
            self._core.reconnected(self._loop.time())
            self._process_events()
            return
        self._start_recovery()

    def _start_recovery(self) -> None:
        if self._finished or self._core.finished or self._tasks.closed:
            return
        if self._recovery is None or self._recovery.done():
            self._recovery = self._tasks.start(self._recover(), name="check after reconnect")

    def _start_check(self, event: CheckConsumer) -> None:
        if self._finished or self._tasks.closed:
            return
        # A fetch has no reconnect check, so the check after a 503 takes its slot
        # (cancelled by _release).
        self._recovery = self._tasks.start(
            self._check_consumer(event), name="check after no responders"
        )

    async def _check_consumer(self, event: CheckConsumer) -> None:
        """A fetch's pull met no responders before any message: a consumer just
        created may not be known yet to the node of this connection. Look it up,
        within the time the pull had left; if it exists, pull again after a short
        pause (the core decides whether there is time and tries left)."""
        loop = self._loop
        assert loop is not None
        try:
            left = event.deadline - loop.time()
            if left <= 0:
                raise asyncio.TimeoutError
            await asyncio.wait_for(self._consumer.info(), left)
        except (ConsumerNotFoundError, StreamNotFoundError):
            self._exists_after_503 = False  # deleted since an earlier check
            self._core.terminate(event.code, event.description)
        except JetStreamClosedError:
            self.context_closed()
            return
        except (AioClientsError, asyncio.TimeoutError) as exc:
            # Not known to be there either: the 503 stands.
            log.debug("check of %s after no responders: %r", self._consumer, exc)
            self._core.terminate(event.code, event.description)
        else:
            self._exists_after_503 = True
            pause = _NO_RESPONDERS_PAUSE * (self._core.no_responder_retries + 1)
            await asyncio.sleep(min(pause, max(0.0, (event.deadline - loop.time()) / 2)))
            self._sync()
            self._core.consumer_exists(loop.time())
        self._process_events()
        self._wake()

    def context_closed(self) -> None:
        self._fail(JetStreamClosedError("the JetStream context or its connection was closed"))

    async def _recover(self) -> None:
        """ADR-37 "Server reconnects": check the consumer still exists, then pull."""
        backoff = Backoff(initial=0.1, maximum=2.0, jitter=0.2, rng=random.Random())
        while not self._finished:
            try:
                await self._consumer.info()
            except (ConsumerNotFoundError, StreamNotFoundError):
                # A deleted stream takes its consumers with it.
                self._core.terminate(409, "Consumer Deleted")
                self._process_events()
                return
            except JetStreamClosedError:
                self.context_closed()
                return
            except AioClientsError as exc:
                # JetStream may need a moment after the server comes back.
                log.info("consumer %s not reachable yet (%s); retrying", self._consumer, exc)
                await asyncio.sleep(backoff.next_delay())
                continue
            assert self._loop is not None
            self._reconnects += 1
            self._sync()
            self._core.reconnected(self._loop.time())
            self._process_events()
            return

    # -- iteration --

    async def _wait(self) -> None:
        assert self._loop is not None
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if not waiter.done():  # cancelled: leave the queue
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass

    def _owned_iteration(self) -> AsyncIterator[Msg]:
        return _OwnedIterator(self)

    def _abandon(self) -> None:
        """A bare ``async for`` ended: stop pulling and release everything (sync)."""
        self._stopped = True
        self._core.stop()
        self._release()

    def _statistics(self) -> ConsumeStatistics:
        self._sync()
        core = self._core
        return ConsumeStatistics(
            delivered=core.delivered,
            received=core.received,
            buffered_messages=core.buffered_messages,
            buffered_bytes=core.buffered_bytes,
            pending_messages=core.pending_messages,
            pending_bytes=core.pending_bytes,
            pulls=core.pulls,
            heartbeats_missed=core.heartbeats_missed,
            reconnects=self._reconnects,
        )

    async def _next_message(self) -> Msg:
        self._fold()
        while True:
            if self._stopped:
                raise StopAsyncIteration
            if self._error is not None and not isinstance(self._error, NoHeartbeatError):
                self._release()
                raise self._error
            buffer = self._buffer
            if buffer:
                size = self._count_out(1)
                msg = buffer.popleft()
                self._taken += 1
                self._taken_bytes += size
                if self._taken >= self._credit:
                    self._settle()
                return msg
            self._sync()
            if self._core.finished and not self._draining:
                self._release()
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            if not self._started:
                await self._start()
                continue
            await self._wait()


class _OwnedIterator:
    """The iterator of an ``async for`` outside ``async with``.

    When the loop is left (``break``, an exception, the end), CPython drops the
    iterator at once and ``__del__`` stops the stream right there, before the
    code after the loop can publish anything a still-open pull would take.
    """

    __slots__ = ("_puller",)

    def __init__(self, puller: _Puller) -> None:
        self._puller = puller

    def __aiter__(self) -> _OwnedIterator:
        return self

    async def __anext__(self) -> Msg:
        try:
            return await self._puller._next_message()
        except BaseException:
            self._puller._abandon()
            raise

    def __del__(self) -> None:
        try:
            self._puller._abandon()
        except Exception:  # the loop or connection may be gone already
            log.debug("releasing an abandoned iteration failed", exc_info=True)


class MessageStream(_Puller):
    """Messages of a ``consume()`` call: an async iterator that keeps a buffer
    filled by overlapping pulls (ADR-37 "Consume").

    ``async with consumer.consume() as messages: async for msg in messages``.
    """

    _raw_as_bytes = True
    #: whether the iterator's fast path may be granted messages (see _grant)
    _grants = True

    def __init__(
        self,
        api: JetStreamApi,
        consumer: PullTarget,
        options: PullOptions,
        on_event: Callable[[ConsumeEvent], object] | None = None,
    ) -> None:
        super().__init__(api, consumer, options, Mode.CONSUME, on_event)

    def __repr__(self) -> str:
        return f"<MessageStream {self._consumer.stream_name}/{self._consumer.name}>"

    async def _subscribe(self, inbox: str) -> RawSubscription:
        if not self._batched:  # a priority group: the core hears of each message (pins)
            return await super()._subscribe(inbox)
        return await self._transport.subscribe_runs(inbox, self._on_run, self._on_deliveries)

    def _on_deliveries(
        self,
        subjects: Sequence[bytes],
        replies: Sequence[bytes],
        payloads: Sequence[bytes],
    ) -> None:
        """A run that filled a whole read, as columns (see ``subscribe_runs``): what
        :meth:`_on_run` does with a run without a status, with no frame per message."""
        total = keep_deliveries(self._api, subjects, replies, payloads, self._buffer.extend)
        count = len(payloads)
        self._runs.append([count, total])
        self._received += count
        self._received_bytes += total
        _wake(self._waiters, count)

    def _on_run(self, frames: list[Frame]) -> None:
        """A run of messages from the read loop (see ``subscribe_runs``): each
        becomes a :class:`Msg` in one loop, with no Python call per message."""
        for frame in frames:
            header = frame[4]
            if header is not None and header[8:9] == b" ":
                # A status among them: every message the way it comes alone, in order
                # (one that cannot be handled is lost alone, as when it came alone).
                for _, subject, _, reply, header, data in frames:
                    if self._finished:
                        return  # released meanwhile: the rest is no longer ours
                    try:
                        self._on_raw(subject, reply, data, header)
                    except Exception:
                        _log_run_failure(subject)
                return
        total = keep_run(self._api, frames, self._buffer.extend)
        count = len(frames)
        self._runs.append([count, total])
        self._received += count
        self._received_bytes += total
        _wake(self._waiters, count)

    @property
    def pin_id(self) -> str | None:
        """The pin id the server gave this client (ADR-42 pinned_client), if pinned."""
        return self._core.pin_id

    def statistics(self) -> ConsumeStatistics:
        """Counts of what was pulled, received, buffered and delivered."""
        return self._statistics()

    def stop(self) -> None:
        """End the iteration at once; buffered messages are dropped (unacked, so
        the server redelivers them after ``ack_wait``)."""
        self._stopped = True
        self._core.stop()
        self._release()

    async def drain(self) -> None:
        """Stop pulling and unsubscribe; messages already received are still
        delivered, then the iteration ends."""
        if self._finished or self._core.finished:
            return
        self._core.drain()
        self._cancel_timer()
        if self._recovery is not None:
            self._recovery.cancel()
        self._draining = True
        try:
            if self._sub is not None:
                await self._sub.drain(self._api.timeout)
        finally:
            self._draining = False
            self._wake()

    async def aclose(self) -> None:
        """Stop and release the subscription (what ``async with`` does on exit);
        a background check still running is cancelled and waited for."""
        self.stop()
        await self._tasks.aclose()

    async def __aenter__(self) -> MessageStream:
        self._entered = True
        await self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[Msg]:
        # Inside ``async with`` the context manager owns the cleanup; a bare
        # ``async for`` gets a generator that stops the stream when the loop is
        # left (break, exception, or garbage collection of the iterator).
        return self if self._entered else self._owned_iteration()

    async def __anext__(self) -> Msg:
        # The hot path, inlined: a message granted by _take is returned at once;
        # a buffered one through _take, without another coroutine; everything else
        # (waiting, ending, errors) is _next_message's. _take_buffered is the same
        # fast path for telemetry: keep the two in step.
        ready = self._ready
        if ready:
            self._ready = ready - 1
            return self._buffer.popleft()
        msg = self._take()
        if msg is not None:
            return msg
        return await self._next_message()

    def _take_buffered(self) -> Msg | None:
        """:meth:`__anext__`'s fast path as a plain call: the next buffered message,
        or None where ``__anext__`` would wait, end or raise. For
        ``aioclients.telemetry``, whose receive span then needs no second coroutine
        per message; ``__anext__`` keeps its own inlined copy, so that the path
        without telemetry is not one call longer."""
        ready = self._ready
        if ready:
            self._ready = ready - 1
            return self._buffer.popleft()
        return self._take()

    def _take(self) -> Msg | None:
        """Take the next buffered message and count it, or None where the iterator
        would wait, end or raise; then grant the messages that follow."""
        buffer = self._buffer
        if buffer and not self._stopped and self._error is None:
            self._fold()
            size = self._count_out(1)
            msg = buffer.popleft()
            self._taken += 1
            self._taken_bytes += size
            if self._taken >= self._credit:
                self._settle()
            self._grant()
            return msg
        return None

    def _grant(self) -> None:
        """Let the fast path of the iterator hand out the next buffered messages
        with no step per message: as many as are buffered, short of the take that
        reaches the credit (that one goes through :meth:`_take`, which tells the
        core). What the old per-message step did is done by :meth:`_fold`, at the
        next take, sync or release: the counts end up the same. Nothing grants
        while stopped or failed, and a release ends the grant."""
        grant = min(len(self._buffer), self._credit - self._taken - 1)
        if grant > 0 and self._grants:
            self._ready = self._granted = grant
            self._granted_bytes = self._count_out(grant)


#: ``sink(frames)`` of a :class:`BatchStream`: a run of deliveries (no status
#: message among them), in order, each ``(MSG, subject, sid, reply, header_or_None,
#: payload)`` with subject and reply the bytes on the wire (see
#: ``NatsTransport.subscribe_runs``).
RawSink = Callable[[list[Frame]], None]
#: ``columns(subjects, replies, headers, payloads)`` of a :class:`BatchStream`: the
#: same as its ``sink`` for a run the read loop read as columns (no status among
#: them; ``headers`` items ``None`` where a message has none), with no frame per
#: message.
ColumnsSink = Callable[
    [Sequence[bytes], Sequence[bytes], Sequence["bytes | None"], Sequence[bytes]], None
]


class BatchStream(MessageStream):
    """A ``consume()`` whose messages never become :class:`Msg` here: they go to
    ``sink`` straight from the read loop, a run at a time (as many as one socket
    read brought, up to a status message), and the sink keeps whatever it wants
    of them; the pull core is told of them in batches, by :meth:`next_batch`.

    The base of ordered consumers (and through them of KV ``watch`` and
    ``keys``): per message, only the sink's own work is done, with no Python call
    per message on the way. No priority groups.
    """

    def __init__(
        self,
        api: JetStreamApi,
        consumer: PullTarget,
        options: PullOptions,
        sink: RawSink,
        on_event: Callable[[ConsumeEvent], object] | None = None,
        columns: ColumnsSink | None = None,
    ) -> None:
        super().__init__(api, consumer, options, on_event)
        if options.group is not None:
            raise InvalidArgumentError("a batch stream does not take a priority group")
        self._sink = sink
        self._columns = columns
        self._by_bytes = options.max_bytes is not None
        # received, not yet told to the core
        self._count = 0
        self._bytes = 0
        # told to the core as received, not yet taken
        self._held = 0
        self._held_bytes = 0

    async def _subscribe(self, inbox: str) -> RawSubscription:
        # Paced: the sink keeps what a read brings until the iterator takes it.
        if self._columns is None:
            return await self._transport.subscribe_runs(inbox, self._on_run, paced=True)
        return await self._transport.subscribe_runs(
            inbox, self._on_run, self._on_plain_columns, self._on_columns, paced=True
        )

    def _on_plain_columns(
        self, subjects: Sequence[bytes], replies: Sequence[bytes], payloads: Sequence[bytes]
    ) -> None:
        """A run read as columns, none with headers (see ``subscribe_runs``)."""
        self._on_columns(subjects, replies, (None,) * len(payloads), payloads)

    def _on_columns(
        self,
        subjects: Sequence[bytes],
        replies: Sequence[bytes],
        headers: Sequence[bytes | None],
        payloads: Sequence[bytes],
    ) -> None:
        """A run read as columns, no status among them (see ``subscribe_runs``):
        what :meth:`_take_run` does with it as frames."""
        count = len(payloads)
        self._count += count
        if self._by_bytes:
            size = sum(map(len, subjects)) + sum(map(len, replies)) + sum(map(len, payloads))
            self._bytes += size + sum(map(len, filter(None, headers)))
        assert self._columns is not None
        self._columns(subjects, replies, headers, payloads)
        _wake(self._waiters, count)

    def _on_run(self, frames: list[Frame]) -> None:
        for frame in frames:
            header = frame[4]
            if header is not None and header[8:9] == b" ":
                self._on_mixed_run(frames)  # a status among them: the slower way
                return
        self._take_run(frames)

    def _take_run(self, frames: list[Frame]) -> None:
        """Deliveries, none of them a status message."""
        count = len(frames)
        self._count += count
        if self._by_bytes:
            # Sizes matter only to pulls by max_bytes (the buffer here is transient).
            size = 0
            for _, subject, _, reply, header, data in frames:
                size += len(subject) + len(reply) + len(data)
                if header is not None:
                    size += len(header)
            self._bytes += size
        self._sink(frames)
        _wake(self._waiters, count)

    def _on_mixed_run(self, frames: list[Frame]) -> None:
        """A run with status messages (heartbeats, the end of a pull): each status
        is handled in its place, after the deliveries before it."""
        start = 0
        for at, frame in enumerate(frames):
            header = frame[4]
            if header is None or header[8:9] != b" ":
                continue
            if at > start:
                self._take_run(frames[start:at])
            start = at + 1
            if self._finished:
                return  # released meanwhile: the rest is no longer ours
            assert self._loop is not None
            self._flush_received()
            try:
                self._on_status(header, self._loop.time())
            except Exception:
                # Lost alone, as when it came alone: the deliveries after it are kept.
                _log_run_failure(frame[1])
            if self._finished:
                return
        if start < len(frames):
            self._take_run(frames[start:])

    def fail(self, error: BaseException) -> None:
        """End the stream with ``error`` (raised by :meth:`next_batch`); for the sink,
        which sees what the stream cannot (e.g. a delivery that is no JetStream one)."""
        self._fail(error)

    def _flush_received(self) -> None:
        count = self._count
        if count:
            assert self._loop is not None
            size = self._bytes
            self._count = self._bytes = 0
            self._core.receive_batch(count, size, self._loop.time())
            self._held += count
            self._held_bytes += size

    def _on_timer(self) -> None:
        # The heartbeat check must see the messages that came meanwhile.
        self._flush_received()
        super()._on_timer()

    def _statistics(self) -> ConsumeStatistics:
        self._flush_received()
        return super()._statistics()

    async def next_batch(self) -> int:
        """Wait until messages have come (given to the sink already); returns how
        many, after telling the core (which may pull more).

        Raises:
            StopAsyncIteration: the stream ended (stopped, drained, or failed
                without an error to raise).
        """
        while True:
            if self._stopped:
                raise StopAsyncIteration
            if self._error is not None and not isinstance(self._error, NoHeartbeatError):
                self._release()
                raise self._error
            self._flush_received()
            count = self._held
            if count:
                size = self._held_bytes
                self._held = self._held_bytes = 0
                assert self._loop is not None
                pull = self._core.take_batch(count, size, self._loop.time())
                if pull is not None:
                    self._send_pull(pull)
                    self._rearm()
                return count
            if self._core.finished and not self._draining:
                self._release()
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            if not self._started:
                await self._start()
                continue
            await self._wait()

    async def __anext__(self) -> Msg:
        raise TypeError("a BatchStream is read with next_batch(), not iterated")


class FetchResult(_Puller):
    """The messages of one pull (ADR-37 "Fetch"): an async iterator and an async
    context manager. Iteration ends when the batch (or the bytes) are delivered
    or the pull expires; terminal statuses raise."""

    def __init__(self, api: JetStreamApi, consumer: PullTarget, options: PullOptions) -> None:
        super().__init__(api, consumer, options, Mode.FETCH)

    def __repr__(self) -> str:
        return f"<FetchResult {self._consumer.stream_name}/{self._consumer.name}>"

    def statistics(self) -> ConsumeStatistics:
        return self._statistics()

    async def aclose(self) -> None:
        """Stop and release the subscription; undelivered messages are dropped."""
        self._stopped = True
        self._core.stop()
        self._release()
        await self._tasks.aclose()

    async def __aenter__(self) -> FetchResult:
        self._entered = True
        await self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[Msg]:
        return self if self._entered else self._owned_iteration()

    async def __anext__(self) -> Msg:
        return await self._next_message()

    async def next_or_raise(self) -> Msg:
        """The first message, or ``NoMessagesError`` if the pull ends empty."""
        try:
            return await self._next_message()
        except StopAsyncIteration:
            raise NoMessagesError(
                f"no message from {self._consumer.stream_name}/{self._consumer.name} "
                f"within {self._core.options.expires:g}s",
                code=None,
            ) from None
        finally:
            await self.aclose()


def _log_run_failure(subject: bytes | str) -> None:
    """One message of a run could not be handled (logged as the read loop logs a
    message handler that fails); the run goes on with the next."""
    log.exception("message handler for %r failed", subject)


def _wake(waiters: collections.deque[asyncio.Future[None]], count: int) -> None:
    """Wake up to ``count`` waiting tasks: one message each."""
    while waiters and count:
        count -= 1
        waiter = waiters.popleft()
        if not waiter.done():
            waiter.set_result(None)


def _int_header(value: object) -> int | None:
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, str):
        try:
            return max(0, int(value))
        except ValueError:
            return None
    return None


def _terminal_error(
    consumer: PullTarget, event: Terminated, max_bytes: int | None, exists: bool = False
) -> JetStreamError:
    where = f"{consumer.stream_name}/{consumer.name}"
    if event.code == 409 and event.description.lower().startswith("consumer deleted"):
        return ConsumerDeletedError(f"consumer {where} was deleted", code=409)
    if event.code == 409 and event.description.lower().startswith("consumer is push based"):
        return JetStreamError(
            f"consumer {where} is a push consumer; pull consumption needs a pull consumer "
            "(no deliver_subject)",
            code=409,
        )
    if event.code == 503 and exists:
        return JetStreamError(
            f"no responders for pulls on {where} although the consumer exists "
            "(a cluster node may not know of it yet, or this account may not pull from it)",
            code=503,
        )
    if event.code == 503:
        return ConsumerDeletedError(
            f"no responders for pulls on {where}: the consumer was deleted "
            "(or JetStream is not available)",
            code=503,
        )
    if event.code == 409 and event.description.lower().startswith("message size exceeds"):
        return JetStreamError(
            f"the next message of {where} is larger than max_bytes="
            f"{max_bytes}; raise max_bytes so one message fits",
            code=409,
        )
    if event.description.lower().startswith("exceeded"):
        return JetStreamError(
            f"the server refused the pull on {where}: {event.code} {event.description}; "
            "ask for less (max_messages, max_bytes, expires) or raise the consumer's limits "
            "(max_batch, max_bytes, max_expires, max_waiting)",
            code=event.code,
        )
    return JetStreamError(
        f"pull on {where} refused: {event.code} {event.description}", code=event.code
    )


def _check_priority_options(consumer: PullTarget, options: PullOptions, mode: Mode) -> None:
    """ADR-42 checks against the consumer's (cached) configuration."""
    config = consumer.cached_info.config
    groups = config.get("priority_groups") or []
    policy = config.get("priority_policy")
    where = f"{consumer.stream_name}/{consumer.name}"
    if groups and policy and policy != "none":
        if options.group is None:
            raise InvalidArgumentError(
                f"consumer {where} has priority groups {groups}; pass group= with one of them"
            )
        if options.group not in groups:
            raise InvalidArgumentError(
                f"group {options.group!r} is not a priority group of {where} ({groups})"
            )
        if policy == "pinned_client" and mode is Mode.FETCH:
            raise InvalidArgumentError(
                f"consumer {where} uses the pinned_client policy, which fetch() and next() "
                "do not support (ADR-42); use consume()"
            )
    elif options.group is not None:
        raise InvalidArgumentError(
            f"consumer {where} has no priority groups; drop group= or configure "
            "priority_groups and priority_policy on the consumer"
        )
