"""The JetStream context: the public facade (ADR-37, "JetStream Context").

``JetStream`` owns one :class:`~aioclients.jetstream._api.JetStreamApi` (the
``$JS.API`` request layer) and turns its answers into the handles it returns
(``Stream``, ``Consumer``, ``KeyValue``, ``OrderedConsumer``), each of which
takes that layer, never this object. Nothing in the package imports this
module but the package's ``__init__``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client as NATS

from aioclients._core import redact_text, redact_url
from aioclients._core._checks import check_int
from aioclients._errors import InvalidArgumentError
from aioclients.jetstream._api import (
    DEFAULT_MAX_PENDING,
    ConnectionListener,
    JetStreamApi,
    api_prefix_for,
    check_timeout,
)
from aioclients.jetstream._batch import publish_batch
from aioclients.jetstream._consumer import Consumer, consumer_of, upsert_consumer
from aioclients.jetstream._control import (
    pause_consumer,
    reset_consumer,
    resume_consumer,
    stream_name_by_subject,
)
from aioclients.jetstream._errors import (
    JetStreamClosedError,
    JetStreamConnectError,
    StreamNameInUseError,
    StreamNotFoundError,
)
from aioclients.jetstream._kv import (
    KeyValue,
    create_key_value,
    delete_key_value,
    key_value,
    key_value_store_names,
)
from aioclients.jetstream._models import (
    AccountInfo,
    ConsumerInfo,
    ConsumerPause,
    PubAck,
    StreamInfo,
)
from aioclients.jetstream._objstore import (
    ObjectStore,
    create_object_store,
    delete_object_store,
    object_store,
    object_store_names,
)
from aioclients.jetstream._ordered import (
    OrderedConsumeEvent,
    OrderedConsumer,
    open_ordered_consumer,
)
from aioclients.jetstream._protocol._batch import BatchAck
from aioclients.jetstream._protocol._headers import (
    LAST_SUBJECT_SEQ_SUBJECT_FEATURE,
    LAST_SUBJECT_SEQ_SUBJECT_VERSION,
    publish_headers,
)
from aioclients.jetstream._publisher import (
    PUBLISH_RETRY_ATTEMPTS,
    PUBLISH_RETRY_WAIT,
    check_publish_retries,
)
from aioclients.jetstream._push import PushConsumer, push_consumer_of, upsert_push_consumer
from aioclients.jetstream._schedule import publish_schedule
from aioclients.jetstream._stream import Stream
from aioclients.jetstream._transport import (
    NatsClient,
    abort_socket,
    close_connection,
    close_websocket_session,
)

__all__ = ("DEFAULT_MAX_PENDING", "ConnectionListener", "JetStream", "connect")

log = logging.getLogger("aioclients.jetstream")

#: Keepalive PINGs (seconds apart), and how many may go unanswered before the
#: connection counts as stale and is replaced. nats-py's defaults (120 s, 2) take
#: up to six minutes to notice a server that froze.
_PING_INTERVAL = 30
_MAX_OUTSTANDING_PINGS = 2


class JetStream:
    """A JetStream context over a nats-py connection the caller owns.

    Args:
        nc: a connected ``nats.aio.client.Client``.
        domain: JetStream domain; the API prefix becomes ``$JS.<domain>.API``.
        api_prefix: API subject prefix (for imports across accounts).
        timeout: default timeout of API requests and publish acks, seconds.
        max_pending: bound on outstanding ``publish_async`` acks.
    """

    def __init__(
        self,
        nc: NATS,
        *,
        domain: str | None = None,
        api_prefix: str = "$JS.API",
        timeout: float = 5.0,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        api = JetStreamApi(
            nc, domain=domain, api_prefix=api_prefix, timeout=timeout, max_pending=max_pending
        )
        #: the request layer every handle of this context talks through
        self._jsapi = api
        self.domain = domain
        self.timeout = timeout
        # The request layer's parts, under the names they had here before it existed.
        self._nc = nc
        self._transport = api.transport
        self._requests = api.requests
        self._acks = api.acks

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def nc(self) -> NATS:
        """The underlying nats-py client."""
        return self._nc

    @property
    def api_prefix(self) -> str:
        return self._jsapi.prefix

    @property
    def closed(self) -> bool:
        return self._jsapi.closed

    async def _api(
        self,
        subject: str,
        payload: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one ``$JS.API`` request (see ``JetStreamApi.request``)."""
        return await self._jsapi.request(subject, payload, timeout=timeout)

    async def close(self) -> None:
        """Close the context: outstanding acks fail with ``JetStreamClosedError``.

        If the context opened the connection (``connect()``), the connection is
        closed too: what is still queued gets up to ``timeout`` seconds (at most
        10) to be written, after which the socket is aborted, so that closing
        never hangs on a server that does not read. Idempotent.
        """
        await self._jsapi.close()

    async def __aenter__(self) -> JetStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None and not self.closed:
                await self._acks.wait_idle(self.timeout)
        finally:
            await self.close()

    # -- account ---------------------------------------------------------------------------

    async def account_info(self) -> AccountInfo:
        """Usage and limits of the account (``$JS.API.INFO``)."""
        return await self._jsapi.account_info()

    # -- streams ---------------------------------------------------------------------------

    async def create_stream(
        self, name: str, *, subjects: list[str] | None = None, **config: Any
    ) -> Stream:
        """Create a stream; ``config`` keys are StreamConfig JSON names (durations in seconds).

        Creating a stream that exists with the same config returns it; with a
        different config raises ``StreamNameInUseError``.
        """
        if subjects is not None:
            config["subjects"] = subjects
        return Stream(self._jsapi, name, await self._jsapi.create_stream(name, config))

    async def update_stream(self, name: str, **config: Any) -> Stream:
        """Change a stream's config: the given keys are merged into the current config."""
        return Stream(self._jsapi, name, await self._jsapi.update_stream(name, config))

    async def stream(self, name: str) -> Stream:
        """Look up a stream (raises ``StreamNotFoundError``)."""
        return Stream(self._jsapi, name, await self._jsapi.stream_info(name))

    async def stream_info(
        self, name: str, *, subjects_filter: str | None = None, deleted_details: bool = False
    ) -> StreamInfo:
        """Fetch ``StreamInfo``; ``subjects_filter`` fills ``state.subjects``."""
        return await self._jsapi.stream_info(
            name, subjects_filter=subjects_filter, deleted_details=deleted_details
        )

    async def delete_stream(self, name: str) -> None:
        """Delete a stream and all its messages (raises ``StreamNotFoundError``)."""
        await self._jsapi.delete_stream(name)

    async def list_streams(self, subject: str | None = None) -> AsyncIterator[StreamInfo]:
        """Every stream's info, optionally only those that store ``subject``."""
        async for info in self._jsapi.list_streams(subject):
            yield info

    async def stream_names(self, subject: str | None = None) -> AsyncIterator[str]:
        """Every stream's name, optionally only those that store ``subject``."""
        async for name in self._jsapi.stream_names(subject):
            yield name

    # -- consumers -------------------------------------------------------------------------

    async def create_consumer(self, stream: str, **config: Any) -> Consumer:
        """Create a consumer.

        With ``durable_name`` the consumer is durable. With only ``name`` it is a
        named ephemeral consumer, which the server removes after
        ``inactive_threshold`` (default 5 s) without clients; with neither, the
        server picks the name. ``config`` keys are ConsumerConfig JSON names,
        durations in seconds; ``ack_policy`` defaults to ``"explicit"``.

        Raises:
            ConsumerExistsError: one of that name exists with a different config.
        """
        return await upsert_consumer(self._jsapi, stream, config, "create")

    async def update_consumer(self, stream: str, **config: Any) -> Consumer:
        """Change an existing consumer: the given keys are merged into its current config.

        Giving ``filter_subject`` replaces ``filter_subjects`` and vice versa.
        """
        return await upsert_consumer(self._jsapi, stream, config, "update")

    async def create_or_update_consumer(self, stream: str, **config: Any) -> Consumer:
        """Create the consumer, or replace the config of an existing one."""
        return await upsert_consumer(self._jsapi, stream, config, "")

    async def consumer(self, stream: str, name: str) -> Consumer:
        """Look up a consumer (raises ``ConsumerNotFoundError``)."""
        return await consumer_of(self._jsapi, stream, name)

    async def consumer_info(self, stream: str, name: str) -> ConsumerInfo:
        return await self._jsapi.consumer_info(stream, name)

    async def delete_consumer(self, stream: str, name: str) -> None:
        """Delete a consumer (raises ``ConsumerNotFoundError``)."""
        await self._jsapi.delete_consumer(stream, name)

    async def list_consumers(self, stream: str) -> AsyncIterator[ConsumerInfo]:
        """Every consumer of ``stream``."""
        async for info in self._jsapi.list_consumers(stream):
            yield info

    async def consumer_names(self, stream: str) -> AsyncIterator[str]:
        """The names of every consumer of ``stream``."""
        async for name in self._jsapi.consumer_names(stream):
            yield name

    async def ordered_consumer(
        self,
        stream: str,
        *,
        filter_subjects: list[str] | None = None,
        deliver_policy: str = "all",
        opt_start_seq: int | None = None,
        opt_start_time: datetime | None = None,
        headers_only: bool = False,
        on_event: Callable[[OrderedConsumeEvent], object] | None = None,
    ) -> OrderedConsumer:
        """An ordered consumer (ADR-17): in-order, gapless delivery without acks.

        The server-side consumer is ephemeral (``ack_policy none``, ``max_deliver
        1``, memory storage); on a gap, a missed heartbeat, a reconnect or its
        deletion it is replaced by a fresh one starting after the last message
        delivered, and ``on_event`` receives ``ConsumerReset(next_seq)``.

        Raises:
            StreamNotFoundError: no such stream.
            InvalidArgumentError: a bad start or filter.
        """
        return await open_ordered_consumer(
            self._jsapi,
            stream,
            filter_subjects=filter_subjects,
            deliver_policy=deliver_policy,
            opt_start_seq=opt_start_seq,
            opt_start_time=opt_start_time,
            headers_only=headers_only,
            on_event=on_event,
        )

    # -- Key-Value (ADR-8) -----------------------------------------------------------------

    async def create_key_value(
        self,
        bucket: str,
        *,
        history: int = 1,
        ttl: float | None = None,
        max_value_size: int | None = None,
        max_bytes: int | None = None,
        storage: str = "file",
        replicas: int = 1,
        description: str | None = None,
        limit_marker_ttl: float | None = None,
        compression: bool = False,
        metadata: Mapping[str, str] | None = None,
        republish: Mapping[str, Any] | None = None,
        placement: Mapping[str, Any] | None = None,
        mirror: str | Mapping[str, Any] | None = None,
        sources: Sequence[str | Mapping[str, Any]] | None = None,
    ) -> KeyValue:
        """Create a Key-Value bucket (the stream ``KV_<bucket>``), or return it when
        it exists with the same settings.

        Args:
            history: revisions kept per key (1 to 64).
            ttl: seconds a value lives (``None``: for ever).
            max_value_size: the largest value, bytes (``None``: no limit).
            max_bytes: the largest size of the whole bucket, bytes (``None``: no limit).
            storage: ``"file"`` or ``"memory"``.
            replicas: 1 to 5.
            limit_marker_ttl: seconds (at least 1) the server keeps the marker it
                places where a key's TTL or the bucket's ``ttl`` ends (ADR-48);
                turns on per-key TTLs (``create(..., ttl=)``, ``purge(..., ttl=)``).
                Needs nats-server 2.11.
            compression: S2-compress the bucket's stream.
            metadata: the bucket's metadata (text to text).
            republish: the server's RePublish object (``{"src": ..., "dest": ...}``).
            placement: the server's Placement object (``{"cluster": ..., "tags": ...}``).
            mirror: a bucket to mirror: its name or a StreamSource mapping. As in
                nats.go the mirror has ``mirror_direct`` on and takes no writes.
            sources: buckets to source from (names or StreamSource mappings); a
                source without ``subject_transforms`` maps its keys into this bucket.

        Raises:
            InvalidArgumentError: a bad name or setting (before any request).
            StreamNameInUseError: the bucket exists with other settings.
        """
        return await create_key_value(
            self._jsapi,
            bucket,
            history=history,
            ttl=ttl,
            max_value_size=max_value_size,
            max_bytes=max_bytes,
            storage=storage,
            replicas=replicas,
            description=description,
            limit_marker_ttl=limit_marker_ttl,
            compression=compression,
            metadata=metadata,
            republish=republish,
            placement=placement,
            mirror=mirror,
            sources=sources,
        )

    async def key_value(self, bucket: str) -> KeyValue:
        """Open an existing bucket (raises ``BucketNotFoundError``)."""
        return await key_value(self._jsapi, bucket)

    async def delete_key_value(self, bucket: str) -> None:
        """Delete a bucket and everything in it (raises ``BucketNotFoundError``)."""
        await delete_key_value(self._jsapi, bucket)

    async def key_value_store_names(self) -> AsyncIterator[str]:
        """The names of the Key-Value buckets (an async iterator; nats.go
        ``KeyValueStoreNames``: buckets with subjects, so not mirrors)."""
        async for name in key_value_store_names(self._jsapi):
            yield name

    # -- Object Store (ADR-20) -------------------------------------------------------------

    async def create_object_store(
        self,
        bucket: str,
        *,
        description: str | None = None,
        ttl: float | None = None,
        max_bytes: int | None = None,
        storage: str = "file",
        replicas: int = 1,
        compression: bool = False,
        metadata: Mapping[str, str] | None = None,
    ) -> ObjectStore:
        """Create an Object Store (the stream ``OBJ_<bucket>``), or return it when
        it exists with the same settings.

        Args:
            ttl: seconds an object lives (``None``: for ever).
            max_bytes: the largest size of the whole store, bytes (``None``: no limit).
            storage: ``"file"`` or ``"memory"``.
            replicas: 1 to 5.
            compression: S2-compress the stored chunks on the server.
            metadata: the stream's metadata (``str`` to ``str``).

        Raises:
            InvalidArgumentError: a bad name or setting (before any request).
            StreamNameInUseError: the store exists with other settings.
        """
        return await create_object_store(
            self._jsapi,
            bucket,
            description=description,
            ttl=ttl,
            max_bytes=max_bytes,
            storage=storage,
            replicas=replicas,
            compression=compression,
            metadata=metadata,
        )

    async def object_store(self, bucket: str) -> ObjectStore:
        """Open an existing Object Store (raises ``BucketNotFoundError``)."""
        return await object_store(self._jsapi, bucket)

    async def delete_object_store(self, bucket: str) -> None:
        """Delete an Object Store and every object in it (raises ``BucketNotFoundError``)."""
        await delete_object_store(self._jsapi, bucket)

    async def object_store_names(self) -> AsyncIterator[str]:
        """The names of the Object Stores (an async iterator)."""
        async for name in object_store_names(self._jsapi):
            yield name

    async def unpin_consumer(self, stream: str, consumer: str, group: str) -> None:
        """ADR-42: release the pinned client of ``group`` so another can take over."""
        await self._jsapi.unpin_consumer(stream, consumer, group)

    # -- publishing ------------------------------------------------------------------------

    async def publish(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        headers: Mapping[str, str | list[str]] | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_msg_id: str | None = None,
        timeout: float | None = None,
        ttl: float | str | None = None,
        retry_attempts: int = PUBLISH_RETRY_ATTEMPTS,
        retry_wait: float = PUBLISH_RETRY_WAIT,
        expected_last_subject_seq_subject: str | None = None,
    ) -> PubAck:
        """Publish and wait for the stream's acknowledgement.

        ``ttl`` (ADR-43): how long the stream keeps this message, seconds (at
        least 1) or ``"never"``; the stream needs ``allow_msg_ttl=True``.

        ``expected_last_subject_seq_subject``: check ``expected_last_subject_seq``
        against the last message of this subject (wildcards allowed) rather than
        of ``subject`` (nats.go ``WithExpectLastSequenceForSubject``; nats-server
        2.11+).

        A "no responders" answer (no stream took the message) is tried again
        ``retry_attempts`` times, ``retry_wait`` seconds apart, within ``timeout``
        (ADR-22, as nats.go does): in a cluster a new stream, or one changing
        leader, is briefly unreachable. ``retry_attempts=0`` fails at once.

        Returns:
            the ``PubAck`` (``duplicate`` is true when ``msg_id`` was seen within
            the stream's duplicate window and the message was not stored again).
        Raises:
            NoStreamResponseError: no stream stores ``subject`` (after the retries).
            WrongLastSequenceError / WrongLastMsgIdError / WrongExpectedStreamError:
                an expectation failed; nothing was stored.
            MaxPayloadError: the message is larger than the server accepts.
            APITimeoutError: no ack in time (the message may or may not be stored).
            InvalidArgumentError: a ``ttl`` under one second, a bad
                ``retry_attempts`` or ``retry_wait``, ``expected_last_subject_seq_subject``
                without ``expected_last_subject_seq`` (nothing is sent).
            ServerTooOldError: ``ttl`` or ``expected_last_subject_seq_subject`` with a
                server before 2.11 (nothing is sent).
        """
        self._jsapi.check_loop()  # not in publish_async: it is the hot path
        future = await self.publish_async(
            subject,
            payload,
            headers=headers,
            msg_id=msg_id,
            expected_stream=expected_stream,
            expected_last_seq=expected_last_seq,
            expected_last_subject_seq=expected_last_subject_seq,
            expected_last_msg_id=expected_last_msg_id,
            timeout=timeout,
            ttl=ttl,
            retry_attempts=retry_attempts,
            retry_wait=retry_wait,
            expected_last_subject_seq_subject=expected_last_subject_seq_subject,
        )
        return await future

    async def publish_async(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        headers: Mapping[str, str | list[str]] | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_msg_id: str | None = None,
        timeout: float | None = None,
        ttl: float | str | None = None,
        retry_attempts: int = PUBLISH_RETRY_ATTEMPTS,
        retry_wait: float = PUBLISH_RETRY_WAIT,
        expected_last_subject_seq_subject: str | None = None,
    ) -> asyncio.Future[PubAck]:
        """Publish without waiting for the ack; return a future of it.

        Waits (back-pressure) while ``max_pending`` acks are outstanding, then
        sends and returns. The future fails like :meth:`publish` would, or with
        ``APITimeoutError`` when the ack does not arrive within ``timeout``.
        A "no responders" answer is tried again as :meth:`publish` does; the
        message keeps its place among the outstanding acks meanwhile.
        """
        retry = None
        if retry_attempts is not PUBLISH_RETRY_ATTEMPTS or retry_wait is not PUBLISH_RETRY_WAIT:
            check_publish_retries(retry_attempts, retry_wait)
            retry = (retry_attempts, retry_wait)
        if self._jsapi.closing:
            raise JetStreamClosedError("this JetStream context is closed")
        if (
            headers is None
            and msg_id is None
            and expected_stream is None
            and (
                expected_last_seq is None
                and expected_last_subject_seq is None
                and expected_last_msg_id is None
                and ttl is None
                and expected_last_subject_seq_subject is None
            )
        ):
            hdrs = None
        else:
            hdrs = publish_headers(
                headers,
                msg_id=msg_id,
                expected_stream=expected_stream,
                expected_last_seq=expected_last_seq,
                expected_last_subject_seq=expected_last_subject_seq,
                expected_last_msg_id=expected_last_msg_id,
                expected_last_subject_seq_subject=expected_last_subject_seq_subject,
            )
            if expected_last_subject_seq_subject is not None:
                await self._jsapi.require_version(
                    LAST_SUBJECT_SEQ_SUBJECT_FEATURE, LAST_SUBJECT_SEQ_SUBJECT_VERSION
                )
            if ttl is not None:
                hdrs = await self._jsapi.ttl_headers(hdrs, ttl)
        if timeout is not None:
            check_timeout(timeout)
        return await self._acks.publish(
            subject, payload, hdrs, timeout or self.timeout, retry=retry
        )

    async def publish_async_complete(self, timeout: float | None = None) -> None:
        """Wait until every ``publish_async`` ack has arrived (or failed).

        Raises:
            APITimeoutError: acks are still outstanding after ``timeout`` seconds.
        """
        self._jsapi.check_open()
        if timeout is not None:
            check_timeout(timeout)
        await self._acks.wait_idle(timeout)

    @property
    def publish_async_pending(self) -> int:
        """How many publish acks are outstanding."""
        return self._acks.outstanding

    # -- consumer pause / reset, push consumers, streams by subject (issue 21) -------------

    async def pause_consumer(self, stream: str, name: str, until: datetime) -> ConsumerPause:
        """Pause a consumer until ``until`` (an aware datetime; nats-server 2.11+).

        A paused consumer delivers nothing; its ``consume()`` waits without
        errors and goes on when the pause ends or the consumer is resumed.

        Raises:
            InvalidArgumentError: ``until`` is naive or not a datetime.
            ConsumerNotFoundError: no such consumer.
            ServerTooOldError: the server is older than 2.11.
        """
        return await pause_consumer(self._jsapi, stream, name, until)

    async def resume_consumer(self, stream: str, name: str) -> ConsumerPause:
        """End a consumer's pause now (nats-server 2.11+)."""
        return await resume_consumer(self._jsapi, stream, name)

    async def reset_consumer(
        self, stream: str, name: str, *, seq: int | None = None
    ) -> ConsumerInfo:
        """Make a consumer deliver again from its ack floor + 1, or from stream
        sequence ``seq`` (nats.go ``ResetConsumer`` / ``ResetConsumerToSequence``;
        nats-server 2.14+).

        Raises:
            ConsumerNotFoundError: no such consumer (at once, never a timeout).
            JetStreamError: ``seq`` does not fit the consumer's deliver policy
                (err_code 10204).
            ServerTooOldError: the server is older than 2.14.
        """
        return await reset_consumer(self._jsapi, stream, name, seq)

    async def create_push_consumer(
        self, stream: str, *, deliver_subject: str | None = None, **config: Any
    ) -> PushConsumer:
        """Create a push consumer: the server sends its messages to
        ``deliver_subject`` (default: a fresh inbox).

        Durable with ``durable_name``, ephemeral otherwise (an ephemeral one is
        removed ``inactive_threshold``, default 5 s, after its last subscriber
        leaves). Unless ``config`` says otherwise (and there is no
        ``deliver_group``), flow control and a 5 s idle heartbeat are on, both
        answered and checked by ``consume()``.

        Raises:
            ConsumerExistsError: one of that name exists with a different config.
        """
        return await upsert_push_consumer(self._jsapi, stream, config, "create", deliver_subject)

    async def create_or_update_push_consumer(
        self, stream: str, *, deliver_subject: str | None = None, **config: Any
    ) -> PushConsumer:
        """Create a push consumer, or replace the config of an existing one (which
        keeps its deliver subject unless one is given)."""
        return await upsert_push_consumer(self._jsapi, stream, config, "", deliver_subject)

    async def push_consumer(self, stream: str, name: str) -> PushConsumer:
        """Look up a push consumer.

        Raises:
            ConsumerNotFoundError: no such consumer.
            InvalidArgumentError: it is a pull consumer.
        """
        return await push_consumer_of(self._jsapi, stream, name)

    async def stream_name_by_subject(self, subject: str) -> str:
        """The name of the stream that stores ``subject``.

        Raises:
            StreamNotFoundError: no stream does.
        """
        return await stream_name_by_subject(self._jsapi, subject)

    async def create_or_update_stream(self, name: str, **config: Any) -> Stream:
        """Create the stream, or update an existing one (the given keys are merged
        into its config, as :meth:`update_stream` does)."""
        api = self._jsapi
        try:
            return Stream(api, name, await api.update_stream(name, config))
        except StreamNotFoundError:
            pass
        try:
            return Stream(api, name, await api.create_stream(name, config))
        except StreamNameInUseError:  # created meanwhile by someone else
            return Stream(api, name, await api.update_stream(name, config))

    # -- counters (ADR-49) -----------------------------------------------------------------

    async def counter_add(
        self, subject: str, delta: int = 1, *, timeout: float | None = None
    ) -> int:
        """Add ``delta`` (any size of int, negative too) to the counter of ``subject``
        in a stream with ``allow_msg_counter=True``; return the new total.

        Raises:
            InvalidArgumentError: ``delta`` is not an int (nothing is sent).
            ServerTooOldError: the server predates counters, 2.12 (nothing is sent).
            NoStreamResponseError: no stream stores ``subject``.
            JetStreamError: the stream refused it (e.g. no ``allow_msg_counter``).
            APITimeoutError: no answer in time (the increment may or may not count).
        """
        return await self._jsapi.counter_add(subject, delta, timeout)

    # -- atomic batches (ADR-50) and schedules (ADR-51) ---------------------------------------

    async def publish_batch(
        self, messages: Iterable[Any], *, timeout: float | None = None
    ) -> BatchAck:
        """Publish messages as one atomic batch: the stream stores all of them or none.

        Args:
            messages: ``(subject, payload)`` or ``(subject, payload, headers)``
                tuples, at most 1,000 (the server's limit); their subjects must be
                in one stream with ``allow_atomic=True``.
            timeout: seconds for the whole batch (default: the context's timeout).
                A first message answered "no responders" (a cluster, just after the
                stream is created or while its leader changes) is sent again as a
                ``publish`` would be (twice, 250 ms apart), within it.

        Returns:
            the ``BatchAck``: ``stream``, ``seq`` of the last message, ``batch_id``,
            ``count``.
        Raises:
            BatchAbortedError: nothing was stored, and why (``err_code`` is the
                server's where it said: 10174 ``allow_atomic`` off, 10071 a failed
                expectation, 10176 a message lost or refused, ...); more than
                1,000 messages are refused before anything is sent.
            BatchTimeoutError: a ``BatchAbortedError`` and ``TimeoutError``; if the
                commit's answer is what did not come, the batch may be stored.
            InvalidArgumentError: malformed messages (nothing is sent).
            ServerTooOldError: the server is older than nats-server 2.12.
        """
        return await publish_batch(self._jsapi, messages, timeout)

    async def publish_schedule(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        target: str,
        at: datetime | None = None,
        every: float | timedelta | None = None,
        cron: str | None = None,
        time_zone: str | None = None,
        ttl: float | str | None = None,
        headers: Mapping[str, str | list[str]] | None = None,
        timeout: float | None = None,
        source: str | None = None,
    ) -> PubAck:
        """Store a schedule on ``subject``: the stream publishes ``payload`` (and
        ``headers``) to ``target`` when it says.

        Give exactly one of ``at`` (an aware datetime: once, to the second),
        ``every`` (seconds >= 1) or ``cron`` (6 fields, seconds first, or
        ``"@daily"``-style names). The stream needs ``allow_msg_schedules=True``
        and must hold ``target`` too; one schedule per subject (publishing again
        replaces it).

        Args:
            time_zone: an IANA zone for ``cron`` (default UTC).
            ttl: seconds (>= 1) or ``"never"``: the TTL of the produced messages
                (the stream needs ``allow_msg_ttl=True``).
            source: a subject of the same stream (not the schedule's, not
                ``target``): each firing publishes its last message (payload and
                headers) instead of ``payload``, which stays the fallback while it
                holds none (nats.go ``WithScheduleSource``; nats-server 2.14).

        Raises:
            InvalidArgumentError: a bad schedule (checked before sending).
            ServerTooOldError: ``at`` needs nats-server 2.12; ``every``, ``cron``,
                ``time_zone`` and ``source`` 2.14.
            JetStreamError: the server refused it (with a hint).
        """
        return await publish_schedule(
            self._jsapi,
            subject,
            payload,
            target=target,
            at=at,
            every=every,
            cron=cron,
            time_zone=time_zone,
            ttl=ttl,
            headers=headers,
            timeout=timeout,
            source=source,
        )


