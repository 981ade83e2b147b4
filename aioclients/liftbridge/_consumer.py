"""A consumer-group member: one ``async for`` over the partitions the group assigns it.

Theory of operation (Liftbridge consumer groups, v1.9 beta API): ``__aenter__``
joins the group (JoinConsumerGroup, any broker) and learns its coordinator and
epoch. A background task asks the coordinator for this member's assignments
(FetchConsumerGroupAssignments) every ``fetch_interval`` seconds, which also
keeps the member alive, and reconciles: a subscription per assigned partition,
started at the group's cursor + 1 (cursor id ``__group:<group_id>``) or at
``auto_offset`` when the group has none; subscriptions to partitions no longer
assigned are closed. If the coordinator does not answer, the member reports it
(ReportConsumerGroupCoordinator) and joins again. Each subscription is pumped
into one bounded queue, so a slow reader holds the pumps (and gRPC flow control)
back. Delivered offsets are committed as cursors every ``checkpoint_interval``
seconds, on :meth:`checkpoint` and on close; ``aclose()`` leaves the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from aioclients.liftbridge._errors import (
    LiftbridgeClosedError,
    LiftbridgeError,
)
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._protocol._types import Message, StartPosition
from aioclients.liftbridge._subscription import Subscription, build_subscribe_request

if TYPE_CHECKING:
    from aioclients.liftbridge._client import Client

__all__ = ("GroupConsumer",)

log = logging.getLogger("aioclients.liftbridge.consumer")

_END = object()


class GroupConsumer:
    """A member of a consumer group; use ``async with`` then ``async for``.

    Attributes:
        group_id, consumer_id: who it is.  epoch: the group epoch last seen.
        assignments: ``{stream: [partitions]}`` currently consumed.
    """

    def __init__(
        self,
        client: Client,
        group_id: str,
        streams: list[str],
        *,
        consumer_id: str,
        auto_offset: StartPosition,
        checkpoint_interval: float | None,
        fetch_interval: float | None,
        buffer: int,
    ) -> None:
        self._client = client
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
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

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
        await self._join()
        await self._reconcile()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._assignments_loop()))
        if self._checkpoint_interval:
            self._tasks.append(loop.create_task(self._checkpoint_loop(self._checkpoint_interval)))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _join(self) -> None:
        join = await self._client.join_consumer_group(self.group_id, self.consumer_id, self.streams)
        self.coordinator = join.coordinator
        self.epoch = join.epoch
        if self._fetch_interval is None:
            timeout = join.consumer_timeout if join.consumer_timeout > 0 else 10.0
            self._fetch_interval = max(0.05, 0.7 * timeout)

    async def _reconcile(self) -> None:
        epoch, assignments = await self._client.fetch_consumer_group_assignments(
            self.group_id, self.consumer_id, self.epoch, coordinator=self.coordinator
        )
        self.epoch = epoch
        wanted = {(s, p) for s, parts in assignments.items() for p in parts}
        for key in list(self._subs):
            if key not in wanted:
                await self._stop(key)
        for key in sorted(wanted - set(self._subs)):
            await self._start(*key)

    async def _start(self, stream: str, partition: int) -> None:
        client = self._client
        cursor = await client.fetch_cursor(self.cursor_id, stream, partition)
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
        sub = Subscription(client, req)
        await sub.open()
        task = asyncio.get_running_loop().create_task(self._pump(sub))
        self._subs[(stream, partition)] = (sub, task)
        if cursor >= 0:
            self._committed[(stream, partition)] = cursor

    async def _stop(self, key: tuple[str, int]) -> None:
        sub, task = self._subs.pop(key)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await sub.aclose()

    async def _pump(self, sub: Subscription) -> None:
        try:
            async for msg in sub:
                await self._queue.put(msg)
        except LiftbridgeError as exc:
            if not self._closed:
                await self._queue.put(exc)

    async def _assignments_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._fetch_interval or 1.0)
            try:
                await self._reconcile()
            except LiftbridgeClosedError:
                return
            except LiftbridgeError as exc:
                log.warning(
                    "consumer group %s: fetching assignments failed: %s", self.group_id, exc
                )
                try:
                    await self._client.report_consumer_group_coordinator(
                        self.group_id, self.consumer_id, self.coordinator, self.epoch
                    )
                    await self._join()
                except LiftbridgeError as again:
                    log.warning("consumer group %s: rejoin failed: %s", self.group_id, again)

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
                await self._client.set_cursor(self.cursor_id, key[0], key[1], offset)
                self._committed[key] = offset

    def __aiter__(self) -> GroupConsumer:
        return self

    async def __anext__(self) -> Message:
        if self._closed:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is _END:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, Message)
        self._delivered[(item.stream, item.partition)] = item.offset
        return item

    async def aclose(self) -> None:
        """Stop consuming, commit the delivered offsets, leave the group (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for key in list(self._subs):
            await self._stop(key)
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(_END)
        if not self._client.closed:
            with contextlib.suppress(LiftbridgeError):
                await self.checkpoint()
            with contextlib.suppress(LiftbridgeError):
                await self._client.leave_consumer_group(self.group_id, self.consumer_id)
