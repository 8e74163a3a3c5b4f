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
import contextvars
import functools
import math
import operator
import threading
import types
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, NoReturn

from simpleeval import (
    DISALLOW_FUNCTIONS,
    EvalWithCompoundTypes,
    FeatureNotAvailable,
    IterableTooLong,
    NumberTooHigh,
)

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

MAX_EXPRESSION_LENGTH = 2_000
"""Longest expression accepted, in characters (surrounding whitespace not counted)."""

MAX_DEPTH = 50
"""Deepest AST nesting accepted (``-(-(-x))`` is 4 levels; parentheses alone add none)."""

MAX_INT_BITS = 4_096
"""Largest integer, in bits, that ``*``, ``**`` and ``<<`` may build."""

MAX_STRING_LENGTH = 100_000
"""Largest string or container (items counted through nesting) that ``+``, ``*`` or
``str()`` may build."""

MAX_ALLOCATION = 5_000_000
"""Most items (characters, or elements of containers) one evaluation may build in total."""

MAX_ROUND_DIGITS = 1_000
"""Largest ``ndigits`` (either sign) accepted by ``round``."""

_CODE_UNSAFE = "unsafe-expression"
_CODE_SYNTAX = "syntax"
_CODE_EMPTY = "empty"
_CODE_RUNTIME = "expression"

_LITERAL_NAMES: Mapping[str, object] = types.MappingProxyType(
    {"true": True, "false": False, "null": None}
)
_CONTEXT_NAMES = frozenset({"outputs", "item", "loop_index"})

RESERVED_NAMES: frozenset[str] = frozenset(
    {"True", "False", "None", *_LITERAL_NAMES, *_CONTEXT_NAMES}
)
"""Names always available: the literals and what the engine passes in (outputs, item,
loop_index)."""

_EXAMPLE = "total > 10 and customer.tier == 'gold'"


# --------------------------------------------------------------------------------------------
# Limits: refusals and the per-evaluation allocation budget


class _Refusal(Exception):
    """An evaluation limit was hit; the message says which and why."""


class _Budget:
    """How many items the current evaluation may still build."""

    __slots__ = ("left",)

    def __init__(self, total: int) -> None:
        self.left = total


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "wfkit_expression_budget", default=None
)

_SIZED = (str, bytes, list, tuple)
_CONTAINERS = (list, tuple, set, frozenset, dict)


def _charge(result: object) -> None:
    """Count a freshly built string or container against the current evaluation's budget."""
    if isinstance(result, (str, bytes, list, tuple, set, frozenset, dict)):
        budget = _BUDGET.get()
        if budget is not None:
            budget.left -= len(result)
            if budget.left < 0:
                raise _Refusal(
                    f"it builds more than {MAX_ALLOCATION:,} characters or items in total"
                )


def _size(value: object, limit: int) -> int:
    """Items in ``value`` counted through nesting (shared parts counted each time).

    Stops counting as soon as the count passes ``limit``, so it is cheap on huge values.
    """
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += len(item)
            if total > limit:
                return total
            stack.extend(item)
        elif isinstance(item, Mapping):
            total += len(item)
            if total > limit:
                return total
            stack.extend(item.keys())
            stack.extend(item.values())
        if total > limit:
            return total
    return total


def _describe_int(value: int) -> str:
    if value.bit_length() <= 64:
        return str(value)
    return f"a {int(value.bit_length() * math.log10(2)) + 1:,}-digit number"


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, _SIZED) and isinstance(b, _SIZED) and len(a) + len(b) > MAX_STRING_LENGTH:
        raise _Refusal(
            f"joining values of length {len(a):,} and {len(b):,} would build more than "
            f"{MAX_STRING_LENGTH:,} items"
        )
    return a + b


