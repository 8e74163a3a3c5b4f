"""Each named row of wfkit.store.rows has its statement's columns, in its statement's order."""

from __future__ import annotations

import re

import pytest

from wfkit.store.queries import query
from wfkit.store.rows import STATEMENT_ROWS

_BOUND = re.compile(r"(\w+)\s*=\s*\?")


def _split_top(text: str) -> list[str]:
    """Split on the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def columns(sql: str) -> list[str]:
    """The columns a statement writes (its INSERT list, or the ``col = ?`` it binds in order)
    or reads (its SELECT list, by the name each item comes back under)."""
    sql = " ".join(line.split("--")[0] for line in sql.splitlines()).strip()
    insert = re.match(r"INSERT INTO \w+\s*\(([^)]*)\)", sql, re.IGNORECASE)
    if insert:
        return [c.strip() for c in insert.group(1).split(",")]
    select = re.match(r"SELECT\s+(?:DISTINCT\s+)?(.*?)\s+FROM\s", sql, re.IGNORECASE)
    if select:
        names = []
        for item in _split_top(select.group(1)):
            alias = re.search(r"\bAS\s+(\w+)\s*$", item, re.IGNORECASE)
            names.append(alias.group(1) if alias else item.strip().rsplit(".", 1)[-1])
        return names
    if re.match(r"(UPDATE|DELETE)\b", sql, re.IGNORECASE):
        return _BOUND.findall(sql)
    raise AssertionError(f"cannot read the columns of {sql!r}")


@pytest.mark.parametrize("name", sorted(STATEMENT_ROWS))
def test_a_named_row_has_its_statement_columns_in_order(name: str) -> None:
    assert list(STATEMENT_ROWS[name]._fields) == columns(query(name))


def test_the_parser_reads_each_kind_of_statement() -> None:
    assert columns("INSERT INTO t (a, b) VALUES (?, ?)") == ["a", "b"]
    assert columns("SELECT e.a, b AS c, coalesce(x, y) AS d FROM t") == ["a", "c", "d"]
    assert columns("UPDATE t SET a = ?, b = NULL, c = ? WHERE d = ? AND e = 'x'") == [
        "a",
        "c",
        "d",
    ]
    assert columns("DELETE FROM t WHERE a = ? AND b = ?") == ["a", "b"]


def test_a_column_added_to_one_side_only_is_caught() -> None:
    sql = query("insert_timer").replace("due_at)", "due_at, extra)")
    assert list(STATEMENT_ROWS["insert_timer"]._fields) != columns(sql)
