"""The nsqd emulator's TCP protocol server: the driver of its :class:`NsqdState`.

Theory of operation. One asyncio server accepts TCP clients; each connection is
an :class:`asyncio.Protocol` that parses commands out of its receive buffer
exactly as nsqd v1.3's ``protocol_v2.go`` does (same order of checks, same
error codes and texts, same choice of fatal vs. non-fatal errors) and answers
with the same frames. What a command does to topics, channels and messages is
the pure state's (``_nsqd_state.py``): SUB, RDY, FIN, REQ, TOUCH, CLS, PUB, MPUB
and DPUB call its public methods; the connection keeps what is the protocol's
(handshake, IDENTIFY settings, TLS and compression, heartbeats, AUTH).

:class:`NsqdServer` drives that state, as ``_nsqd_state.py`` describes: after
every change (a receive buffer parsed, an HTTP call, a timer) :meth:`NsqdServer.pump`
schedules one delivery per event-loop turn when the state has messages to hand
out, re-arms the one ``loop.call_at`` timer at the state's next deadline, and
passes topic and channel registrations on (to nsqlookupd). Deliveries are
written as one batch per connection.

Behaviour mirrored from nsqd (protocol_v2.go, client_v2.go):

* magic ``b"  V2"`` (anything else: ``E_BAD_PROTOCOL`` and close);
* IDENTIFY answers ``OK`` unless ``feature_negotiation`` is true, then the JSON
  settings; TLS (``tls_v1``) upgrades after the JSON and confirms with ``OK``
  over TLS; deflate or snappy likewise (the ``OK`` is the first compressed
  frame; snappy uses the framing format and needs the ``cramjam`` package);
* heartbeats (``_heartbeat_``) every heartbeat interval from the start of the
  connection; a client silent for two intervals is disconnected;
* every error closes the connection except ``E_FIN_FAILED``, ``E_REQ_FAILED``
  and ``E_TOUCH_FAILED``;
* CLS answers ``CLOSE_WAIT``, sets RDY to 0 and leaves the connection open for
  the client to finish its in-flight messages and close.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import ssl
import struct
import time
import zlib
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Protocol, cast

from aioclients._tasks import TaskOwner
from aioclients.testing._nsq_wire import (
    FRAME_ERROR,
    FRAME_MESSAGE,
    FRAME_RESPONSE,
    NSQ_VERSION,
    ClientError,
    frame,
    is_valid_name,
    read_mpub,
)
from aioclients.testing._nsqd_state import Consumer, Message, NsqdState, RegistryChange

__all__ = (
    "STATE_CLOSING",
    "STATE_INIT",
    "STATE_SUBSCRIBED",
    "NsqdOptions",
    "NsqdServer",
    "snappy_available",
)

log = logging.getLogger("aioclients.testing.nsqd")

_MAGIC = b"  V2"
_MSG_HEADER = struct.Struct(">IIqH")
_SIZE = struct.Struct(">i")
_MAX_LINE = 16 * 1024  # nsqd reads command lines through a 16 KiB bufio.Reader
_HEARTBEAT = frame(FRAME_RESPONSE, b"_heartbeat_")
_OK = frame(FRAME_RESPONSE, b"OK")
_INF = float("inf")

# client states, numbered as nsqd numbers them (they appear in /stats)
STATE_INIT = 0
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4


class NsqdOptions(Protocol):
    """The settings the server reads (the emulator's attributes, read at each use,
    so a test may change them between :meth:`NsqdServer.close` and a new listen)."""

    auth_secret: str | None
    auth_identity: str
    auth_topics: tuple[str, ...] | None
    tls: ssl.SSLContext | None
    tls_required: bool
    max_rdy_count: int
    msg_timeout: float
    max_msg_timeout: float
    max_req_timeout: float
    max_msg_size: int
    max_body_size: int
    heartbeat_interval: float
    min_heartbeat_interval: float
    max_heartbeat_interval: float
    min_msg_timeout: float
    output_buffer_timeout: float
    deflate_enabled: bool
    max_deflate_level: int
    snappy_enabled: bool


def _goquote(name: str) -> str:
    # Go's %q; names that reach an error message are printable in practice.
    return json.dumps(name, ensure_ascii=False)


def _base10(raw: bytes) -> int | None:
    """nsqd's ByteToBase10: digits only (empty is 0); anything else fails."""
    if raw and not raw.isdigit():
        return None
    return int(raw) if raw else 0


_SNAPPY_ID = b"\xff\x06\x00\x00sNaPpY"


def _cramjam() -> Any:
    import cramjam

    return cramjam


def snappy_available() -> bool:
    """Whether snappy can be offered (the ``cramjam`` package is installed)."""
    try:
        _cramjam()
    except ImportError:
        return False
    return True


