"""``read_ahead``: a Spark task's input taken in a thread, a bounded number of items ahead."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from aioclients.spark._write_io import read_ahead

pytestmark = pytest.mark.spark


async def test_items_come_in_order_and_at_most_depth_plus_one_ahead() -> None:
    taken: list[int] = []
    lead: list[int] = []

    def items() -> Iterator[int]:
        for i in range(50):
            taken.append(i)
            yield i

    got = []
    async for item in read_ahead(items(), depth=2):
        await asyncio.sleep(0.001)  # a slow consumer: the thread must wait, not run away
        lead.append(len(taken) - len(got) - 1)
        got.append(item)
    assert got == list(range(50))
    assert max(lead) <= 3, "the queue's two plus the one the thread holds"


async def test_the_input_is_read_in_another_thread_while_the_loop_runs() -> None:
    gate = threading.Event()

    def items() -> Iterator[int]:
        yield 1
        assert gate.wait(10), "the loop never ran while the thread waited"
        yield 2

    out = []
    async for item in read_ahead(items()):
        out.append(item)
        if item == 1:
            # The loop is free while the thread is blocked in the input: set the gate.
            await asyncio.get_running_loop().run_in_executor(None, gate.set)
    assert out == [1, 2]


async def test_an_input_error_is_raised_in_order() -> None:
    def items() -> Iterator[int]:
        yield 1
        raise ValueError("broken input")

    got: list[int] = []

    async def consume() -> None:
        async for item in read_ahead(items()):
            got.append(item)

    with pytest.raises(ValueError, match="broken input"):
        await consume()
    assert got == [1]


async def test_a_consumer_that_stops_early_stops_the_thread() -> None:
    taken: list[int] = []

    def items() -> Iterator[int]:
        for i in range(1000):
            taken.append(i)
            yield i

    ahead = read_ahead(items(), depth=2)
    async for item in ahead:
        if item == 3:
            break
    await ahead.aclose()
    threads = [t for t in threading.enumerate() if t.name == "aioclients-spark-read-ahead"]
    for thread in threads:
        await asyncio.to_thread(thread.join, 5.0)
    assert not any(t.is_alive() for t in threads), "the thread gave up once stopped"
    assert len(taken) <= 8, "and took no more of the input"
