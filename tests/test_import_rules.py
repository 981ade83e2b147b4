"""Import rules of the packages that follow them (the syntax trees are read, so
``TYPE_CHECKING`` imports and imports inside functions count):

* no import cycle among the package's modules;
* no import of a sibling module inside a function (a cycle in hiding);
* no module takes another module's ``_private`` name (share it under a public
  name in the module that owns it, or move it where both can import it).

And for the modules listed below: pure modules outside a ``_protocol`` package
import no I/O (``asyncio``, ``socket``, ``time``, ``random``, ...) at run time; the
nsqd emulator's modules reach no private attribute of another module's object
(the HTTP API and the TCP server work through the state's and the emulator's
public methods).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import import_rules as rules

PACKAGES = ("jetstream", "nsq", "telemetry", "testing")

#: Pure modules that do not live in a ``_protocol`` package (tests/test_structure.py
#: checks those).
PURE_MODULES = ("aioclients.testing._nsqd_state",)

#: The nsqd emulator, split into parts that use each other's public names only.
NSQD_EMULATOR = (
    "aioclients.testing.nsqd",
    "aioclients.testing._nsqd_state",
    "aioclients.testing._nsqd_server",
    "aioclients.testing._nsqd_lookup",
    "aioclients.testing._nsq_http",
    "aioclients.testing._nsq_wire",
)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package: str) -> None:
    assert rules.cycle(rules.graph([package])) is None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_sibling_imported_inside_a_function(package: str) -> None:
    assert rules.imports_in_functions([package]) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_private_name_taken_from_another_module(package: str) -> None:
    assert rules.private_names_taken([package]) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_the_package_is_read(package: str) -> None:
    found = rules.graph([package])
    assert len(found) > 3
    assert any(found.values()), "no import between its modules was seen"


def test_the_rules_catch_each_fault(tmp_path: Path) -> None:
    root = tmp_path / "aioclients"
    pkg = root / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aioclients.pkg._b import B\n"
    )
    (pkg / "_b.py").write_text(
        "from aioclients.pkg._a import A\ndef f():\n    from . import _c\n    import json\n"
    )
    (pkg / "_c.py").write_text("from aioclients.pkg._a import _secret\n")
    assert rules.cycle(rules.graph(["pkg"], root)) in (
        ["aioclients.pkg._a", "aioclients.pkg._b", "aioclients.pkg._a"],
        ["aioclients.pkg._b", "aioclients.pkg._a", "aioclients.pkg._b"],
    )
    assert rules.imports_in_functions(["pkg"], root) == [
        "aioclients.pkg._b:3 imports aioclients.pkg._c"
    ]
    assert rules.private_names_taken(["pkg"], root) == [
        "aioclients.pkg._c imports _secret from aioclients.pkg._a"
    ]


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_module_imports_no_io(module: str) -> None:
    assert rules.io_imports([module]) == []


@pytest.mark.parametrize("module", NSQD_EMULATOR)
def test_no_private_attribute_of_another_modules_object(module: str) -> None:
    assert rules.private_attributes_reached([module]) == []


def test_the_io_and_attribute_rules_catch_each_fault(tmp_path: Path) -> None:
    root = tmp_path / "aioclients"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "_pure.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import random\n"
        "import collections\n"
        "def f():\n    import time\n    from asyncio import sleep\n"
    )
    (root / "pkg" / "_api.py").write_text(
        "from typing import Protocol\n"
        "class Backend(Protocol):\n"
        "    _topics: dict\n"
        "class Api:\n"
        "    __slots__ = ('_kept',)\n"
        "    def __init__(self, backend):\n"
        "        self._backend = backend\n"
        "        self._kept = 1\n"
        "    def topics(self):\n"
        "        return self._backend._topics, self._kept, self._helper()\n"
        "    def _helper(self):\n"
        "        return self.__class__\n"
    )
    assert rules.io_imports(["aioclients.pkg._pure"], root) == [
        "aioclients.pkg._pure imports asyncio",
        "aioclients.pkg._pure imports time",
    ]
    assert rules.private_attributes_reached(["aioclients.pkg._api"], root) == [
        "aioclients.pkg._api:10 reaches self._backend._topics"
    ]
