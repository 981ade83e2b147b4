"""pytest plugin: server fixtures for aioclients' own tests and for its users' tests.

Registered through the ``pytest11`` entry point. Every fixture honours the
``AIOCLIENTS_TEST_*`` environment variables: when one is set, the tests run
against that external server and tests that must stop or restart a server
skip themselves.

``--aioclients-loop=uvloop`` (or ``AIOCLIENTS_TEST_LOOP=uvloop``) runs the async
tests and fixtures on uvloop instead of asyncio's default loop.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from aioclients.testing._event_loop import (
    add_loop_option,
    configure_loop,
    loop_report_header,
)
from aioclients.testing._liftbridge_fixtures import liftbridge_cluster
from aioclients.testing._nsq_fixtures import (  # noqa: F401 (registers the fixtures)
    nsqd,
    nsqd_factory,
    nsqlookupd,
)
from aioclients.testing.nats_server import NatsServer

__all__ = (
    "ExternalServer",
    "liftbridge_cluster",
    "nats_server",
    "nats_server_private",
    "unique_name",
)

NATS_URL_ENV = "AIOCLIENTS_TEST_NATS_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_loop_option(parser)


def pytest_configure(config: pytest.Config) -> None:
    configure_loop(config)


def pytest_report_header(config: pytest.Config) -> str | None:
    return loop_report_header(config)


class ExternalServer:
    """A server the tests did not start: it has a URL and cannot be stopped.

    ``url`` may name the servers of a cluster, comma-separated (as ``jetstream.connect``
    and nats.go's ``Connect`` take them): ``urls`` is every one, and ``url`` then the
    first, a single URL for what takes only one (nats-py, a proxy in front of it)."""

    def __init__(self, url: str) -> None:
        self.urls = [u.strip() for u in url.split(",") if u.strip()] or [url]
        self.url = self.urls[0]

    def _skip(self) -> None:
        pytest.skip(f"cannot stop or restart an external server ({self.url})")

    def stop(self) -> None:
        self._skip()

    def start(self) -> None:
        self._skip()

    def restart(self) -> None:
        self._skip()

    def pause(self) -> None:
        self._skip()

    def resume(self) -> None:
        self._skip()


def _nats_server_or_external() -> Iterator[NatsServer | ExternalServer]:
    url = os.environ.get(NATS_URL_ENV)
    if url:
        yield ExternalServer(url)
        return
    with NatsServer() as server:
        yield server


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer | ExternalServer]:
    """A nats-server with JetStream shared by the session (or ``$AIOCLIENTS_TEST_NATS_URL``).

    Tests sharing it must use unique stream names (see ``unique_name``) and must
    not stop it; use ``nats_server_private`` for that.
    """
    yield from _nats_server_or_external()


@pytest.fixture
def nats_server_private() -> Iterator[NatsServer | ExternalServer]:
    """A nats-server of the test's own, which it may stop, restart or pause.

    Against an external server the stop/restart/pause calls skip the test.
    """
    yield from _nats_server_or_external()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A name unique to this test run, valid for streams, consumers and subjects."""
    base = "".join(c if c.isalnum() else "_" for c in request.node.name)[:40]
    return f"{base}_{uuid.uuid4().hex[:8]}"
