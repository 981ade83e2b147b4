"""Helpers shared by the JetStream integration tests (imported, not a conftest)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import nats
import nats.errors
import pytest
from nats.aio.client import Client as NATS

from aioclients._errors import AioClientsError
from aioclients.jetstream import JetStream
from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer

Server = NatsServer | ExternalServer
T = TypeVar("T")


def skip_if_the_proxy_can_be_bypassed(nc: NATS) -> None:
    """Skip a test whose fault must hold the client at a FaultProxy, when the server
    behind the proxy named other servers of its cluster (INFO's ``connect_urls``).

    nats-py adds those to its pool and reconnects to them past the proxy, as a client of
    a cluster should; a standalone server names none.
    """
    if nc.discovered_servers:
        pytest.skip("the server behind the proxy is in a cluster the client reconnects to")


WaitFor = Callable[..., Awaitable[None]]

#: A request payload our stand-in listeners answer at once, for :func:`until_visible`.
PROBE = b"__probe__"


async def subscriptions_live(nc: NATS) -> None:
    """Return once the server routes to every subscription ``nc`` has made so far.

    ``await nc.flush()`` does not promise that: nats-py (2.16) writes flush()'s PING
    straight to the socket, while the SUBs before it wait in its pending buffer for
    its flusher task, so the PONG can come back before the server has read them, and
    another connection's message sent at once misses them. The commands in that buffer
    reach the server in order: a message published through it after them, received
    on a subscription made after them, is read after they are live.
    """
    inbox = nc.new_inbox()
    fence = await nc.subscribe(inbox, max_msgs=1)
    await nc.publish(inbox, b"")
    await fence.next_msg(timeout=10)


def server_of(js: JetStream) -> str:
    """The URL of the server ``js`` is connected to: where a spy on its requests
    connects, for on another server of a cluster it would see them only once its
    interest had reached this one (no fence orders that)."""
    url = js.nc.connected_url
    assert url is not None
    return str(url.geturl())


class ApiRequests:
    """The JetStream API requests about one stream, in the order the client sent
    them, seen by a second connection: ``info`` (a STREAM.INFO), ``named`` (one
    naming the subjects), ``create`` (a CONSUMER.CREATE); the others left out.

    It listens to that stream's requests only: a spy on all of ``$JS.API.>`` would
    take the requests of other tests (a pull, a Direct Get) that nobody else
    answers, which then time out instead of hearing "no responders" -- on a cluster
    for a while after it left, too, until its interest is gone from the routes."""

    def __init__(self, nc: Any, stream: str) -> None:
        self.nc = nc
        self.stream = stream
        self.subs: list[Any] = []
        self.seen: list[str] = []

    @classmethod
    async def open(cls, url: str, stream: str) -> ApiRequests:
        spy = cls(await nats.connect(url), stream)
        # STREAM.INFO.<stream>; CONSUMER.CREATE.<stream>[.<consumer>[.<filter>]]
        create = f"$JS.API.CONSUMER.CREATE.{stream}"
        for subject in (f"$JS.API.STREAM.INFO.{stream}", create, f"{create}.>"):
            spy.subs.append(await spy.nc.subscribe(subject))
        await subscriptions_live(spy.nc)  # not flush(): its PING can overtake the SUB
        return spy

    async def kinds(self, js: JetStream) -> list[str]:
        """Those sent so far: fenced by a message ``js``'s connection sends after
        them, which reaches this one after them. Put in the order they were sent
        by their reply subjects' last token, the request counter of ``js``."""
        fence = await self.nc.subscribe(self.nc.new_inbox(), max_msgs=1)
        await subscriptions_live(self.nc)
        await js.nc.publish(fence.subject, b"")
        await fence.next_msg(timeout=10)
        got = []
        for sub in self.subs:
            for _ in range(sub.pending_msgs):  # queued before the fence came
                got.append(await sub.next_msg(timeout=10))
        got.sort(key=lambda msg: int(msg.reply.rsplit(".", 1)[1]))
        for msg in got:
            if ".STREAM.INFO." in msg.subject:
                self.seen.append("named" if b"subjects_filter" in msg.data else "info")
            else:
                self.seen.append("create")
        return self.seen

    async def close(self) -> None:
        await self.nc.close()


async def until_visible(nc: NATS, subject: str) -> None:
    """Wait until ``nc`` sees a listener another connection set up on ``subject``.

    That connection's flush() does not mean its SUB is live (see
    :func:`subscriptions_live`): until it is, a request on ``subject`` gets "no
    responders".
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        try:
            await nc.request(subject, PROBE, timeout=1)
            return
        except nats.errors.NoRespondersError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.005)


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cluster_servers(size: int = 3, first_port: int | None = None) -> list[NatsServer]:
    """``size`` nats-servers with JetStream (``n0``, ``n1``, ...) configured as one
    cluster, routes on loopback; not started. Once started, the cluster elects its
    JetStream meta leader within seconds: :func:`when_cluster_ready`.

    The ports are free ones, or ``first_port`` and the ``2 * size - 1`` after it
    (the routes' first, then the clients')."""
    if first_port is None:
        ports = [free_port() for _ in range(2 * size)]
    else:
        ports = list(range(first_port, first_port + 2 * size))
    route_ports = ports[:size]
    servers = []
    for i in range(size):
        routes = ", ".join(f"nats://127.0.0.1:{p}" for j, p in enumerate(route_ports) if j != i)
        config = (
            f"server_name: n{i}\n"
            f"cluster {{ name: c1, listen: 127.0.0.1:{route_ports[i]}, routes: [{routes}] }}\n"
        )
        servers.append(NatsServer(port=ports[size + i], config=config))
    return servers


@contextlib.asynccontextmanager
async def nats_cluster(
    size: int = 3, first_port: int | None = None
) -> AsyncIterator[list[NatsServer]]:
    """:func:`cluster_servers` started together, closed on exit."""
    servers = cluster_servers(size, first_port)
    try:
        await asyncio.gather(*(asyncio.to_thread(s.start) for s in servers))
        yield servers
    finally:
        await asyncio.gather(*(asyncio.to_thread(s.close) for s in servers))


async def when_cluster_ready(create: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
    """``await create()``, tried again while it fails with an AioClientsError (the
    cluster has no meta leader yet, or the new asset no leader) for up to
    ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await create()
        except AioClientsError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)


class RetryLog(logging.Handler):
    """Counts a logger's "trying again" records; sets ``seen`` at the first."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "trying again" in record.getMessage():
            self.count += 1
            self.seen.set()


@contextlib.contextmanager
def retry_log(logger_name: str) -> Iterator[RetryLog]:
    """A :class:`RetryLog` on ``logger_name`` (at DEBUG) while the block runs."""
    logger = logging.getLogger(logger_name)
    handler, level = RetryLog(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
