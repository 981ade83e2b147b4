"""The boundary with nats-py: everything that touches ``nats.aio.client.Client``.

We build PUB/HPUB frames ourselves (so headers may repeat a key and the hot
publish path does no per-message validation twice) and hand them to the
client's outgoing buffer, exactly as ``Client.publish`` does after its checks.
nats-py exceptions are mapped here and never leak.

Writes are bounded. nats-py waits for a "forced" flush (more than its pending
size queued) without a deadline (``flush_timeout=None``) and swallows the
caller's cancellation while it waits; against a server that stops reading, that
wait never ends. Here a send that finds the pending buffer full waits for the
flusher only until the call's deadline, raises a typed timeout with nothing
queued, and lets a cancel cancel. A connection given up on (stale, reset) has
its socket aborted, never closed gracefully: a graceful close waits for the
unsent bytes to be written, which a frozen server never allows.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import importlib.metadata
import json
import logging
import math
import operator
import re
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, Protocol, cast

import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg as NatsMsg
from nats.aio.subscription import Subscription

from aioclients._core import redact_text
from aioclients._errors import (
    AioClientsError,
    ConnectError,
    InvalidArgumentError,
    RemoteProtocolError,
)
from aioclients.jetstream._errors import (
    APITimeoutError,
    JetStreamClosedError,
    MaxPayloadError,
)
from aioclients.jetstream._protocol._headers import (
    decode_header_lines,
    decode_headers,
    encode_headers,
)
from aioclients.jetstream._protocol._wire import (
    ERR,
    INFO,
    MAX_CONTROL_LINE,
    MSG,
    PING,
    PONG,
    Frame,
    first_delivery_sid,
    first_header_delivery_sid,
    frame_sizes,
    known_sizes,
    reply_frame_match,
    scan,
    scan_deliveries,
    scan_header_deliveries,
    single_message,
)

__all__ = (
    "REQUIRED_INTERNALS",
    "SUPPORTED_NATS_PY",
    "NatsClient",
    "NatsTransport",
    "BytesHandler",
    "RawHandler",
    "RunHandler",
    "DeliveriesHandler",
    "FrameWaiters",
    "FrameReader",
    "HeaderDeliveriesHandler",
    "RawSubscription",
    "ReplyInbox",
    "abort_socket",
    "check_nats_py",
    "close_connection",
    "close_websocket_session",
    "kick_flusher",
    "nats_py_version",
    "report_fast_path_off",
    "send_timeout_error",
)

#: ``handler(subject, reply, payload, header_block_or_None)``; a status message's
#: header block starts with ``NATS/1.0 <code> <description>``.
RawHandler = Callable[[str, str, bytes, "bytes | None"], None]
#: A :data:`RawHandler` that takes ``subject`` and ``reply`` as the bytes on the
#: wire (undecoded; see ``subscribe_raw(..., as_bytes=True)``).
BytesHandler = Callable[[bytes, bytes, bytes, "bytes | None"], None]
#: The outstanding requests of a reply inbox that reads replies whole
#: (``subscribe_raw(..., frame_header=..., waiters=...)``), by reply subject: each
#: entry a tuple whose first item is the future of the reply. A reply read whole by
#: one match of the inbox's frame pattern takes its entry out and gives the future
#: the match's groups, ``(subject, sizes, header block, *the header pattern's
#: groups, payload)``, all bytes but for header groups that took part in no match
#: (``None``); ``sizes`` is the line's ``b"<header size> <total size>"``.
FrameWaiters = dict[str, tuple[Any, ...]]
#: ``(fullmatch of the frame pattern, the inbox's waiters, the subscription's sid)``
FrameReader = tuple[Callable[[bytes], Any], FrameWaiters, int]
#: ``handler(frames)``: a run of messages of one subscription, in the order they
#: came, each ``(MSG, subject, sid, reply, header_or_None, payload)`` as
#: :func:`~aioclients.jetstream._protocol._wire.scan` gives them, subject and reply
#: the bytes on the wire (see :meth:`NatsTransport.subscribe_runs`).
RunHandler = Callable[[list[Frame]], None]
#: ``handler(subjects, replies, payloads)``: a run of deliveries
#: (each with a reply, none with headers) of one subscription, as columns, in
#: order, subject and reply the bytes on the wire (see
#: :func:`~aioclients.jetstream._protocol._wire.scan_deliveries` and
#: :meth:`NatsTransport.subscribe_runs`).
DeliveriesHandler = Callable[[Sequence[bytes], Sequence[bytes], Sequence[bytes]], None]
#: ``handler(subjects, replies, headers, payloads)``: a run of deliveries (each with
#: a reply and a header block that is no status) of one subscription, as columns,
#: in order (see
#: :func:`~aioclients.jetstream._protocol._wire.scan_header_deliveries` and
#: :meth:`NatsTransport.subscribe_runs`).
HeaderDeliveriesHandler = Callable[
    [Sequence[bytes], Sequence[bytes], Sequence[bytes], Sequence[bytes]], None
]

log = logging.getLogger("aioclients.jetstream")

_CRLF = b"\r\n"
_NO_HANDLERS: dict[int, BytesHandler] = {}
_NO_RUNS: dict[int, RunHandler] = {}
_NO_DELIVERIES: dict[int, DeliveriesHandler] = {}
_NO_HEADER_DELIVERIES: dict[int, HeaderDeliveriesHandler] = {}
#: After scan_deliveries refuses a read of at least _LARGE_READ bytes, this many
#: reads go to scan() alone: a stream whose payloads hold CRLFs pays its split of
#: the whole read on one read in 17, not on each.
_LARGE_READ = 4096
_SKIP_AFTER_REFUSAL = 16
_PAYLOAD = operator.itemgetter(5)
_SID = operator.itemgetter(2)

_CONNECTED = NATS.CONNECTED

#: The largest message frame (control line, payload, CRLF) read in pieces whatever the
#: server's max_payload says: nats-server's default max_pending, the most it queues for
#: one client (a larger message is only possible where the server announces a larger
#: max_payload, and a larger one than that is refused: see FastParser._parse).
_MAX_FRAME = 64 * 1024 * 1024
#: a message frame's bytes beyond its payload: the control line and two CRLFs
_FRAME_SLACK = MAX_CONTROL_LINE + 4

#: How long a write may wait for a server that does not read, when no timeout applies.
DEFAULT_WRITE_TIMEOUT = 5.0

#: The nats-py releases we support: pyproject.toml says the same, and CI runs the
#: JetStream suite against the oldest and the newest of them.
SUPPORTED_NATS_PY = "nats-py>=2.15,<3"

#: nats-py's private members that every write goes through; without them no JetStream
#: call can work, so their absence is an error at once, not an AttributeError later.
REQUIRED_INTERNALS = (
    "_pending",
    "_pending_data_size",
    "_max_pending_size",
    "_flush_queue",
    "_pongs",
)

#: The fast paths already reported as off (each is logged once per process).
_REPORTED_OFF: set[str] = set()


def nats_py_version() -> str:
    """The installed nats-py's version, as its package says."""
    try:
        return importlib.metadata.version("nats-py")
    except importlib.metadata.PackageNotFoundError:  # e.g. on sys.path without metadata
        return getattr(nats, "__version__", "unknown")


