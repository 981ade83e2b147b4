"""``--loop-bound-only`` (``./run uvloop``) keeps every test that runs code on
pytest-asyncio's loop, and drops only those that cannot depend on it."""

from __future__ import annotations

import pytest

CONFTEST = """
from tests.loop_bound import pytest_addoption, pytest_collection_modifyitems
"""

TESTS = """
import pytest


@pytest.fixture
async def async_fixture():
    return 1


@pytest.fixture
def through_a_sync_fixture(async_fixture):
    return async_fixture


@pytest.fixture
def sync_fixture():
    return 2


async def test_async():
    pass


def test_sync_with_an_async_fixture(async_fixture):
    pass


def test_sync_with_an_async_fixture_behind_a_sync_one(through_a_sync_fixture):
    pass


@pytest.mark.parametrize("n", [1, 2])
async def test_async_parametrized(n):
    pass


class TestInAClass:
    async def test_async_method(self):
        pass

    def test_sync_method(self, sync_fixture):
        pass


def test_sync(sync_fixture):
    pass
"""

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

LOOP_BOUND = {
    "test_async",
    "test_sync_with_an_async_fixture",
    "test_sync_with_an_async_fixture_behind_a_sync_one",
    "test_async_parametrized[1]",
    "test_async_parametrized[2]",
    "test_async_method",
}


def collected(pytester: pytest.Pytester, *args: str) -> set[str]:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_mixed=TESTS)
    pytester.makeini(INI)
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", *args)
    assert result.ret == 0, result.stdout.str()
    return {line.split("::")[-1] for line in result.outlines if line.startswith("test_mixed.py::")}


def test_the_option_keeps_the_loop_bound_tests_only(pytester: pytest.Pytester) -> None:
    assert collected(pytester, "--loop-bound-only") == LOOP_BOUND


def test_without_it_every_test_is_collected(pytester: pytest.Pytester) -> None:
    assert collected(pytester) == LOOP_BOUND | {"test_sync_method", "test_sync"}
