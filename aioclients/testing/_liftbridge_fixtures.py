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

import asyncio
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

from aioclients import liftbridge
from aioclients.testing.liftbridge import (
    REALISTIC_CLEAN_DURATION,
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

__all__ = (
    "LAG_ENV",
    "LIFTBRIDGE_ENV",
    "ExternalLiftbridge",
    "liftbridge_cluster",
    "oldest_offset",
    "skip_without_cursors",
    "wait_for_oldest",
)

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

    async def stop_broker(self, i: int | None = None, *, index: int | None = None) -> None:
        self._skip()

    async def start_broker(self, i: int | None = None, *, index: int | None = None) -> None:
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
        clean_duration=REALISTIC_CLEAN_DURATION if lag else 0.0,
    ) as cluster:
        yield cluster


async def skip_without_cursors(addresses: list[str]) -> None:
    """Skip the test when the external Liftbridge named by ``$AIOCLIENTS_TEST_LIFTBRIDGE``
    runs without cursors (``cursors.stream.partitions`` is 0 by default: no
    ``__cursors`` stream; cursor calls, and consumer groups with them, fail with
    "Cursors stream does not exist"). Does nothing against the emulator."""
    if not os.environ.get(LIFTBRIDGE_ENV):
        return
    async with await liftbridge.connect(addresses) as client:
        md = await client.fetch_metadata()
    if md.get_stream("__cursors") is None:
        pytest.skip(
            f"the external Liftbridge ({', '.join(addresses)}) has no __cursors stream: "
            "start it with cursors: {stream.partitions: 1}"
        )


# -- retention -------------------------------------------------------------------------


async def oldest_offset(
    client: liftbridge.Client, stream: str, partition: int = 0, *, timeout: float = 5.0
) -> int | None:
    """The oldest offset partition ``partition`` keeps, as a reader sees it: the first
    offset an EARLIEST subscription gets (None when the partition holds no committed
    message, or retention removed them all and nothing came since: then an EARLIEST
    reader waits for the next one).

    The cleaner may delete the segment the probe reads (SegmentDeletedError on a real
    Liftbridge as on the emulator): the probe then looks again.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        meta = await client.fetch_partition_metadata(stream, partition)
        if meta.high_watermark < 0:
            return None
        sub = client.subscribe(
            stream,
            partition=partition,
            start_at=liftbridge.StartPosition.EARLIEST,
            stop_offset=meta.high_watermark,
        )
        try:
            async with sub:
                left = max(deadline - loop.time(), 0.01)
                msg = await asyncio.wait_for(sub.__anext__(), min(left, 1.0))
                return msg.offset
        except liftbridge.SegmentDeletedError:
            pass  # the oldest moved while we read it
        except (TimeoutError, StopAsyncIteration):
            if loop.time() >= deadline:
                return None  # an EARLIEST reader waits: nothing is kept
        if loop.time() >= deadline:
            raise TimeoutError(f"no stable oldest offset of {stream}/{partition} in {timeout}s")


async def wait_for_oldest(
    client: liftbridge.Client,
    stream: str,
    partition: int = 0,
    *,
    at_least: int,
    timeout: float = 30.0,
    poll: float = 0.05,
) -> int:
    """Wait until partition ``partition`` keeps nothing below offset ``at_least``
    (retention runs when a segment rolls and the cleaner ticks, not at once); return
    its oldest offset then.

    Raises:
        AssertionError: not so within ``timeout`` seconds (the message says what was seen).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    seen: int | None = None
    while True:
        seen = await oldest_offset(client, stream, partition)
        if seen is not None and seen >= at_least:
            return seen
        if loop.time() >= deadline:
            raise AssertionError(
                f"{stream}/{partition} still keeps offset {seen} after {timeout}s "
                f"(waited for the oldest to reach {at_least}): did its cleaner run?"
            )
        await asyncio.sleep(poll)  # the next look: the cleaner ticks on its own clock
