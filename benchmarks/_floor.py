"""Just enough NATS for the benchmarks' floors: a bare ``asyncio.Protocol`` on its
own socket, with no client library under it.

A floor subclasses :class:`FloorProtocol` and parses its own frames in
``data_received`` (the work it measures); connecting, the control lines and the
JetStream API requests it needs around that work are here.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Callable
from typing import Any, TypeVar, cast
from urllib.parse import urlparse

P = TypeVar("P", bound="FloorProtocol")

_TICK = os.sysconf("SC_CLK_TCK")


def server_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) process ``pid`` (nats-server) has used so far
    (nan if unknown)."""
    if pid is None:
        return math.nan
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


class FloorProtocol(asyncio.Protocol):
    """CONNECT, one ``SUB _FLOOR.*``, PING/PONG, and one API request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        #: the API request waiting for its reply (on ``_FLOOR.api``)
        self.reply: asyncio.Future[bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # cast, not isinstance: uvloop's transports are not asyncio.Transport subclasses
        self.transport = cast("asyncio.Transport", transport)

    def control(self, line: bytes) -> None:
        """A line that is not a message: answer PING, note the first PONG, fail on -ERR."""
        if line.startswith(b"PING"):
            assert self.transport is not None
            self.transport.write(b"PONG\r\n")
        elif line.startswith(b"PONG") and not self.connected.done():
            self.connected.set_result(None)
        elif line.startswith(b"-ERR"):
            raise RuntimeError(line.decode())

    def api_reply(self, body: bytes) -> None:
        if self.reply is not None and not self.reply.done():
            self.reply.set_result(body)

    async def request(self, subject: str, body: bytes) -> dict[str, Any]:
        assert self.transport is not None
        self.reply = asyncio.get_running_loop().create_future()
        self.transport.write(
            b"PUB %s _FLOOR.api %d\r\n%s\r\n" % (subject.encode(), len(body), body)
        )
        reply = json.loads(await asyncio.wait_for(self.reply, 30))
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return cast("dict[str, Any]", reply)


class PullingFloor(FloorProtocol):
    """A floor that pulls from a consumer and counts the deliveries."""

    #: the pull request's body, ``%d`` the batch
    PULL = b'{"batch":%d,"expires":30000000000,"idle_heartbeat":5000000000}'

    def __init__(self) -> None:
        super().__init__()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.next_subject = b""
        self.count = 0
        #: deliveries still due from the pulls sent
        self.outstanding = 0

    def pull(self, batch: int) -> None:
        assert self.transport is not None
        body = self.PULL % batch
        self.transport.write(b"PUB %s _FLOOR.d %d\r\n%s\r\n" % (self.next_subject, len(body), body))
        self.outstanding += batch


async def open_floor(url: str, factory: Callable[[], P]) -> tuple[asyncio.Transport, P]:
    """Connect a floor protocol to the server at ``url`` and wait for its PONG."""
    u = urlparse(url)
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_connection(factory, u.hostname, u.port)
    connect = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True}
    transport.write(b"CONNECT " + json.dumps(connect).encode() + b"\r\nSUB _FLOOR.* 1\r\nPING\r\n")
    await proto.connected
    return cast("asyncio.Transport", transport), proto
