"""Stores: the ``Store`` protocol and its backends; SQL lives in ``sql/*.sql``."""

from __future__ import annotations

from pathlib import Path

from wfkit.errors import UsageError
from wfkit.store.base import TERMINAL_STATUSES, Statement, Store

__all__ = ["TERMINAL_STATUSES", "Statement", "Store", "open_store"]


def open_store(target: str | Path, *, accept_lost_commits: bool = False) -> Store:
    """Open the store ``target`` names: a DuckDB path, ``:memory:`` or a ``postgresql://`` URL.

    The backend's driver is imported only when it is used. ``accept_lost_commits`` opens a
    DuckDB file that holds less than its engine committed, recording the loss (see
    :mod:`wfkit.store.marks`); PostgreSQL keeps no such count and refuses the option.
    """
    text = str(target)
    if text.startswith(("postgresql://", "postgres://")):
        if accept_lost_commits:
            raise UsageError(
                "accept_lost_commits is for DuckDB files, whose commits wfkit counts; a "
                "PostgreSQL server keeps its own write-ahead log: open it without the option"
            )
        try:
            from wfkit.store.postgres import PostgresStore
        except ImportError as exc:  # the driver is an optional dependency
            raise UsageError(
                f"PostgreSQL needs psycopg: pip install 'wfkit[postgres]' ({exc})"
            ) from exc
        return PostgresStore(text)
    from wfkit.store.duckdb import DuckDBStore

    return DuckDBStore(text, accept_lost_commits=accept_lost_commits)
