"""What an expression reads: its top-level names and the constant paths below them."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from wfkit.definition._expr_eval import _LITERAL_NAMES


def _operands(node: ast.AST) -> Iterator[ast.AST]:
    """The child nodes of ``node`` in source order, leaving out a call's ``func``."""
    for field, child in ast.iter_fields(node):
        if isinstance(node, ast.Call) and field == "func":
            continue
        for item in child if isinstance(child, list) else [child]:
            if isinstance(item, ast.AST):
                yield item


def _step(key: ast.expr) -> str | None:
    """A constant subscript as a path step (integers as decimal text), else None."""
    if isinstance(key, ast.Constant) and isinstance(key.value, (str, int)):
        return None if isinstance(key.value, bool) else str(key.value)
    if (
        isinstance(key, ast.UnaryOp)
        and isinstance(key.op, ast.USub)
        and isinstance(key.operand, ast.Constant)
        and type(key.operand.value) is int
    ):
        return str(-key.operand.value)
    return None


def _path(node: ast.expr) -> tuple[ast.Name, tuple[str, ...]] | None:
    """The root name and constant path read by ``node``, or None when it is not such a path."""
    if isinstance(node, ast.Name):
        return node, (node.id,)
    if isinstance(node, ast.Attribute):
        base = _path(node.value)
        return None if base is None else (base[0], (*base[1], node.attr))
    if isinstance(node, ast.Subscript):
        step = _step(node.slice)
        base = _path(node.value)
        if step is None or base is None:
            return None
        return base[0], (*base[1], step)
    return None


def _collect_paths(node: ast.AST, found: list[tuple[tuple[int, int], tuple[str, ...]]]) -> None:
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        hit = _path(node)
        if hit is not None:
            root, path = hit
            if root.id not in _LITERAL_NAMES:
                found.append(((root.lineno, root.col_offset), path))
            return
    for item in _operands(node):
        _collect_paths(item, found)


def _reads(tree: ast.Expression) -> tuple[frozenset[str], tuple[tuple[str, ...], ...]]:
    found: list[tuple[tuple[int, int], tuple[str, ...]]] = []
    _collect_paths(tree.body, found)
    found.sort(key=lambda hit: hit[0])
    paths = tuple(dict.fromkeys(path for _, path in found))
    return frozenset(path[0] for path in paths), paths
