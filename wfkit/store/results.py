"""What a caller's SQL gives back: one type on DuckDB and PostgreSQL.

``engine.sql(...)`` and ``tx.execute(...)`` return a :class:`StatementResult` on either backend:
rows as tuples (``fetchall``, ``fetchone``, iteration), the column names, and the rows as a
pandas (``df``) or polars (``pl``) DataFrame. On DuckDB, ``engine.sql`` keeps DuckDB's own
relation behind it (:class:`RelationResult`), so a DataFrame of a large query is made by DuckDB
(through Arrow) rather than from Python tuples; the relation itself is ``.relation``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

from wfkit.errors import UsageError

__all__ = ["RelationResult", "StatementResult"]


def _library(name: str, what: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise UsageError(
            f"{what} needs {name}, which is not installed: pip install {name}"
        ) from None


class StatementResult:
    """Rows a statement gave back, the same on DuckDB and PostgreSQL.

    Rows are fetched when the statement runs, so the result stays readable after the next
    statement and after its transaction ends.

    Attributes
    ----------
    columns : list of str
        Column names of the rows (empty for a statement that returns none).
    rowcount : int
        Rows an INSERT, UPDATE or DELETE changed; rows a query returned; -1 for other
        statements (CREATE TABLE...).

    Examples
    --------
    >>> result = StatementResult(["kind", "n"], [("run.started", 2)], 1)
    >>> result.fetchall(), result.fetchone(), result.columns
    ([('run.started', 2)], ('run.started', 2), ['kind', 'n'])
    """

    __slots__ = ("_rows", "columns", "rowcount")

    def __init__(self, columns: list[str], rows: list[tuple[Any, ...]], rowcount: int) -> None:
        self.columns = columns
        self._rows = rows
        self.rowcount = rowcount

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Every row, as tuples (``[]`` for a statement that returns none)."""
        return list(self._rows)

    def fetchone(self) -> tuple[Any, ...] | None:
        """The first row, or None."""
        rows = self.fetchall()
        return rows[0] if rows else None

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())

    def df(self) -> Any:
        """The rows as a pandas DataFrame with these columns (needs pandas)."""
        pandas = _library("pandas", "StatementResult.df()")
        return pandas.DataFrame.from_records(self.fetchall(), columns=self.columns)

    def pl(self) -> Any:
        """The rows as a polars DataFrame with these columns (needs polars)."""
        polars = _library("polars", "StatementResult.pl()")
        return polars.DataFrame(self.fetchall(), schema=self.columns, orient="row")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(columns={self.columns}, rowcount={self.rowcount})"


class RelationResult(StatementResult):
    """A DuckDB query's result, backed by its relation: DataFrames come from DuckDB itself.

    The rows are fetched from the relation once, on first use; ``df()`` and ``pl()`` ask
    DuckDB (which runs the query again, through Arrow: fast for large results).
    """

    __slots__ = ("relation",)

    def __init__(self, relation: Any) -> None:
        super().__init__(list(relation.columns), [], -1)
        self.relation = relation
        self._rows: list[tuple[Any, ...]] | None = None  # type: ignore[assignment]

    def fetchall(self) -> list[tuple[Any, ...]]:
        if self._rows is None:
            self._rows = self.relation.fetchall()
            self.rowcount = len(self._rows)
        return list(self._rows)

    def df(self) -> Any:
        _library("pandas", "StatementResult.df()")
        return self.relation.df()

    def pl(self) -> Any:
        _library("polars", "StatementResult.pl()")
        return self.relation.pl()
