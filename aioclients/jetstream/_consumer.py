"""A consumer handle (ADR-37 "Consumers"): info, delete, unpin, and pulling
messages with ``next``, ``fetch`` and ``consume`` (ADR-37, ADR-42)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from aioclients._errors import InvalidArgumentError
from aioclients.jetstream._api import JetStreamApi
from aioclients.jetstream._consume import ConsumeEvent, FetchResult, MessageStream
from aioclients.jetstream._control import pause_consumer, reset_consumer, resume_consumer
from aioclients.jetstream._message import Msg
from aioclients.jetstream._models import ConsumerInfo, ConsumerPause
from aioclients.jetstream._protocol._pull import consume_options, fetch_options

__all__ = ("Consumer", "consumer_of", "upsert_consumer")


class Consumer:
    """A JetStream consumer. Obtain one from ``JetStream`` or ``Stream``.

    It talks to the server through the request layer (``api``) it is given.
    """

    def __init__(self, api: JetStreamApi, stream_name: str, name: str, info: ConsumerInfo) -> None:
        self._api = api
        self.stream_name = stream_name
        self.name = name
        self.cached_info = info

    def __repr__(self) -> str:
        return f"<Consumer {self.stream_name}/{self.name}>"

    async def info(self) -> ConsumerInfo:
        """Fetch fresh info (also stored in ``cached_info``).

        Raises:
            ConsumerNotFoundError: the consumer is gone.
        """
        self.cached_info = await self._api.consumer_info(self.stream_name, self.name)
        return self.cached_info

    async def delete(self) -> None:
        """Delete this consumer (raises ``ConsumerNotFoundError`` if gone already)."""
        await self._api.delete_consumer(self.stream_name, self.name)

    async def unpin(self, group: str) -> None:
        """ADR-42: release the client pinned to ``group``."""
        await self._api.unpin_consumer(self.stream_name, self.name, group)

    async def pause(self, until: datetime) -> ConsumerPause:
        """Pause this consumer until ``until`` (an aware datetime; nats-server 2.11+).

        While paused the server delivers nothing; ``consume()`` keeps waiting
        without errors and goes on when the pause ends or :meth:`resume` is called.

        Raises:
            InvalidArgumentError: ``until`` is naive or not a datetime.
            ConsumerNotFoundError: the consumer is gone.
            ServerTooOldError: the server is older than 2.11.
        """
        return await pause_consumer(self._api, self.stream_name, self.name, until)

    async def resume(self) -> ConsumerPause:
        """End a pause now (see :meth:`pause`)."""
        return await resume_consumer(self._api, self.stream_name, self.name)

    async def reset(self, *, seq: int | None = None) -> ConsumerInfo:
        """Deliver again from the ack floor + 1, or from stream sequence ``seq``
        (nats-server 2.14+); see ``JetStream.reset_consumer``."""
        self.cached_info = await reset_consumer(self._api, self.stream_name, self.name, seq)
        return self.cached_info

    async def next(
        self,
        *,
        expires: float = 30.0,
        idle_heartbeat: float | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
    ) -> Msg:
        """Pull one message (ADR-37 "Next"); the pull is sent only now.

        Args:
            expires: how long the server holds the pull open, seconds (>= 1).
            idle_heartbeat: ask the server for heartbeats this often while idle
                (default: on, at half of ``expires``, for expiries above 30 s).
            group: ADR-42 priority group (one of the consumer's ``priority_groups``).
            min_pending: ADR-42 overflow: served only while the consumer has at least
                this many messages pending.
            min_ack_pending: ADR-42 overflow: served only while at least this many
                messages await acks.
            priority: ADR-42 prioritized policy: this pull's priority (0 first).

        Returns:
            The message.

        Raises:
            NoMessagesError: the pull expired without a message (a ``TimeoutError``).
            ConsumerDeletedError: the consumer was deleted.
            JetStreamError: pulls answered 503 (no responders) though the consumer
                exists: it is looked up after a 503 and the pull sent again (twice
                at most) within ``expires``, as a cluster node may not know of a
                consumer just created.
            NoHeartbeatError: heartbeats were requested and stopped arriving.
            InvalidArgumentError: bad options, or a pinned_client consumer (use ``consume``).
        """
        options = fetch_options(
            max_messages=1,
            expires=expires,
            idle_heartbeat=idle_heartbeat,
            group=group,
            min_pending=min_pending,
            min_ack_pending=min_ack_pending,
            priority=priority,
        )
        return await FetchResult(self._api, self, options).next_or_raise()

    def fetch(
        self,
        max_messages: int | None = None,
        *,
        max_bytes: int | None = None,
        expires: float = 30.0,
        idle_heartbeat: float | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
    ) -> FetchResult:
        """One pull for up to ``max_messages`` messages or ``max_bytes`` bytes
        (ADR-37 "Fetch"); ``max_messages`` defaults to 1 when neither is given.

        ``async with consumer.fetch(100, expires=5) as batch: async for msg in batch``.
        The iteration ends when the batch (or the bytes) is delivered or the pull
        expires.

        Raises:
            InvalidArgumentError: both limits, bad values, or a pinned_client consumer.
            ConsumerDeletedError, JetStreamError: while iterating, for terminal statuses.
            NoHeartbeatError: while iterating, when requested heartbeats stop.
        """
        options = fetch_options(
            max_messages=max_messages,
            max_bytes=max_bytes,
            expires=expires,
            idle_heartbeat=idle_heartbeat,
            group=group,
            min_pending=min_pending,
            min_ack_pending=min_ack_pending,
            priority=priority,
        )
        return FetchResult(self._api, self, options)

    def consume(
        self,
        *,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        expires: float = 30.0,
        idle_heartbeat: float | None = None,
        threshold_messages: int | None = None,
        threshold_bytes: int | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        on_event: Callable[[ConsumeEvent], object] | None = None,
    ) -> MessageStream:
        """Consume continuously through a buffer refilled by overlapping pulls
        (ADR-37 "Consume").

        ``async with consumer.consume() as messages: async for msg in messages``.

        Args:
            max_messages: buffer size in messages (default 500); exclusive with
                ``max_bytes``.
            max_bytes: buffer size in bytes (message size as the server counts it).
            expires: lifetime of each pull, seconds (>= 1).
            idle_heartbeat: server heartbeat interval (default half of ``expires``,
                0.5-30 s); two missed intervals raise a ``HeartbeatMissed`` event
                and a fresh pull, never an error.
            threshold_messages: refill when the messages requested plus buffered
                fall to this (default: half of ``max_messages``).
            threshold_bytes: refill when the bytes requested plus buffered fall to
                this (default: half of ``max_bytes``).
            group: ADR-42 priority group (one of the consumer's ``priority_groups``).
            min_pending: ADR-42 overflow: served only while the consumer has at least
                this many messages pending.
            min_ack_pending: ADR-42 overflow: served only while at least this many
                messages await acks.
            priority: ADR-42 prioritized policy: this pull's priority (0 first).
            on_event: a plain callable receiving ``HeartbeatMissed``, ``Pinned``,
                ``Unpinned``, ``StatusWarning``, ``Disconnected`` and ``Reconnected``.

        Raises:
            InvalidArgumentError: conflicting or out-of-range options.
            ConsumerDeletedError: while iterating, when the consumer is deleted
                (seen in a status or after a reconnect).
        """
        options = consume_options(
            max_messages=max_messages,
            max_bytes=max_bytes,
            expires=expires,
            idle_heartbeat=idle_heartbeat,
            threshold_messages=threshold_messages,
            threshold_bytes=threshold_bytes,
            group=group,
            min_pending=min_pending,
            min_ack_pending=min_ack_pending,
            priority=priority,
        )
        return MessageStream(self._api, self, options, on_event)


async def upsert_consumer(
    api: JetStreamApi, stream: str, config: Mapping[str, Any], action: str
) -> Consumer:
    """Create, update (``action="update"``) or create-or-update (``""``) a consumer."""
    info = await api.upsert_consumer(stream, config, action)
    return Consumer(api, stream, info.name, info)


async def consumer_of(api: JetStreamApi, stream: str, name: str) -> Consumer:
    """Look up a pull consumer.

    Raises:
        ConsumerNotFoundError: no such consumer.
        InvalidArgumentError: it is a push consumer (the server refuses its pulls).
    """
    info = await api.consumer_info(stream, name)
    if info.config.get("deliver_subject"):
        raise InvalidArgumentError(
            f"consumer {stream}/{name} is a push consumer (deliver_subject "
            f"{info.config['deliver_subject']!r}); use js.push_consumer(...)"
        )
    return Consumer(api, stream, name, info)