def check_nats_py(nc: NATS) -> None:
    """Fail clearly when nats-py lacks what our writes rely on.

    Raises:
        InvalidArgumentError: names the missing members and the supported range.
    """
    missing = [name for name in REQUIRED_INTERNALS if not hasattr(nc, name)]
    if missing:
        raise InvalidArgumentError(
            f"nats-py {nats_py_version()} is not supported by aioclients.jetstream: its client "
            f"has no {', '.join(missing)}; install a supported version "
            f"(pip install '{SUPPORTED_NATS_PY}')"
        )


def report_fast_path_off(path: str, why: str, *, level: int = logging.WARNING) -> None:
    """Log, once per process, that a fast path is off and why (everything still works)."""
    if path in _REPORTED_OFF:
        return
    _REPORTED_OFF.add(path)
    log.log(
        level,
        "aioclients.jetstream: %s is off with nats-py %s (%s); everything works, only slower",
        path,
        nats_py_version(),
        why,
    )


def send_timeout_error(what: str, nc: NATS) -> APITimeoutError:
    """A frame could not be queued in time: the server does not read what is queued.

    The public :class:`APITimeoutError` itself (not a subclass of this private module),
    so that a traceback names ``aioclients.jetstream`` and the error pickles.
    """
    return APITimeoutError(
        f"could not send {what} in time: the NATS server is not reading "
        f"({unsent_bytes(nc)} bytes are still waiting to be written); nothing was sent. "
        "The server may be frozen or overloaded, or the network stalled"
    )


class NatsClient(NATS):
    """The nats-py client that :func:`aioclients.jetstream.connect` opens.

    Identical to nats-py's, except for header parsing, which nats-py does with a
    Python loop over every character of every header name (half the cost of
    reading a Direct Get batch). Here a repeated header key also keeps all its
    values, as a list, instead of only the last one.
    """

    def __init__(self) -> None:
        super().__init__()
        #: sid -> handler taking raw messages straight from the read loop
        self._raw_handlers: dict[int, RawHandler] = {}
        #: sid -> handler taking them with subject and reply undecoded (pull consumers)
        self._bytes_handlers: dict[int, BytesHandler] = {}
        #: sid -> handler taking whole runs of its messages at once (ordered consumers)
        self._run_handlers: dict[int, RunHandler] = {}
        #: sid -> handler taking those runs as columns, when a read holds nothing
        #: else (consume()): no frame per message (see FastParser.parse)
        self._deliveries_handlers: dict[int, DeliveriesHandler] = {}
        #: sid -> handler taking runs of deliveries with headers as columns, when a
        #: read holds nothing else (ordered consumers, KV keys()): see FastParser.parse
        self._header_deliveries_handlers: dict[int, HeaderDeliveriesHandler] = {}
        #: those of them that take replies to requests: a reply that arrives alone
        #: is handed to them from the socket's read callback (see FastParser)
        self._reply_handlers: dict[int, RawHandler] = {}
        #: ``(fullmatch, waiters, sid)`` of the reply inboxes that read a reply of
        #: the usual form whole, with one match of their frame pattern, from the
        #: socket's read callback (see FastParser._feed), in the order they came;
        #: the first of them, the one tried (one match per read: a connection has
        #: one such inbox per JetStream context over it, as a rule one in all)
        self._frame_readers: tuple[FrameReader, ...] = ()
        self._frame_reader: FrameReader | None = None
        #: sids of run handlers whose reader takes each 32 KiB read before the read
        #: loop parses the rest of a socket read (see FastParser.parse)
        self._paced: dict[int, bool] = {}
        if callable(getattr(getattr(self, "_ps", None), "parse", None)):
            self._ps = FastParser(self)  # type: ignore[assignment]
        else:
            # Messages then go through nats-py's own parser and callbacks.
            self._raw_handlers = None  # type: ignore[assignment]
            self._bytes_handlers = None  # type: ignore[assignment]
            self._run_handlers = None  # type: ignore[assignment]
            self._deliveries_handlers = None  # type: ignore[assignment]
            self._header_deliveries_handlers = None  # type: ignore[assignment]
            self._paced = None  # type: ignore[assignment]
            report_fast_path_off("the fast protocol parser", "its client has no _ps.parse")
        self._written: asyncio.Future[None] | None = None

    async def _send_command(self, cmd: bytes, priority: bool = False) -> None:
        # nats-py's version waits for a forced flush with flush_timeout (None: no
        # bound) and swallows a cancel meanwhile: bound it, and let a cancel through.
        if priority:
            self._pending.insert(0, cmd)
        else:
            self._pending.append(cmd)
        self._pending_data_size += len(cmd)
        limit = self._max_pending_size
        if 0 < limit < self._pending_data_size and self.is_connected:
            self._written = written = kick_flusher(self, self._written)
            bound = self._flush_timeout or DEFAULT_WRITE_TIMEOUT
            try:
                await asyncio.wait_for(asyncio.shield(written), bound)
            except asyncio.TimeoutError:
                log.warning(
                    "the NATS server has not read %d queued bytes within %.1fs; "
                    "the connection may be stale",
                    unsent_bytes(self),
                    bound,
                )

    async def _flush_pending(self, force_flush: bool = False) -> Any:
        queue = self._flush_queue
        if queue is not None and queue.full() and self.is_connected:
            # Flushes are due already; nats-py would wait (unbounded, swallowing a
            # cancel) for room in the queue of a flusher stuck on a server that
            # does not read.
            return None
        return await super()._flush_pending(force_flush)

    async def _process_connect_init(self) -> None:
        await super()._process_connect_init()
        if self._status != _CONNECTED:
            # nats-py takes any line for the answer to its PING (only PONG makes it
            # CONNECTED, only -ERR fails it) and would carry on, not connected, with
            # its tasks started: stop them, and fail this attempt.
            for task in (self._reading_task, self._ping_interval_task, self._flusher_task):
                if task is not None:
                    task.cancel()
            abort_socket(self)
            raise nats.errors.Error(
                "nats: the server answered the first PING with neither PONG nor -ERR"
            )
        parser = self._ps
        if isinstance(parser, FastParser):
            transport = self._transport
            parser.attach(
                getattr(transport, "_io_reader", None), getattr(transport, "_io_writer", None)
            )

    async def _connect_to_server(self, s: Any) -> None:
        # A failed connect attempt (e.g. no INFO in time from a server that accepts
        # but does not answer) leaves its socket open in nats-py; drop it before
        # the next attempt replaces it.
        abort_socket(self)
        await super()._connect_to_server(s)

    async def _process_op_err(self, e: Exception) -> None:
        # The connection is given up on (stale, reset, protocol error): abort the
        # socket, so that neither the reconnect nor the close waits for unsent
        # bytes to reach a server that may never read them.
        if not (self.is_closed or self.is_reconnecting):
            abort_socket(self)
            if not (self.options["allow_reconnect"] and (self.is_connected or self.is_connecting)):
                self._pending = []  # closing for good: nothing will send these
                self._pending_data_size = 0
        await super()._process_op_err(e)

    @staticmethod
    def _parse_header_lines(raw: bytes) -> dict[str, Any]:
        return decode_header_lines(raw, strict=False)

    async def _process_headers(self, headers: bytes) -> dict[str, Any] | None:
        # nats-py decodes a status line as strict UTF-8: a byte that is not lets a
        # UnicodeDecodeError out of the read loop, and the connection drops.
        if not headers or headers[8:9] != b" ":  # no status: nats-py's (lines parsed by us)
            return await super()._process_headers(headers)
        try:
            return decode_headers(headers, strict=False)
        except RemoteProtocolError as exc:  # not even NATS/1.0: keep the message, not them
            log.warning("ignoring malformed message headers: %s", exc)
            return None

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        handler = self._raw_handlers.get(sid)
        if handler is None:
            await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]
            return
        # Pull-consumer inboxes: no nats-py Msg, no header parsing, no queue.
        stats = self.stats
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        try:
            handler(subject.decode(), reply.decode(), data, headers or None)
        except Exception:
            log.exception("message handler for %r failed", subject)


