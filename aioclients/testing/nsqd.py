"""An in-process nsqd that speaks the real TCP and HTTP protocols, for tests.

Theory of operation. One asyncio server accepts TCP clients; each connection is
an :class:`asyncio.Protocol` that parses commands out of its receive buffer
exactly as nsqd v1.3's ``protocol_v2.go`` does (same order of checks, same
error codes and texts, same choice of fatal vs. non-fatal errors) and answers
with the same frames. Topics hold messages until their first channel exists;
every channel then gets its own copy of each message. A channel hands ready
messages to its subscribed clients round-robin, never more to a client than
its RDY count minus what it has in flight, and writes each client's share of
one dispatch as a single batch (dispatch runs once per event-loop turn, so a
burst of FINs becomes one write of new messages). In-flight deadlines
(msg_timeout, TOUCH) and deferrals (REQ with a delay, DPUB) live in two heaps
per channel served by one re-armed timer per channel; no task per message.

Behaviour mirrored from nsqd (protocol_v2.go, client_v2.go, channel.go):

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
  the client to finish its in-flight messages and close;
* messages of a client that disconnects stay in flight until they time out;
* a message timed out or re-queued is delivered again with ``attempts + 1``.

Test-only knobs (``min_heartbeat_interval``, ``min_msg_timeout``) let tests
use intervals shorter than nsqd's one-second minimum; the defaults are nsqd's.

Not copied from nsqd v1.3.0 (checked against it; the client does not depend on
them): its REQ / DPUB / msg_timeout timers fire up to ~5 s late on a channel its
queue scan has not picked up yet (the list is refreshed every 5 s, then scanned
every 100 ms), here they fire on time; a silent client gets two heartbeats before
nsqd closes it, here one; ``/topic/pause`` and ``/channel/pause`` do not exist
here; text ``/stats`` has no start_time/uptime/memory lines, and ``/info``'s
hostname is the listening host rather than the OS hostname.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import json
import logging
import random
import re
import socket
import ssl
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

from aioclients._tasks import TaskOwner
from aioclients.testing._nsq_http import start_http
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

__all__ = ("NsqdEmulator",)

log = logging.getLogger("aioclients.testing.nsqd")

_MAGIC = b"  V2"
_LOOKUPD_MAGIC = b"  V1"
_MSG_HEADER = struct.Struct(">IIqH")
_SIZE = struct.Struct(">i")
_MAX_LINE = 16 * 1024  # nsqd reads command lines through a 16 KiB bufio.Reader
_HEARTBEAT = frame(FRAME_RESPONSE, b"_heartbeat_")
_OK = frame(FRAME_RESPONSE, b"OK")

# client states, numbered as nsqd numbers them (they appear in /stats)
_STATE_INIT = 0
_STATE_SUBSCRIBED = 3
_STATE_CLOSING = 4


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


def _snappy_available() -> bool:
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


class _Message:
    __slots__ = ("attempts", "body", "client", "deadline", "deferred", "delivered_at", "id", "ts")

    def __init__(self, msg_id: bytes, body: bytes, ts: int, deferred: float = 0.0) -> None:
        self.id = msg_id
        self.body = body
        self.ts = ts
        self.attempts = 0
        self.deferred = deferred
        self.client: _NsqdConnection | None = None
        self.deadline = 0.0
        self.delivered_at = 0.0

    def copy(self) -> _Message:
        return _Message(self.id, self.body, self.ts, self.deferred)


class _Topic:
    def __init__(self, nsqd: NsqdEmulator, name: str) -> None:
        self.nsqd = nsqd
        self.name = name
        self.ephemeral = name.endswith("#ephemeral")
        self.channels: dict[str, _Channel] = {}
        # messages published while the topic had no channel (nsqd keeps them)
        self.backlog: collections.deque[_Message] = collections.deque()
        self.message_count = 0
        self.message_bytes = 0

    def put(self, messages: list[_Message]) -> None:
        self.message_count += len(messages)
        self.message_bytes += sum(len(m.body) for m in messages)
        if not self.channels:
            self.backlog.extend(messages)
            return
        self._fan_out(messages)

    def _fan_out(self, messages: Iterable[_Message]) -> None:
        first = True
        for channel in self.channels.values():
            channel.put([m if first else m.copy() for m in messages])
            first = False

    def get_channel(self, name: str) -> _Channel:
        channel = self.channels.get(name)
        if channel is None:
            channel = self.channels[name] = _Channel(self, name)
            self.nsqd._registered(self.name, name)
            if len(self.channels) == 1 and self.backlog:
                backlog, self.backlog = list(self.backlog), collections.deque()
                self._fan_out(backlog)
        return channel


class _Channel:
    def __init__(self, topic: _Topic, name: str) -> None:
        self.topic = topic
        self.name = name
        self.ephemeral = name.endswith("#ephemeral")
        self.loop = topic.nsqd._loop
        self.queue: collections.deque[_Message] = collections.deque()
        self.in_flight: dict[bytes, _Message] = {}
        self.clients: list[_NsqdConnection] = []
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        # In-flight deadlines: one FIFO per msg_timeout value (deadlines only grow
        # in each, so appending keeps them sorted) plus a heap for TOUCHed ones.
        self._timeout_fifos: dict[float, collections.deque[tuple[float, _Message]]] = {}
        self._touched: list[tuple[float, int, _Message]] = []
        self._deferred: list[tuple[float, int, _Message]] = []
        self._seq = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._dispatch_pending = False
        self._rr = 0

    # -- queueing -----------------------------------------------------------------------

    def put(self, messages: list[_Message]) -> None:
        self.message_count += len(messages)
        now = self.loop.time()
        for m in messages:
            if m.deferred > 0:
                self._defer(m, now + m.deferred)
            else:
                self.queue.append(m)
        self.schedule_dispatch()

    def _defer(self, msg: _Message, due: float) -> None:
        self._seq += 1
        heapq.heappush(self._deferred, (due, self._seq, msg))
        self._arm()

    @property
    def deferred_count(self) -> int:
        return len(self._deferred)

    # -- client commands -----------------------------------------------------------------

    def _pop_in_flight(self, client: _NsqdConnection, msg_id: bytes) -> _Message:
        msg = self.in_flight.get(msg_id)
        if msg is None:
            raise LookupError("ID not in flight")
        if msg.client is not client:
            raise LookupError("client does not own message")
        del self.in_flight[msg_id]
        msg.client = None
        return msg

    def finish(self, client: _NsqdConnection, msg_id: bytes) -> None:
        self._pop_in_flight(client, msg_id)
        self.schedule_dispatch()

    def requeue(self, client: _NsqdConnection, msg_id: bytes, delay: float) -> None:
        msg = self._pop_in_flight(client, msg_id)
        self.requeue_count += 1
        if delay <= 0:
            self.queue.append(msg)
        else:
            self._defer(msg, self.loop.time() + delay)
        self.schedule_dispatch()

    def touch(self, client: _NsqdConnection, msg_id: bytes, msg_timeout: float) -> None:
        msg = self.in_flight.get(msg_id)
        if msg is None:
            raise LookupError("ID not in flight")
        if msg.client is not client:
            raise LookupError("client does not own message")
        deadline = self.loop.time() + msg_timeout
        cap = msg.delivered_at + self.topic.nsqd.max_msg_timeout
        msg.deadline = min(deadline, cap)
        self._track_timeout(msg)

    def _track_timeout(self, msg: _Message) -> None:
        self._seq += 1
        heapq.heappush(self._touched, (msg.deadline, self._seq, msg))
        self._arm()

    # -- clients ------------------------------------------------------------------------

    def add_client(self, client: _NsqdConnection) -> None:
        self.clients.append(client)
        self.schedule_dispatch()

    def remove_client(self, client: _NsqdConnection) -> None:
        if client in self.clients:
            self.clients.remove(client)
        if not self.clients and self.ephemeral:
            self.topic.nsqd._delete_channel(self)

    # -- timers -------------------------------------------------------------------------

    def _arm(self) -> None:
        due = min(
            self._touched[0][0] if self._touched else float("inf"),
            self._deferred[0][0] if self._deferred else float("inf"),
            *(q[0][0] for q in self._timeout_fifos.values() if q),
        )
        if due == float("inf"):
            return
        if self._timer is not None:
            if self._timer_at <= due:
                return
            self._timer.cancel()
        self._timer_at = due
        self._timer = self.loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = self.loop.time()
        moved = False
        while self._deferred and self._deferred[0][0] <= now:
            msg = heapq.heappop(self._deferred)[2]
            self.queue.append(msg)
            moved = True
        expired: list[tuple[float, _Message]] = []
        for fifo in self._timeout_fifos.values():
            while fifo and fifo[0][0] <= now:
                expired.append(fifo.popleft())
        while self._touched and self._touched[0][0] <= now:
            deadline, _, msg = heapq.heappop(self._touched)
            expired.append((deadline, msg))
        expired.sort(key=lambda entry: entry[0])
        for deadline, msg in expired:
            client = msg.client
            if client is None or msg.deadline != deadline or self.in_flight.get(msg.id) is not msg:
                continue  # finished, re-queued or touched since
            del self.in_flight[msg.id]
            msg.client = None
            client.in_flight -= 1
            self.timeout_count += 1
            self.queue.append(msg)
            moved = True
        self._arm()
        if moved:
            self.schedule_dispatch()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def flush_for_restart(self) -> None:
        """What nsqd does on exit (``Channel.flush``): in-flight and deferred messages are
        saved after the queued ones, so after a restart the queued messages come first."""
        msgs = sorted(self.in_flight.values(), key=lambda m: m.delivered_at)
        self.in_flight.clear()
        for m in msgs:
            m.client = None
        msgs.extend(entry[2] for entry in sorted(self._deferred))
        self._deferred.clear()
        self._timeout_fifos.clear()
        self._touched.clear()
        self.queue.extend(msgs)
        self.close()

    # -- delivery -----------------------------------------------------------------------

    def schedule_dispatch(self) -> None:
        if not self._dispatch_pending and self.queue and self.clients:
            self._dispatch_pending = True
            self.loop.call_soon(self._dispatch)

    def _dispatch(self) -> None:
        self._dispatch_pending = False
        if not self.queue or not self.clients:
            return
        n = len(self.clients)
        self._rr = (self._rr + 1) % n
        ready = [c for c in self.clients[self._rr :] + self.clients[: self._rr] if c.capacity() > 0]
        if not ready:
            return
        now = self.loop.time()
        queue = self.queue
        in_flight = self.in_flight
        rng = self.topic.nsqd._rng
        pack = _MSG_HEADER.pack
        armed = self._timer is not None
        for c in ready:
            c.batch = []
            fifo = self._timeout_fifos.get(c.msg_timeout)
            if fifo is None:
                fifo = self._timeout_fifos[c.msg_timeout] = collections.deque()
            c.timeout_fifo = fifo
        while queue and ready:
            still_ready = []
            for c in ready:
                if not queue:
                    break
                msg = queue.popleft()
                if c.sample_rate and rng.randrange(100) > c.sample_rate:
                    still_ready.append(c)  # nsqd drops the message for this client
                    continue
                msg.attempts += 1
                msg.client = c
                msg.delivered_at = now
                msg.deadline = deadline = now + c.msg_timeout
                in_flight[msg.id] = msg
                c.timeout_fifo.append((deadline, msg))
                c.in_flight += 1
                c.message_count += 1
                body = msg.body
                c.batch.append(
                    pack(30 + len(body), FRAME_MESSAGE, msg.ts, msg.attempts & 0xFFFF)
                    + msg.id
                    + body
                )
                if c.rdy > c.in_flight:
                    still_ready.append(c)
            ready = still_ready
        if not armed:
            self._arm()
        for c in self.clients:
            if c.batch:
                c.write(b"".join(c.batch))
                c.batch = []


class _NsqdConnection(asyncio.Protocol):
    """One client connection: nsqd's IOLoop and messagePump in one object."""

    def __init__(self, nsqd: NsqdEmulator) -> None:
        self.nsqd = nsqd
        self.loop = nsqd._loop
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._magic = False
        self._closed = False
        self._upgrading = False
        self.state = _STATE_INIT
        self.remote_address = ""
        self.client_id = ""
        self.hostname = ""
        self.user_agent = ""
        self.heartbeat_interval = nsqd.heartbeat_interval
        self.msg_timeout = nsqd.msg_timeout
        self.output_buffer_size = 16 * 1024
        self.output_buffer_timeout = nsqd.output_buffer_timeout
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
        self.rdy = 0
        self.in_flight = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.connect_ts = int(time.time())
        self.channel: _Channel | None = None
        self.pub_counts: dict[str, int] = {}
        self.batch: list[bytes] = []
        # while a receive buffer is parsed, answers collect here and go out in one write
        self._out: list[bytes] | None = None
        self.timeout_fifo: collections.deque[tuple[float, _Message]] = collections.deque()
        self._last_read = self.loop.time()
        self._heartbeat_timer: asyncio.TimerHandle | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.remote_address = f"{peer[0]}:{peer[1]}"
            self.client_id = self.hostname = str(peer[0])
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.nsqd._connections.add(self)
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
                self._abort()
                return
        elif self._snappy is not None:
            try:
                data = self._snappy.decompress(data)
            except Exception:  # cramjam raises its own DecompressionError
                self._abort()
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
        self.nsqd._connections.discard(self)
        if self.channel is not None:
            self.channel.remove_client(self)

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

    def _flush(self) -> None:
        out, self._out = self._out, None
        if out and self.transport is not None and not self._closed:
            self.transport.write(b"".join(out))

    def _close(self) -> None:
        if not self._closed:
            self._flush()
            self._closed = True
            if self.transport is not None:
                self.transport.close()

    def _abort(self) -> None:
        self._closed = True
        self._out = None
        if self.transport is not None:
            self.transport.abort()

    def capacity(self) -> int:
        if self.state != _STATE_SUBSCRIBED or self._closed:
            return 0
        return self.rdy - self.in_flight

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
            return 2 * self.nsqd.heartbeat_interval
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
                if len(line) == 20 and line[:4] == b"FIN " and self._fast_fin(line[4:]):
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

    def _fast_fin(self, msg_id: bytes) -> bool:
        """FIN of a message this client owns, without the general path's checks."""
        channel = self.channel
        if channel is None or (self.nsqd.tls_required and not self.tls):
            return False
        msg = channel.in_flight.get(msg_id)
        if msg is None or msg.client is not self:
            return False  # the general path reports the error
        del channel.in_flight[msg_id]
        msg.client = None
        self.finish_count += 1
        self.in_flight -= 1
        channel.schedule_dispatch()
        return True

    def _exec(self, params: list[bytes], start: int) -> int | None:
        cmd = params[0]
        if cmd == b"IDENTIFY":
            return self._identify(params, start)
        if self.nsqd.tls_required and not self.tls:
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
        nsqd = self.nsqd
        if self.state != _STATE_INIT:
            raise ClientError("E_INVALID", "cannot IDENTIFY in current state")
        size = self._size(start)
        if size is None:
            return None
        if size > nsqd.max_body_size:
            raise ClientError("E_BAD_BODY", f"IDENTIFY body too big {size} > {nsqd.max_body_size}")
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
        tls = nsqd.tls is not None and settings.tls_v1
        deflate = nsqd.deflate_enabled and settings.deflate
        level = settings.deflate_level if deflate and settings.deflate_level > 0 else 6
        level = min(level, nsqd.max_deflate_level)
        snappy = nsqd.snappy_enabled and settings.snappy
        if deflate and snappy:
            raise ClientError(
                "E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression"
            )
        answer = {
            "max_rdy_count": nsqd.max_rdy_count,
            "version": NSQ_VERSION,
            "max_msg_timeout": round(nsqd.max_msg_timeout * 1000),
            "msg_timeout": round(self.msg_timeout * 1000),
            "tls_v1": tls,
            "deflate": deflate,
            "deflate_level": level,
            "max_deflate_level": nsqd.max_deflate_level,
            "snappy": snappy,
            "sample_rate": self.sample_rate,
            "auth_required": nsqd.auth_secret is not None,
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": round(self.output_buffer_timeout * 1000),
        }
        self.write(frame(FRAME_RESPONSE, json.dumps(answer, separators=(",", ":")).encode()))
        if tls:
            # the handshake needs the event loop; parsing waits for it. Bytes the
            # client sent before our answer are lost, as they are with nsqd.
            self._upgrading = True
            del self._buf[end:]
            self.nsqd._tasks.start(
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
                self._abort()

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
                self._abort()

    def _apply_identify(self, d: _IdentifyData) -> str | None:
        nsqd = self.nsqd
        self.client_id = d.client_id
        self.hostname = d.hostname
        self.user_agent = d.user_agent
        hb = d.heartbeat_interval
        if hb == -1:
            self.heartbeat_interval = 0.0
        elif hb == 0:
            pass
        elif nsqd.min_heartbeat_interval * 1000 <= hb <= nsqd.max_heartbeat_interval * 1000:
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
        elif nsqd.min_msg_timeout * 1000 <= mt <= nsqd.max_msg_timeout * 1000:
            self.msg_timeout = mt / 1000
        else:
            return f"msg timeout ({mt}) is invalid"
        return None

    async def _upgrade_tls(self, *, deflate_level: int, snappy: bool) -> None:
        assert self.transport is not None
        assert self.nsqd.tls is not None
        try:
            new = await self.loop.start_tls(
                self.transport, self, self.nsqd.tls, server_side=True, ssl_handshake_timeout=5
            )
        except (OSError, asyncio.TimeoutError) as exc:
            log.debug("nsqd emulator: TLS handshake failed for %s: %s", self, exc)
            self._abort()
            return
        if new is None or self._closed:
            self._abort()
            return
        assert isinstance(new, asyncio.Transport)
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
        nsqd = self.nsqd
        if nsqd.auth_secret is None:
            return
        if not self.authed:
            raise ClientError("E_AUTH_FIRST", f"AUTH required before {cmd}")
        if not nsqd._authorized(topic):
            raise ClientError(
                "E_UNAUTHORIZED", f"AUTH failed for {cmd} on {_goquote(topic)} {_goquote(channel)}"
            )

    def _auth(self, params: list[bytes], start: int) -> int | None:
        nsqd = self.nsqd
        if self.state != _STATE_INIT:
            raise ClientError("E_INVALID", "cannot AUTH in current state")
        if len(params) != 1:
            raise ClientError("E_INVALID", "AUTH invalid number of parameters")
        size = self._size(start)
        if size is None:
            return None
        if size > nsqd.max_body_size:
            raise ClientError("E_BAD_BODY", f"AUTH body too big {size} > {nsqd.max_body_size}")
        if size <= 0:
            raise ClientError("E_BAD_BODY", f"AUTH invalid body size {size}")
        end = start + 4 + size
        if len(self._buf) < end:
            return None
        secret = bytes(self._buf[start + 4 : end])
        if self.authed:
            raise ClientError("E_INVALID", "AUTH already set")
        if nsqd.auth_secret is None:
            raise ClientError("E_AUTH_DISABLED", "AUTH disabled")
        if secret != nsqd.auth_secret.encode():
            raise ClientError("E_AUTH_FAILED", "AUTH failed")
        self.authed = True
        answer = {
            "identity": nsqd.auth_identity,
            "identity_url": "",
            "permission_count": len(nsqd.auth_topics) if nsqd.auth_topics else 1,
        }
        self.write(frame(FRAME_RESPONSE, json.dumps(answer, separators=(",", ":")).encode()))
        return end

    def _sub(self, params: list[bytes], start: int) -> int | None:
        if self.state != _STATE_INIT:
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
        channel = self.nsqd._get_topic(topic_name).get_channel(channel_name)
        self.state = _STATE_SUBSCRIBED
        self.channel = channel
        channel.add_client(self)
        self.write(_OK)
        return start

    def _rdy(self, params: list[bytes], start: int) -> int | None:
        if self.state == _STATE_CLOSING:
            return start  # nsqd ignores RDY after CLS
        if self.state != _STATE_SUBSCRIBED:
            raise ClientError("E_INVALID", "cannot RDY in current state")
        count = 1
        if len(params) > 1:
            parsed = _base10(params[1])
            if parsed is None:
                raise ClientError(
                    "E_INVALID", f"RDY could not parse count {params[1].decode(errors='replace')}"
                )
            count = parsed
        if count > self.nsqd.max_rdy_count:
            raise ClientError(
                "E_INVALID", f"RDY count {count} out of range 0-{self.nsqd.max_rdy_count}"
            )
        self.rdy = count
        if self.channel is not None and count > self.in_flight:
            self.channel.schedule_dispatch()
        return start

    def _message_id(self, params: list[bytes], cmd: str, needed: int) -> bytes:
        if self.state not in (_STATE_SUBSCRIBED, _STATE_CLOSING):
            raise ClientError("E_INVALID", f"cannot {cmd} in current state")
        if len(params) < needed:
            raise ClientError("E_INVALID", f"{cmd} insufficient number of params")
        if len(params[1]) != 16:
            raise ClientError("E_INVALID", "invalid message ID")
        return params[1]

    def _fin(self, params: list[bytes], start: int) -> int | None:
        msg_id = self._message_id(params, "FIN", 2)
        assert self.channel is not None
        try:
            self.channel.finish(self, msg_id)
        except LookupError as exc:
            raise ClientError(
                "E_FIN_FAILED", f"FIN {msg_id.decode(errors='replace')} failed {exc}", fatal=False
            ) from None
        self.finish_count += 1
        self.in_flight -= 1
        return start

    def _req(self, params: list[bytes], start: int) -> int | None:
        msg_id = self._message_id(params, "REQ", 3)
        assert self.channel is not None
        timeout_ms = _base10(params[2])
        if timeout_ms is None:
            raise ClientError(
                "E_INVALID", f"REQ could not parse timeout {params[2].decode(errors='replace')}"
            )
        delay = min(timeout_ms / 1000, self.nsqd.max_req_timeout)  # nsqd clamps, logs
        try:
            self.channel.requeue(self, msg_id, delay)
        except LookupError as exc:
            raise ClientError(
                "E_REQ_FAILED", f"REQ {msg_id.decode(errors='replace')} failed {exc}", fatal=False
            ) from None
        self.requeue_count += 1
        self.in_flight -= 1
        return start

    def _touch(self, params: list[bytes], start: int) -> int | None:
        msg_id = self._message_id(params, "TOUCH", 2)
        assert self.channel is not None
        try:
            self.channel.touch(self, msg_id, self.msg_timeout)
        except LookupError as exc:
            raise ClientError(
                "E_TOUCH_FAILED",
                f"TOUCH {msg_id.decode(errors='replace')} failed {exc}",
                fatal=False,
            ) from None
        return start

    def _cls(self, params: list[bytes], start: int) -> int | None:
        if self.state != _STATE_SUBSCRIBED:
            raise ClientError("E_INVALID", "cannot CLS in current state")
        self.rdy = 0
        self.state = _STATE_CLOSING
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
        if size <= 0:
            raise ClientError("E_BAD_MESSAGE", f"{cmd} invalid message body size {size}")
        if size > self.nsqd.max_msg_size:
            raise ClientError(
                "E_BAD_MESSAGE", f"{cmd} message too big {size} > {self.nsqd.max_msg_size}"
            )
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
        self.nsqd._injected_failure("PUB")
        self.nsqd._publish(topic, [body])
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
        max_ms = round(self.nsqd.max_req_timeout * 1000)
        if timeout_ms > max_ms:
            raise ClientError("E_INVALID", f"DPUB timeout {timeout_ms} out of range 0-{max_ms}")
        got = self._read_message("DPUB", start)
        if got is None:
            return None
        body, end = got
        self._check_auth("DPUB", topic, "")
        self.nsqd._injected_failure("DPUB")
        self.nsqd._publish(topic, [body], defer=timeout_ms / 1000)
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + 1
        self.write(_OK)
        return end

    def _mpub(self, params: list[bytes], start: int) -> int | None:
        nsqd = self.nsqd
        topic = self._topic_param(params, "MPUB", 2, prefix="E_BAD_TOPIC ")
        self._check_auth("MPUB", topic, "")
        nsqd._get_topic(topic)
        size = self._size(start)
        if size is None:
            return None
        if size <= 0:
            raise ClientError("E_BAD_BODY", f"MPUB invalid body size {size}")
        if size > nsqd.max_body_size:
            raise ClientError("E_BAD_BODY", f"MPUB body too big {size} > {nsqd.max_body_size}")
        got = read_mpub(self._buf, start + 4, nsqd.max_msg_size, nsqd.max_body_size)
        if got is None:
            return None
        bodies, end = got
        nsqd._injected_failure("MPUB")
        nsqd._publish(topic, bodies)
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + len(bodies)
        self.write(_OK)
        return end

    def __repr__(self) -> str:
        return f"<nsqd client {self.remote_address}>"

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "version": "V2",
            "remote_address": self.remote_address,
            "state": self.state,
            "ready_count": self.rdy,
            "in_flight_count": self.in_flight,
            "message_count": self.message_count,
            "finish_count": self.finish_count,
            "requeue_count": self.requeue_count,
            "connect_ts": self.connect_ts,
            "sample_rate": self.sample_rate,
            "deflate": self.deflate,
            "snappy": self.snappy,
            "user_agent": self.user_agent,
        }
        if self.authed:
            out["authed"] = True
            out["auth_identity"] = self.nsqd.auth_identity
        if self.pub_counts:
            out["pub_counts"] = [{"topic": t, "count": n} for t, n in self.pub_counts.items()]
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


