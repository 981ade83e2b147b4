"""The Liftbridge client: the public API (streams, publishing, subscriptions, cursors, groups).

The package reads top-down; each layer imports only from the ones below it
(``tests/liftbridge/test_import_layers.py`` checks it):

* ``_client`` (this module): :class:`Client` and :func:`connect`. Checks the
  arguments (``_protocol._args``), builds the requests and hands them to the
  broker layer; owns what each public call means (e.g. that create/delete/
  pause/readonly return once the brokers show the change, the partitioner
  choice, the AckPolicy.ALL timeout hint).
* ``_consumer`` (:class:`GroupConsumer`), then ``_subscription``
  (:class:`Subscription`), ``_publisher`` (:class:`AsyncPublisher`) and
  ``_groups`` (group and cursor calls): each takes the broker layer.
* ``_brokers`` (:class:`Brokers`): channels, the Subscribe pool, metadata,
  the resilient and leader-routed calls and THE retry policy.
* ``_io._grpc``: channels, TLS, gRPC error mapping; the package's one door
  to the HTTP/2 gRPC transport :mod:`aioclients._grpc_h2`.
* ``_protocol`` (pure: no I/O, no clock) and ``_errors``, ``_pb``.

``close()`` is idempotent: it lets PublishAsync deliver outstanding acks, ends
subscriptions (readers get ``LiftbridgeClosedError``) and closes every channel.
Every public method raises ``LiftbridgeClosedError`` afterwards.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, overload

import grpc

from aioclients._core import check_int, redact_url
from aioclients._errors import InvalidArgumentError
from aioclients.liftbridge import _groups
from aioclients.liftbridge._brokers import Brokers
from aioclients.liftbridge._consumer import GroupConsumer
from aioclients.liftbridge._errors import (
    IncorrectOffsetError,
    LiftbridgeError,
    LiftbridgeServerError,
    LiftbridgeTimeoutError,
    NoSuchPartitionError,
    NoSuchStreamError,
)
from aioclients.liftbridge._groups import SET_CURSOR_TIMEOUT, ConsumerGroupJoin
from aioclients.liftbridge._io._grpc import (
    ChannelFactory,
    channel_credentials,
    stream_ssl_context,
)
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._protocol._args import (
    INT32_MAX,
    INT64_MAX,
    STREAM_OPTIONS,
    build_subscribe_request,
    check_ack_policy,
    check_bytes,
    check_headers,
    check_name,
    check_partition,
    check_partitions,
    check_seconds,
    check_subject,
)
from aioclients.liftbridge._protocol._metadata import Metadata, PartitionInfo, partition_from_pb
from aioclients.liftbridge._protocol._partition import (
    PartitionByKey,
    PartitionByRoundRobin,
    Partitioner,
)
from aioclients.liftbridge._protocol._types import Ack, AckPolicy, StartPosition, StopPosition
from aioclients.liftbridge._publisher import AsyncPublisher, async_error
from aioclients.liftbridge._subscription import Subscription

__all__ = ("Client", "ConsumerGroupJoin", "connect")

#: The ack policies with an ack: publish returns an Ack for these (None for NONE).
_Acked = Literal[AckPolicy.LEADER, AckPolicy.ALL]

_PARTITION_BY_KEY = PartitionByKey()
# How long a publish answered NOT_FOUND for a stream the metadata lists is
# repeated (a real cluster applies metadata changes through Raft, broker by
# broker, some ms apart).
_NOT_FOUND_RETRY_TIME = 3.0
_ALL_ACK_HINT = (
    "; with AckPolicy.ALL the first message of a new replicated partition waits for "
    "the followers' first fetch (up to ~10 s on a real cluster, replica.max.idle.wait): "
    "raise timeout/ack_wait_time (e.g. 15 s); and while an in-sync replica is down, "
    "every message waits until the leader drops it from the ISR (replica.max.lag.time, "
    "15 s); the message may have been stored"
)

_CONNECT_OPTIONS = frozenset(
    {
        "stream_transport",
        "rpc_timeout",
        "cursor_timeout",
        "max_rpc_attempts",
        "publish_async_window",
        "metadata_max_age",
        "rng",
        "clock",
        "tls_root_certificates",
        "tls_client_cert",
        "tls_client_key",
        "tls_server_name",
        "grpc_options",
    }
)


def _policy_is_all(req: Any) -> bool:
    return bool(req.ackPolicy == pb.ALL)


def _stream_pb(resp: Any, name: str) -> Any:
    for stream in resp.streamMetadata:
        if stream.name == name and stream.error == pb.StreamMetadata.OK:
            return stream
    return None


def _stream_ready(name: str) -> Callable[[Any], bool]:
    def shows(resp: Any) -> bool:
        stream = _stream_pb(resp, name)
        return stream is not None and all(p.leader for p in stream.partitions.values())

    return shows


def _stream_created(name: str) -> Callable[[Any], object]:
    return lambda resp: _stream_pb(resp, name).creationTimestamp


def _stream_gone(name: str) -> Callable[[Any], bool]:
    return lambda resp: _stream_pb(resp, name) is None


def _partitions_show(
    name: str, partitions: list[int], field: str, value: bool
) -> Callable[[Any], bool]:
    def shows(resp: Any) -> bool:
        stream = _stream_pb(resp, name)
        if stream is None:
            return False
        wanted = partitions or list(stream.partitions)
        return all(
            p in stream.partitions and getattr(stream.partitions[p], field) == value for p in wanted
        )

    return shows


class _BrokersAlias:
    """A Client attribute that is its broker layer's (the old private names, which
    tests read and replace): reading and assigning go to ``client._brokers``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, client: Client | None, owner: type | None = None) -> Any:
        if client is None:
            return self
        return getattr(client._brokers, self.name)

    def __set__(self, client: Client, value: Any) -> None:
        setattr(client._brokers, self.name, value)