class FastParser:
    """Stands in for nats-py's protocol parser on our :class:`NatsClient`.

    Frames come from the pure :func:`~aioclients.jetstream._protocol._wire.scan`;
    messages for raw handlers (pull inboxes) are dispatched synchronously, the
    rest go through the client's own ``_process_*`` methods as nats-py's parser
    would send them.

    Once attached to the connection's ``StreamReader`` (:meth:`attach`), bytes
    that hold exactly one whole message for a raw handler (a reply, as a rule)
    are dispatched as they arrive, from the socket's read callback, when the read
    loop is idle (waiting for data, with nothing buffered or half-parsed): the
    handler's waiter then resumes in the next turn of the event loop instead of
    the one after the read loop's (a request/reply round trip saves a task
    switch). Anything else goes to the read loop, in order, exactly as before.
    """

    __slots__ = ("_need", "_parts", "_reader", "_rest", "_size", "_skip", "nc")

    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        self._reader: asyncio.StreamReader | None = None
        #: reads left to scan() as frames, after a large one scan_deliveries refused
        self._skip = 0
        self.reset()

    def reset(self) -> None:
        self._rest = b""
        self._parts: list[bytes] = []  # chunks of a large message still arriving
        self._size = 0
        self._need = 0

    def attach(self, reader: object, writer: object = None) -> None:
        """Take the bytes ``reader`` receives first (see the class docstring).

        ``writer``: the connection's ``StreamWriter``, if at hand. When its protocol
        is asyncio's own ``StreamReaderProtocol`` of ``reader`` (whose
        ``data_received`` does nothing but ``reader.feed_data``), the socket's
        transport is then given the same protocol with ``data_received`` set to
        ours: the bytes skip that one call.
        """
        if reader is self._reader:
            return
        if (
            not isinstance(reader, asyncio.StreamReader)
            or not isinstance(getattr(reader, "_buffer", None), bytearray)
            or not hasattr(reader, "_waiter")
            or "feed_data" in vars(reader)
        ):
            self._reader = None
            report_fast_path_off(
                "dispatching replies from the socket's read callback",
                "its transport has no asyncio.StreamReader with the expected internals; "
                "replies go through its read loop",
                level=logging.INFO,
            )
            return
        self._reader = reader
        # A partial, not a closure: the socket's bytes reach _feed in one call.
        feed = functools.partial(self._feed, reader, reader.feed_data)
        reader.feed_data = feed  # type: ignore[method-assign]
        protocol = getattr(writer, "_protocol", None)
        transport = getattr(writer, "transport", None)
        if (
            type(protocol) is asyncio.StreamReaderProtocol
            and getattr(protocol, "_stream_reader", None) is reader
            and "data_received" not in vars(protocol)
            and transport is not None
            and not transport.is_closing()
            and transport.get_protocol() is protocol
        ):
            protocol.data_received = feed  # type: ignore[method-assign]
            # set_protocol, documented for every transport: one that keeps the
            # protocol's bound data_received (uvloop's) takes the new one.
            transport.set_protocol(protocol)

    def _feed(
        self, reader: asyncio.StreamReader, feed: Callable[[bytes], None], data: bytes
    ) -> None:
        """``reader.feed_data``: hand ``data`` to a reply handler now if it is one
        whole message alone for one and the read loop is idle, else to ``feed``
        (the reader's own), for the read loop. (One function: it runs per reply.)"""
        nc = self.nc
        # Only while the read loop is idle, waiting for these bytes, with nothing
        # held (a frame still arriving), and connected (the status: is_connected is
        # a property call; while draining the read loop takes everything).
        waiter = reader._waiter  # type: ignore[attr-defined]
        if (
            waiter is None
            or self._reader is not reader
            or self._need
            or self._rest
            or reader._buffer  # type: ignore[attr-defined]
            or nc._status != _CONNECTED
            or waiter.done()
        ):
            feed(data)
            return
        # The usual reply: one whole message, alone (payloads handed on are bytes).
        # Anything else (bursts of deliveries, frames cut short) is the read loop's:
        # taking bursts here measured slower for consume (~10-20%).
        if type(data) is not bytes:
            data = bytes(data)
        reader_of_frames = nc._frame_reader
        if reader_of_frames is not None and data and data[0] == 72:  # b"H": with headers
            # A reply of its inbox's usual form (a Direct Get's plain value), read
            # whole in one match: what single_message and a match of the header
            # block would read, in several calls. Sizes that are not the frame's
            # (two frames, one cut short) leave the read to single_message.
            match, waiters, _ = reader_of_frames
            m = match(data)
            if m is not None:
                groups = m.groups()
                hsize = len(groups[2])
                size = len(groups[-1])
                hsize_read, total = known_sizes(groups[1]) or frame_sizes(groups[1])
                if hsize_read == hsize and total == hsize + size:
                    stats = nc.stats
                    stats["in_msgs"] += 1
                    stats["in_bytes"] += size
                    # The waiter, here rather than in a handler of the inbox's: a
                    # Python call fewer per reply. (A subject that is no UTF-8 is
                    # no reply subject of ours.)
                    try:
                        entry = waiters.pop(groups[0].decode(), None)
                    except UnicodeDecodeError:
                        log.exception("message handler for %r failed", groups[0])
                        return
                    if entry is not None:  # (else timed out or abandoned earlier)
                        future = entry[0]
                        if not future.done():
                            future.set_result(groups)
                    return
        one = single_message(data)
        if one is None:
            feed(data)
            return
        handler = nc._reply_handlers.get(one[2])
        if handler is None:  # not a reply (e.g. a pull delivery): the read loop's, as ever
            feed(data)
            return
        _, subject, _, reply, header, payload = one
        stats = nc.stats
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(payload)
        try:
            handler(subject.decode(), reply.decode(), payload, header)
        except Exception:
            log.exception("message handler for %r failed", subject)

    def _keep(self, rest: bytes, need: int) -> None:
        """Hold the start of a frame still arriving, for the next ``parse``."""
        if need > len(rest):
            self._parts = [rest]
            self._size = len(rest)
            self._need = need
            self._rest = b""
        else:
            self._rest = rest

    async def parse(self, data: bytes = b"") -> None:
        """Dispatch one read of the connection's read loop (at most 32 KiB).

        While a paced subscription is open (``subscribe_runs(paced=True)``: an
        ordered consumer's) and the socket brought more than this read, the rest
        waits for the next turn of the event loop: the tasks this read woke (the
        ordered iterator) take what was handed to them first. Otherwise the read
        loop makes the objects of a whole socket read (up to 256 KiB, some 1,300
        deliveries of 100 bytes) before any of them is taken: CPython's cyclic
        garbage collector, which runs after every ~700 objects made and not freed,
        traverses them, and the iterator tells its pull core of them (which sends
        the next pull) only once per socket read.
        """
        await self._parse(data)
        reader = self._reader
        if (
            reader is not None
            and reader._buffer  # type: ignore[attr-defined]
            and getattr(self.nc, "_paced", None)
        ):
            await asyncio.sleep(0)

    async def _parse(self, data: bytes) -> None:
        if self._need:
            # A large message is arriving in pieces: join once it is complete,
            # instead of re-joining (and re-scanning) at every read.
            self._parts.append(data)
            self._size += len(data)
            if self._size < self._need:
                return
            buffer = b"".join(self._parts)
            self._parts = []
            self._need = 0
        else:
            buffer = self._rest + data if self._rest else bytes(data)
        nc = self.nc
        runs = getattr(nc, "_run_handlers", None) or _NO_RUNS
        # The usual read of a consume: deliveries to one run handler, read as columns
        # (with headers: a headers-only consumer's, such as KV keys()'s).
        deliveries = with_headers = None
        used = 0
        if runs:
            if self._skip:
                self._skip -= 1
            elif buffer[:1] == b"H":
                with_headers = scan_header_deliveries(buffer, runs)
                if with_headers is not None:
                    used = with_headers[5]
                elif len(buffer) >= _LARGE_READ and first_header_delivery_sid(buffer) in runs:
                    # Refused after its split of the whole read (a status among the
                    # deliveries, a body holding a joint): try again some reads later.
                    self._skip = _SKIP_AFTER_REFUSAL
            else:
                deliveries = scan_deliveries(buffer, runs)
                if deliveries is not None:
                    used = deliveries[5]
                elif len(buffer) >= _LARGE_READ and first_delivery_sid(buffer) in runs:
                    # Refused after its split of the whole read (payloads holding
                    # CRLFs, perhaps): try again some reads later.
                    self._skip = _SKIP_AFTER_REFUSAL
        try:
            frames, used, need = scan(buffer, used)
            if need > _MAX_FRAME:
                # A message announced larger than the server lets anyone publish:
                # refused now, not buffered for as long as the server sends.
                max_payload = getattr(self.nc, "_max_payload", 0)
                if not isinstance(max_payload, int) or need > max_payload + _FRAME_SLACK:
                    raise RemoteProtocolError(
                        f"a message of {need} bytes announced, larger than the "
                        f"server's max_payload ({max_payload!r})",
                        offset=used,
                    )
        except RemoteProtocolError as exc:
            self.reset()
            log.error("NATS protocol error: %s", exc)
            raise nats.errors.ProtocolError() from exc
        self._rest = b""
        self._keep(buffer[used:], need)
        handlers = nc._raw_handlers
        fast = getattr(nc, "_bytes_handlers", None) or _NO_HANDLERS
        stats = nc.stats
        if deliveries is not None:
            self._deliver(deliveries, runs)
        elif with_headers is not None:
            self._deliver_with_headers(with_headers, runs)
        if runs and frames:
            # The usual burst of a consume: every frame a delivery to one run handler.
            run = _whole_run(frames, runs)
            if run is not None:
                stats["in_msgs"] += len(frames)
                stats["in_bytes"] += sum(map(len, map(_PAYLOAD, frames)))
                try:
                    run(frames)
                except Exception:
                    log.exception("message handler for %r failed", frames[0][1])
                return
        count = size = 0  # messages given to the fast handlers: added to stats once
        n = len(frames)
        i = 0
        try:
            while i < n:
                frame = frames[i]
                i += 1
                kind = frame[0]
                if kind == MSG:
                    sid = frame[2]
                    if runs:
                        run = runs.get(sid)
                        if run is not None:
                            # The messages of this subscription that follow, up to
                            # the next frame of anything else: one call for all.
                            first = i - 1
                            while i < n and (following := frames[i])[0] == MSG:
                                if following[2] != sid:
                                    break
                                i += 1
                            batch = frames[first:i] if first or i < n else frames
                            count += i - first
                            size += sum(map(len, map(_PAYLOAD, batch)))
                            try:
                                run(batch)
                            except Exception:
                                log.exception("message handler for %r failed", frame[1])
                            continue
                    _, subject, sid, reply, header, payload = frame
                    handler = fast.get(sid)
                    if handler is not None:  # a pull consumer: subject and reply as they came
                        count += 1
                        size += len(payload)
                        try:
                            handler(subject, reply, payload, header)
                        except Exception:
                            log.exception("message handler for %r failed", subject)
                        continue
                    named = handlers.get(sid)
                    if named is None:
                        await nc._process_msg(sid, subject, reply, payload, header)
                        continue
                    stats["in_msgs"] += 1
                    stats["in_bytes"] += len(payload)
                    try:
                        named(subject.decode(), reply.decode(), payload, header)
                    except Exception:
                        log.exception("message handler for %r failed", subject)
                elif kind == PING:
                    await nc._process_ping()
                elif kind == PONG:
                    await nc._process_pong()
                elif kind == ERR:
                    await nc._process_err(frame[1].decode("utf-8", "replace").lower())
                elif kind == INFO:
                    await nc._process_info(json.loads(frame[1]))
        finally:
            if count:
                stats["in_msgs"] += count
                stats["in_bytes"] += size

    def _deliver(self, deliveries: tuple[Any, ...], runs: dict[int, RunHandler]) -> None:
        """Hand the run :func:`scan_deliveries` read to its subscription's handler
        of columns, or as frames to its run handler."""
        sid, subjects, replies, payloads, sizes, _ = deliveries
        nc = self.nc
        stats = nc.stats
        stats["in_msgs"] += len(sizes)
        stats["in_bytes"] += sum(sizes)
        handler = (getattr(nc, "_deliveries_handlers", None) or _NO_DELIVERIES).get(sid)
        try:
            if handler is not None:
                handler(subjects, replies, payloads)
                return
            runs[sid](_frames_of(sid, subjects, replies, repeat(None, len(sizes)), payloads))
        except Exception:
            log.exception("message handler for %r failed", subjects[0])

    def _deliver_with_headers(
        self, deliveries: tuple[Any, ...], runs: dict[int, RunHandler]
    ) -> None:
        """Hand the run :func:`scan_header_deliveries` read to its subscription's
        handler of such columns, or as frames to its run handler."""
        sid, subjects, replies, headers, payloads, _ = deliveries
        nc = self.nc
        stats = nc.stats
        count = len(payloads)
        stats["in_msgs"] += count
        stats["in_bytes"] += sum(map(len, payloads))
        handlers = getattr(nc, "_header_deliveries_handlers", None) or _NO_HEADER_DELIVERIES
        handler = handlers.get(sid)
        try:
            if handler is not None:
                handler(subjects, replies, headers, payloads)
                return
            runs[sid](_frames_of(sid, subjects, replies, headers, payloads))
        except Exception:
            log.exception("message handler for %r failed", subjects[0])


