"""``--loop-bound-only``: keep only the tests that run code on pytest-asyncio's loop.

``--aioclients-loop=uvloop`` changes one thing: the loop pytest-asyncio runs async
tests and async fixtures on. A synchronous test whose fixtures are all synchronous
(the pure protocol cores, the emulators' state machines, layout and import checks)
runs exactly the same on either loop; a loop it makes itself (``asyncio.run``) is
asyncio's whatever the option says. ``./run uvloop`` passes ``--loop-bound-only`` so
that such tests, which the main run has, do not run twice. Loaded by
``tests/conftest.py``.
"""

from __future__ import annotations

import inspect

import pytest

LOOP_BOUND_ONLY = "--loop-bound-only"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        LOOP_BOUND_ONLY,
        action="store_true",
        help="run only the tests that run code on pytest-asyncio's event loop (async "
        "tests, tests with an async fixture): the others do not depend on "
        "--aioclients-loop. ./run uvloop uses it; the main run has every test.",
    )


def _async_function(func: object) -> bool:
    return inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func)


def runs_on_test_loop(item: pytest.Item) -> bool:
    """Whether the test, or a fixture it uses (directly or through another), is async."""
    if item.get_closest_marker("asyncio") or _async_function(getattr(item, "obj", None)):
        return True
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        _async_function(definition.func)
        for name in info.names_closure
        for definition in info.name2fixturedefs.get(name, ())
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption(LOOP_BOUND_ONLY):
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if runs_on_test_loop(item) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
