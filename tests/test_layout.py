"""Test modules are imported by basename (no packages under tests/): two files with one
name in different folders make pytest refuse to collect the second."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def test_test_module_names_are_unique() -> None:
    names = Counter(p.name for p in Path(__file__).parent.rglob("test_*.py"))
    assert [name for name, n in names.items() if n > 1] == []