def _frames_of(
    sid: int,
    subjects: Sequence[bytes],
    replies: Sequence[bytes],
    headers: Iterable[bytes | None],
    payloads: Sequence[bytes],
) -> list[Frame]:
    """A run read as columns, as the frames :func:`scan` makes of it (for a run
    handler that takes no columns)."""
    count = len(payloads)
    return list(
        zip(
            repeat(MSG, count),
            subjects,
            repeat(sid, count),
            replies,
            headers,
            payloads,
            strict=True,
        )
    )


def _whole_run(frames: list[Frame], runs: dict[int, RunHandler]) -> RunHandler | None:
    """The run handler that takes all of ``frames``, if every one is a message of
    one subscription that has one (``parse`` would find them one run); else None.

    Checks in C, not a Python step per frame: only a message frame has a third
    item (its sid), so ``_SID`` fails on anything else.
    """
    first = frames[0]
    if first[0] != MSG:
        return None
    run = runs.get(first[2])
    if run is None:
        return None
    try:
        sids = list(map(_SID, frames))
    except IndexError:  # a PING, PONG, +OK, -ERR or INFO among them
        return None
    return run if sids.count(sids[0]) == len(sids) else None


class ConnectionEvents(Protocol):
    """Told when a connection drops, comes back, and closes for good (see
    :meth:`NatsTransport.add_listener`)."""

    def connection_lost(self) -> None: ...
    def connection_restored(self) -> None: ...
    def connection_closed(self) -> None: ...


