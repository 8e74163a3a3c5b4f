"""The DuckDB store: one engine process owns the file and is its only writer.

Measured here: a tiny statement costs ~0.15-0.4 ms from Python, so writes are batched: a list of
statements runs in one transaction with multi-row INSERTs, and a batch of a single statement runs
in autocommit (no BEGIN/COMMIT round trips). ``threads=1`` cuts the cost of tiny statements.

Run data may be personal: a new database file is created readable by its owner only (0600), and
its write-ahead log ``<file>.wal``, which DuckDB deletes at every checkpoint and creates again at
the next write, is created first by the store with the database file's own permissions, so it is
never more readable than the database. An existing file keeps the permissions it has.

Nothing is acknowledged that is not in the file (:mod:`wfkit.store.guard`): the store refuses to
open a file that holds less than its engine committed, checks after every commit that the path
still names the file it opened, says "the disk holding ... is full" when it is, and opens the
database again after DuckDB invalidated it (a checkpoint that failed after a durable commit).
A write-ahead log deleted while the engine runs is saved: DuckDB still writes to the deleted log,
so the store, finding the log gone before a write, checkpoints it into the database first.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import json
import logging
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
from wfkit.store.faults import (
    damaged,
    damaged_message,
    durable_commit,
    full_message,
    full_reason,
    held_by_another_process,
)
from wfkit.store.guard import FileGuard
from wfkit.store.marks import EVENT_DELETES, EVENT_INSERTS, events_in, tally
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

log = logging.getLogger("wfkit.store")

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
        self._lock = threading.RLock()
        self._session: DuckDBSession | None = None  # a caller's transaction, open on one thread
        self._guard = None if self._key is None else FileGuard(self.url)
        self._invalid: BaseException | None = None  # DuckDB asked to be opened again
        self._conn: duckdb.DuckDBPyConnection | None = None
        try:
            self._open(accept_lost_commits, actor)
        except BaseException:
            self._abandon()
            raise

    def _open(self, accept: bool, actor: str | None) -> None:
        """Connect, compare the file with its commit mark, migrate, and record an accepted loss
        (in that order: a file refused is not written to)."""
        guard = self._guard
        if guard is not None:
            guard.before_open(accept)
        try:
            self._conn = self._connect()
            held = self._held() if guard is not None else 0
        except duckdb.Error as exc:
            if held_by_another_process(exc):
                raise StoreError(
                    f"the DuckDB file {self.url!r} is held by another process ({exc}). One "
                    "process owns a DuckDB file: talk to it through its HTTP API (wfkit serve), "
                    "stop it, or use PostgreSQL for many processes"
                ) from exc
            raise StoreError(self._describe(exc, f"cannot open DuckDB file {self.url!r}")) from exc
        lost = guard is not None and guard.opened(held, accept)
        self._migrate()
        if guard is None:
            return
        guard.start(held)
        if lost and guard.expected is not None:
            self._accept(guard.expected, held, actor)

    def _held(self) -> int:
        """What the file holds of its commits (see :mod:`wfkit.store.marks`)."""
        conn = self._connection()
        tables = {row[0] for row in conn.execute(query("store_count_tables")).fetchall()}
        if "wf_events" not in tables:
            return 0
        name = "store_commit_count" if "wf_store_tally" in tables else "store_event_count"
        found = conn.execute(query(name)).fetchone()
        return int(found[0]) if found else 0

    def _accept(self, expected: int, held: int, actor: str | None) -> None:
        """Record that the loss is accepted, and checkpoint the file: the log DuckDB read up to
        where it was cut is replaced by a whole file."""
        detail = {"expected": expected, "held": held, "missing": expected - held}
        row = (_now(), "commits.lost", actor or _login(), json.dumps(detail))
        self.write([Statement("insert_store_event", [row])])
        with self._lock:
            self._connection().execute("CHECKPOINT")
        self.accepted = (expected, held)
        log.warning(
            "%s: the loss of %d of %d changes was accepted and recorded in wf_store_events",
            self.url,
            expected - held,
            expected,
        )

    def _abandon(self) -> None:
        """The store did not open: close what it opened without a checkpoint (a file refused,
        or damaged, is left as it was found) and let another store open the file."""
        self._closed = True
        if self._conn is not None:
            with contextlib.suppress(duckdb.Error):
                self._conn.execute("PRAGMA disable_checkpoint_on_shutdown")
            with contextlib.suppress(duckdb.Error):
                self._conn.close()
        if self._guard is not None:
            self._guard.close()
        self._forget()

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

    def _connection(self) -> duckdb.DuckDBPyConnection:
        """The connection, opened again first when a fatal error invalidated the database
        (DuckDB asks for that: its commit stood, its checkpoint did not)."""
        if self._conn is None:
            raise StoreError(f"the DuckDB file {self.url!r} is not open")
        if self._invalid is None:
            return self._conn
        with contextlib.suppress(duckdb.Error):
            self._conn.close()
        try:
            self._conn = self._connect()
        except duckdb.Error as exc:
            raise StoreError(self._describe(exc, f"cannot open {self.url!r} again")) from exc
        log.info("%s was opened again after: %s", self.url, self._invalid)
        self._invalid = None
        if self._guard is not None:
            self._guard.check()  # still the file this store opened
        return self._conn

    def _describe(self, exc: BaseException, doing: str) -> str:
        """The message of a StoreError for the driver's ``exc`` met while ``doing``."""
        if isinstance(exc, duckdb.FatalException):
            self._invalid = exc  # the database must be opened again before its next use
        reason = full_reason(exc)
        if reason is not None:
            return full_message(self.url, reason)
        if damaged(exc):
            return damaged_message(self.url, exc)
        return f"{doing}: {exc}"

    def _guard_wal(self, in_transaction: bool = False) -> None:
        """Before a write: when the write-ahead log is missing, checkpoint (outside a
        transaction), then create it empty, as readable as the database file and no more,
        before DuckDB creates it with the process's umask (0644 by default).

        DuckDB deletes its log at each checkpoint; a log deleted by someone else is still
        written to by DuckDB, through its open descriptor, and the commits since the last
        checkpoint are in no file a path names: the checkpoint moves them into the database.
        After DuckDB's own deletion it finds nothing to do (~0.5 ms, once per 4 MB of log)."""
        wal = self._wal
        if wal is None or os.path.lexists(wal):
            return
        if not in_transaction:
            if self._guard is not None:
                self._guard.check()  # the database too may be gone: then nothing is written
            with contextlib.suppress(duckdb.Error):  # the write says what stops it
                self._connection().execute("CHECKPOINT")
        with contextlib.suppress(OSError):  # DuckDB reports what stops it from writing
            mode = stat.S_IMODE(os.stat(self.url).st_mode) & 0o666
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            os.close(os.open(wal, flags, mode))

    # --- schema -------------------------------------------------------------------------------

    def _migrate(self) -> None:
        with self._lock:
            try:
                self._migrate_all(self._connection())
            except duckdb.Error as exc:
                raise StoreError(self._describe(exc, f"cannot migrate {self.url!r}")) from exc

    def _migrate_all(self, conn: duckdb.DuckDBPyConnection) -> None:
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
                with contextlib.suppress(duckdb.Error):
                    conn.execute("ROLLBACK")
                raise StoreError(
                    self._describe(exc, f"migration {version} of {self.url!r} failed")
                ) from exc

    def schema_version(self) -> int:
        """The schema version of the open database."""
        row = self.query("schema_version")
        return int(row[0][0]) if row and row[0][0] is not None else 0

    # --- protocol -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the database and release its file lock."""
        with self._lock:
            conn = self._conn
            if conn is not None:
                if self._guard is not None and self._guard.broken is not None:
                    # the path names another file, or none: a checkpoint at close would write
                    # to the old one and delete the write-ahead log at the path, not its own
                    with contextlib.suppress(duckdb.Error):
                        conn.execute("PRAGMA disable_checkpoint_on_shutdown")
                with contextlib.suppress(duckdb.Error):
                    conn.close()
            self._closed = True
            if self._guard is not None:
                self._guard.close()
            self._forget()

    def check(self) -> None:
        """Raise StoreError when this store cannot keep what is written now: closed, its file
        deleted or replaced since it was opened (:class:`~wfkit.store.base.StoreBroken`), or
        not answering a query."""
        self._refuse_closed()
        if self._guard is not None:
            self._guard.check()
        self.query("schema_version")

    def _refuse_closed(self) -> None:
        if self._closed:
            raise StoreError(
                f"this engine's DuckDB file {self.url!r} is closed: {self.closed_reason}"
            )

    def _refuse_broken(self) -> None:
        if self._guard is not None:
            self._guard.refuse_broken()

    def _committed(self, changes: int) -> None:
        """A transaction committed: check the file before anyone is told, move the mark on."""
        if self._guard is not None:
            self._guard.committed(changes)

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
        self._refuse_broken()
        delay = 0.001
        for attempt in range(_CONFLICT_RETRIES):
            try:
                with self._lock:
                    return self._write_once(work)
            except duckdb.TransactionException as exc:
                if not _conflict(exc):
                    message = self._describe(exc, f"writing to {self.url!r} failed")
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
                raise StoreError(self._describe(exc, f"writing to {self.url!r} failed")) from exc
        raise AssertionError("unreachable")

    def _write_once(self, work: list[Statement]) -> list[list[tuple[Any, ...]]]:
        conn = self._connection()
        asked, changes = len(work), 0
        if self._guard is not None:
            extra, changes = tally(events_in(work), 0)
            if extra:  # a commit without events counts in the tally (see wfkit.store.marks)
                work = [*work, Statement("add_store_tally", [(extra,)])]
        self._guard_wal()
        try:
            if len(work) == 1 and not work[0].returning:  # atomic on its own: no BEGIN/COMMIT
                results = [self._run(work[0])]
            else:
                results = self._transaction(conn, work)
        except duckdb.FatalException as exc:
            if not durable_commit(exc):
                raise
            self._stood(exc)
            results = [[] for _ in work]  # (a returning statement always runs in _transaction)
        self._committed(changes)
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
            self._stood(exc)

    def _stood(self, exc: duckdb.FatalException) -> None:
        """A commit is durable although DuckDB failed right after it (a checkpoint on a full
        disk) and invalidated the database: open it again before the next use."""
        self._invalid = exc
        reason = full_reason(exc)
        log.warning(
            "%s: the commit is durable, but DuckDB's checkpoint after it failed (%s); the "
            "database is opened again before its next use",
            self.url,
            full_message(self.url, reason) if reason else exc,
        )

    def _run(self, statement: Statement) -> list[tuple[Any, ...]]:
        conn = self._connection()
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
            self._refuse_broken()
            try:
                conn = self._connection()
                self._guard_wal()
                conn.execute("BEGIN")
            except duckdb.Error as exc:
                raise StoreError(self._describe(exc, f"writing to {self.url!r} failed")) from exc
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
                        self._describe(exc, f"writing to {self.url!r} failed")
                    ) from exc
                raise
            self._committed(changes)
            return value

    def _tally(self, conn: duckdb.DuckDBPyConnection, inserted: int, deleted: int) -> int:
        """Add to the tally what a transaction needs (see :mod:`wfkit.store.marks`), inside it;
        the changes it counts for."""
        if self._guard is None:
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
        self._refuse_broken()
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
                return self._connection().execute(query(name), list(params)).fetchall()
        except duckdb.Error as exc:
            raise StoreError(self._describe(exc, f"query {name!r} on {self.url!r} failed")) from exc

    def sql(self, text: str, params: Sequence[Any] | None = None) -> duckdb.DuckDBPyRelation:
        """Run a user's SQL on its own cursor; returns a DuckDB relation (``.df()``...)."""
        self._refuse_closed()
        try:
            with self._lock:
                cursor = self._connection().cursor()
                self._guard_wal()  # the user's SQL may write
            if params is None:
                return cursor.sql(text)
            return cursor.execute(text, list(params))  # type: ignore[return-value]
        except duckdb.Error as exc:
            raise StoreError(self._describe(exc, "SQL failed")) from exc


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
            self._conn = store._connection()
            store._guard_wal()
            self._conn.execute("BEGIN")
        except duckdb.Error as exc:
            store._lock.release()
            raise StoreError(
                store._describe(exc, f"cannot begin a transaction on {store.url!r}")
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
                self.store._describe(exc, f"writing to {self.store.url!r} failed")
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
                store._guard_wal(in_transaction=True)
                changes = store._tally(self._conn, self._events, 0) if self._engine_wrote else 0
                store._commit(self._conn)
            except duckdb.Error as exc:
                with contextlib.suppress(duckdb.Error):
                    self._conn.execute("ROLLBACK")
                raise StoreError(
                    f"committing the transaction on {store.url!r} failed "
                    f"({store._describe(exc, 'COMMIT')}); it was rolled back and nothing of it "
                    "was written"
                ) from exc
            store._committed(changes)
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


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _conflict(exc: duckdb.TransactionException) -> bool:
    """True for a write conflict (worth a retry), not a commit that failed for another reason
    (a full disk, an I/O error), which a retry would only repeat."""
    return "conflict" in str(exc).lower() and full_reason(exc) is None


def _login() -> str | None:
    """The login name of the user running this process, if there is one."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return None