def _mult(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        if a.bit_length() + b.bit_length() > MAX_INT_BITS:
            raise _Refusal(
                f"multiplying {_describe_int(a)} by {_describe_int(b)} would build an integer "
                f"of more than {MAX_INT_BITS:,} bits"
            )
        return a * b
    if isinstance(a, _SIZED) and isinstance(b, int):
        seq, count = a, b
    elif isinstance(a, int) and isinstance(b, _SIZED):
        seq, count = b, a
    else:
        return a * b
    if count > 0:
        size = _size(seq, MAX_STRING_LENGTH)
        if size * count > MAX_STRING_LENGTH:
            unit = "characters" if isinstance(seq, (str, bytes)) else "items"
            held = f"more than {MAX_STRING_LENGTH:,}" if size > MAX_STRING_LENGTH else f"{size:,}"
            raise _Refusal(
                f"repeating a {type(seq).__name__} of {held} {unit} {_describe_int(count)} times "
                f"would build more than {MAX_STRING_LENGTH:,} {unit}"
            )
    return a * b


def _pow(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
        if b > MAX_INT_BITS or b * math.log2(abs(a)) > MAX_INT_BITS:
            if b.bit_length() < 1000:
                bits = f"about {b * math.log2(abs(a)):,.0f} bits"
            else:
                bits = f"more than {MAX_INT_BITS:,} bits"
            raise _Refusal(
                f"{_describe_int(a)} ** {_describe_int(b)} would be an integer of {bits}; "
                f"the limit is {MAX_INT_BITS:,} bits"
            )
    return a**b


def _lshift(a: Any, b: Any) -> Any:
    if (
        isinstance(a, int)
        and isinstance(b, int)
        and a != 0
        and b > 0
        and a.bit_length() + b > MAX_INT_BITS
    ):
        raise _Refusal(
            f"{_describe_int(a)} << {_describe_int(b)} would be an integer of more than "
            f"{MAX_INT_BITS:,} bits"
        )
    return a << b


def _mod(a: Any, b: Any) -> Any:
    if isinstance(a, (str, bytes)):
        raise _Refusal(
            "'%' string formatting is not supported (a format such as '%999999999d' builds "
            "huge strings); join pieces with + and str() instead"
        )
    return a % b


def _contains(a: Any, b: Any) -> bool:
    return operator.contains(b, a)


def _not_contains(a: Any, b: Any) -> bool:
    return not operator.contains(b, a)


def _is(a: Any, b: Any) -> bool:
    return a is b


def _is_not(a: Any, b: Any) -> bool:
    return a is not b


_OPERATORS: Mapping[type[ast.AST], Callable[..., Any]] = types.MappingProxyType(
    {
        ast.Add: _add,
        ast.Sub: operator.sub,
        ast.Mult: _mult,
        ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv,
        ast.Mod: _mod,
        ast.Pow: _pow,
        ast.LShift: _lshift,
        ast.RShift: operator.rshift,
        ast.BitOr: operator.or_,
        ast.BitXor: operator.xor,
        ast.BitAnd: operator.and_,
        ast.Eq: operator.eq,
        ast.NotEq: operator.ne,
        ast.Lt: operator.lt,
        ast.LtE: operator.le,
        ast.Gt: operator.gt,
        ast.GtE: operator.ge,
        ast.Is: _is,
        ast.IsNot: _is_not,
        ast.In: _contains,
        ast.NotIn: _not_contains,
        ast.Not: operator.not_,
        ast.USub: operator.neg,
        ast.UAdd: operator.pos,
        ast.Invert: operator.invert,
    }
)


# --------------------------------------------------------------------------------------------
# Allowed functions


def _str(value: object = "") -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (*_CONTAINERS, Mapping)):
        size = _size(value, MAX_STRING_LENGTH)
        if size > MAX_STRING_LENGTH:
            raise _Refusal(
                f"str() of a {type(value).__name__} holding more than {MAX_STRING_LENGTH:,} "
                "items would build a huge string"
            )
    text = str(value)
    if len(text) > MAX_STRING_LENGTH:
        raise _Refusal(f"str() would build a string longer than {MAX_STRING_LENGTH:,} characters")
    _charge(text)
    return text


def _lower(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"lower() takes a string, not {type(text).__name__}")
    result = text.lower()
    _charge(result)
    return result


def _upper(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"upper() takes a string, not {type(text).__name__}")
    result = text.upper()
    _charge(result)
    return result


def _sorted(
    values: Iterable[Any], /, *, key: Callable[[Any], Any] | None = None, reverse: bool = False
) -> list[Any]:
    result = sorted(values, key=key, reverse=reverse)
    _charge(result)
    return result


def _sum(values: Iterable[Any], /, start: float = 0) -> Any:
    if isinstance(start, bool) or not isinstance(start, (int, float)):
        raise TypeError(f"sum() start must be a number, not {type(start).__name__}")
    return sum(values, start)


def _round(number: Any, ndigits: int | None = None) -> Any:
    if ndigits is None:
        return round(number)
    if isinstance(ndigits, int) and abs(ndigits) > MAX_ROUND_DIGITS:
        raise _Refusal(
            f"round() to {_describe_int(ndigits)} digits is outside the accepted range "
            f"-{MAX_ROUND_DIGITS:,}..{MAX_ROUND_DIGITS:,}"
        )
    return round(number, ndigits)


_RENAMED: tuple[tuple[Callable[..., Any], str], ...] = (
    (_str, "str"),
    (_lower, "lower"),
    (_upper, "upper"),
    (_sorted, "sorted"),
    (_sum, "sum"),
    (_round, "round"),
)
for _function, _public_name in _RENAMED:
    # Python's own argument errors then name the function as the expression spells it.
    _function.__name__ = _function.__qualname__ = _public_name
del _function, _public_name

ALLOWED_FUNCTIONS: Mapping[str, Callable[..., Any]] = types.MappingProxyType(
    {
        "abs": abs,
        "all": all,
        "any": any,
        "bool": bool,
        "float": float,
        "int": int,
        "len": len,
        "lower": _lower,
        "max": max,
        "min": min,
        "round": _round,
        "sorted": _sorted,
        "str": _str,
        "sum": _sum,
        "upper": _upper,
    }
)
"""The only functions an expression may call (by name; method calls are refused).

``lower(s)`` and ``upper(s)`` stand in for the string methods. ``sum`` adds numbers only,
``round`` limits ``ndigits`` and ``str`` refuses to build huge strings.
"""

_FUNCTION_LIST = ", ".join(sorted(ALLOWED_FUNCTIONS))


# --------------------------------------------------------------------------------------------
# The evaluator


class _MissingName(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _ReadError(Exception):
    """A field, key or index read failed; the message says what and what to do."""


_SCALARS = frozenset({int, float, str, bool, type(None)})

# Node kinds simpleeval would otherwise accept but this language refuses.
_UNSUPPORTED_AT_RUNTIME = (
    ast.ListComp,
    ast.GeneratorExp,
    ast.DictComp,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.Assign,
    ast.AugAssign,
    ast.Import,
    ast.Expr,
)


def _keys_hint(value: Mapping[Any, Any]) -> str:
    keys = sorted(map(str, value.keys()))
    if not keys:
        return "it has no fields"
    shown = ", ".join(keys[:20]) + (", ..." if len(keys) > 20 else "")
    return f"it has fields: {shown}"


def _text(node: ast.AST) -> str:
    """Source text of a sub-expression, shortened for messages."""
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _short(value: object) -> str:
    """``repr`` of a value, shortened for messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Evaluator(EvalWithCompoundTypes):
    """simpleeval's evaluator with this module's names, fields, calls and limits."""

    def __init__(self) -> None:
        super().__init__(operators=dict(_OPERATORS), functions=dict(ALLOWED_FUNCTIONS), names={})
        for kind in _UNSUPPORTED_AT_RUNTIME:
            self.nodes.pop(kind, None)
        self._data: Mapping[str, Any] = {}
        self._extra: Mapping[str, Any] | None = None

    def _check_disallowed_items(self, item: object) -> None:
        # The values an expression can reach are the data, the engine's extras and the allowed
        # functions (fields are keys, never Python attributes), so a shallow check suffices; a
        # deep walk would cost time proportional to the data on every node.
        if type(item) in _SCALARS:
            return
        if isinstance(item, types.ModuleType):
            raise FeatureNotAvailable("modules are not allowed in expressions")
        if callable(item):
            try:
                forbidden = item in DISALLOW_FUNCTIONS
            except TypeError:
                forbidden = False
            if forbidden:
                raise FeatureNotAvailable("this function is forbidden")

    def _eval_name(self, node: ast.Name) -> Any:
        name = node.id
        if name in _LITERAL_NAMES:
            return _LITERAL_NAMES[name]
        if self._extra is not None and name in self._extra:
            return self._extra[name]
        if name in self._data:
            return self._data[name]
        function = ALLOWED_FUNCTIONS.get(name)
        if function is not None:
            return function
        raise _MissingName(name)

    def _eval_attribute(self, node: ast.Attribute) -> Any:
        field = node.attr
        if field.startswith("_"):
            raise _Refusal(f"reading '.{field}' is not allowed (names starting with '_')")
        base = self._eval(node.value)
        if isinstance(base, Mapping):
            try:
                return base[field]
            except KeyError:
                where = _text(node.value)
                raise _ReadError(
                    f"read field {field!r} of {where}, which does not exist there; "
                    f"{_keys_hint(base)}. Fix the spelling, or test first with "
                    f"{field!r} in {where}"
                ) from None
        where = _text(node.value)
        raise _ReadError(
            f"read field {field!r} of {where}, but {where} is a {type(base).__name__}, not an "
            f"object with fields; check the data, or index it first (e.g. {where}[0].{field})"
        )

    def _eval_subscript(self, node: ast.Subscript) -> Any:
        container = self._eval(node.value)
        key = self._eval(node.slice)
        try:
            result = container[key]
        except KeyError:
            if not isinstance(container, Mapping):
                raise
            where = _text(node.value)
            raise _ReadError(
                f"read key {_short(key)} of {where}, which does not exist there; "
                f"{_keys_hint(container)}. Fix the key, or test first with {_short(key)} in "
                f"{where}"
            ) from None
        except IndexError:
            where = _text(node.value)
            count = len(container) if hasattr(container, "__len__") else "fewer"
            raise _ReadError(
                f"read index {_short(key)} of {where}, which has only {count} items; "
                f"check len({where}) first"
            ) from None
        if isinstance(key, slice):
            _charge(result)
        return result

    def _eval_binop(self, node: ast.BinOp) -> Any:
        result = super()._eval_binop(node)
        _charge(result)
        return result

    def _eval_call(self, node: ast.Call) -> Any:
        func = node.func
        if not isinstance(func, ast.Name) or func.id not in ALLOWED_FUNCTIONS:
            raise _Refusal("only the allowed functions may be called")
        args = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise _Refusal("'*' unpacking is not supported")
            args.append(self._eval(arg))
        kwargs: dict[str, Any] = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise _Refusal("'**' unpacking is not supported")
            kwargs[keyword.arg] = self._eval(keyword.value)
        return ALLOWED_FUNCTIONS[func.id](*args, **kwargs)


_IDLE = threading.local()


def _run(
    source: str, body: ast.expr, data: Mapping[str, Any], extra: Mapping[str, Any] | None
) -> Any:
    """Evaluate ``body`` under a fresh allocation budget; internal exceptions pass through.

    Building an evaluator costs more than evaluating a typical expression, so each thread keeps
    one idle evaluator to reuse (a nested evaluation on the same thread builds its own).
    """
    evaluator: _Evaluator | None = getattr(_IDLE, "evaluator", None)
    if evaluator is None:
        evaluator = _Evaluator()
    else:
        _IDLE.evaluator = None
    evaluator._data = data
    evaluator._extra = extra
    token = _BUDGET.set(_Budget(MAX_ALLOCATION))
    try:
        return evaluator.eval(source, previously_parsed=body)
    finally:
        _BUDGET.reset(token)
        evaluator._data = {}
        evaluator._extra = None
        _IDLE.evaluator = evaluator


# --------------------------------------------------------------------------------------------
# Static checks


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


def _quote(source: str) -> str:
    text = source if len(source) <= 80 else source[:77] + "..."
    return repr(text)


def _fail(source: str, problem: str, todo: str, code: str) -> NoReturn:
    raise ExpressionError(
        f"Expression {_quote(source)} {problem}; {todo}", expression=source, code=code
    )


def _unsafe(source: str, problem: str, todo: str) -> NoReturn:
    _fail(source, problem, todo, _CODE_UNSAFE)


_STATEMENT_HINTS: Mapping[type[ast.AST], str] = types.MappingProxyType(
    {
        ast.Assign: "assigns with '='; expressions cannot assign (to compare, use '==')",
        ast.AugAssign: "is an augmented assignment; expressions cannot assign",
        ast.AnnAssign: "is an annotated assignment; expressions cannot assign",
        ast.Import: "is an import statement; expressions cannot import",
        ast.ImportFrom: "is an import statement; expressions cannot import",
    }
)


def _syntax_error(source: str, text: str, lead: int, exc: SyntaxError | ValueError) -> NoReturn:
    todo = f"write a single expression in Python syntax that computes a value, e.g. {_EXAMPLE!r}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            module = ast.parse(text, mode="exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            module = None
    if module is not None and module.body:
        if len(module.body) > 1:
            _fail(source, f"holds {len(module.body)} statements or expressions", todo, _CODE_SYNTAX)
        statement = module.body[0]
        if not isinstance(statement, ast.Expr):
            hint = _STATEMENT_HINTS.get(type(statement))
            if hint is None:
                kind = type(statement).__name__.lower()
                hint = f"is a statement ({kind}), not an expression"
            _fail(source, hint, todo, _CODE_SYNTAX)
    if isinstance(exc, SyntaxError):
        where = ""
        if exc.lineno is not None and exc.offset is not None and exc.offset > 0:
            column = exc.offset + (lead if exc.lineno == 1 else 0)
            line = f" at line {exc.lineno}," if "\n" in text else " at"
            where = f"{line} column {column}"
        elif exc.lineno is not None:
            where = " near the end"
        problem = f"is not valid syntax{where}: {exc.msg}"
    else:
        problem = f"cannot be parsed ({exc})"
    _fail(source, problem, "fix the syntax: " + todo, _CODE_SYNTAX)


def _depth(root: ast.AST) -> int:
    """AST nesting depth, counted without recursion and without operator/context nodes."""
    deepest = 0
    stack: list[tuple[ast.AST, int]] = [(root, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        for child in ast.iter_child_nodes(node):
            if not isinstance(
                child, (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
            ):
                stack.append((child, level + 1))
    return deepest


_ALLOWED_NODES: frozenset[type[ast.AST]] = frozenset(
    {
        ast.Expression,
        ast.BoolOp,
        ast.BinOp,
        ast.UnaryOp,
        ast.IfExp,
        ast.Dict,
        ast.Set,
        ast.List,
        ast.Tuple,
        ast.Compare,
        ast.Call,
        ast.keyword,
        ast.Constant,
        ast.Attribute,
        ast.Subscript,
        ast.Slice,
        ast.Name,
        ast.Load,
        *(op for op in _OPERATORS),
        ast.And,
        ast.Or,
    }
)

_FORBIDDEN_NODES: Mapping[type[ast.AST], tuple[str, str]] = types.MappingProxyType(
    {
        ast.Lambda: (
            "defines a lambda",
            "expressions cannot define functions; use an allowed function or compute the value "
            "in an activity",
        ),
        ast.ListComp: (
            "uses a list comprehension",
            "comprehensions are not supported; use a for_each step or an activity",
        ),
        ast.SetComp: (
            "uses a set comprehension",
            "comprehensions are not supported; use a for_each step or an activity",
        ),
        ast.DictComp: (
            "uses a dict comprehension",
            "comprehensions are not supported; use a for_each step or an activity",
        ),
        ast.GeneratorExp: (
            "uses a generator expression",
            "generators are not supported; use a for_each step or an activity",
        ),
        ast.NamedExpr: (
            "assigns with ':=' (walrus)",
            "expressions cannot assign; remove the assignment and let a step write the data",
        ),
        ast.JoinedStr: (
            "uses an f-string",
            "f-strings are not supported; join pieces with + and str(), "
            "e.g. 'order-' + str(order_id)",
        ),
        ast.FormattedValue: (
            "uses an f-string",
            "f-strings are not supported; join pieces with + and str(), "
            "e.g. 'order-' + str(order_id)",
        ),
        ast.Starred: (
            "uses '*' unpacking",
            "unpacking is not supported; pass the values one by one",
        ),
        ast.Await: ("uses 'await'", "expressions are evaluated synchronously; remove it"),
        ast.Yield: ("uses 'yield'", "expressions cannot yield; remove it"),
        ast.YieldFrom: ("uses 'yield from'", "expressions cannot yield; remove it"),
    }
)

_LITERAL_TYPES = (str, int, float, bool, type(None))


def _check_call(source: str, node: ast.Call) -> None:
    func = node.func
    if isinstance(func, ast.Name):
        if func.id not in ALLOWED_FUNCTIONS:
            _unsafe(
                source,
                f"calls {func.id!r}, which is not an allowed function",
                f"use only {_FUNCTION_LIST}, or compute the value in an activity",
            )
    elif isinstance(func, ast.Attribute):
        target = _text(func.value)
        if func.attr in ALLOWED_FUNCTIONS:
            todo = f"call the function instead, e.g. {func.attr}({target})"
        else:
            todo = f"use only the allowed functions ({_FUNCTION_LIST}) or compute it in an activity"
        _unsafe(
            source, f"calls method {func.attr!r} of {target}; method calls are not allowed", todo
        )
    else:
        _unsafe(
            source,
            f"calls {_text(func)!r}, which is not a plain function name",
            f"call only the allowed functions by name ({_FUNCTION_LIST})",
        )
    for keyword in node.keywords:
        if keyword.arg is None:
            _unsafe(source, "uses '**' unpacking", "pass keyword arguments one by one")


def _check_nodes(source: str, tree: ast.Expression) -> None:
    nodes = list(ast.walk(tree))
    # Whole constructs first, so `(lambda: 0)()` is reported as a lambda, not as a call.
    for node in nodes:
        kind = type(node)
        if kind in _FORBIDDEN_NODES:
            problem, todo = _FORBIDDEN_NODES[kind]
            _unsafe(source, problem, todo)
        if kind not in _ALLOWED_NODES:
            if isinstance(node, ast.operator):
                symbol = "@" if kind is ast.MatMult else kind.__name__
                _unsafe(source, f"uses the operator {symbol!r}", "it is not supported; remove it")
            _unsafe(
                source,
                f"uses {kind.__name__}, which expressions do not support",
                f"write a plain expression, e.g. {_EXAMPLE!r}",
            )
    private = [n for n in nodes if isinstance(n, ast.Attribute) and n.attr.startswith("_")]
    if private:
        # Report the innermost one: in `().__class__.__bases__` that is '__class__'.
        first = private[-1]
        _unsafe(
            source,
            f"reads attribute {first.attr!r}; names starting with '_' are not allowed after a "
            "dot (they reach Python internals)",
            f"to read a data field named {first.attr!r}, write "
            f"{_text(first.value)}[{first.attr!r}]",
        )
    for node in nodes:
        if isinstance(node, ast.Call):
            _check_call(source, node)
        elif isinstance(node, ast.Dict) and any(key is None for key in node.keys):
            _unsafe(source, "uses '**' unpacking in a dict", "write the entries one by one")
        elif isinstance(node, ast.Constant) and not isinstance(node.value, _LITERAL_TYPES):
            _unsafe(
                source,
                f"uses the {type(node.value).__name__} literal {_text(node)}",
                "only strings, numbers, booleans and None/null literals are supported",
            )


def _path(node: ast.expr) -> tuple[ast.Name, tuple[str, ...]] | None:
    """The root name and constant path read by ``node``, or None when it is not such a path."""
    if isinstance(node, ast.Name):
        return node, (node.id,)
    if isinstance(node, ast.Attribute):
        base = _path(node.value)
        return None if base is None else (base[0], (*base[1], node.attr))
    if isinstance(node, ast.Subscript):
        key = node.slice
        step: str | None = None
        if isinstance(key, ast.Constant) and isinstance(key.value, (str, int)):
            if not isinstance(key.value, bool):
                step = str(key.value)
        elif (
            isinstance(key, ast.UnaryOp)
            and isinstance(key.op, ast.USub)
            and isinstance(key.operand, ast.Constant)
            and type(key.operand.value) is int
        ):
            step = str(-key.operand.value)
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
    for field, child in ast.iter_fields(node):
        if isinstance(node, ast.Call) and field == "func":
            continue
        children = child if isinstance(child, list) else [child]
        for item in children:
            if isinstance(item, ast.AST):
                _collect_paths(item, found)


def _reads(tree: ast.Expression) -> tuple[frozenset[str], tuple[tuple[str, ...], ...]]:
    found: list[tuple[tuple[int, int], tuple[str, ...]]] = []
    _collect_paths(tree.body, found)
    found.sort(key=lambda hit: hit[0])
    paths = tuple(dict.fromkeys(path for _, path in found))
    return frozenset(path[0] for path in paths), paths


def _constant_parts(node: ast.AST) -> Iterator[ast.expr]:
    """The largest sub-trees that read no name (bare literals left out)."""
    reads_name: dict[int, bool] = {}

    def mark(current: ast.AST) -> bool:
        uses = isinstance(current, ast.Name)
        for field, child in ast.iter_fields(current):
            if isinstance(current, ast.Call) and field == "func":
                continue
            for item in child if isinstance(child, list) else [child]:
                if isinstance(item, ast.AST) and mark(item):
                    uses = True
        reads_name[id(current)] = uses
        return uses

    mark(node)
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.expr) and not reads_name[id(current)]:
            if not isinstance(current, ast.Constant):
                yield current
            continue
        for field, child in ast.iter_fields(current):
            if isinstance(current, ast.Call) and field == "func":
                continue
            for item in child if isinstance(child, list) else [child]:
                if isinstance(item, ast.AST):
                    stack.append(item)


def _check_constants(source: str, tree: ast.Expression) -> None:
    for part in _constant_parts(tree.body):
        try:
            _run(source, part, {}, None)
        except (_Refusal, NumberTooHigh, IterableTooLong) as exc:
            _unsafe(
                source,
                f"is refused because {_text(part)!r} breaks an evaluation limit: {exc}",
                "use smaller values, or compute the value in an activity",
            )
        except Exception:  # any other failure is reported when the expression is evaluated
            continue


@functools.lru_cache(maxsize=4096)
def _compile(source: str) -> _Compiled:
    text = source.strip()
    if not text:
        _fail(source, "is empty", f"write an expression such as {_EXAMPLE!r}", _CODE_EMPTY)
    if len(text) > MAX_EXPRESSION_LENGTH:
        _unsafe(
            source,
            f"is {len(text):,} characters long; the limit is {MAX_EXPRESSION_LENGTH:,}",
            "shorten it, or move the logic into an activity",
        )
    lead = len(source) - len(source.lstrip())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(text, mode="eval")
        except (SyntaxError, ValueError) as exc:
            _syntax_error(source, text, lead, exc)
        except (RecursionError, MemoryError):
            _unsafe(
                source,
                "is nested too deeply to parse",
                f"simplify it (at most {MAX_DEPTH} levels), or compute the value in an activity",
            )
    depth = _depth(tree.body)
    if depth > MAX_DEPTH:
        _unsafe(
            source,
            f"nests {depth} levels deep; the limit is {MAX_DEPTH}",
            "simplify it or split it, or compute the value in an activity",
        )
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


def _field_list(mapping: Mapping[str, Any]) -> str:
    keys = sorted(map(str, mapping.keys()))
    return ", ".join(keys[:20]) + (", ..." if len(keys) > 20 else "")


def _missing_name_message(
    quoted: str, name: str, data: Mapping[str, Any], extra: Mapping[str, Any] | None
) -> str:
    if name in _CONTEXT_NAMES:
        return (
            f"Expression {quoted} read {name!r}, which is not available here; 'item' and "
            "'loop_index' exist only inside a for_each body and 'outputs' only where step "
            f"outputs are passed in. Use {name!r} only where it is defined"
        )
    fields = (
        f"the data document has fields: {_field_list(data)}"
        if data
        else "the data document has no fields"
    )
    if extra:
        fields += f" (also available: {_field_list(extra)})"
    return (
        f"Expression {quoted} read name {name!r}, which the data document does not have; "
        f"{fields}. Fix the spelling, or make sure an earlier step sets {name!r} before this "
        "expression runs"
    )


_RUNTIME_HINTS: Mapping[type[BaseException], str] = types.MappingProxyType(
    {
        ZeroDivisionError: "guard the divisor, e.g. a / b if b else 0",
        TypeError: "check that the values it reads have the expected types "
        "(numbers for arithmetic, strings for lower/upper, lists for len/sorted)",
        ValueError: "check the values it reads (e.g. int() needs a string of digits)",
        OverflowError: "use smaller numbers",
        RecursionError: "the data it reads is nested too deeply; flatten it",
    }
)


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
    except _MissingName as exc:
        message = _missing_name_message(_quote(text), exc.name, data, extra)
        raise ExpressionError(message, expression=text, code=_CODE_RUNTIME) from exc
    except _ReadError as exc:
        raise ExpressionError(
            f"Expression {_quote(text)} {exc}", expression=text, code=_CODE_RUNTIME
        ) from exc
    except (_Refusal, NumberTooHigh, IterableTooLong, FeatureNotAvailable) as exc:
        raise ExpressionError(
            f"Expression {_quote(text)} was stopped: {exc}; check the data values it reads, or "
            "compute the value in an activity",
            expression=text,
            code=_CODE_UNSAFE,
        ) from exc
    except Exception as exc:
        hint = next(
            (todo for kind, todo in _RUNTIME_HINTS.items() if isinstance(exc, kind)),
            "check the values it reads",
        )
        raise ExpressionError(
            f"Expression {_quote(text)} failed while evaluating: {type(exc).__name__}: {exc}; "
            f"{hint}",
            expression=text,
            code=_CODE_RUNTIME,
        ) from exc
