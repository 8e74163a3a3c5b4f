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


# --- inside the engine: no import cycles, no imports hidden in functions --------------------


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Module-level imports, leaving out ``if TYPE_CHECKING:`` blocks (no runtime edge)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            found += [n for n in node.body if isinstance(n, ast.Import | ast.ImportFrom)]
    return found


def engine_import_graph(root: Path = PACKAGE.parent) -> dict[str, set[str]]:
    """Module -> engine modules it imports at load time (the package facade left out)."""
    files = {_module_name(p, root): p for p in sorted((root / "wfkit" / "engine").rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _runtime_imports(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    package = (
                        name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    )
                    parent = ".".join(package[: len(package) - node.level + 1])
                    base = f"{parent}.{base}" if base else parent
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names
                ]
            graph[name] |= {t for t in targets if t in files and t not in ("wfkit.engine", name)}
    return graph


def test_engine_modules_import_each_other_without_a_cycle() -> None:
    import networkx as nx

    G = nx.DiGraph([(a, b) for a, targets in engine_import_graph().items() for b in targets])
    cycles = [" -> ".join(c) for c in nx.simple_cycles(G)]
    assert cycles == []


def test_engine_modules_import_at_the_top_not_inside_functions() -> None:
    hidden = []
    for path in sorted((PACKAGE / "engine").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                hidden += [
                    f"{path.relative_to(PACKAGE.parent)}:{n.lineno}"
                    for n in ast.walk(fn)
                    if isinstance(n, ast.Import | ast.ImportFrom)
                    and (getattr(n, "module", None) or "").startswith("wfkit")
                ]
    assert hidden == []


def test_the_cycle_check_sees_a_cycle(tmp_path: Path) -> None:
    engine = tmp_path / "wfkit" / "engine"
    engine.mkdir(parents=True)
    (engine / "__init__.py").write_text("")
    (engine / "a.py").write_text("from wfkit.engine.b import x\n")
    (engine / "b.py").write_text(
        "from typing import TYPE_CHECKING\nfrom wfkit.engine import a\n"
        "if TYPE_CHECKING:\n    from wfkit.engine.c import y\n"
    )
    (engine / "c.py").write_text("from . import b\n")
    graph = engine_import_graph(tmp_path)
    assert graph["wfkit.engine.a"] == {"wfkit.engine.b"}
    assert graph["wfkit.engine.b"] == {"wfkit.engine.a"}  # the TYPE_CHECKING import is no edge
    assert graph["wfkit.engine.c"] == {"wfkit.engine.b"}
