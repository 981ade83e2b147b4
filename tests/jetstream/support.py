"""Helpers shared by the JetStream integration tests (imported, not a conftest)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import nats.errors
from nats.aio.client import Client as NATS

from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer

Server = NatsServer | ExternalServer
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
