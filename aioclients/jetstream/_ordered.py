"""The asyncio driver of ordered consumers (NATS ADR-17).

An :class:`OrderedConsumer` owns one :class:`~aioclients.jetstream._protocol._ordered.OrderedCursor`
and, at any time, at most one ephemeral consumer on the server. Its ``consume()``
and ``fetch()`` run our ordinary pull machinery (``BatchStream`` /
``FetchResult``) on that consumer and put every delivered message through the
cursor: in order, it is yielded; a gap, a missed heartbeat, a reconnect or the
consumer's deletion make the driver drop the consumer (deleting it on the
server in the background), create a fresh one at the last stream sequence + 1
and report :class:`ConsumerReset` through ``on_event``.

The background deletions of replaced consumers belong to the ordered consumer's
:class:`~aioclients._tasks.TaskOwner`; ``close()`` and a stream's ``aclose()``
wait for them (each is bounded by its request's timeout), and a deletion that
fails with anything but a JetStream error (which it logs: the server expires the
consumer) ends the current iteration with a ``JetStreamError``.

Hot path (``consume()``): in the connection's read loop, one ``bytes.split`` of
the ack subject as it came (subject and reply are never decoded here), one
cursor call and one append per message (a :class:`Msg`, or what KV's
``watch``/``keys`` make of it); the iterator pops from a deque and
tells the pull core of the messages taken once per batch, not per message.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from aioclients._core import redact_text
from aioclients._errors import AioClientsError, InvalidArgumentError, RemoteProtocolError
from aioclients._tasks import TaskOwner
from aioclients.jetstream._api import JetStreamApi
from aioclients.jetstream._consume import (
    BatchStream,
    ColumnsSink,
    ConsumeEvent,
    ConsumeStatistics,
    FetchResult,
    RawSink,
    check_on_event,
)
from aioclients.jetstream._consumer import Consumer, upsert_consumer
from aioclients.jetstream._errors import (
    ConsumerDeletedError,
    JetStreamClosedError,
    JetStreamError,
    MessageNotFoundError,
    NoHeartbeatError,
    NoMessagesError,
    StreamNotFoundError,
)
from aioclients.jetstream._message import Msg, make_msgs
from aioclients.jetstream._protocol._names import validate_filter_subject, validate_stream_name
from aioclients.jetstream._protocol._ordered import (
    ConsumerReset,
    CursorState,
    Delivery,
    OrderedCursor,
    ack_sequences,
    ordered_consumer_config,
)
from aioclients.jetstream._protocol._pull import (
    MIN_EXPIRES,
    Disconnected,
    HeartbeatMissed,
    PullOptions,
    Reconnected,
    consume_options,
    fetch_options,
)
from aioclients.jetstream._protocol._snapshot import SnapshotScan
from aioclients.jetstream._protocol._wire import Frame

__all__ = (
    "ORDERED_HEARTBEAT",
    "ItemMaker",
    "OrderedConsumeEvent",
    "OrderedConsumer",
    "OrderedFetch",
    "OrderedItems",
    "OrderedMessageStream",
    "RunMaker",
    "SnapshotReader",
    "SnapshotStallGuard",
    "initial_pending",
    "open_ordered_consumer",
    "owned_iteration",
    "ordered_consume_options",
)

log = logging.getLogger("aioclients.jetstream.ordered")

T = TypeVar("T")

OrderedConsumeEvent = ConsumeEvent | ConsumerReset
#: Default idle heartbeat of an ordered consume, seconds (two missed: reset).
ORDERED_HEARTBEAT = 5.0
#: A stream that is not found during a reset may be a cluster electing a leader.
_STREAM_NOT_FOUND_RETRIES = 10


class OrderedConsumer:
    """An ordered consumer (ADR-17): gapless, in-order delivery with no acks.

    Obtain one from ``stream.ordered_consumer(...)`` or ``js.ordered_consumer(stream, ...)``.
    ``next``, ``fetch`` and ``consume`` work as on :class:`Consumer`; one of them at
    a time. Messages need no ack (``ack_policy none``).

    Attributes:
        stream_name: the stream it reads.
        resets: how many times the server-side consumer was replaced.
    """

    def __init__(
        self,
        api: JetStreamApi,
        stream_name: str,
        config: dict[str, Any],
        *,
        on_event: Callable[[OrderedConsumeEvent], object] | None = None,
    ) -> None:
        check_on_event(on_event)
        self._api = api
        self.stream_name = stream_name
        self._cursor = OrderedCursor(config)
        self._consumer: Consumer | None = None
        self._on_event = on_event
        # The deletions of replaced consumers (never closed: the ordered consumer
        # is used again after close(); its deletions are waited for instead).
        self._tasks = TaskOwner(f"ordered consumer on {stream_name}", self._task_failed)
        #: what a failed background task left, raised by the current iteration
        self._failure: JetStreamError | None = None
        #: the consume() in progress (its buffer may hold messages not yielded yet)
        self._active: OrderedMessageStream | None = None

    def __repr__(self) -> str:
        return f"<OrderedConsumer {self.stream_name} at {self._cursor.next_seq}>"

    @property
    def name(self) -> str | None:
        """The name of the server-side consumer in use (it changes on every reset)."""
        return self._consumer.name if self._consumer is not None else None

    @property
    def resets(self) -> int:
        return self._cursor.resets

    @property
    def generation(self) -> int:
        """How many server-side consumers were created so far (1 for the first)."""
        return self._cursor.generation

    def restart_on_reset(self) -> None:
        """Replacements start over at the consumer's own start rather than after
        the last message yielded (``last_per_subject`` listings of KV keys)."""
        self._cursor.restart = True

    def resume_after(self, stream_seq: int) -> None:
        """Replacements resume at ``stream_seq + 1`` again (ends ``restart_on_reset``)."""
        self._cursor.resume_after(stream_seq)

    @property
    def last_stream_seq(self) -> int:
        """The stream sequence of the last message yielded (0 before any)."""
        active = self._active
        if active is not None:
            first = active._first_unyielded()
            if first is not None:
                return first - 1
        return self._cursor.stream_seq

    # -- the server-side consumer --

    async def _ensure(self) -> tuple[Consumer, int]:
        """The current consumer, created (with retries on transient errors) if needed."""
        cursor = self._cursor
        if self._consumer is not None and cursor.state is CursorState.RUNNING:
            return self._consumer, cursor.generation
        loop = asyncio.get_running_loop()
        not_found = 0
        # The first consumer is tried for the context's timeout, then the error is
        # raised (a watch, keys() or next() on a server that cannot create it ends,
        # as nats.go's Watch does); a replacement is tried for as long as it takes.
        give_up = loop.time() + self._api.timeout if cursor.generation == 0 else math.inf
        while True:
            self._api.check_open()
            try:
                consumer = await upsert_consumer(
                    self._api, self.stream_name, cursor.consumer_config(), "create"
                )
            except (InvalidArgumentError, JetStreamClosedError):
                raise
            except StreamNotFoundError:
                not_found += 1
                if cursor.generation == 0 or not_found > _STREAM_NOT_FOUND_RETRIES:
                    raise
                self._backoff_log("stream not found")
            except JetStreamError as exc:
                if exc.code == 400 or loop.time() >= give_up:
                    raise  # the config is refused (retrying does not help), or no time left
                self._backoff_log(str(exc))
            except AioClientsError as exc:
                if loop.time() >= give_up:
                    raise
                self._backoff_log(str(exc))
            else:
                self._consumer = consumer
                return consumer, cursor.created()
            when = cursor.create_failed(loop.time())
            await asyncio.sleep(max(0.0, when - loop.time()))
            cursor.handle_timer(loop.time())

    def _backoff_log(self, why: str) -> None:
        log.info(
            "ordered consumer on %s: cannot create yet (%s); retrying",
            self.stream_name,
            redact_text(why),
        )

    def _reset(self, reason: str) -> ConsumerReset | None:
        """Give up the current consumer; the next read creates a fresh one."""
        event = self._cursor.reset(reason)
        self._drop_consumer()
        return event

    def _release(self) -> None:
        """Done for now (not a reset): delete the consumer; the next read resumes."""
        self._cursor.release()
        self._drop_consumer()

    def _drop_consumer(self) -> None:
        old, self._consumer = self._consumer, None
        if old is None or self._api.closed:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop any more: the server expires it
            return
        self._tasks.start(self._delete(old), name=f"delete {old.name}")

    def _task_failed(self, exc: BaseException) -> None:
        """A deletion died of an error it does not handle: the iteration ends with it."""
        error = JetStreamError(
            f"ordered consumer on {self.stream_name}: a background task failed: "
            f"{type(exc).__name__}: {exc}"
        )
        error.__cause__ = exc
        self._failure = error
        active = self._active
        if active is not None:
            active._fail_with(error)

    def _close_later(self, stream: BatchStream) -> None:
        """Close a stopped pull stream (its background task, if one still runs) as
        a task of ours, so that :meth:`_settle` waits for it too."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop any more: nothing runs
            return
        self._tasks.start(stream.aclose(), name="close a replaced pull")

    async def _settle(self) -> None:
        """Wait for the deletions in flight (each bounded by its request's timeout)."""
        tasks = self._tasks.tasks
        if tasks:
            await asyncio.wait(tasks, timeout=self._tasks.close_timeout)

    async def _delete(self, consumer: Consumer) -> None:
        try:
            await self._api.request(
                f"CONSUMER.DELETE.{consumer.stream_name}.{consumer.name}",
                timeout=min(2.0, self._api.timeout),
            )
        except AioClientsError as exc:  # gone already, or the server is away: it expires
            log.debug("deleting replaced consumer %s: %s", consumer, redact_text(str(exc)))

    def _report(self, event: OrderedConsumeEvent, callback: Callable[..., object] | None) -> None:
        if isinstance(event, ConsumerReset):
            log.info(
                "ordered consumer on %s reset (%s); resuming at stream sequence %d",
                self.stream_name,
                event.reason,
                event.next_seq,
            )
        if callback is None:
            return
        try:
            callback(event)
        except Exception:
            log.exception("on_event callback failed for %r", event)

    async def close(self) -> None:
        """Delete the server-side consumer (the ordered consumer can be used again:
        the next read creates a fresh one where this one stopped)."""
        self._release()
        await self._settle()

    # -- reading --

    async def next(self, *, expires: float = 30.0, idle_heartbeat: float | None = None) -> Msg:
        """The next message in stream order.

        Raises:
            NoMessagesError: none within ``expires`` seconds (a ``TimeoutError``).
        """
        options = fetch_options(max_messages=1, expires=expires, idle_heartbeat=idle_heartbeat)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + options.expires
        while True:
            # The first pull gets all of ``expires`` (it is at least MIN_EXPIRES, but a
            # moment has passed since the deadline was set); a pull after a reset gets
            # what is left, when that is still a pull's minimum.
            batch = OrderedFetch(self, options)
            async with batch:
                async for msg in batch:
                    return msg
            if not batch.reset:
                break
            remaining = deadline - loop.time()
            if remaining < MIN_EXPIRES:
                break
            heartbeat = options.idle_heartbeat
            if heartbeat is not None and heartbeat > remaining / 2:
                heartbeat = None
            options = fetch_options(max_messages=1, expires=remaining, idle_heartbeat=heartbeat)
        raise NoMessagesError(
            f"no message from the ordered consumer on {self.stream_name} within {expires:g}s",
            code=None,
        )

    def fetch(
        self,
        max_messages: int | None = None,
        *,
        max_bytes: int | None = None,
        expires: float = 30.0,
        idle_heartbeat: float | None = None,
    ) -> OrderedFetch:
        """One pull for up to ``max_messages`` messages or ``max_bytes`` bytes.

        The iteration ends early when a reset is needed (the next ``fetch``
        resumes where this one stopped).
        """
        options = fetch_options(
            max_messages=max_messages,
            max_bytes=max_bytes,
            expires=expires,
            idle_heartbeat=idle_heartbeat,
        )
        return OrderedFetch(self, options)

    def consume(
        self,
        *,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        expires: float = 30.0,
        idle_heartbeat: float | None = None,
        threshold_messages: int | None = None,
        threshold_bytes: int | None = None,
        on_event: Callable[[OrderedConsumeEvent], object] | None = None,
    ) -> OrderedMessageStream:
        """Consume continuously, in stream order, across resets.

        ``async with oc.consume() as messages: async for msg in messages``.
        ``on_event`` (a plain callable) receives ``ConsumerReset`` besides the
        events of ``Consumer.consume``; it defaults to the ordered consumer's own.
        ``idle_heartbeat`` defaults to 5 s (at most half of ``expires``): a
        consumer deleted under a waiting pull is noticed after two missed beats.
        """
        options = ordered_consume_options(
            max_messages=max_messages,
            max_bytes=max_bytes,
            expires=expires,
            idle_heartbeat=idle_heartbeat,
            threshold_messages=threshold_messages,
            threshold_bytes=threshold_bytes,
        )
        check_on_event(on_event)
        return OrderedMessageStream(self, options, on_event or self._on_event)


