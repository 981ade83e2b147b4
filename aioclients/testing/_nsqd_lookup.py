"""nsqd's side of its nsqlookupd TCP connections (nsqd v1.3's ``lookup.go`` and
``lookup_peer.go``), for the nsqd emulator.

One :class:`LookupdPeer` per nsqlookupd: a task connects, sends the magic
``"  V1"`` and IDENTIFY, REGISTERs every topic and channel the state holds,
then sends each registry change as it comes and a PING every ping interval; it
reconnects (and registers everything again) when the connection breaks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
from typing import Protocol

from aioclients._tasks import TaskOwner
from aioclients.testing._nsq_wire import NSQ_VERSION
from aioclients.testing._nsqd_state import NsqdState, RegistryChange

__all__ = ("LookupdPeer", "PeerIdentity", "registry_command")

log = logging.getLogger("aioclients.testing.nsqd")

_LOOKUPD_MAGIC = b"  V1"
_RETRY_DELAY = 0.2


class PeerIdentity(Protocol):
    """What the peer tells nsqlookupd about its nsqd (read at each connect)."""

    tcp_port: int
    http_port: int
    broadcast_address: str
    lookupd_ping_interval: float


def registry_command(change: RegistryChange) -> bytes:
    """``REGISTER topic [channel]`` / ``UNREGISTER ...`` for one change."""
    verb = "REGISTER" if change.registered else "UNREGISTER"
    if change.channel is None:
        return f"{verb} {change.topic}\n".encode()
    return f"{verb} {change.topic} {change.channel}\n".encode()


class LookupdPeer:
    """Registers one nsqd with one nsqlookupd over TCP.

    Args:
        address: ``"host:port"`` of the nsqlookupd TCP listener.
        nsqd: the identity to announce.
        state: the topics and channels to register after each (re)connect.
    """

    def __init__(self, address: str, nsqd: PeerIdentity, state: NsqdState) -> None:
        self.address = address
        self._nsqd = nsqd
        self._state = state
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._tasks: TaskOwner | None = None

    def start(self, tasks: TaskOwner) -> None:
        """Start registering, as a task of ``tasks``."""
        self._queue = asyncio.Queue()
        self._tasks = tasks
        self._task = tasks.start(self._run(), name=f"register with {self.address}")

    async def stop(self) -> None:
        """Stop registering (changes until the next :meth:`start` are dropped)."""
        task, self._task = self._task, None
        if task is not None and self._tasks is not None:
            await self._tasks.cancel(task)

    def send(self, changes: list[RegistryChange]) -> None:
        """Pass registry changes on (dropped while stopped: a start registers all)."""
        if self._task is not None:
            for change in changes:
                self._queue.put_nowait(registry_command(change))

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
                        "tcp_port": self._nsqd.tcp_port,
                        "http_port": self._nsqd.http_port,
                        "hostname": socket.gethostname(),
                        "broadcast_address": self._nsqd.broadcast_address,
                    }
                ).encode()
                writer.write(b"IDENTIFY\n" + struct.pack(">I", len(ident)) + ident)
                await _read_answer(reader)
                # re-send every registration after (re)connecting, as nsqd does
                pending = [registry_command(c) for c in self._state.registrations()]
                while not self._queue.empty():
                    self._queue.get_nowait()
                for command in pending:
                    writer.write(command)
                    await _read_answer(reader)
                while True:
                    try:
                        command = await asyncio.wait_for(
                            self._queue.get(), self._nsqd.lookupd_ping_interval
                        )
                    except asyncio.TimeoutError:
                        command = b"PING\n"
                    writer.write(command)
                    await _read_answer(reader)
            except (OSError, asyncio.IncompleteReadError, ConnectionError) as exc:
                log.debug("nsqd emulator: lookupd %s: %s; retrying", self.address, exc)
            finally:
                if writer is not None:
                    writer.close()
            await asyncio.sleep(_RETRY_DELAY)


async def _read_answer(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">I", await reader.readexactly(4))[0]
    return await reader.readexactly(size)
