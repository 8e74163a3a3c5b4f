"""The runtime evaluator: simpleeval's evaluator with this language's names, fields, calls and
limits, and the translation of what goes wrong into an :class:`~wfkit.errors.ExpressionError`.
"""

from __future__ import annotations

import ast
import threading
import types
from collections.abc import Mapping
from typing import Any

from simpleeval import (
    DISALLOW_FUNCTIONS,
    EvalWithCompoundTypes,
    FeatureNotAvailable,
    IterableTooLong,
    NumberTooHigh,
)

from wfkit.definition._expr_limits import (
    _BUDGET,
    _OPERATORS,
    ALLOWED_FUNCTIONS,
    MAX_ALLOCATION,
    _Budget,
    _charge,
    _Refusal,
)
from wfkit.definition._expr_messages import (
    _CODE_RUNTIME,
    _CODE_UNSAFE,
    _quote,
    _short,
    _text,
)
from wfkit.errors import ExpressionError

# Names the evaluator resolves itself, and those only the engine passes in (through `extra`).
_LITERAL_NAMES: Mapping[str, object] = types.MappingProxyType(
    {"true": True, "false": False, "null": None}
)
_CONTEXT_NAMES = frozenset({"outputs", "item", "loop_index"})


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
# Runtime errors: every failure while evaluating becomes an ExpressionError


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


def _runtime_error(
    text: str, exc: Exception, data: Mapping[str, Any], extra: Mapping[str, Any] | None
) -> ExpressionError:
    """The :class:`~wfkit.errors.ExpressionError` for ``exc``, raised while evaluating ``text``."""
    if isinstance(exc, _MissingName):
        message = _missing_name_message(_quote(text), exc.name, data, extra)
        return ExpressionError(message, expression=text, code=_CODE_RUNTIME)
    if isinstance(exc, _ReadError):
        return ExpressionError(
            f"Expression {_quote(text)} {exc}", expression=text, code=_CODE_RUNTIME
        )
    if isinstance(exc, (_Refusal, NumberTooHigh, IterableTooLong, FeatureNotAvailable)):
        return ExpressionError(
            f"Expression {_quote(text)} was stopped: {exc}; check the data values it reads, or "
            "compute the value in an activity",
            expression=text,
            code=_CODE_UNSAFE,
        )
    hint = next(
        (todo for kind, todo in _RUNTIME_HINTS.items() if isinstance(exc, kind)),
        "check the values it reads",
    )
    return ExpressionError(
        f"Expression {_quote(text)} failed while evaluating: {type(exc).__name__}: {exc}; {hint}",
        expression=text,
        code=_CODE_RUNTIME,
    )
