"""The pull, push and ordered drivers own their background tasks (``aioclients._tasks``):
a task that fails ends the iteration with a ``JetStreamError`` saying so (it used
to die unseen while the iteration went on or waited), and none outlives the
stream's ``aclose()``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from consume_support import publish_many

from aioclients.jetstream import JetStream, JetStreamError

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0


async def test_a_failed_check_after_a_reconnect_ends_the_consume_with_its_error(
    js: JetStream, unique_name: str
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    consumer = await stream.create_consumer(durable_name="c")

    async def broken_info() -> Any:
        raise RuntimeError("boom")

    consumer.info = broken_info  # type: ignore[method-assign]
    async with consumer.consume(expires=30) as messages:
        # What the request layer tells every running consume after a reconnect:
        # the consumer is looked up (in a background task) before pulling again.
        messages.connection_restored()
        with pytest.raises(
            JetStreamError, match=f"^pull on {unique_name}/c: a background task failed: Runtime"
        ):
            await asyncio.wait_for(messages.__anext__(), WAIT)


def info_never_answers(consumer: Any) -> asyncio.Event:
    """Make ``consumer.info()`` hang as a server that does not answer would; the
    event is set when it is called."""
    entered = asyncio.Event()
    never = asyncio.Event()

    async def slow_info() -> Any:
        entered.set()
        await never.wait()

    consumer.info = slow_info
    return entered


async def test_no_background_task_outlives_the_consumes_aclose(
    js: JetStream, unique_name: str
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    consumer = await stream.create_consumer(durable_name="c")
    entered = info_never_answers(consumer)
    messages = consumer.consume(expires=30)
    await messages.__aenter__()
    before = asyncio.all_tasks()
    messages.connection_restored()
    await asyncio.wait_for(entered.wait(), WAIT)
    started = asyncio.all_tasks() - before
    assert started, "the check after the reconnect runs as a task"
    await messages.aclose()
    assert [t for t in started if not t.done()] == []


async def test_a_failed_deletion_of_a_replaced_consumer_ends_the_ordered_consume(
    js: JetStream, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await publish_many(js, f"{unique_name}.a", 50)
    api = js._jsapi
    real = api.request

    async def failing_deletes(subject: str, *args: Any, **kwargs: Any) -> Any:
        if subject.startswith("CONSUMER.DELETE."):
            raise RuntimeError("boom")
        return await real(subject, *args, **kwargs)

    oc = await stream.ordered_consumer()
    got = 0

    async def read() -> None:
        nonlocal got
        async with oc.consume(max_messages=10, expires=2, idle_heartbeat=0.5) as messages:
            async for _ in messages:
                got += 1
                if got == 10:
                    # Deleted under it: the ordered consume replaces the consumer and
                    # deletes the old one in the background; from now on that
                    # deletion fails with a bug, not a JetStream error.
                    await js.delete_consumer(unique_name, oc.name or "")
                    monkeypatch.setattr(api, "request", failing_deletes)

    # Without an owner the deletion died unseen and the iteration went on waiting.
    with pytest.raises(JetStreamError, match="background task failed: RuntimeError: boom") as err:
        await asyncio.wait_for(read(), WAIT * 2)
    assert isinstance(err.value.__cause__, RuntimeError)
    assert got >= 10


# Push consumers (issue 21) run on the same owner: the check a missed heartbeat
# starts (is the consumer still there?) is a task of the stream.


async def test_a_failed_existence_check_ends_the_push_consume_with_its_error(
    js: JetStream, unique_name: str
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    consumer = await js.create_push_consumer(stream.name, durable_name="p", idle_heartbeat=0.3)

    async def broken_info() -> Any:
        raise RuntimeError("boom")

    consumer.info = broken_info  # type: ignore[method-assign]
    async with consumer.consume() as messages:
        # Deleted: the heartbeats stop, and the missed one starts the check.
        await js.delete_consumer(stream.name, "p")
        with pytest.raises(
            JetStreamError,
            match=f"^push consumer {stream.name}/p: a background task failed: RuntimeError: boom",
        ):
            await asyncio.wait_for(messages.__anext__(), WAIT)


async def test_no_push_consume_task_outlives_its_aclose(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    consumer = await js.create_push_consumer(stream.name, durable_name="p", idle_heartbeat=0.3)
    entered = info_never_answers(consumer)
    messages = consumer.consume()
    await messages.__aenter__()
    before = asyncio.all_tasks()
    await js.delete_consumer(stream.name, "p")
    await asyncio.wait_for(entered.wait(), WAIT)
    started = asyncio.all_tasks() - before
    assert started, "the check after a missed heartbeat runs as a task"
    await messages.aclose()
    assert [t for t in started if not t.done()] == []
