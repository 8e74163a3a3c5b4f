"""How expression errors are worded: error codes, quoting, and the raise helpers."""

from __future__ import annotations

import ast
from typing import NoReturn

from wfkit.errors import ExpressionError

_CODE_UNSAFE = "unsafe-expression"
_CODE_SYNTAX = "syntax"
_CODE_EMPTY = "empty"
_CODE_RUNTIME = "expression"

_EXAMPLE = "total > 10 and customer.tier == 'gold'"


def _text(node: ast.AST) -> str:
    """Source text of a sub-expression, shortened for messages."""
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _short(value: object) -> str:
    """``repr`` of a value, shortened for messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _quote(source: str) -> str:
    text = source if len(source) <= 80 else source[:77] + "..."
    return repr(text)


def _fail(source: str, problem: str, todo: str, code: str) -> NoReturn:
    raise ExpressionError(
        f"Expression {_quote(source)} {problem}; {todo}", expression=source, code=code
    )


def _unsafe(source: str, problem: str, todo: str) -> NoReturn:
    _fail(source, problem, todo, _CODE_UNSAFE)
