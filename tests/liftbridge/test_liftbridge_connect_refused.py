"""A cluster that refuses every connection: the error names the brokers and what to start."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterator

import pytest

from aioclients import InvalidArgumentError, liftbridge


@pytest.fixture
def refused_addresses() -> Iterator[list[str]]:
    """Two loopback addresses that refuse connections: bound (so nobody else takes the
    ports) but not listening."""
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        yield [f"127.0.0.1:{s.getsockname()[1]}" for s in (a, b)]


async def test_connect_to_brokers_that_refuse(refused_addresses: list[str]) -> None:
    start = time.monotonic()
    with pytest.raises(liftbridge.LiftbridgeConnectError) as info:
        await liftbridge.connect(refused_addresses)
    assert time.monotonic() - start < 5
    assert str(info.value) == (
        f"fetch_metadata: no Liftbridge broker at {', '.join(refused_addresses)} "
        "(connection refused): start them with `aioclients-servers` or `liftbridge`, or "
        "check the addresses"
    )


class _CountingRandom(random.Random):
    """Counts the pauses the client draws before asking the brokers again."""

    def __init__(self) -> None:
        super().__init__(1)
        self.pauses = 0

    def uniform(self, a: float, b: float) -> float:
        self.pauses += 1
        return super().uniform(a, b)


async def test_connect_gives_up_after_one_round_of_refusals(
    refused_addresses: list[str],
) -> None:
    rng = _CountingRandom()
    with pytest.raises(liftbridge.LiftbridgeConnectError, match="connection refused"):
        await liftbridge.connect(refused_addresses, rng=rng)
    # One round over both addresses, no pause and no second round.
    assert rng.pauses == 0


@pytest.mark.parametrize(
    "address", ["liftbridge://127.0.0.1:9292", "grpc://127.0.0.1:9292", "http://h:S3cret@h:1"]
)
async def test_an_address_with_a_scheme_is_refused_before_connecting(address: str) -> None:
    # gRPC took "liftbridge://127.0.0.1" for a host name: ten attempts, then a
    # "Misformatted domain name" over two seconds later.
    with pytest.raises(InvalidArgumentError, match="'host:port' without a scheme") as info:
        await liftbridge.connect([address])
    assert "S3cret" not in str(info.value)
