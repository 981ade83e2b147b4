"""Emulated Liftbridge brokers (a ``grpc.aio`` server and a NATS connection each)
and the cluster's ingester.

What they do, as a Liftbridge v1.9 server does it:

* Every partition with a live leader is subscribed to its NATS subject
  (``<subject>`` for partition 0, ``<subject>.<n>`` otherwise; in the stream's
  queue group when it has one; see :class:`Ingester` for why one connection
  does this for all brokers). Each NATS message is appended to the log: a
  publish envelope gives key, value, headers, ack inbox, correlation id and ack
  policy; anything else is a raw message whose value is the whole payload. The
  headers ``subject`` and ``reply`` record where it came from. When the policy is
  not NONE and an ack inbox is set, an enveloped ``Ack`` goes to that inbox.
* Publish / PublishAsync / PublishToSubject do not touch the log: they publish
  an envelope on NATS and (Publish, PublishToSubject, when the call has a
  deadline and the policy is not NONE) wait for the ack on the ack inbox.
  Without a deadline Publish is fire-and-forget and returns no ack, like the
  real server.
* Subscribe checks the partition (NOT_FOUND) and leadership
  (FAILED_PRECONDITION), sends one empty ``Message`` to confirm, then streams
  the committed log (up to this broker's high watermark) from the start
  position; a start past the high watermark waits for the next message. It
  ends with RESOURCE_EXHAUSTED at the stop offset or the end of a read-only
  partition, NOT_FOUND when the stream is deleted, FAILED_PRECONDITION
  ``commit log was closed`` when the partition is paused, and UNAVAILABLE when
  this broker stops. Like the server it does not check for a paused partition:
  a reader that needs a segment of the closed log fails at once (INTERNAL
  ``Failed to create stream reader: segment has been closed``), one that would
  wait is confirmed and then ends as above.
* Subscribe reads the partition's segmented log (``_liftbridge_log``) as the
  server's committed reader does: a start below the oldest offset starts there;
  the stop offset ends the stream only when read exactly (one retention or
  compaction removed is passed by); a reader whose segment the cleaner deleted
  fails with UNKNOWN "failed to read message headers: segment has been closed",
  and one opened on a segment a clean in progress closed with INTERNAL "Failed to
  create stream reader: segment has been closed". The stop-before-start check
  compares with the start asked for.

Status codes and messages follow the Liftbridge server source.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import grpc
import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg as NatsMsg
from nats.aio.subscription import Subscription as NatsSubscription

from aioclients.jetstream._transport import NatsClient as FastNatsClient
from aioclients.jetstream._transport import NatsTransport, RawHandler
from aioclients.liftbridge._pb import api_pb2
from aioclients.testing import _liftbridge_envelope as envelope
from aioclients.testing._liftbridge_log import (
    PLAIN_RECORD_SIZE,
    LogReader,
    ReaderOpenError,
    SegmentClosedError,
)
from aioclients.testing._liftbridge_state import (
    ClusterState,
    ConsumerGroup,
    GroupMember,
    Partition,
    RpcError,
    now_ns,
)

__all__ = ("Broker", "ClusterHooks", "Ingester")

if TYPE_CHECKING:
    _Ctx = grpc.aio.ServicerContext[Any, Any]

log = logging.getLogger("aioclients.testing.liftbridge")

_NONE = api_pb2.NONE
_ALL = api_pb2.ALL
_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
_LOG_CLOSED = "commit log was closed"  # a reader on a paused (closed) log ends so
_PAUSED_TIMESTAMP_LOOKUP = (
    "Failed to lookup offset for timestamp: "
    "failed to find log segment for timestamp: segment has been closed"
)
_SEGMENT_CLOSED = "segment has been closed"  # opening a reader on a paused (closed) log
_EMPTY_MESSAGE = b""  # a serialized empty Message: the subscription confirmation
_ASYNC_ACK_TIMEOUT = 5.0  # how long PublishAsync waits for in-flight acks after the client is done
_RAFT_COMMIT = 0.2  # a new consumer group commits in this share of metadata_delay (see join)
_CONSUMER_TIMEOUT_NS = 15_000_000_000  # a member silent this long is evicted
_COORDINATOR_TIMEOUT_NS = 15_000_000_000
_PENDING_MSGS = 1 << 22  # a busy benchmark must not hit nats-py's slow-consumer limits
_PENDING_BYTES = 1 << 31
_BURST_BYTES = 1 << 16  # a publish burst is written once this much is queued
_BURST_IDLE = 4  # ... or after this many loop iterations without a publish (measured: 2-8 best)

_PUBLISH_ERROR_CODES: dict[int, str] = {
    api_pb2.PublishAsyncError.NOT_FOUND: "NOT_FOUND",
    api_pb2.PublishAsyncError.BAD_REQUEST: "INVALID_ARGUMENT",
    api_pb2.PublishAsyncError.READONLY: "FAILED_PRECONDITION",
    api_pb2.PublishAsyncError.ENCRYPTION_FAILED: "INTERNAL",
}


async def connect_nats(url: str, name: str) -> FastNatsClient:
    """A connection of the project's fast NATS client (a nats-py client that can
    hand messages to raw handlers straight from its read loop)."""
    nc = FastNatsClient()
    await nc.connect(url, name=name, allow_reconnect=False)
    return nc


async def settle(nc: NatsClient, timeout: float = 5.0) -> None:
    """Return once the NATS server routes to every subscription ``nc`` has made so far.

    ``nc.flush()`` is not enough: nats-py (2.16) writes its PING straight to the
    socket while SUB commands wait in its pending buffer, so the PONG can come
    back before the server has seen the SUB, and a message published right
    after is lost (reproduced here: about 1 fresh subscription in 10-80 under
    load). Commands of one connection reach the server in order, so once a
    fresh probe subscription receives a probe, the earlier SUBs are live too.
    """
    inbox = f"_LB_PROBE.{uuid.uuid4().hex}"
    sub = await nc.subscribe(inbox)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            await nc.publish(inbox, b"")
            try:
                await sub.next_msg(timeout=0.02)
                return
            except nats.errors.TimeoutError:
                if loop.time() > deadline:
                    raise TimeoutError(f"NATS subscriptions not live after {timeout}s") from None
    finally:
        await sub.unsubscribe()


_TOO_BIG_FOR_NATS = "failed to publish to NATS: nats: maximum payload exceeded"


class _PublishError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def to_proto(self) -> api_pb2.PublishAsyncError:
        return api_pb2.PublishAsyncError(code=self.code, message=self.message)  # type: ignore[arg-type]

    def to_rpc(self) -> RpcError:
        return RpcError(_PUBLISH_ERROR_CODES.get(self.code, "UNKNOWN"), self.message)


def _ack_error(ack: api_pb2.Ack) -> _PublishError | None:
    if ack.ackError == api_pb2.Ack.OK:
        return None
    if ack.ackError == api_pb2.Ack.INCORRECT_OFFSET:
        return _PublishError(
            api_pb2.PublishAsyncError.INCORRECT_OFFSET, "incorrect expected offset"
        )
    if ack.ackError == api_pb2.Ack.TOO_LARGE:
        return _PublishError(
            api_pb2.PublishAsyncError.BAD_REQUEST, "message exceeds max replication size"
        )
    if ack.ackError == api_pb2.Ack.ENCRYPTION:
        return _PublishError(
            api_pb2.PublishAsyncError.ENCRYPTION_FAILED, "encryption failed on partition"
        )
    return _PublishError(api_pb2.PublishAsyncError.UNKNOWN, "unknown error")


class ClusterHooks(Protocol):
    """What a broker needs from the cluster it belongs to."""

    def live_brokers(self) -> list[Broker]:
        """The brokers that are up, in id order."""
        ...

    async def leadership_changed(self) -> None:
        """Partitions were created, deleted, paused or resumed: resync NATS subscriptions."""
        ...


_STOP = object()  # queued to PublishAsync sessions when the broker stops
_TIMED_OUT = api_pb2.Ack()  # what a Publish waiting too long for its ack gets (by identity)


def _time_out(fut: asyncio.Future[api_pb2.Ack | None]) -> None:
    if not fut.done():
        fut.set_result(_TIMED_OUT)


class _Publisher:
    """Publishes on one NATS connection, one socket write per burst instead of per message.

    ``publish`` queues the PUB in the client's outgoing buffer (as nats-py's
    ``publish`` does, minus its checks and awaits) and, for the first message
    of a burst, schedules a check on the next loop iteration. While publishes
    keep coming (a pipelined PublishAsync stream: gRPC hands over one request
    per loop iteration, with gaps of an iteration or two), the check waits
    another iteration; once ``_BURST_IDLE`` pass without a publish, or the
    buffer holds ``_BURST_BYTES``, it wakes the client's flusher, which writes
    everything queued at once. A stream so shares each syscall (and the
    nats-server wake-up it causes) among many messages, at the price of a few
    idle loop iterations per burst. Unary publishes, whose callers wait, go
    out at once. The order of messages on the connection is unchanged.
    """

    __slots__ = ("_count", "_loop", "_scheduled", "nc")

    def __init__(self, nc: FastNatsClient) -> None:
        self.nc = nc
        self._loop = asyncio.get_running_loop()
        self._count = 0  # publishes so far
        self._scheduled = False

    def publish(self, subject: str, data: bytes, *, alone: bool = False) -> None:
        """Queue a PUB; ``alone``: a unary publish whose caller waits, written at once."""
        nc = self.nc
        if nc.is_closed:
            raise RpcError("UNAVAILABLE", "broker is shutting down")
        size = len(data)
        if size > nc.max_payload > 0:
            # The server wraps the NATS error in a plain Go error: gRPC's UNKNOWN
            # (Liftbridge v1.9.0 server/api.go publish / publishSync).
            raise RpcError("UNKNOWN", _TOO_BIG_FOR_NATS)
        frame = b"PUB %s %d\r\n%s\r\n" % (subject.encode(), size, data)
        nc._pending.append(frame)
        nc._pending_data_size += len(frame)
        self._count += 1
        if alone:
            self._flush()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._check, self._count)

    def _check(self, seen: int, idle: int = 0) -> None:
        nc = self.nc
        if nc._pending_data_size < _BURST_BYTES:
            if self._count != seen:
                self._loop.call_soon(self._check, self._count, 0)  # busy: one more iteration
                return
            if idle < _BURST_IDLE:
                self._loop.call_soon(self._check, seen, idle + 1)
                return
        self._scheduled = False
        self._flush()

    def _flush(self) -> None:
        """Wake the client's flusher (it writes everything queued at once)."""
        nc = self.nc
        queue = nc._flush_queue
        if nc._pending_data_size and queue is not None and queue.empty() and nc.is_connected:
            done: asyncio.Future[None] = self._loop.create_future()
            done.set_result(None)
            queue.put_nowait(done)


