"""The DuckDB store: one engine process owns the file and is its only writer.

Measured here: a tiny statement costs ~0.15-0.4 ms from Python, so writes are batched: a list of
statements runs in one transaction with multi-row INSERTs, and a batch of a single statement runs
in autocommit (no BEGIN/COMMIT round trips). ``threads=1`` cuts the cost of tiny statements.

Run data may be personal: a new database file is created readable by its owner only (0600), and
its write-ahead log ``<file>.wal``, which DuckDB deletes at every checkpoint and creates again at
the next write, is created first by the store with the database file's own permissions, so it is
never more readable than the database. An existing file keeps the permissions it has.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from wfkit.errors import StoreError, UsageError
from wfkit.store.base import InTransaction, Statement, ValueRefused
from wfkit.store.queries import has_query, migrations, query
from wfkit.store.sessions import StatementResult, check_params, scan

# errors of the values written, not of the store: another write goes through as usual
_VALUE_ERRORS = (
    duckdb.ConversionException,
    duckdb.InvalidInputException,
    duckdb.OutOfRangeException,
    UnicodeError,
    ValueError,
    TypeError,
    OverflowError,
)

__all__ = ["DuckDBSession", "DuckDBStore", "holder"]

_CONFLICT_RETRIES = 8

T = TypeVar("T")

# DuckDB's file lock only keeps other processes out: engines of this process are tracked here
_OPEN: weakref.WeakValueDictionary[str, DuckDBStore] = weakref.WeakValueDictionary()
_OPEN_LOCK = threading.Lock()
_UMASK_LOCK = threading.Lock()  # the umask is the process's: one store changes it at a time
_PRIVATE_UMASK = 0o077


def holder(path: str | Path) -> DuckDBStore | None:
    """The open store of this process on the DuckDB file ``path``, if any (never ``:memory:``)."""
    if str(path) == ":memory:":
        return None
    with _OPEN_LOCK:
        found = _OPEN.get(os.path.realpath(path))
    return found if found is not None and not found._closed else None


class DuckDBStore:
    """wfkit's tables in a DuckDB file (or ``:memory:``).

    Parameters
    ----------
    path : str or Path
        The database file; created and migrated when new.
    """

    _closed: bool
    shared = False  # one process owns a DuckDB file
    closed_reason: str
    """Why the store is closed, for the error a later use of it raises."""

    def __init__(self, path: str | Path) -> None:
        self.url = str(path)
        self._key = None if self.url == ":memory:" else os.path.realpath(self.url)
        self._wal = None if self._key is None else os.path.abspath(self.url) + ".wal"
        with _OPEN_LOCK:
            other = _OPEN.get(self._key) if self._key else None
            if other is not None and not other._closed:
                raise StoreError(
                    f"the DuckDB file {self.url!r} is already open in this process by another "
                    "wfkit engine; close that one first (engine.close()) or keep using it"
                )
            if self._key:
                _OPEN[self._key] = self
        self._closed = False
        self.closed_reason = f"engine.close() closed it; open it again with wf.Engine({self.url!r})"
        try:
            self._conn = self._connect()
        except duckdb.IOException as exc:
            self._forget()
            if "lock" in str(exc).lower():
                raise StoreError(
                    f"the DuckDB file {self.url!r} is held by another process ({exc}). One "
                    "process owns a DuckDB file: talk to it through its HTTP API (wfkit serve), "
                    "stop it, or use PostgreSQL for many processes"
                ) from exc
            raise StoreError(f"cannot open DuckDB file {self.url!r}: {exc}") from exc
        self._lock = threading.RLock()
        self._session: DuckDBSession | None = None  # a caller's transaction, open on one thread
        self._migrate()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """Open the database; a new file is created owner-only (umask 077 around the connect)."""
        config: dict[str, str | bool | int | float | list[str]] = {
            "threads": 1,
            "allocator_flush_threshold": "8MB",
            "checkpoint_threshold": "4MB",
        }
        if self._key is None or os.path.lexists(self.url):
            return duckdb.connect(self.url, config=config)
        with _UMASK_LOCK:
            previous = os.umask(_PRIVATE_UMASK)
            try:
                return duckdb.connect(self.url, config=config)
            finally:
                os.umask(previous)

    def _guard_wal(self) -> None:
        """Create the missing write-ahead log empty, as readable as the database file and no more,
        before DuckDB creates it with the process's umask (0644 by default) at the next write."""
        wal = self._wal
        if wal is None or os.path.lexists(wal):
            return
        with contextlib.suppress(OSError):  # DuckDB reports what stops it from writing
            mode = stat.S_IMODE(os.stat(self.url).st_mode) & 0o666
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            os.close(os.open(wal, flags, mode))

    # --- schema -------------------------------------------------------------------------------

    def _migrate(self) -> None:
        with self._lock:
            conn = self._conn
            self._guard_wal()
            conn.execute(
                "CREATE TABLE IF NOT EXISTS wf_schema_version "
                "(version INTEGER NOT NULL, applied_at TIMESTAMP NOT NULL)"
            )
            current = conn.execute(query("schema_version")).fetchone()
            have = int(current[0]) if current and current[0] is not None else 0
            known = migrations()
            newest = known[-1][0] if known else 0
            if have > newest:
                self.close()
                raise StoreError(
                    f"{self.url!r} was written by a newer wfkit (schema version {have}; this "
                    f"wfkit knows up to {newest}); upgrade wfkit to open it"
                )
            for version, sql in known:
                if version <= have:
                    continue
                conn.execute("BEGIN")
                try:
                    conn.execute(sql)
                    conn.execute(query("record_schema_version"), [version, _now()])
                    conn.execute("COMMIT")
                except duckdb.Error as exc:
                    conn.execute("ROLLBACK")
                    raise StoreError(f"migration {version} of {self.url!r} failed: {exc}") from exc

    def schema_version(self) -> int:
        """The schema version of the open database."""
        row = self.query("schema_version")
        return int(row[0][0]) if row and row[0][0] is not None else 0

    # --- protocol -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the database and release its file lock."""
        with self._lock:
            try:
                self._conn.close()
            except duckdb.Error:
                pass
            self._closed = True
            self._forget()

    def _refuse_closed(self) -> None:
        if self._closed:
            raise StoreError(
                f"this engine's DuckDB file {self.url!r} is closed: {self.closed_reason}"
            )

    def _forget(self) -> None:
        with _OPEN_LOCK:
            if self._key and _OPEN.get(self._key) is self:
                del _OPEN[self._key]

    def write(self, statements: Sequence[Statement]) -> list[list[tuple[Any, ...]]]:
        """Run ``statements`` atomically; retry write conflicts with backoff."""
        work = [s for s in statements if s.rows]
        if not work:
            return []
        self._refuse_closed()
        session = self._session
        if session is not None and session.thread == threading.get_ident():
            return session.write(work)  # inside the caller's transaction: no retries
        delay = 0.001
        for attempt in range(_CONFLICT_RETRIES):
            try:
                with self._lock:
                    return self._write_once(work)
            except duckdb.TransactionException as exc:
                if attempt == _CONFLICT_RETRIES - 1:
                    raise StoreError(
                        f"write conflict on {self.url!r} persisted after {attempt + 1} tries: "
                        f"{exc}; is another engine writing the same runs?"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
            except _VALUE_ERRORS as exc:
                raise ValueRefused(f"writing to {self.url!r} refused a value: {exc}") from exc
            except duckdb.Error as exc:
                raise StoreError(f"writing to {self.url!r} failed: {exc}") from exc
        raise AssertionError("unreachable")

    def _write_once(self, work: list[Statement]) -> list[list[tuple[Any, ...]]]:
        conn = self._conn
        self._guard_wal()
        if len(work) == 1:  # one statement is atomic on its own: skip BEGIN/COMMIT
            return [self._run(work[0])]
        conn.execute("BEGIN")
        try:
            results = [self._run(s) for s in work]
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return results

    def _run(self, statement: Statement) -> list[tuple[Any, ...]]:
        conn = self._conn
        rows = statement.rows
        if statement.returning:
            found: list[tuple[Any, ...]] = []
            for row in rows:
                found += conn.execute(query(statement.name), list(row)).fetchall()
            return found
        if len(rows) == 1:
            conn.execute(query(statement.name), list(rows[0]))
        elif len(rows) <= _FEW_ROWS and (few := _values_sql(statement.name, len(rows))):
            conn.execute(few, [value for row in rows for value in row])
        elif has_query(f"{statement.name}_many"):
            columns = [list(col) for col in zip(*rows, strict=True)]
            conn.execute(query(f"{statement.name}_many"), columns)
        else:
            conn.executemany(query(statement.name), [list(r) for r in rows])
        return []

    def atomically(self, work: Callable[[InTransaction], T]) -> T:
        """Run ``work`` in one transaction on the store's connection (under its lock)."""
        with self._lock:
            self._refuse_closed()
            conn = self._conn
            try:
                self._guard_wal()
                conn.execute("BEGIN")
            except duckdb.Error as exc:
                raise StoreError(f"writing to {self.url!r} failed: {exc}") from exc
            try:
                value = work(_DuckDBTransaction(conn))
                conn.execute("COMMIT")
            except BaseException as exc:
                with contextlib.suppress(duckdb.Error):  # a failed COMMIT has rolled back
                    conn.execute("ROLLBACK")
                if isinstance(exc, duckdb.Error):
                    raise StoreError(f"writing to {self.url!r} failed: {exc}") from exc
                raise
            return value

    def session(self) -> DuckDBSession:
        """Open a caller's transaction on the engine's connection: until it ends, this thread's
        writes and queries run inside it and other threads' wait (see
        :mod:`wfkit.store.sessions`)."""
        self._refuse_closed()
        return DuckDBSession(self)

    def adopt(self, connection: Any) -> DuckDBSession:
        """Refused: a DuckDB file has one connection, the engine's."""
        raise UsageError(
            "engine.start(..., connection=) needs PostgreSQL: a DuckDB file has one connection, "
            "the engine's own. To commit a run together with your own rows, run both in "
            "`with engine.transaction() as tx:` (tx.execute(sql, params), then tx.start(...))"
        )

    def query(self, name: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of the named query."""
        self._refuse_closed()
        try:
            with self._lock:
                return self._conn.execute(query(name), list(params)).fetchall()
        except duckdb.Error as exc:
            raise StoreError(f"query {name!r} on {self.url!r} failed: {exc}") from exc

    def sql(self, text: str, params: Sequence[Any] | None = None) -> duckdb.DuckDBPyRelation:
        """Run a user's SQL on its own cursor; returns a DuckDB relation (``.df()``...)."""
        self._refuse_closed()
        try:
            with self._lock:
                cursor = self._conn.cursor()
                self._guard_wal()  # the user's SQL may write
            if params is None:
                return cursor.sql(text)
            return cursor.execute(text, list(params))  # type: ignore[return-value]
        except duckdb.Error as exc:
            raise StoreError(f"SQL failed: {exc}") from exc


class _DuckDBTransaction:
    """Named statements on a connection whose transaction is open."""

    def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
        self._conn = conn

    def execute(self, name: str, params: Sequence[Any] = ()) -> int:
        found = self._conn.execute(query(name), list(params)).fetchone()
        return int(found[0]) if found else 0  # DuckDB answers a DELETE with its row count

    def returning(self, name: str, params: Sequence[Any] = ()) -> tuple[list[str], list[Any]]:
        cursor = self._conn.execute(query(name), list(params))
        columns = [d[0] for d in cursor.description or []]
        return columns, cursor.fetchall()


# statements whose DuckDB result is a status, not rows (their "Count" column is empty)
_NO_ROWS = frozenset(
    {"CREATE", "DROP", "ALTER", "SET", "RESET", "ATTACH", "DETACH", "USE", "LOAD", "INSTALL"}
)


class DuckDBSession:
    """A caller's transaction on the store's one connection (``BEGIN`` ... ``COMMIT``).

    It holds the store's lock from start to end, so other threads' statements wait for it and
    never see or join its uncommitted rows. Any failed statement leaves DuckDB's transaction
    aborted: the session can then only roll back.
    """

    def __init__(self, store: DuckDBStore) -> None:
        self.store = store
        self.thread = threading.get_ident()
        store._lock.acquire()
        try:
            if store._session is not None:
                raise UsageError(
                    "a transaction is already open on this DuckDB store (on this thread); "
                    "nested transactions are not supported: do the work in the open one"
                )
            store._guard_wal()
            store._conn.execute("BEGIN")
        except duckdb.Error as exc:
            store._lock.release()
            raise StoreError(f"cannot begin a transaction on {store.url!r}: {exc}") from exc
        except BaseException:
            store._lock.release()
            raise
        store._session = self

    @contextlib.contextmanager
    def join(self) -> Iterator[None]:
        """The session's thread always writes inside it (it holds the only connection)."""
        yield

    def write(self, work: list[Statement]) -> list[list[tuple[Any, ...]]]:
        """Run the engine's statements inside the transaction."""
        try:
            return [self.store._run(s) for s in work]
        except _VALUE_ERRORS as exc:
            raise ValueRefused(f"writing to {self.store.url!r} refused a value: {exc}") from exc
        except duckdb.Error as exc:
            raise StoreError(f"writing to {self.store.url!r} failed: {exc}") from exc

    def execute(self, text: str, params: Sequence[Any] | None = None) -> StatementResult:
        """Run the caller's statement inside the transaction; its rows are fetched at once."""
        words, _ = scan(text)
        values = check_params(params)
        conn = self.store._conn
        try:
            result = conn.execute(text) if values is None else conn.execute(text, values)
            changed = result.rowcount
            if changed >= 0:  # INSERT, UPDATE, DELETE: DuckDB answers a count
                return StatementResult([], [], changed)
            if words and words[-1] in _NO_ROWS:
                return StatementResult([], [], -1)
            rows = result.fetchall()
            columns = [d[0] for d in result.description or []]
        except (duckdb.Error, ValueError, TypeError) as exc:
            raise StoreError(
                f"the statement failed on {self.store.url!r}: {exc}; the transaction cannot go "
                "on and is rolled back when the block ends (nothing of it is written)"
            ) from exc
        return StatementResult(columns, rows, len(rows))

    def commit(self) -> None:
        """Commit, then let other threads at the connection again."""
        try:
            self.store._guard_wal()
            self.store._conn.execute("COMMIT")
        except duckdb.Error as exc:
            with contextlib.suppress(duckdb.Error):
                self.store._conn.execute("ROLLBACK")
            raise StoreError(
                f"committing the transaction on {self.store.url!r} failed ({exc}); it was rolled "
                "back and nothing of it was written"
            ) from exc
        finally:
            self._end()

    def rollback(self) -> None:
        """Roll back, then let other threads at the connection again."""
        try:
            with contextlib.suppress(duckdb.Error):  # an aborted transaction rolls back anyway
                self.store._conn.execute("ROLLBACK")
        finally:
            self._end()

    def _end(self) -> None:
        if self.store._session is self:
            self.store._session = None
            self.store._lock.release()


# up to this many rows, an INSERT is faster as one multi-row VALUES statement than column-wise
# (measured here: 2 rows 0.7 ms against 1.3 ms; from 8 rows on the column-wise form wins)
_FEW_ROWS = 4


@functools.cache
def _values_sql(name: str, rows: int) -> str | None:
    """``INSERT ... VALUES (?...), (?...)`` for ``rows`` rows of an INSERT query, else None."""
    text = query(name).strip().rstrip(";")
    head, found, values = text.rpartition("VALUES")
    values = values.strip()
    # only a plain `VALUES (?, ...)` tail (no ON CONFLICT, RETURNING...) can be repeated
    if not found or not text.upper().startswith("INSERT") or not values.endswith(")"):
        return None
    if values.count("(") != 1:
        return None
    return f"{head}VALUES {', '.join([values] * rows)}"


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
