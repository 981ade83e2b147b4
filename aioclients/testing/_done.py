"""Results of test-server calls that finish their work before they return.

The API contract makes every call ``async`` unless it is marked sync, and writes
``NatsServer`` 's ``stop()`` / ``start()`` / ``restart()`` and ``FaultProxy`` 's
``freeze()``, ``thaw()``, ``reset()``, ``refuse()`` and ``delay()`` unmarked; they
are plain calls here (a ``NatsServer`` is a sync context manager too). Their results
can be awaited as well, so both ``server.stop()`` and ``await server.stop()`` read
right: the work is done when the call returns, and the ``await`` returns at once.
"""

from __future__ import annotations

from collections.abc import Generator

__all__ = ("DONE", "Done", "DoneCount")


class Done:
    """Nothing to return (``None``'s place); ``await`` on it returns ``None`` at once."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        return
        yield  # a generator that ends at once: the await does not suspend

    def __repr__(self) -> str:
        return "DONE"


DONE = Done()


class DoneCount(int):
    """A count (an ``int``); ``await`` on it returns the plain ``int`` at once."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, int]:
        return int(self)
        yield  # a generator that ends at once: the await does not suspend
