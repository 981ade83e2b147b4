"""Import rules of the packages that follow them (the syntax trees are read, so
``TYPE_CHECKING`` imports and imports inside functions count):

* no import cycle among the package's modules;
* no import of a sibling module inside a function (a cycle in hiding);
* no module takes another module's ``_private`` name (share it under a public
  name in the module that owns it, or move it where both can import it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import import_rules as rules

PACKAGES = ("nsq", "testing")


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
