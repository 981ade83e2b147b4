"""The Liftbridge package and the HTTP/2 gRPC transport read top-down.

Every import between the modules of ``aioclients/liftbridge`` and
``aioclients/_grpc_h2`` is read with ``ast`` (``if TYPE_CHECKING:`` imports and
imports inside functions count: they are arrows too) and checked against the
layers below, top first. An import may only point to a lower layer (modules of
the pure layer may import each other); the graph has no cycle; the Liftbridge
package reaches the transport through one module; no module imports another's
private name (a name with a leading underscore that is not a module).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import import_rules as rules

ROOT = rules.ROOT
PACKAGES = ("liftbridge", "_grpc_h2")
LB = "aioclients.liftbridge"
H2 = "aioclients._grpc_h2"
DOOR = f"{LB}._io._grpc"

# Module (or package prefix, ending in ".") -> layer; higher imports lower.
LAYERS: dict[str, int] = {
    LB: 90,  # the public names
    f"{LB}._client": 80,  # Client, connect
    f"{LB}._consumer": 70,  # GroupConsumer
    f"{LB}._subscription": 60,
    f"{LB}._publisher": 60,
    f"{LB}._groups": 60,
    f"{LB}._brokers": 50,  # channels, pool, metadata, the retry policy
    f"{LB}._io._h2": 45,  # the old import path of the HTTP/2 channel
    f"{LB}._io._grpc": 40,  # channels, TLS, error mapping; the door to _grpc_h2
    f"{LB}._io": 40,
    H2: 39,  # the transport package
    f"{H2}._io._h2": 35,
    f"{H2}._io": 35,
    f"{H2}._tls": 35,
    f"{H2}._protocol.": 30,  # pure
    f"{H2}._protocol": 30,
    f"{LB}._protocol.": 20,  # pure
    f"{LB}._protocol": 20,
    f"{LB}._pb.api_pb2_grpc": 11,  # generated
    f"{LB}._errors": 10,
    f"{LB}._pb.": 10,
    f"{LB}._pb": 10,
}
PURE_LAYERS = {20, 30}


def _modules(root: Path) -> dict[str, Path]:
    return rules.modules(PACKAGES, root)


def _graph(root: Path) -> dict[str, set[str]]:
    return rules.graph(PACKAGES, root)


def _layer(name: str) -> int | None:
    if name in LAYERS:
        return LAYERS[name]
    for prefix, layer in LAYERS.items():
        if prefix.endswith(".") and name.startswith(prefix):
            return layer
    return None


_cycle = rules.cycle


GRAPH = _graph(ROOT)


def test_the_graph_is_read() -> None:
    assert f"{LB}._client" in GRAPH
    assert f"{LB}._subscription" in GRAPH[f"{LB}._client"]


def test_the_import_graph_has_no_cycle() -> None:
    # TYPE_CHECKING imports count: the Liftbridge package had one circle,
    # _client -> _subscription/_publisher/_consumer -> _client.
    assert _cycle(GRAPH) is None


def test_every_import_points_down_the_layers() -> None:
    unplaced = sorted(name for name in GRAPH if _layer(name) is None)
    assert not unplaced, f"place these modules in LAYERS: {unplaced}"
    upward = []
    for name, targets in sorted(GRAPH.items()):
        for target in sorted(targets):
            here, there = _layer(name), _layer(target)
            assert here is not None
            assert there is not None
            if not (there < here or (here == there and here in PURE_LAYERS)):
                upward.append(f"{name} -> {target}")
    assert upward == []


def test_the_liftbridge_package_reaches_the_transport_through_one_module() -> None:
    users = sorted(
        name
        for name, targets in GRAPH.items()
        if name.startswith(LB) and any(t == H2 or t.startswith(H2 + ".") for t in targets)
    )
    assert users == [DOOR]
    assert not any(
        t.startswith(LB) for name, targets in GRAPH.items() if name.startswith(H2) for t in targets
    )


def test_no_module_imports_another_modules_private_name() -> None:
    assert rules.private_names_taken(PACKAGES) == []


def test_the_checks_catch_a_cycle_an_upward_import_and_a_private_name(tmp_path: Path) -> None:
    pkg = tmp_path / "aioclients" / "liftbridge"
    (pkg / "_protocol").mkdir(parents=True)
    (tmp_path / "aioclients" / "_grpc_h2").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_brokers.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from aioclients.liftbridge._client import Client\n"
    )
    (pkg / "_client.py").write_text(
        "from aioclients.liftbridge._brokers import Brokers\n"
        "from aioclients.liftbridge._errors import _secret\n"
    )
    (pkg / "_errors.py").write_text("_secret = 1\n")
    graph = _graph(tmp_path / "aioclients")
    assert _cycle(graph) in (
        [f"{LB}._brokers", f"{LB}._client", f"{LB}._brokers"],
        [f"{LB}._client", f"{LB}._brokers", f"{LB}._client"],
    )
    assert _layer(f"{LB}._client") > _layer(f"{LB}._brokers")  # type: ignore[operator]
    assert rules.private_names_taken(PACKAGES, tmp_path / "aioclients") == [
        f"{LB}._client imports _secret from {LB}._errors"
    ]


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if n.startswith(f"{LB}._protocol.")))
def test_argument_checks_and_cores_are_pure(name: str) -> None:
    # (tests/test_structure.py checks the stdlib side; here: no package module above.)
    assert all(_layer(t) in (10, 20) for t in GRAPH[name])
