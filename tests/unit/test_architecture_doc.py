"""docs/architecture.md names code as ``path`` and ``path:Qualified.name``: every one it names
must exist, so the map cannot drift from the territory unnoticed. (A file named without a
directory must exist somewhere in the repository's packages, tests or docs.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.paths import REPO_ROOT

DOC = REPO_ROOT / "docs" / "architecture.md"
_REFERENCE = re.compile(r"`([\w./]+\.(?:py|c|proto)|[\w./]+/)(?::([\w.]+))?`")


def _defined_names(tree: ast.Module) -> set[str]:
    """Qualified names a module defines: functions, classes, their methods and attributes
    (``Class.method``, ``Class.attr``), and module-level assignments."""
    names: set[str] = set()

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(prefix + node.name)
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(prefix + t.id for t in targets if isinstance(t, ast.Name))

    visit(tree.body, "")
    return names


def references(text: str) -> list[tuple[str, str | None]]:
    """``(path, qualified name or None)`` for every code reference of the page."""
    return [(m.group(1), m.group(2)) for m in _REFERENCE.finditer(text)]


def _find(root: Path, file_name: str) -> Path | None:
    """A file named without its directory (``test_replication_sim.py``, in a table that
    names the directory elsewhere): anywhere in the packages, the tests or the docs."""
    for top in ("proto", "cluster", "controller", "replica", "spark", "chaos", "tests", "docs"):
        found = next((root / top).rglob(file_name), None)
        if found is not None:
            return found
    return None


def unresolved(text: str, root: Path = REPO_ROOT) -> list[str]:
    """The references of ``text`` that name no file, or no definition in their file."""
    missing: list[str] = []
    for path, name in references(text):
        target = root / path if "/" in path else _find(root, path)
        if target is None or not target.exists():
            missing.append(path)
        elif (
            name is not None
            and path.endswith(".py")
            and name not in _defined_names(ast.parse(target.read_text()))
        ):
            missing.append(f"{path}:{name}")
    return missing


def test_every_file_and_function_the_architecture_names_exists() -> None:
    text = DOC.read_text()
    assert len(references(text)) > 40  # the pattern still finds the page's references
    assert unresolved(text) == []


def test_a_renamed_function_or_a_moved_file_is_caught() -> None:
    text = (
        "`replica/partition.py:Partition.append_as_leader` and "
        "`replica/partition.py:Partition.no_such_step` and `cluster/gone.py` and `replica/log/`"
    )
    assert unresolved(text) == ["replica/partition.py:Partition.no_such_step", "cluster/gone.py"]