def ordered_consume_options(
    *,
    max_messages: int | None = None,
    max_bytes: int | None = None,
    expires: float = 30.0,
    idle_heartbeat: float | None = None,
    threshold_messages: int | None = None,
    threshold_bytes: int | None = None,
) -> PullOptions:
    """The pull options of an ordered consume (see ``OrderedConsumer.consume``).

    Raises:
        InvalidArgumentError: conflicting or out-of-range options.
    """
    if idle_heartbeat is None and isinstance(expires, (int, float)):
        # A deleted consumer (or a lost message at the tail) shows only as
        # silence: listen for it sooner than a plain consume does.
        idle_heartbeat = min(ORDERED_HEARTBEAT, max(0.5, expires / 2))
    return consume_options(
        max_messages=max_messages,
        max_bytes=max_bytes,
        expires=expires,
        idle_heartbeat=idle_heartbeat,
        threshold_messages=threshold_messages,
        threshold_bytes=threshold_bytes,
    )


#: ``make(subject, reply, data, header, stream_seq, pending, timestamp_ns)``: the
#: item an in-order message becomes (``None``: nothing to yield for it); ``reply``
#: is the ack subject's bytes, as they came.
ItemMaker = Callable[[str, bytes, bytes, "bytes | None", int, int, int], Any]
#: ``make_run(subjects, replies, headers, datas, stream_seqs)``: what a run of
#: in-order messages becomes at once, as ``(items, their stream sequences, used)``:
#: exactly what ``make`` would give for each of the first ``used`` messages in turn
#: (at least one; subjects and ack subjects as the bytes on the wire), the rest
#: then taken one by one by ``make``; or ``None``, having changed nothing, when it
#: cannot tell at once: ``make`` then takes them all. It must not reset the consumer.
RunMaker = Callable[
    [
        Sequence[bytes],
        Sequence[bytes],
        "Sequence[bytes | None]",
        Sequence[bytes],
        Sequence[int],
    ],
    "tuple[list[Any], Sequence[int], int] | None",
]