class _SnappyStream:
    """Snappy's framing format both ways (what nsqd's golang/snappy reader/writer speak).

    Incoming chunks are decoded one at a time through cramjam (which checks each
    chunk's CRC); outgoing writes are framed by cramjam, the stream identifier
    sent once, as a Go ``snappy.Writer`` does.
    """

    def __init__(self) -> None:
        self._snappy = _cramjam().snappy
        self._raw = bytearray()
        self._sent_id = False

    def compress(self, data: bytes) -> bytes:
        out = bytes(self._snappy.compress(data))
        if self._sent_id:
            return out[len(_SNAPPY_ID) :]
        self._sent_id = True
        return out

    def decompress(self, data: bytes) -> bytes:
        raw = self._raw
        raw += data
        out = []
        pos = 0
        while len(raw) - pos >= 4:
            kind = raw[pos]
            size = raw[pos + 1] | raw[pos + 2] << 8 | raw[pos + 3] << 16
            end = pos + 4 + size
            if len(raw) < end:
                break
            chunk = bytes(raw[pos:end])
            pos = end
            if kind == 0xFF:
                if chunk != _SNAPPY_ID:
                    raise ValueError("bad snappy stream identifier")
            elif kind in (0x00, 0x01):
                out.append(bytes(self._snappy.decompress(_SNAPPY_ID + chunk)))
            elif kind < 0x80:
                raise ValueError(f"reserved unskippable snappy chunk type {kind:#x}")
        del raw[:pos]
        return b"".join(out)


