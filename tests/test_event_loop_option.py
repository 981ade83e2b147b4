"""``--aioclients-loop`` / ``AIOCLIENTS_TEST_LOOP``: the plugin runs async tests and
fixtures on the chosen loop, and leaves pytest-asyncio alone by default."""

from __future__ import annotations

import pytest

pytest.importorskip("uvloop")

TESTS = """
import asyncio

import pytest


@pytest.fixture
async def fixture_loop():
    return type(asyncio.get_running_loop()).__module__


async def test_loop(fixture_loop):
    here = type(asyncio.get_running_loop()).__module__
    print(f"LOOP test={here} fixture={fixture_loop}")
"""

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_loops=TESTS)
    pytester.makeini(INI)
    return pytester.runpytest("-s", "-p", "no:cacheprovider", *args)


@pytest.fixture(autouse=True)
def no_loop_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIOCLIENTS_TEST_LOOP", raising=False)


def test_option_runs_tests_and_fixtures_on_uvloop(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--aioclients-loop=uvloop")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*async tests run on uvloop*", "*LOOP test=uvloop* fixture=uvloop*"]
    )


def test_env_variable_runs_them_on_uvloop(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOCLIENTS_TEST_LOOP", "uvloop")
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*LOOP test=uvloop* fixture=uvloop*"])


def test_option_wins_over_the_env_variable(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOCLIENTS_TEST_LOOP", "uvloop")
    result = run(pytester, "--aioclients-loop=asyncio")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*LOOP test=asyncio* fixture=asyncio*"])


def test_default_is_asyncios_loop(pytester: pytest.Pytester) -> None:
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*LOOP test=asyncio* fixture=asyncio*"])
    result.stdout.no_fnmatch_line("*async tests run on uvloop*")


def test_an_unknown_loop_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOCLIENTS_TEST_LOOP", "trio")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*AIOCLIENTS_TEST_LOOP='trio': choose one of asyncio, uvloop*"])


def test_without_the_loop_factory_hook_the_policy_fixture_gives_uvloop(
    pytester: pytest.Pytester,
) -> None:
    # pytest-asyncio before 1.4 has no pytest_asyncio_loop_factories hook: the plugin
    # then overrides the event_loop_policy fixture those releases document. Without
    # pytest-asyncio at all the hook is missing too, which shows the fallback's policy.
    pytester.makepyfile(
        test_policy="""
        def test_policy(event_loop_policy):
            loop = event_loop_policy.new_event_loop()
            try:
                print("POLICY LOOP", type(loop).__module__)
            finally:
                loop.close()
        """
    )
    result = pytester.runpytest(
        "-s", "-p", "no:cacheprovider", "-p", "no:asyncio", "--aioclients-loop=uvloop"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*POLICY LOOP uvloop*"])