class OrderedMessageStream:
    """Messages of ``OrderedConsumer.consume()``: in stream order, none skipped.

    Deliveries are judged by the cursor in the connection's read loop, as they
    arrive (see :class:`BatchStream`): an in-order one is kept (as a :class:`Msg`,
    or as what ``make`` turns it into), the rest dropped, and a gap starts the
    reset at once. Iteration hands out what was kept, in order.
    """

    def __init__(
        self,
        oc: OrderedConsumer,
        options: PullOptions,
        on_event: Callable[[OrderedConsumeEvent], object] | None,
        make: ItemMaker | None = None,
        *,
        meta: bool = True,
        make_run: RunMaker | None = None,
    ) -> None:
        self._oc = oc
        self._options = options
        self._on_event = on_event
        self._make = make
        self._make_run = make_run
        #: ``make`` is given the pending count and timestamp (``False``: 0 and 0,
        #: the ack subject's numbers left unread)
        self._meta = meta
        self._inner: BatchStream | None = None
        self._generation = 0
        self._stopped = False
        self._entered = False
        self._closed_statistics: ConsumeStatistics | None = None
        #: kept by the read loop, not yet handed out, and their stream sequences as
        #: runs (a read's ``range`` as the cursor judged it: no int per message)
        self._incoming: list[Any] = []
        self._incoming_seqs: list[Sequence[int]] = []
        #: handed out next, in order (the stream sequences of the whole batch, in runs)
        self._ready: collections.deque[Any] = collections.deque()
        self._ready_seqs: list[Sequence[int]] = []
        #: told the generation of each server-side consumer it reads (OrderedItems)
        self._on_open: Callable[[int], object] | None = None

    def __repr__(self) -> str:
        return f"<OrderedMessageStream {self._oc.stream_name}>"

    async def _open(self) -> None:
        consumer, generation = await self._oc._ensure()
        self._oc._active = self
        if self._on_open is not None:
            self._on_open(generation)  # before any delivery of this consumer
        sink, columns = self._sink(generation)
        inner = BatchStream(
            self._oc._api, consumer, self._options, sink, self._inner_event, columns
        )
        await inner.__aenter__()
        if self._stopped:
            inner.stop()
            return
        self._inner = inner
        self._generation = generation

    def _sink(self, generation: int) -> tuple[RawSink, ColumnsSink]:
        """The read loop's work for one generation of consumer: a run of
        deliveries at a time (see ``BatchStream``), as frames or as columns, one
        loop with no Python call per message but the cursor's judgement (and
        ``make``'s)."""
        cursor = self._oc._cursor
        api = self._oc._api
        make = self._make
        meta = self._meta
        incoming = self._incoming
        seqs = self._incoming_seqs
        make_run = self._make_run
        deliver = cursor.deliver
        judge_run = cursor.judge_run
        took_run = cursor.took_run
        yield_ = Delivery.YIELD
        reset = Delivery.RESET
        keep_all = incoming.extend
        keep_seqs = seqs.append

        def sink(frames: list[Frame]) -> None:
            if frames:
                _, subjects, _, replies, headers, datas = zip(*frames, strict=True)
                columns(subjects, replies, headers, datas)

        def columns(
            subjects: Sequence[bytes],
            replies: Sequence[bytes],
            headers: Sequence[bytes | None],
            datas: Sequence[bytes],
        ) -> None:
            # Subject and reply as the bytes on the wire: never decoded here (a Msg
            # decodes them when read).
            if make is None or make_run is not None:
                # The usual run, every delivery in order: judged at once, and its
                # messages (or items) made with no Python loop here.
                in_order = judge_run(generation, replies)
                if in_order is not None:
                    if make_run is None:
                        took_run(in_order)
                        keep_all(make_msgs(api, subjects, replies, headers, datas))
                        keep_seqs(in_order)
                        return
                    try:
                        made = make_run(subjects, replies, headers, datas, in_order)
                    except Exception:  # a bug: one by one, each failure in its place
                        log.debug("a run maker failed; making one by one", exc_info=True)
                        made = None
                    if made is not None:
                        items, item_seqs, used = made
                        if used == len(in_order):
                            took_run(in_order)
                            keep_all(items)
                            keep_seqs(item_seqs)
                            return
                        # Its head made at once; the rest one by one, below.
                        took_run(in_order[:used])
                        keep_all(items)
                        keep_seqs(item_seqs)
                        subjects, replies = subjects[used:], replies[used:]
                        headers, datas = headers[used:], datas[used:]
            keep = incoming.append
            one_by_one: list[int] = []
            seqs.append(one_by_one)
            keep_seq = one_by_one.append
            for subject, reply, header, data in zip(subjects, replies, headers, datas, strict=True):
                tokens = reply.split(b".")
                if len(tokens) == 9 and tokens[0] == b"$JS":
                    sseq_text, cseq_text = tokens[5], tokens[6]
                elif len(tokens) >= 11 and tokens[0] == b"$JS":
                    sseq_text, cseq_text = tokens[7], tokens[8]
                else:
                    self._fail(reply)
                    return  # the stream has failed: the rest is dropped with it
                try:
                    sseq = int(sseq_text)
                    verdict = deliver(generation, int(cseq_text), sseq)
                except ValueError:
                    self._fail(reply)
                    return
                if verdict is yield_:
                    if make is None:
                        keep(Msg(api, subject, reply, data, header))
                        keep_seq(sseq)
                        continue
                    try:
                        if not meta:
                            pending = ts = 0
                        elif len(tokens) == 9:
                            pending, ts = int(tokens[8]), int(tokens[7])
                        else:
                            pending, ts = int(tokens[10]), int(tokens[9])
                        item = make(
                            subject.decode("utf-8", "replace"),
                            reply,
                            data,
                            header,
                            sseq,
                            pending,
                            ts,
                        )
                    except Exception as exc:
                        # A message this reader cannot read (a malformed header block,
                        # an ack subject with bad numbers) ends the iteration with the
                        # reason: swallowed by the read loop, it would leave the reader
                        # waiting.
                        self._fail_unreadable(sseq, exc)
                        return
                    if item is not None:
                        keep(item)
                        keep_seq(sseq)
                elif verdict is reset:
                    self._oc._report(cursor.gap_event(), self._on_event)
                    self._oc._drop_consumer()
                    self._stop_inner_soon()

        return sink, columns

    def _fail(self, reply: bytes) -> None:
        inner = self._inner
        if inner is not None:
            text = reply.decode("utf-8", "replace")
            inner.fail(RemoteProtocolError(f"not a JetStream ack subject: {text!r}"))

    def _fail_unreadable(self, sseq: int, exc: Exception) -> None:
        stream = self._oc.stream_name
        error = RemoteProtocolError(
            f"cannot read the message at stream sequence {sseq} of {stream!r}: {exc}"
        )
        error.__cause__ = exc
        self._fail_with(error)

    def _fail_with(self, error: BaseException) -> None:
        """End the iteration with ``error`` (the pull stream in use raises it)."""
        inner = self._inner
        if inner is not None:
            inner.fail(error)

    def _inner_event(self, event: ConsumeEvent) -> None:
        """Events of the current pull stream (in the connection's read loop)."""
        self._oc._report(event, self._on_event)
        if isinstance(event, HeartbeatMissed):
            self._request_reset("heartbeat")
        elif isinstance(event, (Disconnected, Reconnected)):
            # Messages may be lost with the connection (ADR-17): replace the
            # consumer rather than wait for the old one, whose server may be
            # the one that went away (its info would never answer).
            self._request_reset("reconnect")

    def _request_reset(self, reason: str) -> None:
        event = self._oc._reset(reason)
        if event is not None:
            self._oc._report(event, self._on_event)
        self._stop_inner_soon()

    def _stop_inner_soon(self) -> None:
        inner = self._inner
        if inner is not None:
            # Not from inside the inner stream's event processing: on the next turn.
            asyncio.get_running_loop().call_soon(inner.stop)

    def _drop_inner(self) -> None:
        inner, self._inner = self._inner, None
        if inner is not None:
            inner.stop()
            self._oc._close_later(inner)

    def _take_incoming(self) -> bool:
        incoming = self._incoming
        if not incoming:
            self._incoming_seqs.clear()  # runs of none kept (all left out by make)
            return False
        self._ready.extend(incoming)
        incoming.clear()
        self._ready_seqs[:] = self._incoming_seqs
        self._incoming_seqs.clear()
        return True

    def _first_unyielded(self) -> int | None:
        """The stream sequence of the first message kept but not handed out yet."""
        ready = self._ready
        if ready:
            runs = self._ready_seqs
            at = sum(map(len, runs)) - len(ready)  # handed out so far
            for run in runs:
                if at < len(run):
                    return run[at]
                at -= len(run)
        for run in self._incoming_seqs:
            if run:
                return run[0]
        return None

    def __aiter__(self) -> AsyncIterator[Msg]:
        # Inside ``async with`` the context manager cleans up; a bare ``async for``
        # gets a generator that stops the stream when the loop is left.
        return self if self._entered else owned_iteration(self, self.stop)

    async def __anext__(self) -> Any:
        ready = self._ready
        if ready:
            return ready.popleft()
        await self._fill()
        return ready.popleft()

    async def _fill(self, *, any_batch: bool = False) -> None:
        """Wait until ``_ready`` holds something (with ``any_batch``, also return
        once messages came that were all left out by ``make``).

        Raises:
            StopAsyncIteration: stopped (or drained and all handed out).
        """
        cursor = self._oc._cursor
        while True:
            if self._take_incoming():
                return
            if self._oc._failure is not None:
                self._stopped = True
                raise self._oc._failure
            inner = self._inner
            if inner is None:
                if self._stopped:
                    raise StopAsyncIteration
                await self._open()
                continue
            try:
                await inner.next_batch()
                if any_batch:
                    self._take_incoming()
                    return
            except StopAsyncIteration:
                if self._take_incoming():
                    return
                if self._stopped:
                    self._inner = None
                    raise
                # Stopped for a reset (or ended unexpectedly: reset anyway).
                if cursor.state is CursorState.RUNNING:
                    self._request_reset("ended")
                self._drop_inner()
                continue
            except ConsumerDeletedError:
                self._drop_inner()
                self._request_reset("deleted")
                continue

    def stop(self) -> None:
        """End the iteration at once and delete the consumer (in the background)."""
        self._stopped = True
        inner = self._inner
        if inner is not None:
            self._closed_statistics = inner.statistics()
        self._drop_inner()
        first = self._first_unyielded()
        self._incoming.clear()
        self._incoming_seqs.clear()
        self._ready.clear()
        self._oc._release()
        if first is not None:
            # Kept but never handed out: the next consumer starts at them.
            self._oc._cursor.rewind(first - 1)
        if self._oc._active is self:
            self._oc._active = None

    async def drain(self) -> None:
        """No new pulls; buffered messages are still delivered, then iteration ends."""
        self._stopped = True
        if self._inner is not None:
            await self._inner.drain()

    async def aclose(self) -> None:
        """Stop, and wait (bounded) for the server-side consumer's deletion and for
        the pull stream's background task."""
        self.stop()
        await self._oc._settle()

    def statistics(self) -> ConsumeStatistics | None:
        """The current pull stream's statistics (``None`` before the first).

        ``delivered`` counts the messages taken from the pull stream, which
        include those still waiting in this stream's own buffer.
        """
        if self._inner is not None:
            return self._inner.statistics()
        return self._closed_statistics

    @property
    def resets(self) -> int:
        return self._oc.resets

    async def __aenter__(self) -> OrderedMessageStream:
        self._entered = True
        await self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class OrderedItems(OrderedMessageStream):
    """An ordered consume whose deliveries become items in the read loop (what
    ``make`` returns), read a batch at a time: the base of KV's ``keys`` and
    ``watch``.

    ``meta=False``: ``make`` is given 0 for the pending count and the timestamp
    (a reader that uses neither saves their parsing per delivery). ``make_run``
    (a :data:`RunMaker`): the same work for a whole run of in-order deliveries at
    once, where it can tell.

    Read it with ``await items.fill()`` (wait until ``ready`` holds something)
    and ``ready.popleft()``; ``incoming`` holds what the read loop kept and
    ``fill`` has not moved to ``ready`` yet. ``on_event`` defaults to the
    ordered consumer's own. ``on_open(generation)`` is called each time it starts
    reading a server-side consumer, before that consumer's first delivery.
    """

    def __init__(
        self,
        oc: OrderedConsumer,
        options: PullOptions,
        make: ItemMaker,
        on_event: Callable[[OrderedConsumeEvent], object] | None = None,
        *,
        on_open: Callable[[int], object] | None = None,
        meta: bool = True,
        make_run: RunMaker | None = None,
    ) -> None:
        super().__init__(oc, options, on_event or oc._on_event, make, meta=meta, make_run=make_run)
        self._on_open = on_open
        #: handed out next, in order (the same deque as the base class's)
        self.ready = self._ready
        #: kept by the read loop, not yet moved to ``ready``
        self.incoming = self._incoming

    def request_reset(self, reason: str) -> None:
        """Replace the server-side consumer (from ``make``, in the read loop)."""
        self._request_reset(reason)

    #: wait until ``ready`` holds something (``any_batch=True``: or until messages
    #: came that ``make`` all left out). Raises ``StopAsyncIteration`` at the end.
    fill = OrderedMessageStream._fill