class _Responses:
    """The responses of one PublishAsync session, in order, for the one task sending them.

    A deque and at most one waiter future: cheaper per message than an
    ``asyncio.Queue`` (no getter bookkeeping, no wake-up while the sender is busy).
    """

    __slots__ = ("_waiter", "items")

    def __init__(self) -> None:
        self.items: deque[object] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def push(self, item: object) -> None:
        self.items.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        """Return once an item is queued."""
        while not self.items:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            await waiter


def _ack(
    p: Partition,
    subject: str,
    ack_inbox: str,
    correlation_id: str,
    ack_policy: Any,
    **fields: Any,
) -> api_pb2.Ack:
    """The Ack for a message stored (or refused) in partition ``p``."""
    return api_pb2.Ack(
        stream=p.stream.name,
        partitionSubject=p.stream.subject,
        msgSubject=subject,
        ackInbox=ack_inbox,
        correlationId=correlation_id,
        ackPolicy=ack_policy,
        commitTimestamp=now_ns(),
        **fields,
    )


class Ingester:
    """Stores what NATS delivers on partition subjects, for every partition with a live leader.

    A real leader subscribes to its partitions' subjects itself, and messages
    published while leadership moves are lost. The emulator's brokers share
    their logs, so one connection owned by the cluster ingests for all of them:
    a leader stop then loses nothing, which keeps failover tests deterministic.
    The stored result is the same as if the leader had received the message.

    The connection is the project's fast NATS client: partition messages reach
    :meth:`_ingest` synchronously from its read loop as raw bytes (no nats-py
    ``Msg``, no queue and task per subscription), and acks for foreign inboxes
    are queued for its flusher without awaiting. Messages are still stored in
    the order NATS delivers them.
    """

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._nc: FastNatsClient | None = None
        self._out: NatsTransport | None = None
        self._subs: dict[Partition, NatsSubscription] = {}
        self._sync_lock = asyncio.Lock()  # RPCs on several brokers may resync at once

    async def start(self, nats_url: str) -> None:
        self._nc = await connect_nats(nats_url, "liftbridge-emulator-ingest")
        self._out = NatsTransport(self._nc)

    async def stop(self) -> None:
        self._subs.clear()
        nc, self._nc = self._nc, None
        self._out = None
        if nc is not None:
            nc._raw_handlers.clear()
            with contextlib.suppress(Exception):
                await nc.close()

    async def sync(self) -> None:
        """Subscribe to the subjects of the partitions that can take messages (only those)."""
        async with self._sync_lock:
            await self._sync()

    async def _sync(self) -> None:
        nc = self._nc
        if nc is None:
            return
        state = self.state
        # As each partition's leader sees it: a lagging leader still takes
        # messages for a partition deleted or paused a moment ago.
        streams = list(state.streams.values()) + state.deleted_streams
        wanted = set()
        for stream in streams:
            for p in stream.partitions.values():
                if p.leader not in state.live:
                    continue
                t = state.view_time(p.leader)
                if not p.deleted_by(t) and not p.flags_at(t)[0]:
                    wanted.add(p)
        for p in list(self._subs):
            if p not in wanted:
                sub = self._subs.pop(p)
                nc._raw_handlers.pop(sub._id, None)
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        added = False
        for p in wanted:
            if p not in self._subs:
                sub = await nc.subscribe(
                    p.subject,
                    queue=p.stream.group,
                    pending_msgs_limit=_PENDING_MSGS,
                    pending_bytes_limit=_PENDING_BYTES,
                )
                self._subs[p] = sub
                handler = self._handler(p)
                nc._raw_handlers[sub._id] = handler
                # Anything that arrived before the handler was in place.
                queue = sub._pending_queue
                while not queue.empty():
                    msg = queue.get_nowait()
                    handler(msg.subject, msg.reply, msg.data, None)
                added = True
        if added:
            await settle(nc)

    def _handler(self, p: Partition) -> RawHandler:
        ingest = self._ingest

        def on_msg(subject: str, reply: str, data: bytes, header: bytes | None) -> None:
            ingest(p, subject, reply, data)

        return on_msg

    def _ingest(self, p: Partition, subject: str, reply: str, data: bytes) -> None:
        if p.flag_history or p.deleted:
            # A change is recent: decide as the partition leader sees it (it applies
            # deletes, pauses and read-only flips late, like every follower).
            t = self.state.view_time(p.leader)
            if p.deleted_by(t):
                return
            paused, readonly = p.flags_at(t)
        else:
            paused, readonly = p.paused, p.readonly
        if paused or p.leader not in self.state.live:
            return  # a real leader has unsubscribed by then: the message is not stored
        reception = now_ns()
        msg = envelope.decode_message(data)
        if msg is not None:
            # The envelope's Message becomes the stored one: what only the
            # publish carries is taken out, the log fills in the rest.
            ack_inbox, correlation_id = msg.ackInbox, msg.correlationId
            ack_policy, expected = msg.ackPolicy, msg.offset
            msg.DiscardUnknownFields()
            msg.ClearField("ackInbox")
            msg.ClearField("correlationId")
            msg.ClearField("ackPolicy")
        else:
            msg = api_pb2.Message(value=data)
            ack_inbox, correlation_id, ack_policy, expected = "", "", api_pb2.LEADER, 0
        if readonly:
            # The log refuses the write and the leader drops it without an ack
            # (Liftbridge v1.9.0 acks only INCORRECT_OFFSET append errors): a
            # publish during a read-only flip times out.
            return
        if p.stream.concurrency_control and expected != p.newest_offset + 1:
            if ack_inbox:
                self._send_ack(
                    _ack(
                        p,
                        subject,
                        ack_inbox,
                        correlation_id,
                        ack_policy,
                        receptionTimestamp=reception,
                        ackError=api_pb2.Ack.INCORRECT_OFFSET,
                    )
                )
            return
        msg.subject = subject
        msg.replySubject = reply
        headers = msg.headers
        # Its size in a segment, without walking the headers when there are only these.
        size = None if headers else PLAIN_RECORD_SIZE + len(msg.key) + len(msg.value)
        subject_bytes, reply_bytes = subject.encode(), reply.encode()
        headers["subject"] = subject_bytes
        headers["reply"] = reply_bytes
        if size is not None:
            size += len(subject_bytes) + len(reply_bytes)
        offset, ts = p.append_message(msg, reception, size)
        if ack_policy != _NONE and ack_inbox:
            ack = _ack(
                p,
                subject,
                ack_inbox,
                correlation_id,
                ack_policy,
                offset=offset,
                receptionTimestamp=ts,
            )
            if ack_policy == _ALL and p.committed <= offset:
                # Acked once the followers have it (the high watermark covers it).
                p.pending_acks.append((offset, lambda: self._send_ack(ack)))
            else:
                self._send_ack(ack)

    def _send_ack(self, ack: api_pb2.Ack) -> None:
        local = self.state.local_acks.get(ack.ackInbox)
        if local is not None:
            # An inbox of one of our own brokers: the ack it would read back
            # from NATS is handed over directly (two NATS hops and a decode
            # less per message; the client sees the same answer).
            local(ack)
            return
        out = self._out
        if out is None:
            return
        payload = envelope.encode(ack.SerializeToString(), envelope.TYPE_ACK)
        with contextlib.suppress(Exception):
            out.send_nowait(out.frame(ack.ackInbox, payload, "", None))


