"""The HTTP/2 gRPC transport is a package of its own: a pure core, no client's names.

``tests/test_structure.py`` finds pure cores as ``aioclients/*/_protocol``; these
tests pin that the transport's core is one of them and obeys the rule, and that
nothing in ``aioclients._grpc_h2`` imports a client package (the Liftbridge
client configures it from outside: user agent, logger).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import aioclients
from aioclients._grpc_h2 import Http2Channel

PACKAGE = Path(aioclients.__file__).parent
TRANSPORT = PACKAGE / "_grpc_h2"
FORBIDDEN_IN_CORE = {"asyncio", "anyio", "grpc", "aiohttp", "nats", "socket", "time", "random"}
# What the transport may import from the library: the shared core, errors and task
# helpers, itself.
ALLOWED_OWN = ("aioclients._core", "aioclients._errors", "aioclients._tasks", "aioclients._grpc_h2")


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


MODULES = sorted(TRANSPORT.rglob("*.py"))


def test_the_pure_core_is_where_the_pure_rule_looks() -> None:
    assert TRANSPORT / "_protocol" in PACKAGE.glob("*/_protocol")
    assert (TRANSPORT / "_protocol" / "_http2.py").is_file()


@pytest.mark.parametrize(
    "path", sorted((TRANSPORT / "_protocol").rglob("*.py")), ids=lambda p: p.name
)
def test_the_pure_core_imports_no_io(path: Path) -> None:
    top = {name.split(".")[0] for name in _imported_modules(path)}
    assert not top & FORBIDDEN_IN_CORE


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(TRANSPORT)))
def test_the_transport_imports_no_client_package(path: Path) -> None:
    own = {n for n in _imported_modules(path) if n.split(".")[0] == "aioclients"}
    foreign = {n for n in own if n != "aioclients" and not n.startswith(ALLOWED_OWN)}
    assert not foreign, f"{path.name} imports {sorted(foreign)}"
    assert "liftbridge" not in path.read_text().lower()


def test_the_channel_takes_its_user_agent_and_logger() -> None:
    import logging

    ch = Http2Channel("h:1")
    assert ch.user_agent == "aioclients-grpc-h2"
    assert ch.log.name == "aioclients.grpc_h2"
    mine = logging.getLogger("aioclients.someclient")
    ch = Http2Channel("h:1", user_agent="someclient/1", logger=mine)
    assert (ch.user_agent, ch.log) == ("someclient/1", mine)
