"""Run the async tests on a chosen event loop: asyncio's default, or uvloop.

Part of :mod:`aioclients.testing.pytest_plugin`. The loop is chosen with
``--aioclients-loop=uvloop`` or ``AIOCLIENTS_TEST_LOOP=uvloop`` (the option wins);
without either, nothing is registered and pytest-asyncio runs exactly as it
would without this plugin.

With uvloop chosen, the loop reaches pytest-asyncio through the mechanism it
supports: its ``pytest_asyncio_loop_factories`` hook (pytest-asyncio 1.4 and
later, where overriding the ``event_loop_policy`` fixture is deprecated), or that
fixture override on older 1.x releases that have no such hook.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
from collections.abc import Callable, Mapping

import pytest

__all__ = (
    "LOOPS",
    "LOOP_ENV",
    "LOOP_OPTION",
    "add_loop_option",
    "configure_loop",
    "loop_name",
    "loop_report_header",
)

LOOP_ENV = "AIOCLIENTS_TEST_LOOP"
LOOP_OPTION = "--aioclients-loop"
#: the loops one can choose
LOOPS = ("asyncio", "uvloop")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def add_loop_option(parser: pytest.Parser) -> None:
    group = parser.getgroup("aioclients")
    group.addoption(
        LOOP_OPTION,
        choices=LOOPS,
        default=None,
        help=f"event loop for async tests: asyncio (default) or uvloop; also ${LOOP_ENV}",
    )


def loop_name(config: pytest.Config) -> str:
    """The loop chosen for this run: the option, else ``$AIOCLIENTS_TEST_LOOP``, else asyncio."""
    chosen = config.getoption(LOOP_OPTION, default=None) or os.environ.get(LOOP_ENV) or "asyncio"
    if chosen not in LOOPS:
        raise pytest.UsageError(f"{LOOP_ENV}={chosen!r}: choose one of {', '.join(LOOPS)}")
    return str(chosen)


def _uvloop_factory() -> LoopFactory:
    try:
        import uvloop
    except ImportError:
        raise pytest.UsageError(
            "the tests were asked to run on uvloop, which is not installed: "
            "pip install 'aioclients[uvloop]' (Linux and macOS)"
        ) from None
    factory: LoopFactory = uvloop.new_event_loop
    return factory


class _LoopFactories:
    """pytest-asyncio >= 1.4: every async test and fixture runs on the chosen loop."""

    def __init__(self, name: str, factory: LoopFactory) -> None:
        self._factories = {name: factory}

    @pytest.hookimpl(optionalhook=True)
    def pytest_asyncio_loop_factories(
        self, config: pytest.Config, item: pytest.Item
    ) -> Mapping[str, LoopFactory]:
        return self._factories


class _LoopPolicy:
    """Older pytest-asyncio 1.x: the ``event_loop_policy`` fixture it documents."""

    def __init__(self, factory: LoopFactory) -> None:
        self._factory = factory

    @pytest.fixture(scope="session")
    def event_loop_policy(self) -> asyncio.AbstractEventLoopPolicy:
        factory = self._factory

        class Policy(asyncio.DefaultEventLoopPolicy):
            def new_event_loop(self) -> asyncio.AbstractEventLoop:
                return factory()

        return Policy()


def _has_loop_factory_hook(config: pytest.Config) -> bool:
    return hasattr(config.hook, "pytest_asyncio_loop_factories")


def configure_loop(config: pytest.Config) -> None:
    """Register what makes pytest-asyncio use the chosen loop (nothing for asyncio)."""
    name = loop_name(config)
    if name == "asyncio":
        return
    factory = _uvloop_factory()
    plugin: object
    if _has_loop_factory_hook(config):
        plugin = _LoopFactories(name, factory)
    else:
        plugin = _LoopPolicy(factory)
    config.pluginmanager.register(plugin, "aioclients-event-loop")


def loop_report_header(config: pytest.Config) -> str | None:
    name = loop_name(config)
    if name == "asyncio":
        return None
    return f"aioclients: async tests run on uvloop {importlib.metadata.version('uvloop')}"