#: the attribute of a nats-py client that holds its listeners
_LISTENERS = "_aioclients_listeners"


def _tell(listeners: weakref.WeakSet[ConnectionEvents], event: str) -> None:
    for listener in list(listeners):
        try:
            getattr(listener, event)()
        except Exception:  # one listener's bug must not keep the news from the others
            log.exception("a connection listener failed on %s", event)


class NatsTransport:
    """Publishing and subscribing through one nats-py client."""

    __slots__ = ("_socket", "_writer", "_written", "nc", "sync_delivery")

    def __init__(self, nc: NATS, *, sync_delivery: bool = True) -> None:
        check_nats_py(nc)
        self.nc = nc
        self._written: asyncio.Future[None] | None = None
        # write_now's cache: the connection's writer, and its socket's transport
        self._writer: object = None
        self._socket: asyncio.WriteTransport | None = None
        #: deliver messages synchronously from the read loop (see ``subscribe``)
        self.sync_delivery = sync_delivery

    def check_open(self) -> None:
        if self.nc.is_closed:
            raise JetStreamClosedError("the NATS connection is closed; open a new one")

    def add_listener(self, listener: ConnectionEvents) -> None:
        """Tell ``listener`` when the connection drops, comes back, and closes for
        good, before the callbacks the client had (which still run, after).

        Listeners are held weakly, in one set per connection, whose callbacks are
        installed once: a connection shared by many short-lived contexts neither
        keeps them alive nor grows a chain of callbacks.
        """
        nc = self.nc
        listeners: weakref.WeakSet[ConnectionEvents] | None = getattr(nc, _LISTENERS, None)
        if listeners is None:
            listeners = weakref.WeakSet()
            setattr(nc, _LISTENERS, listeners)
        listeners.add(listener)
        self.install_listener_callbacks()

    def install_listener_callbacks(self) -> None:
        """Put the listeners' callbacks in front of the client's, unless they are
        there (``nc.connect()`` after the context was made replaces them)."""
        nc = self.nc
        listeners: weakref.WeakSet[ConnectionEvents] | None = getattr(nc, _LISTENERS, None)
        if listeners is None or getattr(nc._closed_cb, _LISTENERS, None) is listeners:
            return
        previous_disconnected = nc._disconnected_cb
        previous_reconnected = nc._reconnected_cb
        previous_closed = nc._closed_cb

        async def disconnected() -> None:
            _tell(listeners, "connection_lost")
            if previous_disconnected is not None:
                await previous_disconnected()

        async def reconnected() -> None:
            _tell(listeners, "connection_restored")
            if previous_reconnected is not None:
                await previous_reconnected()

        async def closed() -> None:
            _tell(listeners, "connection_closed")
            if previous_closed is not None:
                await previous_closed()

        setattr(closed, _LISTENERS, listeners)  # marks the callbacks as installed
        nc._disconnected_cb = disconnected
        nc._reconnected_cb = reconnected
        nc._closed_cb = closed

    def server_identity(self) -> tuple[str, str]:
        """``(server_id, version)`` from the INFO of the server connected now
        (empty strings where not known, e.g. before the first connect)."""
        info = getattr(self.nc, "_server_info", None)
        if not isinstance(info, dict):
            return "", ""
        return str(info.get("server_id") or ""), str(info.get("version") or "")

    def frame(
        self,
        subject: str,
        payload: bytes | bytearray | memoryview,
        reply: str,
        headers: Mapping[str, str | list[str]] | None,
    ) -> bytes:
        """Build a PUB or HPUB frame, checking the size against ``max_payload``."""
        if not isinstance(payload, (bytes, bytearray)):
            if not isinstance(payload, memoryview):
                raise InvalidArgumentError(f"payload must be bytes, got {type(payload).__name__}")
            # len() of a view counts items, not bytes, and a strided view cannot be
            # joined: take its bytes.
            payload = payload.tobytes()
        size = len(payload)
        if headers:
            hdr = encode_headers(headers)
            total = len(hdr) + size
            self._check_size(total)
            return b"".join(
                (
                    f"HPUB {subject} {reply} {len(hdr)} {total}\r\n".encode(),
                    hdr,
                    payload,
                    _CRLF,
                )
            )
        self._check_size(size)
        return b"".join((f"PUB {subject} {reply} {size}\r\n".encode(), payload, _CRLF))

    def _check_size(self, size: int) -> None:
        limit = self.nc.max_payload
        if limit and size > limit:
            raise MaxPayloadError(
                f"message of {size} bytes (headers + payload) exceeds the server's "
                f"max_payload of {limit} bytes; split it or raise max_payload on the server"
            )

    def _admit(self, frame: bytes) -> NATS:
        """The client, if ``frame`` may be queued now: open, and while disconnected
        only as far as nats-py's reconnect buffer reaches."""
        nc = self.nc
        if nc.is_closed:
            raise JetStreamClosedError("the NATS connection is closed; open a new one")
        if not nc.is_connected and (
            nc._max_pending_size <= 0 or nc.pending_data_size + len(frame) > nc._max_pending_size
        ):
            raise ConnectError(
                "not connected to NATS and the reconnect buffer is full; retry after reconnect"
            )
        return nc

    def write_now(self, frame: bytes) -> bool:
        """Write ``frame`` to the socket at once if nothing is queued before it and
        the socket's buffer is empty (see ``send(..., immediate=True)``).

        Returns:
            Whether it was written; if not, nothing happened: ``send`` it.

        Raises:
            ConnectError: disconnected, and the reconnect buffer is full.
            JetStreamClosedError: the connection is closed.
        """
        nc = self.nc
        # (the status, not is_connected: a property call; draining takes the queue)
        if nc._pending_data_size or nc._status != _CONNECTED:
            self._admit(frame)  # raises if the frame may not even be queued
            return False
        # The socket's transport, looked up again only when the connection's writer
        # changed (a reconnect, a TLS upgrade). (An attribute, not getattr with a
        # default: some 300 instructions a request less.)
        try:
            writer = nc._transport._io_writer  # type: ignore[union-attr]
        except AttributeError:  # not a TCP connection (a websocket): no socket to write
            return False
        if writer is not self._writer:
            self._writer = writer
            self._socket = _socket_transport(nc)
        transport = self._socket
        if transport is None or transport.is_closing() or transport.get_write_buffer_size():
            return False
        transport.write(frame)
        return True

    async def send(
        self, frame: bytes, deadline: float, what: str = "the request", *, immediate: bool = False
    ) -> None:
        """Queue a frame built by :meth:`frame` for the socket.

        While more than the client's pending size waits to be written (the server
        reads slower than we write, or not at all), wait for the flusher, but only
        until ``deadline`` (loop time). The frame is queued whole or not at all.

        With ``immediate``, a frame that finds nothing queued before it and the
        socket's buffer empty goes to the socket at once instead of waiting for
        the flusher task's next turn: for a caller that then waits for the answer
        (a request), this saves a task switch per round trip. Callers that send
        bursts (publish_async) leave it off, so that a burst is one write.

        Raises:
            APITimeoutError: the server did not take earlier frames by ``deadline``;
                ``frame`` was not queued.
            ConnectError: disconnected, and the reconnect buffer is full.
            JetStreamClosedError: the connection is closed.
        """
        if immediate and self.write_now(frame):
            return
        nc = self._admit(frame)
        pending = nc._pending_data_size
        if pending and 0 < nc._max_pending_size < pending + len(frame) and nc.is_connected:
            await self._wait_for_room(len(frame), deadline, what)
            nc = self._admit(frame)
        nc._pending.append(frame)
        nc._pending_data_size += len(frame)
        queue = nc._flush_queue
        if queue is not None and queue.empty() and nc.is_connected:
            queue.put_nowait(_flushed())

    async def _wait_for_room(self, size: int, deadline: float, what: str) -> None:
        nc = self.nc
        loop = asyncio.get_running_loop()
        while (
            nc.is_connected
            and nc._pending_data_size
            and nc._pending_data_size + size > nc._max_pending_size
        ):
            remaining = deadline - loop.time()
            self._written = written = kick_flusher(nc, self._written)
            try:
                if remaining <= 0:
                    raise asyncio.TimeoutError
                await asyncio.wait_for(
                    asyncio.shield(written), None if math.isinf(remaining) else remaining
                )
            except asyncio.TimeoutError:
                raise send_timeout_error(what, nc) from None

    async def subscribe(
        self, subject: str, cb: Callable[[NatsMsg], None], *, queue: str = ""
    ) -> Subscription:
        """Subscribe with a plain (non-async) callback.

        Where nats-py's subscription has the internals we expect, messages are
        handed to ``cb`` synchronously from the connection's read loop, instead of
        through a queue and a task per subscription (a large share of the per-message
        cost). Otherwise ``cb`` runs from nats-py's callback task.
        """
        self.check_open()
        try:
            if self.sync_delivery:
                sub = await self.nc.subscribe(subject, queue=queue, pending_bytes_limit=0)
                original = sub._pending_queue
                if hasattr(sub, "_pending_size") and isinstance(original, asyncio.Queue):
                    sub._pending_queue = _SyncSink(sub, cb)  # type: ignore[assignment]
                    while not original.empty():  # anything that raced the swap
                        sub._pending_queue.put_nowait(original.get_nowait())
                    return sub
                report_fast_path_off(
                    "synchronous delivery from the read loop",
                    "its Subscription has no _pending_size or _pending_queue is not an "
                    "asyncio.Queue; messages go through nats-py's callback task",
                )
                await sub.unsubscribe()

            async def deliver(msg: NatsMsg) -> None:
                cb(msg)

            return await self.nc.subscribe(subject, queue=queue, cb=deliver)
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
            raise JetStreamClosedError("the NATS connection is closed; open a new one") from None

    async def subscribe_raw(
        self,
        subject: str,
        handler: RawHandler,
        *,
        replies: bool = False,
        as_bytes: bool = False,
        queue: str = "",
        frame_header: re.Pattern[bytes] | None = None,
        waiters: FrameWaiters | None = None,
    ) -> RawSubscription:
        """Subscribe with a handler of raw messages, called from the read loop.

        On our own :class:`NatsClient` messages skip nats-py's ``Msg`` and header
        parsing entirely; on another client they come through :meth:`subscribe`
        with the parsed headers turned back into a block. With ``replies`` (an
        inbox of replies to requests), a message that arrives alone is handed to
        ``handler`` straight from the socket's read callback, one event-loop turn
        sooner. With ``as_bytes`` (not with ``replies``), our client hands
        ``subject`` and ``reply`` over as the bytes on the wire, undecoded (a
        :data:`BytesHandler`); another client still passes ``str``, so such a
        handler must take both. ``queue``: a queue group to join.

        ``frame_header`` and ``waiters`` (with ``replies``): on our client, a
        reply that arrives alone, without a reply subject, and whose header block
        matches ``frame_header`` (compiled again with ``re.DOTALL``) is read whole
        with one match, and the future of its entry in ``waiters`` (the caller's
        table of outstanding requests, which it keeps, never replaces) takes the
        match's groups instead (see :data:`FrameWaiters`); every other message
        still goes to ``handler``.
        """
        self.check_open()
        nc = self.nc
        raw = getattr(nc, "_raw_handlers", None)
        fast = getattr(nc, "_bytes_handlers", None)
        try:
            if isinstance(raw, dict):
                sub = await nc.subscribe(subject, queue=queue, pending_bytes_limit=0)
                if as_bytes and not replies and isinstance(fast, dict):
                    fast[sub._id] = cast("BytesHandler", handler)
                    return RawSubscription(self, sub)
                raw[sub._id] = handler
                reply_handlers = getattr(nc, "_reply_handlers", None)
                if replies and isinstance(reply_handlers, dict):
                    reply_handlers[sub._id] = handler
                    readers = getattr(nc, "_frame_readers", None)
                    if (
                        frame_header is not None
                        and waiters is not None
                        and isinstance(readers, tuple)
                    ):
                        match = reply_frame_match(sub._id, frame_header)
                        readers = (*readers, (match, waiters, sub._id))
                        nc._frame_readers = readers  # type: ignore[attr-defined]
                        nc._frame_reader = readers[0]  # type: ignore[attr-defined]
                return RawSubscription(self, sub)

            report_fast_path_off(
                "raw message handling",
                "the nats-py client was not opened by aioclients.jetstream.connect(), so "
                "nats-py parses every message",
                level=logging.INFO,
            )

            def via_msg(msg: NatsMsg) -> None:
                handler(msg.subject, msg.reply, msg.data, _header_block(msg.headers))

            return RawSubscription(self, await self.subscribe(subject, via_msg, queue=queue))
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
            raise JetStreamClosedError("the NATS connection is closed; open a new one") from None

    async def subscribe_runs(
        self,
        subject: str,
        handler: RunHandler,
        deliveries: DeliveriesHandler | None = None,
        with_headers: HeaderDeliveriesHandler | None = None,
        *,
        paced: bool = False,
    ) -> RawSubscription:
        """Subscribe with a handler of runs of messages, called from the read loop.

        On our own :class:`NatsClient`, the messages of one socket read that follow
        each other on this subscription come in one call, as the scanner made
        them (subject and reply undecoded): one Python call per run instead of one
        per message. On another client each message comes alone, as a run of one
        (subject and reply encoded back to bytes).

        ``handler`` must not raise for one message it cannot handle: it handles
        (or logs and drops) that one and goes on with the rest of the run. What it
        lets out is logged, and the rest of the run is lost.

        ``deliveries``, if given, takes instead the runs that fill a whole read and
        hold only deliveries with a reply and no headers (a pull consumer's, as a
        rule), as columns: ``deliveries(subjects, replies, payloads)``
        (see :data:`DeliveriesHandler`), with no frame made per message. Whatever
        ``handler`` would do with such a run as frames, it must do the same.
        ``with_headers`` likewise takes the runs that fill a whole read and hold
        only deliveries with a reply and a header block that is no status:
        ``with_headers(subjects, replies, headers, payloads)``.

        ``paced``: while this subscription is open, the read loop lets the tasks a
        32 KiB read woke run before it parses the rest of a larger socket read
        (see ``FastParser.parse``).
        """
        self.check_open()
        nc = self.nc
        runs = getattr(nc, "_run_handlers", None)
        try:
            if isinstance(runs, dict):
                sub = await nc.subscribe(subject, pending_bytes_limit=0)
                runs[sub._id] = handler
                columns = getattr(nc, "_deliveries_handlers", None)
                if deliveries is not None and isinstance(columns, dict):
                    columns[sub._id] = deliveries
                headed = getattr(nc, "_header_deliveries_handlers", None)
                if with_headers is not None and isinstance(headed, dict):
                    headed[sub._id] = with_headers
                pacing = getattr(nc, "_paced", None)
                if paced and isinstance(pacing, dict):
                    pacing[sub._id] = True
                return RawSubscription(self, sub)
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
            raise JetStreamClosedError("the NATS connection is closed; open a new one") from None

        def one_by_one(
            subject: str | bytes, reply: str | bytes, data: bytes, header: bytes | None
        ) -> None:
            if isinstance(subject, str):
                subject = subject.encode()
            if isinstance(reply, str):
                reply = reply.encode()
            handler([(MSG, subject, 0, reply, header, data)])

        return await self.subscribe_raw(subject, one_by_one, as_bytes=True)

    def send_nowait(self, frame: bytes) -> None:
        """Queue a frame without awaiting: the flusher task writes it soon after.

        While disconnected, nats-py keeps the frame for after the reconnect, up to
        its reconnect buffer size.
        """
        nc = self.nc
        # The hot path (acks): open, and no reconnect buffer to fill. The status is
        # read first: is_connected (a property, also true while draining) only if not.
        if nc._status == _CONNECTED or nc.is_connected:
            nc._pending.append(frame)
            nc._pending_data_size += len(frame)
            queue = nc._flush_queue
            if queue is not None and queue.empty():
                queue.put_nowait(_flushed())
            return
        nc = self._admit(frame)
        nc._pending.append(frame)
        nc._pending_data_size += len(frame)

    async def round_trip(self, timeout: float) -> None:
        """PING and wait for the PONG: everything the server sent before is read.

        Unlike nats-py's ``flush()``, a timeout or cancellation here never leaves a
        cancelled future in the client's PONG queue (nats-py would call
        ``set_result`` on it when the PONG comes, killing its read loop).
        """
        nc = self.nc
        self.check_open()
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.send_nowait(b"PING\r\n")  # never waits on a server that does not read
        nc._pongs.append(future)
        await asyncio.wait_for(asyncio.shield(future), timeout)

    def new_inbox(self) -> str:
        return self.nc.new_inbox()

    def unsubscribe_nowait(self, sub: Subscription) -> None:
        """Drop a subscription at once; the UNSUB goes out with the next flush.

        nats-py's ``unsubscribe`` may wait (unbounded) for a forced flush.
        """
        nc = self.nc
        if nc.is_closed or sub._closed:
            return
        sub._closed = True
        sub._stop_processing()
        nc._remove_sub(sub._id)
        if nc.is_connected:
            self.send_nowait(f"UNSUB {sub._id}\r\n".encode())


