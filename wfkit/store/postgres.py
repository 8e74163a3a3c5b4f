"""The PostgreSQL store: wfkit's tables in a PostgreSQL database, through psycopg 3.

Same tables, same migrations and the same named queries as DuckDB; queries are written with
``?`` placeholders and turned into psycopg's ``%s`` here. Any number of engine processes may
share the database: each owns the runs it advances through a lease on the run's row (see
``wfkit.engine.leases``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any, TypeVar

import psycopg
from psycopg import sql as pgsql
from psycopg_pool import ConnectionPool

from wfkit.errors import StoreError
from wfkit.store.base import InTransaction, LeaseLost, Statement, ValueRefused
from wfkit.store.queries import has_query, migrations, query

__all__ = ["PostgresStore", "QueryResult"]

_MIGRATE_LOCK = 0x77666B6975
_RETRIES = 8

T = TypeVar("T")


@cache
def _pg(name: str) -> str:
    return query(name).replace("?", "%s")


class QueryResult:
    """Rows of a user's query (``fetchall()``), like the DuckDB relation's common subset."""

    def __init__(self, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
        self.columns = columns
        self._rows = rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Every row."""
        return list(self._rows)

    def fetchone(self) -> tuple[Any, ...] | None:
        """The first row, or None."""
        return self._rows[0] if self._rows else None

    def __repr__(self) -> str:
        return f"QueryResult({self.columns}, {len(self._rows)} rows)"