class Client:
    """A connection to a Liftbridge cluster. Create it with :func:`connect`."""

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        factory: ChannelFactory,
        resubscribe_wait_time: float,
        ack_wait_time: float,
        max_conns_per_broker: int,
        keepalive_time: float,
        rpc_timeout: float = 10.0,
        cursor_timeout: float | None = None,
        max_rpc_attempts: int = 10,
        publish_async_window: int = 1024,
        metadata_max_age: float = 60.0,
        rng: random.Random | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._brokers = Brokers(
            list(addresses),
            factory=factory,
            max_conns_per_broker=max_conns_per_broker,
            keepalive_time=keepalive_time,
            rpc_timeout=rpc_timeout,
            cursor_timeout=cursor_timeout,
            max_rpc_attempts=max_rpc_attempts,
            metadata_max_age=metadata_max_age,
            rng=rng,
            clock=clock,
        )
        self._resubscribe_wait_time = resubscribe_wait_time
        self._ack_wait_time = ack_wait_time
        self._publisher = AsyncPublisher(self._brokers, window=publish_async_window)
        self._round_robin = PartitionByRoundRobin()

    # The broker layer's state and calls under their old names on the client.
    _metadata = _BrokersAlias("metadata")
    _current = _BrokersAlias("current")
    _stream_channels = _BrokersAlias("stream_channels")
    _jitter = _BrokersAlias("jitter")
    _channel = _BrokersAlias("channel")
    _stub_for = _BrokersAlias("stub_for")
    _refresh_metadata = _BrokersAlias("refresh_metadata")
    _acquire_subscribe_channel = _BrokersAlias("acquire_subscribe_channel")
    _release_subscribe_channel = _BrokersAlias("release_subscribe_channel")

    # -- lifecycle -------------------------------------------------------------

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._brokers.closed

    async def close(self) -> None:
        """Close subscriptions, the PublishAsync stream and every connection (idempotent).

        Outstanding ``publish_async`` acks are awaited (each until its own
        deadline); subscription readers get ``LiftbridgeClosedError``.
        """
        if self._brokers.closed:
            return
        await self._publisher.close()
        await self._brokers.close()

    def pool_statistics(self) -> dict[str, int]:
        """Open Subscribe connections per broker address."""
        return self._brokers.pool_statistics()

    # -- streams ---------------------------------------------------------------------

    async def create_stream(
        self,
        subject: str,
        name: str,
        *,
        group: str | None = None,
        replication_factor: int = 1,
        max_replication: bool = False,
        partitions: int = 1,
        **stream_options: Any,
    ) -> None:
        """Create a stream attached to a NATS subject (partition n listens on ``subject.n``).

        Returns once every reachable broker's metadata lists the stream with its
        leaders (at most 5 s after the broker accepted it: a real cluster applies
        it through Raft, broker by broker), all with the same creation time: a
        broker that still shows a deleted stream of that name has not applied the
        delete, and still stores what is published on its subject in the old log.

        Args:
            subject: the NATS subject of partition 0.
            name: the stream name (unique in the cluster).
            group: a NATS queue group shared with other streams on the subject.
            replication_factor: replicas per partition (-1: every broker).
            max_replication: replicate to every broker (overrides replication_factor).
            partitions: the number of partitions (>= 1).
            **stream_options: ``retention_max_bytes``, ``retention_max_messages``,
                ``retention_max_age`` (s), ``cleaner_interval`` (s), ``segment_max_bytes``,
                ``segment_max_age`` (s), ``compact_max_goroutines``, ``compact_enabled``,
                ``auto_pause_time`` (s), ``auto_pause_disable_if_subscribers``, ``min_isr``,
                ``optimistic_concurrency_control``, ``encryption``; unset ones take the
                server's defaults.

        Raises:
            StreamExistsError: a stream of that name exists.
            InvalidArgumentError: a bad argument or an unknown option.
        """
        req = pb.CreateStreamRequest(
            subject=check_subject("subject", subject), name=check_name("name", name)
        )
        if group is not None:
            req.group = check_name("group", group)
        if max_replication:
            req.replicationFactor = -1
        else:
            if replication_factor != -1:
                check_int("replication_factor", replication_factor, minimum=1)
            if replication_factor > INT32_MAX:
                raise InvalidArgumentError(f"replication_factor {replication_factor} is too large")
            req.replicationFactor = replication_factor
        check_int("partitions", partitions, minimum=1)
        if partitions > INT32_MAX:
            raise InvalidArgumentError(f"partitions {partitions} is too large")
        req.partitions = partitions
        for key, value in stream_options.items():
            if key not in STREAM_OPTIONS:
                raise InvalidArgumentError(
                    f"unknown stream option {key!r}; known: {', '.join(sorted(STREAM_OPTIONS))}"
                )
            if value is None:
                continue
            field, kind = STREAM_OPTIONS[key]
            target = getattr(req, field)
            if kind == "bool":
                if not isinstance(value, bool):
                    raise InvalidArgumentError(f"{key} must be a bool, got {value!r}")
                target.value = value
            elif kind == "duration":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise InvalidArgumentError(f"{key} must be seconds >= 0, got {value!r}")
                target.value = round(value * 1000)
            else:
                limit = INT32_MAX if kind == "int32" else INT64_MAX
                check_int(key, value, minimum=0)
                if value > limit:
                    raise InvalidArgumentError(f"{key} must be <= {limit}, got {value!r}")
                target.value = value
        await self._brokers.rpc("CreateStream", req, what=f"create_stream {name!r}")
        await self._brokers.settle(
            f"create_stream {name!r}",
            [name],
            _stream_ready(name),
            incarnation=_stream_created(name),
        )

    async def delete_stream(self, name: str) -> None:
        """Delete a stream and all its partitions.

        Returns once no reachable broker lists it any more (at most 5 s more).

        Raises:
            NoSuchStreamError: there is no such stream.
        """
        req = pb.DeleteStreamRequest(name=check_name("name", name))
        await self._brokers.rpc("DeleteStream", req, what=f"delete_stream {name!r}")
        await self._brokers.settle(f"delete_stream {name!r}", [name], _stream_gone(name))

    async def pause_stream(
        self, name: str, *, partitions: Sequence[int] | None = None, resume_all: bool = False
    ) -> None:
        """Pause some (default: all) partitions; publishing to one resumes it.

        Returns once every reachable broker shows them paused (at most 5 s more).

        Args:
            name: the stream.
            partitions: the partitions to pause (None: all).
            resume_all: publishing to any partition resumes every one.

        Raises:
            NoSuchPartitionError: no such stream or partition.
        """
        req = pb.PauseStreamRequest(
            name=check_name("name", name),
            partitions=check_partitions(partitions),
            resumeAll=resume_all,
        )
        await self._brokers.rpc(
            "PauseStream", req, what=f"pause_stream {name!r}", not_found=NoSuchPartitionError
        )
        await self._brokers.settle(
            f"pause_stream {name!r}",
            [name],
            _partitions_show(name, list(req.partitions), "paused", True),
        )

    async def set_stream_readonly(
        self, name: str, *, partitions: Sequence[int] | None = None, readonly: bool = True
    ) -> None:
        """Make some (default: all) partitions readonly, or writable again.

        Returns once every reachable broker shows the change (at most 5 s more).

        Raises:
            NoSuchPartitionError: no such stream or partition.
        """
        req = pb.SetStreamReadonlyRequest(
            name=check_name("name", name),
            partitions=check_partitions(partitions),
            readonly=readonly,
        )
        await self._brokers.rpc(
            "SetStreamReadonly",
            req,
            what=f"set_stream_readonly {name!r}",
            not_found=NoSuchPartitionError,
        )
        await self._brokers.settle(
            f"set_stream_readonly {name!r}",
            [name],
            _partitions_show(name, list(req.partitions), "readonly", readonly),
        )

    # -- metadata ---------------------------------------------------------------------

    async def fetch_metadata(self) -> Metadata:
        """Fetch the cluster's metadata from a broker (always a fresh fetch).

        Returns:
            An immutable :class:`Metadata` snapshot.
        """
        return await self._brokers.fetch_metadata()

    async def fetch_partition_metadata(self, stream: str, partition: int) -> PartitionInfo:
        """Fetch one partition's metadata from its leader.

        A paused partition's leader refuses FetchPartitionMetadata as if it did not
        lead (Liftbridge v1.9 closes a paused partition): its view then comes from
        that broker's FetchMetadata (``paused`` true, its own offsets).

        Raises:
            NoSuchPartitionError: no such stream or partition.
        """
        resp = await self._brokers.partition_metadata(
            check_name("stream", stream), check_partition(partition)
        )
        return partition_from_pb(resp.metadata)

    # -- publishing ---------------------------------------------------------------------

    def _resolve_partitioner(self, partitioner: object) -> Partitioner | None:
        if partitioner is None:
            return None
        if partitioner == "key":
            return _PARTITION_BY_KEY
        if partitioner == "round_robin":
            return self._round_robin
        # (str has a .partition method too: the protocol check alone would accept it)
        if not isinstance(partitioner, (str, bytes)) and isinstance(partitioner, Partitioner):
            return partitioner
        raise InvalidArgumentError(
            f"partitioner must be 'key', 'round_robin' or a Partitioner, got {partitioner!r}"
        )

    async def _publish_request(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None,
        headers: Mapping[str, bytes] | None,
        partition: int | None,
        partitioner: object,
        ack_policy: AckPolicy,
        expected_offset: int | None,
        correlation_id: str | None,
    ) -> tuple[pb.PublishRequest, int]:
        self._brokers.check_open()
        stream = check_name("stream", stream)
        value_b = check_bytes("value", value)
        key_b = check_bytes("key", key, optional=True)
        policy = check_ack_policy(ack_policy)
        chooser = self._resolve_partitioner(partitioner)
        if partition is not None:
            target = check_partition(partition)
        elif chooser is not None:
            md = await self._brokers.metadata_with(stream)
            if md.get_stream(stream) is None:
                raise NoSuchStreamError(
                    f"publish: no stream {stream!r}; create it first", code="NOT_FOUND"
                )
            target = check_partition(
                chooser.partition(stream, key, value_b, md), "the partitioner's result"
            )
        else:
            target = 0
        if expected_offset is not None:
            if (
                isinstance(expected_offset, bool)
                or not isinstance(expected_offset, int)
                or not (-1 <= expected_offset <= INT64_MAX)
            ):
                raise InvalidArgumentError(
                    f"expected_offset must be an int >= -1, got {expected_offset!r}"
                )
        if correlation_id is not None and not isinstance(correlation_id, str):
            raise InvalidArgumentError(f"correlation_id must be a str, got {correlation_id!r}")
        req = pb.PublishRequest(
            stream=stream,
            partition=target,
            key=key_b,
            value=value_b,
            headers=check_headers(headers),
            ackPolicy=int(policy),  # type: ignore[arg-type]
            correlationId=correlation_id or "",
            expectedOffset=-1 if expected_offset is None else expected_offset,
        )
        return req, target

    @overload
    async def publish(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        partitioner: str | Partitioner | None = None,
        ack_policy: _Acked = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> Ack: ...

    @overload
    async def publish(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        partitioner: str | Partitioner | None = None,
        ack_policy: AckPolicy,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> Ack | None: ...

    async def publish(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        partitioner: str | Partitioner | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> Ack | None:
        """Publish a message to a stream partition and wait for its ack.

        Args:
            stream: the stream.
            value: the payload.
            key: the message key (used by ``partitioner="key"`` and compaction).
            headers: ``dict[str, bytes]``.
            partition: an explicit partition (wins over ``partitioner``).
            partitioner: ``"key"``, ``"round_robin"`` or a :class:`Partitioner`.
            ack_policy: LEADER (default), ALL, or NONE (returns None at once).
            expected_offset: the offset the message must get (streams with
                optimistic concurrency control); None means "next".
            correlation_id: echoed in the ack.
            timeout: seconds to wait for the ack (default ``ack_wait_time``).

        Returns:
            The :class:`Ack`, or None with ``AckPolicy.NONE``.

        Raises:
            NoSuchStreamError / NoSuchPartitionError: no such stream or partition.
            ReadonlyPartitionError: the partition is readonly.
            IncorrectOffsetError: ``expected_offset`` did not match.
            LiftbridgeTimeoutError: no ack in time (a ``TimeoutError``).
            LiftbridgeConnectError: no broker reachable (retried on UNAVAILABLE only), or
                the call broke with the request in flight: the message may or may not be
                stored and is not sent again.
        """
        wait = self._ack_wait_time if timeout is None else check_seconds("timeout", timeout)
        req, target = await self._publish_request(
            stream,
            value,
            key=key,
            headers=headers,
            partition=partition,
            partitioner=partitioner,
            ack_policy=ack_policy,
            expected_offset=expected_offset,
            correlation_id=correlation_id,
        )
        what = f"publish to {stream}/{target}"

        async def not_applied_yet(exc: LiftbridgeError) -> bool:
            # NOT_FOUND: the broker did not store the message, so sending it
            # again cannot duplicate it. Right after a create_stream (by any
            # client) a broker may not have applied it yet: repeat while the
            # metadata lists the partition, for a bounded time.
            return isinstance(
                exc, (NoSuchStreamError, NoSuchPartitionError)
            ) and await self._brokers.partition_listed(stream, target)

        try:
            resp = await self._brokers.rpc_repeated(
                "Publish",
                req,
                what=what,
                transient=not_applied_yet,
                within=_NOT_FOUND_RETRY_TIME,
                timeout=wait,
                not_found=NoSuchStreamError,
                stores=True,
                on_stream_channel=True,
            )
        except LiftbridgeTimeoutError as exc:
            if _policy_is_all(req):
                raise LiftbridgeTimeoutError(str(exc) + _ALL_ACK_HINT) from None
            raise
        if resp.HasField("asyncError"):
            raise async_error(resp.asyncError, f"publish to {stream}/{target}")
        if not resp.HasField("ack"):
            return None
        ack = Ack._from_pb(resp.ack, target)
        if ack.ack_error == "INCORRECT_OFFSET":
            raise IncorrectOffsetError(
                f"publish to {stream}/{target}: incorrect expected offset {expected_offset}",
                code="INCORRECT_OFFSET",
            )
        if ack.ack_error is not None:
            raise LiftbridgeServerError(
                f"publish to {stream}/{target}: the broker rejected the message ({ack.ack_error})",
                code=ack.ack_error,
            )
        return ack

    async def publish_async(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        partitioner: str | Partitioner | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> asyncio.Future[Ack | None]:
        """Send a message on the pipelined PublishAsync stream; don't wait for the ack.

        Awaiting this returns once the message is written (waiting first while
        ``publish_async_window`` acks are outstanding).

        Takes the same arguments as :meth:`publish`; ``correlation_id`` defaults to a
        unique id.

        Returns:
            A future resolved with the :class:`Ack` (None for ``AckPolicy.NONE``),
            or failed with the errors :meth:`publish` raises.

        Raises:
            LiftbridgeClosedError: the client is closed.
            InvalidArgumentError: a bad argument, or a ``correlation_id`` that is
                already awaiting its ack (also when found after waiting for the window).
        """
        wait = self._ack_wait_time if timeout is None else check_seconds("timeout", timeout)
        req, target = await self._publish_request(
            stream,
            value,
            key=key,
            headers=headers,
            partition=partition,
            partitioner=partitioner,
            ack_policy=ack_policy,
            expected_offset=expected_offset,
            correlation_id=correlation_id,
        )
        if not req.correlationId:
            req.correlationId = self._publisher.next_correlation_id()
        return await self._publisher.send(req, partition=target, timeout=wait)

    async def publish_to_subject(
        self,
        subject: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_inbox: str | None = None,
        correlation_id: str | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        timeout: float | None = None,
    ) -> Ack | None:
        """Publish a Liftbridge message to a NATS subject (every stream on it stores it).

        Returns:
            The first :class:`Ack` (its ``partition`` is None), or None with
            ``AckPolicy.NONE``.

        Raises:
            LiftbridgeTimeoutError: no ack in time (e.g. no stream on the subject).
        """
        self._brokers.check_open()
        wait = self._ack_wait_time if timeout is None else check_seconds("timeout", timeout)
        req = pb.PublishToSubjectRequest(
            subject=check_subject("subject", subject),
            value=check_bytes("value", value),
            key=check_bytes("key", key, optional=True),
            headers=check_headers(headers),
            ackInbox=check_subject("ack_inbox", ack_inbox) if ack_inbox is not None else "",
            correlationId=correlation_id or "",
            ackPolicy=int(check_ack_policy(ack_policy)),  # type: ignore[arg-type]
        )
        resp = await self._brokers.rpc(
            "PublishToSubject",
            req,
            what=f"publish_to_subject {subject!r}",
            timeout=wait,
            stores=True,
        )
        if not resp.HasField("ack"):
            return None
        return Ack._from_pb(resp.ack)

    # -- subscribing --------------------------------------------------------------------

    def subscribe(
        self,
        stream: str,
        *,
        partition: int = 0,
        start_at: StartPosition = StartPosition.NEW_ONLY,
        start_offset: int | None = None,
        start_time: datetime | int | None = None,
        start_time_delta: Any = None,
        stop_at: StopPosition | None = None,
        stop_offset: int | None = None,
        stop_time: datetime | int | None = None,
        read_isr_replica: bool = False,
        resume: bool = False,
    ) -> Subscription:
        """A subscription to one partition (sync; open it with ``async with``).

        ``async with client.subscribe(...) as sub`` returns once the broker has
        confirmed the subscription, so with ``NEW_ONLY`` nothing published
        afterwards is missed; ``async for msg in sub`` then reads messages.

        Args:
            stream: the stream.
            partition: the partition (default 0).
            start_at: NEW_ONLY (default), OFFSET, EARLIEST, LATEST or TIMESTAMP.
            start_offset: start here (implies OFFSET); past the end, the broker
                starts at its next message and lower offsets are dropped.
            start_time: an aware datetime or int ns since the epoch (implies TIMESTAMP).
            start_time_delta: a timedelta or float seconds back from now (implies TIMESTAMP).
            stop_at: OFFSET, LATEST or TIMESTAMP; the iteration then ends there.
            stop_offset: the last offset to read (implies OFFSET).
            stop_time: where to stop (implies TIMESTAMP).
            read_isr_replica: read from a random in-sync replica, not only the leader.
            resume: resume the partition if it is paused.

        Returns:
            A :class:`Subscription`.

        Raises:
            InvalidArgumentError: inconsistent or bad arguments.
            LiftbridgeClosedError: the client is closed.
        """
        self._brokers.check_open()
        req = build_subscribe_request(
            stream,
            partition=partition,
            start_at=start_at,
            start_offset=start_offset,
            start_time=start_time,
            start_time_delta=start_time_delta,
            stop_at=stop_at,
            stop_offset=stop_offset,
            stop_time=stop_time,
            read_isr_replica=read_isr_replica,
            resume=resume,
            now_ns=time.time_ns(),
        )
        return Subscription(self._brokers, req, resubscribe_wait_time=self._resubscribe_wait_time)

    # -- cursors ------------------------------------------------------------------------

    async def set_cursor(self, cursor_id: str, stream: str, partition: int, offset: int) -> None:
        """Store a cursor: ``offset`` is the last offset processed by ``cursor_id``.

        Waits up to the ``cursor_timeout`` option for the broker (25 s unless
        ``rpc_timeout`` or ``cursor_timeout`` is given): it stores the cursor in the
        ``__cursors`` stream, acked by every replica, and the first cursor after a
        minute without one waits for the followers (about 9 s).

        Raises:
            NoSuchPartitionError: no such stream or partition.
        """
        if isinstance(offset, bool) or not isinstance(offset, int) or not -1 <= offset <= INT64_MAX:
            raise InvalidArgumentError(f"offset must be an int >= -1, got {offset!r}")
        await _groups.set_cursor(
            self._brokers,
            check_name("cursor_id", cursor_id),
            check_name("stream", stream),
            check_partition(partition),
            offset,
        )

    async def fetch_cursor(self, cursor_id: str, stream: str, partition: int) -> int:
        """The stored cursor offset, or -1 when there is none.

        Raises:
            NoSuchPartitionError: no such stream or partition.
        """
        return await _groups.fetch_cursor(
            self._brokers,
            check_name("cursor_id", cursor_id),
            check_name("stream", stream),
            check_partition(partition),
        )

    # -- consumer groups ----------------------------------------------------------------

    async def join_consumer_group(
        self, group_id: str, consumer_id: str, streams: Sequence[str]
    ) -> ConsumerGroupJoin:
        """Join (or create) a consumer group consuming ``streams``.

        Returns:
            The coordinator broker id, the epoch and the group's timeouts.

        Raises:
            NoSuchStreamError: one of ``streams`` does not exist.
            LiftbridgeServerError: refused otherwise (e.g. FAILED_PRECONDITION: the
                consumer is already a member).
        """
        names = [check_name("each stream", s) for s in streams]
        if not names:
            raise InvalidArgumentError("streams must name at least one stream")
        return await _groups.join_group(
            self._brokers,
            check_name("group_id", group_id),
            check_name("consumer_id", consumer_id),
            names,
        )

    async def fetch_consumer_group_assignments(
        self, group_id: str, consumer_id: str, epoch: int, *, coordinator: str
    ) -> tuple[int, dict[str, list[int]]]:
        """Ask the group coordinator for this member's partitions.

        Returns:
            ``(epoch, {stream: [partition, ...]})``.
        """
        check_int("epoch", epoch, minimum=0)
        return await _groups.fetch_assignments(
            self._brokers,
            check_name("group_id", group_id),
            check_name("consumer_id", consumer_id),
            epoch,
            check_name("coordinator", coordinator),
        )

    async def report_consumer_group_coordinator(
        self, group_id: str, consumer_id: str, coordinator: str, epoch: int
    ) -> None:
        """Tell the cluster the coordinator does not answer (a majority elects another)."""
        check_int("epoch", epoch, minimum=0)
        await _groups.report_coordinator(
            self._brokers,
            check_name("group_id", group_id),
            check_name("consumer_id", consumer_id),
            check_name("coordinator", coordinator),
            epoch,
        )

    def consumer(
        self,
        group_id: str,
        streams: Sequence[str],
        *,
        consumer_id: str | None = None,
        auto_offset: StartPosition = StartPosition.NEW_ONLY,
        checkpoint_interval: float | None = 5.0,
        fetch_interval: float | None = None,
        buffer: int = 1024,
    ) -> GroupConsumer:
        """A consumer-group member reading the partitions the group assigns it (sync call).

        ``async with client.consumer("g", ["s"]) as c: async for msg in c: ...``

        Args:
            group_id: the group.  streams: the streams the group consumes.
            consumer_id: this member's id (default: a random one).
            auto_offset: where to start a partition the group has no cursor for
                (NEW_ONLY, EARLIEST or LATEST).
            checkpoint_interval: seconds between cursor commits (None: only on
                ``checkpoint()`` and close).
            fetch_interval: seconds between assignment fetches (default 0.7 x the
                group's consumer timeout).
            buffer: messages buffered across the member's partitions.

        Returns:
            A :class:`GroupConsumer`.
        """
        self._brokers.check_open()
        names = [check_name("each stream", s) for s in streams]
        if not names:
            raise InvalidArgumentError("streams must name at least one stream")
        if auto_offset not in (
            StartPosition.NEW_ONLY,
            StartPosition.EARLIEST,
            StartPosition.LATEST,
        ):
            raise InvalidArgumentError(
                f"auto_offset must be NEW_ONLY, EARLIEST or LATEST, got {auto_offset!r}"
            )
        member = (
            consumer_id if consumer_id is not None else f"{self._brokers.rng.getrandbits(64):016x}"
        )
        return GroupConsumer(
            self._brokers,
            check_name("group_id", group_id),
            names,
            consumer_id=check_name("consumer_id", member),
            auto_offset=auto_offset,
            checkpoint_interval=None
            if checkpoint_interval is None
            else check_seconds("checkpoint_interval", checkpoint_interval),
            fetch_interval=None
            if fetch_interval is None
            else check_seconds("fetch_interval", fetch_interval),
            buffer=check_int("buffer", buffer, minimum=1),
            resubscribe_wait_time=self._resubscribe_wait_time,
        )

    async def leave_consumer_group(self, group_id: str, consumer_id: str) -> None:
        """Leave a consumer group."""
        await _groups.leave_group(
            self._brokers, check_name("group_id", group_id), check_name("consumer_id", consumer_id)
        )


async def connect(
    addresses: str | list[str],
    *,
    tls: Any = None,
    resubscribe_wait_time: float = 30.0,
    ack_wait_time: float = 5.0,
    max_conns_per_broker: int = 2,
    keepalive_time: float = 30.0,
    **options: Any,
) -> Client:
    """Connect to a Liftbridge cluster and fetch its metadata.

    Args:
        addresses: ``"host:port"`` or a list (one reachable broker is enough;
            the others are learnt from the metadata).
        tls: an ``ssl.SSLContext`` (its CA certificates are handed to gRPC) or
            ``grpc.ChannelCredentials``; None for plaintext.
        resubscribe_wait_time: how long a broken subscription keeps trying to
            resubscribe (seconds).
        ack_wait_time: the default time to wait for a publish ack (seconds).
        max_conns_per_broker: Subscribe connections per broker.
        keepalive_time: seconds an unused Subscribe connection stays open.
        **options: ``rpc_timeout`` (10 s), ``cursor_timeout`` (``set_cursor``'s
            deadline: 25 s, or ``rpc_timeout`` when only that is given),
            ``max_rpc_attempts`` (10),
            ``publish_async_window`` (1024 outstanding acks), ``metadata_max_age``
            (60 s), ``rng`` (a ``random.Random``), ``clock``, ``tls_root_certificates``,
            ``tls_client_cert``, ``tls_client_key`` (PEM paths), ``tls_server_name``,
            ``grpc_options`` (extra channel arguments), ``stream_transport``
            (``"auto"``: Subscribe, PublishAsync and Publish run on the client's own
            HTTP/2 code, several times cheaper per message than ``grpc.aio``,
            unless ``tls`` is ``grpc.ChannelCredentials``; ``"http2"``; ``"grpc"``:
            every call on ``grpc.aio``).

    Returns:
        A connected :class:`Client` (use ``async with``).

    Raises:
        LiftbridgeConnectError: no broker answered; at once when every address
            refuses the connection.
        InvalidArgumentError: bad arguments.
    """
    if isinstance(addresses, str):
        addresses = [addresses]
    if not isinstance(addresses, (list, tuple)) or not addresses:
        raise InvalidArgumentError("addresses must be 'host:port' or a non-empty list of them")
    seeds = []
    for address in addresses:
        if not isinstance(address, str) or ":" not in address or address.rsplit(":", 1)[1] == "":
            raise InvalidArgumentError(
                f"each address must be 'host:port', got {redact_url(address)!r}"
            )
        if "://" in address:
            # gRPC read "liftbridge://h:9292" as a host name and retried it for seconds.
            raise InvalidArgumentError(
                f"a Liftbridge address is 'host:port' without a scheme, got "
                f"{redact_url(address)!r} (the brokers listen on 9292 by default)"
            )
        if "@" in address:
            # gRPC has no use for URL user info; a secret here would only be
            # printed in errors and logs.
            raise InvalidArgumentError(
                f"a Liftbridge address is 'host:port' without user info or token, got "
                f"{redact_url(address)!r}; authenticate with TLS client certificates "
                "(tls_client_cert / tls_client_key)"
            )
        seeds.append(address.strip())
    unknown = set(options) - _CONNECT_OPTIONS
    if unknown:
        raise InvalidArgumentError(
            f"unknown connect option(s) {sorted(unknown)}; known: {sorted(_CONNECT_OPTIONS)}"
        )
    rpc_timeout = check_seconds("rpc_timeout", options.get("rpc_timeout", 10.0))
    # A first cursor after a minute idle takes ~9 s on a real cluster (see
    # set_cursor): more than rpc_timeout's default leaves, unless the caller chose.
    cursor_default = rpc_timeout if "rpc_timeout" in options else SET_CURSOR_TIMEOUT
    cursor_timeout = check_seconds("cursor_timeout", options.get("cursor_timeout", cursor_default))
    max_attempts = check_int("max_rpc_attempts", options.get("max_rpc_attempts", 10), minimum=1)
    window = check_int("publish_async_window", options.get("publish_async_window", 1024), minimum=1)
    metadata_max_age = check_seconds("metadata_max_age", options.get("metadata_max_age", 60.0))
    if (
        isinstance(resubscribe_wait_time, bool)
        or not isinstance(resubscribe_wait_time, (int, float))
        or (resubscribe_wait_time < 0)
    ):
        raise InvalidArgumentError(
            f"resubscribe_wait_time must be seconds >= 0, got {resubscribe_wait_time!r}"
        )
    ack_wait = check_seconds("ack_wait_time", ack_wait_time)
    check_int("max_conns_per_broker", max_conns_per_broker, minimum=1)
    if (
        isinstance(keepalive_time, bool)
        or not isinstance(keepalive_time, (int, float))
        or keepalive_time < 0
    ):
        raise InvalidArgumentError(f"keepalive_time must be seconds >= 0, got {keepalive_time!r}")
    credentials = channel_credentials(
        tls,
        root_certificates=options.get("tls_root_certificates"),
        client_cert=options.get("tls_client_cert"),
        client_key=options.get("tls_client_key"),
    )
    transport = options.get("stream_transport", "auto")
    if transport not in ("auto", "http2", "grpc"):
        raise InvalidArgumentError(
            f"stream_transport must be 'auto', 'http2' or 'grpc', got {transport!r}"
        )
    if transport == "http2" and isinstance(tls, grpc.ChannelCredentials):
        raise InvalidArgumentError(
            "stream_transport='http2' needs TLS as an ssl.SSLContext or PEM paths: "
            "grpc.ChannelCredentials cannot be read back"
        )
    http2 = transport == "http2" or (
        transport == "auto" and not isinstance(tls, grpc.ChannelCredentials)
    )
    factory = ChannelFactory(
        credentials,
        server_name=options.get("tls_server_name"),
        options=tuple(options.get("grpc_options", ())),
        http2_streams=http2,
        stream_ssl=stream_ssl_context(
            tls,
            root_certificates=options.get("tls_root_certificates"),
            client_cert=options.get("tls_client_cert"),
            client_key=options.get("tls_client_key"),
        )
        if http2
        else None,
    )
    client = Client(
        seeds,
        factory=factory,
        resubscribe_wait_time=float(resubscribe_wait_time),
        ack_wait_time=ack_wait,
        max_conns_per_broker=max_conns_per_broker,
        keepalive_time=float(keepalive_time),
        rpc_timeout=rpc_timeout,
        cursor_timeout=cursor_timeout,
        max_rpc_attempts=max_attempts,
        publish_async_window=window,
        metadata_max_age=metadata_max_age,
        rng=options.get("rng"),
        clock=options.get("clock"),
    )
    try:
        # Seeds that all refuse the connection: nothing to wait for, say so now.
        await client._brokers.refresh_metadata(refused_ends=True)
    except BaseException:
        await client.close()
        raise
    return client
