"""A subscription to one stream partition: the Subscribe stream's driver.

Theory of operation. ``Client.subscribe()`` returns a :class:`Subscription`;
``async with`` opens the Subscribe stream on the partition leader (a pooled
connection) and returns only after the broker's first, empty message, which
confirms the subscription (liftbridge client guide, "Subscribe Implementation").
Reading is pull-based: ``__anext__`` reads the next message from the stream,
so a slow consumer holds messages back through gRPC flow control, never in an
unbounded queue.

When the stream breaks with UNAVAILABLE (broker gone) or the broker says it is
no longer the leader, the pure :class:`Resubscriber` decides when to try again
(random 10-500 ms waits within ``resubscribe_wait_time``) and from where
(``last_offset + 1``); offsets at or below the last delivered one are dropped,
so the consumer sees each offset once, in order. Any other error ends the
subscription with the mapped error; reaching the stop position ends it with
``StopAsyncIteration``.

Owns: the Subscribe stream's life (open, confirm, read, end) and what each way
it ends means. It takes the broker layer (``_brokers.Brokers``) for the pooled
connection, the metadata and the pause between the first open's attempts
(``Brokers.jitter``): which broker is asked and when one is dropped is the
broker layer's rule; when a lost stream tries again is the ``Resubscriber``'s.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import grpc.aio

from aioclients._core import redact_text, redact_url
from aioclients._tasks import wait_within
from aioclients.liftbridge._brokers import Brokers
from aioclients.liftbridge._errors import (
    LiftbridgeClosedError,
    LiftbridgeConnectError,
    LiftbridgeError,
    LiftbridgeServerError,
    LiftbridgeTimeoutError,
    NoSuchPartitionError,
    PartitionPausedError,
    ReadonlyPartitionError,
    SegmentDeletedError,
    StreamDeletedError,
    SubscriptionLostError,
)
from aioclients.liftbridge._io._grpc import is_connection_failure, map_rpc_error
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._protocol._args import build_subscribe_request, to_nanoseconds
from aioclients.liftbridge._protocol._resubscribe import Resubscriber
from aioclients.liftbridge._protocol._types import Message

__all__ = ("Subscription", "build_subscribe_request", "to_nanoseconds")

log = logging.getLogger("aioclients.liftbridge.subscription")


def _task_cancelling() -> bool:
    """Whether the current task itself is being cancelled (always assumed before 3.11)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return True if cancelling is None else bool(cancelling())


def _paused_answer(code: grpc.StatusCode, details: str) -> bool:
    """Whether a Subscribe refused at once means "the partition is paused".

    A paused partition's log is closed and the broker has no paused check in
    Subscribe: it fails to open a reader. Liftbridge 1.9 answers INTERNAL
    "Failed to create stream reader: segment has been closed" (or "... commit log
    closed"), or FAILED_PRECONDITION "commit log was closed"; with a start or stop
    time, INTERNAL "Failed to lookup offset for timestamp: failed to find log
    segment for timestamp: segment has been closed" (the lookup comes first).
    """
    text = details.lower()
    if code is grpc.StatusCode.INTERNAL:
        return ("stream reader" in text or "lookup offset for timestamp" in text) and (
            "segment has been closed" in text or "commit log closed" in text
        )
    return code is grpc.StatusCode.FAILED_PRECONDITION and "commit log was closed" in text


def _cleaner_answer(code: grpc.StatusCode, details: str) -> bool:
    """Whether a "paused" answer may instead mean "the cleaner is at work".

    While a partition's cleaner deletes or compacts segments, Liftbridge 1.9 opens
    new readers on the old segment list and answers INTERNAL "Failed to create
    stream reader: segment has been closed" too. Compaction rewrites every sealed
    segment at each cleaner run: on a stream compacted every 100 ms most
    subscribes can get this answer.
    """
    return code is grpc.StatusCode.INTERNAL and "segment has been closed" in details.lower()


#: ambiguous "paused" answers taken for the cleaner, when the partition's metadata says
#: paused (Liftbridge 1.9 keeps saying so once a partition was paused), before giving up
_CLEANER_RETRIES = 3
#: how long an open keeps asking again while the cleaner closes segments (not paused)
_CLEANER_WAIT = 30.0


class _Retry(Exception):
    """Internal: the attempt failed in a way worth retrying (not leader, unavailable)."""


class _CleanerBusy(_Retry):
    """Internal: the broker answered "segment has been closed" on a partition that is
    not paused: the cleaner is at work; asked again (not counted as a failed attempt)."""