class RawSubscription:
    """A subscription made by :meth:`NatsTransport.subscribe_raw`."""

    __slots__ = ("_sub", "_transport", "closed")

    def __init__(self, transport: NatsTransport, sub: Subscription) -> None:
        self._transport = transport
        self._sub = sub
        self.closed = False

    def unsubscribe_nowait(self, *, send: bool = True) -> None:
        """Stop delivery at once; the UNSUB goes out with the next flush."""
        if self.closed:
            return
        self.closed = True
        nc = self._transport.nc
        sid = self._sub._id
        for name in (
            "_reply_handlers",
            "_raw_handlers",
            "_bytes_handlers",
            "_run_handlers",
            "_deliveries_handlers",
            "_header_deliveries_handlers",
            "_paced",
        ):
            handlers = getattr(nc, name, None)
            if isinstance(handlers, dict):
                handlers.pop(sid, None)
        readers = getattr(nc, "_frame_readers", None)
        if readers:
            readers = tuple(reader for reader in readers if reader[2] != sid)
            nc._frame_readers = readers  # type: ignore[attr-defined]
            nc._frame_reader = readers[0] if readers else None  # type: ignore[attr-defined]
        if nc.is_closed:
            return
        nc._remove_sub(sid)
        if send and nc.is_connected:
            self._transport.send_nowait(f"UNSUB {sid}\r\n".encode())

    async def drain(self, timeout: float) -> None:
        """Unsubscribe, and return once everything the server sent before is read.

        A round trip (PING/PONG) after the UNSUB proves the server has nothing
        more for this subscription in flight.
        """
        if self.closed:
            return
        nc = self._transport.nc
        if nc.is_closed or not nc.is_connected:
            self.unsubscribe_nowait()
            return
        try:
            self._transport.send_nowait(f"UNSUB {self._sub._id}\r\n".encode())
            await self._transport.round_trip(timeout)
        except (nats.errors.Error, asyncio.TimeoutError, AioClientsError) as exc:
            log.debug("round trip after UNSUB failed: %s", exc)
        finally:
            self.unsubscribe_nowait(send=False)


