"""The request layer's clock and futures: the loop's own, called more directly where
they are asyncio's Python methods, and never where a loop brings its own."""

from __future__ import annotations

import asyncio
import time

from aioclients.jetstream._publisher import _loop_parts


class _OwnClockLoop(asyncio.SelectorEventLoop):
    def time(self) -> float:
        return 1000.0

    def create_future(self) -> asyncio.Future[object]:
        future: asyncio.Future[object] = super().create_future()
        future.made_here = True  # type: ignore[attr-defined]
        return future


def test_asyncio_loop_parts_are_its_clock_and_futures() -> None:
    loop = asyncio.SelectorEventLoop()
    try:
        clock, new_future = _loop_parts(loop)
        assert clock is time.monotonic  # what BaseEventLoop.time returns
        future = new_future()
        assert type(future) is asyncio.Future
        assert future.get_loop() is loop
        future.cancel()
    finally:
        loop.close()


def test_a_loop_with_its_own_clock_and_futures_keeps_them() -> None:
    loop = _OwnClockLoop()
    try:
        clock, new_future = _loop_parts(loop)
        assert clock() == 1000.0
        future = new_future()
        assert getattr(future, "made_here", False)
        future.cancel()
    finally:
        loop.close()


def test_a_clock_set_on_the_loop_itself_is_kept() -> None:
    loop = asyncio.SelectorEventLoop()
    try:
        loop.time = lambda: 5.0  # type: ignore[method-assign]
        clock, _ = _loop_parts(loop)
        assert clock() == 5.0
    finally:
        loop.close()
