"""pytest fixtures for NSQ: ``nsqd``, ``nsqd_factory`` and ``nsqlookupd``.

Brought into the plugin by ``aioclients.testing.pytest_plugin``. Each fixture
starts an in-process emulator on free loopback ports, or, when the matching
``AIOCLIENTS_TEST_NSQD_TCP`` / ``AIOCLIENTS_TEST_NSQD_HTTP`` /
``AIOCLIENTS_TEST_NSQLOOKUPD_HTTP`` variable is set, hands out that external
server instead; an external server's ``stop()`` / ``start()`` skip the test.
The fixtures are function-scoped: each test gets fresh servers on its own loop.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

try:
    from pytest_asyncio import fixture as _async_fixture
except ImportError:  # the plugin still loads; async fixtures then need another async plugin
    _async_fixture = pytest.fixture  # type: ignore[assignment]

from aioclients.testing.nsqd import NsqdEmulator
from aioclients.testing.nsqlookupd import NsqlookupdEmulator

__all__ = (
    "NSQD_HTTP_ENV",
    "NSQD_TCP_ENV",
    "NSQLOOKUPD_HTTP_ENV",
    "ExternalNsqd",
    "ExternalNsqlookupd",
    "nsqd",
    "nsqd_factory",
    "nsqlookupd",
)

NSQD_TCP_ENV = "AIOCLIENTS_TEST_NSQD_TCP"
NSQD_HTTP_ENV = "AIOCLIENTS_TEST_NSQD_HTTP"
NSQLOOKUPD_HTTP_ENV = "AIOCLIENTS_TEST_NSQLOOKUPD_HTTP"


def _strip_scheme(address: str) -> str:
    for prefix in ("http://", "https://", "tcp://"):
        if address.startswith(prefix):
            return address[len(prefix) :].rstrip("/")
    return address.rstrip("/")


class ExternalNsqd:
    """An nsqd the tests did not start: it has addresses and cannot be stopped."""

    external = True

    def __init__(self, tcp_address: str | None, http_address: str | None) -> None:
        self._tcp = _strip_scheme(tcp_address) if tcp_address else None
        self._http = _strip_scheme(http_address) if http_address else None

    @property
    def tcp_address(self) -> str:
        if not self._tcp:
            pytest.skip(f"the external nsqd has no TCP address (set {NSQD_TCP_ENV})")
        return self._tcp

    @property
    def http_address(self) -> str:
        if not self._http:
            pytest.skip(f"the external nsqd has no HTTP address (set {NSQD_HTTP_ENV})")
        return self._http

    def _skip(self) -> None:
        pytest.skip(f"cannot stop or restart an external nsqd ({self._tcp or self._http})")

    async def stop(self) -> None:
        self._skip()

    async def start(self) -> None:
        self._skip()

    def __repr__(self) -> str:
        return f"ExternalNsqd(tcp={self._tcp!r}, http={self._http!r})"


def external_nsqd() -> ExternalNsqd | None:
    """The external nsqd named by the environment, if any."""
    tcp = os.environ.get(NSQD_TCP_ENV)
    http = os.environ.get(NSQD_HTTP_ENV)
    if tcp or http:
        return ExternalNsqd(tcp, http)
    return None


@_async_fixture
async def nsqd() -> AsyncIterator[NsqdEmulator | ExternalNsqd]:
    """An nsqd for this test: an :class:`NsqdEmulator`, or ``$AIOCLIENTS_TEST_NSQD_TCP``/``_HTTP``.

    It has ``.tcp_address`` and ``.http_address`` (``"host:port"``) and async
    ``stop()`` / ``start()`` (which skip the test against an external nsqd).
    Tests sharing an external nsqd should use unique topic names.
    """
    external = external_nsqd()
    if external is not None:
        yield external
        return
    async with NsqdEmulator() as emulator:
        yield emulator


@_async_fixture
async def nsqd_factory() -> AsyncIterator[Callable[..., Awaitable[NsqdEmulator]]]:
    """``await nsqd_factory(**kwargs)`` starts one more :class:`NsqdEmulator` for this test.

    For tests that need several nsqd or a configuration of their own (short
    ``msg_timeout``, AUTH, TLS...). Skips the test when an external nsqd is
    configured, since such a test cannot run against it.
    """
    started: list[NsqdEmulator] = []

    async def factory(**kwargs: Any) -> NsqdEmulator:
        if external_nsqd() is not None:
            pytest.skip(f"starts nsqd emulators of its own; {NSQD_TCP_ENV} is set")
        emulator = NsqdEmulator(**kwargs)
        await emulator.start()
        started.append(emulator)
        return emulator

    try:
        yield factory
    finally:
        for emulator in reversed(started):
            await emulator.close()


class ExternalNsqlookupd:
    """An nsqlookupd the tests did not start (``$AIOCLIENTS_TEST_NSQLOOKUPD_HTTP``).

    Its nsqd are expected to be registered with it already, so :meth:`register`
    does nothing; ``stop()`` / ``start()`` and ``tcp_address`` skip the test.
    """

    external = True

    def __init__(self, http_address: str) -> None:
        self._http = _strip_scheme(http_address)

    @property
    def http_address(self) -> str:
        return self._http

    @property
    def tcp_address(self) -> str:
        pytest.skip("the external nsqlookupd's TCP address is not known")

    def register(self, nsqd: object) -> None:
        """Nothing to do: the external nsqd registers itself."""

    def unregister(self, nsqd: object) -> None:
        pytest.skip("cannot unregister an nsqd from an external nsqlookupd")

    async def stop(self) -> None:
        pytest.skip(f"cannot stop or restart an external nsqlookupd ({self._http})")

    async def start(self) -> None:
        pytest.skip(f"cannot stop or restart an external nsqlookupd ({self._http})")

    def __repr__(self) -> str:
        return f"ExternalNsqlookupd(http={self._http!r})"


@_async_fixture
async def nsqlookupd() -> AsyncIterator[NsqlookupdEmulator | ExternalNsqlookupd]:
    """An nsqlookupd for this test: an emulator, or ``$AIOCLIENTS_TEST_NSQLOOKUPD_HTTP``.

    Link it to the ``nsqd`` fixture with ``nsqlookupd.register(nsqd)`` (direct)
    or ``nsqd.add_lookupd(nsqlookupd.tcp_address)`` (over the lookupd TCP protocol);
    against an external nsqlookupd ``register`` does nothing.
    """
    http = os.environ.get(NSQLOOKUPD_HTTP_ENV)
    if http:
        yield ExternalNsqlookupd(http)
        return
    async with NsqlookupdEmulator() as emulator:
        yield emulator