class ReplyInbox:
    """A private inbox that collects replies in arrival order.

    ``get(timeout)`` returns buffered replies without awaiting; it only parks
    (on one future and one timer) when nothing is buffered.
    """

    def __init__(self, transport: NatsTransport) -> None:
        self.transport = transport
        self.subject = transport.new_inbox()
        self._buffer: collections.deque[NatsMsg] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._sub: Subscription | None = None
        self._closed = False

    async def open(self) -> None:
        self._sub = await self.transport.subscribe(self.subject, self._on_msg)

    def _on_msg(self, msg: NatsMsg) -> None:
        self._buffer.append(msg)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close_now(self) -> None:
        """The context is closing: wake a waiting ``get`` so that it raises at once."""
        self._closed = True
        if self._waiter is not None:
            _expire(self._waiter)

    async def get(self, timeout: float, what: str) -> NatsMsg:
        if self._closed:
            raise JetStreamClosedError("this JetStream context is closed")
        if self._buffer:
            return self._buffer.popleft()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter
        timer = loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
        if self._closed:
            raise JetStreamClosedError("this JetStream context is closed")
        if not self._buffer:
            self.transport.check_open()
            raise APITimeoutError(f"no reply to {what} within {timeout}s")
        return self._buffer.popleft()

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        self._buffer.clear()
        if sub is not None:
            self.transport.unsubscribe_nowait(sub)