class _LookupdPeer:
    """nsqd's side of one nsqlookupd TCP connection (lookup.go / lookup_peer.go)."""

    def __init__(self, nsqd: NsqdEmulator, address: str) -> None:
        self.nsqd = nsqd
        self.address = address
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.queue = asyncio.Queue()
        self.task = self.nsqd._tasks.start(self._run(), name=f"register with {self.address}")

    async def stop(self) -> None:
        task, self.task = self.task, None
        if task is not None:
            await self.nsqd._tasks.cancel(task)

    def send(self, command: bytes) -> None:
        if self.task is not None:
            self.queue.put_nowait(command)

    async def _run(self) -> None:
        host, _, port = self.address.rpartition(":")
        while True:
            writer: asyncio.StreamWriter | None = None
            try:
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(_LOOKUPD_MAGIC)
                ident = json.dumps(
                    {
                        "version": NSQ_VERSION,
                        "tcp_port": self.nsqd.tcp_port,
                        "http_port": self.nsqd.http_port,
                        "hostname": socket.gethostname(),
                        "broadcast_address": self.nsqd.broadcast_address,
                    }
                ).encode()
                writer.write(b"IDENTIFY\n" + struct.pack(">I", len(ident)) + ident)
                await _read_lookupd_answer(reader)
                # re-send every registration after (re)connecting, as nsqd does
                pending = [f"REGISTER {t.name}\n".encode() for t in self.nsqd._topics.values()] + [
                    f"REGISTER {t.name} {c}\n".encode()
                    for t in self.nsqd._topics.values()
                    for c in t.channels
                ]
                while not self.queue.empty():
                    self.queue.get_nowait()
                for command in pending:
                    writer.write(command)
                    await _read_lookupd_answer(reader)
                while True:
                    try:
                        command = await asyncio.wait_for(
                            self.queue.get(), self.nsqd.lookupd_ping_interval
                        )
                    except asyncio.TimeoutError:
                        command = b"PING\n"
                    writer.write(command)
                    await _read_lookupd_answer(reader)
            except (OSError, asyncio.IncompleteReadError, ConnectionError) as exc:
                log.debug("nsqd emulator: lookupd %s: %s; retrying", self.address, exc)
            finally:
                if writer is not None:
                    writer.close()
            await asyncio.sleep(0.2)


