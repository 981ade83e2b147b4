"""A consumer-group member: one ``async for`` over the partitions the group assigns it.

Theory of operation (Liftbridge consumer groups, v1.9 beta API): ``__aenter__``
joins the group (JoinConsumerGroup, any broker) and learns its coordinator and
epoch. A background task asks the coordinator for this member's assignments
(FetchConsumerGroupAssignments) every ``fetch_interval`` seconds, which also
keeps the member alive, and reconciles: a subscription per assigned partition,
started at the group's cursor + 1 (cursor id ``__group:<group_id>``) or at
``auto_offset`` when the group has none; subscriptions to partitions no longer
assigned are closed. A failed fetch is retried soon after re-reading the
group's coordinator and epoch (FetchMetadata with the group, as go-liftbridge
does; the first fetch is retried for a bounded time, since a real cluster's
coordinator applies a join through Raft a little later); an evicted member
joins again; the coordinator is reported (ReportConsumerGroupCoordinator) only
after ``coordinator_timeout`` without an answer from it. Each subscription is pumped
into one bounded queue, so a slow reader holds the pumps (and gRPC flow control)
back. Delivered offsets are committed as cursors every ``checkpoint_interval``
seconds, on :meth:`checkpoint` and on close; ``aclose()`` leaves the group.

Its tasks (the assignments loop, the checkpoint loop, one pump per partition)
belong to one :class:`TaskOwner`: a task that fails (a bug, never a Liftbridge
error: pumps hand those to the queue) ends the iteration with a
:class:`LiftbridgeError` raised from ``async for``, and ``aclose()``, from any
task, cancels and awaits them all.

Owns the membership rules above (fetch interval, rejoin, when to report the
coordinator, checkpoints). It takes the broker layer (``_brokers.Brokers``) and
makes its calls through ``_groups`` and :class:`Subscription`; how a single call
is retried is the broker layer's rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aioclients._tasks import TaskOwner
from aioclients.liftbridge import _groups
from aioclients.liftbridge._brokers import Brokers
from aioclients.liftbridge._errors import (
    LiftbridgeClosedError,
    LiftbridgeError,
    LiftbridgeServerError,
    NoSuchConsumerGroupError,
)
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._protocol._args import build_subscribe_request
from aioclients.liftbridge._protocol._types import Message, StartPosition
from aioclients.liftbridge._subscription import Subscription

__all__ = ("GroupConsumer",)

log = logging.getLogger("aioclients.liftbridge.consumer")

_END = object()
_WAKE = object()  # a background task failed: __anext__ raises the failure
# The first assignments fetch is repeated for at least this long (seconds).
_FIRST_FETCH_TIME = 10.0
# Until the join tells the group's own value.
_COORDINATOR_TIMEOUT = 15.0
# Wait before the next fetch after a failed one (at most).
_RETRY_WAIT = 1.0
_NOT_MEMBER = "not a member"


class GroupConsumer:
    """A member of a consumer group; use ``async with`` then ``async for``.

    Attributes:
        group_id, consumer_id: who it is.  epoch: the group epoch last seen.
        assignments: ``{stream: [partitions]}`` currently consumed.
    """

    def __init__(
        self,
        brokers: Brokers,
        group_id: str,
        streams: list[str],
        *,
        consumer_id: str,
        auto_offset: StartPosition,
        checkpoint_interval: float | None,
        fetch_interval: float | None,
        buffer: int,
        resubscribe_wait_time: float,
    ) -> None:
        self._brokers = brokers
        self._resubscribe_wait_time = resubscribe_wait_time
        self.group_id = group_id
        self.consumer_id = consumer_id
        self.streams = streams
        self.epoch = 0
        self.coordinator = ""
        self._auto_offset = auto_offset
        self._checkpoint_interval = checkpoint_interval
        self._fetch_interval = fetch_interval
        self._queue: asyncio.Queue[object] = asyncio.Queue(maxsize=buffer)
        self._subs: dict[tuple[str, int], tuple[Subscription, asyncio.Task[None]]] = {}
        self._delivered: dict[tuple[str, int], int] = {}
        self._committed: dict[tuple[str, int], int] = {}
        self._tasks = TaskOwner(f"GroupConsumer({group_id})", self._task_failed)
        self._failure: LiftbridgeError | None = None
        self._closed = False
        self._coordinator_timeout = _COORDINATOR_TIMEOUT

    @property
    def cursor_id(self) -> str:
        return f"__group:{self.group_id}"

    @property
    def assignments(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for stream, partition in sorted(self._subs):
            out.setdefault(stream, []).append(partition)
        return out

    async def __aenter__(self) -> GroupConsumer:
        try:
            await self._join()
            await self._first_reconcile()
        except BaseException:
            await self.aclose()
            raise
        self._tasks.start(self._assignments_loop(), name="assignments")
        if self._checkpoint_interval:
            self._tasks.start(self._checkpoint_loop(self._checkpoint_interval), name="checkpoints")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _join(self) -> None:
        join = await _groups.join_group(
            self._brokers, self.group_id, self.consumer_id, self.streams
        )
        self.coordinator = join.coordinator
        self.epoch = join.epoch
        if join.coordinator_timeout > 0:
            self._coordinator_timeout = join.coordinator_timeout
        if self._fetch_interval is None:
            timeout = join.consumer_timeout if join.consumer_timeout > 0 else 10.0
            self._fetch_interval = max(0.05, 0.7 * timeout)

    async def _first_reconcile(self) -> None:
        """The first assignments fetch, repeated for a bounded time.

        Right after a join, a real cluster's coordinator may not have applied it
        yet ("consumer group does not exist"), or another member's join may have
        moved the epoch on ("group epoch differs"): re-read the group's
        coordinator and epoch and ask again, as go-liftbridge does.
        """
        loop = asyncio.get_running_loop()
        give_up = loop.time() + max(_FIRST_FETCH_TIME, self._coordinator_timeout)
        while True:
            try:
                await self._reconcile()
                return
            except LiftbridgeClosedError:
                raise
            except LiftbridgeError as exc:
                if loop.time() >= give_up:
                    raise
                log.debug("consumer group %s: first fetch failed: %s", self.group_id, exc)
                await self._recover(exc)
                await asyncio.sleep(self._brokers.jitter())

    async def _recover(self, exc: LiftbridgeError) -> None:
        """After a failed fetch: rejoin if evicted, else re-read coordinator and epoch.

        Evicted means "not a member", or a group that is gone: the coordinator
        evicts a member silent for the group's consumer timeout, and a group
        whose last member leaves is deleted (Liftbridge v1.9.0 server/fsm.go,
        LEAVE_CONSUMER_GROUP), after which every fetch answers "consumer group
        does not exist". Right after a join the coordinator says so too, until
        it applies the join: the group's metadata then shows it, and the member
        only re-reads it.
        """
        try:
            if _NOT_MEMBER in str(exc):
                await self._join()
                return
            group = await _groups.group_metadata(self._brokers, self.group_id)
            if group is not None:
                self.coordinator, self.epoch = group
            elif isinstance(exc, NoSuchConsumerGroupError):
                log.info("consumer group %s: the group is gone; joining again", self.group_id)
                await self._join()
        except LiftbridgeClosedError:
            raise
        except LiftbridgeError as again:
            log.debug("consumer group %s: re-reading the group failed: %s", self.group_id, again)

    async def _reconcile(self) -> None:
        epoch, assignments = await _groups.fetch_assignments(
            self._brokers, self.group_id, self.consumer_id, self.epoch, self.coordinator
        )
        self.epoch = epoch
        wanted = {(s, p) for s, parts in assignments.items() for p in parts}
        for key in list(self._subs):
            if key not in wanted:
                # Another member reads it from the group's cursor now: what is
                # still queued of it is not delivered (see __anext__), and no
                # later checkpoint commits an offset of it over the new owner's.
                await self._stop(key)
                self._delivered.pop(key, None)
                self._committed.pop(key, None)
        for key in sorted(wanted - set(self._subs)):
            await self._start(*key)

    async def _start(self, stream: str, partition: int) -> None:
        cursor = await _groups.fetch_cursor(self._brokers, self.cursor_id, stream, partition)
        start_kw: dict[str, object] = (
            {"start_offset": cursor + 1} if cursor >= 0 else {"start_at": self._auto_offset}
        )
        req = build_subscribe_request(
            stream,
            partition=partition,
            start_at=start_kw.get("start_at", StartPosition.NEW_ONLY),  # type: ignore[arg-type]
            start_offset=start_kw.get("start_offset"),  # type: ignore[arg-type]
            start_time=None,
            start_time_delta=None,
            stop_at=None,
            stop_offset=None,
            stop_time=None,
            read_isr_replica=False,
            resume=False,
            now_ns=0,
        )
        req.consumer.CopyFrom(
            pb.Consumer(groupId=self.group_id, groupEpoch=self.epoch, consumerId=self.consumer_id)
        )
        sub = Subscription(self._brokers, req, resubscribe_wait_time=self._resubscribe_wait_time)
        await sub.open()
        if self._tasks.closed:  # closed from another task meanwhile
            await sub.aclose()
            raise LiftbridgeClosedError("the group consumer is closed")
        task = self._tasks.start(self._pump(sub), name=f"pump {stream}/{partition}")
        self._subs[(stream, partition)] = (sub, task)
        if cursor >= 0:
            self._committed[(stream, partition)] = cursor

    async def _stop(self, key: tuple[str, int]) -> None:
        sub, task = self._subs.pop(key)
        await self._tasks.cancel(task)
        await sub.aclose()

    def _task_failed(self, exc: BaseException) -> None:
        """A background task died of an error it does not hand to the queue."""
        if self._closed or self._failure is not None:
            return
        error = (
            exc
            if isinstance(exc, LiftbridgeError)
            else LiftbridgeError(
                f"consumer group {self.group_id}: a background task failed: "
                f"{type(exc).__name__}: {exc}"
            )
        )
        if error is not exc:
            error.__cause__ = exc
        self._failure = error
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(_WAKE)  # a full queue wakes no one: nobody waits

    async def _pump(self, sub: Subscription) -> None:
        try:
            async for msg in sub:
                await self._queue.put((sub, msg))
        except LiftbridgeError as exc:
            if not self._closed:
                await self._queue.put((sub, exc))

    async def _assignments_loop(self) -> None:
        loop = asyncio.get_running_loop()
        last_contact = loop.time()
        wait = self._fetch_interval or 1.0
        while not self._closed:
            await asyncio.sleep(wait)
            wait = self._fetch_interval or 1.0
            try:
                await self._reconcile()
                last_contact = loop.time()
                continue
            except LiftbridgeClosedError:
                return
            except LiftbridgeError as exc:
                if isinstance(exc, LiftbridgeServerError) and exc.code != "UNAVAILABLE":
                    last_contact = loop.time()  # the coordinator answered
                log.info("consumer group %s: fetching assignments failed: %s", self.group_id, exc)
                failed = exc
            # go-liftbridge: re-read the group's coordinator and epoch, try again
            # soon, and report the coordinator only after coordinator_timeout
            # without an answer from it.
            wait = min(wait, _RETRY_WAIT)
            if loop.time() - last_contact >= self._coordinator_timeout:
                log.warning(
                    "consumer group %s: no answer from coordinator %s for %.1fs; reporting it",
                    self.group_id,
                    self.coordinator,
                    loop.time() - last_contact,
                )
                last_contact = loop.time()
                try:
                    await _groups.report_coordinator(
                        self._brokers, self.group_id, self.consumer_id, self.coordinator, self.epoch
                    )
                except LiftbridgeClosedError:
                    return
                except LiftbridgeError as again:
                    log.warning("consumer group %s: report failed: %s", self.group_id, again)
            try:
                await self._recover(failed)
            except LiftbridgeClosedError:
                return

    async def _checkpoint_loop(self, interval: float) -> None:
        while not self._closed:
            await asyncio.sleep(interval)
            try:
                await self.checkpoint()
            except LiftbridgeClosedError:
                return
            except LiftbridgeError as exc:
                log.warning("consumer group %s: checkpoint failed: %s", self.group_id, exc)

    async def checkpoint(self) -> None:
        """Commit the offsets delivered so far as the group's cursors.

        Raises:
            LiftbridgeError: a cursor could not be stored.
        """
        for key, offset in list(self._delivered.items()):
            if self._committed.get(key) != offset:
                await _groups.set_cursor(self._brokers, self.cursor_id, key[0], key[1], offset)
                self._committed[key] = offset

    def __aiter__(self) -> GroupConsumer:
        return self

    async def __anext__(self) -> Message:
        while True:
            if self._failure is not None:
                raise self._failure
            if self._closed:
                raise StopAsyncIteration
            item = await self._queue.get()
            if self._failure is not None:
                raise self._failure
            if item is _END:
                raise StopAsyncIteration
            assert isinstance(item, tuple)
            sub, got = item
            key = (sub.stream, sub.partition)
            current = self._subs.get(key)
            if current is None or current[0] is not sub:
                # Queued before the partition was reassigned to another member
                # (or before a new subscription to it replaced this one): that
                # member reads it from the group's cursor; delivering it here too
                # would hand it to two members.
                continue
            if isinstance(got, BaseException):
                raise got
            assert isinstance(got, Message)
            self._delivered[key] = got.offset
            return got

    async def aclose(self) -> None:
        """Stop consuming, commit the delivered offsets, leave the group (idempotent)."""
        if self._closed:
            return
        self._closed = True
        await self._tasks.aclose()
        for key in list(self._subs):
            await self._stop(key)
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(_END)
        if not self._brokers.closed:
            with contextlib.suppress(LiftbridgeError):
                await self.checkpoint()
            with contextlib.suppress(LiftbridgeError):
                await _groups.leave_group(self._brokers, self.group_id, self.consumer_id)
