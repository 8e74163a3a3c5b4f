"""One policy for the JSON values wfkit stores, whoever hands them over.

Run data, signal payloads, correlation keys, activity outputs, expression values, actors and
comments all end up in JSON columns and text columns of DuckDB or PostgreSQL. A value either
store cannot hold — or one JSON would change on the way — must be refused where it enters, with
a message that names where it is and what it is, instead of failing a group commit later (and
every run that shares it). The policy:

* JSON types only: dict with ``str`` keys, list (or tuple), ``str``, ``int``, ``float``, ``bool``,
  ``None`` — no datetime, set, Decimal, bytes or other objects (convert them first, or declare a
  pydantic data model that does);
* finite numbers (no NaN or Infinity) and integers of at most :data:`MAX_INT_DIGITS` digits;
* text without NUL characters (PostgreSQL cannot store them) and without lone UTF-16 surrogates
  (no store can encode them);
* nesting at most :data:`MAX_DEPTH` levels deep.

The size limit (256 KiB of JSON by default) is the engine's ``max_payload``, checked on top.

Nothing here recurses: a value nested 100,000 levels deep is refused as nested deeper than
64 levels like one nested 65 levels deep. :func:`depth_problem` checks only the nesting, also
through pydantic models, for the places where a value is handed to code that recurses
(pydantic, ``json.dumps``, ``==``, JSON patches) before :func:`json_problem` has seen it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "TOO_DEEP",
    "depth_problem",
    "json_problem",
    "printable",
    "text_problem",
]

MAX_DEPTH = 64
"""Deepest nesting of dicts and lists accepted (the document itself is level 1)."""

TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"
"""How a problem of nesting ends, whatever the path and however deep the value goes."""

MAX_INT_DIGITS = 4000
"""Most decimal digits of an integer (Python refuses to print more than 4,300 by default)."""

_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")
_INT_LIMIT = 10**MAX_INT_DIGITS


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored, or None when it can."""
    bad = _BAD_TEXT.search(text)
    if bad is None:
        return None
    char, at = bad.group(), bad.start()
    if char == "\x00":
        return f"contains a NUL character (at {at}), which PostgreSQL cannot store"
    return (
        f"contains a lone surrogate {char.encode('utf-8', 'surrogatepass')!r} (U+{ord(char):04X} "
        f"at {at}), which is not valid Unicode text"
    )


def printable(text: str) -> str:
    r"""``text`` as any store can hold it: a lone surrogate or a NUL becomes an escape.

    Examples
    --------
    >>> printable("a\x00b")
    'a\\x00b'
    """
    if text_problem(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def json_problem(value: Any, where: str = "$", depth: int = 1) -> str | None:
    """Why ``value`` cannot be stored as JSON, naming the path of the first offending part
    (``$.items[2].name``), or None when it can. ``depth`` is the level ``value`` sits at in its
    document (1: it is the document). Never recurses (any depth is safe to check)."""
    stack: list[tuple[Any, str, int]] = [(value, where, depth)]
    while stack:
        item, path, depth = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return f"{path}: the text {problem}"
            continue
        if isinstance(item, int):
            if -_INT_LIMIT < item < _INT_LIMIT:
                continue
            return f"{path}: an integer of more than {MAX_INT_DIGITS:,} digits"
        if isinstance(item, float):
            if math.isfinite(item):
                continue
            return f"{path}: {item!r} is not a finite number (JSON has no NaN or Infinity)"
        if isinstance(item, dict | list | tuple):
            if depth > MAX_DEPTH:
                return f"{_shorten(path)}: {TOO_DEEP}"
            if isinstance(item, dict):
                for key, child in reversed(item.items()):  # popped in document order
                    if not isinstance(key, str):
                        return (
                            f"{path}: the key {key!r} is a {type(key).__name__}; JSON keys are "
                            "strings"
                        )
                    problem = text_problem(key)
                    if problem is not None:
                        return f"{path}: the key {key!r} {problem}"
                    step = f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"
                    stack.append((child, step, depth + 1))
            else:
                stack.extend(
                    (child, f"{path}[{i}]", depth + 1)
                    for i, child in reversed(list(enumerate(item)))
                )
            continue
        kind = type(item).__name__
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        return (
            f"{path}: {article} {kind} is not a JSON value; use dicts, lists, strings, numbers, "
            "booleans and null (convert it, e.g. a datetime to an ISO string, a set to a list)"
        )
    return None


def depth_problem(value: Any, where: str = "$", depth: int = 1) -> str | None:
    """``"<path>: nested deeper than 64 levels"`` when ``value`` nests dicts, lists, tuples,
    sets or pydantic models deeper than :data:`MAX_DEPTH` (``depth`` is the level ``value``
    sits at), else None. Looks at nothing else; never recurses.

    Examples
    --------
    >>> deep = []
    >>> for _ in range(100_000):
    ...     deep = [deep]
    >>> depth_problem({"v": deep}, "data")[-42:]
    '[0][0][0][0]: nested deeper than 64 levels'
    >>> depth_problem({"v": [[1]]}, "data") is None
    True
    """
    stack: list[tuple[Any, str, int]] = [(value, where, depth)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, BaseModel):
            item = {**vars(item), **(item.__pydantic_extra__ or {})}
        if isinstance(item, dict):
            children: Any = ((_step(path, k), v) for k, v in item.items())
        elif isinstance(item, list | tuple | set | frozenset):
            children = ((f"{path}[{i}]", v) for i, v in enumerate(item))
        else:
            continue
        if depth > MAX_DEPTH:
            return f"{_shorten(path)}: {TOO_DEEP}"
        stack.extend((child, step, depth + 1) for step, child in children)
    return None


def _step(path: str, key: Any) -> str:
    return f"{path}.{key}" if isinstance(key, str) and key.isidentifier() else f"{path}[{key!r}]"


def _shorten(path: str, limit: int = 120) -> str:
    """A path of 65 levels can be long (its keys too): its start and end tell where it is."""
    return path if len(path) <= limit else f"{path[: limit // 2]}...{path[-(limit // 2) :]}"
