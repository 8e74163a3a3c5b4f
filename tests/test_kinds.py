"""A node kind is declared once (STYLE.md 27; CONTRIBUTING.md, "Adding a node kind").

Every kind has an entry in ``wfkit.definition.kinds.KINDS`` and an engine handler; the semantics
text names every kind and says, outlet by outlet, what the table says an unconnected one means;
and no module outside the table asks which specific kind a node is.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

import wfkit
from wfkit.definition.kind_spec import Unconnected
from wfkit.definition.kinds import KINDS, NodeKind
from wfkit.engine.nodes import load_all

PACKAGE = Path(wfkit.__file__).parent
ROOT = PACKAGE.parent
SEMANTICS = ROOT / "docs" / "semantics.md"

TABLE = "wfkit/definition/kinds.py"
"""The one module that names specific kinds freely: the table."""


def test_every_kind_has_an_entry_in_the_table() -> None:
    assert list(KINDS) == list(NodeKind)
    for kind, spec in KINDS.items():
        assert spec.kind is kind
        assert issubclass(spec.config, BaseModel)


def test_every_kind_has_an_engine_handler() -> None:
    assert sorted(load_all()) == sorted(k.value for k in NodeKind)


def test_every_outlet_means_something_when_unconnected() -> None:
    for spec in KINDS.values():
        names = [o.name for o in spec.outlets]
        assert len(set(names)) == len(names), spec.kind
        assert (spec.branches is None) == ("branches" not in spec.config.model_fields), spec.kind


# --- the semantics text follows the table ------------------------------------------------------


def _table(section: str) -> list[list[str]]:
    """The rows of the first table under ``## <section>`` in docs/semantics.md."""
    text = SEMANTICS.read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def _words(cell: str) -> set[str]:
    return set(re.findall(r"[a-z_]+", cell))


def _meaning(text: str) -> Unconnected:
    """The §3 prose, read as the table's vocabulary."""
    if "invalid graph" in text:
        return Unconnected.REFUSED
    if "path.ended" in text:
        return Unconnected.END_RECORDED
    if "goes on along" in text:
        return Unconnected.NEXT
    if "fail" in text:
        return Unconnected.FAIL
    assert "path ends" in text, text
    return Unconnected.END


def test_the_semantics_text_describes_every_kind() -> None:
    described = set().union(*(_words(row[0]) for row in _table("2. Node kinds")))
    assert {k.value for k in NodeKind} <= described


def test_the_semantics_text_says_what_the_table_says_of_unconnected_outlets() -> None:
    said: dict[tuple[str, str], Unconnected] = {}
    for kinds, outlets, means in _table("3. Unconnected outlets"):
        for kind in _words(kinds):
            for outlet in _words(outlets):
                said[(kind, outlet)] = _meaning(means)
    for kind, spec in KINDS.items():
        for outlet in spec.outlets:
            assert said.get((kind.value, outlet.name)) == outlet.unconnected, (kind, outlet)
        if spec.branches is not None:
            assert said.get((kind.value, "branch")) == spec.branches, kind


# --- no module outside the table branches on a specific kind -----------------------------------

_KIND_SOURCE = re.compile(r"\bkind\.value\b|\bkeys\.KIND\b|[\"']kind[\"']")
"""An expression that reads a node's kind: ``node.kind.value``, ``attrs[keys.KIND]``..."""


def kind_branches(source: str) -> list[str]:
    """Where ``source`` names a specific node kind, other than to register its handler
    (``@handles(NodeKind.WAIT)``), to hand an event to it (``handlers[NodeKind.WAIT]``: a
    signal goes to the wait handler) or to build a node of it (``add(..., kind=NodeKind.START)``):
    ``NodeKind.<MEMBER>`` anywhere else, and a kind's name compared with a node's kind."""
    tree = ast.parse(source)
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "NodeKind"
            and node.attr in NodeKind.__members__
        ):
            up = parent.get(node)
            if isinstance(up, ast.keyword) and up.arg == "kind":
                continue
            if isinstance(up, ast.Call) and ast.unparse(up.func) == "handles":
                continue
            if isinstance(up, ast.Subscript) and ast.unparse(up.value).endswith("handlers"):
                continue
            found.append(f"{node.lineno}: {ast.unparse(up or node)}")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = [o for o in operands if _names_a_kind(o)]
            if named and any(_KIND_SOURCE.search(ast.unparse(o)) for o in operands):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def _names_a_kind(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in NodeKind.__members__.values()
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_kind(e) for e in node.elts)
    return False


def test_no_module_outside_the_table_branches_on_a_kind() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name != TABLE:
            found += [f"{name}:{line}" for line in kind_branches(path.read_text(encoding="utf-8"))]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        "if node.kind == NodeKind.JOIN: pass",
        "x = kind in (NodeKind.START, NodeKind.END)",
        "BASES = {NodeKind.DECISION: 'if'}",
        "ok = attrs.get(keys.KIND) == 'join'",
        "ok = node.kind.value != 'join'",
        "ok = G.nodes[n]['kind'] in ('wait', 'approval')",
    ],
)
def test_the_check_catches_a_branch_on_a_kind(source: str) -> None:
    assert kind_branches(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "@handles(NodeKind.WAIT)\nclass Wait: pass",
        "handler = writer.handlers[NodeKind.WAIT]",
        "b._add('start', kind=NodeKind.START)",
        "ok = token['st'] == 'wait'",
        "ok = w.kind == 'approval'",
        "ok = node.spec.gathers",
    ],
)
def test_the_check_leaves_registration_construction_and_other_vocabularies(source: str) -> None:
    assert kind_branches(source) == []
