"""Imports point down the layers only (DESIGN.md, "Layers").

The layer order is the table below; a layer folder is checked as soon as it exists.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import wfkit

PACKAGE = Path(wfkit.__file__).parent

LAYERS = ("definition", "store", "engine", "api", "widgets")
"""Bottom to top: a layer may import the layers before it, never those after it."""


def imports_of(path: Path, root: Path = PACKAGE.parent) -> list[tuple[int, str]]:
    """Every module a file imports, relative imports resolved against its package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = path.relative_to(root).with_suffix("").parts[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = ".".join(package[: len(package) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def forbidden_for(layer: str) -> tuple[str, ...]:
    return tuple(f"wfkit.{above}" for above in LAYERS[LAYERS.index(layer) + 1 :])


def violations(layer: str, root: Path = PACKAGE.parent) -> list[str]:
    forbidden = forbidden_for(layer)
    bad = []
    for path in sorted((root / "wfkit" / layer).rglob("*.py")):
        for line, module in imports_of(path, root):
            if any(module == f or module.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(root)}:{line} imports {module}")
    return bad


@pytest.mark.parametrize("layer", [layer for layer in LAYERS if (PACKAGE / layer).is_dir()])
def test_layer_imports_point_down_only(layer: str) -> None:
    assert violations(layer) == []


def test_the_definition_layer_exists_so_the_rule_is_not_vacuous() -> None:
    assert len(list((PACKAGE / "definition").glob("*.py"))) >= 5


def test_the_rule_catches_absolute_relative_and_lazy_imports(tmp_path: Path) -> None:
    probe = tmp_path / "wfkit" / "definition" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "import wfkit.engine\n"
        "from wfkit.store import duckdb\n"
        "from ..widgets import editor\n"
        "from . import keys\n"
        "def later():\n"
        "    from wfkit.api.http import app\n"
    )
    assert [v.split(" imports ")[1] for v in violations("definition", tmp_path)] == [
        "wfkit.engine",
        "wfkit.store",
        "wfkit.store.duckdb",
        "wfkit.widgets",
        "wfkit.widgets.editor",
        "wfkit.api.http",
        "wfkit.api.http.app",
    ]
    assert violations("widgets", tmp_path) == []