async def owned_iteration(
    items: AsyncIterator[T], close: Callable[[], Awaitable[object] | object]
) -> AsyncGenerator[T, None]:
    """``items`` for a bare ``async for`` (no ``async with``): ``close()`` (awaited
    when it gives an awaitable) runs when the loop is left, by its end, a break,
    an exception or the iterator's collection."""
    try:
        while True:
            try:
                item = await items.__anext__()
            except StopAsyncIteration:
                return
            yield item
    finally:
        done = close()
        if inspect.isawaitable(done):
            await done


class OrderedFetch:
    """Messages of one ``OrderedConsumer.fetch()``; ends early when a reset is due
    (``reset`` is then true)."""

    def __init__(self, oc: OrderedConsumer, options: PullOptions) -> None:
        self._oc = oc
        self._options = options
        self._inner: FetchResult | None = None
        self._generation = 0
        self._done = False
        self.reset = False

    async def _open(self) -> None:
        if self._oc._failure is not None:
            # A deletion of an earlier fetch's consumer failed (a reset ends a fetch).
            self._done = True
            raise self._oc._failure
        consumer, generation = await self._oc._ensure()
        inner = FetchResult(self._oc._api, consumer, self._options)
        await inner.__aenter__()
        self._inner = inner
        self._generation = generation

    def _end_with_reset(self, reason: str) -> None:
        self.reset = True
        event = self._oc._reset(reason)
        if event is not None:
            self._oc._report(event, self._oc._on_event)

    def __aiter__(self) -> OrderedFetch:
        return self

    async def __anext__(self) -> Msg:
        cursor = self._oc._cursor
        while True:
            if self._done:
                raise StopAsyncIteration
            if self._inner is None:
                await self._open()
            assert self._inner is not None
            try:
                msg = await self._inner.__anext__()
            except StopAsyncIteration:
                await self.aclose()
                raise
            except (ConsumerDeletedError, NoHeartbeatError) as exc:
                await self.aclose()
                reason = "deleted" if isinstance(exc, ConsumerDeletedError) else "heartbeat"
                self._end_with_reset(reason)
                raise StopAsyncIteration from None
            sseq, cseq, _, _ = ack_sequences(msg.reply)
            verdict = cursor.deliver(self._generation, cseq, sseq)
            if verdict is Delivery.YIELD:
                return msg
            if verdict is Delivery.RESET:
                await self.aclose()
                self.reset = True
                self._oc._report(cursor.gap_event(), self._oc._on_event)
                self._oc._drop_consumer()
                raise StopAsyncIteration

    async def aclose(self) -> None:
        self._done = True
        if self._inner is not None:
            await self._inner.aclose()

    async def __aenter__(self) -> OrderedFetch:
        await self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def open_ordered_consumer(
    api: JetStreamApi,
    stream: str,
    *,
    filter_subjects: list[str] | None = None,
    deliver_policy: str = "all",
    opt_start_seq: int | None = None,
    opt_start_time: datetime | None = None,
    headers_only: bool = False,
    on_event: Callable[[OrderedConsumeEvent], object] | None = None,
) -> OrderedConsumer:
    """An ordered consumer on ``stream`` with its first server-side consumer made
    (see ``JetStream.ordered_consumer``).

    Raises:
        StreamNotFoundError: no such stream.
        InvalidArgumentError: a bad start or filter.
    """
    validate_stream_name(stream)
    config = ordered_consumer_config(
        filter_subjects=filter_subjects,
        deliver_policy=deliver_policy,
        opt_start_seq=opt_start_seq,
        opt_start_time=opt_start_time,
        headers_only=headers_only,
    )
    for s in config.get("filter_subjects") or [config.get("filter_subject") or ">"]:
        validate_filter_subject(s)
    oc = OrderedConsumer(api, stream, config, on_event=on_event)
    await oc._ensure()
    return oc


