"""An in-process nsqlookupd speaking the real TCP and HTTP protocols, for tests.

Theory of operation. nsqlookupd keeps a registration database: keys
``("client", "", "")``, ``("topic", T, "")`` and ``("channel", T, C)``, each with
the producers (nsqd instances) that registered it. nsqd connects over TCP
(magic ``b"  V1"``), IDENTIFIES with its addresses, then sends ``REGISTER T``,
``REGISTER T C``, ``UNREGISTER ...`` and ``PING``; every answer is
``[size u32][data]`` (``OK``, the IDENTIFY JSON, or an ``E_...`` error text).
When that connection closes, the producer is removed from every registration
while the registrations themselves stay, so ``/lookup`` then answers with an
empty ``producers`` list; when the nsqd comes back and registers again, it
reappears. This mirrors nsqlookupd v1.3 (lookup_protocol_v1.go, http.go).

Besides the TCP protocol, :meth:`NsqlookupdEmulator.register` attaches an
:class:`~aioclients.testing.NsqdEmulator` directly: its topics and channels are
read live at each HTTP request, and it is a producer only while it runs.

Lists (``/topics``, ``/channels``, ``/nodes`` topics) are sorted here; real
nsqlookupd answers them in Go map order, so compare them as sets.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from aiohttp import web

from aioclients._tasks import TaskOwner
from aioclients.testing._nsq_http import (
    json_response,
    nsq_error,
    nsq_error_middleware,
    text_response,
)
from aioclients.testing._nsq_wire import NSQ_VERSION, is_valid_name, lookupd_response

if TYPE_CHECKING:
    from aioclients.testing.nsqd import NsqdEmulator

__all__ = ("NsqlookupdEmulator",)

log = logging.getLogger("aioclients.testing.nsqlookupd")

_Key = tuple[str, str, str]


@dataclass(slots=True)
class _Producer:
    id: str
    remote_address: str
    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    last_update: float = field(default_factory=time.monotonic)
    tombstoned_at: float | None = None

    def peer_info(self) -> dict[str, Any]:
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
        }


class _LookupError(Exception):
    def __init__(self, code: str, desc: str) -> None:
        super().__init__(f"{code} {desc}")


class NsqlookupdEmulator:
    """An nsqlookupd in this process, on loopback: ``async with NsqlookupdEmulator() as lookupd``.

    Args:
        host: the address to listen on.
        tcp_port: the TCP port (for nsqd registrations); free one when 0.
        http_port: the HTTP port (``/lookup``...); free one when 0.
        inactive_producer_timeout: seconds without a PING after which a producer is
            left out of lookups (nsqlookupd: 300 s).
        tombstone_lifetime: seconds a ``/topic/tombstone`` hides a producer (nsqlookupd: 45 s).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        tcp_port: int = 0,
        http_port: int = 0,
        inactive_producer_timeout: float = 300.0,
        tombstone_lifetime: float = 45.0,
    ) -> None:
        self.host = host
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.inactive_producer_timeout = inactive_producer_timeout
        self.tombstone_lifetime = tombstone_lifetime
        self._db: dict[_Key, dict[str, _Producer]] = {}
        self._direct: dict[str, NsqdEmulator] = {}
        self._server: asyncio.Server | None = None
        self._runner: web.AppRunner | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        # one task per nsqd connection; a new owner for each start()
        self._tasks = TaskOwner("NsqlookupdEmulator")

    # -- public surface -------------------------------------------------------------------

    @property
    def tcp_address(self) -> str:
        """``"host:port"`` of the TCP listener nsqd registers with."""
        return f"{self.host}:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        """``"host:port"`` of the HTTP listener (``/lookup``)."""
        return f"{self.host}:{self.http_port}"

    @property
    def running(self) -> bool:
        """Whether the listeners are open."""
        return self._server is not None

    async def start(self) -> None:
        """Listen (again, on the same ports).

        Raises:
            OSError: a port is taken.
        """
        if self._server is not None:
            return
        self._tasks = TaskOwner(f"NsqlookupdEmulator({self.host}:{self.tcp_port or 'new'})")
        self._server = await asyncio.start_server(
            self._accept, self.host, self.tcp_port, reuse_address=True
        )
        self.tcp_port = self._server.sockets[0].getsockname()[1]
        self._runner, self.http_port = await _start_http(self, self.host, self.http_port)

    async def stop(self) -> None:
        """Close the listeners and every nsqd connection; registrations are kept.

        Raises:
            Exception: the first error a connection's task failed with (a bug in
                the emulator).
        """
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await self._tasks.aclose()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        await server.wait_closed()
        failure = self._tasks.failure
        if failure is not None:
            raise failure

    async def close(self) -> None:
        """Stop and forget every registration."""
        await self.stop()
        self._db.clear()
        self._direct.clear()

    async def __aenter__(self) -> NsqlookupdEmulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def register(self, nsqd: NsqdEmulator) -> None:
        """Attach an nsqd emulator directly (no TCP): a producer of its topics while it runs.

        Args:
            nsqd: the emulator; its topics and channels are read at each request.
        """
        self._direct[f"direct:{id(nsqd)}"] = nsqd

    def unregister(self, nsqd: NsqdEmulator) -> None:
        """Detach an nsqd attached with :meth:`register`; it leaves every lookup."""
        peer_id = f"direct:{id(nsqd)}"
        self._direct.pop(peer_id, None)
        self._remove_producer(peer_id)

    def lookup(self, topic: str) -> dict[str, Any] | None:
        """What ``/lookup?topic=`` answers.

        Args:
            topic: the topic to look up.

        Returns:
            ``{"channels": [...], "producers": [...]}``, or ``None`` where
            nsqlookupd answers 404 ``TOPIC_NOT_FOUND``.
        """
        self._sync_direct()
        if ("topic", topic, "") not in self._db:
            return None
        producers = self._active(self._db[("topic", topic, "")].values())
        return {
            "channels": self._subkeys("channel", topic),
            "producers": [p.peer_info() for p in producers],
        }

    # -- registration database ------------------------------------------------------------

    def _add_registration(self, key: _Key) -> None:
        self._db.setdefault(key, {})

    def _add_producer(self, key: _Key, producer: _Producer) -> None:
        self._db.setdefault(key, {}).setdefault(producer.id, producer)

    def _remove_producer(self, peer_id: str, key: _Key | None = None) -> int:
        keys = [key] if key is not None else list(self._db)
        left = 0
        for k in keys:
            producers = self._db.get(k)
            if producers is not None:
                producers.pop(peer_id, None)
                left = len(producers)
        return left

    def _subkeys(self, category: str, key: str) -> list[str]:
        return sorted(k[2] for k in self._db if k[0] == category and k[1] == key)

    def _active(self, producers: Iterable[_Producer]) -> list[_Producer]:
        now = time.monotonic()
        out = []
        for p in producers:
            if now - p.last_update > self.inactive_producer_timeout:
                continue
            if p.tombstoned_at is not None and now - p.tombstoned_at < self.tombstone_lifetime:
                continue
            out.append(p)
        return sorted(out, key=lambda p: (p.broadcast_address, p.tcp_port))

    def _sync_direct(self) -> None:
        for peer_id, nsqd in self._direct.items():
            wanted: set[_Key] = set()
            if nsqd.running:
                wanted.add(("client", "", ""))
                for topic in nsqd.topic_names():
                    wanted.add(("topic", topic, ""))
                    for channel in nsqd.channel_names(topic):
                        wanted.add(("channel", topic, channel))
            for key, producers in list(self._db.items()):
                if peer_id in producers and key not in wanted:
                    del producers[peer_id]
                    if key[0] == "channel" and key[2].endswith("#ephemeral") and not producers:
                        del self._db[key]
            existing = next(
                (p[peer_id] for p in self._db.values() if peer_id in p),
                None,
            )
            producer = existing or _Producer(
                id=peer_id,
                remote_address=nsqd.tcp_address,
                hostname=socket.gethostname(),
                broadcast_address=nsqd.broadcast_address,
                tcp_port=nsqd.tcp_port,
                http_port=nsqd.http_port,
                version=NSQ_VERSION,
            )
            producer.last_update = time.monotonic()
            for key in wanted:
                self._add_producer(key, producer)

    # -- TCP protocol -------------------------------------------------------------------

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback, so that the task serving the connection is ours.
        if self._tasks.closed:
            writer.transport.abort()
            return
        self._tasks.start(self._handle(reader, writer), name="nsqd connection")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        peer = writer.get_extra_info("peername")
        remote = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        producer: _Producer | None = None
        try:
            magic = await reader.readexactly(4)
            if magic != b"  V1":
                writer.write(lookupd_response(b"E_BAD_PROTOCOL"))
                return
            while True:
                line = await reader.readline()
                if not line:
                    return
                params = line.decode(errors="replace").strip().split(" ")
                try:
                    answer, producer = await self._exec(params, reader, remote, producer)
                except _LookupError as err:
                    writer.write(lookupd_response(str(err).encode()))
                    return  # every lookupd protocol error is fatal
                writer.write(lookupd_response(answer))
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            if producer is not None:
                self._remove_producer(producer.id)
            self._writers.discard(writer)
            writer.close()

    async def _exec(
        self,
        params: list[str],
        reader: asyncio.StreamReader,
        remote: str,
        producer: _Producer | None,
    ) -> tuple[bytes, _Producer | None]:
        cmd = params[0]
        if cmd == "PING":
            if producer is not None:
                producer.last_update = time.monotonic()
            return b"OK", producer
        if cmd == "IDENTIFY":
            return await self._identify(reader, remote, producer)
        if cmd in ("REGISTER", "UNREGISTER"):
            if producer is None:
                raise _LookupError("E_INVALID", "client must IDENTIFY")
            topic, channel = _topic_channel(cmd, params[1:])
            if cmd == "REGISTER":
                if channel:
                    self._add_producer(("channel", topic, channel), producer)
                self._add_producer(("topic", topic, ""), producer)
            elif channel:
                left = self._remove_producer(producer.id, ("channel", topic, channel))
                if left == 0 and channel.endswith("#ephemeral"):
                    self._db.pop(("channel", topic, channel), None)
            else:
                for key in [k for k in self._db if k[0] == "channel" and k[1] == topic]:
                    self._remove_producer(producer.id, key)
                self._remove_producer(producer.id, ("topic", topic, ""))
            return b"OK", producer
        raise _LookupError("E_INVALID", f"invalid command {cmd}")

    async def _identify(
        self, reader: asyncio.StreamReader, remote: str, producer: _Producer | None
    ) -> tuple[bytes, _Producer | None]:
        if producer is not None:
            raise _LookupError("E_INVALID", "cannot IDENTIFY again")
        try:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
        except asyncio.IncompleteReadError:
            raise _LookupError("E_BAD_BODY", "IDENTIFY failed to read body size") from None
        if size <= 0 or size > 1024 * 1024:
            raise _LookupError("E_BAD_BODY", f"IDENTIFY invalid body size {size}")
        body = await reader.readexactly(size)
        try:
            info = json.loads(body)
            if not isinstance(info, dict):
                raise TypeError
            producer = _Producer(
                id=remote,
                remote_address=remote,
                hostname=str(info.get("hostname") or ""),
                broadcast_address=str(info.get("broadcast_address") or ""),
                tcp_port=int(info.get("tcp_port") or 0),
                http_port=int(info.get("http_port") or 0),
                version=str(info.get("version") or ""),
            )
        except (ValueError, TypeError):
            raise _LookupError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None
        if not (
            producer.broadcast_address
            and producer.tcp_port
            and producer.http_port
            and producer.version
        ):
            raise _LookupError("E_BAD_BODY", "IDENTIFY missing fields")
        self._add_producer(("client", "", ""), producer)
        answer = {
            "broadcast_address": self.host,
            "hostname": socket.gethostname(),
            "http_port": self.http_port,
            "tcp_port": self.tcp_port,
            "version": NSQ_VERSION,
        }
        return json.dumps(answer, separators=(",", ":")).encode(), producer


def _topic_channel(cmd: str, params: list[str]) -> tuple[str, str]:
    if not params:
        raise _LookupError("E_INVALID", f"{cmd} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) >= 2 else ""
    if not is_valid_name(topic):
        raise _LookupError("E_BAD_TOPIC", f"{cmd} topic name '{topic}' is not valid")
    if channel and not is_valid_name(channel):
        raise _LookupError("E_BAD_CHANNEL", f"{cmd} channel name '{channel}' is not valid")
    return topic, channel


# -- HTTP API ------------------------------------------------------------------------------


class _Api:
    def __init__(self, lookupd: NsqlookupdEmulator) -> None:
        self.lookupd = lookupd

    async def ping(self, request: web.Request) -> web.Response:
        return text_response("OK")

    async def info(self, request: web.Request) -> web.Response:
        return json_response({"version": NSQ_VERSION})

    async def lookup(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic")
        if topic is None:
            return nsq_error(400, "MISSING_ARG_TOPIC")
        answer = self.lookupd.lookup(topic)
        if answer is None:
            return nsq_error(404, "TOPIC_NOT_FOUND")
        return json_response(answer)

    async def topics(self, request: web.Request) -> web.Response:
        self.lookupd._sync_direct()
        names = sorted({k[1] for k in self.lookupd._db if k[0] == "topic"})
        return json_response({"topics": names})

    async def channels(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic")
        if topic is None:
            return nsq_error(400, "MISSING_ARG_TOPIC")
        self.lookupd._sync_direct()
        return json_response({"channels": self.lookupd._subkeys("channel", topic)})

    async def nodes(self, request: web.Request) -> web.Response:
        lookupd = self.lookupd
        lookupd._sync_direct()
        now = time.monotonic()
        clients = lookupd._db.get(("client", "", ""), {})
        nodes = []
        for p in sorted(clients.values(), key=lambda p: (p.broadcast_address, p.tcp_port)):
            if now - p.last_update > lookupd.inactive_producer_timeout:
                continue
            topics = sorted(
                k[1]
                for k, producers in lookupd._db.items()
                if k[0] == "topic" and p.id in producers
            )
            tombstones = []
            for t in topics:
                tp = lookupd._db[("topic", t, "")][p.id]
                tombstones.append(
                    tp.tombstoned_at is not None
                    and now - tp.tombstoned_at < lookupd.tombstone_lifetime
                )
            nodes.append({**p.peer_info(), "tombstones": tombstones, "topics": topics})
        return json_response({"producers": nodes})

    def _topic_arg(self, request: web.Request) -> str | web.Response:
        topic = request.query.get("topic")
        if topic is None:
            return nsq_error(400, "MISSING_ARG_TOPIC")
        if not is_valid_name(topic):
            return nsq_error(400, "INVALID_ARG_TOPIC")
        return topic

    async def topic_create(self, request: web.Request) -> web.Response:
        topic = self._topic_arg(request)
        if isinstance(topic, web.Response):
            return topic
        self.lookupd._add_registration(("topic", topic, ""))
        return text_response(b"")

    async def topic_delete(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic")
        if topic is None:
            return nsq_error(400, "MISSING_ARG_TOPIC")
        for key in [k for k in self.lookupd._db if k[0] in ("topic", "channel") and k[1] == topic]:
            del self.lookupd._db[key]
        return text_response(b"")

    def _channel_args(self, request: web.Request) -> tuple[str, str] | web.Response:
        """The ``topic`` and ``channel`` query arguments, or nsqlookupd's refusal."""
        topic = self._topic_arg(request)
        if isinstance(topic, web.Response):
            return topic
        channel = request.query.get("channel")
        if channel is None:
            return nsq_error(400, "MISSING_ARG_CHANNEL")
        if not is_valid_name(channel):
            return nsq_error(400, "INVALID_ARG_CHANNEL")
        return topic, channel

    async def channel_create(self, request: web.Request) -> web.Response:
        args = self._channel_args(request)
        if isinstance(args, web.Response):
            return args
        topic, channel = args
        self.lookupd._add_registration(("channel", topic, channel))
        self.lookupd._add_registration(("topic", topic, ""))
        return text_response(b"")

    async def channel_delete(self, request: web.Request) -> web.Response:
        args = self._channel_args(request)
        if isinstance(args, web.Response):
            return args
        topic, channel = args
        self.lookupd._sync_direct()
        if self.lookupd._db.pop(("channel", topic, channel), None) is None:
            return nsq_error(404, "CHANNEL_NOT_FOUND")
        return text_response(b"")

    async def tombstone(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic")
        if topic is None:
            return nsq_error(400, "MISSING_ARG_TOPIC")
        node = request.query.get("node")
        if node is None:
            return nsq_error(400, "MISSING_ARG_NODE")
        for p in self.lookupd._db.get(("topic", topic, ""), {}).values():
            if f"{p.broadcast_address}:{p.http_port}" == node:
                p.tombstoned_at = time.monotonic()
        return text_response(b"")


async def _start_http(
    lookupd: NsqlookupdEmulator, host: str, port: int
) -> tuple[web.AppRunner, int]:
    api = _Api(lookupd)
    app = web.Application(middlewares=[nsq_error_middleware])
    app.router.add_get("/ping", api.ping, allow_head=False)
    app.router.add_get("/info", api.info, allow_head=False)
    app.router.add_get("/lookup", api.lookup, allow_head=False)
    app.router.add_get("/topics", api.topics, allow_head=False)
    app.router.add_get("/channels", api.channels, allow_head=False)
    app.router.add_get("/nodes", api.nodes, allow_head=False)
    app.router.add_post("/topic/create", api.topic_create)
    app.router.add_post("/topic/delete", api.topic_delete)
    app.router.add_post("/channel/create", api.channel_create)
    app.router.add_post("/channel/delete", api.channel_delete)
    app.router.add_post("/topic/tombstone", api.tombstone)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    return runner, int(sockets[0].getsockname()[1]) if sockets else port
