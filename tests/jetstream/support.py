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


async def until_visible(nc: NATS, subject: str) -> None:
    """Wait until ``nc`` sees a listener another connection set up on ``subject``.

    For a few milliseconds after that connection's SUB and flush, the server may still
    answer a request on ``subject`` with "no responders" (the same with plain nats-py).
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
