"""The Liftbridge client: resilient RPCs, metadata, publishing, subscriptions.

Theory of operation (liftbridge client guide, "Client Implementation"):

* Ordinary RPCs (CreateStream, Publish, FetchMetadata ...) may go to any
  broker. They use one dedicated channel; on UNAVAILABLE the client moves to
  the next known broker, in random order, at most ``max_rpc_attempts`` times
  (a resilient RPC), then raises ``LiftbridgeConnectError``.
* RPCs that must reach a partition leader (cursors, partition metadata) ask the
  :class:`MetadataCache` for the leader; on FAILED_PRECONDITION (not the leader
  any more) or UNAVAILABLE they refresh the metadata, wait a random 10-500 ms
  and try again, a bounded number of times.
* Subscribe streams use a per-broker pool of connections (``max_conns_per_broker``,
  idle ones closed after ``keepalive_time``); a subscription gives its
  connection back when it ends. The pool's expiry is one ``loop.call_at``
  re-armed from the pure :class:`SubscribePool`'s ``get_timer()``.
* ``close()`` is idempotent: it ends subscriptions (readers get
  ``LiftbridgeClosedError``), lets PublishAsync deliver outstanding acks, and
  closes every channel. Every public method raises ``LiftbridgeClosedError``
  afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import grpc
import grpc.aio

from aioclients._core import check_int, redact_text, redact_url
from aioclients._errors import InvalidArgumentError
from aioclients.liftbridge._consumer import GroupConsumer
from aioclients.liftbridge._errors import (
    IncorrectOffsetError,
    LiftbridgeClosedError,
    LiftbridgeConnectError,
    LiftbridgeError,
    LiftbridgeServerError,
    LiftbridgeTimeoutError,
    NoSuchPartitionError,
    NoSuchStreamError,
)
from aioclients.liftbridge._io._grpc import (
    ChannelFactory,
    channel_credentials,
    is_connection_failure,
    map_rpc_error,
    stream_ssl_context,
)
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._pb import api_pb2_grpc as pb_grpc
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
from aioclients.liftbridge._protocol._metadata import (
    Metadata,
    MetadataCache,
    PartitionInfo,
    partition_from_pb,
)
from aioclients.liftbridge._protocol._partition import (
    PartitionByKey,
    PartitionByRoundRobin,
    Partitioner,
)
from aioclients.liftbridge._protocol._pool import SubscribePool
from aioclients.liftbridge._protocol._resubscribe import MAX_WAIT, MIN_WAIT
from aioclients.liftbridge._protocol._types import Ack, AckPolicy, StartPosition, StopPosition
from aioclients.liftbridge._publisher import AsyncPublisher, async_error
from aioclients.liftbridge._subscription import Subscription

__all__ = ("Client", "ConsumerGroupJoin", "connect")

log = logging.getLogger("aioclients.liftbridge.client")

CURSORS_STREAM = "__cursors"
_PARTITION_BY_KEY = PartitionByKey()
# How long create/delete/pause/readonly wait for every broker to show the change,
# and how long a publish answered NOT_FOUND for a stream the metadata lists is
# repeated (a real cluster applies metadata changes through Raft, broker by
# broker, some ms apart).
_NO_RESPONDERS = "no responders available"
_SETTLE_TIME = 5.0
_SETTLE_POLL = 0.05
_NOT_FOUND_RETRY_TIME = 3.0
# join_consumer_group: how long to repeat "consumer group already exists" (two
# members created the group at once; the loser joins the winner's group).
_JOIN_RETRY_TIME = 5.0
_ALL_ACK_HINT = (
    "; with AckPolicy.ALL the first message of a new replicated partition waits for "
    "the followers' first fetch (up to ~10 s on a real cluster, replica.max.idle.wait): "
    "raise timeout/ack_wait_time (e.g. 15 s)"
)

_CONNECT_OPTIONS = frozenset(
    {
        "stream_transport",
        "rpc_timeout",
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


class ConsumerGroupJoin:
    """What ``join_consumer_group`` returns: the coordinator and the group's epoch.

    Attributes:
        coordinator: broker id that hands out the assignments.
        epoch: the group epoch.
        consumer_timeout: seconds without a fetch before the member is evicted.
        coordinator_timeout: seconds after which to report an unresponsive coordinator.
    """

    __slots__ = ("consumer_timeout", "coordinator", "coordinator_timeout", "epoch")

    def __init__(
        self, coordinator: str, epoch: int, consumer_timeout: float, coordinator_timeout: float
    ) -> None:
        self.coordinator = coordinator
        self.epoch = epoch
        self.consumer_timeout = consumer_timeout
        self.coordinator_timeout = coordinator_timeout

    def __repr__(self) -> str:
        return (
            f"ConsumerGroupJoin(coordinator={self.coordinator!r}, epoch={self.epoch}, "
            f"consumer_timeout={self.consumer_timeout}, "
            f"coordinator_timeout={self.coordinator_timeout})"
        )


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
        max_rpc_attempts: int = 10,
        publish_async_window: int = 1024,
        metadata_max_age: float = 60.0,
        rng: random.Random | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._factory = factory
        self._resubscribe_wait_time = resubscribe_wait_time
        self._ack_wait_time = ack_wait_time
        self._rpc_timeout = rpc_timeout
        self._max_rpc_attempts = max_rpc_attempts
        self._rng = rng if rng is not None else random.Random()
        self._clock = clock if clock is not None else self._loop.time
        self._metadata = MetadataCache(addresses, max_age=metadata_max_age)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stream_channels: dict[str, Any] = {}  # PublishAsync's, per broker
        self._stubs: dict[grpc.aio.Channel, Any] = {}
        self._current: str | None = None
        self._pool: SubscribePool[grpc.aio.Channel] = SubscribePool(
            max_conns_per_broker=max_conns_per_broker, keepalive_time=keepalive_time
        )
        self._pool_timer: asyncio.TimerHandle | None = None
        self._closing_channels: set[asyncio.Task[None]] = set()
        self._subscriptions: set[Subscription] = set()
        self._publisher = AsyncPublisher(self, window=publish_async_window)
        self._round_robin = PartitionByRoundRobin()
        self._refresh_lock = asyncio.Lock()
        self._closed = False

    # -- lifecycle -------------------------------------------------------------

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise LiftbridgeClosedError("the Liftbridge client is closed; connect() again")

    async def close(self) -> None:
        """Close subscriptions, the PublishAsync stream and every connection (idempotent).

        Outstanding ``publish_async`` acks are awaited (each until its own
        deadline); subscription readers get ``LiftbridgeClosedError``.
        """
        if self._closed:
            return
        await self._publisher.close()
        self._closed = True
        for sub in list(self._subscriptions):
            sub._client_closed()
        self._subscriptions.clear()
        if self._pool_timer is not None:
            self._pool_timer.cancel()
            self._pool_timer = None
        channels = (
            set(self._channels.values())
            | set(self._stream_channels.values())
            | set(self._pool.close())
        )
        self._channels.clear()
        self._stream_channels.clear()
        self._stubs.clear()
        await asyncio.gather(*(ch.close() for ch in channels), return_exceptions=True)
        if self._closing_channels:
            await asyncio.gather(*self._closing_channels, return_exceptions=True)

    # -- channels ------------------------------------------------------------------

    def _stub_for(self, channel: grpc.aio.Channel) -> Any:
        stub = self._stubs.get(channel)
        if stub is None:
            stub = pb_grpc.APIStub(channel)
            self._stubs[channel] = stub
        return stub

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._factory.open(address)
            self._channels[address] = channel
        return channel

    def _broker_unavailable(self, address: str) -> None:
        """Forget the RPC and stream channels of a broker that answered UNAVAILABLE."""
        if self._current == address:
            self._current = None
        for channels in (self._channels, self._stream_channels):
            channel = channels.pop(address, None)
            if channel is not None:
                self._stubs.pop(channel, None)
                self._close_later(channel)

    def _close_later(self, channel: grpc.aio.Channel) -> None:
        task = self._loop.create_task(channel.close())
        self._closing_channels.add(task)
        task.add_done_callback(self._closing_channels.discard)

    def _address_order(self) -> list[str]:
        """The dedicated broker first, then the others in random order."""
        addresses = list(self._metadata.addresses())
        self._rng.shuffle(addresses)
        if self._current in addresses:
            addresses.remove(self._current)
            addresses.insert(0, self._current)
        return addresses

    def _current_address(self) -> str:
        """The dedicated broker (one chosen at random if there is none yet)."""
        self._check_open()
        if self._current is None:
            order = self._address_order()
            if not order:
                raise LiftbridgeConnectError(
                    "no broker address is known; pass addresses to connect()"
                )
            self._current = order[0]
        return self._current

    async def _any_stub(self) -> tuple[str, Any]:
        """The dedicated broker's address and the stub of its RPC channel."""
        address = self._current_address()
        return address, self._stub_for(self._channel(address))

    async def _any_stream_stub(self) -> tuple[str, Any]:
        """Like :meth:`_any_stub`, on the broker's channel for streaming calls."""
        address = self._current_address()
        channel = self._stream_channels.get(address)
        if channel is None:
            channel = self._factory.open_stream(address)
            self._stream_channels[address] = channel
        return address, self._stub_for(channel)

    def _jitter(self) -> float:
        return self._rng.uniform(MIN_WAIT, MAX_WAIT)

    # -- resilient RPCs ----------------------------------------------------------------

    async def _rpc(
        self,
        method: str,
        request: Any,
        *,
        what: str,
        timeout: float | None = None,
        not_found: type[LiftbridgeServerError] = NoSuchStreamError,
        stores: bool = False,
    ) -> Any:
        """Call ``method`` on any broker, moving to the next on UNAVAILABLE (bounded).

        The client guide's resilient RPC "retries on gRPC Unavailable errors
        while trying different servers", and warns: "It's important to be mindful
        of which errors are retried for idempotency reasons." A call that
        ``stores`` something (a publish) is repeated on UNAVAILABLE only: after
        CANCELLED or a reset stream the broker may have stored it already, and a
        second send would store a duplicate. Other calls are also repeated after
        those (reading metadata twice is harmless).
        """
        self._check_open()
        last: grpc.aio.AioRpcError | None = None
        order: list[str] = []
        for attempt in range(self._max_rpc_attempts):
            if not order:
                order = self._address_order()
                if not order:
                    break
                if attempt:
                    # Every known broker failed once: refresh the list's order
                    # after a short pause instead of spinning.
                    await asyncio.sleep(self._jitter())
            address = order.pop(0)
            self._current = address
            stub = self._stub_for(self._channel(address))
            try:
                return await getattr(stub, method)(
                    request, timeout=timeout if timeout is not None else self._rpc_timeout
                )
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                # CANCELLED here means another call closed this broker's channel
                # (it found the broker gone): as good as UNAVAILABLE.
                lost = is_connection_failure(exc) or code is grpc.StatusCode.CANCELLED
                if lost and stores and code is not grpc.StatusCode.UNAVAILABLE:
                    if not self._closed:
                        self._broker_unavailable(address)
                        raise LiftbridgeConnectError(
                            f"{what}: the call to {redact_url(address)} broke while the "
                            f"request was in flight ({code.name}: "
                            f"{redact_text(exc.details() or 'no details')}); the "
                            "message may or may not have been stored, so it is not sent "
                            "again (that could store it twice); publish it again if a "
                            "duplicate is acceptable"
                        ) from None
                if (
                    code is grpc.StatusCode.INTERNAL
                    and _NO_RESPONDERS in (exc.details() or "")
                    and not self._closed
                    and attempt < self._max_rpc_attempts - 1
                ):
                    # The broker forwards some calls to the metadata leader over
                    # NATS; none listened (a leader is being elected): nothing
                    # was delivered, so asking again is safe.
                    log.info("%s: no metadata leader yet, trying again", what)
                    await asyncio.sleep(self._jitter())
                    continue
                if lost and not self._closed:
                    log.info("%s: broker %s unavailable, trying another", what, redact_url(address))
                    self._broker_unavailable(address)
                    last = exc
                    continue
                raise map_rpc_error(
                    exc, what=what, closed=self._closed, not_found=not_found
                ) from None
        detail = f" (last error: {redact_text(last.details() or '')})" if last is not None else ""
        shown = [redact_url(a) for a in self._metadata.addresses()]
        raise LiftbridgeConnectError(
            f"{what}: no broker reachable after {self._max_rpc_attempts} attempts over "
            f"{shown}{detail}; "
            "check the addresses and that the cluster is up"
        )

    async def _leader_rpc(
        self,
        stream: str,
        partition: int,
        method: str,
        request: Any,
        *,
        what: str,
        not_found: type[LiftbridgeServerError] = NoSuchPartitionError,
    ) -> Any:
        """Call ``method`` on the partition leader; refresh and retry while it moves."""
        self._check_open()
        attempts = 5
        for attempt in range(attempts):
            address = self._metadata.leader_address(stream, partition)
            if address is None:
                await self._refresh_metadata()
                address = self._metadata.leader_address(stream, partition)
                if address is None:
                    md = self._metadata.get()
                    info = md.get_stream(stream)
                    if info is None:
                        raise NoSuchStreamError(f"{what}: no stream {stream!r}", code="NOT_FOUND")
                    if partition not in info.partitions:
                        raise NoSuchPartitionError(
                            f"{what}: stream {stream!r} has no partition {partition}",
                            code="NOT_FOUND",
                        )
                    await asyncio.sleep(self._jitter())
                    continue
            stub = self._stub_for(self._channel(address))
            try:
                return await getattr(stub, method)(request, timeout=self._rpc_timeout)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                retry = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION)
                if not retry or self._closed or attempt == attempts - 1:
                    raise map_rpc_error(
                        exc, what=what, closed=self._closed, not_found=not_found
                    ) from None
                if code is grpc.StatusCode.UNAVAILABLE:
                    self._broker_unavailable(address)
                await asyncio.sleep(self._jitter())
                await self._refresh_metadata()
        raise LiftbridgeConnectError(f"{what}: the leader of {stream}/{partition} is not reachable")

    async def _refresh_metadata(self) -> Metadata:
        """Fetch metadata (one fetch at a time; a caller that waited reuses the result)."""
        generation = self._metadata.generation
        async with self._refresh_lock:
            if self._metadata.generation != generation:
                return self._metadata.get()
            resp = await self._rpc(
                "FetchMetadata", pb.FetchMetadataRequest(), what="fetch_metadata"
            )
            return self._metadata.update(resp, now=self._clock(), wall=datetime.now(timezone.utc))

    async def _partition_listed(self, stream: str, partition: int) -> bool:
        """Whether freshly fetched metadata lists ``stream``/``partition``."""
        md = await self._refresh_metadata()
        info = md.get_stream(stream)
        return info is not None and partition in info.partitions

    async def _metadata_with(self, stream: str) -> Metadata:
        md = self._metadata.get()
        if md.get_stream(stream) is None or self._metadata.is_stale(self._clock()):
            md = await self._refresh_metadata()
        return md

    async def _settle(self, what: str, streams: list[str], shows: Callable[[Any], bool]) -> bool:
        """Wait (bounded, best effort) until every broker's metadata ``shows`` a change.

        CreateStream, DeleteStream, PauseStream and SetStreamReadonly return once
        the metadata leader applied the change; the other brokers, the partition
        leader among them, apply it through Raft a little later, and until then
        answer from their old state (a publish right after create_stream gets
        NOT_FOUND, one right after set_stream_readonly(readonly=False) can be
        dropped). So the call returns once each reachable broker's FetchMetadata
        shows the change, or after ``_SETTLE_TIME`` seconds (logged; not an error:
        the change itself was made). A broker that does not answer is skipped.
        """
        pending = list(self._metadata.addresses())
        deadline = self._clock() + _SETTLE_TIME
        req = pb.FetchMetadataRequest(streams=streams)
        while True:
            for address in list(pending):
                remaining = deadline - self._clock()
                stub = self._stub_for(self._channel(address))
                try:
                    resp = await stub.FetchMetadata(
                        req, timeout=max(0.05, min(self._rpc_timeout, remaining))
                    )
                except grpc.aio.AioRpcError:
                    self._check_open()
                    pending.remove(address)  # unreachable or failing: nothing to wait for
                    continue
                if shows(resp):
                    pending.remove(address)
            if not pending:
                return True
            if self._clock() >= deadline:
                log.info(
                    "%s: brokers %s did not show the change within %ss",
                    what,
                    [redact_url(a) for a in pending],
                    _SETTLE_TIME,
                )
                return False
            await asyncio.sleep(_SETTLE_POLL)

    # -- subscribe pool -----------------------------------------------------------------

    def _subscribe_address(self, stream: str, partition: int, read_isr_replica: bool) -> str | None:
        md = self._metadata.get()
        if read_isr_replica:
            isr = md.isr_addresses(stream, partition)
            if isr:
                return self._rng.choice(isr)
        return md.leader_address(stream, partition)

    async def _acquire_subscribe_channel(self, address: str) -> grpc.aio.Channel:
        self._check_open()
        now = self._clock()
        channel = self._pool.acquire(address, now)
        if channel is None:
            channel = self._factory.open_stream(address)
            self._pool.add(address, channel, now)
        self._arm_pool_timer()
        return channel

    def _release_subscribe_channel(self, address: str, channel: grpc.aio.Channel) -> None:
        if self._closed:
            return
        self._pool.release(address, channel, self._clock())
        self._arm_pool_timer()

    def _arm_pool_timer(self) -> None:
        if self._pool_timer is not None:
            self._pool_timer.cancel()
            self._pool_timer = None
        due = self._pool.get_timer()
        if due is not None and not self._closed:
            self._pool_timer = self._loop.call_at(due, self._on_pool_timer)

    def _on_pool_timer(self) -> None:
        self._pool_timer = None
        for channel in self._pool.handle_timer(self._clock()):
            self._stubs.pop(channel, None)
            self._close_later(channel)
        self._arm_pool_timer()

    def pool_statistics(self) -> dict[str, int]:
        """Open Subscribe connections per broker address."""
        md = self._metadata.get()
        return {a: n for a in md.addresses() if (n := self._pool.connections(a))}

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
        it through Raft, broker by broker).

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
        await self._rpc("CreateStream", req, what=f"create_stream {name!r}")
        await self._settle(f"create_stream {name!r}", [name], _stream_ready(name))

    async def delete_stream(self, name: str) -> None:
        """Delete a stream and all its partitions.

        Returns once no reachable broker lists it any more (at most 5 s more).

        Raises:
            NoSuchStreamError: there is no such stream.
        """
        req = pb.DeleteStreamRequest(name=check_name("name", name))
        await self._rpc("DeleteStream", req, what=f"delete_stream {name!r}")
        await self._settle(f"delete_stream {name!r}", [name], _stream_gone(name))

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
        await self._rpc(
            "PauseStream", req, what=f"pause_stream {name!r}", not_found=NoSuchPartitionError
        )
        await self._settle(
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
        await self._rpc(
            "SetStreamReadonly",
            req,
            what=f"set_stream_readonly {name!r}",
            not_found=NoSuchPartitionError,
        )
        await self._settle(
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
        self._check_open()
        resp = await self._rpc("FetchMetadata", pb.FetchMetadataRequest(), what="fetch_metadata")
        return self._metadata.update(resp, now=self._clock(), wall=datetime.now(timezone.utc))

    async def fetch_partition_metadata(self, stream: str, partition: int) -> PartitionInfo:
        """Fetch one partition's metadata from its leader.

        Raises:
            NoSuchPartitionError: no such stream or partition.
        """
        req = pb.FetchPartitionMetadataRequest(
            stream=check_name("stream", stream), partition=check_partition(partition)
        )
        resp = await self._leader_rpc(
            stream, partition, "FetchPartitionMetadata", req, what="fetch_partition_metadata"
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
        self._check_open()
        stream = check_name("stream", stream)
        value_b = check_bytes("value", value)
        key_b = check_bytes("key", key, optional=True)
        policy = check_ack_policy(ack_policy)
        chooser = self._resolve_partitioner(partitioner)
        if partition is not None:
            target = check_partition(partition)
        elif chooser is not None:
            md = await self._metadata_with(stream)
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
        give_up = self._clock() + _NOT_FOUND_RETRY_TIME
        while True:
            try:
                resp = await self._rpc(
                    "Publish",
                    req,
                    what=what,
                    timeout=wait,
                    not_found=NoSuchStreamError,
                    stores=True,
                )
                break
            except (NoSuchStreamError, NoSuchPartitionError):
                # NOT_FOUND: the broker did not store the message, so sending it
                # again cannot duplicate it. Right after a create_stream (by any
                # client) a broker may not have applied it yet: repeat while the
                # metadata lists the partition, for a bounded time.
                if self._clock() >= give_up or not await self._partition_listed(stream, target):
                    raise
                await asyncio.sleep(self._jitter())
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
        self._check_open()
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
        resp = await self._rpc(
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
        self._check_open()
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
        return Subscription(self, req)

    # -- cursors ------------------------------------------------------------------------

    async def _cursor_rpc(self, method: str, request: Any, what: str) -> Any:
        key = f"{request.cursorId},{request.stream},{request.partition}".encode()
        md = await self._metadata_with(CURSORS_STREAM)
        info = md.get_stream(CURSORS_STREAM)
        if info is None or not info.partitions:
            # No cursors stream in the metadata: any broker forwards the call.
            return await self._rpc(method, request, what=what, not_found=NoSuchPartitionError)
        cursor_partition = zlib.crc32(key) % len(info.partitions)
        return await self._leader_rpc(CURSORS_STREAM, cursor_partition, method, request, what=what)

    async def set_cursor(self, cursor_id: str, stream: str, partition: int, offset: int) -> None:
        """Store a cursor: ``offset`` is the last offset processed by ``cursor_id``.

        Raises:
            NoSuchPartitionError: no such stream or partition.
        """
        if isinstance(offset, bool) or not isinstance(offset, int) or not -1 <= offset <= INT64_MAX:
            raise InvalidArgumentError(f"offset must be an int >= -1, got {offset!r}")
        req = pb.SetCursorRequest(
            cursorId=check_name("cursor_id", cursor_id),
            stream=check_name("stream", stream),
            partition=check_partition(partition),
            offset=offset,
        )
        await self._cursor_rpc("SetCursor", req, f"set_cursor {cursor_id!r}")

    async def fetch_cursor(self, cursor_id: str, stream: str, partition: int) -> int:
        """The stored cursor offset, or -1 when there is none.

        Raises:
            NoSuchPartitionError: no such stream or partition.
        """
        req = pb.FetchCursorRequest(
            cursorId=check_name("cursor_id", cursor_id),
            stream=check_name("stream", stream),
            partition=check_partition(partition),
        )
        resp = await self._cursor_rpc("FetchCursor", req, f"fetch_cursor {cursor_id!r}")
        return int(resp.offset)

    # -- consumer groups ----------------------------------------------------------------

    async def join_consumer_group(
        self, group_id: str, consumer_id: str, streams: Sequence[str]
    ) -> ConsumerGroupJoin:
        """Join (or create) a consumer group consuming ``streams``.

        Returns:
            The coordinator broker id, the epoch and the group's timeouts.
        """
        names = [check_name("each stream", s) for s in streams]
        if not names:
            raise InvalidArgumentError("streams must name at least one stream")
        req = pb.JoinConsumerGroupRequest(
            groupId=check_name("group_id", group_id),
            consumerId=check_name("consumer_id", consumer_id),
            streams=names,
        )
        what = f"join_consumer_group {group_id!r}"
        give_up = self._clock() + _JOIN_RETRY_TIME
        while True:
            try:
                resp = await self._rpc("JoinConsumerGroup", req, what=what)
                break
            except LiftbridgeServerError as exc:
                # Two members creating a new group at once: the loser is told
                # "consumer group already exists" (FAILED_PRECONDITION); a new
                # attempt joins the group the winner created.
                lost_race = exc.code == "FAILED_PRECONDITION" and "already exists" in str(exc)
                if not lost_race or self._clock() >= give_up:
                    raise
                log.info("%s: the group was created concurrently; joining it", what)
                await asyncio.sleep(self._jitter())
        return ConsumerGroupJoin(
            resp.coordinator,
            int(resp.epoch),
            resp.consumerTimeout / 1e9,
            resp.coordinatorTimeout / 1e9,
        )

    async def _group_metadata(self, group_id: str) -> tuple[str, int] | None:
        """The group's coordinator and epoch from the metadata (None: unknown group)."""
        resp = await self._rpc(
            "FetchMetadata",
            pb.FetchMetadataRequest(groups=[group_id]),
            what=f"fetch_metadata for group {group_id!r}",
        )
        for group in resp.groupMetadata:
            if group.groupId == group_id and group.error == pb.ConsumerGroupMetadata.OK:
                return group.coordinator, int(group.epoch)
        return None

    async def _coordinator_rpc(self, coordinator: str, method: str, req: Any, what: str) -> Any:
        md = self._metadata.get()
        broker = md.broker(coordinator)
        if broker is None:
            md = await self._refresh_metadata()
            broker = md.broker(coordinator)
        if broker is None:
            raise LiftbridgeError(
                f"{what}: coordinator broker {coordinator!r} is not in the metadata"
            )
        stub = self._stub_for(self._channel(broker.address))
        try:
            return await getattr(stub, method)(req, timeout=self._rpc_timeout)
        except grpc.aio.AioRpcError as exc:
            raise map_rpc_error(exc, what=what, closed=self._closed) from None

    async def fetch_consumer_group_assignments(
        self, group_id: str, consumer_id: str, epoch: int, *, coordinator: str
    ) -> tuple[int, dict[str, list[int]]]:
        """Ask the group coordinator for this member's partitions.

        Returns:
            ``(epoch, {stream: [partition, ...]})``.
        """
        check_int("epoch", epoch, minimum=0)
        req = pb.FetchConsumerGroupAssignmentsRequest(
            groupId=check_name("group_id", group_id),
            consumerId=check_name("consumer_id", consumer_id),
            epoch=epoch,
        )
        resp = await self._coordinator_rpc(
            check_name("coordinator", coordinator),
            "FetchConsumerGroupAssignments",
            req,
            f"fetch_consumer_group_assignments {group_id!r}",
        )
        return int(resp.epoch), {a.stream: list(a.partitions) for a in resp.assignments}

    async def report_consumer_group_coordinator(
        self, group_id: str, consumer_id: str, coordinator: str, epoch: int
    ) -> None:
        """Tell the cluster the coordinator does not answer (a majority elects another)."""
        check_int("epoch", epoch, minimum=0)
        req = pb.ReportConsumerGroupCoordinatorRequest(
            groupId=check_name("group_id", group_id),
            consumerId=check_name("consumer_id", consumer_id),
            coordinator=check_name("coordinator", coordinator),
            epoch=epoch,
        )
        await self._rpc(
            "ReportConsumerGroupCoordinator",
            req,
            what=f"report_consumer_group_coordinator {group_id!r}",
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
        self._check_open()
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
        member = consumer_id if consumer_id is not None else f"{self._rng.getrandbits(64):016x}"
        return GroupConsumer(
            self,
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
        )

    async def leave_consumer_group(self, group_id: str, consumer_id: str) -> None:
        """Leave a consumer group."""
        req = pb.LeaveConsumerGroupRequest(
            groupId=check_name("group_id", group_id),
            consumerId=check_name("consumer_id", consumer_id),
        )
        await self._rpc("LeaveConsumerGroup", req, what=f"leave_consumer_group {group_id!r}")


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
        **options: ``rpc_timeout`` (10 s), ``max_rpc_attempts`` (10),
            ``publish_async_window`` (1024 outstanding acks), ``metadata_max_age``
            (60 s), ``rng`` (a ``random.Random``), ``clock``, ``tls_root_certificates``,
            ``tls_client_cert``, ``tls_client_key`` (PEM paths), ``tls_server_name``,
            ``grpc_options`` (extra channel arguments), ``stream_transport``
            (``"auto"``: Subscribe and PublishAsync run on the client's own
            HTTP/2 code, several times cheaper per message than ``grpc.aio``,
            unless ``tls`` is ``grpc.ChannelCredentials``; ``"http2"``; ``"grpc"``:
            every call on ``grpc.aio``).

    Returns:
        A connected :class:`Client` (use ``async with``).

    Raises:
        LiftbridgeConnectError: no broker answered.
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
        max_rpc_attempts=max_attempts,
        publish_async_window=window,
        metadata_max_age=metadata_max_age,
        rng=options.get("rng"),
        clock=options.get("clock"),
    )
    try:
        await client._refresh_metadata()
    except BaseException:
        await client.close()
        raise
    return client