class _SyncSink:
    """Stands in for a nats-py subscription's queue: ``put_nowait`` delivers at once."""

    __slots__ = ("_cb", "_sub")

    def __init__(self, sub: Subscription, cb: Callable[[NatsMsg], None]) -> None:
        self._sub = sub
        self._cb = cb

    def put_nowait(self, msg: NatsMsg) -> None:
        self._sub._pending_size = 0
        try:
            self._cb(msg)
        except Exception:
            # Never let a handler bug break the connection's read loop.
            log.exception("message handler for %s failed", msg.subject)

    def qsize(self) -> int:
        return 0

    def empty(self) -> bool:
        return True

    def task_done(self) -> None:
        pass

    async def join(self) -> None:
        return None


def kick_flusher(nc: NATS, current: asyncio.Future[None] | None) -> asyncio.Future[None]:
    """A future the client's flusher resolves once it has written what is queued now.

    ``current`` (an earlier kick still waiting) is shared rather than queueing
    another. Where the flusher cannot be kicked (its queue is full, or it is not
    running), the future resolves after a short while instead, so that callers
    re-check their condition rather than wait for nothing.
    """
    if current is not None and not current.done():
        return current
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    queue = nc._flush_queue
    task = nc._flusher_task
    try:
        if queue is None or task is None or task.done():
            raise asyncio.QueueFull
        queue.put_nowait(future)
    except asyncio.QueueFull:
        loop.call_later(0.01, _expire, future)
    return future


def _socket_transport(nc: NATS) -> asyncio.WriteTransport | None:
    writer = getattr(nc._transport, "_io_writer", None)
    transport = getattr(writer, "transport", None)
    if isinstance(transport, asyncio.WriteTransport):
        return transport  # asyncio's own (the isinstance check is the cheaper test)
    # uvloop's transports have the methods but are not registered as
    # asyncio.WriteTransport subclasses: duck-type them.
    if callable(getattr(transport, "abort", None)) and callable(
        getattr(transport, "get_write_buffer_size", None)
    ):
        return cast("asyncio.WriteTransport", transport)
    if transport is not None:
        report_fast_path_off(
            "writing requests straight to the socket",
            f"its event loop's transport ({type(transport).__name__}) has no abort() or "
            "get_write_buffer_size(); requests go through its flusher, and a stuck socket "
            "is left for the server to close",
            level=logging.INFO,
        )
    return None


def unsent_bytes(nc: NATS) -> int:
    """Bytes queued in the client plus those its socket has not written yet."""
    transport = _socket_transport(nc)
    buffered = transport.get_write_buffer_size() if transport is not None else 0
    return nc._pending_data_size + buffered


def abort_socket(nc: NATS) -> None:
    """Close the client's socket at once, dropping whatever it has not written."""
    transport = _socket_transport(nc)
    if transport is not None:
        transport.abort()


async def close_websocket_session(nc: NATS, bound: float) -> None:
    """Close the aiohttp session a failed WebSocket connect left open, within ``bound``.

    nats-py before 2.16 keeps it when the first connect fails (its close returns
    early on a client that never connected): an unclosed session, reported when
    it is collected. A TCP transport has no session: nothing to do.
    """
    session = getattr(getattr(nc, "_transport", None), "_client", None)
    close = getattr(session, "close", None)
    if close is None or getattr(session, "closed", True):
        return
    try:
        await asyncio.wait_for(close(), bound)
    except (OSError, asyncio.TimeoutError) as exc:
        log.debug("closing the WebSocket session of a failed connect: %r", exc)


async def close_connection(nc: NATS, bound: float) -> None:
    """Close ``nc`` within about ``bound`` seconds (twice that at worst).

    What is queued gets ``bound`` seconds to be written; a server that does not
    read it by then has the socket aborted (and the rest dropped), since
    nats-py's close would otherwise wait for those bytes forever.
    """
    if nc.is_closed:
        return
    if nc.is_connected and nc._pending_data_size:
        written = kick_flusher(nc, None)
        try:
            await asyncio.wait_for(asyncio.shield(written), bound)
        except asyncio.TimeoutError:
            log.warning(
                "the NATS server did not read the last %d bytes within %.1fs; "
                "closing the connection without them",
                unsent_bytes(nc),
                bound,
            )
            nc._pending = []
            nc._pending_data_size = 0
            abort_socket(nc)
    task = asyncio.ensure_future(nc.close())
    try:
        done, _ = await asyncio.wait({task}, timeout=bound)
        if not done:
            # Waiting for the socket to flush: a server that does not read never lets it.
            log.warning("the NATS connection did not close within %.1fs; aborting it", bound)
            nc._pending = []
            nc._pending_data_size = 0
            abort_socket(nc)
            done, _ = await asyncio.wait({task}, timeout=bound)
    except asyncio.CancelledError:
        abort_socket(nc)
        raise
    if not done:
        task.cancel()
        log.warning("the NATS connection did not close after the socket was aborted")
        return
    exc = None if task.cancelled() else task.exception()
    if exc is not None:
        log.debug("closing the NATS connection: %s", redact_text(str(exc)))


def _flushed() -> asyncio.Future[None]:
    """A completed future for the flusher's queue (it only sets unfinished ones)."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


def _header_block(headers: Mapping[str, Any] | None) -> bytes | None:
    """Rebuild a header block from nats-py's parsed headers (status line included)."""
    if not headers:
        return None
    rest = {k: v for k, v in headers.items() if k not in ("Status", "Description")}
    status = headers.get("Status")
    block = encode_headers(rest) if rest else b"NATS/1.0\r\n\r\n"
    if status:
        desc = headers.get("Description") or ""
        first = f"NATS/1.0 {status} {desc}".rstrip().encode()
        block = first + block[len(b"NATS/1.0") :]
    return block


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_result(None)
