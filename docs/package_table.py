"""Which package imports which: a table counted from the code's imports.

Usage: python docs/package_table.py [--json]

Counts every import statement that can run (those under ``if TYPE_CHECKING:`` are left
out, as in ``tests/unit/test_layers.py``) from one package into another, relative imports
resolved. The packages are listed bottom first; an import from a package into one listed
above it points up, and is printed after the table, as is every cycle between packages.
The client (``cluster.client``) counts as a package of its own: it is what users import.
"""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (  # bottom first: (name, directory holding its top level)
    ("lograft.protocol", ROOT / "proto"),
    ("lograft.durable", ROOT / "proto"),
    ("lograft.metadata", ROOT / "proto"),
    ("controller", ROOT),
    ("replica", ROOT),
    ("cluster.client", ROOT),
    ("cluster", ROOT),
    ("spark", ROOT),
    ("chaos", ROOT),
)
NAMES = tuple(name for name, _ in PACKAGES)


def package_of(module: str) -> str | None:
    """The package of a dotted module name: the longest listed prefix."""
    matches = [n for n in NAMES if module == n or module.startswith(n + ".")]
    return max(matches, key=len, default=None)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for name, base in PACKAGES:
        directory = base / name.replace(".", "/")
        files = [directory.with_suffix(".py")] if directory.with_suffix(".py").is_file() else []
        for file in files or sorted(directory.rglob("*.py")):
            parts = file.relative_to(base).with_suffix("").parts
            dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found.setdefault(dotted, file)
    return found


def _runtime_imports(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    imported: list[str] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join([*parts[:keep], *([base] if base else [])])
            imported += [f"{base}.{alias.name}" for alias in node.names]
        stack.extend(ast.iter_child_nodes(node))
    return imported


def count_imports() -> Counter[tuple[str, str]]:
    """(importing package, imported package) -> import statements (names, for ``from``)."""
    edges: Counter[tuple[str, str]] = Counter()
    for module, file in _modules().items():
        source_package = package_of(module)
        tree = ast.parse(file.read_text())
        for target in _runtime_imports(tree, module, file.name == "__init__.py"):
            target_package = package_of(target)
            if target_package and source_package and target_package != source_package:
                edges[(source_package, target_package)] += 1
    return edges


def cycles(edges: Counter[tuple[str, str]]) -> list[tuple[str, ...]]:
    """Every cycle between packages, each once, from its first package in ``NAMES``."""
    graph = {n: sorted({b for (a, b) in edges if a == n}, key=NAMES.index) for n in NAMES}
    found: list[tuple[str, ...]] = []

    def walk(start: str, node: str, path: tuple[str, ...]) -> None:
        for nxt in graph[node]:
            if nxt == start:
                found.append(path)
            elif nxt not in path and NAMES.index(nxt) > NAMES.index(start):
                walk(start, nxt, (*path, nxt))

    for name in NAMES:
        walk(name, name, (name,))
    return found


def main(argv: list[str]) -> int:
    edges = count_imports()
    upward = sorted(
        ((a, b, n) for (a, b), n in edges.items() if NAMES.index(b) > NAMES.index(a)),
        key=lambda e: (NAMES.index(e[0]), NAMES.index(e[1])),
    )
    loops = cycles(edges)
    if "--json" in argv:
        print(
            json.dumps(
                {
                    "packages": NAMES,
                    "imports": {f"{a} -> {b}": n for (a, b), n in sorted(edges.items())},
                    "upward": [f"{a} -> {b}" for a, b, _ in upward],
                    "cycles": [" -> ".join((*c, c[0])) for c in loops],
                },
                indent=2,
            )
        )
        return 0
    short = {n: n.removeprefix("lograft.") for n in NAMES}
    print("| imports → | " + " | ".join(short[n] for n in NAMES) + " |")
    print("|---|" + "---|" * len(NAMES))
    for a in reversed(NAMES):
        cells = [str(edges.get((a, b), "")) if a != b else "·" for b in NAMES]
        print(f"| **{short[a]}** | " + " | ".join(cells) + " |")
    print()
    print("upward:", ", ".join(f"{a} → {b} ({n})" for a, b, n in upward) or "none")
    print("cycles:", ", ".join(" → ".join((*c, c[0])) for c in loops) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