def initial_pending(oc: OrderedConsumer) -> int:
    """How many messages the ordered consumer's current server-side consumer had
    pending when it was created (0 without one)."""
    consumer = oc._consumer
    return consumer.cached_info.num_pending if consumer is not None else 0


class SnapshotStallGuard:
    """Ends a snapshot scan whose remaining messages vanished while it read them
    (see ``SnapshotScan.stalled``): when nothing was delivered for the scan's
    ``stall_after`` seconds it asks the consumer's info, and if the consumer has
    nothing left to give it calls ``on_stalled`` (which ends the listing, or the
    watch's initial values). The one timer is the scan's; a look is one task,
    owned here and cancelled by :meth:`aclose`.
    """

    def __init__(
        self,
        api: JetStreamApi,
        oc: OrderedConsumer,
        scan: SnapshotScan,
        subjects: list[str],
        on_stalled: Callable[[], Awaitable[None] | None],
        on_stuck: Callable[[str], None] | None = None,
    ) -> None:
        self._api = api
        self._subjects = subjects
        self._oc = oc
        self._scan = scan
        self._on_stalled = on_stalled
        self._on_stuck = on_stuck
        self._tasks = TaskOwner(f"snapshot scan of {oc.stream_name}", None)
        self._handle: asyncio.TimerHandle | None = None
        self._closed = False

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._scan.start_timer(loop.time())
        self._arm()

    def _arm(self) -> None:
        at = self._scan.get_timer()
        if at is None or self._closed:
            return
        self._handle = asyncio.get_running_loop().call_at(at, self._fire)

    def _fire(self) -> None:
        self._handle = None
        scan = self._scan
        name = self._oc.name
        if scan.handle_timer(asyncio.get_running_loop().time()) and name is not None:
            self._tasks.start(self._look(scan.consumers, name), name="snapshot stall check")
        else:
            self._arm()

    async def _first_left(self, seq: int) -> int | None:
        """The first stream sequence at or after ``seq`` holding a message of the
        scan's filters (``None``: none)."""
        stream = self._oc.stream_name
        found: int | None = None
        for subject in self._subjects:
            try:
                answer = await self._api.request(
                    f"STREAM.MSG.GET.{stream}", {"seq": seq, "next_by_subj": subject}
                )
            except MessageNotFoundError:
                continue
            message = answer.get("message")
            at = message.get("seq") if isinstance(message, dict) else None
            if not isinstance(at, int):
                raise RemoteProtocolError(f"a message of {stream!r} without a sequence")
            found = at if found is None else min(found, at)
        return found

    async def _look(self, consumer: int, name: str) -> None:
        scan = self._scan
        try:
            info = await self._api.consumer_info(self._oc.stream_name, name)
            suspected = scan.stall_suspected(
                consumer, info.num_pending, info.delivered.consumer_seq
            )
            first_left = await self._first_left(scan.resume_from) if suspected else None
        except AioClientsError as exc:  # replaced meanwhile, a reconnect: look again later
            log.debug("snapshot scan of %s: no answer (%s)", self._oc.stream_name, exc)
        else:
            if suspected and scan.stalled(consumer, first_left):
                log.info(
                    "snapshot scan of %s ended before sequence %d: the rest of its "
                    "messages were removed while it read them",
                    self._oc.stream_name,
                    self._scan.last_seq,
                )
                ended = self._on_stalled()
                if ended is not None:
                    await ended
                return
            if self._on_stuck is not None and scan.stuck(
                consumer, info.num_pending, info.num_waiting, info.delivered.consumer_seq
            ):
                log.info(
                    "snapshot scan of %s: the server sends nothing while %d messages "
                    "are pending; replacing its consumer",
                    self._oc.stream_name,
                    info.num_pending,
                )
                self._on_stuck("stuck")
        self._arm()

    async def aclose(self) -> None:
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        await self._tasks.aclose()