async def connect(
    servers: str | list[str] = "nats://127.0.0.1:4222",
    *,
    domain: str | None = None,
    api_prefix: str = "$JS.API",
    timeout: float = 5.0,
    max_pending: int = DEFAULT_MAX_PENDING,
    **nats_options: Any,
) -> JetStream:
    """Open a NATS connection and return a JetStream context that owns it.

    ``nats_options`` go to ``nats.connect`` (``user``, ``password``, ``tls``, ...).
    Use as ``async with await connect(url) as js``; closing the context closes
    the connection. ``servers`` is a URL, a comma-separated list of them (as nats.go
    takes it: ``"nats://a:4222,nats://b:4222"``) or a list.

    Raises:
        InvalidArgumentError: a URL of another scheme than nats, tls, ws or wss.
        JetStreamConnectError: the server cannot be reached.
    """
    # Check our own arguments before opening anything.
    api_prefix_for(domain, api_prefix)
    check_timeout(timeout, allow_infinite=False)  # it bounds the connect, too
    check_int("max_pending", max_pending, minimum=1)
    # A string may name several servers, comma-separated, as nats.go's Connect takes
    # them ("nats://a:4222,nats://b:4222": a cluster's seed list); so may a list's items.
    items = [servers] if isinstance(servers, str) else servers
    if isinstance(items, (list, tuple)) and items and all(isinstance(u, str) and u for u in items):
        urls = [u.strip() for item in items for u in item.split(",") if u.strip()]
    else:
        urls = []
    if not urls:
        raise InvalidArgumentError(
            f"servers must be a URL or a non-empty list of URLs, got {redact_text(repr(servers))}"
        )
    for url in urls:
        _check_scheme(url)
    nc = NatsClient()
    options: dict[str, Any] = {
        "connect_timeout": timeout,
        # A write waiting on a server that does not read gives up after this long.
        "flush_timeout": timeout,
        "ping_interval": _PING_INTERVAL,
        "max_outstanding_pings": _MAX_OUTSTANDING_PINGS,
        "error_cb": _log_error,
        "disconnected_cb": _disconnect_logger(nc),
        "reconnected_cb": _log_reconnected,
    }
    options.update(nats_options)
    # nats-py retries a failed first connect up to max_reconnect_attempts times
    # (two minutes by default); bound it so an unreachable server fails fast.
    deadline = float(options["connect_timeout"]) * max(1, len(urls)) + 1.0
    try:
        await _first_connect(nc, urls, options, deadline)
    except asyncio.CancelledError:
        # nats-py leaves the socket of a connect cut short open: drop it.
        abort_socket(nc)
        raise
    # ValueError: an INFO line without an end (asyncio's readline limit) or not JSON.
    except (OSError, asyncio.TimeoutError, ValueError, nats.errors.Error) as exc:
        last = getattr(nc, "_err", None) or exc
        reason = str(last) or f"{type(last).__name__} (no answer within {deadline:.0f}s)"
        # Bounded: a server that accepted but does not read could hold a plain close.
        await close_connection(nc, 1.0)
        await close_websocket_session(nc, 1.0)
        where = ", ".join(redact_url(u) for u in urls)
        if isinstance(exc, ConnectionRefusedError):
            raise JetStreamConnectError(
                f"no NATS server at {where} (connection refused): start one with "
                "`aioclients-servers` or `nats-server -js`, or check the address"
            ) from None
        if isinstance(last, asyncio.TimeoutError) and not str(last):
            # Accepted, then silent: nats-server greets with INFO at once; nsqd and
            # most other servers wait for the client to speak first.
            reason += ": nats-server answers at once; is this its client port (4222)?"
        raise JetStreamConnectError(
            f"cannot connect to NATS at {where}: {redact_text(reason)}"
        ) from None
    js = JetStream(
        nc, domain=domain, api_prefix=api_prefix, timeout=timeout, max_pending=max_pending
    )
    js._jsapi.owns_connection = True
    return js


