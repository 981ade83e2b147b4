"""Reading the imports of aioclients' packages from their syntax trees.

Every ``import`` and ``from ... import`` counts, wherever it stands: at module
level, under ``if TYPE_CHECKING:`` and inside functions (they are arrows of the
import graph all the same). Used by ``tests/test_import_rules.py`` (no cycle, no
sibling imported inside a function, no private name taken from another module),
``tests/liftbridge/test_import_layers.py`` (the Liftbridge layers) and
``tests/jetstream/test_jetstream_import_layers.py`` (the JetStream layers).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aioclients

ROOT = Path(aioclients.__file__).parent


@dataclass(frozen=True, slots=True)
class Import:
    """One imported module, or one name taken from a module."""

    module: str  # the imported module (for ``from m import name`` where name is not a module: m)
    private: str  # the imported name if it starts with "_" (no dunder, no module), else ""
    in_function: bool  # the import stands inside a function body
    line: int


def module_name(path: Path, root: Path = ROOT) -> str:
    """``aioclients.nsq._reader`` for ``<root>/nsq/_reader.py``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(packages: Iterable[str], root: Path = ROOT) -> dict[str, Path]:
    """Every module of the given packages (names under ``aioclients``), by dotted name."""
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def imports(path: Path, known: dict[str, Path], root: Path = ROOT) -> list[Import]:
    """Every import in the file; ``known`` tells which dotted names are modules."""
    this = module_name(path, root)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    out: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import):
            out.extend(Import(a.name, "", in_function, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                up = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    out.append(Import(sub, "", in_function, node.lineno))
                else:
                    name = alias.name
                    dunder = name.startswith("__") and name.endswith("__")
                    private = name if name.startswith("_") and not dunder else ""
                    out.append(Import(base, private, in_function, node.lineno))
        inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(path.read_text(), filename=str(path)), False)
    return out


def graph(packages: Iterable[str], root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the same packages it imports."""
    known = modules(packages, root)
    return {
        name: {i.module for i in imports(path, known, root) if i.module in known} - {name}
        for name, path in known.items()
    }


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (``[a, b, ..., a]``), or None."""
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


def imports_in_functions(packages: Iterable[str], root: Path = ROOT) -> list[str]:
    """``"module:line imports sibling"`` for each import of a module of the same
    packages that stands inside a function."""
    known = modules(packages, root)
    return [
        f"{name}:{i.line} imports {i.module}"
        for name, path in sorted(known.items())
        for i in imports(path, known, root)
        if i.in_function and i.module in known
    ]


def private_names_taken(packages: Iterable[str], root: Path = ROOT) -> list[str]:
    """``"module imports _name from other"`` for each private name a module of the
    packages takes from another aioclients module."""
    known = modules(packages, root)
    return [
        f"{name} imports {i.private} from {i.module}"
        for name, path in sorted(known.items())
        for i in imports(path, known, root)
        if i.private and i.module.startswith("aioclients.") and i.module != name
    ]


#: What a pure module may not import at run time (docs/architecture.md, CONVENTIONS.md).
IO_MODULES = frozenset({"asyncio", "anyio", "grpc", "aiohttp", "nats", "socket", "time", "random"})


def module_path(name: str, root: Path = ROOT) -> Path:
    """``<root>/nsq/_reader.py`` for ``aioclients.nsq._reader``."""
    return root.parent.joinpath(*name.split(".")).with_suffix(".py")


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(path: Path) -> set[str]:
    """Top-level names of the modules a file imports when it runs: everywhere (function
    bodies included) but the ``if TYPE_CHECKING:`` blocks."""
    names: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text(), filename=str(path))]
    while stack:
        node = stack.pop()
        if _is_type_checking(node):
            assert isinstance(node, ast.If)
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
        stack.extend(ast.iter_child_nodes(node))
    return names


def io_imports(names: Iterable[str], root: Path = ROOT) -> list[str]:
    """``"module imports time"`` for each I/O module a module imports at run time."""
    return [
        f"{name} imports {io}"
        for name in names
        for io in sorted(runtime_imports(module_path(name, root)) & IO_MODULES)
    ]


def _walk_outside_protocols(tree: ast.AST) -> Iterable[ast.AST]:
    """``ast.walk``, skipping the bodies of ``class X(typing.Protocol)``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.ClassDef) and any(
            (isinstance(b, ast.Name) and b.id == "Protocol")
            or (
                isinstance(b, ast.Attribute)
                and b.attr == "Protocol"
                and isinstance(b.value, ast.Name)
                and b.value.id in ("typing", "typing_extensions")
            )
            for b in node.bases  # typing's Protocol; asyncio.Protocol is a class like others
        ):
            continue
        stack.extend(ast.iter_child_nodes(node))


def private_attributes_reached(names: Iterable[str], root: Path = ROOT) -> list[str]:
    """``"module:line reaches obj._name"`` for each ``obj._name`` in a module whose name
    the module never defines itself (as a function, class, assigned name or attribute,
    or ``__slots__`` entry; a ``Protocol`` describing another module's object defines
    nothing): a private attribute of another module's object.

    A heuristic: it cannot tell whose ``_name`` is reached when the module defines a
    name of that spelling too.
    """
    out: list[str] = []
    for name in names:
        tree = ast.parse(module_path(name, root).read_text())
        defined: set[str] = set()
        for node in _walk_outside_protocols(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                defined.add(node.value)  # __slots__ entries, among other strings
        reached = {
            (node.lineno, ast.unparse(node))
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and node.attr not in defined
        }
        out.extend(f"{name}:{line} reaches {text}" for line, text in sorted(reached))
    return out


def layer(name: str, layers: Mapping[str, int]) -> int | None:
    """The layer of a module: its own entry in ``layers``, or that of a package
    prefix (an entry ending in ".") it starts with; None when it has neither."""
    if name in layers:
        return layers[name]
    for prefix, value in layers.items():
        if prefix.endswith(".") and name.startswith(prefix):
            return value
    return None


def upward(
    edges: dict[str, set[str]], layers: Mapping[str, int], same_layer_ok: Iterable[int] = ()
) -> list[str]:
    """``"importer -> imported"`` for each arrow that does not point to a lower
    layer; modules of a layer in ``same_layer_ok`` may import each other."""
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
