"""Structural rules: pure cores import no I/O, public names are exported and typed."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import aioclients

PACKAGE = Path(aioclients.__file__).parent
FORBIDDEN = {"asyncio", "anyio", "grpc", "aiohttp", "nats", "socket", "time", "random"}
PURE_DIRS = [PACKAGE / "_core", *sorted(PACKAGE.glob("*/_protocol"))]
#: pure models inside the emulators
PURE_FILES = [PACKAGE / "testing" / "_liftbridge_log.py"]


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
    return name == "TYPE_CHECKING"


def _imports(path: Path) -> set[str]:
    """Top-level package names imported at run time (``if TYPE_CHECKING:`` blocks excluded)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if _is_type_checking_block(node):
            assert isinstance(node, ast.If)
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        stack.extend(ast.iter_child_nodes(node))
    return names


def test_there_are_pure_modules_to_check() -> None:
    assert PACKAGE / "_core" in PURE_DIRS
    assert PACKAGE / "jetstream" / "_protocol" in PURE_DIRS


@pytest.mark.parametrize(
    "path",
    [*(p for d in PURE_DIRS for p in sorted(d.rglob("*.py"))), *PURE_FILES],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_pure_modules_import_no_io(path: Path) -> None:
    bad = _imports(path) & FORBIDDEN
    assert not bad, f"{path.name} imports {sorted(bad)}; protocol cores must stay pure"


def test_pure_module_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import time\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    import socket\nelse:\n    import random\n"
        "def f():\n    from asyncio import sleep\n"
    )
    assert _imports(sample) & FORBIDDEN == {"time", "asyncio", "random"}


PUBLIC_PACKAGES = [
    "aioclients",
    "aioclients.jetstream",
    "aioclients.liftbridge",
    "aioclients.nsq",
    "aioclients.telemetry",
    "aioclients.testing",
]


@pytest.mark.parametrize("name", PUBLIC_PACKAGES)
def test_all_is_a_sorted_tuple_of_existing_names(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert isinstance(exported, tuple)
    assert len(set(exported)) == len(exported)
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ names missing {attr!r}"


def test_py_typed_is_shipped() -> None:
    assert (PACKAGE / "py.typed").is_file()


def test_version_is_a_string() -> None:
    assert isinstance(aioclients.__version__, str)
    assert aioclients.__version__.count(".") >= 2


PROTOCOL_PACKAGES = ["aioclients.jetstream", "aioclients.liftbridge", "aioclients.nsq"]


@pytest.mark.parametrize("name", PROTOCOL_PACKAGES)
def test_every_public_error_derives_from_the_root(name: str) -> None:
    module = importlib.import_module(name)
    errors = [getattr(module, n) for n in module.__all__ if n.endswith("Error")]
    assert len(errors) >= 2
    for err in errors:
        assert issubclass(err, aioclients.AioClientsError), err


def test_the_jetstream_client_and_nats_py_load_on_first_use() -> None:
    """``aioclients.jetstream``'s errors, models and protocol values import without
    nats-py (Spark's workers need no more); its client's names load it when first used."""
    code = (
        "import sys\n"
        "import aioclients.jetstream as js\n"
        "from aioclients.jetstream import DirectGetUnavailableError, StreamInfo\n"
        "print('nats' in sys.modules, 'aiohttp' in sys.modules, 'connect' in dir(js))\n"
        "from aioclients.jetstream import connect\n"
        "print('nats' in sys.modules, connect is js.connect is js._context.connect)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["False", "False", "True", "True", "True"]


def test_key_deleted_is_a_key_not_found() -> None:
    import aioclients.jetstream as js

    assert issubclass(js.KeyDeletedError, js.KeyNotFoundError)


def test_timeouts_are_builtin_timeouts_and_closed_errors_are_named_so() -> None:
    import aioclients.jetstream as js

    assert issubclass(js.NoMessagesError, TimeoutError)
    assert issubclass(js.APITimeoutError, TimeoutError)
    assert issubclass(js.NoHeartbeatError, TimeoutError)
    assert js.JetStreamClosedError.__name__.endswith("ClosedError")
    assert issubclass(js.JetStreamClosedError, aioclients.ClientClosedError)


API_JETSTREAM_NAMES = [
    "connect",
    "JetStream",
    "Stream",
    "Consumer",
    "StreamInfo",
    "ConsumerInfo",
    "AccountInfo",
    "PubAck",
    "StoredMessage",
    "JetStreamError",
    "StreamNotFoundError",
    "ConsumerNotFoundError",
    "MessageNotFoundError",
    "NoMessagesError",
    "ConsumerDeletedError",
    "NoHeartbeatError",
    "MessageAlreadyAckedError",
    "TooManySubjectsError",
    # Key-Value and ordered consumers
    "KeyValue",
    "KeyValueEntry",
    "BucketNotFoundError",
    "KeyNotFoundError",
    "KeyDeletedError",
    "KeyExistsError",
    "KeyWrongRevisionError",
    "OrderedConsumer",
    "ConsumerReset",
]


@pytest.mark.parametrize("name", API_JETSTREAM_NAMES)
def test_contract_names_are_exported(name: str) -> None:
    import aioclients.jetstream as js

    assert name in js.__all__
