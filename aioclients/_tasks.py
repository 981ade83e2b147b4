"""The owner of an object's background tasks: none outlives it, none fails unseen.

Theory of operation. An object that runs tasks of its own (a consumer's pumps, a
reconnect loop, a proxy's forwarding) creates one :class:`TaskOwner` and starts
every task through :meth:`TaskOwner.start`, which keeps a strong reference to it
(the event loop keeps only a weak one). A done-callback drops the reference and,
for the first task that ends with an exception, calls the object's
``on_failure(exc)``: the object then raises that error where its user waits (the
next ``async for`` step, the next call), as its own typed error. The object's
``aclose()`` calls :meth:`TaskOwner.aclose`, which cancels every task and waits
for them, bounded by ``close_timeout``; after it, :meth:`TaskOwner.start`
refuses, so no task outlives the object.

Why not a task group (``asyncio.TaskGroup``, anyio's): a task group lives in the
task that entered it and ends in that same task, cancels that task when a child
fails, and raises an ``ExceptionGroup`` there. Our objects are entered in one
task and often closed from another (a web framework's shutdown hook), and their
errors are raised from ``async for`` as the library's own exceptions, never as a
cancellation of the user's code or an exception group. (docs/architecture.md,
"Who owns a background task")
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ("TaskOwner", "wait_within")

log = logging.getLogger("aioclients.tasks")

T = TypeVar("T")

_RECANCEL_AFTER = 0.1  # seconds


async def wait_within(awaitable: Awaitable[T], timeout: float | None) -> T:
    """``asyncio.wait_for`` that never loses its caller's cancellation.

    Before Python 3.12, ``wait_for`` returns the result of what it waits for when
    that is ready at the very moment the caller is cancelled: the cancel is lost,
    and the caller carries on (CPython gh-86296), e.g. into a call that then waits
    for its whole deadline. Here the caller's cancel always raises; what it waited
    for is cancelled (a result it already had is dropped: the caller must clean up
    after a cancel anyway).

    Raises:
        asyncio.TimeoutError: not done within ``timeout`` (it is cancelled, and
            awaited, first).
    """
    if sys.version_info >= (3, 12) or (timeout is not None and timeout <= 0):
        # (with no time left, wait_for gives up at once and loses no cancel)
        return await asyncio.wait_for(awaitable, timeout)
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait((task,), timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_retrieve)
        raise
    if not done:
        task.cancel()
        await asyncio.wait((task,))
        if task.cancelled():
            raise asyncio.TimeoutError
    return task.result()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a dropped task's outcome seen: no "exception was never retrieved"."""
    if not task.cancelled():
        task.exception()


class TaskOwner:
    """Holds, watches and finally cancels the background tasks of one object.

    Args:
        name: names the owner in task names and log lines (e.g. ``"Reader(t/c)"``).
        on_failure: called (synchronously, on the loop) with the exception of the
            first task that fails; later failures are logged. ``None``: only logged.
        close_timeout: seconds :meth:`aclose` waits for cancelled tasks to end.
    """

    __slots__ = ("_closed", "_failure", "_name", "_on_failure", "_tasks", "close_timeout")

    def __init__(
        self,
        name: str,
        on_failure: Callable[[BaseException], None] | None = None,
        *,
        close_timeout: float = 5.0,
    ) -> None:
        self._name = name
        self._on_failure = on_failure
        self.close_timeout = close_timeout
        self._tasks: set[asyncio.Task[Any]] = set()
        self._failure: BaseException | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called (no task may start any more)."""
        return self._closed

    @property
    def failure(self) -> BaseException | None:
        """The exception of the first task that failed, if any."""
        return self._failure

    @property
    def tasks(self) -> frozenset[asyncio.Task[Any]]:
        """The tasks still running."""
        return frozenset(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        """Run ``coro`` as a task of this owner.

        Raises:
            RuntimeError: the owner is closed (the coroutine is closed, never run).
        """
        if self._closed:
            coro.close()
            raise RuntimeError(f"{self._name} is closed: it starts no task ({name})")
        task = asyncio.get_running_loop().create_task(coro, name=f"{self._name}: {name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        if self._failure is not None or self._on_failure is None:
            log.error("%s failed: %s: %s", task.get_name(), type(exc).__name__, exc, exc_info=exc)
            if self._failure is None:
                self._failure = exc
            return
        self._failure = exc
        try:
            self._on_failure(exc)
        except Exception:  # pragma: no cover - an owner's callback must not raise
            log.exception("%s: reporting the failure of %s failed", self._name, task.get_name())

    async def cancel(self, task: asyncio.Task[Any]) -> None:
        """Cancel one of the tasks and wait for it to end (bounded by ``close_timeout``)."""
        task.cancel()
        await asyncio.wait([task], timeout=self.close_timeout)

    async def aclose(self) -> None:
        """Cancel every task and wait for them (at most ``close_timeout`` seconds).

        Idempotent. If the caller is cancelled while waiting, the tasks have been
        cancelled all the same and end on their own.
        """
        self._closed = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.close_timeout
        while self._tasks:
            pending = list(self._tasks)
            for task in pending:
                task.cancel()
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.error(
                    "%s: %d task(s) did not end within %.1fs of being cancelled: %s",
                    self._name,
                    len(pending),
                    self.close_timeout,
                    ", ".join(sorted(t.get_name() for t in pending)),
                )
                return
            # A task may swallow one cancel (a cleanup that awaits again): cancel
            # whatever still runs again after a short while.
            await asyncio.wait(pending, timeout=min(remaining, _RECANCEL_AFTER))

    def __repr__(self) -> str:
        return f"TaskOwner({self._name!r}, tasks={len(self._tasks)}, closed={self._closed})"
