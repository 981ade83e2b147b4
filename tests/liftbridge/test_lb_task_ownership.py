"""The Liftbridge objects that run tasks own them: a failure surfaces where the
user waits, closing from another task works, and no task outlives its object."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from aioclients.liftbridge import Client, LiftbridgeError, StartPosition, connect
from aioclients.testing._liftbridge_fixtures import skip_without_cursors

pytestmark = pytest.mark.timeout(60)

WAIT = 15.0


def _tasks_named(prefix: str) -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith(prefix)]


@pytest.fixture
async def client(liftbridge_cluster: object) -> AsyncIterator[Client]:
    async with await connect(liftbridge_cluster.addresses) as c:  # type: ignore[attr-defined]
        yield c


async def test_a_failing_group_task_is_raised_from_async_for_and_nothing_outlives_close(
    client: Client, unique_name: str, liftbridge_cluster: object
) -> None:
    await skip_without_cursors(liftbridge_cluster.addresses)  # type: ignore[attr-defined]
    await client.create_stream(unique_name, unique_name, partitions=2)
    member = client.consumer(
        unique_name,
        [unique_name],
        auto_offset=StartPosition.EARLIEST,
        checkpoint_interval=None,
        fetch_interval=0.05,
    )
    async with member:
        assert _tasks_named("GroupConsumer(")  # the assignments loop and two pumps

        async def broken() -> None:
            raise RuntimeError("a bug in the assignments loop")

        member._reconcile = broken  # type: ignore[method-assign]
        with pytest.raises(LiftbridgeError, match="background task failed") as info:
            await asyncio.wait_for(member.__anext__(), WAIT)
        assert isinstance(info.value.__cause__, RuntimeError)
        # raised again, not a hang, on the next step
        with pytest.raises(LiftbridgeError):
            await asyncio.wait_for(member.__anext__(), WAIT)
    assert _tasks_named("GroupConsumer(") == []


async def test_a_group_consumer_closed_from_another_task_ends_the_iteration(
    client: Client, unique_name: str, liftbridge_cluster: object
) -> None:
    await skip_without_cursors(liftbridge_cluster.addresses)  # type: ignore[attr-defined]
    await client.create_stream(unique_name, unique_name)
    async with client.consumer(unique_name, [unique_name], checkpoint_interval=0.05) as member:
        got: list[object] = []

        async def read() -> None:
            async for msg in member:
                got.append(msg)

        reader = asyncio.get_running_loop().create_task(read())
        await asyncio.sleep(0)
        # e.g. a web framework's shutdown hook
        await asyncio.wait_for(asyncio.get_running_loop().create_task(member.aclose()), WAIT)
        await asyncio.wait_for(reader, WAIT)  # ended: StopAsyncIteration, no error
        assert got == []
        assert _tasks_named("GroupConsumer(") == []


async def test_cancelling_the_reader_of_a_group_consumer_leaves_it_closable(
    client: Client, unique_name: str, liftbridge_cluster: object
) -> None:
    await skip_without_cursors(liftbridge_cluster.addresses)  # type: ignore[attr-defined]
    await client.create_stream(unique_name, unique_name)
    member = client.consumer(unique_name, [unique_name], checkpoint_interval=None)
    await member.__aenter__()
    reader = asyncio.get_running_loop().create_task(member.__anext__())
    await asyncio.sleep(0)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert _tasks_named("GroupConsumer(")  # still consuming: the reader was the user's
    await asyncio.wait_for(member.aclose(), WAIT)
    assert _tasks_named("GroupConsumer(") == []


async def test_the_publisher_reader_does_not_outlive_the_client(
    liftbridge_cluster: object, unique_name: str
) -> None:
    async with await connect(liftbridge_cluster.addresses) as c:  # type: ignore[attr-defined]
        await c.create_stream(unique_name, unique_name)
        ack = await asyncio.wait_for(await c.publish_async(unique_name, b"x"), WAIT)
        assert ack is not None
        assert _tasks_named("liftbridge AsyncPublisher")
    assert _tasks_named("liftbridge AsyncPublisher") == []
    assert _tasks_named("liftbridge Brokers") == []
