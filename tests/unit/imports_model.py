"""The first-party modules and their imports, read from the source: what the layer test
and the architecture's package table check.

A module's imports are read with :mod:`ast`, relative ones resolved. Imports under
``if TYPE_CHECKING:`` never run: :func:`imports` leaves them out unless asked, since an
import cycle made of them still ties the modules' definitions together.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.paths import REPO_ROOT as ROOT

__all__ = [
    "PACKAGES",
    "PACKAGE_ROOTS",
    "ROOT",
    "Module",
    "first_party_modules",
    "import_cycles",
    "imports",
    "runtime_nodes",
]

PACKAGE_ROOTS: Mapping[str, Path] = {
    "lograft": ROOT / "proto",  # the protocol and the metadata image (decision 0020)
    "cluster": ROOT,
    "controller": ROOT,
    "replica": ROOT,
    "spark": ROOT,
    "chaos": ROOT,
}
"""Each first-party package and the directory its top level sits in."""
PACKAGES = tuple(PACKAGE_ROOTS)


@dataclass(frozen=True)
class Module:
    """One first-party module: its dotted name, path (relative to the root) and source."""

    name: str
    path: str
    source: str

    @property
    def is_package(self) -> bool:
        """Whether this is a package's ``__init__``."""
        return self.path.endswith("/__init__.py")


def first_party_modules(root: Path = ROOT) -> dict[str, Module]:
    """Every module of the first-party packages, by dotted name."""
    modules: dict[str, Module] = {}
    for package, base in PACKAGE_ROOTS.items():
        base = root / base.relative_to(ROOT)
        for file in sorted((base / package).rglob("*.py")):
            path = file.relative_to(root).as_posix()
            parts = file.relative_to(base).as_posix().removesuffix(".py").split("/")
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = Module(".".join(parts), path, file.read_text())
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node that can run: the bodies of ``if TYPE_CHECKING:`` are left out."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            stack.append(node.test)
        else:
            stack.extend(ast.iter_child_nodes(node))


def imports(
    module: Module, known: Mapping[str, Module], *, type_checking: bool = False
) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` for each runtime import, relative ones resolved; with
    ``type_checking`` those under ``if TYPE_CHECKING:`` too.

    ``from a.b import c`` imports ``a.b.c`` when that is a module, else ``a.b``.
    """
    tree = ast.parse(module.source, module.path)
    for node in ast.walk(tree) if type_checking else runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.name.split(".")
                if not module.is_package:
                    package.pop()
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            named = {f"{base}.{alias.name}" for alias in node.names}
            for imported in sorted({name if name in known else base for name in named}):
                yield imported, node.lineno


def _owner(name: str, modules: Mapping[str, Module]) -> str | None:
    """The module that defines ``name`` (itself, or the package a name is taken from)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_cycles(modules: Mapping[str, Module]) -> list[tuple[str, ...]]:
    """Every group of modules that import each other, directly or around a loop, counting
    imports under ``if TYPE_CHECKING:`` (sorted names; Tarjan's strongly connected
    components). A module importing its own package's ``__init__`` is no loop."""
    graph: dict[str, set[str]] = {}
    for name, module in modules.items():
        targets = (_owner(t, modules) for t, _ in imports(module, modules, type_checking=True))
        graph[name] = {t for t in targets if t and t != name and not name.startswith(f"{t}.")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[tuple[str, ...]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: list[str] = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(tuple(sorted(group)))

    for name in sorted(graph):
        if name not in index:
            connect(name)
    return sorted(found)
