"""pytest fixture ``liftbridge_cluster``: the emulator, or an external Liftbridge.

Re-exported by :mod:`aioclients.testing.pytest_plugin`. With
``AIOCLIENTS_TEST_LIFTBRIDGE`` set (a comma list of ``host:port``) the fixture
returns an :class:`ExternalLiftbridge` naming those brokers and the NATS server
of ``AIOCLIENTS_TEST_NATS_URL``; its ``stop_broker`` / ``start_broker`` skip the
test. Otherwise it starts a :class:`LiftbridgeCluster` of 3 brokers (or
``request.param`` brokers when parametrized indirectly) on the session's
``nats_server``, and stops it after the test. The emulator lags like a real cluster
(``REALISTIC_METADATA_DELAY``,
``REALISTIC_REPLICA_MAX_IDLE_WAIT``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

from aioclients.testing.liftbridge import (
    REALISTIC_METADATA_DELAY,
    REALISTIC_REPLICA_MAX_IDLE_WAIT,
    LiftbridgeCluster,
)

if TYPE_CHECKING:
    _async_fixture = pytest.fixture
else:
    try:  # pytest-asyncio runs async fixtures; its strict mode needs its own decorator
        from pytest_asyncio import fixture as _async_fixture
    except ImportError:  # pragma: no cover - without it async tests cannot run anyway
        _async_fixture = pytest.fixture

__all__ = ("LAG_ENV", "LIFTBRIDGE_ENV", "ExternalLiftbridge", "liftbridge_cluster")

LIFTBRIDGE_ENV = "AIOCLIENTS_TEST_LIFTBRIDGE"
#: "0": the fixture's emulator does not lag (by default it lags like a real cluster)
LAG_ENV = "AIOCLIENTS_TEST_LIFTBRIDGE_LAG"
_NATS_URL_ENV = "AIOCLIENTS_TEST_NATS_URL"
_DEFAULT_BROKERS = 3


class ExternalLiftbridge:
    """A Liftbridge cluster the tests did not start: addresses only, cannot be stopped."""

    def __init__(self, addresses: list[str], nats_url: str | None) -> None:
        self.addresses = addresses
        self._nats_url = nats_url

    @property
    def nats_url(self) -> str:
        if not self._nats_url:
            pytest.skip(f"{LIFTBRIDGE_ENV} is set but {_NATS_URL_ENV} (its NATS server) is not")
        return self._nats_url

    def _skip(self) -> None:
        pytest.skip(f"cannot stop or start brokers of an external Liftbridge ({self.addresses})")

    async def stop_broker(self, index: int) -> None:
        self._skip()

    async def start_broker(self, index: int) -> None:
        self._skip()


@_async_fixture
async def liftbridge_cluster(
    request: pytest.FixtureRequest,
) -> AsyncIterator[LiftbridgeCluster | ExternalLiftbridge]:
    """An emulated Liftbridge cluster (3 brokers unless parametrized) on the session's
    ``nats_server``, or the external one named by ``$AIOCLIENTS_TEST_LIFTBRIDGE``.

    Tests must use unique stream names (``unique_name``): an external cluster is shared.
    """
    external = os.environ.get(LIFTBRIDGE_ENV)
    if external:
        addresses = [a.strip() for a in external.split(",") if a.strip()]
        yield ExternalLiftbridge(addresses, os.environ.get(_NATS_URL_ENV))
        return
    brokers = getattr(request, "param", _DEFAULT_BROKERS)
    nats = request.getfixturevalue("nats_server")
    lag = os.environ.get(LAG_ENV, "1") not in ("", "0")
    async with LiftbridgeCluster(
        brokers,
        nats_url=nats.url,
        metadata_delay=REALISTIC_METADATA_DELAY if lag else 0.0,
        replica_max_idle_wait=REALISTIC_REPLICA_MAX_IDLE_WAIT if lag else 0.0,
    ) as cluster:
        yield cluster
