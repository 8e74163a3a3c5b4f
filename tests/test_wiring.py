"""How the engine is wired: its parts depend on the runtime, never on ``Engine`` or its privates.

``Engine`` composes explicit collaborators (no mixin bases); the run handles, transactions,
readiness, replay, metrics, the worker and the API reach the engine's parts through
``wfkit.engine.runtime.Runtime``; and no engine module grows past the size the house style
allows.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import wfkit
import wfkit as wf

PACKAGE = Path(wfkit.__file__).parent
ENGINE = PACKAGE / "engine"
MOST_LINES = 600
PRIVATE_READ = re.compile(r"\bengine\._")


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_but_the_engines_own_reads_engine_privates() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in _modules(PACKAGE)
        if path != ENGINE / "engine.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE_READ.search(line)
    ]
    assert found == []


def _imports_engine(tree: ast.AST) -> list[int]:
    """Lines importing ``Engine`` or the module ``wfkit.engine.engine`` (TYPE_CHECKING too)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = {alias.name for alias in node.names}
            if module == "wfkit.engine.engine" or (
                module.startswith("wfkit") and "Engine" in names
            ):
                lines.append(node.lineno)
            elif module == "wfkit.engine" and "engine" in names:
                lines.append(node.lineno)
        elif isinstance(node, ast.Import):
            if any(alias.name == "wfkit.engine.engine" for alias in node.names):
                lines.append(node.lineno)
    return lines


def test_no_engine_module_imports_the_engine() -> None:
    # the package's __init__ re-exports it (wfkit.engine.Engine); engine.py defines it
    allowed = {ENGINE / "__init__.py", ENGINE / "engine.py"}
    found = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in _modules(ENGINE)
        if path not in allowed and (lines := _imports_engine(ast.parse(path.read_text())))
    }
    assert found == {}


def test_the_import_check_sees_a_type_checking_import() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from wfkit.engine.engine import Engine\n"
    )
    assert _imports_engine(ast.parse(source)) == [3]


def test_the_engine_has_no_mixin_bases() -> None:
    assert wf.Engine.__bases__ == (object,)


def test_no_engine_module_is_over_the_size_limit() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in _modules(ENGINE)}
    assert {name: n for name, n in sizes.items() if n > MOST_LINES} == {}


def test_the_engine_commands_keep_their_docstrings_and_parameters() -> None:
    import inspect

    for name in ("cancel", "approve", "retry", "append", "purge", "add_admission_policy"):
        method = getattr(wf.Engine, name)
        assert method.__doc__ and len(method.__doc__) > 40, name
        assert "self" in inspect.signature(method).parameters, name
    assert "workflow_id" in inspect.signature(wf.Engine.start).parameters
