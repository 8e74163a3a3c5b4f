"""The engine spells token states and event kinds through their enums, never as raw strings.

A raw ``"ready"`` compared with a token's state type-checks (a ``StrEnum`` member equals its
string), so mypy cannot catch a misspelt or made-up state ("running" is a job status, not a token
state); this test can. It reads every module of ``wfkit/engine`` but the vocabulary itself and
fails on each string literal that is a token-state or event-kind value, naming the file and line.
Docstrings, annotations (``Literal[...]`` types) and keys looked up in a record
(``token["timer"]``, ``.get("timer")``: field names) are not values and do not count.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from wfkit.engine.vocabulary import EventKind, TokenState

ENGINE = Path(__file__).resolve().parents[2] / "wfkit" / "engine"

SHARED = {
    "failed": "the `failed` outlet, a run's, a saga entry's and an ending's status, error text",
    "retry": "a timer kind, an operator's recovery action, the cursor's `retry` map",
    "timer": "a token's `timer` field, a trace span's kind",
    "wait": "a node kind (the module nodes/wait.py)",
}
"""Token states that other vocabularies spell the same: a literal of these counts only where it
is a token's state (compared with ``token["st"]``, ``.get("st")`` or ``.state``, or given as
``st``)."""

ANYWHERE = {
    *(k.value for k in EventKind),
    *(s.value for s in TokenState if s.value not in SHARED),
    "running",  # the job status and run status: no token is ever in it
}
"""What may not be spelt out anywhere in the engine."""


def _skipped(tree: ast.AST) -> set[int]:
    """The ids of string constants that are not values: docstrings, annotations, looked-up keys,
    pieces of f-strings."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))  # a docstring, or a bare string statement
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if arg is not None and arg.annotation is not None:
                    skip |= {id(n) for n in ast.walk(arg.annotation)}
            if node.returns is not None:
                skip |= {id(n) for n in ast.walk(node.returns)}
        elif isinstance(node, ast.AnnAssign):
            skip |= {id(n) for n in ast.walk(node.annotation)}
        elif isinstance(node, ast.Subscript):
            if isinstance(node.value, ast.Name) and node.value.id == "Literal":
                skip |= {id(n) for n in ast.walk(node)}
            else:
                skip.add(id(node.slice))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("get", "pop", "setdefault") and node.args:
                skip.add(id(node.args[0]))
        elif isinstance(node, ast.JoinedStr):
            skip |= {id(n) for n in node.values}
    return skip


def _reads_state(node: ast.expr) -> bool:
    """``x["st"]``, ``x.get("st")`` or ``x.state``: a token's state."""
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "st"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        first = node.args[0] if node.args else None
        return node.func.attr == "get" and isinstance(first, ast.Constant) and first.value == "st"
    return isinstance(node, ast.Attribute) and node.attr == "state"


def _strings(node: ast.expr | None) -> list[ast.Constant]:
    """The string constants ``node`` is, or holds (a tuple, list or set of them)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [c for e in node.elts for c in _strings(e)]
    return [node] if isinstance(node, ast.Constant) and isinstance(node.value, str) else []


def _states(tree: ast.AST) -> Iterator[ast.Constant]:
    """String constants given or compared as a token's state."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_reads_state(o) for o in operands):
                yield from (c for o in operands for c in _strings(o))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "st":
                    yield from _strings(value)
        elif isinstance(node, ast.keyword) and node.arg == "st":
            yield from _strings(node.value)


def spelt_out(source: str, name: str) -> list[str]:
    """Each raw token-state or event-kind string of ``source``, as ``name:line 'word'``."""
    tree = ast.parse(source)
    skip = _skipped(tree)
    found = {
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in ANYWHERE and id(node) not in skip
    }
    found |= {(node.lineno, node.value) for node in _states(tree) if node.value in SHARED}
    return [f"{name}:{line} {word!r}" for line, word in sorted(found)]


def test_the_engine_spells_no_token_state_or_event_kind_as_a_string() -> None:
    found = [
        hit
        for path in sorted(ENGINE.rglob("*.py"))
        if path.name != "vocabulary.py"
        for hit in spelt_out(path.read_text(), f"wfkit/engine/{path.relative_to(ENGINE)}")
    ]
    assert found == [], (
        "use the members of TokenState or EventKind (wfkit/engine/vocabulary.py; JobStatus for "
        "wf_jobs.status) instead of:\n" + "\n".join(found)
    )


def test_the_check_finds_what_it_is_for() -> None:
    source = (
        'def f(token: Token, kind: Literal["ready"]) -> None:\n'
        '    """Docstrings may say "ready" and "step.failed"."""\n'
        '    if token["st"] in ("running", "wait") or token.get("timer"):\n'
        '        cp.event("step.failed", token["node"], error=f"{kind} failed")\n'
        '    cp.set_token(token_id, st="retry", timer="retry")\n'
        '    cp.leave(token_id, "failed")\n'
        '    return {"node": n, "st": "new"}\n'
    )
    assert spelt_out(source, "m.py") == [
        "m.py:3 'running'",
        "m.py:3 'wait'",
        "m.py:4 'step.failed'",
        "m.py:5 'retry'",
        "m.py:7 'new'",
    ]