class PostgresStore:
    """wfkit's tables in PostgreSQL, shared by any number of engine processes (run leases).

    Parameters
    ----------
    url : str
        A libpq URL, e.g. ``postgresql://postgres@127.0.0.1:5432/wfkit``.
    """

    shared = True

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self._conn = psycopg.connect(url, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to PostgreSQL at {_safe(url)} ({exc}); check that the server "
                "runs and the URL (user, host, port, database) is right"
            ) from exc
        try:
            self._migrate()
        finally:
            self._conn.close()
        # engine, API and widget threads each borrow a connection; autocommit unless a write
        # opens its own transaction
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=4,
            kwargs={"autocommit": True},
            open=True,
            name="wfkit",
        )

    # --- schema -------------------------------------------------------------------------------

    def _migrate(self) -> None:
        conn = self._conn
        conn.execute("SELECT pg_advisory_lock(%s)", [_MIGRATE_LOCK])
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS wf_schema_version "
                "(version INTEGER NOT NULL, applied_at TIMESTAMP NOT NULL)"
            )
            row = conn.execute(_pg("schema_version")).fetchone()
            have = int(row[0]) if row and row[0] is not None else 0
            known = migrations()
            newest = known[-1][0] if known else 0
            if have > newest:
                raise StoreError(
                    f"{_safe(self.url)} was written by a newer wfkit (schema version {have}; "
                    f"this wfkit knows up to {newest}); upgrade wfkit to open it"
                )
            for version, text in known:
                if version <= have:
                    continue
                try:
                    with conn.transaction():
                        conn.execute(text.encode())
                        conn.execute(_pg("record_schema_version"), [version, _now()])
                except psycopg.Error as exc:
                    where = _safe(self.url)
                    raise StoreError(f"migration {version} of {where} failed: {exc}") from exc
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [_MIGRATE_LOCK])

    def schema_version(self) -> int:
        """The schema version of the open database."""
        rows = self.query("schema_version")
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    # --- protocol -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection."""
        try:
            self._pool.close()
        except psycopg.Error:
            pass

    def write(self, statements: Sequence[Statement]) -> list[list[tuple[Any, ...]]]:
        """Run ``statements`` in one transaction; retry serialization failures with backoff."""
        work = [s for s in statements if s.rows]
        if not work:
            return []
        delay = 0.001
        for attempt in range(_RETRIES):
            try:
                with self._pool.connection() as conn, conn.transaction():
                    return [self._run(conn, s) for s in work]
            except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected) as exc:
                if attempt == _RETRIES - 1:
                    raise StoreError(f"write conflict on {_safe(self.url)}: {exc}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
            except LeaseLost:
                raise
            except (psycopg.errors.DataError, UnicodeError, ValueError, TypeError) as exc:
                refused = f"writing to {_safe(self.url)} refused a value: {exc}"
                raise ValueRefused(refused) from exc
            except psycopg.Error as exc:
                raise StoreError(f"writing to {_safe(self.url)} failed: {exc}") from exc
        raise AssertionError("unreachable")

    def _run(self, conn: psycopg.Connection[Any], statement: Statement) -> list[tuple[Any, ...]]:
        rows = statement.rows
        with conn.cursor() as cur:
            if statement.returning:
                found: list[tuple[Any, ...]] = []
                for row in rows:
                    cur.execute(_pg(statement.name), list(row))
                    found += cur.fetchall()
                return found
            if statement.expect is not None:
                cur.execute(_pg(statement.name), list(rows[0]))
                if cur.rowcount < statement.expect:
                    raise LeaseLost(
                        f"{statement.expect - cur.rowcount} of the runs in this checkpoint are now "
                        "held by another engine process"
                    )
            elif len(rows) > 1 and has_query(f"{statement.name}_many"):
                columns = [list(col) for col in zip(*rows, strict=True)]
                cur.execute(_pg(f"{statement.name}_many"), columns)
            elif len(rows) == 1:
                cur.execute(_pg(statement.name), list(rows[0]))
            else:
                cur.executemany(_pg(statement.name), [list(r) for r in rows])
        return []

    def atomically(self, work: Callable[[InTransaction], T]) -> T:
        """Run ``work`` in one transaction on a connection of the pool."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                return work(_PostgresTransaction(conn))
        except psycopg.Error as exc:
            raise StoreError(f"writing to {_safe(self.url)} failed: {exc}") from exc

    def listen(self, channel: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on every NOTIFY on ``channel`` (from a thread with its own
        connection); returns a function that stops listening."""
        stop = threading.Event()
        conn = psycopg.connect(self.url, autocommit=True)
        conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))

        def loop() -> None:
            while not stop.is_set():
                try:
                    for _ in conn.notifies(timeout=0.5):
                        callback()
                except psycopg.Error:
                    return

        thread = threading.Thread(target=loop, name="wfkit-listen", daemon=True)
        thread.start()

        def close() -> None:
            stop.set()
            thread.join(2)
            conn.close()

        return close

    def query(self, name: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of the named query."""
        try:
            with self._pool.connection() as conn:
                return conn.execute(_pg(name), list(params)).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"query {name!r} on {_safe(self.url)} failed: {exc}") from exc

    def sql(self, text: str, params: Sequence[Any] | None = None) -> QueryResult:
        """Run a user's SQL; returns its rows (``.fetchall()``)."""
        try:
            with self._pool.connection() as conn, conn.cursor() as cur:
                statement: Any = text  # the user's own SQL; values go in ``params``, bound
                cur.execute(statement, params)
                columns = [d.name for d in cur.description or []]
                rows = cur.fetchall() if cur.description else []
                return QueryResult(columns, rows)
        except psycopg.Error as exc:
            raise StoreError(f"SQL failed: {exc}") from exc


class _PostgresTransaction:
    """Named statements on a connection whose transaction is open."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, name: str, params: Sequence[Any] = ()) -> int:
        with self._conn.cursor() as cur:
            cur.execute(_pg(name), list(params))
            return max(cur.rowcount, 0)

    def returning(self, name: str, params: Sequence[Any] = ()) -> tuple[list[str], list[Any]]:
        with self._conn.cursor() as cur:
            cur.execute(_pg(name), list(params))
            return [d.name for d in cur.description or []], cur.fetchall()


def _safe(url: str) -> str:
    """The URL without its password."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    host, port, db = info.get("host", "localhost"), info.get("port", "5432"), info.get("dbname", "")
    return f"postgresql://{info.get('user', '')}@{host}:{port}/{db}"


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