class Subscription:
    """An open (or about to open) subscription; use ``async with`` then ``async for``.

    Attributes:
        stream, partition: what it reads.
        last_offset: the offset of the last message delivered, or None.
    """

    def __init__(
        self, brokers: Brokers, request: pb.SubscribeRequest, *, resubscribe_wait_time: float
    ) -> None:
        self._brokers = brokers
        self._request = request
        self.stream = request.stream
        self.partition = request.partition
        self._res = Resubscriber(
            wait_time=resubscribe_wait_time,
            rng=brokers.rng,
            start_offset=request.startOffset if request.startPosition == pb.OFFSET else None,
        )
        self._call: Any = None
        self._address: str | None = None
        self._channel: grpc.aio.Channel | None = None
        self._opened = False
        self._closed = False
        self._ended = False
        self._error: BaseException | None = None
        self._stop_offset = request.stopOffset if request.stopPosition == pb.STOP_OFFSET else None
        self._has_stop = request.stopPosition != pb.STOP_ON_CANCEL
        self._delivered = 0
        self._resubscribes = 0
        self._cleaner_answers = 0  # "segment has been closed" answers in a row (see open)

    @property
    def last_offset(self) -> int | None:
        return self._res.last_offset

    def statistics(self) -> dict[str, int]:
        """Messages delivered and resubscriptions made so far."""
        return {"delivered": self._delivered, "resubscribes": self._resubscribes}

    # -- lifecycle -------------------------------------------------------------

    async def __aenter__(self) -> Subscription:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Open the stream; returns once the broker confirmed the subscription.

        Raises:
            NoSuchPartitionError: no such stream or partition.
            LiftbridgeConnectError: no leader could be reached.
            LiftbridgeClosedError: the client is closed.
        """
        if self._opened:
            raise LiftbridgeError("the subscription is open already; create a new one")
        self._brokers.check_open()
        self._opened = True
        self._brokers.register(self._client_closed)
        try:
            await self._subscribe_with_retries(None)
        except BaseException:
            self._brokers.unregister(self._client_closed)
            self._closed = True
            raise

    async def aclose(self) -> None:
        """End the subscription and give its connection back to the pool (idempotent)."""
        self._closed = True
        self._res.close()
        self._brokers.unregister(self._client_closed)
        self._drop_call()

    def _client_closed(self) -> None:
        """The client is closing: end this subscription with a ClosedError."""
        if not self._closed:
            self._error = LiftbridgeClosedError("the client was closed")
        self._closed = True
        self._res.close()
        self._drop_call()

    def _drop_call(self) -> None:
        call, self._call = self._call, None
        if call is not None:
            call.cancel()
        if self._channel is not None and self._address is not None:
            self._brokers.release_subscribe_channel(self._address, self._channel)
        self._channel = None
        self._address = None

    # -- opening ---------------------------------------------------------------

    def _request_from(self, start_offset: int | None) -> pb.SubscribeRequest:
        if start_offset is None:
            return self._request
        req = pb.SubscribeRequest()
        req.CopyFrom(self._request)
        req.startPosition = pb.OFFSET
        req.startOffset = start_offset
        return req

    async def _subscribe_with_retries(self, start_offset: int | None) -> None:
        """The first subscribe: a few quick retries while the leader is unknown or moving."""
        brokers = self._brokers
        attempts = 5
        attempt = 0
        busy_until: float | None = None
        while True:
            try:
                await self._subscribe_once(start_offset, refresh=attempt > 0)
                return
            except _CleanerBusy as exc:
                now = brokers.clock()
                if busy_until is None:
                    busy_until = now + _CLEANER_WAIT
                if now >= busy_until:
                    raise LiftbridgeServerError(
                        f"subscribe to {self.stream}/{self.partition}: {exc} for "
                        f"{_CLEANER_WAIT:.0f}s",
                        code="INTERNAL",
                    ) from None
                await asyncio.sleep(brokers.jitter())
                continue
            except _Retry as exc:
                attempt += 1
                if attempt == attempts:
                    raise LiftbridgeConnectError(
                        f"subscribe to {self.stream}/{self.partition}: {exc}; is the cluster up?"
                    ) from None
                await asyncio.sleep(brokers.jitter())

    async def _subscribe_once(self, start_offset: int | None, *, refresh: bool) -> None:
        brokers = self._brokers
        if refresh:
            try:
                await brokers.refresh_metadata()
            except LiftbridgeConnectError as exc:
                raise _Retry(str(exc)) from None
        address = brokers.subscribe_address(
            self.stream, self.partition, self._request.readISRReplica
        )
        if address is None:
            if not refresh:
                await brokers.refresh_metadata()
                address = brokers.subscribe_address(
                    self.stream, self.partition, self._request.readISRReplica
                )
            if address is None:
                md = brokers.metadata.get()
                if md.get_stream(self.stream) is None:
                    raise NoSuchPartitionError(
                        f"subscribe: no stream {self.stream!r} in the cluster; create it first",
                        code="NOT_FOUND",
                    )
                if self.partition not in md.get_stream(self.stream).partitions:  # type: ignore[union-attr]
                    raise NoSuchPartitionError(
                        f"subscribe: stream {self.stream!r} has no partition {self.partition}",
                        code="NOT_FOUND",
                    )
                raise _Retry("the partition has no reachable leader")
        channel = await brokers.acquire_subscribe_channel(address)
        stub = brokers.stub_for(channel)
        call = stub.Subscribe(self._request_from(start_offset))
        try:
            first = await wait_within(call.read(), brokers.rpc_timeout)
        except grpc.aio.AioRpcError as exc:
            call.cancel()
            brokers.release_subscribe_channel(address, channel)
            code = exc.code()
            if _paused_answer(code, exc.details() or ""):
                if _cleaner_answer(code, exc.details() or ""):
                    if not await self._maybe_paused():
                        raise _CleanerBusy(
                            "the broker's cleaner keeps closing log segments"
                        ) from None
                    self._cleaner_answers += 1
                    if self._cleaner_answers <= _CLEANER_RETRIES:
                        raise _Retry(
                            "a segment was closed (paused, or the cleaner at work)"
                        ) from None
                raise PartitionPausedError(
                    f"subscribe to {self.stream}/{self.partition}: the partition is paused; "
                    "subscribe with resume=True (or publish to it) to resume it",
                    code=code.name,
                ) from None
            if is_connection_failure(exc) or code is grpc.StatusCode.FAILED_PRECONDITION:
                raise _Retry(f"{code.name}: {redact_text(exc.details() or '')}") from None
            if code is grpc.StatusCode.RESOURCE_EXHAUSTED and self._has_stop:
                # Nothing to read before the stop position: "Stream is empty" (stop at
                # LATEST of an empty partition), or a readonly partition read to its
                # end. As when this comes in the middle of the stream: the end.
                self._ended = True
                self._brokers.unregister(self._client_closed)
                return
            raise map_rpc_error(
                exc,
                what=f"subscribe to {self.stream}/{self.partition}",
                closed=brokers.closed,
                not_found=NoSuchPartitionError,
            ) from None
        except asyncio.TimeoutError:
            call.cancel()
            brokers.release_subscribe_channel(address, channel)
            raise LiftbridgeTimeoutError(
                f"subscribe to {self.stream}/{self.partition}: the broker did not confirm the "
                f"subscription within {brokers.rpc_timeout}s"
            ) from None
        except BaseException:
            call.cancel()
            brokers.release_subscribe_channel(address, channel)
            raise
        if first is grpc.aio.EOF:
            brokers.release_subscribe_channel(address, channel)
            raise _Retry("the stream ended before confirming the subscription")
        if self._closed:
            call.cancel()
            brokers.release_subscribe_channel(address, channel)
            raise LiftbridgeClosedError("the subscription was closed while opening")
        self._cleaner_answers = 0
        self._call = call
        self._address = address
        self._channel = channel
        log.debug("subscribed to %s/%s on %s", self.stream, self.partition, redact_url(address))

    # -- reading -----------------------------------------------------------------

    def __aiter__(self) -> Subscription:
        return self

    async def _maybe_paused(self) -> bool:
        """Whether the partition's metadata allows "paused" (False: it was never
        paused, so a closed segment is the cleaner's doing)."""
        try:
            resp = await self._brokers.partition_metadata(self.stream, self.partition)
        except LiftbridgeError:
            return True
        return bool(resp.metadata.paused)

    async def __anext__(self) -> Message:
        res = self._res
        while True:
            call = self._call
            if call is None:
                await self._no_call()
                continue
            if self._stop_offset is not None and res.last_offset is not None:
                if res.last_offset >= self._stop_offset:
                    await self._finish()
                    raise StopAsyncIteration
            try:
                msg = await call.read()
            except grpc.aio.AioRpcError as exc:
                await self._stream_failed(exc)
                continue
            except asyncio.CancelledError:
                if self._call is not call and not _task_cancelling():
                    continue  # we dropped this call ourselves (closing): report that
                # The read was abandoned half-way: this stream cannot be trusted
                # any more; the next read resubscribes from last_offset + 1.
                if not self._closed:
                    self._drop_call()
                    res.connection_lost(self._brokers.clock())
                raise
            if msg is grpc.aio.EOF:
                # The broker ended the stream cleanly: a stop position was reached.
                await self._finish()
                raise StopAsyncIteration
            if self._stop_offset is not None and msg.offset > self._stop_offset:
                # The broker ends the stream only at the stop offset itself: when
                # retention (or compaction) removed it, it reads on past it.
                await self._finish()
                raise StopAsyncIteration
            if res.on_message(msg.offset):
                self._delivered += 1
                return Message._wrap(msg)

    async def _no_call(self) -> None:
        """No open stream: raise the terminal state, or resubscribe."""
        if self._error is not None:
            raise self._error
        if self._closed or self._ended:
            if self._brokers.closed and not self._ended:
                raise LiftbridgeClosedError("the client was closed")
            raise StopAsyncIteration
        if not self._opened:
            raise LiftbridgeError("use `async with client.subscribe(...)` (or await sub.open())")
        await self._resubscribe()

    async def _finish(self) -> None:
        self._ended = True
        self._drop_call()
        self._brokers.unregister(self._client_closed)

    async def _stream_failed(self, exc: grpc.aio.AioRpcError) -> None:
        code = exc.code()
        details = (exc.details() or "").lower()
        what = f"subscription to {self.stream}/{self.partition}"
        self._drop_call()
        if self._closed:
            return
        # Liftbridge closes the partition's log under its readers when leadership
        # moves away from a broker that stays up (INTERNAL, "commit log closed"),
        # and when the partition is paused (then FAILED_PRECONDITION).
        leader_moved = code is grpc.StatusCode.INTERNAL and "commit log closed" in details
        if is_connection_failure(exc) or leader_moved:
            log.info("%s lost (%s); resubscribing", what, code.name)
            self._res.connection_lost(self._brokers.clock())
            return
        err: LiftbridgeError
        if code is grpc.StatusCode.NOT_FOUND:
            err = StreamDeletedError(f"{what}: the stream was deleted", code=code.name)
        elif code is grpc.StatusCode.FAILED_PRECONDITION:
            err = PartitionPausedError(
                f"{what}: the partition was paused; subscribe with resume=True", code=code.name
            )
        elif code is grpc.StatusCode.UNKNOWN and "segment has been closed" in details:
            last = self._res.last_offset
            again = "the start" if last is None else f"offset {last + 1}"
            err = SegmentDeletedError(
                f"{what}: retention deleted the log segment it was reading (the reader "
                f"fell behind the oldest offset kept; messages after offset {last} may be "
                f"gone); subscribe again from {again} to go on from the oldest kept",
                code=code.name,
                last_offset=last,
            )
        elif code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            if self._has_stop:
                self._ended = True
                self._brokers.unregister(self._client_closed)
                return
            err = ReadonlyPartitionError(
                f"{what}: the partition is readonly and every message was read", code=code.name
            )
        else:
            err = map_rpc_error(exc, what=what, closed=self._brokers.closed)
        self._error = err
        self._brokers.unregister(self._client_closed)

    async def _resubscribe(self) -> None:
        res = self._res
        clock = self._brokers.clock
        while True:
            if self._closed:
                return
            due = res.get_timer()
            if due is None:
                if res.gave_up:
                    self._error = SubscriptionLostError(
                        f"subscription to {self.stream}/{self.partition} lost and not "
                        "re-established "
                        f"within {res.wait_time}s; resubscribe from offset "
                        f"{res.resume_offset() if res.last_offset is not None else 'the start'}",
                        last_offset=res.last_offset,
                    )
                    self._brokers.unregister(self._client_closed)
                    raise self._error
                return
            delay = due - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            attempt = res.handle_timer(clock())
            if attempt is None:
                continue
            try:
                await self._subscribe_once(attempt.start_offset, refresh=True)
            except (_Retry, LiftbridgeConnectError, LiftbridgeTimeoutError) as exc:
                log.debug("resubscribe attempt %d failed: %s", attempt.attempt, exc)
                res.attempt_failed(clock())
                continue
            except LiftbridgeServerError as exc:
                self._error = exc
                self._brokers.unregister(self._client_closed)
                raise
            res.resubscribed()
            self._resubscribes += 1
            return
