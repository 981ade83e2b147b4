"""The JetStream package reads top-down.

Every import between the modules of ``aioclients/jetstream`` is read with
``ast`` (``if TYPE_CHECKING:`` imports and imports inside functions count:
they are arrows too) and checked against the layers below, top first:

    facade (``__init__``, ``_context``) -> handles (``_kv`` ... ``_message``)
    -> the ``$JS.API`` request layer (``_api``) -> reply and ack routing
    (``_publisher``) -> the nats-py boundary (``_transport``) -> models
    -> the pure ``_protocol`` -> errors

An import may only point to a lower layer (modules of the pure layer may import
each other); the graph has no cycle; no module imports a module of the package
inside a function; no module takes another's ``_private`` name; only the
package's ``__init__`` imports the facade (``_context``).

(Named so, not ``test_import_layers.py``: test modules are imported by
basename, and the Liftbridge package has a ``test_import_layers.py``.)
"""

from __future__ import annotations

from pathlib import Path

import aioclients
from tests import import_rules as rules

ROOT = Path(aioclients.__file__).parent
PACKAGES = ("jetstream",)
JS = "aioclients.jetstream"
FACADE = f"{JS}._context"

# Module (or package prefix, ending in ".") -> layer; higher imports lower.
LAYERS: dict[str, int] = {
    JS: 100,  # the public names
    FACADE: 90,  # JetStream, connect: the facade over the request layer
    # handles, each over the request layer (never the facade), top first
    f"{JS}._kv": 80,  # KeyValue, KeyLister, KeyWatcher
    f"{JS}._objstore": 78,  # ObjectStore, ObjectReader, ObjectLister, ObjectWatcher
    f"{JS}._stream": 75,  # Stream, DirectGetBatch
    f"{JS}._ordered": 70,  # OrderedConsumer and its streams
    f"{JS}._push": 67,  # PushConsumer, PushMessageStream: the push driver
    f"{JS}._consumer": 65,  # Consumer
    f"{JS}._consume": 60,  # FetchResult, MessageStream, BatchStream: the pull driver
    f"{JS}._message": 55,  # Msg and its acks
    f"{JS}._control": 45,  # consumer pause/resume/reset, stream by subject
    f"{JS}._batch": 45,  # publish_batch: atomic batches (ADR-50) over the request layer
    f"{JS}._schedule": 45,  # publish_schedule: message schedules (ADR-51)
    f"{JS}._api": 40,  # JetStreamApi: $JS.API subjects, requests, errors, API level
    f"{JS}._publisher": 35,  # ReplyMux, AckMux: replies and acks by token
    f"{JS}._transport": 30,  # the nats-py boundary
    f"{JS}._models": 25,  # typed views of the server's JSON
    f"{JS}._protocol.": 20,  # pure
    f"{JS}._protocol": 20,
    f"{JS}._errors": 10,
}
PURE_LAYERS = {20}
HANDLES = range(50, 90)
HELPERS = 45  # the layer of the request helpers under the handles


def _graph(root: Path = ROOT) -> dict[str, set[str]]:
    return rules.graph(PACKAGES, root)


GRAPH = _graph()


def test_the_graph_is_read() -> None:
    assert f"{JS}._stream" in GRAPH
    assert f"{JS}._consume" in GRAPH[f"{JS}._consumer"]


def test_the_import_graph_has_no_cycle() -> None:
    # TYPE_CHECKING imports count: the package had one circle of seven modules,
    # _context -> _stream/_consumer/_kv/_ordered -> _context.
    assert rules.cycle(GRAPH) is None


def test_every_module_is_placed_in_a_layer() -> None:
    unplaced = sorted(n for n in GRAPH if rules.layer(n, LAYERS) is None)
    assert unplaced == [], f"place these modules in LAYERS: {unplaced}"


def test_every_import_points_down_the_layers() -> None:
    assert rules.upward(GRAPH, LAYERS, PURE_LAYERS) == []


def test_no_module_imports_a_module_of_the_package_inside_a_function() -> None:
    assert rules.imports_in_functions(PACKAGES, ROOT) == []


def test_no_module_imports_another_modules_private_name() -> None:
    assert rules.private_names_taken(PACKAGES, ROOT) == []


def test_only_the_package_imports_the_facade() -> None:
    importers = sorted(name for name, targets in GRAPH.items() if FACADE in targets)
    assert importers == [JS]


def test_every_handle_talks_through_the_request_layer_not_the_facade() -> None:
    # Streams, consumers, KV, Object Stores, ordered and push consumers, the pull
    # driver and messages hold the JetStreamApi of _api; none imports the facade.
    handles = sorted(
        n for n in GRAPH if (layer := rules.layer(n, LAYERS)) is not None and layer in HANDLES
    )
    assert handles == [
        f"{JS}._consume",
        f"{JS}._consumer",
        f"{JS}._kv",
        f"{JS}._message",
        f"{JS}._objstore",
        f"{JS}._ordered",
        f"{JS}._push",
        f"{JS}._stream",
    ]
    # ... and so do the request helpers under them (batches, schedules, pause/reset).
    helpers = sorted(n for n in GRAPH if rules.layer(n, LAYERS) == HELPERS)
    assert helpers == [f"{JS}._batch", f"{JS}._control", f"{JS}._schedule"]
    for name in (*handles, *helpers):
        assert f"{JS}._api" in GRAPH[name], f"{name} does not take the request layer"
    assert [f"{n} -> {t}" for n in (*handles, *helpers) for t in GRAPH[n] if t == FACADE] == []


def test_the_checks_catch_each_kind_of_fault(tmp_path: Path) -> None:
    pkg = tmp_path / "aioclients" / "jetstream"
    (pkg / "_protocol").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from aioclients.jetstream._context import JetStream\n")
    (pkg / "_context.py").write_text("from aioclients.jetstream._stream import Stream\n")
    (pkg / "_stream.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from aioclients.jetstream._context import JetStream\n"
        "def make() -> None:\n    from aioclients.jetstream._kv import KeyValue\n"
        "from aioclients.jetstream._ordered import _check_on_event\n"
    )
    (pkg / "_kv.py").write_text("from aioclients.jetstream import _context\n")
    (pkg / "_ordered.py").write_text("_check_on_event = 1\n")
    root = tmp_path / "aioclients"
    graph = _graph(root)
    assert rules.cycle(graph) == [f"{JS}._context", f"{JS}._stream", f"{JS}._context"]
    assert f"{JS}._stream -> {FACADE}" in rules.upward(graph, LAYERS, PURE_LAYERS)
    assert f"{JS}._stream -> {JS}._kv" in rules.upward(graph, LAYERS, PURE_LAYERS)
    assert rules.imports_in_functions(PACKAGES, root) == [f"{JS}._stream:5 imports {JS}._kv"]
    assert rules.private_names_taken(PACKAGES, root) == [
        f"{JS}._stream imports _check_on_event from {JS}._ordered"
    ]
    assert sorted(n for n, t in graph.items() if FACADE in t) == [JS, f"{JS}._kv", f"{JS}._stream"]