class SnapshotReader:
    """Reads what a snapshot listing's ``items`` make, a batch at a time, until
    its ``scan`` is over, under a :class:`SnapshotStallGuard` (which ends the
    listing when the rest of the snapshot vanished, and replaces a consumer the
    server leaves stuck): ``async with SnapshotReader(...) as reader:`` then
    ``await reader.next_batch()`` until it gives ``None``."""

    def __init__(
        self, api: JetStreamApi, scan: SnapshotScan, filter_subjects: list[str], items: OrderedItems
    ) -> None:
        self._items = items
        self._scan = scan
        self._guard = SnapshotStallGuard(
            api, items._oc, scan, filter_subjects, items.drain, items.request_reset
        )
        self._over = False

    async def __aenter__(self) -> SnapshotReader:
        await self._items.__aenter__()
        self._guard.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._guard.aclose()
        finally:
            await self._items.__aexit__(exc_type, exc, tb)

    async def next_batch(self) -> list[Any] | None:
        """The next items made (``None``: the listing is over)."""
        items = self._items
        ready = items.ready
        while not self._over:
            try:
                await items.fill(any_batch=True)
            except StopAsyncIteration:
                self._over = True
                break
            batch = list(ready)
            ready.clear()
            if self._scan.done and not items.incoming:
                self._over = True
            if batch:
                return batch
        return None
