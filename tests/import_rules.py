"""Reading a package's imports with ``ast``, for the import-layer tests.

Imported by basename (``import import_rules``) from the tests of each package
whose layers are checked (``tests/liftbridge/test_import_layers.py``,
``tests/jetstream/test_jetstream_import_layers.py``). Every import counts: at
module level, under ``if TYPE_CHECKING:`` and inside function bodies (each is
an arrow of the graph); where it stands is recorded, so a test can also forbid
imports hidden in functions.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple


class Import(NamedTuple):
    """One imported name (or module) of one file."""

    #: the module imported, or the module a name is taken from
    module: str
    #: the name taken, when it is a ``_private`` name that is not a module; else ""
    private: str
    #: line of the import statement
    line: int
    #: the statement stands in a function (or lambda) body
    in_function: bool
    #: the statement stands under ``if TYPE_CHECKING:``
    type_checking: bool


def module_name(path: Path, root: Path) -> str:
    """``aioclients.x._y`` for ``<root>/x/_y.py`` (``root`` is the ``aioclients`` folder)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of ``packages`` (folders under ``root``), by dotted name."""
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


class _Reader(ast.NodeVisitor):
    def __init__(self, package: str, known: Mapping[str, Path]) -> None:
        self.package = package
        self.known = known
        self.found: list[Import] = []
        self._functions = 0
        self._type_checking = 0

    def _function(self, node: ast.AST) -> None:
        self._functions += 1
        self.generic_visit(node)
        self._functions -= 1

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function
    visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._type_checking += 1
            for child in node.body:
                self.visit(child)
            self._type_checking -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def _add(self, module: str, private: str, node: ast.stmt) -> None:
        self.found.append(
            Import(module, private, node.lineno, self._functions > 0, self._type_checking > 0)
        )

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, "", node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parts = self.package.split(".")
            up = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*up, base] if base else up)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if sub in self.known:
                self._add(sub, "", node)
            else:
                private = alias.name if alias.name.startswith("_") else ""
                self._add(base, private, node)


def imports(path: Path, known: Mapping[str, Path], root: Path) -> list[Import]:
    """Every import in the file at ``path``, wherever it stands."""
    this = module_name(path, root)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    reader = _Reader(package, known)
    reader.visit(ast.parse(path.read_text(), filename=str(path)))
    return reader.found


def graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (itself left out)."""
    known = modules(root, packages)
    return {
        name: {
            i.module for i in imports(path, known, root) if i.module in known and i.module != name
        }
        for name, path in known.items()
    }


def layer(name: str, layers: Mapping[str, int]) -> int | None:
    """The layer of a module: its own entry, or that of a prefix ending in "."."""
    if name in layers:
        return layers[name]
    for prefix, value in layers.items():
        if prefix.endswith(".") and name.startswith(prefix):
            return value
    return None


def cycle(edges: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle (first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def upward(
    edges: Mapping[str, set[str]], layers: Mapping[str, int], same_layer_ok: Iterable[int] = ()
) -> list[str]:
    """Every arrow that does not point to a lower layer (``importer -> imported``).

    Modules of a layer in ``same_layer_ok`` may import each other.
    """
    allowed = set(same_layer_ok)
    out = []
    for name, targets in sorted(edges.items()):
        here = layer(name, layers)
        for target in sorted(targets):
            there = layer(target, layers)
            if here is None or there is None:
                out.append(f"{name} -> {target} (not placed in a layer)")
            elif not (there < here or (here == there and here in allowed)):
                out.append(f"{name} -> {target}")
    return out


def private_names_taken(root: Path, packages: Iterable[str], prefix: str) -> list[str]:
    """Every ``_private`` name a module takes from another module under ``prefix``."""
    known = modules(root, packages)
    return [
        f"{name} imports {i.private} from {i.module} (line {i.line})"
        for name, path in sorted(known.items())
        for i in imports(path, known, root)
        if i.private and i.module.startswith(prefix) and i.module != name
    ]


def imports_in_functions(root: Path, packages: Iterable[str], prefix: str) -> list[str]:
    """Every import of a module under ``prefix`` that stands inside a function body."""
    known = modules(root, packages)
    return [
        f"{name} line {i.line}: {i.module}"
        for name, path in sorted(known.items())
        for i in imports(path, known, root)
        if i.in_function and (i.module == prefix.rstrip(".") or i.module.startswith(prefix))
    ]
