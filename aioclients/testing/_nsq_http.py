"""The nsqd HTTP API of :class:`~aioclients.testing.NsqdEmulator`, on aiohttp.

Answers as nsqd v1.3's ``http.go`` does: success bodies are plain (``OK`` or
empty) or JSON; errors are ``{"message": "<CODE>"}`` with nsqd's status codes
(400 ``MSG_EMPTY`` / ``MISSING_ARG_TOPIC`` / ``INVALID_TOPIC`` / ``INVALID_DEFER``,
413 ``MSG_TOO_BIG`` / ``BODY_TOO_BIG`` / ``BAD_BODY`` / ``BAD_MESSAGE``, 404
``NOT_FOUND`` / ``TOPIC_NOT_FOUND`` / ``CHANNEL_NOT_FOUND``, 405
``METHOD_NOT_ALLOWED``), checked in nsqd's order. Every answer carries
``X-NSQ-Content-Type: nsq; version=1.0``. The API works through the public
methods of the emulator it serves (:class:`NsqdBackend`); it imports no
emulator module.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from aioclients.testing._nsq_wire import NSQ_VERSION, ClientError, is_valid_name, read_mpub

__all__ = (
    "NsqdBackend",
    "json_response",
    "nsq_error",
    "nsq_error_middleware",
    "start_http",
    "text_response",
)

_V1_HEADER = {"X-NSQ-Content-Type": "nsq; version=1.0"}
_BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}
_MEMORY_KEYS = (
    "heap_objects",
    "heap_idle_bytes",
    "heap_in_use_bytes",
    "heap_released_bytes",
    "gc_pause_usec_100",
    "gc_pause_usec_99",
    "gc_pause_usec_95",
    "next_gc_bytes",
    "gc_total_runs",
)

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class NsqdBackend(Protocol):
    """What the HTTP API reads and changes of the nsqd emulator it serves: its
    public settings and methods (this module imports no emulator module)."""

    broadcast_address: str
    host: str
    http_port: int
    tcp_port: int
    max_heartbeat_interval: float
    max_deflate_level: int
    max_msg_size: int
    max_body_size: int
    max_req_timeout: float

    @property
    def start_time(self) -> int: ...
    def stats(
        self, topic: str | None = None, channel: str | None = None, include_clients: bool = True
    ) -> dict[str, Any]: ...
    def topic_names(self) -> list[str]: ...
    def channel_names(self, topic: str) -> list[str]: ...
    def publish(self, topic: str, *bodies: bytes, defer: float = 0.0) -> None: ...
    def create_topic(self, topic: str, *channels: str) -> None: ...
    def delete_topic(self, topic: str) -> None: ...
    def delete_channel(self, topic: str, channel: str) -> None: ...
    def empty_topic(self, topic: str) -> None: ...
    def empty_channel(self, topic: str, channel: str) -> None: ...
    def pause_topic(self, topic: str) -> None: ...
    def unpause_topic(self, topic: str) -> None: ...
    def pause_channel(self, topic: str, channel: str) -> None: ...
    def unpause_channel(self, topic: str, channel: str) -> None: ...


def nsq_error(status: int, code: str) -> web.Response:
    """An nsq v1 error answer."""
    return json_response({"message": code}, status=status)


def json_response(data: Any, *, status: int = 200) -> web.Response:
    """An nsq v1 JSON answer (compact, like Go's encoder)."""
    return web.Response(
        status=status,
        body=json.dumps(data, separators=(",", ":")).encode(),
        headers={**_V1_HEADER, "Content-Type": "application/json; charset=utf-8"},
    )


def text_response(text: str | bytes, *, status: int = 200) -> web.Response:
    """A plain answer (``OK``, or an empty body)."""
    body = text.encode() if isinstance(text, str) else text
    return web.Response(
        status=status,
        body=body,
        headers={**_V1_HEADER, "Content-Type": "text/plain; charset=utf-8"},
    )


@web.middleware
async def nsq_error_middleware(request: web.Request, handler: _Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed:
        return nsq_error(405, "METHOD_NOT_ALLOWED")
    except web.HTTPNotFound:
        return nsq_error(404, "NOT_FOUND")


async def _read_limited(request: web.Request, limit: int) -> bytes:
    """Read at most ``limit + 1`` bytes so that "too big" can be told."""
    chunks = []
    total = 0
    while total <= limit:
        chunk = await request.content.read(limit + 1 - total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


class _Api:
    def __init__(self, nsqd: NsqdBackend) -> None:
        self.nsqd = nsqd

    def _topic(self, request: web.Request) -> str | web.Response:
        names = request.query.getall("topic", [])
        if not names:
            return nsq_error(400, "MISSING_ARG_TOPIC")
        if not is_valid_name(names[0]):
            return nsq_error(400, "INVALID_TOPIC")
        return names[0]

    async def ping(self, request: web.Request) -> web.Response:
        return text_response("OK")

    async def info(self, request: web.Request) -> web.Response:
        n = self.nsqd
        return json_response(
            {
                "version": NSQ_VERSION,
                "broadcast_address": n.broadcast_address,
                "hostname": n.host,
                "http_port": n.http_port,
                "tcp_port": n.tcp_port,
                "start_time": n.start_time,
                "max_heartbeat_interval": int(n.max_heartbeat_interval * 1e9),
                "max_output_buffer_size": 64 * 1024,
                "max_output_buffer_timeout": 30_000_000_000,
                "max_deflate_level": n.max_deflate_level,
            }
        )

    async def pub(self, request: web.Request) -> web.Response:
        n = self.nsqd
        if request.content_length is not None and request.content_length > n.max_msg_size:
            return nsq_error(413, "MSG_TOO_BIG")
        body = await _read_limited(request, n.max_msg_size)
        if len(body) > n.max_msg_size:
            return nsq_error(413, "MSG_TOO_BIG")
        if not body:
            return nsq_error(400, "MSG_EMPTY")
        topic = self._topic(request)
        if isinstance(topic, web.Response):
            return topic
        n.create_topic(topic)  # nsqd creates it before it reads the defer parameter
        defer = 0.0
        if "defer" in request.query:
            raw = request.query.getall("defer")[0]
            try:
                ms = int(raw)
            except ValueError:
                return nsq_error(400, "INVALID_DEFER")
            if ms < 0 or ms > n.max_req_timeout * 1000:
                return nsq_error(400, "INVALID_DEFER")
            defer = ms / 1000
        n.publish(topic, body, defer=defer)
        return text_response("OK")

    async def mpub(self, request: web.Request) -> web.Response:
        n = self.nsqd
        if request.content_length is not None and request.content_length > n.max_body_size:
            return nsq_error(413, "BODY_TOO_BIG")
        topic = self._topic(request)
        if isinstance(topic, web.Response):
            return topic
        n.create_topic(topic)
        binary = False
        if "binary" in request.query:
            binary = _BOOL_PARAMS.get(request.query.getall("binary")[0], True)
        data = await _read_limited(request, n.max_body_size)
        if binary:
            try:
                got = read_mpub(data, 0, n.max_msg_size, n.max_body_size)
            except ClientError as err:
                return nsq_error(413, err.code[2:])
            if got is None:  # the body ended early: no count is BAD_BODY, a short message not
                return nsq_error(413, "BAD_BODY" if len(data) < 4 else "BAD_MESSAGE")
            bodies = got[0]
        else:
            if len(data) > n.max_body_size:
                return nsq_error(413, "BODY_TOO_BIG")
            bodies = []
            for line in data.split(b"\n"):
                if not line:
                    continue  # nsqd silently drops empty lines
                if len(line) > n.max_msg_size:
                    return nsq_error(413, "MSG_TOO_BIG")
                bodies.append(line)
        if bodies:
            n.publish(topic, *bodies)
        return text_response("OK")

    async def stats(self, request: web.Request) -> web.Response:
        q = request.query
        include_clients = _BOOL_PARAMS.get(q.get("include_clients", ""), True)
        doc = self.nsqd.stats(
            q.get("topic") or None, q.get("channel") or None, include_clients=include_clients
        )
        if q.get("format") == "json":
            if _BOOL_PARAMS.get(q.get("include_mem", ""), True):
                # nsqd reports Go runtime memory here; the emulator has none to report
                doc = {**doc, "memory": dict.fromkeys(_MEMORY_KEYS, 0)}
                doc["producers"] = doc.pop("producers")  # nsqd's field order
            return json_response(doc)
        lines = [f"nsqd v{NSQ_VERSION} (emulator)", "", "Health: OK", ""]
        if not doc["topics"]:
            lines.append("Topics: None")
        for t in doc["topics"]:
            paused = "*P " if t["paused"] else "   "  # nsqd's mark of a paused topic
            lines.append(
                f"{paused}[{t['topic_name']:<15}] depth: {t['depth']:<5} be-depth: 0     "
                f"msgs: {t['message_count']:<8}"
            )
            for c in t["channels"]:
                paused = "   *P " if c["paused"] else "      "
                lines.append(
                    f"{paused}[{c['channel_name']:<25}] depth: {c['depth']:<5} be-depth: 0     "
                    f"inflt: {c['in_flight_count']:<4} def: {c['deferred_count']:<4} "
                    f"re-q: {c['requeue_count']:<5} timeout: {c['timeout_count']:<5} "
                    f"msgs: {c['message_count']:<8}"
                )
        return text_response("\n".join(lines) + "\n")

    async def topic_create(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        if isinstance(topic, web.Response):
            return topic
        self.nsqd.create_topic(topic)
        return text_response(b"")

    async def topic_delete(self, request: web.Request) -> web.Response:
        name = request.query.get("topic")
        if name is None:
            return nsq_error(400, "MISSING_ARG_TOPIC")
        if name not in self.nsqd.topic_names():
            return nsq_error(404, "TOPIC_NOT_FOUND")
        self.nsqd.delete_topic(name)
        return text_response(b"")

    async def topic_empty(self, request: web.Request) -> web.Response:
        name = request.query.get("topic")
        if name is None:
            return nsq_error(400, "MISSING_ARG_TOPIC")
        if not is_valid_name(name):
            return nsq_error(400, "INVALID_TOPIC")
        if name not in self.nsqd.topic_names():
            return nsq_error(404, "TOPIC_NOT_FOUND")
        self.nsqd.empty_topic(name)
        return text_response(b"")

    async def topic_pause(self, request: web.Request) -> web.Response:
        # nsqd's doPauseTopic checks no name: an invalid one is a topic not found
        name = request.query.get("topic")
        if name is None:
            return nsq_error(400, "MISSING_ARG_TOPIC")
        if name not in self.nsqd.topic_names():
            return nsq_error(404, "TOPIC_NOT_FOUND")
        if request.path.endswith("unpause"):
            self.nsqd.unpause_topic(name)
        else:
            self.nsqd.pause_topic(name)
        return text_response(b"")

    def _topic_channel(
        self, request: web.Request, *, existing: bool
    ) -> tuple[str, str] | web.Response:
        """nsqd's GetTopicChannelArgs, then the topic (and, if ``existing``, the channel)
        must exist."""
        name = request.query.get("topic")
        if name is None:
            return nsq_error(400, "MISSING_ARG_TOPIC")
        if not is_valid_name(name):
            return nsq_error(400, "INVALID_ARG_TOPIC")
        channel = request.query.get("channel")
        if channel is None:
            return nsq_error(400, "MISSING_ARG_CHANNEL")
        if not is_valid_name(channel):
            return nsq_error(400, "INVALID_ARG_CHANNEL")
        if name not in self.nsqd.topic_names():
            return nsq_error(404, "TOPIC_NOT_FOUND")
        if existing and channel not in self.nsqd.channel_names(name):
            return nsq_error(404, "CHANNEL_NOT_FOUND")
        return name, channel

    async def channel_create(self, request: web.Request) -> web.Response:
        got = self._topic_channel(request, existing=False)
        if isinstance(got, web.Response):
            return got
        self.nsqd.create_topic(*got)
        return text_response(b"")

    async def channel_delete(self, request: web.Request) -> web.Response:
        # nsqd's doDeleteChannel: the channel's clients are closed with it
        got = self._topic_channel(request, existing=True)
        if isinstance(got, web.Response):
            return got
        self.nsqd.delete_channel(*got)
        return text_response(b"")

    async def channel_empty(self, request: web.Request) -> web.Response:
        got = self._topic_channel(request, existing=True)
        if isinstance(got, web.Response):
            return got
        self.nsqd.empty_channel(*got)
        return text_response(b"")

    async def channel_pause(self, request: web.Request) -> web.Response:
        got = self._topic_channel(request, existing=True)
        if isinstance(got, web.Response):
            return got
        if request.path.endswith("unpause"):
            self.nsqd.unpause_channel(*got)
        else:
            self.nsqd.pause_channel(*got)
        return text_response(b"")


async def start_http(nsqd: NsqdBackend, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve the nsqd HTTP API; returns the runner and the bound port."""
    api = _Api(nsqd)
    app = web.Application(
        middlewares=[nsq_error_middleware], client_max_size=nsqd.max_body_size + 1024
    )
    app.router.add_get("/ping", api.ping, allow_head=False)
    app.router.add_get("/info", api.info, allow_head=False)
    app.router.add_post("/pub", api.pub)
    app.router.add_post("/mpub", api.mpub)
    app.router.add_get("/stats", api.stats, allow_head=False)
    app.router.add_post("/topic/create", api.topic_create)
    app.router.add_post("/topic/delete", api.topic_delete)
    app.router.add_post("/channel/create", api.channel_create)
    app.router.add_post("/channel/delete", api.channel_delete)
    app.router.add_post("/topic/empty", api.topic_empty)
    app.router.add_post("/topic/pause", api.topic_pause)
    app.router.add_post("/topic/unpause", api.topic_pause)
    app.router.add_post("/channel/empty", api.channel_empty)
    app.router.add_post("/channel/pause", api.channel_pause)
    app.router.add_post("/channel/unpause", api.channel_pause)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    bound = [address[1] for address in runner.addresses if isinstance(address, tuple)]
    return runner, int(bound[0]) if bound else port
