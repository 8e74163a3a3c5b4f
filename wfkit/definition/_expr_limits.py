"""Evaluation limits for expressions: the sizes, the allocation budget, the guarded operators
and the allow-listed functions.

Every operator and function an expression can reach comes from here, so each one that can
build a large value checks the limits below before building it.
"""

from __future__ import annotations

import ast
import contextvars
import math
import operator
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

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


# --------------------------------------------------------------------------------------------
# Guarded operators: each checks the limits before it builds a large value


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
        _check_repeat(a, b)
    elif isinstance(a, int) and isinstance(b, _SIZED):
        _check_repeat(b, a)
    return a * b


def _check_repeat(seq: Any, count: int) -> None:
    """Refuse ``seq * count`` when it would build more than :data:`MAX_STRING_LENGTH` items."""
    if count > 0:
        size = _size(seq, MAX_STRING_LENGTH)
        if size * count > MAX_STRING_LENGTH:
            unit = "characters" if isinstance(seq, (str, bytes)) else "items"
            held = f"more than {MAX_STRING_LENGTH:,}" if size > MAX_STRING_LENGTH else f"{size:,}"
            raise _Refusal(
                f"repeating a {type(seq).__name__} of {held} {unit} {_describe_int(count)} times "
                f"would build more than {MAX_STRING_LENGTH:,} {unit}"
            )


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
