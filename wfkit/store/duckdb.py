"""The DuckDB store: one engine process owns the file and is its only writer.

Measured here: a tiny statement costs ~0.15-0.4 ms from Python, so writes are batched: a list of
statements runs in one transaction with multi-row INSERTs, and a batch of a single statement runs
in autocommit (no BEGIN/COMMIT round trips). ``threads=1`` cuts the cost of tiny statements.

The file itself — creating it owner-only, its write-ahead log, the commit mark compared when it
opens, the check after every commit that its path still names it, a full disk, a damaged file —
is :class:`~wfkit.store.duckdb_file.DuckDBFile`'s: nothing is acknowledged that is not in it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from wfkit.errors import StoreError, UsageError
from wfkit.store.base import InTransaction, Statement, ValueRefused
from wfkit.store.duckdb_file import DuckDBFile
from wfkit.store.faults import durable_commit, full_reason
from wfkit.store.marks import EVENT_DELETES, EVENT_INSERTS, events_in, tally
from wfkit.store.queries import has_query, query
from wfkit.store.results import RelationResult, StatementResult
from wfkit.store.sessions import check_params, scan

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
    accept_lost_commits : bool
        Open the file although it holds less than its engine committed to it (see
        :mod:`wfkit.store.marks`): the loss is recorded in ``wf_store_events`` (kind
        ``commits.lost``, who and how many) and the mark starts again from what it holds.
    actor : str, optional
        Who accepts the loss (the login name by default).

    Raises
    ------
    StoreError
        When the file cannot be opened: held by another process, damaged, on a full disk, or
        holding less than its engine committed (:class:`~wfkit.store.base.LostCommits`).
    """

    _closed: bool
    shared = False  # one process owns a DuckDB file
    closed_reason: str
    """Why the store is closed, for the error a later use of it raises."""
    accepted: tuple[int, int] | None = None
    """(expected, held) of the loss this opening accepted, if it accepted one."""

    def __init__(
        self, path: str | Path, *, accept_lost_commits: bool = False, actor: str | None = None
    ) -> None:
        self.url = str(path)
        self._key = None if self.url == ":memory:" else os.path.realpath(self.url)
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
        self._lock = threading.RLock()
        self._session: DuckDBSession | None = None  # a caller's transaction, open on one thread
        try:
            self._file = DuckDBFile(self.url, accept_lost_commits, actor)
        except BaseException:
            self._closed = True
            self._forget()
            raise
        self.accepted = self._file.accepted

    def schema_version(self) -> int:
        """The schema version of the open database."""
        row = self.query("schema_version")
        return int(row[0][0]) if row and row[0][0] is not None else 0

    # --- protocol -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the database and release its file lock."""
        with self._lock:
            self._file.close()
            self._closed = True
            self._forget()

    def check(self) -> None:
        """Raise StoreError when this store cannot keep what is written now: closed, its file
        deleted or replaced since it was opened (:class:`~wfkit.store.base.StoreBroken`), or
        not answering a query. A write-ahead log deleted since the last write is checkpointed
        into the database now, as before a write (``/health`` calls this)."""
        self._refuse_closed()
        with self._lock:
            self._file.guard_wal()
        self._file.check()
        self.query("schema_version")

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
        """Run ``statements`` atomically; retry write conflicts with backoff.

        Raises
        ------
        StoreBroken
            When the file was deleted or replaced (this write, if made, went to that file).
        StoreError
            When the write failed: its disk is full, the file is damaged, a conflict persisted.
        """
        work = [s for s in statements if s.rows]
        if not work:
            return []
        self._refuse_closed()
        session = self._session
        if session is not None and session.thread == threading.get_ident():
            return session.write(work)  # inside the caller's transaction: no retries
        self._file.refuse_broken()
        delay = 0.001
        for attempt in range(_CONFLICT_RETRIES):
            try:
                with self._lock:
                    return self._write_once(work)
            except duckdb.TransactionException as exc:
                if not _conflict(exc):
                    message = self._file.describe(exc, f"writing to {self.url!r} failed")
                    raise StoreError(message) from exc
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
                raise StoreError(
                    self._file.describe(exc, f"writing to {self.url!r} failed")
                ) from exc
        raise AssertionError("unreachable")

    def _write_once(self, work: list[Statement]) -> list[list[tuple[Any, ...]]]:
        self._file.guard_wal()
        conn = self._file.connection()
        asked, changes = len(work), 0
        if self._file.counting:
            extra, changes = tally(events_in(work), 0)
            if extra:  # a commit without events counts in the tally (see wfkit.store.marks)
                work = [*work, Statement("add_store_tally", [(extra,)])]
        try:
            if len(work) == 1 and not work[0].returning:  # atomic on its own: no BEGIN/COMMIT
                results = [self._run(work[0])]
            else:
                results = self._transaction(conn, work)
        except duckdb.FatalException as exc:
            if not durable_commit(exc):
                raise
            self._file.stood(exc)
            results = [[] for _ in work]  # (a returning statement always runs in _transaction)
        self._file.committed(changes)
        return results[:asked]

    def _transaction(
        self, conn: duckdb.DuckDBPyConnection, work: list[Statement]
    ) -> list[list[tuple[Any, ...]]]:
        conn.execute("BEGIN")
        try:
            results = [self._run(s) for s in work]
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # its own error is the one to report
                conn.execute("ROLLBACK")
            raise
        self._commit(conn)
        return results

    def _commit(self, conn: duckdb.DuckDBPyConnection) -> None:
        """COMMIT; a failed COMMIT has rolled back, unless DuckDB says it is durable (its
        checkpoint failed after it): then it stands and the database is opened again later."""
        try:
            conn.execute("COMMIT")
        except duckdb.FatalException as exc:
            if not durable_commit(exc):
                raise
            self._file.stood(exc)

    def _run(self, statement: Statement) -> list[tuple[Any, ...]]:
        conn = self._file.connection()
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
            self._file.refuse_broken()
            try:
                self._file.guard_wal()
                conn = self._file.connection()
                conn.execute("BEGIN")
            except duckdb.Error as exc:
                raise StoreError(
                    self._file.describe(exc, f"writing to {self.url!r} failed")
                ) from exc
            tx = _DuckDBTransaction(conn)
            try:
                value = work(tx)
                changes = self._tally(conn, tx.inserted, tx.deleted)
                self._commit(conn)
            except BaseException as exc:
                with contextlib.suppress(duckdb.Error):  # a failed COMMIT has rolled back
                    conn.execute("ROLLBACK")
                if isinstance(exc, duckdb.Error):
                    raise StoreError(
                        self._file.describe(exc, f"writing to {self.url!r} failed")
                    ) from exc
                raise
            self._file.committed(changes)
            return value

    def _tally(self, conn: duckdb.DuckDBPyConnection, inserted: int, deleted: int) -> int:
        """Add to the tally what a transaction needs (see :mod:`wfkit.store.marks`), inside it;
        the changes it counts for."""
        if not self._file.counting:
            return 0
        extra, changes = tally(inserted, deleted)
        if extra:
            conn.execute(query("add_store_tally"), [extra])
        return changes

    def session(self) -> DuckDBSession:
        """Open a caller's transaction on the engine's connection: until it ends, this thread's
        writes and queries run inside it and other threads' wait (see
        :mod:`wfkit.store.sessions`)."""
        self._refuse_closed()
        self._file.refuse_broken()
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
                return self._file.connection().execute(query(name), list(params)).fetchall()
        except duckdb.Error as exc:
            raise StoreError(
                self._file.describe(exc, f"query {name!r} on {self.url!r} failed")
            ) from exc

    def sql(self, text: str, params: Sequence[Any] | None = None) -> StatementResult:
        """Run a user's SQL on its own cursor: its rows, backed by DuckDB's relation (so
        ``.df()`` and ``.pl()`` come from DuckDB)."""
        self._refuse_closed()
        try:
            with self._lock:
                cursor = self._file.connection().cursor()
                self._file.guard_wal()  # the user's SQL may write
            if params is None:
                relation = cursor.sql(text)
                if relation is None:  # a statement with nothing to give back
                    return StatementResult([], [], -1)
                return RelationResult(relation)
            done = cursor.execute(text, list(params))
            columns = [d[0] for d in done.description or []]
            rows = done.fetchall() if columns else []
            return StatementResult(columns, rows, len(rows) if columns else -1)
        except duckdb.Error as exc:
            raise StoreError(self._file.describe(exc, "SQL failed")) from exc


