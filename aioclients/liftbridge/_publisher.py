"""Pipelined publishing over one PublishAsync stream.

Theory of operation. The first ``publish_async`` opens a bidirectional
PublishAsync stream on a broker (any broker; the next known one if it is
unavailable). Each request carries a correlation id; the broker answers each
non-NONE request with a PublishResponse naming that id (an Ack, or an
asyncError). ``publish_async`` returns once the request is written, with a
future resolved by the matching response.

Rules: at most ``window`` requests are awaiting their ack (a semaphore taken
before writing, given back when the ack, its error or its timeout arrives), so
a fast producer waits instead of queueing without bound. Each pending ack has
a deadline (``timeout`` or ``ack_wait_time``) after which its future fails with
``LiftbridgeTimeoutError``; the deadlines sit in one heap under a single event
loop timer (a timer per message cost more than the rest of the send path).
On the client's own HTTP/2 streams a request is queued with ``write_nowait``
(no lock, no suspension); writes go out together once per loop turn.

If the stream breaks, every pending future fails (the messages may or may not
be stored) and the next call opens a new stream. The publisher takes the
broker layer (``_brokers.Brokers``): the stream's broker, dropping a broker
whose stream broke (``Brokers.broker_unavailable``), and the pause and the
number of attempts before a write gives up are that layer's retry policy.
``close()`` stops writing, lets the stream run until every outstanding ack has
arrived or timed out, then fails whatever remains with a ClosedError.

The response reader is a task of the publisher's :class:`TaskOwner`: if it dies
of anything but a gRPC error (a bug), the next ``publish_async`` raises that
failure as a :class:`LiftbridgeError`; ``close()`` cancels and awaits it.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from aioclients._core import redact_url
from aioclients._errors import InvalidArgumentError
from aioclients._tasks import TaskOwner
from aioclients.liftbridge._brokers import Brokers
from aioclients.liftbridge._errors import (
    IncorrectOffsetError,
    LiftbridgeClosedError,
    LiftbridgeConnectError,
    LiftbridgeError,
    LiftbridgeServerError,
    LiftbridgeTimeoutError,
    NoSuchPartitionError,
    NoSuchStreamError,
    ReadonlyPartitionError,
)
from aioclients.liftbridge._io._grpc import is_connection_failure, map_rpc_error
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._protocol._types import Ack

__all__ = ("AsyncPublisher", "async_error")

log = logging.getLogger("aioclients.liftbridge.publisher")


def async_error(error: Any, what: str) -> LiftbridgeError:
    """The error for a PublishAsyncError (or an Ack's ackError) from the broker."""
    code = pb.PublishAsyncError.Code.Name(error.code) if error.code in range(8) else str(error.code)
    message = f"{what}: {error.message or code}"
    if code == "NOT_FOUND":
        cls = NoSuchPartitionError if "partition" in error.message.lower() else NoSuchStreamError
        return cls(message, code=code)
    if code == "READONLY":
        return ReadonlyPartitionError(message, code=code)
    if code == "INCORRECT_OFFSET":
        return IncorrectOffsetError(message, code=code)
    return LiftbridgeServerError(message, code=code)


def _duplicate(cid: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"publish_async: correlation_id {cid!r} is already awaiting its ack; "
        "give each pending message a unique correlation_id (or leave it unset)"
    )


@dataclass(slots=True)
class _Pending:
    future: asyncio.Future[Ack | None]
    partition: int
    deadline: float
    timeout: float


class AsyncPublisher:
    """The PublishAsync stream of one client (created on first use)."""

    def __init__(self, brokers: Brokers, *, window: int) -> None:
        self._brokers = brokers
        self._window = asyncio.Semaphore(window)
        self._pending: dict[str, _Pending] = {}
        self._call: Any = None
        self._address = ""
        self._unsent: set[str] = set()
        self._tasks = TaskOwner("liftbridge AsyncPublisher", self._reader_failed)
        self._failure: LiftbridgeError | None = None
        self._open_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self._deadlines: list[tuple[float, str]] = []  # heap; stale entries are skipped
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0.0
        self._counter = 0
        self._prefix = f"{brokers.rng.getrandbits(48):012x}"
        self._closed = False

    @property
    def outstanding(self) -> int:
        """Requests sent whose ack has not arrived yet."""
        return len(self._pending)

    def next_correlation_id(self) -> str:
        self._counter += 1
        return f"{self._prefix}.{self._counter}"

    async def _ensure_call(self) -> tuple[Any, str]:
        if self._call is not None:
            return self._call, self._address
        async with self._open_lock:
            if self._call is not None:
                return self._call, self._address
            brokers = self._brokers
            address, stub = await brokers.any_stream_stub()
            call = stub.PublishAsync()
            self._call = call
            self._address = address
            self._tasks.start(self._read_responses(call, address), name="PublishAsync reader")
            return call, address

    async def _write(self, request: pb.PublishRequest, timeout: float) -> None:
        """Write on the stream; a dead stream (broker gone) is replaced, a bounded number
        of times. Only unwritten requests are retried, so nothing is sent twice.

        On the client's own HTTP/2 stream, waiting for room (a broker that stopped
        reading backs the socket up) ends after ``timeout`` with nothing sent. A
        ``grpc.aio`` write cannot be bounded so: cancelling it cancels the stream.
        """
        brokers = self._brokers
        deadline = asyncio.get_running_loop().time() + timeout
        for attempt in range(brokers.max_rpc_attempts):
            dropped = False
            if attempt:
                await asyncio.sleep(brokers.jitter())
            if self._closed or brokers.closed:
                raise LiftbridgeClosedError("publish_async: the client is closed")
            call, address = await self._ensure_call()
            try:
                write_nowait = getattr(call, "write_nowait", None)
                if write_nowait is not None and not self._write_lock.locked():
                    if write_nowait(request):
                        return
                if write_nowait is None:
                    async with self._write_lock:
                        await call.write(request)
                else:
                    await self._write_within(call, request, deadline, timeout)
                return
            except grpc.aio.AioRpcError as exc:
                # CANCELLED with neither us nor the client closed: the stream's channel
                # was closed under it, dropped by the broker layer when another call
                # found its broker unavailable (a stream opens on its first write, so
                # this one may have been made on the channel just before). Nothing was
                # written; the broker is already forgotten: open a stream elsewhere.
                dropped = exc.code() is grpc.StatusCode.CANCELLED and not self._closed
                if brokers.closed or not (dropped or is_connection_failure(exc)):
                    raise map_rpc_error(exc, what="publish_async", closed=brokers.closed) from None
            except (asyncio.InvalidStateError, grpc.aio.UsageError):
                # The stream finished under us: the broker is gone, or we are closing.
                if self._closed or brokers.closed:
                    raise LiftbridgeClosedError("publish_async: the client is closed") from None
            log.info("publish_async: the stream to %s broke; opening another", redact_url(address))
            if self._call is call:
                self._call = None
            if not dropped:  # (a dropped channel's broker is forgotten already)
                brokers.broker_unavailable(address)
        raise LiftbridgeConnectError(
            f"publish_async: no broker took the PublishAsync stream after "
            f"{brokers.max_rpc_attempts} attempts; is the cluster up?"
        )

    async def _locked_write(self, call: Any, request: pb.PublishRequest) -> None:
        async with self._write_lock:
            await call.write(request)

    async def _write_within(
        self, call: Any, request: pb.PublishRequest, deadline: float, timeout: float
    ) -> None:
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            # Cancelled while it waits for room, our HTTP/2 write has queued nothing.
            await asyncio.wait_for(self._locked_write(call, request), max(remaining, 0.0))
        except asyncio.TimeoutError:
            raise LiftbridgeTimeoutError(
                f"publish_async: the broker took no request for {timeout}s (it stopped "
                "reading: its connection is backed up); the message was not sent"
            ) from None

    async def send(
        self, request: pb.PublishRequest, *, partition: int, timeout: float
    ) -> asyncio.Future[Ack | None]:
        if self._closed:
            raise LiftbridgeClosedError("publish_async: the client is closed")
        if self._failure is not None:
            raise self._failure
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Ack | None] = loop.create_future()
        expects_ack = request.ackPolicy != pb.NONE
        cid = request.correlationId
        if expects_ack and cid in self._pending:
            raise _duplicate(cid)
        await self._window.acquire()
        if expects_ack and cid in self._pending:
            # Another send of this id got the window first: replacing its entry
            # would strand its future and leak its permit.
            self._window.release()
            raise _duplicate(cid)
        holding = True  # this call owns the window permit until a pending entry does
        try:
            if expects_ack:
                deadline = loop.time() + timeout
                self._pending[cid] = _Pending(future, partition, deadline, timeout)
                heapq.heappush(self._deadlines, (deadline, cid))
                if self._timer is None or deadline < self._timer_due:
                    self._arm(deadline)
                holding = False
            self._unsent.add(cid)
            try:
                await self._write(request, timeout)
            finally:
                self._unsent.discard(cid)
            if not expects_ack:
                future.set_result(None)
        except BaseException:
            self._drop(cid)
            raise
        finally:
            if holding:
                self._window.release()
        return future

    def _drop(self, cid: str) -> None:
        """Forget a pending entry without resolving it (its permit goes back)."""
        entry = self._pending.pop(cid, None)
        if entry is None:
            return
        self._window.release()

    def _arm(self, due: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due = due
        self._timer = asyncio.get_running_loop().call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        """Fail every pending ack whose deadline passed; re-arm for the next one."""
        self._timer = None
        now = asyncio.get_running_loop().time()
        heap = self._deadlines
        pending = self._pending
        while heap:
            deadline, cid = heap[0]
            entry = pending.get(cid)
            if entry is None or entry.deadline != deadline:
                heapq.heappop(heap)  # settled already, or the id was reused
                continue
            if deadline > now:
                self._arm(deadline)
                return
            heapq.heappop(heap)
            self._expire(cid, entry.timeout)
        if not pending:
            heap.clear()

    def _settle(self, cid: str, result: Ack | None, error: BaseException | None) -> None:
        entry = self._pending.pop(cid, None)
        if entry is None:
            return  # timed out already, or an answer we did not ask for
        self._window.release()
        if not self._pending:
            # Nothing left to time out: drop the stale deadlines and the timer.
            self._deadlines.clear()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if entry.future.done():
            return
        if error is not None:
            entry.future.set_exception(error)
        else:
            entry.future.set_result(result)

    def _expire(self, cid: str, timeout: float) -> None:
        if cid not in self._pending:
            return
        self._settle(
            cid,
            None,
            LiftbridgeTimeoutError(
                f"publish_async: no ack for correlation id {cid!r} within {timeout}s; "
                "raise timeout/ack_wait_time if the broker is slow (with AckPolicy.ALL the "
                "first message of a new replicated partition waits for the followers' first "
                "fetch: up to ~10 s on a real cluster; while an in-sync replica is down, "
                "every message waits until the leader drops it from the ISR: up to 15 s, "
                "replica.max.lag.time); the message may have been stored"
            ),
        )

    async def _read_responses(self, call: Any, address: str) -> None:
        error: LiftbridgeError | None = None
        try:
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    break
                self._on_response(resp)
        except grpc.aio.AioRpcError as exc:
            if is_connection_failure(exc):
                self._brokers.broker_unavailable(address)
            error = map_rpc_error(exc, what="publish_async", closed=self._brokers.closed)
        except asyncio.CancelledError:
            # close() cancels this task, but read() raises the same when the stream's
            # channel was closed under it: the broker layer drops the channels of a
            # broker another call found unavailable. Then the acks are lost with the
            # connection, and the client is still open.
            if self._closed or self._brokers.closed:
                error = LiftbridgeClosedError("publish_async: the client was closed")
            else:
                error = LiftbridgeConnectError(
                    "publish_async: the stream's connection was closed (the broker was "
                    "found unavailable); the message may or may not have been stored"
                )
        finally:
            if self._call is call:
                self._call = None
            if error is None:
                error = (
                    LiftbridgeClosedError("publish_async: the client was closed")
                    if self._closed
                    else LiftbridgeConnectError("publish_async: the broker ended the stream")
                )
            for cid in list(self._pending):
                if cid not in self._unsent:  # those are retried on the next stream
                    self._settle(cid, None, error)

    def _reader_failed(self, exc: BaseException) -> None:
        """The response reader died of a bug: later publishes raise it (its pending
        acks failed in its ``finally``)."""
        error = LiftbridgeError(
            f"publish_async: the response reader failed: {type(exc).__name__}: {exc}"
        )
        error.__cause__ = exc
        self._failure = error

    def _on_response(self, resp: pb.PublishResponse) -> None:
        cid = resp.correlationId or (resp.ack.correlationId if resp.HasField("ack") else "")
        entry = self._pending.get(cid)
        if entry is None:
            log.debug("PublishAsync response for unknown correlation id %r", cid)
            return
        if resp.HasField("asyncError"):
            self._settle(cid, None, async_error(resp.asyncError, "publish_async"))
            return
        if not resp.HasField("ack"):
            self._settle(cid, None, None)
            return
        ack = Ack._from_pb(resp.ack, entry.partition)
        if ack.ack_error == "INCORRECT_OFFSET":
            self._settle(
                cid, None, IncorrectOffsetError("publish_async: incorrect expected offset")
            )
        elif ack.ack_error is not None:
            self._settle(cid, None, LiftbridgeServerError(f"publish_async: {ack.ack_error}"))
        else:
            self._settle(cid, ack, None)

    async def close(self) -> None:
        """Stop writing; wait for outstanding acks (each until its deadline); fail the rest."""
        self._closed = True
        call = self._call
        if call is not None:
            try:
                async with self._write_lock:
                    await call.done_writing()
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                pass
        if self._pending:
            waiters = [p.future for p in self._pending.values()]
            await asyncio.wait(waiters)
        if call is not None:
            call.cancel()
        await self._tasks.aclose()
        error = LiftbridgeClosedError("publish_async: the client was closed")
        for cid in list(self._pending):
            self._settle(cid, None, error)