class Broker:
    """One broker of the emulated cluster (see the module docstring)."""

    def __init__(
        self, broker_id: str, state: ClusterState, nats_url: str, host: str, hooks: ClusterHooks
    ) -> None:
        self.id = broker_id
        self.hooks = hooks
        self.credentials: grpc.ServerCredentials | None = None  # TLS when set
        self.host = host
        self.port = 0
        self.advertised: tuple[str, int] | None = None  # metadata's host/port when set
        self.state = state
        self.nats_url = nats_url
        self.running = False
        self._server: grpc.aio.Server | None = None
        self._nc: NatsClient | None = None
        self._publisher: _Publisher | None = None
        self._ack_prefix = f"_LB_ACK.{uuid.uuid4().hex}"
        self._inbox_ids = itertools.count()
        self._ack_waiters: dict[str, asyncio.Future[api_pb2.Ack | None]] = {}
        self._ack_sub: NatsSubscription | None = None
        self._stop_waiter: asyncio.Future[None] | None = None
        self._sessions: set[_Responses] = set()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # -- lifecycle ---------------------------------------------------------

    async def start(self) -> None:
        self._stop_waiter = asyncio.get_running_loop().create_future()
        self._nc = await connect_nats(self.nats_url, f"liftbridge-emulator-{self.id}")
        self._publisher = _Publisher(self._nc)
        self._ack_sub = await self._nc.subscribe(
            f"{self._ack_prefix}.*",
            cb=self._on_ack,
            pending_msgs_limit=_PENDING_MSGS,
            pending_bytes_limit=_PENDING_BYTES,
        )
        await settle(self._nc)
        # No SO_REUSEPORT: a second emulator asking for a port in use must fail, not
        # share it (gRPC's default lets both listen and splits the connections).
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers((self._handlers(),))
        bind = f"{self.host}:{self.port}"
        try:
            if self.credentials is None:
                port = server.add_insecure_port(bind)
            else:
                port = server.add_secure_port(bind, self.credentials)
        except RuntimeError:  # gRPC's "Failed to bind to address" (in use, not allowed)
            port = 0
        if port == 0:
            await self._nc.close()
            self._nc = None
            raise OSError(f"cannot listen on {self.host}:{self.port} (in use?)")
        self.port = port
        await server.start()
        self._server = server
        self.running = True

    async def stop(self) -> None:
        """Stop serving: subscriptions end with UNAVAILABLE, then the port closes."""
        if not self.running:
            return
        self.running = False
        for session in self._sessions:
            session.push(_STOP)
        if self._stop_waiter is not None and not self._stop_waiter.done():
            self._stop_waiter.set_result(None)
        for fut in self._ack_waiters.values():
            if not fut.done():
                fut.cancel()
        self._ack_waiters.clear()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(0.5)
        nc, self._nc = self._nc, None
        self._publisher = None
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()

    async def _on_ack(self, msg: NatsMsg) -> None:
        fut = self._ack_waiters.pop(msg.subject, None)
        if fut is not None and not fut.done():
            fut.set_result(envelope.decode_ack(msg.data))

    # -- publishing (client side of NATS) ----------------------------------

    def _new_ack_inbox(self) -> str:
        # Unique: the prefix is random per broker, the counter never repeats in it.
        return f"{self._ack_prefix}.{next(self._inbox_ids)}"

    async def _publish_and_wait(
        self, subject: str, data: bytes, ack_inbox: str, timeout: float | None, wait: bool
    ) -> api_pb2.Ack | None:
        nc = self._require_nats()
        if not wait:
            self._publish_nowait(subject, data, alone=True)
            return None
        assert timeout is not None
        own = ack_inbox.startswith(self._ack_prefix + ".")
        if own:
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[api_pb2.Ack | None] = loop.create_future()
            self._ack_waiters[ack_inbox] = fut

            def deliver(ack: api_pb2.Ack) -> None:
                if not fut.done():
                    fut.set_result(ack)

            self.state.local_acks[ack_inbox] = deliver
            # One timer instead of asyncio.wait_for (no extra task or future):
            # on expiry it resolves the future with _TIMED_OUT.
            timer = loop.call_later(timeout, _time_out, fut)
            try:
                self._publish_nowait(subject, data, alone=True)
                ack = await fut
            except asyncio.CancelledError:
                if not self.running:
                    raise RpcError("UNAVAILABLE", "broker is shutting down") from None
                raise
            finally:
                timer.cancel()
                self._ack_waiters.pop(ack_inbox, None)
                self.state.local_acks.pop(ack_inbox, None)
            if ack is _TIMED_OUT:
                raise RpcError("DEADLINE_EXCEEDED", "nats: timeout")
        else:
            sub = await nc.subscribe(ack_inbox, max_msgs=1)
            try:
                await settle(nc)
                await nc.publish(subject, data)
                try:
                    raw = (await sub.next_msg(timeout=timeout)).data
                except nats.errors.TimeoutError:
                    raise RpcError("DEADLINE_EXCEEDED", "nats: timeout") from None
            finally:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            ack = envelope.decode_ack(raw)
        if ack is None:
            raise RpcError("UNKNOWN", "Invalid ack for publish")
        return ack

    def _publish_nowait(self, subject: str, data: bytes, *, alone: bool = False) -> None:
        """Publish on NATS without awaiting (see :class:`_Publisher`)."""
        publisher = self._publisher
        if publisher is None or not self.running:
            raise RpcError("UNAVAILABLE", "broker is shutting down")
        publisher.publish(subject, data, alone=alone)

    def _require_nats(self) -> NatsClient:
        if self._nc is None or not self.running:
            raise RpcError("UNAVAILABLE", "broker is shutting down")
        return self._nc

    def _publish_target(self, req: api_pb2.PublishRequest) -> tuple[Partition, str]:
        """Check a publish like the server does; returns the partition and its subject."""
        if not req.stream:
            raise _PublishError(api_pb2.PublishAsyncError.BAD_REQUEST, "no stream provided")
        # This broker's view of the metadata (it may lag: view_time).
        state = self.state
        t = None if state.metadata_delay <= 0 else state.view_time(self.id)
        if t is None:
            stream = state.streams.get(req.stream)
        else:
            stream = state.stream_view(self.id, req.stream)
        if stream is None:
            raise _PublishError(
                api_pb2.PublishAsyncError.NOT_FOUND, f"no such stream: {req.stream}"
            )
        p = stream.partitions.get(req.partition)
        if p is None:
            raise _PublishError(
                api_pb2.PublishAsyncError.NOT_FOUND, f"no such partition: {req.partition}"
            )
        if p.readonly if t is None else p.flags_at(t)[1]:
            raise _PublishError(
                api_pb2.PublishAsyncError.READONLY, f"readonly partition: {req.partition}"
            )
        if stream.concurrency_control and req.ackPolicy == _NONE:
            raise _PublishError(
                api_pb2.PublishAsyncError.BAD_REQUEST,
                "stream with concurrency control must have AckPolicy set",
            )
        return p, p.subject

    async def _resume(self, p: Partition) -> None:
        if not p.paused and not p.stream.resume_all:
            return  # nothing to resume (the usual case, checked first)
        resumed = self.state.resume(p)
        if resumed:
            await self._cluster_changed()

    async def _cluster_changed(self) -> None:
        await self.hooks.leadership_changed()

    def _publish_envelope(self, req: api_pb2.PublishRequest, subject: str) -> bytes:
        msg = api_pb2.Message(
            key=req.key,
            value=req.value,
            stream=req.stream,
            subject=subject,
            ackInbox=req.ackInbox,
            correlationId=req.correlationId,
            ackPolicy=req.ackPolicy,
            offset=req.expectedOffset,
        )
        if req.headers:  # a map argument costs more than the rest: only when there is one
            msg.headers.update(req.headers)
        return envelope.encode(msg.SerializeToString(), envelope.TYPE_PUBLISH)

    # -- RPC handlers --------------------------------------------------------

    def _handlers(self) -> grpc.GenericRpcHandler:
        def unary(
            fn: Callable[[Any, _Ctx], Awaitable[Any]], req_type: Any
        ) -> grpc.RpcMethodHandler[Any, Any]:
            async def handler(request: Any, context: _Ctx) -> Any:
                try:
                    return await fn(request, context)
                except RpcError as e:
                    await context.abort(getattr(grpc.StatusCode, e.code), e.details)

            return grpc.unary_unary_rpc_method_handler(
                handler,
                request_deserializer=req_type.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            )

        pb = api_pb2
        methods = {
            "CreateStream": unary(self.create_stream, pb.CreateStreamRequest),
            "DeleteStream": unary(self.delete_stream, pb.DeleteStreamRequest),
            "PauseStream": unary(self.pause_stream, pb.PauseStreamRequest),
            "SetStreamReadonly": unary(self.set_stream_readonly, pb.SetStreamReadonlyRequest),
            "FetchMetadata": unary(self.fetch_metadata, pb.FetchMetadataRequest),
            "FetchPartitionMetadata": unary(
                self.fetch_partition_metadata, pb.FetchPartitionMetadataRequest
            ),
            "Publish": unary(self.publish, pb.PublishRequest),
            "PublishToSubject": unary(self.publish_to_subject, pb.PublishToSubjectRequest),
            "SetCursor": unary(self.set_cursor, pb.SetCursorRequest),
            "FetchCursor": unary(self.fetch_cursor, pb.FetchCursorRequest),
            "JoinConsumerGroup": unary(self.join_consumer_group, pb.JoinConsumerGroupRequest),
            "LeaveConsumerGroup": unary(self.leave_consumer_group, pb.LeaveConsumerGroupRequest),
            "FetchConsumerGroupAssignments": unary(
                self.fetch_consumer_group_assignments, pb.FetchConsumerGroupAssignmentsRequest
            ),
            "ReportConsumerGroupCoordinator": unary(
                self.report_consumer_group_coordinator, pb.ReportConsumerGroupCoordinatorRequest
            ),
            # Subscribe yields pre-serialized messages (bytes): no serializer.
            "Subscribe": grpc.unary_stream_rpc_method_handler(
                self.subscribe, request_deserializer=pb.SubscribeRequest.FromString
            ),
            # PublishAsync too (serialized PublishResponses).
            "PublishAsync": grpc.stream_stream_rpc_method_handler(
                self.publish_async, request_deserializer=pb.PublishRequest.FromString
            ),
        }
        return grpc.method_handlers_generic_handler("proto.API", methods)

    # streams

    async def create_stream(
        self, req: api_pb2.CreateStreamRequest, context: _Ctx
    ) -> api_pb2.CreateStreamResponse:
        if req.HasField("encryption") and req.encryption.value:
            # The real server needs LIFTBRIDGE_ENCRYPTION_KEY for this; the emulator
            # stores values as they are and only records the option.
            pass
        self.state.create_stream(req)
        await self._cluster_changed()
        return api_pb2.CreateStreamResponse()

    async def delete_stream(
        self, req: api_pb2.DeleteStreamRequest, context: _Ctx
    ) -> api_pb2.DeleteStreamResponse:
        self.state.delete_stream(req.name)
        await self._cluster_changed()
        return api_pb2.DeleteStreamResponse()

    async def pause_stream(
        self, req: api_pb2.PauseStreamRequest, context: _Ctx
    ) -> api_pb2.PauseStreamResponse:
        self.state.pause(req.name, list(req.partitions), req.resumeAll)
        await self._cluster_changed()
        return api_pb2.PauseStreamResponse()

    async def set_stream_readonly(
        self, req: api_pb2.SetStreamReadonlyRequest, context: _Ctx
    ) -> api_pb2.SetStreamReadonlyResponse:
        self.state.set_readonly(req.name, list(req.partitions), req.readonly)
        return api_pb2.SetStreamReadonlyResponse()

    # metadata

    async def fetch_metadata(
        self, req: api_pb2.FetchMetadataRequest, context: _Ctx
    ) -> api_pb2.FetchMetadataResponse:
        state = self.state
        me = self.id
        t = state.view_time(me)
        streams = state.streams_view(me)
        partition_counts, leader_counts = state.leader_counts()
        resp = api_pb2.FetchMetadataResponse()
        for b in self.hooks.live_brokers():
            host, port = b.advertised or (b.host, b.port)
            resp.brokers.add(
                id=b.id,
                host=host,
                port=port,
                partitionCount=partition_counts.get(b.id, 0),
                leaderCount=leader_counts.get(b.id, 0),
            )
        names = list(req.streams) or list(streams)
        for name in names:
            stream = streams.get(name)
            if stream is None:
                resp.streamMetadata.add(name=name, error=api_pb2.StreamMetadata.UNKNOWN_STREAM)
            else:
                # Offsets are this broker's own (-1 where it holds no replica).
                resp.streamMetadata.append(stream.to_proto(me, t))
        for group_id in req.groups:
            group = state.group_view(me, group_id)
            if group is None:
                resp.groupMetadata.add(
                    groupId=group_id, error=api_pb2.ConsumerGroupMetadata.UNKNOWN_GROUP
                )
            else:
                resp.groupMetadata.add(
                    groupId=group_id, coordinator=group.coordinator, epoch=group.epoch
                )
        return resp

    async def fetch_partition_metadata(
        self, req: api_pb2.FetchPartitionMetadataRequest, context: _Ctx
    ) -> api_pb2.FetchPartitionMetadataResponse:
        p = self.state.partition_view(self.id, req.stream, req.partition)
        if p is None:
            raise RpcError("NOT_FOUND", "partition not found")
        t = self.state.view_time(self.id)
        # A paused partition is closed on its leader, which then answers as if it did
        # not lead (Liftbridge v1.9.0: Pause closes the partition, and
        # FetchPartitionMetadata asks partition.IsLeader()).
        if p.leader != self.id or p.flags_at(t)[0]:
            raise RpcError("FAILED_PRECONDITION", "The request should be sent to partition leader")
        return api_pb2.FetchPartitionMetadataResponse(metadata=p.to_proto(self.id, t))

    # publishing

    async def publish(self, req: api_pb2.PublishRequest, context: _Ctx) -> api_pb2.PublishResponse:
        try:
            p, subject = self._publish_target(req)
        except _PublishError as e:
            raise e.to_rpc() from None
        await self._resume(p)
        if not req.ackInbox:
            req.ackInbox = self._new_ack_inbox()
        timeout = context.time_remaining()
        wait = req.ackPolicy != _NONE and timeout is not None
        ack = await self._publish_and_wait(
            subject, self._publish_envelope(req, subject), req.ackInbox, timeout, wait
        )
        if ack is not None:
            err = _ack_error(ack)
            if err is not None:
                raise err.to_rpc()
        return api_pb2.PublishResponse(ack=ack)

    async def publish_to_subject(
        self, req: api_pb2.PublishToSubjectRequest, context: _Ctx
    ) -> api_pb2.PublishToSubjectResponse:
        if not req.ackInbox:
            req.ackInbox = self._new_ack_inbox()
        msg = api_pb2.Message(
            key=req.key,
            value=req.value,
            subject=req.subject,
            headers=req.headers,
            ackInbox=req.ackInbox,
            correlationId=req.correlationId,
            ackPolicy=req.ackPolicy,
        )
        timeout = context.time_remaining()
        wait = req.ackPolicy != _NONE and timeout is not None
        ack = await self._publish_and_wait(
            req.subject,
            envelope.encode(msg.SerializeToString(), envelope.TYPE_PUBLISH),
            req.ackInbox,
            timeout,
            wait,
        )
        return api_pb2.PublishToSubjectResponse(ack=ack)

    async def publish_async(
        self, requests: AsyncIterator[api_pb2.PublishRequest], context: _Ctx
    ) -> AsyncIterator[bytes]:
        # Two halves: a task reads requests and publishes them on NATS; this
        # generator sends the responses (serialized PublishResponses) that acks
        # and errors queue, in the order they come.
        if self._publisher is None or not self.running:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "broker is shutting down")
        loop = asyncio.get_running_loop()
        responses = _Responses()
        push = responses.push
        inflight = 0
        drained: asyncio.Future[None] | None = None  # set once the client is done
        inbox = self._new_ack_inbox() + ".async"

        def on_ack(ack: api_pb2.Ack) -> None:
            nonlocal inflight
            inflight = max(0, inflight - 1)
            if inflight == 0 and drained is not None and not drained.done():
                drained.set_result(None)
            err = _ack_error(ack)
            if err is not None:
                push(_async_error(ack.correlationId, err).SerializeToString())
            else:
                push(_ack_response(ack))

        async def read_requests() -> None:
            nonlocal inflight, drained
            try:
                async for req in requests:
                    try:
                        p, subject = self._publish_target(req)
                        if p.paused or p.stream.resume_all:
                            await self._resume(p)
                    except _PublishError as e:
                        push(_async_error(req.correlationId, e).SerializeToString())
                        continue
                    req.ackInbox = inbox
                    try:
                        self._publish_nowait(subject, self._publish_envelope(req, subject))
                    except RpcError as e:
                        if e.details != _TOO_BIG_FOR_NATS:
                            raise
                        # Only this message fails, the session goes on (Liftbridge
                        # v1.9.0 server/api.go publishLoop: PublishAsyncError INTERNAL;
                        # it still counts the message in flight, so the session's end
                        # waits out its ack timeout).
                        too_big = _PublishError(api_pb2.PublishAsyncError.INTERNAL, e.details)
                        push(_async_error(req.correlationId, too_big).SerializeToString())
                    if req.ackPolicy != _NONE:
                        inflight += 1
                # The client is done: give in-flight acks a while to arrive.
                if inflight > 0:
                    drained = loop.create_future()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(drained, _ASYNC_ACK_TIMEOUT)
            except Exception as e:  # the stream broke (client gone, broker stopping)
                log.debug("PublishAsync session on %s ended: %r", self.id, e)
            finally:
                push(None)

        # The ingester hands this session's acks over directly (Ingester._send_ack).
        self.state.local_acks[inbox] = on_ack
        reader = asyncio.create_task(read_requests())
        self._sessions.add(responses)
        items = responses.items
        try:
            while True:
                if not items:
                    await responses.wait()
                item = items.popleft()
                if item is None:
                    return
                if item is _STOP:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "broker is shutting down")
                assert isinstance(item, bytes)
                yield item
        finally:
            self._sessions.discard(responses)
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            self.state.local_acks.pop(inbox, None)

    # subscribing

    async def subscribe(self, req: api_pb2.SubscribeRequest, context: _Ctx) -> AsyncIterator[bytes]:
        try:
            p, reader, stop, member = await self._open_subscription(req)
        except RpcError as e:
            await context.abort(getattr(grpc.StatusCode, e.code), e.details)
        yield _EMPTY_MESSAGE
        p.subscriber_count += 1
        stopping = self._stop_waiter
        assert stopping is not None
        state = self.state
        me = self.id
        try:
            entries = p.entries
            while True:
                if not self.running:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "broker is shutting down")
                if member is not None and member.replaced:
                    return  # another member of the group took the partition: a clean end
                if p.deleted or p.flag_history:
                    t = state.view_time(me)  # a recent change: this broker's view
                    if p.deleted_by(t):
                        await context.abort(grpc.StatusCode.NOT_FOUND, "commit log deleted")
                    paused, readonly = p.flags_at(t)
                else:
                    paused, readonly = p.paused, p.readonly
                if paused:
                    await context.abort(_PRECONDITION, _LOG_CLOSED)
                if p.leader != me and not req.readISRReplica:
                    # Leadership moved while this broker stays up: the old
                    # leader's log is closed under the reader.
                    await context.abort(grpc.StatusCode.INTERNAL, "commit log closed")
                # Readers see committed messages only: up to this broker's high watermark.
                hw = p.committed - 1 if p.leader == me else p.replica_hw(me)
                try:
                    span = reader.span(hw)
                except SegmentClosedError as e:
                    # The cleaner deleted the segment this reader was in (a slow
                    # reader behind retention): the server's read error, as is.
                    await context.abort(grpc.StatusCode.UNKNOWN, str(e))
                if span:
                    segment = reader.segment
                    assert segment is not None
                    for offset in span:
                        yield entries[offset]
                        reader.offset = offset + 1
                        if offset == stop:
                            # Exactly there: a stop offset the reader passes by (removed
                            # by retention or compaction) never ends the subscription.
                            await context.abort(_EXHAUSTED, "Stop offset reached")
                        if segment.closed or not self.running:
                            break
                    continue
                if readonly:
                    await context.abort(_EXHAUSTED, "End of readonly partition")
                await asyncio.wait((p.changed(), stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            p.subscriber_count -= 1
            if member is not None:
                group = req.consumer.groupId
                if p.group_members.get(group) is member:
                    del p.group_members[group]

    async def _open_subscription(
        self, req: api_pb2.SubscribeRequest
    ) -> tuple[Partition, LogReader, int, GroupMember | None]:
        group = req.consumer.groupId if req.HasField("consumer") else ""
        if group and not req.consumer.consumerId:
            raise RpcError(
                "INVALID_ARGUMENT", "Consumer id cannot be empty when group id is provided"
            )
        me = self.id
        p = self.state.partition_view(me, req.stream, req.partition)
        if p is None or p.deleted_by(self.state.view_time(me)):
            raise RpcError("NOT_FOUND", "No such partition")
        if p.leader != self.id:
            if not req.readISRReplica:
                raise RpcError("FAILED_PRECONDITION", "Server not partition leader")
            if group:
                raise RpcError(
                    "INVALID_ARGUMENT", "Consumer groups not compatible with ReadISRReplica"
                )
            if self.id not in p.isr:
                raise RpcError("FAILED_PRECONDITION", "Server not in partition ISR")
        existing = p.group_members.get(group) if group else None
        if existing is not None and existing.epoch > req.consumer.groupEpoch:
            raise RpcError(
                "FAILED_PRECONDITION", "Consumer is not currently assigned this partition"
            )
        if req.resume and p.paused:
            await self._resume(p)
        paused, readonly = p.flags_at(self.state.view_time(me))
        newest = p.newest_offset
        # The reader's high watermark: this broker's (a follower's lags the leader's).
        hw = p.committed - 1 if p.leader == me else p.replica_hw(me)
        pos = req.startPosition
        if pos == api_pb2.OFFSET:
            start = req.startOffset
        elif pos == api_pb2.TIMESTAMP:
            if paused:  # the lookup meets the closed log, empty or not
                raise RpcError("INTERNAL", _PAUSED_TIMESTAMP_LOOKUP)
            start = p.offset_at_or_after(req.startTimestamp)
        elif pos == api_pb2.EARLIEST:
            start = p.oldest_offset  # -1 when retention left nothing: from 0, i.e. waits
        elif pos == api_pb2.LATEST:
            start = newest
        elif pos == api_pb2.NEW_ONLY:
            start = newest + 1
        else:
            raise RpcError("INVALID_ARGUMENT", f"Unknown StartPosition {pos}")
        start = max(start, 0)  # "If log is empty, next offset will be 0"
        # A paused partition's log is closed, and Liftbridge v1.9.0 has no paused
        # check in Subscribe: the start and stop lookups run first (a timestamp
        # lookup fails on the closed log), then the stop-before-start check, then the
        # reader is opened (server/partition.go Subscribe, getStartOffset,
        # getStopOffset).
        spos = req.stopPosition
        if spos == api_pb2.STOP_ON_CANCEL:
            stop = newest if readonly else -1
        elif spos == api_pb2.STOP_OFFSET:
            stop = req.stopOffset
        elif spos == api_pb2.STOP_TIMESTAMP:
            if paused:
                raise RpcError("INTERNAL", _PAUSED_TIMESTAMP_LOOKUP)
            stop = p.offset_at_or_before(req.stopTimestamp)
        elif spos == api_pb2.STOP_LATEST:
            stop = newest
            if stop == -1:
                raise RpcError("RESOURCE_EXHAUSTED", "Stream is empty")
        else:
            raise RpcError("INVALID_ARGUMENT", f"Unknown StopPosition {spos}")
        # Checked against the start asked for, before the reader moves it (to the
        # oldest kept offset, or to the next message past the high watermark).
        if (spos != api_pb2.STOP_ON_CANCEL or readonly) and stop < start:
            raise RpcError(
                "INVALID_ARGUMENT", f"Stop offset is before start offset: {stop} < {start}"
            )
        if paused:
            # Reading committed messages needs a segment, which fails at once; a
            # reader that waits (log empty or start past the high watermark) is
            # confirmed, then ends when it looks at the log.
            if start <= hw and p.oldest_offset != -1:
                raise RpcError("INTERNAL", f"Failed to create stream reader: {_SEGMENT_CLOSED}")
            return p, _reader(p, start, hw), -1, None
        # The reader starts at the oldest kept offset when asked for less, and a
        # start past the high watermark waits for the next committed message,
        # whatever offset it has (commitlog reader: "If offset exceeds HW, wait for
        # the next message").
        reader = _reader(p, start, hw)
        member = None
        if group:
            if existing is not None:
                existing.replaced = True  # the previous member's stream ends
                p.wake()
            member = GroupMember(req.consumer.consumerId, req.consumer.groupEpoch)
            p.group_members[group] = member
        return p, reader, stop, member

    # cursors

    def _cursor_partition(self, stream: str, cursor_id: str, partition: int) -> Partition:
        if not stream:
            raise RpcError("INVALID_ARGUMENT", "No stream provided")
        if not cursor_id:
            raise RpcError("INVALID_ARGUMENT", "No cursorId provided")
        cp = self.state.cursors_partition(cursor_id, stream, partition)
        if cp.leader != self.id:
            raise RpcError(
                "FAILED_PRECONDITION", f"Server not leader for cursors partition {cp.id}"
            )
        return cp

    async def set_cursor(
        self, req: api_pb2.SetCursorRequest, context: _Ctx
    ) -> api_pb2.SetCursorResponse:
        cp = self._cursor_partition(req.stream, req.cursorId, req.partition)
        key = f"{req.cursorId},{req.stream},{req.partition}".encode()
        # Stored in the __cursors partition like the real server does (the value
        # here is the offset as text, not the server's internal protobuf).
        cp.append(key=key, value=str(req.offset).encode(), headers={}, subject="", reply="")
        self.state.cursors[(req.cursorId, req.stream, req.partition)] = req.offset
        return api_pb2.SetCursorResponse()

    async def fetch_cursor(
        self, req: api_pb2.FetchCursorRequest, context: _Ctx
    ) -> api_pb2.FetchCursorResponse:
        self._cursor_partition(req.stream, req.cursorId, req.partition)
        offset = self.state.cursors.get((req.cursorId, req.stream, req.partition), -1)
        return api_pb2.FetchCursorResponse(offset=offset)

    # consumer groups

    def _expire_members(self) -> None:
        now = asyncio.get_running_loop().time()
        self.state.expire_members(now, _CONSUMER_TIMEOUT_NS / 1e9)

    async def join_consumer_group(
        self, req: api_pb2.JoinConsumerGroupRequest, context: _Ctx
    ) -> api_pb2.JoinConsumerGroupResponse:
        if not req.groupId:
            raise RpcError("INVALID_ARGUMENT", "No groupId provided")
        if not req.consumerId:
            raise RpcError("INVALID_ARGUMENT", "No consumerId provided")
        if not req.streams:
            raise RpcError("INVALID_ARGUMENT", "No streams provided")
        self._expire_members()
        state = self.state
        # Liftbridge v1.9.0 checks, and answers, in this order, every refusal
        # FAILED_PRECONDITION (server/metadata.go JoinConsumerGroup and
        # checkCreateConsumerGroupPreconditions / checkJoinConsumerGroupPreconditions).
        found = state.groups.get(req.groupId)
        created = found is None
        if found is not None:
            group = found
            if req.consumerId in group.members:
                raise RpcError(
                    "FAILED_PRECONDITION", "consumer is already a member of the consumer group"
                )
            self._check_group_streams(req.streams)
        else:
            if state.metadata_delay > 0:
                # The metadata leader replicates the new group through Raft before
                # applying it: two members joining a new group at once both get
                # here, and the second to apply fails (as on the server).
                await asyncio.sleep(state.metadata_delay * _RAFT_COMMIT)
                if req.groupId in state.groups:
                    raise RpcError("FAILED_PRECONDITION", "consumer group already exists")
            self._check_group_streams(req.streams)
            live = [b for b in state.broker_ids if b in state.live]
            # Coordinators go round the live brokers by group count, the first on the
            # broker after the metadata leader (broker-0): a real cluster picks the
            # least loaded broker, most often not the metadata leader, and that
            # coordinator applies the new group late.
            coordinator = live[(len(state.groups) + 1) % len(live)]
            group = ConsumerGroup(req.groupId, coordinator)
            state.groups[req.groupId] = group
        group.members[req.consumerId] = list(req.streams)
        group.last_seen[req.consumerId] = asyncio.get_running_loop().time()
        # The epoch of a new group is 0; later ones are Raft log indexes.
        state.rebalance(group, epoch=0 if created else None)
        return api_pb2.JoinConsumerGroupResponse(
            coordinator=group.coordinator,
            epoch=group.epoch,
            consumerTimeout=_CONSUMER_TIMEOUT_NS,
            coordinatorTimeout=_COORDINATOR_TIMEOUT_NS,
        )

    def _check_group_streams(self, streams: Iterable[str]) -> None:
        for name in streams:
            if name not in self.state.streams:
                raise RpcError("FAILED_PRECONDITION", "stream does not exist")

    async def leave_consumer_group(
        self, req: api_pb2.LeaveConsumerGroupRequest, context: _Ctx
    ) -> api_pb2.LeaveConsumerGroupResponse:
        if not req.groupId:
            raise RpcError("INVALID_ARGUMENT", "No groupId provided")
        if not req.consumerId:
            raise RpcError("INVALID_ARGUMENT", "No consumerId provided")
        self._expire_members()
        group = self.state.groups.get(req.groupId)
        if group is None:
            raise RpcError("NOT_FOUND", "consumer group does not exist")
        if req.consumerId not in group.members:
            # FAILED_PRECONDITION: only a missing group is NOT_FOUND (Liftbridge
            # v1.9.0 server/metadata.go LeaveConsumerGroup).
            raise RpcError("FAILED_PRECONDITION", "consumer is not a member of the consumer group")
        del group.members[req.consumerId]
        group.last_seen.pop(req.consumerId, None)
        if group.members:
            self.state.rebalance(group)
        else:
            del self.state.groups[req.groupId]
            self.state.record_group(req.groupId)
        return api_pb2.LeaveConsumerGroupResponse()

    async def fetch_consumer_group_assignments(
        self, req: api_pb2.FetchConsumerGroupAssignmentsRequest, context: _Ctx
    ) -> api_pb2.FetchConsumerGroupAssignmentsResponse:
        if not req.groupId:
            raise RpcError("INVALID_ARGUMENT", "No groupId provided")
        if not req.consumerId:
            raise RpcError("INVALID_ARGUMENT", "No consumerId provided")
        self._expire_members()
        # Answered from this broker's view of the group (a coordinator that is not
        # the metadata leader applies joins and leaves late), checks in the
        # server's order.
        view = self.state.group_view(self.id, req.groupId)
        if view is None:
            raise RpcError("NOT_FOUND", "consumer group does not exist")
        if view.coordinator != self.id:
            raise RpcError("FAILED_PRECONDITION", "broker is not the consumer group coordinator")
        if req.epoch != view.epoch:
            raise RpcError(
                "FAILED_PRECONDITION",
                "client-provided group epoch differs from broker group epoch",
            )
        if req.consumerId not in view.members:
            raise RpcError("FAILED_PRECONDITION", "consumer is not a member of the consumer group")
        group = self.state.groups.get(req.groupId)
        if group is not None and req.consumerId in group.last_seen:
            group.last_seen[req.consumerId] = asyncio.get_running_loop().time()
        resp = api_pb2.FetchConsumerGroupAssignmentsResponse(epoch=view.epoch)
        for stream, partitions in view.assignments.get(req.consumerId, {}).items():
            resp.assignments.add(stream=stream, partitions=partitions)
        return resp

    async def report_consumer_group_coordinator(
        self,
        req: api_pb2.ReportConsumerGroupCoordinatorRequest,
        context: _Ctx,
    ) -> api_pb2.ReportConsumerGroupCoordinatorResponse:
        if not req.groupId:
            raise RpcError("INVALID_ARGUMENT", "No groupId provided")
        if not req.consumerId:
            raise RpcError("INVALID_ARGUMENT", "No consumerId provided")
        if not req.coordinator:
            raise RpcError("INVALID_ARGUMENT", "No coordinator provided")
        # Checks and answers as Liftbridge v1.9.0's (server/metadata.go
        # ReportGroupCoordinator): every refusal FAILED_PRECONDITION.
        group = self.state.groups.get(req.groupId)
        if group is None:
            raise RpcError("FAILED_PRECONDITION", f"No such consumer group {req.groupId}")
        if req.coordinator != group.coordinator or req.epoch != group.epoch:
            raise RpcError(
                "FAILED_PRECONDITION",
                f"Coordinator generation mismatch, current coordinator: {group.coordinator} "
                f"epoch: {group.epoch}, got coordinator: {req.coordinator} epoch: {req.epoch}",
            )
        if req.consumerId not in group.members:
            raise RpcError(
                "FAILED_PRECONDITION",
                f"Consumer {req.consumerId} is not a member of consumer group {req.groupId}",
            )
        # The coordinator moves once more than half of the members reported it,
        # each report within the coordinator timeout of the one before
        # (server/failover.go: witnesses > len(members) / 2, a timer reset by each
        # report); then the next live broker coordinates.
        now = asyncio.get_running_loop().time()
        if now >= group.witnesses_until:
            group.witnesses.clear()
        group.witnesses.add(req.consumerId)
        if len(group.witnesses) <= len(group.members) // 2:
            group.witnesses_until = now + _COORDINATOR_TIMEOUT_NS / 1e9
            return api_pb2.ReportConsumerGroupCoordinatorResponse()
        group.witnesses.clear()
        live = [b for b in self.state.broker_ids if b in self.state.live]
        others = [b for b in live if b != group.coordinator] or live
        group.coordinator = others[0]
        self.state.rebalance(group)
        return api_pb2.ReportConsumerGroupCoordinatorResponse()


def _reader(p: Partition, start: int, hw: int) -> LogReader:
    """Open a reader on ``p``'s log (fails while a clean closed a segment it needs)."""
    try:
        return LogReader(p.log, start, hw)
    except ReaderOpenError as e:
        raise RpcError("INTERNAL", f"Failed to create stream reader: {e}") from None


def _length_prefixed(tag: bytes, data: bytes) -> bytes:
    n = len(data)
    if n < 0x80:
        return tag + bytes((n,)) + data
    size = bytearray()
    while n > 0x7F:
        size.append((n & 0x7F) | 0x80)
        n >>= 7
    size.append(n)
    return tag + bytes(size) + data


def _ack_response(ack: api_pb2.Ack) -> bytes:
    """``PublishResponse(ack=ack, correlationId=ack.correlationId)``, serialized.

    Written out by hand (fields 1 and 3, length-delimited, in field order: the
    bytes protobuf would produce) to skip building a message that copies the ack.
    """
    return _length_prefixed(b"\x0a", ack.SerializeToString()) + (
        _length_prefixed(b"\x1a", ack.correlationId.encode()) if ack.correlationId else b""
    )


def _async_error(correlation_id: str, err: _PublishError) -> api_pb2.PublishResponse:
    # Like the server, also set an empty Ack so that clients unaware of
    # asyncError still see a response for the correlation id.
    return api_pb2.PublishResponse(
        correlationId=correlation_id, ack=api_pb2.Ack(correlationId=""), asyncError=err.to_proto()
    )
