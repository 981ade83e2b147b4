"""TaskOwner: strong references, the first failure reported, nothing outlives aclose()."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from aioclients._tasks import TaskOwner, wait_within


async def _forever(started: asyncio.Event | None = None) -> None:
    if started is not None:
        started.set()
    await asyncio.Event().wait()


async def _fail_after(gate: asyncio.Event, exc: BaseException) -> None:
    await gate.wait()
    raise exc


async def test_a_started_task_is_held_and_runs_to_its_end() -> None:
    owner = TaskOwner("test")
    done = asyncio.Event()

    async def work() -> int:
        await asyncio.sleep(0)
        gc.collect()  # only the owner holds the task: it must survive this
        done.set()
        return 7

    task = owner.start(work(), name="work")
    del task
    gc.collect()
    assert len(owner) == 1
    await asyncio.wait_for(done.wait(), 5)
    await asyncio.sleep(0)
    assert len(owner) == 0
    assert owner.failure is None


async def test_the_first_failure_is_reported_once_and_later_ones_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reported: list[BaseException] = []
    owner = TaskOwner("test", reported.append)
    first_gate, second_gate = asyncio.Event(), asyncio.Event()
    first = owner.start(_fail_after(first_gate, ValueError("first")), name="first")
    second = owner.start(_fail_after(second_gate, KeyError("second")), name="second")
    first_gate.set()
    await asyncio.wait([first])
    await asyncio.sleep(0)
    assert [str(e) for e in reported] == ["first"]
    with caplog.at_level(logging.ERROR, logger="aioclients.tasks"):
        second_gate.set()
        await asyncio.wait([second])
        await asyncio.sleep(0)
    assert [str(e) for e in reported] == ["first"]
    assert isinstance(owner.failure, ValueError)
    assert any("second" in r.getMessage() for r in caplog.records)
    await owner.aclose()


async def test_a_cancelled_task_is_no_failure() -> None:
    reported: list[BaseException] = []
    owner = TaskOwner("test", reported.append)
    started = asyncio.Event()
    task = owner.start(_forever(started), name="forever")
    await asyncio.wait_for(started.wait(), 5)
    await owner.cancel(task)
    assert task.cancelled()
    assert reported == []
    assert len(owner) == 0


async def test_nothing_outlives_aclose() -> None:
    owner = TaskOwner("test")
    started = [asyncio.Event() for _ in range(5)]
    tasks = [owner.start(_forever(e), name=f"t{i}") for i, e in enumerate(started)]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 5)
    await owner.aclose()
    assert all(t.done() for t in tasks)
    assert not set(tasks) & asyncio.all_tasks()
    assert len(owner) == 0
    assert owner.closed


async def test_start_after_aclose_refuses_and_closes_the_coroutine() -> None:
    owner = TaskOwner("test")
    await owner.aclose()
    coro = _forever()
    with pytest.raises(RuntimeError, match="closed"):
        owner.start(coro, name="late")
    # closed, not left unawaited (filterwarnings=error would flag that)
    assert coro.cr_frame is None


async def test_aclose_from_another_task_than_the_starter() -> None:
    owner = TaskOwner("test")
    started = asyncio.Event()

    async def starter() -> asyncio.Task[None]:
        return owner.start(_forever(started), name="child")

    child = await asyncio.get_running_loop().create_task(starter())
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.get_running_loop().create_task(owner.aclose())
    assert child.cancelled()


async def test_a_task_that_resists_one_cancel_is_cancelled_again() -> None:
    owner = TaskOwner("test")
    started = asyncio.Event()

    async def stubborn() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            pass  # swallowed once: a cleanup that waits again
        await asyncio.Event().wait()

    task = owner.start(stubborn(), name="stubborn")
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.wait_for(owner.aclose(), 5)
    assert task.cancelled()


async def test_aclose_is_bounded_by_close_timeout(caplog: pytest.LogCaptureFixture) -> None:
    owner = TaskOwner("test", close_timeout=0.2)
    release = asyncio.Event()
    started = asyncio.Event()

    async def deaf() -> None:
        started.set()
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # ignores every cancel: a bug the owner must survive

    task = owner.start(deaf(), name="deaf")
    await asyncio.wait_for(started.wait(), 5)
    with caplog.at_level(logging.ERROR, logger="aioclients.tasks"):
        await asyncio.wait_for(owner.aclose(), 5)
    assert not task.done()
    assert any("did not end" in r.getMessage() and "deaf" in r.getMessage() for r in caplog.records)
    release.set()
    await asyncio.wait_for(task, 5)


async def test_cancelling_the_closer_still_cancels_the_children() -> None:
    owner = TaskOwner("test")
    started = asyncio.Event()
    ending = asyncio.Event()
    may_end = asyncio.Event()

    async def slow_to_end() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            ending.set()
            await may_end.wait()

    child = owner.start(slow_to_end(), name="slow")
    await asyncio.wait_for(started.wait(), 5)
    closer = asyncio.get_running_loop().create_task(owner.aclose())
    await asyncio.wait_for(ending.wait(), 5)  # the child was cancelled
    closer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closer
    assert owner.closed
    may_end.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(child, 5)
    with pytest.raises(RuntimeError):
        owner.start(_forever(), name="after")


# ---- wait_within ------------------------------------------------------------------------


async def test_wait_within_raises_a_cancel_that_lands_as_the_awaited_is_done() -> None:
    caller: asyncio.Task[int] | None = None

    async def done_as_the_caller_is_cancelled() -> int:
        assert caller is not None
        caller.cancel()
        return 1

    caller = asyncio.ensure_future(wait_within(done_as_the_caller_is_cancelled(), 60.0))
    # asyncio.wait_for before Python 3.12 returns 1 here: the cancel is lost
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(caller, 5)


async def test_wait_within_returns_the_result_or_times_out() -> None:
    assert await wait_within(asyncio.sleep(0, result=7), 5.0) == 7
    assert await wait_within(asyncio.sleep(0, result=8), None) == 8
    with pytest.raises(asyncio.TimeoutError):
        await wait_within(asyncio.Event().wait(), 0.01)
    with pytest.raises(asyncio.TimeoutError):
        await wait_within(asyncio.Event().wait(), 0)
