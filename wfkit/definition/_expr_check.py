"""Static checks of an expression: syntax, length and depth, the node kinds, calls and literals
it uses, and its constant parts evaluated once against the evaluation limits.

Each check raises an :class:`~wfkit.errors.ExpressionError` naming the problem and what to do.
"""

from __future__ import annotations

import ast
import types
import warnings
from collections.abc import Iterator, Mapping
from typing import NoReturn

from simpleeval import IterableTooLong, NumberTooHigh

from wfkit.definition._expr_eval import _run
from wfkit.definition._expr_limits import (
    _FUNCTION_LIST,
    _OPERATORS,
    ALLOWED_FUNCTIONS,
    MAX_DEPTH,
    MAX_EXPRESSION_LENGTH,
    _Refusal,
)
from wfkit.definition._expr_messages import (
    _CODE_EMPTY,
    _CODE_SYNTAX,
    _EXAMPLE,
    _fail,
    _text,
    _unsafe,
)
from wfkit.definition._expr_reads import _operands

# --------------------------------------------------------------------------------------------
# Syntax, length and depth


def _parse(source: str) -> ast.Expression:
    """Parse ``source`` as one expression, refusing it when empty, too long or too deep."""
    text = source.strip()
    if not text:
        _fail(source, "is empty", f"write an expression such as {_EXAMPLE!r}", _CODE_EMPTY)
    if len(text) > MAX_EXPRESSION_LENGTH:
        _unsafe(
            source,
            f"is {len(text):,} characters long; the limit is {MAX_EXPRESSION_LENGTH:,}",
            "shorten it, or move the logic into an activity",
        )
    tree = _parse_text(source, text)
    depth = _depth(tree.body)
    if depth > MAX_DEPTH:
        _unsafe(
            source,
            f"nests {depth} levels deep; the limit is {MAX_DEPTH}",
            "simplify it or split it, or compute the value in an activity",
        )
    return tree


def _parse_text(source: str, text: str) -> ast.Expression:
    """Parse ``text``, the stripped ``source``, in eval mode."""
    lead = len(source) - len(source.lstrip())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(text, mode="eval")
        except (SyntaxError, ValueError) as exc:
            _syntax_error(source, text, lead, exc)
        except (RecursionError, MemoryError):
            _unsafe(
                source,
                "is nested too deeply to parse",
                f"simplify it (at most {MAX_DEPTH} levels), or compute the value in an activity",
            )


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
    _check_statements(source, text, todo)
    _fail(source, _syntax_problem(text, lead, exc), "fix the syntax: " + todo, _CODE_SYNTAX)


def _check_statements(source: str, text: str, todo: str) -> None:
    """Refuse ``text`` when it parses as statements, or as more than one expression."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            module = ast.parse(text, mode="exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return
    if module.body:
        if len(module.body) > 1:
            _fail(source, f"holds {len(module.body)} statements or expressions", todo, _CODE_SYNTAX)
        statement = module.body[0]
        if not isinstance(statement, ast.Expr):
            hint = _STATEMENT_HINTS.get(type(statement))
            if hint is None:
                kind = type(statement).__name__.lower()
                hint = f"is a statement ({kind}), not an expression"
            _fail(source, hint, todo, _CODE_SYNTAX)


def _syntax_problem(text: str, lead: int, exc: SyntaxError | ValueError) -> str:
    """Where and why ``text`` failed to parse, with columns counted in the unstripped source."""
    if isinstance(exc, SyntaxError):
        where = ""
        if exc.lineno is not None and exc.offset is not None and exc.offset > 0:
            column = exc.offset + (lead if exc.lineno == 1 else 0)
            line = f" at line {exc.lineno}," if "\n" in text else " at"
            where = f"{line} column {column}"
        elif exc.lineno is not None:
            where = " near the end"
        return f"is not valid syntax{where}: {exc.msg}"
    return f"cannot be parsed ({exc})"


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


# --------------------------------------------------------------------------------------------
# Node kinds, calls and literals


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
    _check_callee(source, node.func)
    for keyword in node.keywords:
        if keyword.arg is None:
            _unsafe(source, "uses '**' unpacking", "pass keyword arguments one by one")


def _check_callee(source: str, func: ast.expr) -> None:
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


def _check_nodes(source: str, tree: ast.Expression) -> None:
    nodes = list(ast.walk(tree))
    # Whole constructs first, so `(lambda: 0)()` is reported as a lambda, not as a call.
    _check_kinds(source, nodes)
    _check_private_attributes(source, nodes)
    _check_calls_and_literals(source, nodes)


def _check_kinds(source: str, nodes: list[ast.AST]) -> None:
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


def _check_private_attributes(source: str, nodes: list[ast.AST]) -> None:
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


def _check_calls_and_literals(source: str, nodes: list[ast.AST]) -> None:
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


# --------------------------------------------------------------------------------------------
# Constant parts, evaluated once against the limits


def _mark_name_reads(node: ast.AST, reads_name: dict[int, bool]) -> bool:
    """Record in ``reads_name``, for ``node`` and every node below it, whether it reads a name."""
    uses = isinstance(node, ast.Name)
    for item in _operands(node):
        if _mark_name_reads(item, reads_name):
            uses = True
    reads_name[id(node)] = uses
    return uses


def _constant_parts(node: ast.AST) -> Iterator[ast.expr]:
    """The largest sub-trees that read no name (bare literals left out)."""
    reads_name: dict[int, bool] = {}
    _mark_name_reads(node, reads_name)
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.expr) and not reads_name[id(current)]:
            if not isinstance(current, ast.Constant):
                yield current
            continue
        stack.extend(_operands(current))


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
