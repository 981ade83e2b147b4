"""The broker layer: connections to the cluster and the one retry policy of its calls.

Everything above it (``Client``, ``Subscription``, ``AsyncPublisher``,
``GroupConsumer``) takes a :class:`Brokers` and calls it; it imports none of
them. This module owns:

* the channels: one ``grpc.aio`` channel per broker for ordinary RPCs, one
  channel per broker for the PublishAsync stream, and the pool of Subscribe
  connections (``max_conns_per_broker``; idle ones closed after
  ``keepalive_time`` by one ``loop.call_at`` re-armed from the pure
  :class:`SubscribePool`'s ``get_timer()``);
* the address order: the dedicated broker first, then the other known ones in
  random order;
* the metadata cache and its refresh (one fetch at a time; a caller that
  waited reuses the result; stale after ``metadata_max_age``);
* THE RETRY POLICY (liftbridge client guide, "Client Implementation"), here
  and nowhere else:

  - a resilient call (:meth:`Brokers.rpc`) goes to any broker; on UNAVAILABLE,
    a reset stream or CANCELLED (another call closed that channel) the broker
    is dropped (:meth:`Brokers.broker_unavailable`: its RPC and stream
    channels are closed, it stops being the dedicated one) and the next one
    is asked, at most ``max_rpc_attempts`` times, with a random 10-500 ms pause
    (:meth:`Brokers.jitter`) once every known broker failed; a call that
    ``stores`` something (a publish) is repeated after UNAVAILABLE only, never
    after a break with the request in flight (that could store it twice);
    INTERNAL "no responders available" (no metadata leader yet) is asked again
    after a pause;
  - a leader-routed call (:meth:`Brokers.leader_rpc`) asks the metadata for
    the partition leader; on UNAVAILABLE (the broker is dropped) or
    FAILED_PRECONDITION (not the leader any more) it pauses, refreshes the
    metadata and tries again, 5 attempts in all;
  - an operation-level repeat (:meth:`Brokers.rpc_repeated`): a call whose
    error its caller knows to be transient (a publish answered NOT_FOUND while
    the metadata lists the partition; "consumer group already exists") is
    repeated after a pause for a bounded time;
  - a broken PublishAsync stream or Subscribe stream drops its broker through
    :meth:`Brokers.broker_unavailable` too, and waits :meth:`Brokers.jitter`
    before the next attempt (the subscription's resubscribe timing is the pure
    ``Resubscriber``'s);

* waiting until every broker shows a metadata change (:meth:`Brokers.settle`);
* closing: :meth:`Brokers.close` calls what was registered (each open
  subscription's end), then closes every channel; afterwards
  :meth:`Brokers.check_open` raises ``LiftbridgeClosedError``;
* its statistics (:meth:`Brokers.pool_statistics`).

Which failure means "the connection broke" and how a gRPC error becomes ours is
``_io._grpc``'s rule.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

import grpc
import grpc.aio

from aioclients._core import redact_text, redact_url
from aioclients._errors import LocalProtocolError
from aioclients._tasks import TaskOwner
from aioclients.liftbridge._errors import (
    LiftbridgeClosedError,
    LiftbridgeConnectError,
    LiftbridgeError,
    LiftbridgeServerError,
    LiftbridgeTimeoutError,
    NoSuchPartitionError,
    NoSuchStreamError,
)
from aioclients.liftbridge._io._grpc import ChannelFactory, is_connection_failure, map_rpc_error
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._pb import api_pb2_grpc as pb_grpc
from aioclients.liftbridge._protocol._metadata import Metadata, MetadataCache
from aioclients.liftbridge._protocol._pool import SubscribePool
from aioclients.liftbridge._protocol._resubscribe import MAX_WAIT, MIN_WAIT

__all__ = ("Brokers",)

log = logging.getLogger("aioclients.liftbridge.client")

_NO_RESPONDERS = "no responders available"
# How long settle() waits for every broker to show a change, and how often it asks.
SETTLE_TIME = 5.0
_SETTLE_POLL = 0.05
_LEADER_ATTEMPTS = 5


async def call_unbounded(stub: Any, method: str, request: Any, timeout: float) -> Any:
    """Call ``method`` with no deadline on the wire, waiting at most ``timeout`` here.

    For FetchMetadata. A broker whose cache of the cluster's brokers is stale
    (older than metadata.cache.max.age, 2 min) asks every peer over NATS and
    waits for all of them until the call's deadline, or 3 s without one
    (server/metadata.go fetchBrokerInfo). With one peer down it so waited out
    the client's own deadline: DEADLINE_EXCEEDED after 10 s, where a call
    without a deadline got the live brokers after 3.3 s (Liftbridge v1.9.0).
    """
    return await asyncio.wait_for(getattr(stub, method)(request), timeout)


async def _close_quietly(channel: grpc.aio.Channel) -> None:
    try:
        await channel.close()
    except Exception as exc:  # nothing waits on a dropped channel: its close changes nothing
        log.debug("closing a dropped channel failed: %s", redact_text(str(exc)))


class Brokers:
    """The client's connections to the cluster (see the module doc)."""

    def __init__(
        self,
        addresses: list[str],
        *,
        factory: ChannelFactory,
        max_conns_per_broker: int,
        keepalive_time: float,
        rpc_timeout: float,
        max_rpc_attempts: int,
        metadata_max_age: float,
        cursor_timeout: float | None = None,
        rng: random.Random | None,
        clock: Callable[[], float] | None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.factory = factory
        self.rpc_timeout = rpc_timeout
        #: set_cursor's deadline (None: max(rpc_timeout, SET_CURSOR_TIMEOUT))
        self.cursor_timeout = cursor_timeout
        self.max_rpc_attempts = max_rpc_attempts
        self.rng = rng if rng is not None else random.Random()
        self.clock = clock if clock is not None else self.loop.time
        self.metadata = MetadataCache(addresses, max_age=metadata_max_age)
        self.channels: dict[str, grpc.aio.Channel] = {}
        self.stream_channels: dict[str, Any] = {}  # PublishAsync's, per broker
        self._stubs: dict[grpc.aio.Channel, Any] = {}
        self.current: str | None = None
        self._pool: SubscribePool[grpc.aio.Channel] = SubscribePool(
            max_conns_per_broker=max_conns_per_broker, keepalive_time=keepalive_time
        )
        self._pool_timer: asyncio.TimerHandle | None = None
        # closing a channel dropped from the pool or the RPC channels
        self._closing = TaskOwner("liftbridge Brokers")
        self._on_close: set[Callable[[], None]] = set()
        self._refresh_lock = asyncio.Lock()
        self.closed = False

    # -- lifecycle -------------------------------------------------------------

    def check_open(self) -> None:
        if self.closed:
            raise LiftbridgeClosedError("the Liftbridge client is closed; connect() again")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a synchronous call (subscribe()) outside a loop
            return
        if loop is not self.loop:
            # The channels run on the loop the client connected on (often closed by
            # asyncio.run): "Event loop is closed", or a call that never completes.
            raise LocalProtocolError(
                "this Liftbridge client connected on another event loop; connect and use "
                "it on one loop (e.g. inside the coroutine that asyncio.run runs)"
            )

    def register(self, on_close: Callable[[], None]) -> None:
        """Call ``on_close()`` when the client closes (unless unregistered first)."""
        self._on_close.add(on_close)

    def unregister(self, on_close: Callable[[], None]) -> None:
        self._on_close.discard(on_close)

    async def close(self) -> None:
        """Call what was registered, then close every channel (idempotent)."""
        if self.closed:
            return
        self.closed = True
        for on_close in list(self._on_close):
            on_close()
        self._on_close.clear()
        if self._pool_timer is not None:
            self._pool_timer.cancel()
            self._pool_timer = None
        channels = (
            set(self.channels.values())
            | set(self.stream_channels.values())
            | set(self._pool.close())
        )
        self.channels.clear()
        self.stream_channels.clear()
        self._stubs.clear()
        await asyncio.gather(*(ch.close() for ch in channels), return_exceptions=True)
        await self._closing.aclose()

    # -- channels ------------------------------------------------------------------

    def stub_for(self, channel: grpc.aio.Channel) -> Any:
        stub = self._stubs.get(channel)
        if stub is None:
            stub = pb_grpc.APIStub(channel)
            self._stubs[channel] = stub
        return stub

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self.channels.get(address)
        if channel is None:
            self.check_open()  # a closed client opens no channel
            channel = self.factory.open(address)
            self.channels[address] = channel
        return channel

    def broker_unavailable(self, address: str) -> None:
        """Forget the RPC and stream channels of a broker that answered UNAVAILABLE."""
        if self.current == address:
            self.current = None
        for channels in (self.channels, self.stream_channels):
            channel = channels.pop(address, None)
            if channel is not None:
                self._stubs.pop(channel, None)
                self._close_later(channel)

    def renew_channel(self, address: str, channel: grpc.aio.Channel) -> None:
        """Replace the RPC channel to ``address`` after a connection failure on it.

        A ``grpc.aio`` channel whose connection failed waits out a reconnect
        backoff (1 s, growing to 2 min) and meanwhile fails every call at once,
        although the broker may be back: a broker down 20 s, then restarted,
        still failed that channel's calls 7.7 s later, while a new channel got an
        answer within 0.12 s (Liftbridge v1.9.0, loopback). The next call opens a
        new channel. ``channel`` is the one that failed: one another call opened
        since is kept.
        """
        if self.channels.get(address) is channel:
            del self.channels[address]
            self._stubs.pop(channel, None)
            self._close_later(channel)

    def _close_later(self, channel: grpc.aio.Channel) -> None:
        if self._closing.closed:  # close() is under way and closes every channel
            return
        self._closing.start(_close_quietly(channel), name="close a channel")

    def address_order(self) -> list[str]:
        """The dedicated broker first, then the others in random order."""
        addresses = list(self.metadata.addresses())
        self.rng.shuffle(addresses)
        if self.current in addresses:
            addresses.remove(self.current)
            addresses.insert(0, self.current)
        return addresses

    def current_address(self) -> str:
        """The dedicated broker (one chosen at random if there is none yet)."""
        self.check_open()
        if self.current is None:
            order = self.address_order()
            if not order:
                raise LiftbridgeConnectError(
                    "no broker address is known; pass addresses to connect()"
                )
            self.current = order[0]
        return self.current

    async def any_stub(self) -> tuple[str, Any]:
        """The dedicated broker's address and the stub of its RPC channel."""
        address = self.current_address()
        return address, self.stub_for(self.channel(address))

    def stream_channel(self, address: str) -> Any:
        """The broker's channel for PublishAsync, Publish, the cursor calls and
        FetchPartitionMetadata (HTTP/2 unless "grpc")."""
        channel = self.stream_channels.get(address)
        if channel is None:
            self.check_open()
            channel = self.factory.open_stream(address)
            self.stream_channels[address] = channel
        return channel

    async def any_stream_stub(self) -> tuple[str, Any]:
        """Like :meth:`any_stub`, on the broker's channel for streaming calls."""
        address = self.current_address()
        return address, self.stub_for(self.stream_channel(address))

    def jitter(self) -> float:
        """The pause before a call is tried again (random, 10-500 ms)."""
        return self.rng.uniform(MIN_WAIT, MAX_WAIT)

    # -- resilient RPCs ----------------------------------------------------------------

    async def rpc(
        self,
        method: str,
        request: Any,
        *,
        what: str,
        timeout: float | None = None,
        not_found: type[LiftbridgeServerError] = NoSuchStreamError,
        stores: bool = False,
        refused_ends: bool = False,
        on_stream_channel: bool = False,
    ) -> Any:
        """Call ``method`` on any broker, moving to the next on UNAVAILABLE (bounded).

        With ``refused_ends``, a round in which every known broker refused the
        connection ends the call at once: nothing listens at any address (the
        first metadata fetch of ``connect``, where waiting and asking again
        would only delay the error by seconds).

        The client guide's resilient RPC "retries on gRPC Unavailable errors
        while trying different servers", and warns: "It's important to be mindful
        of which errors are retried for idempotency reasons." A call that
        ``stores`` something (a publish) is repeated on UNAVAILABLE only: after
        CANCELLED or a reset stream the broker may have stored it already, and a
        second send would store a duplicate. Other calls are also repeated after
        those (reading metadata twice is harmless).

        With ``on_stream_channel`` the call runs on the broker's PublishAsync
        channel (the client's own HTTP/2 code unless ``stream_transport="grpc"``),
        which costs less CPU per call than ``grpc.aio`` (no threads to wake): the
        per-message publish and the cursor calls use it.
        """
        self.check_open()
        last: grpc.aio.AioRpcError | None = None
        refused_only = True  # every broker tried refused the connection: none runs
        order: list[str] = []
        for attempt in range(self.max_rpc_attempts):
            if not order:
                order = self.address_order()
                if not order:
                    break
                if attempt:
                    if refused_ends and refused_only:
                        break
                    # Every known broker failed once: refresh the list's order
                    # after a short pause instead of spinning.
                    await asyncio.sleep(self.jitter())
            address = order.pop(0)
            self.current = address
            # A request over grpc.max_send_message_length stays on grpc.aio, which
            # refuses it with its own error (our HTTP/2 code has no such limit).
            if on_stream_channel and request.ByteSize() <= self.factory.max_send:
                channel = self.stream_channel(address)
            else:
                channel = self.channel(address)
            stub = self.stub_for(channel)
            limit = timeout if timeout is not None else self.rpc_timeout
            try:
                if method == "FetchMetadata":
                    return await call_unbounded(stub, method, request, limit)
                return await getattr(stub, method)(request, timeout=limit)
            except asyncio.TimeoutError:
                self.check_open()
                raise LiftbridgeTimeoutError(
                    f"{what}: no answer from {redact_url(address)} within {limit}s"
                ) from None
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                # CANCELLED here means another call closed this broker's channel
                # (it found the broker gone): as good as UNAVAILABLE.
                lost = is_connection_failure(exc) or code is grpc.StatusCode.CANCELLED
                if lost and stores and code is not grpc.StatusCode.UNAVAILABLE:
                    if not self.closed:
                        self.broker_unavailable(address)
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
                    and not self.closed
                    and attempt < self.max_rpc_attempts - 1
                ):
                    # The broker forwards some calls to the metadata leader over
                    # NATS; none listened (a leader is being elected): nothing
                    # was delivered, so asking again is safe.
                    log.info("%s: no metadata leader yet, trying again", what)
                    await asyncio.sleep(self.jitter())
                    continue
                if lost and not self.closed:
                    log.info("%s: broker %s unavailable, trying another", what, redact_url(address))
                    self.broker_unavailable(address)
                    last = exc
                    refused_only = refused_only and "connection refused" in (
                        (exc.details() or "").lower()
                    )
                    continue
                raise map_rpc_error(
                    exc, what=what, closed=self.closed, not_found=not_found
                ) from None
        detail = f" (last error: {redact_text(last.details() or '')})" if last is not None else ""
        shown = [redact_url(a) for a in self.metadata.addresses()]
        if last is not None and refused_only:
            raise LiftbridgeConnectError(
                f"{what}: no Liftbridge broker at {', '.join(shown)} (connection refused): "
                "start them with `aioclients-servers` or `liftbridge`, or check the addresses"
            )
        raise LiftbridgeConnectError(
            f"{what}: no broker reachable after {self.max_rpc_attempts} attempts over "
            f"{shown}{detail}; "
            "check the addresses and that the cluster is up"
        )

    async def rpc_repeated(
        self,
        method: str,
        request: Any,
        *,
        what: str,
        transient: Callable[[LiftbridgeError], Awaitable[bool]],
        within: float,
        timeout: float | None = None,
        not_found: type[LiftbridgeServerError] = NoSuchStreamError,
        stores: bool = False,
        on_stream_channel: bool = False,
    ) -> Any:
        """:meth:`rpc`, repeated after a pause while ``transient(error)`` says so.

        For errors the caller knows a moment fixes (the broker did not store
        anything): at most ``within`` seconds after the first attempt.
        """
        give_up = self.clock() + within
        while True:
            try:
                return await self.rpc(
                    method,
                    request,
                    what=what,
                    timeout=timeout,
                    not_found=not_found,
                    stores=stores,
                    on_stream_channel=on_stream_channel,
                )
            except LiftbridgeError as exc:
                if self.clock() >= give_up or not await transient(exc):
                    raise
            await asyncio.sleep(self.jitter())

    async def leader_rpc(
        self,
        stream: str,
        partition: int,
        method: str,
        request: Any,
        *,
        what: str,
        not_found: type[LiftbridgeServerError] = NoSuchPartitionError,
        refused: Callable[[str], Awaitable[Any]] | None = None,
        on_stream_channel: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """Call ``method`` on the partition leader; refresh and retry while it moves.

        ``timeout``: each attempt's deadline (default ``rpc_timeout``).

        ``refused``: called with the address of a leader that answered
        FAILED_PRECONDITION (not the leader); what it returns, unless None, is
        the answer (e.g. a paused partition's leader, which refuses as if it
        did not lead). ``on_stream_channel``: as in :meth:`rpc`.
        """
        self.check_open()
        attempts = _LEADER_ATTEMPTS
        for attempt in range(attempts):
            address = self.metadata.leader_address(stream, partition)
            if address is None:
                await self.refresh_metadata()
                address = self.metadata.leader_address(stream, partition)
                if address is None:
                    md = self.metadata.get()
                    info = md.get_stream(stream)
                    if info is None:
                        raise NoSuchStreamError(f"{what}: no stream {stream!r}", code="NOT_FOUND")
                    if partition not in info.partitions:
                        raise NoSuchPartitionError(
                            f"{what}: stream {stream!r} has no partition {partition}",
                            code="NOT_FOUND",
                        )
                    await asyncio.sleep(self.jitter())
                    continue
            if on_stream_channel and request.ByteSize() <= self.factory.max_send:
                channel = self.stream_channel(address)
            else:
                channel = self.channel(address)
            stub = self.stub_for(channel)
            try:
                return await getattr(stub, method)(
                    request, timeout=timeout if timeout is not None else self.rpc_timeout
                )
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                retry = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION)
                if not retry or self.closed or attempt == attempts - 1:
                    raise map_rpc_error(
                        exc, what=what, closed=self.closed, not_found=not_found
                    ) from None
                if code is grpc.StatusCode.UNAVAILABLE:
                    self.broker_unavailable(address)
                elif refused is not None:
                    answer = await refused(address)
                    if answer is not None:
                        return answer
                await asyncio.sleep(self.jitter())
                await self.refresh_metadata()
        raise LiftbridgeConnectError(f"{what}: the leader of {stream}/{partition} is not reachable")

    async def partition_metadata(self, stream: str, partition: int) -> Any:
        """FetchPartitionMetadata from the partition's leader (the response).

        A paused partition's leader refuses the call as if it did not lead
        (Liftbridge v1.9 closes a paused partition): the answer is then that
        broker's view from FetchMetadata (``paused`` true, its own offsets).
        """

        async def refused(address: str) -> Any:
            return await self._paused_partition(address, stream, partition)

        req = pb.FetchPartitionMetadataRequest(stream=stream, partition=partition)
        return await self.leader_rpc(
            stream,
            partition,
            "FetchPartitionMetadata",
            req,
            what="fetch_partition_metadata",
            refused=refused,
            on_stream_channel=True,
        )

    async def _paused_partition(self, address: str, stream: str, partition: int) -> Any:
        """The partition's metadata from the broker at ``address`` when that broker
        leads it and it is paused (None otherwise, or when it does not answer)."""
        stub = self.stub_for(self.channel(address))
        try:
            resp = await call_unbounded(
                stub, "FetchMetadata", pb.FetchMetadataRequest(streams=[stream]), self.rpc_timeout
            )
        except (grpc.aio.AioRpcError, asyncio.TimeoutError):
            return None
        addresses = {b.id: f"{b.host}:{b.port}" for b in resp.brokers}
        for md in resp.streamMetadata:
            if md.name != stream or partition not in md.partitions:
                continue
            p = md.partitions[partition]
            if p.paused and addresses.get(p.leader) == address:
                return pb.FetchPartitionMetadataResponse(metadata=p)
        return None

    async def coordinator_rpc(self, coordinator: str, method: str, req: Any, what: str) -> Any:
        """Call ``method`` on the broker with id ``coordinator`` (once: no retry)."""
        self.check_open()
        md = self.metadata.get()
        broker = md.broker(coordinator)
        if broker is None:
            md = await self.refresh_metadata()
            broker = md.broker(coordinator)
        if broker is None:
            raise LiftbridgeError(
                f"{what}: coordinator broker {coordinator!r} is not in the metadata"
            )
        channel = self.channel(broker.address)
        stub = self.stub_for(channel)
        try:
            return await getattr(stub, method)(req, timeout=self.rpc_timeout)
        except grpc.aio.AioRpcError as exc:
            if is_connection_failure(exc) and not self.closed:
                # The caller asks again soon: on a new connection, not one
                # still in reconnect backoff after the coordinator came back.
                self.renew_channel(broker.address, channel)
            raise map_rpc_error(exc, what=what, closed=self.closed) from None

    # -- metadata ---------------------------------------------------------------------

    async def fetch_metadata(self) -> Metadata:
        """A fresh fetch, stored in the cache."""
        self.check_open()
        resp = await self.rpc("FetchMetadata", pb.FetchMetadataRequest(), what="fetch_metadata")
        return self.metadata.update(resp, now=self.clock(), wall=datetime.now(timezone.utc))

    async def refresh_metadata(self, *, refused_ends: bool = False) -> Metadata:
        """Fetch metadata (one fetch at a time; a caller that waited reuses the result).

        ``refused_ends``: give up after one round in which every broker refused the
        connection (see :meth:`rpc`).
        """
        generation = self.metadata.generation
        async with self._refresh_lock:
            if self.metadata.generation != generation:
                return self.metadata.get()
            resp = await self.rpc(
                "FetchMetadata",
                pb.FetchMetadataRequest(),
                what="fetch_metadata",
                refused_ends=refused_ends,
            )
            return self.metadata.update(resp, now=self.clock(), wall=datetime.now(timezone.utc))

    async def partition_listed(self, stream: str, partition: int) -> bool:
        """Whether freshly fetched metadata lists ``stream``/``partition``."""
        md = await self.refresh_metadata()
        info = md.get_stream(stream)
        return info is not None and partition in info.partitions

    async def metadata_with(self, stream: str) -> Metadata:
        """The cached metadata, refreshed when it lacks ``stream`` or is stale."""
        md = self.metadata.get()
        if md.get_stream(stream) is None or self.metadata.is_stale(self.clock()):
            md = await self.refresh_metadata()
        return md

    async def settle(
        self,
        what: str,
        streams: list[str],
        shows: Callable[[Any], bool],
        *,
        incarnation: Callable[[Any], object] | None = None,
    ) -> bool:
        """Wait (bounded, best effort) until every broker's metadata ``shows`` a change.

        CreateStream, DeleteStream, PauseStream and SetStreamReadonly return once
        the metadata leader applied the change; the other brokers, the partition
        leader among them, apply it through Raft a little later, and until then
        answer from their old state (a publish right after create_stream gets
        NOT_FOUND, one right after set_stream_readonly(readonly=False) can be
        dropped). So the call returns once each reachable broker's FetchMetadata
        shows the change, or after ``SETTLE_TIME`` seconds (logged; not an error:
        the change itself was made). A broker that does not answer is skipped;
        one whose connection failed is asked once more, on a new channel (see
        :meth:`renew_channel`: a broker restarted a moment ago is live, but the
        old channel fails at once), and skipped only when that fails too (it is
        down: a refused connection fails within a millisecond).

        With ``incarnation`` (a stream's creation timestamp), the brokers must
        also agree on it: right after a stream was deleted and created again, a
        broker that has not applied the delete yet still shows the old stream of
        that name, and still stores what is published on its subjects in the old
        log. While the answers differ, every broker is asked again.
        """
        pending = list(self.metadata.addresses())
        shown: dict[str, object] = {}
        renewed: set[str] = set()
        deadline = self.clock() + SETTLE_TIME
        req = pb.FetchMetadataRequest(streams=streams)
        while True:
            for address in list(pending):
                remaining = deadline - self.clock()
                channel = self.channel(address)
                stub = self.stub_for(channel)
                try:
                    resp = await call_unbounded(
                        stub, "FetchMetadata", req, max(0.05, min(self.rpc_timeout, remaining))
                    )
                except asyncio.TimeoutError:
                    self.check_open()
                    pending.remove(address)  # no answer in the time left
                    continue
                except grpc.aio.AioRpcError as exc:
                    self.check_open()
                    if is_connection_failure(exc) and address not in renewed:
                        renewed.add(address)  # asked again on a new channel
                        self.renew_channel(address, channel)
                        continue
                    pending.remove(address)  # down or failing: nothing to wait for
                    continue
                if shows(resp):
                    pending.remove(address)
                    if incarnation is not None:
                        shown[address] = incarnation(resp)
            if len(set(shown.values())) > 1:
                pending.extend(shown)  # one of them still shows an older incarnation
                shown.clear()
            if not pending:
                return True
            if self.clock() >= deadline:
                log.info(
                    "%s: brokers %s did not show the change within %ss",
                    what,
                    [redact_url(a) for a in pending],
                    SETTLE_TIME,
                )
                return False
            await asyncio.sleep(_SETTLE_POLL)

    # -- subscribe pool -----------------------------------------------------------------

    def subscribe_address(self, stream: str, partition: int, read_isr_replica: bool) -> str | None:
        """Where to subscribe: the leader, or a random in-sync replica when allowed."""
        md = self.metadata.get()
        if read_isr_replica:
            isr = md.isr_addresses(stream, partition)
            if isr:
                return self.rng.choice(isr)
        return md.leader_address(stream, partition)

    async def acquire_subscribe_channel(self, address: str) -> grpc.aio.Channel:
        self.check_open()
        now = self.clock()
        channel = self._pool.acquire(address, now)
        if channel is None:
            channel = self.factory.open_stream(address)
            self._pool.add(address, channel, now)
        self._arm_pool_timer()
        return channel

    def release_subscribe_channel(self, address: str, channel: grpc.aio.Channel) -> None:
        if self.closed:
            return
        self._pool.release(address, channel, self.clock())
        self._arm_pool_timer()

    def _arm_pool_timer(self) -> None:
        if self._pool_timer is not None:
            self._pool_timer.cancel()
            self._pool_timer = None
        due = self._pool.get_timer()
        if due is not None and not self.closed:
            self._pool_timer = self.loop.call_at(due, self._on_pool_timer)

    def _on_pool_timer(self) -> None:
        self._pool_timer = None
        for channel in self._pool.handle_timer(self.clock()):
            self._stubs.pop(channel, None)
            self._close_later(channel)
        self._arm_pool_timer()

    # -- statistics ---------------------------------------------------------------------

    def pool_statistics(self) -> dict[str, int]:
        """Open Subscribe connections per broker address."""
        md = self.metadata.get()
        return {a: n for a in md.addresses() if (n := self._pool.connections(a))}
