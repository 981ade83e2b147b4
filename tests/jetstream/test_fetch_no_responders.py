"""``next()`` / ``fetch()`` when the pull is answered 503 (no responders) though the
consumer exists, against a real nats-server.

On a cluster, the node of the connection may not know yet of a consumer just
created and answer its first pulls so. Here the same situation is made
deterministic with two accounts: A holds the stream and the consumer; B, the
fetching client, imports A's ``CONSUMER.INFO`` API under its API prefix (so the
consumer is found) but not ``CONSUMER.MSG.NEXT`` (so nobody in B answers a
pull). A relay in B, started only when the consumer is looked up, makes the pulls
answerable after the first 503: the retried pull then reaches A's consumer
through an import of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg as NatsMsg

from aioclients.jetstream import (
    Consumer,
    ConsumerDeletedError,
    ConsumerInfo,
    JetStream,
    JetStreamError,
    connect,
)
from aioclients.testing import NatsServer

pytestmark = pytest.mark.timeout(60)

#: B reaches A's JetStream API under this prefix (B's own ``$JS.API`` answers "not
#: enabled"), as a client of a JetStream in another account does.
PREFIX = "JS.A.API"
NEXT = f"{PREFIX}.CONSUMER.MSG.NEXT"

CONFIG = """
accounts {
  A {
    jetstream: enabled
    users: [{user: a, password: a}]
    exports: [
      {service: "$JS.API.CONSUMER.INFO.>"}
      {service: "$JS.API.CONSUMER.MSG.NEXT.>", response: stream}
    ]
  }
  B {
    users: [{user: b, password: b}]
    imports: [
      {service: {account: A, subject: "$JS.API.CONSUMER.INFO.>"}, to: "JS.A.API.CONSUMER.INFO.>"}
      {service: {account: A, subject: "$JS.API.CONSUMER.MSG.NEXT.>"}, to: "relay.NEXT.>"}
    ]
  }
}
"""


class Accounts:
    def __init__(self, a: JetStream, b: JetStream, b_url: str) -> None:
        self.a = a
        self.b = b
        self.b_url = b_url


@pytest.fixture
async def accounts(own_server_allowed: None) -> AsyncIterator[Accounts]:
    async with NatsServer(config=CONFIG) as server:
        a_url = server.url.replace("nats://", "nats://a:a@")
        b_url = server.url.replace("nats://", "nats://b:b@")
        async with await connect(a_url) as a, await connect(b_url, api_prefix=PREFIX) as b:
            await a.create_stream("S", subjects=["s.>"])
            await a.create_consumer("S", durable_name="C")
            await a.publish("s.1", b"one")
            yield Accounts(a, b, b_url)


@contextlib.asynccontextmanager
async def relay(url: str) -> AsyncIterator[NATS]:
    """Forward B's pulls to A's consumer (through B's import of MSG.NEXT)."""
    nc = await nats.connect(url)

    async def forward(msg: NatsMsg) -> None:
        rest = msg.subject[len(NEXT) :]
        await nc.publish("relay.NEXT" + rest, msg.data, reply=msg.reply, headers=msg.headers)

    try:
        await nc.subscribe(NEXT + ".>", cb=forward)
        await nc.flush()
        yield nc
    finally:
        await nc.close()


def looked_up(consumer: Consumer, first: Callable[[], Awaitable[object]]) -> list[int]:
    """Make ``consumer.info()`` run ``first`` before its first look-up; returns the
    list that counts the look-ups."""
    calls: list[int] = []
    real = consumer.info

    async def info() -> ConsumerInfo:
        calls.append(1)
        if len(calls) == 1:
            await first()
        return await real()

    consumer.info = info  # type: ignore[method-assign]
    return calls


async def test_next_pulls_again_when_the_consumer_exists(accounts: Accounts) -> None:
    consumer = await accounts.b.consumer("S", "C")
    stack = contextlib.AsyncExitStack()

    async def start_relay() -> None:
        await stack.enter_async_context(relay(accounts.b_url))

    calls = looked_up(consumer, start_relay)
    async with stack:
        msg = await consumer.next(expires=10)
    assert msg.data == b"one"
    assert calls == [1]  # one 503, one look-up, then the pull went through


async def test_fetch_retries_are_bounded_and_do_not_claim_a_deletion(
    accounts: Accounts,
) -> None:
    consumer = await accounts.b.consumer("S", "C")

    async def nothing() -> None:
        return None

    calls = looked_up(consumer, nothing)
    async with consumer.fetch(1, expires=10) as batch:
        with pytest.raises(JetStreamError) as info:
            async for _ in batch:
                pass
        stats = batch.statistics()
    assert not isinstance(info.value, ConsumerDeletedError)
    assert info.value.code == 503
    assert "exists" in str(info.value)
    assert stats.pulls == 3  # the first pull and two more
    assert len(calls) == 2  # a look-up after each 503 but the last


async def test_fetch_on_a_deleted_consumer_still_says_deleted(accounts: Accounts) -> None:
    consumer = await accounts.b.consumer("S", "C")
    await accounts.a.delete_consumer("S", "C")
    with pytest.raises(ConsumerDeletedError) as info:
        await consumer.next(expires=10)
    assert info.value.code == 503
