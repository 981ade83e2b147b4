"""The boundary with nats-py: everything that touches ``nats.aio.client.Client``.

We build PUB/HPUB frames ourselves (so headers may repeat a key and the hot
publish path does no per-message validation twice) and hand them to the
client's outgoing buffer, exactly as ``Client.publish`` does after its checks.
If the client lacks the internals we rely on (a future nats-py), we fall back
to its public ``publish``. nats-py exceptions are mapped here and never leak.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Mapping
from typing import Any

import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg as NatsMsg
from nats.aio.subscription import Subscription

from aioclients._errors import ConnectError, InvalidArgumentError
from aioclients.jetstream._errors import (
    APITimeoutError,
    JetStreamClosedError,
    MaxPayloadError,
)
from aioclients.jetstream._protocol._headers import decode_header_lines, encode_headers

__all__ = ("NatsClient", "NatsTransport", "ReplyInbox")

log = logging.getLogger("aioclients.jetstream")

_CRLF = b"\r\n"


class NatsClient(NATS):
    """The nats-py client that :func:`aioclients.jetstream.connect` opens.

    Identical to nats-py's, except for header parsing, which nats-py does with a
    Python loop over every character of every header name (half the cost of
    reading a Direct Get batch). Here a repeated header key also keeps all its
    values, as a list, instead of only the last one.
    """

    @staticmethod
    def _parse_header_lines(raw: bytes) -> dict[str, Any]:
        return decode_header_lines(raw, strict=False)


class NatsTransport:
    """Publishing and subscribing through one nats-py client."""

    __slots__ = ("nc", "sync_delivery")

    def __init__(self, nc: NATS, *, sync_delivery: bool = True) -> None:
        self.nc = nc
        #: deliver messages synchronously from the read loop (see ``subscribe``)
        self.sync_delivery = sync_delivery

    def check_open(self) -> None:
        if self.nc.is_closed:
            raise JetStreamClosedError("the NATS connection is closed; open a new one")

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

    async def send(self, frame: bytes) -> None:
        """Queue a frame built by :meth:`frame` for the socket."""
        nc = self.nc
        if nc.is_closed:
            raise JetStreamClosedError("the NATS connection is closed; open a new one")
        if not nc.is_connected and (
            nc._max_pending_size <= 0 or nc.pending_data_size + len(frame) > nc._max_pending_size
        ):
            raise ConnectError(
                "not connected to NATS and the reconnect buffer is full; retry after reconnect"
            )
        await nc._send_command(frame)
        queue = nc._flush_queue
        if queue is not None and queue.empty():
            await nc._flush_pending()

    async def subscribe(self, subject: str, cb: Callable[[NatsMsg], None]) -> Subscription:
        """Subscribe with a plain (non-async) callback.

        Where nats-py's subscription has the internals we expect, messages are
        handed to ``cb`` synchronously from the connection's read loop, instead of
        through a queue and a task per subscription (a large share of the per-message
        cost). Otherwise ``cb`` runs from nats-py's callback task.
        """
        self.check_open()
        try:
            if self.sync_delivery:
                sub = await self.nc.subscribe(subject, pending_bytes_limit=0)
                original = sub._pending_queue
                if hasattr(sub, "_pending_size") and isinstance(original, asyncio.Queue):
                    sub._pending_queue = _SyncSink(sub, cb)  # type: ignore[assignment]
                    while not original.empty():  # anything that raced the swap
                        sub._pending_queue.put_nowait(original.get_nowait())
                    return sub
                await sub.unsubscribe()

            async def deliver(msg: NatsMsg) -> None:
                cb(msg)

            return await self.nc.subscribe(subject, cb=deliver)
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
            raise JetStreamClosedError("the NATS connection is closed; open a new one") from None

    def new_inbox(self) -> str:
        return self.nc.new_inbox()


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
        if sub is not None and not self.transport.nc.is_closed:
            try:
                await sub.unsubscribe()
            except nats.errors.Error as exc:  # closing/draining: nothing left to undo
                log.debug("unsubscribe of %s failed: %s", self.subject, exc)


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


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_result(None)