#: The URL schemes nats-py connects with; a URL without one is taken as nats://.
_NATS_SCHEMES = ("nats", "tls", "ws", "wss")


def _check_scheme(url: str) -> None:
    """Refuse at once a URL nats-py would only fail on, seconds later, as a DNS error."""
    scheme, sep, _ = url.partition("://")
    if sep and scheme.lower() not in _NATS_SCHEMES:
        raise InvalidArgumentError(
            f"{redact_url(url)} is not a NATS URL: use nats://host:port (4222 by default), "
            "or tls://, ws://, wss://"
        )


async def _log_error(exc: Exception) -> None:
    # nats-py's errors may quote a server URL, with the credentials in it.
    log.warning("NATS connection error: %s", redact_text(str(exc) or type(exc).__name__))


async def _first_connect(
    nc: NatsClient, urls: list[str], options: dict[str, Any], deadline: float
) -> None:
    """``nc.connect``, bounded by ``deadline``, failing at once when every server refused.

    nats-py tries the servers in turn, waiting ``reconnect_time_wait`` (2 s) before it
    tries one again; a refusal from each, one round, answers the question (nats.go's
    ``Connect`` does not retry a refused first connect either).

    Raises:
        ConnectionRefusedError: every server refused the connection.
        asyncio.TimeoutError: no connection within ``deadline`` seconds.
    """
    refused_in_a_row = 0
    all_refused = asyncio.Event()
    first_connect = True
    error_cb = options["error_cb"]

    async def count_refusals(exc: Exception) -> None:
        nonlocal refused_in_a_row
        if first_connect:
            if isinstance(exc, ConnectionRefusedError):
                refused_in_a_row += 1
                if refused_in_a_row >= len(urls):  # each server, one round
                    all_refused.set()
                if error_cb is _log_error:  # connect() raises it, naming the servers
                    log.debug("NATS connection refused: %s", exc)
                    return
            else:
                refused_in_a_row = 0
        await error_cb(exc)

    connecting = asyncio.ensure_future(nc.connect(urls, **{**options, "error_cb": count_refusals}))
    refusals = asyncio.ensure_future(all_refused.wait())
    try:
        await asyncio.wait(
            {connecting, refusals}, timeout=deadline, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        first_connect = False
        refusals.cancel()
        if not connecting.done():
            connecting.cancel()
            await asyncio.wait({connecting})
    if not connecting.cancelled():
        connecting.result()  # connected, or nats-py's own error
    elif all_refused.is_set():
        raise ConnectionRefusedError("every server refused the connection")
    else:
        raise asyncio.TimeoutError


def _disconnect_logger(nc: NatsClient) -> Callable[[], Any]:
    async def disconnected() -> None:
        # A close we asked for is no news; a lost connection is.
        if nc.is_closed:
            log.debug("NATS connection closed")
        else:
            log.info("NATS disconnected")

    return disconnected


async def _log_reconnected() -> None:
    log.info("NATS reconnected")
