"""Shared fixtures for the test suite.

The server fixtures (``nats_server``, ``nats_server_private``, ``unique_name``) come
from the ``aioclients.testing.pytest_plugin`` (loaded through its entry point).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from hypothesis import settings

from aioclients.jetstream import JetStream, StreamNotFoundError, connect
from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer
from tests.loop_bound import (  # noqa: F401 (pytest hooks: --loop-bound-only)
    pytest_addoption,
    pytest_collection_modifyitems,
)
from tests.spark_worker import (  # noqa: F401 (pytest hook: the Spark tests on one worker)
    pytest_xdist_make_scheduler,
)

NATS_URL_ENV = "AIOCLIENTS_TEST_NATS_URL"

# Every Spark the suite starts (the Spark tests' sessions, and the documentation blocks,
# examples and demo that run Spark in a subprocess, which inherit this) is a driver JVM
# that runs small jobs for seconds to minutes: the JIT's first tier alone (C1) gets
# through them sooner than C1 then C2, whose compilations rarely pay off in so short a
# life. Only how fast the JVM gets going changes, not what any test checks. A value
# set outside the suite is kept.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")

# Property tests check behaviour, not speed: on a busy 2-core CI machine an
# example may take longer than hypothesis's default 200 ms deadline.
settings.register_profile("aioclients", deadline=None)
settings.load_profile("aioclients")


@pytest.fixture
def own_server_allowed() -> None:
    """Skip the test when it would have to start a nats-server of its own configuration
    but the suite runs against an external server."""
    if os.environ.get(NATS_URL_ENV):
        pytest.skip(f"starts a nats-server with its own configuration; {NATS_URL_ENV} is set")


@pytest.fixture
async def js(
    nats_server: NatsServer | ExternalServer, unique_name: str
) -> AsyncIterator[JetStream]:
    """A JetStream context on the session's shared server, closed after the test.

    Streams whose names start with the test's ``unique_name`` are deleted afterwards,
    so that the shared (possibly external) server does not fill up. An external
    cluster named by several URLs is connected to through all of them (nats-py picks
    one at random), so that the tests run on other servers than the first.
    """
    ctx = await connect(nats_server.urls)
    try:
        yield ctx
    finally:
        try:
            if not ctx.closed:
                names = [n async for n in ctx.stream_names() if n.startswith(unique_name)]
                for name in names:
                    with contextlib.suppress(StreamNotFoundError):
                        await ctx.delete_stream(name)
        finally:
            await ctx.close()


async def _wait_for(
    condition: Callable[[], Awaitable[bool]],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    what: str = "condition",
) -> None:
    """Poll ``condition`` until it is true; fail the test after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if await condition():
            return
        if loop.time() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


@pytest.fixture
def wait_for() -> Callable[..., Awaitable[None]]:
    """``await wait_for(async_predicate, timeout=..., what=...)``: poll with a deadline."""
    return _wait_for
