"""Helpers shared by the JetStream integration tests (imported, not a conftest)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import nats.errors
import pytest
from nats.aio.client import Client as NATS

from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer

Server = NatsServer | ExternalServer


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