async def _read_lookupd_answer(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">I", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


class NsqdEmulator:
    """An nsqd speaking the real TCP and HTTP protocols, in this process, on loopback.

    Use ``async with NsqdEmulator() as nsqd`` inside a running event loop. The
    defaults are nsqd v1.3's; seconds are floats (nsqd's flags are durations).

    Args:
        host: the address to listen on.
        tcp_port: the TCP port; a free one when 0 (kept across :meth:`stop`/:meth:`start`).
        http_port: the HTTP port; a free one when 0.
        auth_secret: when set, clients must AUTH with this secret (``auth_required``).
        auth_identity: the identity AUTH answers with.
        auth_topics: regular expressions of the topics an authenticated client may use
            (all when ``None``); others get ``E_UNAUTHORIZED``.
        tls: a server-side :class:`ssl.SSLContext`; enables the ``tls_v1`` upgrade.
        tls_required: refuse every command but IDENTIFY before TLS.
        max_rdy_count: the largest RDY a client may send.
        msg_timeout: the default in-flight timeout.
        max_msg_timeout: the largest timeout a client may ask for (and TOUCH cap).
        max_req_timeout: the largest REQ / DPUB delay.
        max_msg_size: the largest message body.
        max_body_size: the largest IDENTIFY/AUTH/MPUB body.
        heartbeat_interval: the default heartbeat interval.
        min_heartbeat_interval: the smallest heartbeat interval a client may ask for
            (nsqd: 1 s; lower it for fast tests).
        max_heartbeat_interval: the largest heartbeat interval a client may ask for.
        min_msg_timeout: the smallest ``msg_timeout`` a client may ask for (nsqd: 1 s).
        output_buffer_timeout: the default output buffer timeout (echoed only).
        deflate: whether deflate may be negotiated.
        max_deflate_level: the highest deflate level.
        snappy: whether snappy may be negotiated; ``None``: when the ``cramjam``
            package is installed (nsqd enables snappy by default).
        lookupd_tcp_addresses: ``"host:port"`` of nsqlookupd TCP listeners to register with.
        lookupd_ping_interval: seconds between PINGs to each lookupd.
        broadcast_address: the address announced to lookupd (default: ``host``).
        seed: seed of the generator behind message ids and ``sample_rate``.
        http: whether to serve the HTTP API.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        tcp_port: int = 0,
        http_port: int = 0,
        auth_secret: str | None = None,
        auth_identity: str = "emulator",
        auth_topics: Iterable[str] | None = None,
        tls: ssl.SSLContext | None = None,
        tls_required: bool = False,
        max_rdy_count: int = 2500,
        msg_timeout: float = 60.0,
        max_msg_timeout: float = 900.0,
        max_req_timeout: float = 3600.0,
        max_msg_size: int = 1024 * 1024,
        max_body_size: int = 5 * 1024 * 1024,
        heartbeat_interval: float = 30.0,
        min_heartbeat_interval: float = 1.0,
        max_heartbeat_interval: float = 60.0,
        min_msg_timeout: float = 1.0,
        output_buffer_timeout: float = 0.25,
        deflate: bool = True,
        max_deflate_level: int = 6,
        snappy: bool | None = None,
        lookupd_tcp_addresses: Iterable[str] = (),
        lookupd_ping_interval: float = 15.0,
        broadcast_address: str | None = None,
        seed: int | None = None,
        http: bool = True,
    ) -> None:
        self.host = host
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.auth_secret = auth_secret
        self.auth_identity = auth_identity
        self.auth_topics = tuple(auth_topics) if auth_topics is not None else None
        self._auth_patterns = [re.compile(p) for p in self.auth_topics or ()]
        self.tls = tls
        self.tls_required = tls_required
        self.max_rdy_count = max_rdy_count
        self.msg_timeout = msg_timeout
        self.max_msg_timeout = max_msg_timeout
        self.max_req_timeout = max_req_timeout
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        self.heartbeat_interval = heartbeat_interval
        self.min_heartbeat_interval = min_heartbeat_interval
        self.max_heartbeat_interval = max_heartbeat_interval
        self.min_msg_timeout = min_msg_timeout
        self.output_buffer_timeout = output_buffer_timeout
        self.deflate_enabled = deflate
        self.max_deflate_level = max_deflate_level
        self.snappy_enabled = _snappy_available() if snappy is None else snappy
        if self.snappy_enabled and not _snappy_available():
            raise ValueError("snappy=True needs the cramjam package (pip install cramjam)")
        self.lookupd_ping_interval = lookupd_ping_interval
        self.broadcast_address = broadcast_address or host
        self._rng = random.Random(seed)
        self._id_base = self._rng.getrandbits(62)
        self._id_seq = 0
        self._http_enabled = http
        self._loop_: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._http_runner: Any = None
        self._connections: set[_NsqdConnection] = set()
        self._topics: dict[str, _Topic] = {}
        # TLS upgrades, lookupd registrations; a new owner for each start()
        self._tasks = TaskOwner("NsqdEmulator")
        self._lookupd_peers = [_LookupdPeer(self, a) for a in lookupd_tcp_addresses]
        self._start_time = int(time.time())
        self._failures: dict[str, int] = {}

    # -- public surface -------------------------------------------------------------------

    @property
    def tcp_address(self) -> str:
        """``"host:port"`` of the TCP listener."""
        return f"{self.host}:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        """``"host:port"`` of the HTTP listener."""
        return f"{self.host}:{self.http_port}"

    @property
    def running(self) -> bool:
        """Whether the listeners are open (between :meth:`start` and :meth:`stop`)."""
        return self._server is not None

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        if self._loop_ is None:
            self._loop_ = asyncio.get_running_loop()
        return self._loop_

    async def start(self) -> None:
        """Listen (again, on the same ports) and register with the configured lookupds.

        Raises:
            OSError: a port is taken (for instance by another server since :meth:`stop`).
        """
        if self._server is not None:
            return
        self._loop_ = asyncio.get_running_loop()
        self._tasks = TaskOwner(f"NsqdEmulator({self.host}:{self.tcp_port or 'new'})")
        for topic in self._topics.values():  # topics kept from a run on another loop
            for channel in topic.channels.values():
                channel.loop = self._loop_
        self._server = await self._loop.create_server(
            lambda: _NsqdConnection(self), self.host, self.tcp_port, reuse_address=True
        )
        self.tcp_port = self._server.sockets[0].getsockname()[1]
        if self._http_enabled:
            self._http_runner, self.http_port = await start_http(self, self.host, self.http_port)
        self._start_time = int(time.time())
        for peer in self._lookupd_peers:
            peer.start()
        log.debug("nsqd emulator listening on %s (http %s)", self.tcp_address, self.http_address)

    async def stop(self) -> None:
        """Close the listeners and every client connection; topics and messages are kept.

        In-flight and deferred messages go back to their channel's queue, as nsqd
        flushes them to disk on exit and reads them back when it starts again.

        Raises:
            Exception: the first error one of the emulator's tasks (a TLS upgrade,
                a lookupd registration) failed with: a bug in the emulator.
        """
        server, self._server = self._server, None
        if server is None:
            return
        for peer in self._lookupd_peers:
            await peer.stop()
        server.close()
        for conn in list(self._connections):
            conn._abort()
        if self._http_runner is not None:
            runner, self._http_runner = self._http_runner, None
            await runner.cleanup()
        await server.wait_closed()
        for topic in list(self._topics.values()):
            for channel in list(topic.channels.values()):
                channel.clients.clear()
                if channel.ephemeral:
                    self._delete_channel(channel)
                else:
                    channel.flush_for_restart()
        await self._tasks.aclose()
        failure = self._tasks.failure
        if failure is not None:
            raise failure

    async def close(self) -> None:
        """Stop and forget every topic."""
        await self.stop()
        for topic in self._topics.values():
            for channel in topic.channels.values():
                channel.close()
        self._topics.clear()

    async def __aenter__(self) -> NsqdEmulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def add_lookupd(self, tcp_address: str) -> None:
        """Register with one more nsqlookupd over its TCP protocol.

        Args:
            tcp_address: ``"host:port"`` of the nsqlookupd TCP listener.
        """
        peer = _LookupdPeer(self, tcp_address)
        self._lookupd_peers.append(peer)
        if self._server is not None:
            peer.start()

    def publish(self, topic: str, *bodies: bytes, defer: float = 0.0) -> None:
        """Put messages on ``topic`` as if a producer had published them.

        Args:
            topic: the topic (created when missing).
            bodies: the message bodies, each non-empty.
            defer: seconds before the messages become available, as with DPUB.

        Raises:
            ValueError: invalid topic name or empty body.
        """
        if not is_valid_name(topic):
            raise ValueError(f"invalid topic name {topic!r}")
        if any(not b for b in bodies):
            raise ValueError("message bodies must not be empty")
        self._publish(topic, list(bodies), defer=defer)

    def create_topic(self, topic: str, *channels: str) -> None:
        """Create a topic (and channels), as ``/topic/create`` and ``/channel/create`` do.

        Args:
            topic: the topic name.
            channels: channel names to create on it.

        Raises:
            ValueError: an invalid topic or channel name.
        """
        for name in (topic, *channels):
            if not is_valid_name(name):
                raise ValueError(f"invalid topic or channel name {name!r}")
        t = self._get_topic(topic)
        for channel in channels:
            t.get_channel(channel)

    def topic_names(self) -> list[str]:
        """Names of the topics that exist, sorted."""
        return sorted(self._topics)

    def channel_names(self, topic: str) -> list[str]:
        """Names of the channels of ``topic`` (empty when it does not exist), sorted."""
        t = self._topics.get(topic)
        return sorted(t.channels) if t else []

    def stats(
        self, topic: str | None = None, channel: str | None = None, include_clients: bool = True
    ) -> dict[str, Any]:
        """The document ``/stats?format=json`` answers with (without ``memory``).

        Args:
            topic: only this topic (all when ``None``).
            channel: only this channel (all when ``None``).
            include_clients: list the clients of each channel and the producers.

        Returns:
            ``{"version", "health", "start_time", "topics", "producers"}`` shaped as nsqd's.
        """
        topics = []
        for t in sorted(self._topics.values(), key=lambda t: t.name):
            if topic and t.name != topic:
                continue
            chans = []
            for c in sorted(t.channels.values(), key=lambda c: c.name):
                if channel and c.name != channel:
                    continue
                chans.append(
                    {
                        "channel_name": c.name,
                        "depth": len(c.queue),
                        "backend_depth": 0,
                        "in_flight_count": len(c.in_flight),
                        "deferred_count": c.deferred_count,
                        "message_count": c.message_count,
                        "requeue_count": c.requeue_count,
                        "timeout_count": c.timeout_count,
                        "client_count": len(c.clients),
                        "clients": [x.stats() for x in c.clients] if include_clients else None,
                        "paused": False,
                        "e2e_processing_latency": {"count": 0, "percentiles": None},
                    }
                )
            if channel and not chans:
                continue
            topics.append(
                {
                    "topic_name": t.name,
                    "channels": chans,
                    "depth": len(t.backlog),
                    "backend_depth": 0,
                    "message_count": t.message_count,
                    "message_bytes": t.message_bytes,
                    "paused": False,
                    "e2e_processing_latency": {"count": 0, "percentiles": None},
                }
            )
        producers = None
        if include_clients:
            producers = [c.stats() for c in self._connections if c.pub_counts] or None
        return {
            "version": NSQ_VERSION,
            "health": "OK",
            "start_time": self._start_time,
            "topics": topics,
            "producers": producers,
        }

    # -- internals ------------------------------------------------------------------------

    def _authorized(self, topic: str) -> bool:
        if self.auth_topics is None:
            return True
        return any(p.fullmatch(topic) for p in self._auth_patterns)

    def _new_id(self) -> bytes:
        self._id_seq += 1
        return b"%016x" % ((self._id_base + self._id_seq) & 0xFFFFFFFFFFFFFFFF)

    def _get_topic(self, name: str) -> _Topic:
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = _Topic(self, name)
            self._registered(name, None)
        return topic

    def fail_next(self, command: str, times: int = 1) -> None:
        """Make the next ``times`` ``PUB``/``MPUB``/``DPUB`` commands fail as nsqd does
        when the topic is exiting: ``E_PUB_FAILED PUB failed exiting`` (fatal).

        For testing how producers handle a server-side publish failure.

        Raises:
            ValueError: ``command`` is not PUB, MPUB or DPUB.
        """
        if command not in ("PUB", "MPUB", "DPUB"):
            raise ValueError(f"fail_next() takes PUB, MPUB or DPUB, not {command!r}")
        self._failures[command] = self._failures.get(command, 0) + times

    def _injected_failure(self, command: str) -> None:
        left = self._failures.get(command, 0)
        if left:
            self._failures[command] = left - 1
            raise ClientError(f"E_{command}_FAILED", f"{command} failed exiting")

    def _publish(self, topic: str, bodies: list[bytes], *, defer: float = 0.0) -> None:
        ts = time.time_ns()
        msgs = [_Message(self._new_id(), body, ts, defer) for body in bodies]
        self._get_topic(topic).put(msgs)

    def _registered(self, topic: str, channel: str | None) -> None:
        command = f"REGISTER {topic}\n" if channel is None else f"REGISTER {topic} {channel}\n"
        for peer in self._lookupd_peers:
            peer.send(command.encode())

    def _delete_topic(self, name: str) -> None:
        topic = self._topics.pop(name, None)
        if topic is None:
            return
        for channel in topic.channels.values():
            channel.close()
            for client in list(channel.clients):
                client._abort()
        for peer in self._lookupd_peers:
            for channel_name in topic.channels:
                peer.send(f"UNREGISTER {name} {channel_name}\n".encode())
            peer.send(f"UNREGISTER {name}\n".encode())

    def _delete_channel(self, channel: _Channel) -> None:
        topic = channel.topic
        if topic.channels.get(channel.name) is not channel:
            return
        del topic.channels[channel.name]
        channel.close()
        for peer in self._lookupd_peers:
            peer.send(f"UNREGISTER {topic.name} {channel.name}\n".encode())
        if topic.ephemeral and not topic.channels:
            del self._topics[topic.name]
            for peer in self._lookupd_peers:
                peer.send(f"UNREGISTER {topic.name}\n".encode())
