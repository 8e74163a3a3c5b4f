"""Safe expressions over a workflow's data document.

Workflow definitions hold small expressions as strings: a decision's condition
(``"total > 10 and customer.tier == 'gold'"``), a for_each's items (``"lines"``), a wait's
correlation key (``"customer_id"``). This module checks them statically, when a workflow is
validated, and evaluates them over the run's JSON data document.

The language is a small, side-effect-free subset of Python expressions:

* literals: strings, numbers, ``True``/``False``/``None`` (also ``true``/``false``/``null``),
  and list, tuple, dict and set displays;
* arithmetic, comparison, boolean, membership (``in``), identity (``is``) and bit operators,
  and the conditional ``a if test else b``;
* names, which read the top-level fields of the data document (plus ``outputs``, ``item`` and
  ``loop_index`` where the engine provides them);
* ``a.b``, which reads *key* ``"b"`` of the object ``a`` (never a Python attribute), and
  subscripts ``a[0]``, ``a['key']``, ``a[1:3]``;
* calls of the functions in :data:`ALLOWED_FUNCTIONS`, by name only.

Refused when the expression is parsed: statements, ``lambda``, comprehensions and generator
expressions, ``:=``, f-strings (a format spec such as ``{x:>999999999}`` builds huge strings, so
they are refused outright; join with ``+`` and ``str()`` instead), ``*``/``**`` unpacking,
method calls, calls of anything but an allowed function, any ``.name`` starting with ``_``,
literals other than strings, numbers, booleans and ``None``, expressions longer than
:data:`MAX_EXPRESSION_LENGTH` characters or nested deeper than :data:`MAX_DEPTH` AST levels
(redundant parentheses add no AST level and are not counted), and any constant part of the
expression that breaks the evaluation limits below (``9**9**9``, ``'a' * 10**9``).

The same limits hold while evaluating: integers built by ``*``, ``**`` and ``<<`` stay under
:data:`MAX_INT_BITS` bits, strings and containers built by ``+`` and ``*`` stay under
:data:`MAX_STRING_LENGTH` items, ``%`` string formatting is refused, and one evaluation builds
at most :data:`MAX_ALLOCATION` items in total. Every failure is an
:class:`~wfkit.errors.ExpressionError`.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from wfkit.definition._expr_check import _check_constants, _check_nodes, _parse
from wfkit.definition._expr_eval import _CONTEXT_NAMES, _LITERAL_NAMES, _run, _runtime_error
from wfkit.definition._expr_limits import (
    ALLOWED_FUNCTIONS,
    MAX_ALLOCATION,
    MAX_DEPTH,
    MAX_EXPRESSION_LENGTH,
    MAX_INT_BITS,
    MAX_STRING_LENGTH,
)
from wfkit.definition._expr_limits import MAX_ROUND_DIGITS as MAX_ROUND_DIGITS  # not in __all__
from wfkit.definition._expr_messages import _CODE_SYNTAX, _EXAMPLE
from wfkit.definition._expr_reads import _reads
from wfkit.errors import ExpressionError

__all__ = [
    "ALLOWED_FUNCTIONS",
    "MAX_ALLOCATION",
    "MAX_DEPTH",
    "MAX_EXPRESSION_LENGTH",
    "MAX_INT_BITS",
    "MAX_STRING_LENGTH",
    "RESERVED_NAMES",
    "ParsedExpression",
    "check_names",
    "evaluate",
    "parse_expression",
]

# The implementation lives in the private _expr_* modules: _expr_limits (limits, budget, guarded
# operators, allowed functions), _expr_eval (the evaluator), _expr_check (static checks),
# _expr_reads (names and paths read) and _expr_messages (error wording).

RESERVED_NAMES: frozenset[str] = frozenset(
    {"True", "False", "None", *_LITERAL_NAMES, *_CONTEXT_NAMES}
)
"""Names always available: the literals and what the engine passes in (outputs, item,
loop_index)."""


# --------------------------------------------------------------------------------------------
# Parsed expressions, checked once per source text


@dataclass(frozen=True)
class ParsedExpression:
    """An expression that passed the static checks.

    Attributes
    ----------
    source : str
        The expression as written.
    names : frozenset of str
        Top-level names the expression reads (e.g. ``{"total", "customer"}``), including
        ``outputs``/``item``/``loop_index`` and allowed-function names used as values; not the
        functions it calls, and not the literals ``true``/``false``/``null``.
    paths : tuple of tuple of str
        Each dotted / constant-subscript path the expression reads, longest form only, in source
        order: ``customer.tier`` gives ``("customer", "tier")``, ``outputs['card.charge']['id']``
        gives ``("outputs", "card.charge", "id")``. Integer indexes appear as their decimal text
        (``lines[0].sku`` gives ``("lines", "0", "sku")``, as in a JSON Pointer); a path stops at
        the first subscript that is not a constant (``lines[i].sku`` gives ``("lines",)``).
    """

    source: str
    names: frozenset[str]
    paths: tuple[tuple[str, ...], ...]


class _Compiled(NamedTuple):
    parsed: ParsedExpression
    body: ast.expr


@functools.lru_cache(maxsize=4096)
def _compile(source: str) -> _Compiled:
    tree = _parse(source)
    _check_nodes(source, tree)
    _check_constants(source, tree)
    names, paths = _reads(tree)
    return _Compiled(ParsedExpression(source=source, names=names, paths=paths), tree.body)


def _compiled(source: str) -> _Compiled:
    if not isinstance(source, str):
        raise ExpressionError(
            f"Expression {source!r} is a {type(source).__name__}, not a string; "
            f"write the expression as text, e.g. {_EXAMPLE!r}",
            expression=repr(source),
            code=_CODE_SYNTAX,
        )
    return _compile(source)


# --------------------------------------------------------------------------------------------
# Public API


def parse_expression(source: str) -> ParsedExpression:
    """Parse an expression and check statically that it is safe to evaluate.

    Results are cached by source text, so parsing the same expression again is cheap.

    Parameters
    ----------
    source : str
        The expression, e.g. ``"total > 10 and customer.tier == 'gold'"``.

    Returns
    -------
    ParsedExpression
        The source with the names and paths it reads.

    Raises
    ------
    ExpressionError
        With code ``"empty"`` for a blank expression, ``"syntax"`` for one that is not a single
        valid expression (statements such as ``import os`` included), and
        ``"unsafe-expression"`` for anything refused for safety: forbidden constructs or calls,
        ``_`` attributes, too long or too deep, or a constant part that breaks the limits.
    """
    return _compiled(source).parsed


def check_names(parsed: ParsedExpression, fields: Collection[str] | None) -> list[str]:
    """List the names an expression reads that the data model does not have.

    Parameters
    ----------
    parsed : ParsedExpression
        A parsed expression.
    fields : collection of str or None
        The data model's top-level field names; ``None`` when the model is unknown.

    Returns
    -------
    list of str
        The free names that are neither in ``fields`` nor in :data:`RESERVED_NAMES` nor in
        :data:`ALLOWED_FUNCTIONS`, in the order they appear; empty when ``fields`` is ``None``.
    """
    if fields is None:
        return []
    known = set(fields)
    unknown: list[str] = []
    for path in parsed.paths:
        name = path[0]
        if (
            name not in known
            and name not in RESERVED_NAMES
            and name not in ALLOWED_FUNCTIONS
            and name not in unknown
        ):
            unknown.append(name)
    return unknown


def evaluate(
    source: str | ParsedExpression,
    data: Mapping[str, Any],
    *,
    extra: Mapping[str, Any] | None = None,
) -> Any:
    """Evaluate an expression over a workflow's data document.

    Parameters
    ----------
    source : str or ParsedExpression
        The expression; strings are parsed and checked first (cached by text).
    data : Mapping[str, Any]
        The data document; its top-level keys are the names the expression can read, and
        ``a.b`` reads key ``"b"`` of object ``a``.
    extra : Mapping[str, Any] or None, optional
        More names, e.g. ``outputs``, ``item`` and ``loop_index``; they take precedence over
        data fields of the same name. ``true``, ``false`` and ``null`` always mean the literals.

    Returns
    -------
    Any
        The expression's value.

    Raises
    ------
    ExpressionError
        For every failure: the static checks of :func:`parse_expression`, a name or field the
        data does not have, a limit hit while evaluating (code ``"unsafe-expression"``), or any
        other error raised while evaluating (code ``"expression"``, with the original exception
        as ``__cause__``).
    """
    text = source.source if isinstance(source, ParsedExpression) else source
    compiled = _compiled(text)
    try:
        return _run(text, compiled.body, data, extra)
    except Exception as exc:
        raise _runtime_error(text, exc, data, extra) from exc