class NsqdServer:
    """The TCP listener, its connections, and the driver of the state they share.

    Args:
        options: the settings (read at each use).
        state: the topics, channels and messages.
        on_registry_change: told the topics and channels created and deleted, in
            order (the emulator passes them to nsqlookupd).
    """

    def __init__(
        self,
        options: NsqdOptions,
        state: NsqdState,
        on_registry_change: Callable[[list[RegistryChange]], None],
    ) -> None:
        self.options = options
        self.state = state
        self._on_registry_change = on_registry_change
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener: asyncio.Server | None = None
        self._closing: asyncio.Server | None = None
        self._connections: set[_NsqdConnection] = set()
        self._subscribers: dict[Consumer, _NsqdConnection] = {}
        self._tasks: TaskOwner | None = None
        self._dispatch_handle: asyncio.Handle | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = _INF
        self._failures: dict[str, int] = {}
        self._auth_source: tuple[str, ...] | None = None
        self._auth_patterns: list[re.Pattern[str]] = []
        #: when the server last started listening (s since the epoch, for /stats and /info)
        self.start_time = int(time.time())

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the listener is open."""
        return self._listener is not None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the server last listened on.

        Raises:
            RuntimeError: it never listened.
        """
        if self._loop is None:
            raise RuntimeError("the nsqd server has not listened yet")
        return self._loop

    async def listen(self, host: str, port: int, tasks: TaskOwner) -> int:
        """Open the listener; returns the bound port.

        Args:
            tasks: the owner of the tasks connections start (TLS upgrades).

        Raises:
            OSError: the port is taken.
        """
        self._loop = loop = asyncio.get_running_loop()
        self._tasks = tasks
        self._listener = await loop.create_server(
            lambda: _NsqdConnection(self), host, port, reuse_address=True
        )
        self.start_time = int(time.time())
        self.pump()  # deadlines and messages that came while the server was stopped
        return int(self._listener.sockets[0].getsockname()[1])

    def close(self) -> None:
        """Close the listener and abort every connection (their consumers unsubscribe)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        for conn in list(self._connections):
            conn.abort()
        self._cancel_timers()
        self._closing = listener

    async def wait_closed(self) -> None:
        """Wait until the listener closed by :meth:`close` is closed."""
        listener, self._closing = self._closing, None
        if listener is not None:
            await listener.wait_closed()

    def _cancel_timers(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = _INF
        if self._dispatch_handle is not None:
            self._dispatch_handle.cancel()
            self._dispatch_handle = None

    def flush_for_restart(self) -> None:
        """What nsqd keeps across a restart (see :meth:`NsqdState.flush_for_restart`)."""
        self.state.flush_for_restart()
        self._subscribers.clear()
        self.pump()

    def clear(self) -> None:
        """Forget every topic."""
        self.state.clear()
        self._subscribers.clear()
        self._cancel_timers()

    # -- the driver ---------------------------------------------------------------------

    def now(self) -> float:
        """The clock of the state's deadlines: the event loop's."""
        loop = self._loop
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return time.monotonic()  # what asyncio's loops read
        return loop.time()

    def pump(self) -> None:
        """After a change to the state: pass registrations on, schedule a delivery,
        re-arm the timer."""
        state = self.state
        if state.has_registry_changes:
            self._on_registry_change(state.take_registry_changes())
        loop = self._loop
        if loop is None or self._listener is None:
            return  # nothing is delivered or timed while the server is stopped
        if self._dispatch_handle is None and state.dispatch_pending:
            self._dispatch_handle = loop.call_soon(self._dispatch)
        due = state.next_deadline()
        if due is not None and due < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = due
            self._timer = loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = _INF
        assert self._loop is not None
        self.state.handle_timer(self._loop.time())
        self.pump()

    def _dispatch(self) -> None:
        self._dispatch_handle = None
        assert self._loop is not None
        subscribers = self._subscribers
        for consumer, msgs in self.state.dispatch(self._loop.time()):
            conn = subscribers.get(consumer)
            if conn is not None:
                conn.deliver(msgs)
        self.pump()

    # -- what connections ask -----------------------------------------------------------

    def subscribe(self, conn: _NsqdConnection, topic: str, channel: str) -> Consumer:
        """SUB on ``conn``: a consumer with the connection's IDENTIFY settings."""
        consumer = self.state.subscribe(
            topic, channel, self.now(), msg_timeout=conn.msg_timeout, sample_rate=conn.sample_rate
        )
        self._subscribers[consumer] = conn
        return consumer

    def unsubscribe(self, consumer: Consumer) -> None:
        """The consumer's connection is closing (idempotent)."""
        if self._subscribers.pop(consumer, None) is not None:
            self.state.unsubscribe(consumer)
            self.pump()

    def add_connection(self, conn: _NsqdConnection) -> None:
        """A client connected (closed by :meth:`close`, listed as a producer in stats)."""
        self._connections.add(conn)

    def remove_connection(self, conn: _NsqdConnection) -> None:
        """A client's connection is gone."""
        self._connections.discard(conn)

    def start_task(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` as a task of the emulator's owner (a TLS upgrade)."""
        assert self._tasks is not None
        self._tasks.start(coro, name=name)

    def authorized(self, topic: str) -> bool:
        """Whether an authenticated client may use ``topic`` (``auth_topics``)."""
        patterns = self.options.auth_topics
        if patterns is None:
            return True
        if patterns is not self._auth_source:
            self._auth_source = patterns
            self._auth_patterns = [re.compile(p) for p in patterns]
        # nsqd matches an authorization's topic unanchored (Go's MatchString)
        return any(p.search(topic) for p in self._auth_patterns)

    def injected_failure(self, command: str) -> None:
        """Raise the failure :meth:`fail_next` asked for, if one is left for ``command``."""
        left = self._failures.get(command, 0)
        if left:
            self._failures[command] = left - 1
            raise ClientError(f"E_{command}_FAILED", f"{command} failed exiting")

    # -- operations (TCP and HTTP clients, the emulator's test helpers) -------------------

    def publish(self, topic: str, bodies: Iterable[bytes], *, defer: float = 0.0) -> None:
        """Put messages on ``topic`` (names and bodies already checked)."""
        self.state.publish(topic, bodies, self.now(), time.time_ns(), defer)
        self.pump()

    def create_topic(self, topic: str, channels: Iterable[str] = ()) -> None:
        """Create a topic and channels of it, where missing."""
        self.state.topic(topic)
        now = self.now()
        for channel in channels:
            self.state.channel(topic, channel, now)
        self.pump()

    def delete_topic(self, topic: str) -> None:
        """Delete a topic; its channels' clients are disconnected.

        Raises:
            LookupError: no such topic.
        """
        self._disconnect(self.state.delete_topic(topic))
        self.pump()

    def delete_channel(self, topic: str, channel: str) -> None:
        """Delete a channel; its clients are disconnected.

        Raises:
            LookupError: no such topic or channel.
        """
        self._disconnect(self.state.delete_channel(topic, channel))
        self.pump()

    def _disconnect(self, consumers: list[Consumer]) -> None:
        for consumer in consumers:
            conn = self._subscribers.pop(consumer, None)
            if conn is not None:
                conn.abort()

    def empty_topic(self, topic: str) -> None:
        """Drop what the topic keeps for its channels.

        Raises:
            LookupError: no such topic.
        """
        self.state.empty_topic(topic)
        self.pump()

    def empty_channel(self, topic: str, channel: str) -> None:
        """Drop the channel's queued, in-flight and deferred messages.

        Raises:
            LookupError: no such topic or channel.
        """
        self.state.find_channel(topic, channel).empty()
        self.pump()

    def pause_topic(self, topic: str, paused: bool) -> None:
        """Pause or unpause a topic.

        Raises:
            LookupError: no such topic.
        """
        self.state.pause_topic(topic, paused, self.now())
        self.pump()

    def pause_channel(self, topic: str, channel: str, paused: bool) -> None:
        """Pause or unpause a channel.

        Raises:
            LookupError: no such topic or channel.
        """
        ch = self.state.find_channel(topic, channel)
        if paused:
            ch.pause()
        else:
            ch.unpause()
        self.pump()

    def fail_next(self, command: str, times: int) -> None:
        """Make the next ``times`` ``command`` (PUB, MPUB, DPUB) fail as on an exiting topic."""
        self._failures[command] = self._failures.get(command, 0) + times

    def stats(
        self, topic: str | None = None, channel: str | None = None, include_clients: bool = True
    ) -> dict[str, Any]:
        """The document ``/stats?format=json`` answers with (without ``memory``)."""
        topics = []
        for t in sorted(self.state.topics.values(), key=lambda t: t.name):
            if topic and t.name != topic:
                continue
            chans = []
            for c in sorted(t.channels.values(), key=lambda c: c.name):
                if channel and c.name != channel:
                    continue
                clients = None
                if include_clients:
                    clients = [
                        conn.stats()
                        for conn in (self._subscribers.get(x) for x in c.consumers)
                        if conn is not None
                    ]
                chans.append(
                    {
                        "channel_name": c.name,
                        "depth": c.depth,
                        "backend_depth": 0,
                        "in_flight_count": c.in_flight_count,
                        "deferred_count": c.deferred_count,
                        "message_count": c.message_count,
                        "requeue_count": c.requeue_count,
                        "timeout_count": c.timeout_count,
                        "client_count": len(c.consumers),
                        "clients": clients,
                        "paused": c.paused,
                        "e2e_processing_latency": {"count": 0, "percentiles": None},
                    }
                )
            if channel and not chans:
                continue
            topics.append(
                {
                    "topic_name": t.name,
                    "channels": chans,
                    "depth": t.depth,
                    "backend_depth": 0,
                    "message_count": t.message_count,
                    "message_bytes": t.message_bytes,
                    "paused": t.paused,
                    "e2e_processing_latency": {"count": 0, "percentiles": None},
                }
            )
        # nsqd answers a topic it does not have with its empty Stats: both lists nil,
        # JSON null (nsqd/stats.go:119-124)
        missing = bool(topic) and topic not in self.state.topics
        producers = None
        if include_clients and not missing:
            producers = [c.stats(topic) for c in self._connections if c.pub_counts] or None
        return {
            "version": NSQ_VERSION,
            "health": "OK",
            "start_time": self.start_time,
            "topics": None if missing else topics,
            "producers": producers,
        }


class _NsqdConnection(asyncio.Protocol):
    """One client connection: nsqd's IOLoop and messagePump in one object."""

    def __init__(self, server: NsqdServer) -> None:
        self.server = server
        self.options = options = server.options
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._magic = False
        self._closed = False
        self._upgrading = False
        self.state = STATE_INIT
        self.remote_address = ""
        self.client_id = ""
        self.hostname = ""
        self.user_agent = ""
        self.heartbeat_interval = options.heartbeat_interval
        self.msg_timeout = options.msg_timeout
        self.output_buffer_size = 16 * 1024
        self.output_buffer_timeout = options.output_buffer_timeout
        self.sample_rate = 0
        self.tls = False
        self.tls_version = ""
        self.tls_cipher = ""
        self._deflater: Any = None
        self._inflater: Any = None
        self._snappy: _SnappyStream | None = None
        self.deflate = False
        self.snappy = False
        self.authed = False
        self.connect_ts = int(time.time())
        self.consumer: Consumer | None = None
        self.pub_counts: dict[str, int] = {}
        # while a receive buffer is parsed, answers collect here and go out in one write
        self._out: list[bytes] | None = None
        self._last_read = self.loop.time()
        self._heartbeat_timer: asyncio.TimerHandle | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # cast, not isinstance: uvloop's transports are not asyncio.Transport subclasses
        self.transport = transport = cast("asyncio.Transport", transport)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.remote_address = f"{peer[0]}:{peer[1]}"
            self.client_id = self.hostname = str(peer[0])
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.add_connection(self)
        # nsqd waits one client timeout (two default heartbeat intervals) for the magic
        self._arm_read_deadline()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._last_read = self.loop.time()
        if self._inflater is not None:
            try:
                data = self._inflater.decompress(data)
            except zlib.error:
                self.abort()
                return
        elif self._snappy is not None:
            try:
                data = self._snappy.decompress(data)
            except Exception:  # cramjam raises its own DecompressionError
                self.abort()
                return
        self._buf += data
        if not self._upgrading:
            self._process()

    def eof_received(self) -> bool | None:
        self._close()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        for timer in (self._heartbeat_timer, self._deadline_timer):
            if timer is not None:
                timer.cancel()
        self.server.remove_connection(self)
        self._unsubscribe()

    # -- output -------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._closed or self.transport is None:
            return
        if self._deflater is not None:
            data = self._deflater.compress(data) + self._deflater.flush(zlib.Z_SYNC_FLUSH)
        elif self._snappy is not None:
            data = self._snappy.compress(data)
        if self._out is not None:
            self._out.append(data)
        else:
            self.transport.write(data)

    def deliver(self, msgs: list[Message]) -> None:
        """Write message frames, one write for all."""
        pack = _MSG_HEADER.pack
        self.write(
            b"".join(
                [
                    pack(30 + len(m.body), FRAME_MESSAGE, m.timestamp, m.attempts & 0xFFFF)
                    + m.id
                    + m.body
                    for m in msgs
                ]
            )
        )

    def _flush(self) -> None:
        out, self._out = self._out, None
        if out and self.transport is not None and not self._closed:
            self.transport.write(b"".join(out))

    def _unsubscribe(self) -> None:
        # nsqd's RemoveClient when the IOLoop ends; in-flight messages stay until they time out
        if self.consumer is not None:
            self.server.unsubscribe(self.consumer)

    def _close(self) -> None:
        if not self._closed:
            self._flush()
            self._closed = True
            if self.transport is not None:
                self.transport.close()
            self._unsubscribe()

    def abort(self) -> None:
        """Drop the connection at once (stop, topic or channel deleted, bad bytes)."""
        self._closed = True
        self._out = None
        if self.transport is not None:
            self.transport.abort()
        self._unsubscribe()

    # -- timers -------------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()
            self._heartbeat_timer = None
        if self.heartbeat_interval > 0:
            self._heartbeat_timer = self.loop.call_later(self.heartbeat_interval, self._heartbeat)

    def _heartbeat(self) -> None:
        self._heartbeat_timer = None
        if self._closed:
            return
        self.write(_HEARTBEAT)
        self._start_heartbeats()

    def _read_timeout(self) -> float:
        if not self._magic:
            return 2 * self.options.heartbeat_interval
        return 2 * self.heartbeat_interval

    def _arm_read_deadline(self) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        timeout = self._read_timeout()
        if timeout > 0 and not self._closed:
            self._deadline_timer = self.loop.call_at(
                self._last_read + timeout, self._check_read_deadline
            )

    def _check_read_deadline(self) -> None:
        self._deadline_timer = None
        timeout = self._read_timeout()
        if self._closed or timeout <= 0:
            return
        if self.loop.time() >= self._last_read + timeout:
            log.debug("nsqd emulator: client %s silent for %.3fs, closing", self, timeout)
            self._close()  # nsqd: "failed to read command - i/o timeout", conn.Close()
        else:
            self._arm_read_deadline()

    # -- command parsing ----------------------------------------------------------------

    def _process(self) -> None:
        buf = self._buf
        pos = 0
        self._out = []
        try:
            while not self._closed and not self._upgrading:
                if not self._magic:
                    if len(buf) < 4:
                        break
                    magic = bytes(buf[:4])
                    pos = 4
                    if magic != _MAGIC:
                        self.write(frame(FRAME_ERROR, b"E_BAD_PROTOCOL"))
                        self._close()
                        break
                    self._magic = True
                    self._start_heartbeats()
                    self._arm_read_deadline()
                    continue
                nl = buf.find(b"\n", pos)
                if nl < 0:
                    if len(buf) - pos > _MAX_LINE:
                        self._close()  # nsqd: bufio buffer full, connection closed
                    break
                line = bytes(buf[pos:nl])
                if line.endswith(b"\r"):
                    line = line[:-1]
                consumer = self.consumer
                if len(line) == 20 and line[:4] == b"FIN " and consumer is not None:
                    # FIN of a message this client holds, without the general path's
                    # checks; anything else goes the general way, which reports it
                    if not self.options.tls_required or self.tls:
                        try:
                            consumer.channel.finish(consumer, line[4:])
                        except LookupError:
                            pass
                        else:
                            pos = nl + 1
                            continue
                params = line.split(b" ")
                try:
                    end = self._exec(params, nl + 1)
                except ClientError as err:
                    self.write(frame(FRAME_ERROR, str(err).encode()))
                    if err.fatal:
                        log.debug("nsqd emulator: fatal %s for %s", err, self)
                        self._close()
                        break
                    end = nl + 1
                if end is None:
                    break  # the command's body has not fully arrived
                pos = end
        finally:
            if pos:
                del buf[:pos]
            self._flush()
            self.server.pump()

    def _exec(self, params: list[bytes], start: int) -> int | None:
        cmd = params[0]
        if cmd == b"IDENTIFY":
            return self._identify(params, start)
        if self.options.tls_required and not self.tls:
            name = cmd.decode(errors="replace")
            raise ClientError("E_INVALID", f"cannot {name} in current state (TLS required)")
        handler = _COMMANDS.get(cmd)
        if handler is None:
            raise ClientError("E_INVALID", f"invalid command {cmd.decode(errors='replace')}")
        return handler(self, params, start)

    def _size(self, start: int) -> int | None:
        if len(self._buf) < start + 4:
            return None
        return int(_SIZE.unpack_from(self._buf, start)[0])

    # -- commands -----------------------------------------------------------------------

    def _identify(self, params: list[bytes], start: int) -> int | None:
        options = self.options
        if self.state != STATE_INIT:
            raise ClientError("E_INVALID", "cannot IDENTIFY in current state")
        size = self._size(start)
        if size is None:
            return None
        if size > options.max_body_size:
            raise ClientError(
                "E_BAD_BODY", f"IDENTIFY body too big {size} > {options.max_body_size}"
            )
        if size <= 0:
            raise ClientError("E_BAD_BODY", f"IDENTIFY invalid body size {size}")
        end = start + 4 + size
        if len(self._buf) < end:
            return None
        try:
            data = json.loads(bytes(self._buf[start + 4 : end]))
            settings = _IdentifyData({} if data is None else data)
        except (ValueError, TypeError):
            raise ClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None
        error = self._apply_identify(settings)
        if error:
            raise ClientError("E_BAD_BODY", f"IDENTIFY {error}")
        self._start_heartbeats()
        self._arm_read_deadline()
        if not settings.feature_negotiation:
            self.write(_OK)
            return end
        tls = options.tls is not None and settings.tls_v1
        deflate = options.deflate_enabled and settings.deflate
        level = settings.deflate_level if deflate and settings.deflate_level > 0 else 6
        level = min(level, options.max_deflate_level)
        snappy = options.snappy_enabled and settings.snappy
        if deflate and snappy:
            raise ClientError(
                "E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression"
            )
        answer = {
            "max_rdy_count": options.max_rdy_count,
            "version": NSQ_VERSION,
            "max_msg_timeout": round(options.max_msg_timeout * 1000),
            "msg_timeout": round(self.msg_timeout * 1000),
            "tls_v1": tls,
            "deflate": deflate,
            "deflate_level": level,
            "max_deflate_level": options.max_deflate_level,
            "snappy": snappy,
            "sample_rate": self.sample_rate,
            "auth_required": options.auth_secret is not None,
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": round(self.output_buffer_timeout * 1000),
        }
        self.write(frame(FRAME_RESPONSE, json.dumps(answer, separators=(",", ":")).encode()))
        if tls:
            # the handshake needs the event loop; parsing waits for it. Bytes the
            # client sent before our answer are lost, as they are with nsqd.
            self._upgrading = True
            del self._buf[end:]
            self.server.start_task(
                self._upgrade_tls(deflate_level=level if deflate else 0, snappy=snappy),
                name=f"TLS with {self.remote_address}",
            )
        elif snappy:
            self._start_snappy(end)
        elif deflate:
            self._start_deflate(level, end)
        return end

    def _start_snappy(self, end: int) -> None:
        self._snappy = _SnappyStream()
        self.snappy = True
        self.write(_OK)
        if len(self._buf) > end:  # compressed bytes that came right behind the IDENTIFY
            rest = bytes(self._buf[end:])
            del self._buf[end:]
            try:
                self._buf += self._snappy.decompress(rest)
            except Exception:
                self.abort()

    def _start_deflate(self, level: int, end: int) -> None:
        self._deflater = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._inflater = zlib.decompressobj(-15)
        self.deflate = True
        self.write(_OK)
        if len(self._buf) > end:  # compressed bytes that came right behind the IDENTIFY
            rest = bytes(self._buf[end:])
            del self._buf[end:]
            try:
                self._buf += self._inflater.decompress(rest)
            except zlib.error:
                self.abort()

    def _apply_identify(self, d: _IdentifyData) -> str | None:
        options = self.options
        self.client_id = d.client_id
        self.hostname = d.hostname
        self.user_agent = d.user_agent
        hb = d.heartbeat_interval
        if hb == -1:
            self.heartbeat_interval = 0.0
        elif hb == 0:
            pass
        elif options.min_heartbeat_interval * 1000 <= hb <= options.max_heartbeat_interval * 1000:
            self.heartbeat_interval = hb / 1000
        else:
            return f"heartbeat interval ({hb}) is invalid"
        obt = d.output_buffer_timeout
        if obt == -1:
            self.output_buffer_timeout = 0.0
        elif obt == 0:
            pass
        elif 25 <= obt <= 30_000:
            self.output_buffer_timeout = obt / 1000
        else:
            return f"output buffer timeout ({obt}) is invalid"
        obs = d.output_buffer_size
        if obs == -1:
            self.output_buffer_size = 1
            self.output_buffer_timeout = 0.0
        elif obs == 0:
            pass
        elif 64 <= obs <= 64 * 1024:
            self.output_buffer_size = obs
        else:
            return f"output buffer size ({obs}) is invalid"
        if not 0 <= d.sample_rate <= 99:
            return f"sample rate ({d.sample_rate}) is invalid"
        self.sample_rate = d.sample_rate
        mt = d.msg_timeout
        if mt == 0:
            pass
        elif options.min_msg_timeout * 1000 <= mt <= options.max_msg_timeout * 1000:
            self.msg_timeout = mt / 1000
        else:
            return f"msg timeout ({mt}) is invalid"
        return None

    async def _upgrade_tls(self, *, deflate_level: int, snappy: bool) -> None:
        assert self.transport is not None
        context = self.options.tls
        assert context is not None
        try:
            new = await self.loop.start_tls(
                self.transport, self, context, server_side=True, ssl_handshake_timeout=5
            )
        except (OSError, asyncio.TimeoutError) as exc:
            log.debug("nsqd emulator: TLS handshake failed for %s: %s", self, exc)
            self.abort()
            return
        if new is None or self._closed:
            self.abort()
            return
        self.transport = new
        self.tls = True
        obj = new.get_extra_info("ssl_object")
        if obj is not None:
            self.tls_version = obj.version() or ""
            cipher = obj.cipher()
            self.tls_cipher = cipher[0] if cipher else ""
        self.write(_OK)
        if snappy:
            self._start_snappy(0)
        elif deflate_level:
            self._start_deflate(deflate_level, 0)
        self._upgrading = False
        self._process()

    def _check_auth(self, cmd: str, topic: str, channel: str) -> None:
        if self.options.auth_secret is None:
            return
        if not self.authed:
            raise ClientError("E_AUTH_FIRST", f"AUTH required before {cmd}")
        if not self.server.authorized(topic):
            raise ClientError(
                "E_UNAUTHORIZED", f"AUTH failed for {cmd} on {_goquote(topic)} {_goquote(channel)}"
            )

    def _auth(self, params: list[bytes], start: int) -> int | None:
        options = self.options
        if self.state != STATE_INIT:
            raise ClientError("E_INVALID", "cannot AUTH in current state")
        if len(params) != 1:
            raise ClientError("E_INVALID", "AUTH invalid number of parameters")
        size = self._size(start)
        if size is None:
            return None
        if size > options.max_body_size:
            raise ClientError("E_BAD_BODY", f"AUTH body too big {size} > {options.max_body_size}")
        if size <= 0:
            raise ClientError("E_BAD_BODY", f"AUTH invalid body size {size}")
        end = start + 4 + size
        if len(self._buf) < end:
            return None
        secret = bytes(self._buf[start + 4 : end])
        if self.authed:
            raise ClientError("E_INVALID", "AUTH already set")
        if options.auth_secret is None:
            raise ClientError("E_AUTH_DISABLED", "AUTH disabled")
        if secret != options.auth_secret.encode():
            raise ClientError("E_AUTH_FAILED", "AUTH failed")
        if options.auth_topics is not None and not options.auth_topics:
            # what nsqd says when the auth server grants no authorization
            raise ClientError("E_UNAUTHORIZED", "AUTH no authorizations found")
        self.authed = True
        answer = {
            "identity": options.auth_identity,
            "identity_url": "",
            "permission_count": len(options.auth_topics) if options.auth_topics else 1,
        }
        self.write(frame(FRAME_RESPONSE, json.dumps(answer, separators=(",", ":")).encode()))
        return end

    def _sub(self, params: list[bytes], start: int) -> int | None:
        if self.state != STATE_INIT:
            raise ClientError("E_INVALID", "cannot SUB in current state")
        if self.heartbeat_interval <= 0:
            raise ClientError("E_INVALID", "cannot SUB with heartbeats disabled")
        if len(params) < 3:
            raise ClientError("E_INVALID", "SUB insufficient number of parameters")
        topic_name = params[1].decode(errors="replace")
        if not is_valid_name(topic_name):
            raise ClientError("E_BAD_TOPIC", f"SUB topic name {_goquote(topic_name)} is not valid")
        channel_name = params[2].decode(errors="replace")
        if not is_valid_name(channel_name):
            raise ClientError(
                "E_BAD_CHANNEL", f"SUB channel name {_goquote(channel_name)} is not valid"
            )
        self._check_auth("SUB", topic_name, channel_name)
        self.consumer = self.server.subscribe(self, topic_name, channel_name)
        self.state = STATE_SUBSCRIBED
        self.write(_OK)
        return start

    def _rdy(self, params: list[bytes], start: int) -> int | None:
        if self.state == STATE_CLOSING:
            return start  # nsqd ignores RDY after CLS
        if self.state != STATE_SUBSCRIBED:
            raise ClientError("E_INVALID", "cannot RDY in current state")
        count = 1
        if len(params) > 1:
            parsed = _base10(params[1])
            if parsed is None:
                raise ClientError(
                    "E_INVALID", f"RDY could not parse count {params[1].decode(errors='replace')}"
                )
            count = parsed
        max_rdy = self.options.max_rdy_count
        if count > max_rdy:
            raise ClientError("E_INVALID", f"RDY count {count} out of range 0-{max_rdy}")
        consumer = self.consumer
        assert consumer is not None
        consumer.channel.ready(consumer, count)
        return start

    def _message_id(self, params: list[bytes], cmd: str, needed: int) -> tuple[Consumer, bytes]:
        if self.state not in (STATE_SUBSCRIBED, STATE_CLOSING):
            raise ClientError("E_INVALID", f"cannot {cmd} in current state")
        if len(params) < needed:
            raise ClientError("E_INVALID", f"{cmd} insufficient number of params")
        if len(params[1]) != 16:
            raise ClientError("E_INVALID", "invalid message ID")
        assert self.consumer is not None
        return self.consumer, params[1]

    def _fin(self, params: list[bytes], start: int) -> int | None:
        consumer, msg_id = self._message_id(params, "FIN", 2)
        try:
            consumer.channel.finish(consumer, msg_id)
        except LookupError as exc:
            raise ClientError(
                "E_FIN_FAILED", f"FIN {msg_id.decode(errors='replace')} failed {exc}", fatal=False
            ) from None
        return start

    def _req(self, params: list[bytes], start: int) -> int | None:
        consumer, msg_id = self._message_id(params, "REQ", 3)
        timeout_ms = _base10(params[2])
        if timeout_ms is None:
            raise ClientError(
                "E_INVALID", f"REQ could not parse timeout {params[2].decode(errors='replace')}"
            )
        delay = min(timeout_ms / 1000, self.options.max_req_timeout)  # nsqd clamps, logs
        try:
            consumer.channel.requeue(consumer, msg_id, delay, self.loop.time())
        except LookupError as exc:
            raise ClientError(
                "E_REQ_FAILED", f"REQ {msg_id.decode(errors='replace')} failed {exc}", fatal=False
            ) from None
        return start

    def _touch(self, params: list[bytes], start: int) -> int | None:
        consumer, msg_id = self._message_id(params, "TOUCH", 2)
        try:
            consumer.channel.touch(consumer, msg_id, self.loop.time(), self.options.max_msg_timeout)
        except LookupError as exc:
            raise ClientError(
                "E_TOUCH_FAILED",
                f"TOUCH {msg_id.decode(errors='replace')} failed {exc}",
                fatal=False,
            ) from None
        return start

    def _cls(self, params: list[bytes], start: int) -> int | None:
        if self.state != STATE_SUBSCRIBED:
            raise ClientError("E_INVALID", "cannot CLS in current state")
        assert self.consumer is not None
        self.consumer.channel.close_wait(self.consumer)
        self.state = STATE_CLOSING
        self.write(frame(FRAME_RESPONSE, b"CLOSE_WAIT"))
        return start

    def _nop(self, params: list[bytes], start: int) -> int | None:
        return start

    def _topic_param(self, params: list[bytes], cmd: str, needed: int, prefix: str = "") -> str:
        if len(params) < needed:
            raise ClientError("E_INVALID", f"{cmd} insufficient number of parameters")
        name = params[1].decode(errors="replace")
        if not is_valid_name(name):
            raise ClientError(
                "E_BAD_TOPIC", f"{prefix}{cmd} topic name {_goquote(name)} is not valid"
            )
        return name

    def _read_message(self, cmd: str, start: int) -> tuple[bytes, int] | None:
        size = self._size(start)
        if size is None:
            return None
        max_size = self.options.max_msg_size
        if size <= 0:
            raise ClientError("E_BAD_MESSAGE", f"{cmd} invalid message body size {size}")
        if size > max_size:
            raise ClientError("E_BAD_MESSAGE", f"{cmd} message too big {size} > {max_size}")
        end = start + 4 + size
        if len(self._buf) < end:
            return None
        return bytes(self._buf[start + 4 : end]), end

    def _pub(self, params: list[bytes], start: int) -> int | None:
        topic = self._topic_param(params, "PUB", 2)
        got = self._read_message("PUB", start)
        if got is None:
            return None
        body, end = got
        self._check_auth("PUB", topic, "")
        self.server.injected_failure("PUB")
        self.server.publish(topic, [body])
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + 1
        self.write(_OK)
        return end

    def _dpub(self, params: list[bytes], start: int) -> int | None:
        topic = self._topic_param(params, "DPUB", 3)
        timeout_ms = _base10(params[2])
        if timeout_ms is None:
            raise ClientError(
                "E_INVALID", f"DPUB could not parse timeout {params[2].decode(errors='replace')}"
            )
        max_ms = round(self.options.max_req_timeout * 1000)
        if timeout_ms > max_ms:
            raise ClientError("E_INVALID", f"DPUB timeout {timeout_ms} out of range 0-{max_ms}")
        got = self._read_message("DPUB", start)
        if got is None:
            return None
        body, end = got
        self._check_auth("DPUB", topic, "")
        self.server.injected_failure("DPUB")
        self.server.publish(topic, [body], defer=timeout_ms / 1000)
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + 1
        self.write(_OK)
        return end

    def _mpub(self, params: list[bytes], start: int) -> int | None:
        options = self.options
        topic = self._topic_param(params, "MPUB", 2, prefix="E_BAD_TOPIC ")
        self._check_auth("MPUB", topic, "")
        self.server.create_topic(topic)
        size = self._size(start)
        if size is None:
            return None
        if size <= 0:
            raise ClientError("E_BAD_BODY", f"MPUB invalid body size {size}")
        if size > options.max_body_size:
            raise ClientError("E_BAD_BODY", f"MPUB body too big {size} > {options.max_body_size}")
        got = read_mpub(self._buf, start + 4, options.max_msg_size, options.max_body_size)
        if got is None:
            return None
        bodies, end = got
        self.server.injected_failure("MPUB")
        self.server.publish(topic, bodies)
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + len(bodies)
        self.write(_OK)
        return end

    def __repr__(self) -> str:
        return f"<nsqd client {self.remote_address}>"

    def stats(self, topic: str | None = None) -> dict[str, Any]:
        """This client in ``/stats``; ``pub_counts`` only for ``topic`` when given."""
        consumer = self.consumer
        out: dict[str, Any] = {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "version": "V2",
            "remote_address": self.remote_address,
            "state": self.state,
            "ready_count": consumer.rdy if consumer else 0,
            "in_flight_count": consumer.in_flight if consumer else 0,
            "message_count": consumer.message_count if consumer else 0,
            "finish_count": consumer.finish_count if consumer else 0,
            "requeue_count": consumer.requeue_count if consumer else 0,
            "connect_ts": self.connect_ts,
            "sample_rate": self.sample_rate,
            "deflate": self.deflate,
            "snappy": self.snappy,
            "user_agent": self.user_agent,
        }
        if self.authed:
            out["authed"] = True
            out["auth_identity"] = self.options.auth_identity
        # nsqd v1.3.0 lists one topic at most: clientV2.Stats breaks out of its loop
        # after the first (nsqd/client_v2.go:297-306); Go's map order, here the first
        # topic published. Left out when empty (omitempty).
        counts = [
            {"topic": t, "count": n} for t, n in self.pub_counts.items() if not topic or t == topic
        ][:1]
        if counts:
            out["pub_counts"] = counts
        out.update(
            {
                "tls": self.tls,
                "tls_cipher_suite": self.tls_cipher,
                "tls_version": self.tls_version,
                "tls_negotiated_protocol": "",
                "tls_negotiated_protocol_is_mutual": False,
            }
        )
        return out


_Handler = Callable[[_NsqdConnection, list[bytes], int], "int | None"]

_COMMANDS: dict[bytes, _Handler] = {
    b"FIN": _NsqdConnection._fin,
    b"RDY": _NsqdConnection._rdy,
    b"REQ": _NsqdConnection._req,
    b"PUB": _NsqdConnection._pub,
    b"MPUB": _NsqdConnection._mpub,
    b"DPUB": _NsqdConnection._dpub,
    b"NOP": _NsqdConnection._nop,
    b"TOUCH": _NsqdConnection._touch,
    b"SUB": _NsqdConnection._sub,
    b"CLS": _NsqdConnection._cls,
    b"AUTH": _NsqdConnection._auth,
}


class _IdentifyData:
    """The IDENTIFY fields nsqd reads; wrong JSON types fail as Go's decoder does."""

    _INTS = (
        "heartbeat_interval",
        "output_buffer_size",
        "output_buffer_timeout",
        "deflate_level",
        "sample_rate",
        "msg_timeout",
    )
    _BOOLS = ("feature_negotiation", "tls_v1", "deflate", "snappy")
    _STRS = ("client_id", "hostname", "user_agent")

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.heartbeat_interval = self.output_buffer_size = self.output_buffer_timeout = 0
        self.deflate_level = self.sample_rate = self.msg_timeout = 0
        self.feature_negotiation = self.tls_v1 = self.deflate = self.snappy = False
        self.client_id = self.hostname = self.user_agent = ""
        for key in self._INTS:
            value = data.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(key)
            if isinstance(value, float) and not value.is_integer():
                raise TypeError(key)
            setattr(self, key, int(value))
        for key in self._BOOLS:
            value = data.get(key)
            if value is None:
                continue
            if not isinstance(value, bool):
                raise TypeError(key)
            setattr(self, key, value)
        for key in self._STRS:
            value = data.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                raise TypeError(key)
            setattr(self, key, value)
