"""Publishing with acknowledgements: one reply subscription for every publish.

Each publish gets a reply subject ``<inbox>.<n>`` under one wildcard
subscription; ``n`` is a counter, so correlating an ack is one dict lookup.
At most ``max_pending`` acks are outstanding: ``publish_async`` waits for room
(back-pressure) before it sends. Every outstanding ack has a deadline; one
timer, armed for the earliest deadline, fails the overdue ones, so nothing
waits forever on an ack that will not come.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import math
import re
from collections.abc import Mapping
from typing import Any

from nats.aio.msg import Msg as NatsMsg
from nats.aio.subscription import Subscription

from aioclients._errors import InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream._errors import (
    APITimeoutError,
    JetStreamClosedError,
    NoStreamResponseError,
    api_error,
)
from aioclients.jetstream._models import PubAck
from aioclients.jetstream._protocol._names import validate_publish_subject
from aioclients.jetstream._transport import NatsTransport

__all__ = ("AckMux", "parse_pub_ack")

log = logging.getLogger("aioclients.jetstream.publish")


# The server writes acks as {"stream":..,["domain":..,]"seq":N[,"duplicate":true]}; matching
# that shape is several times cheaper than json.loads. Anything else takes the JSON path.
_ACK = re.compile(
    rb'\{"stream":"([^"\\]+)",(?:"domain":"([^"\\]*)",)?"seq":(\d+)(,"duplicate":true)?\}'
)


def parse_pub_ack(msg: NatsMsg, subject: str) -> PubAck:
    """Turn an ack reply into a :class:`PubAck` or raise the error it carries."""
    headers = msg.headers
    if not headers:
        m = _ACK.fullmatch(msg.data)
        if m is not None:
            stream, domain, seq, dup = m.groups()
            return PubAck(
                stream.decode(), int(seq), dup is not None, domain.decode() if domain else None
            )
    elif headers.get("Status") == "503":
        raise NoStreamResponseError(
            f"no stream stores subject {subject!r}",
            code=503,
            hint="create a stream whose subjects include it",
        )
    try:
        data: dict[str, Any] = json.loads(msg.data)
    except ValueError:
        raise RemoteProtocolError(f"publish ack is not JSON: {msg.data[:100]!r}") from None
    err = data.get("error")
    if err:
        raise api_error(err.get("code"), err.get("err_code"), err.get("description", ""))
    try:
        return PubAck(
            stream=data["stream"],
            seq=data["seq"],
            duplicate=bool(data.get("duplicate", False)),
            domain=data.get("domain"),
        )
    except KeyError as exc:
        raise RemoteProtocolError(f"publish ack lacks {exc}: {data!r}") from None


class AckMux:
    """Outstanding publish acks of one JetStream context."""

    def __init__(self, transport: NatsTransport, *, max_pending: int) -> None:
        if max_pending < 1:
            raise InvalidArgumentError(f"max_pending must be >= 1, got {max_pending}")
        self._transport = transport
        self.max_pending = max_pending
        self._prefix = ""
        self._prefix_len = 0
        self._sub: Subscription | None = None
        self._open_lock = asyncio.Lock()
        self._counter = 0
        # token -> (future, subject, deadline)
        self._pending: dict[int, tuple[asyncio.Future[PubAck], str, float]] = {}
        self._room_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._idle = asyncio.Event()
        self._idle.set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._closed = False

    @property
    def outstanding(self) -> int:
        return len(self._pending)

    async def _ensure_open(self) -> None:
        # The first publishes may race here; one subscribes, the others wait. If
        # subscribing fails, that caller gets the error and the next one tries again.
        async with self._open_lock:
            if self._sub is not None:
                return
            inbox = self._transport.new_inbox()
            self._sub = await self._transport.subscribe(inbox + ".*", self._on_ack)
            self._prefix = inbox + "."
            self._prefix_len = len(self._prefix)

    def _on_ack(self, msg: NatsMsg) -> None:
        try:
            token = int(msg.subject[self._prefix_len :])
        except ValueError:
            return
        entry = self._pending.pop(token, None)
        if entry is None:
            return  # timed out or cancelled earlier
        future, subject, _ = entry
        if not future.done():
            try:
                future.set_result(parse_pub_ack(msg, subject))
            except Exception as exc:
                future.set_exception(exc)
        self._released()

    def _released(self) -> None:
        waiters = self._room_waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break
        if not self._pending:
            self._idle.set()

    async def _wait_for_room(self) -> None:
        while len(self._pending) >= self.max_pending:
            if self._closed:
                raise JetStreamClosedError("JetStream context closed")
            waiter = asyncio.get_running_loop().create_future()
            self._room_waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # Pass our wake-up on so that room is not lost.
                if waiter.done() and not waiter.cancelled():
                    self._released()
                raise

    async def publish(
        self,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str | list[str]] | None,
        timeout: float,
    ) -> asyncio.Future[PubAck]:
        """Send one message once there is room; return the future of its ack."""
        if self._closed:
            raise JetStreamClosedError("JetStream context closed")
        validate_publish_subject(subject)
        if self._sub is None:
            await self._ensure_open()
        if len(self._pending) >= self.max_pending:
            await self._wait_for_room()
            if self._closed:  # close() woke us: nothing may be sent any more
                raise JetStreamClosedError("JetStream context closed")
        self._counter += 1
        token = self._counter
        frame = self._transport.frame(subject, payload, self._prefix + str(token), headers)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PubAck] = loop.create_future()
        deadline = loop.time() + timeout
        self._pending[token] = (future, subject, deadline)
        self._idle.clear()
        try:
            await self._transport.send(frame)
        except BaseException:
            if self._pending.pop(token, None) is not None:
                self._released()
            raise
        if deadline < self._timer_at:
            self._arm(loop, deadline)
        return future

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._sweep)

    def _sweep(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        loop = asyncio.get_running_loop()
        now = loop.time()
        overdue = [t for t, (_, _, deadline) in self._pending.items() if deadline <= now]
        for token in overdue:
            future, subject, _ = self._pending.pop(token)
            if not future.done():
                future.set_exception(
                    APITimeoutError(
                        f"no publish ack for {subject!r} in time; the message may or may not "
                        "be stored (publish with msg_id to retry safely)"
                    )
                )
            self._released()
        if self._pending:
            self._arm(loop, min(d for _, _, d in self._pending.values()))

    async def wait_idle(self, timeout: float | None) -> None:
        if not self._pending:
            return
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            raise APITimeoutError(
                f"{len(self._pending)} publish acks still outstanding after {timeout}s"
            ) from None

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = math.inf
        pending, self._pending = self._pending, {}
        for future, subject, _ in pending.values():
            if not future.done():
                future.set_exception(
                    JetStreamClosedError(
                        f"closed before the ack for {subject!r} arrived; the message may or "
                        "may not be stored"
                    )
                )
        self._idle.set()
        for waiter in self._room_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._room_waiters.clear()
        sub, self._sub = self._sub, None
        if sub is not None and not self._transport.nc.is_closed:
            try:
                await sub.unsubscribe()
            except Exception as exc:
                log.debug("ack subscription unsubscribe failed: %s", exc)