class _DuckDBTransaction:
    """Named statements on a connection whose transaction is open; counts the events they
    insert and delete (see :mod:`wfkit.store.marks`)."""

    def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
        self._conn = conn
        self.inserted = 0
        self.deleted = 0

    def execute(self, name: str, params: Sequence[Any] = ()) -> int:
        found = self._conn.execute(query(name), list(params)).fetchone()
        count = int(found[0]) if found else 0  # DuckDB answers a DELETE with its row count
        self._count(name, count)
        return count

    def returning(self, name: str, params: Sequence[Any] = ()) -> tuple[list[str], list[Any]]:
        cursor = self._conn.execute(query(name), list(params))
        columns = [d[0] for d in cursor.description or []]
        rows = cursor.fetchall()
        self._count(name, len(rows))
        return columns, rows

    def _count(self, name: str, rows: int) -> None:
        if name in EVENT_INSERTS:
            self.inserted += rows
        elif name in EVENT_DELETES:
            self.deleted += rows


# statements whose DuckDB result is a status, not rows (their "Count" column is empty)
_NO_ROWS = frozenset(
    {"CREATE", "DROP", "ALTER", "SET", "RESET", "ATTACH", "DETACH", "USE", "LOAD", "INSTALL"}
)


class DuckDBSession:
    """A caller's transaction on the store's one connection (``BEGIN`` ... ``COMMIT``).

    It holds the store's lock from start to end, so other threads' statements wait for it and
    never see or join its uncommitted rows. Any failed statement leaves DuckDB's transaction
    aborted: the session can then only roll back. The engine's statements in it are counted
    for the commit mark (:mod:`wfkit.store.marks`); the caller's own are not.
    """

    def __init__(self, store: DuckDBStore) -> None:
        self.store = store
        self.thread = threading.get_ident()
        self._events = 0  # events the engine's statements inserted
        self._engine_wrote = False
        store._lock.acquire()
        try:
            if store._session is not None:
                raise UsageError(
                    "a transaction is already open on this DuckDB store (on this thread); "
                    "nested transactions are not supported: do the work in the open one"
                )
            store._file.guard_wal()
            self._conn = store._file.connection()
            self._conn.execute("BEGIN")
        except duckdb.Error as exc:
            store._lock.release()
            raise StoreError(
                store._file.describe(exc, f"cannot begin a transaction on {store.url!r}")
            ) from exc
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
            results = [self.store._run(s) for s in work]
        except _VALUE_ERRORS as exc:
            raise ValueRefused(f"writing to {self.store.url!r} refused a value: {exc}") from exc
        except duckdb.Error as exc:
            raise StoreError(
                self.store._file.describe(exc, f"writing to {self.store.url!r} failed")
            ) from exc
        self._events += events_in(work)
        self._engine_wrote = True
        return results

    def execute(self, text: str, params: Sequence[Any] | None = None) -> StatementResult:
        """Run the caller's statement inside the transaction; its rows are fetched at once."""
        words, _ = scan(text)
        values = check_params(params)
        conn = self._conn
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
        """Commit, then let other threads at the connection again.

        Raises
        ------
        StoreBroken
            When the database file was deleted or replaced: the commit went to that file.
        """
        store = self.store
        try:
            try:
                store._file.guard_wal(in_transaction=True)
                changes = store._tally(self._conn, self._events, 0) if self._engine_wrote else 0
                store._commit(self._conn)
            except duckdb.Error as exc:
                with contextlib.suppress(duckdb.Error):
                    self._conn.execute("ROLLBACK")
                reason = store._file.describe(exc, "COMMIT")
                raise StoreError(
                    f"committing the transaction on {store.url!r} failed ({reason}); it was "
                    "rolled back and nothing of it was written"
                ) from exc
            store._file.committed(changes)
        finally:
            self._end()

    def rollback(self) -> None:
        """Roll back, then let other threads at the connection again."""
        try:
            with contextlib.suppress(duckdb.Error):  # an aborted transaction rolls back anyway
                self._conn.execute("ROLLBACK")
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


def _conflict(exc: duckdb.TransactionException) -> bool:
    """True for a write conflict (worth a retry), not a commit that failed for another reason
    (a full disk, an I/O error), which a retry would only repeat."""
    return "conflict" in str(exc).lower() and full_reason(exc) is None
