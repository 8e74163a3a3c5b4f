"""A caller's transaction on the store: the application's statements and wfkit's rows together.

``Engine.transaction()`` opens a :class:`Session` on the engine's store (DuckDB: the engine's one
connection; PostgreSQL: a connection of its pool) and ``engine.start(..., connection=conn)``
adopts the caller's own PostgreSQL connection. While a session is *joined* on a thread, that
thread's ``store.write`` and ``store.query`` run inside the session's transaction, so the engine
writes a run's rows with the same code as always and they commit (or vanish) with the caller's.

The caller's SQL uses ``?`` placeholders on both backends (:func:`scan` turns them into
psycopg's ``%s``) and may not commit, roll back or open transactions itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from wfkit.errors import UsageError
from wfkit.store.results import StatementResult

__all__ = ["Session", "StatementResult", "check_params", "scan"]

# statements that would end or nest the caller's transaction behind the engine's back
_CONTROL = frozenset(
    {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE"}
)


class Session(Protocol):
    """One open transaction on the store, written by the engine and the application."""

    def execute(self, text: str, params: Sequence[Any] | None = None) -> StatementResult:
        """Run the application's statement in the transaction."""
        ...

    def join(self) -> AbstractContextManager[None]:
        """While open, this thread's ``store.write``/``store.query`` run in the transaction."""
        ...

    def commit(self) -> None:
        """Commit the transaction (a session on the caller's own connection never does)."""
        ...

    def rollback(self) -> None:
        """Roll the transaction back (a session on the caller's own connection never does)."""
        ...


def check_params(params: Any) -> list[Any] | None:
    """The parameters as a list (None for none); anything but a list or tuple is refused."""
    if params is None:
        return None
    if isinstance(params, (str, bytes)) or not isinstance(params, Sequence):
        raise UsageError(
            f"tx.execute(sql, params): params must be a list or tuple of values for the ? "
            f"placeholders, got {type(params).__name__}; e.g. tx.execute('... WHERE id = ?', [7])"
        )
    return list(params)


def scan(text: str) -> tuple[list[str], str]:
    """The first word of each statement in ``text`` (upper case) and ``text`` with psycopg's
    placeholders: ``?`` outside quotes and comments becomes ``%s`` and every ``%`` is doubled.

    Raises ``UsageError`` for a statement that would end or nest the transaction.

    >>> scan("INSERT INTO t VALUES (?, '50%?')")
    (['INSERT'], "INSERT INTO t VALUES (%s, '50%%?')")
    """
    words: list[str] = []
    out: list[str] = []
    word: list[str] = []
    need_word = True  # the next word begins a statement
    i, n = 0, len(text)
    while i < n:
        end = _skip_quoted(text, i)
        ch = text[i]
        if word and (end > i or not (ch.isalnum() or ch == "_")):
            words.append("".join(word).upper())
            word, need_word = [], False
        if end > i:
            chunk = text[i:end]
            need_word = need_word and chunk.startswith(("--", "/*"))  # comments may lead
            out.append(chunk.replace("%", "%%"))
            i = end
            continue
        if need_word and (ch.isalpha() or ch == "_" or (word and ch.isdigit())):
            word.append(ch)
        elif ch == ";":
            need_word = True
        elif not ch.isspace():
            need_word = False
        out.append("%s" if ch == "?" else "%%" if ch == "%" else ch)
        i += 1
    if word:
        words.append("".join(word).upper())
    control = [w for w in words if w in _CONTROL]
    if control:
        raise UsageError(
            f"tx.execute() refused {control[0]}: the block's transaction commits when the `with "
            "engine.transaction()` block ends and rolls back when it raises; leave the block "
            "(or raise) instead of ending the transaction yourself"
        )
    return words, "".join(out)


def _skip_quoted(text: str, i: int) -> int:
    """The index after the quoted text or comment starting at ``i`` (``i`` when none does)."""
    ch = text[i]
    if ch in "'\"":
        backslash = ch == "'" and i > 0 and text[i - 1] in "eE"
        j = i + 1
        while j < len(text):
            if backslash and text[j] == "\\":
                j += 2
                continue
            if text[j] == ch:
                if j + 1 < len(text) and text[j + 1] == ch:  # '' inside a literal
                    j += 2
                    continue
                return j + 1
            j += 1
        return len(text)
    if text.startswith("--", i):
        j = text.find("\n", i)
        return len(text) if j < 0 else j
    if text.startswith("/*", i):
        j = text.find("*/", i + 2)
        return len(text) if j < 0 else j + 2
    if ch == "$":  # a dollar-quoted string: $$...$$ or $tag$...$tag$ (not $1, a parameter)
        j = i + 1
        while j < len(text) and (text[j].isalnum() or text[j] == "_"):
            j += 1
        tag = text[i : j + 1]
        if j < len(text) and text[j] == "$" and not tag[1:2].isdigit():
            close = text.find(tag, j + 1)
            return len(text) if close < 0 else close + len(tag)
    return i
