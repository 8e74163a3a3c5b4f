"""The PostgreSQL store: wfkit's tables in a PostgreSQL database, through psycopg 3.

Same tables, same migrations and the same named queries as DuckDB; queries are written with
``?`` placeholders and turned into psycopg's ``%s`` here. Any number of engine processes may
share the database: each owns the runs it advances through a lease on the run's row (see
``wfkit.engine.leases``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any, TypeVar

import psycopg
from psycopg import sql as pgsql
from psycopg_pool import ConnectionPool, PoolTimeout

from wfkit.errors import StoreError, UsageError
from wfkit.store.base import AlreadyTaken, InTransaction, LeaseLost, Statement, ValueRefused
from wfkit.store.queries import has_query, migrations, query
from wfkit.store.sessions import StatementResult, check_params, scan

__all__ = ["PostgresSession", "PostgresStore"]

_MIGRATE_LOCK = 0x77666B6975
_RETRIES = 8
# connections for callers' transaction blocks, a pool apart from the engine's own: a block holds
# its connection until it ends, and the engine's statements must never wait for one
BLOCK_CONNECTIONS = 8
BLOCK_WAIT = 30.0  # seconds a block waits for a connection when all of them are in blocks

T = TypeVar("T")


@cache
def _pg(name: str) -> str:
    return query(name).replace("?", "%s")


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
            self._where = (self._conn.info.dbname, self._conn.info.port)
        finally:
            self._conn.close()
        # .session: the caller's transaction this thread writes and reads in; .reads: the
        # block open on this thread, which its reads see (the engine's own writes go outside)
        self._joined = threading.local()
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
        self._blocks: ConnectionPool | None = None  # made at the first transaction block
        self._blocks_lock = threading.Lock()

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
            if self._blocks is not None:
                self._blocks.close()
        except psycopg.Error:
            pass

    def check(self) -> None:
        """Raise StoreError when the database does not answer a query (the server keeps its
        own files: there is no file here to watch)."""
        self.query("schema_version")

    def write(self, statements: Sequence[Statement]) -> list[list[tuple[Any, ...]]]:
        """Run ``statements`` in one transaction; retry serialization failures with backoff."""
        work = [s for s in statements if s.rows]
        if not work:
            return []
        session: PostgresSession | None = getattr(self._joined, "session", None)
        if session is not None:
            return session.write(work)  # inside the caller's transaction: no retries
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
            if statement.claim:
                gone = []
                for row in rows:
                    cur.execute(_pg(statement.name), list(row))
                    if cur.rowcount < 1:
                        gone.append(row[0])
                if gone:
                    raise AlreadyTaken(
                        f"{len(gone)} row(s) of {statement.name} were taken by another engine "
                        "process first",
                        gone,
                    )
            elif statement.expect is not None:
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

    def session(self) -> PostgresSession:
        """Open a caller's transaction on a connection of the blocks' pool (see
        :mod:`wfkit.store.sessions`); it goes back to the pool when the transaction ends."""
        with self._blocks_lock:
            if self._blocks is None:
                self._blocks = ConnectionPool(
                    self.url,
                    min_size=0,
                    max_size=BLOCK_CONNECTIONS,
                    kwargs={"autocommit": True},
                    open=True,
                    name="wfkit-blocks",
                )
            pool = self._blocks
        try:
            conn = pool.getconn(timeout=BLOCK_WAIT)
        except PoolTimeout as exc:
            raise StoreError(
                f"no connection for a transaction block on {_safe(self.url)} within "
                f"{BLOCK_WAIT:.0f} s: {BLOCK_CONNECTIONS} blocks are open; end blocks sooner "
                "(or open fewer at once)"
            ) from exc
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {_safe(self.url)}: {exc}") from exc
        try:
            conn.execute("BEGIN")
        except psycopg.Error as exc:
            pool.putconn(conn)
            raise StoreError(f"cannot begin a transaction on {_safe(self.url)}: {exc}") from exc
        return PostgresSession(self, conn, own=True, pool=pool)

    def adopt(self, connection: Any) -> PostgresSession:
        """A session on the caller's own psycopg connection: the engine's rows go into the
        transaction it has open (or opens one, as psycopg does for any statement outside
        autocommit); the caller commits or rolls back."""
        if not isinstance(connection, psycopg.Connection):
            raise UsageError(
                f"connection= must be a psycopg (3) Connection on this engine's database, got "
                f"{type(connection).__name__}; an async connection is not supported either"
            )
        if connection.closed:
            raise UsageError("connection= is closed; pass an open psycopg connection")
        status = connection.info.transaction_status
        if status == psycopg.pq.TransactionStatus.INERROR:
            raise UsageError(
                "the transaction of connection= has failed (a statement in it raised); roll it "
                "back (conn.rollback()) before starting a run in it"
            )
        where = (connection.info.dbname, connection.info.port)
        if where != self._where:
            raise UsageError(
                f"connection= is on database {where[0]!r} (port {where[1]}), but this engine's "
                f"runs live in {self._where[0]!r} (port {self._where[1]}); pass a connection "
                "to the engine's database"
            )
        return PostgresSession(self, connection, own=False)

    def query(self, name: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of the named query."""
        joined = self._joined
        session: PostgresSession | None = getattr(joined, "session", None) or getattr(
            joined, "reads", None
        )
        if session is not None:
            return session.query(name, params)
        try:
            with self._pool.connection() as conn:
                return conn.execute(_pg(name), list(params)).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"query {name!r} on {_safe(self.url)} failed: {exc}") from exc

    def sql(self, text: str, params: Sequence[Any] | None = None) -> StatementResult:
        """Run a user's SQL; returns its rows (``.fetchall()``, ``.df()``, ``.pl()``)."""
        try:
            with self._pool.connection() as conn, conn.cursor() as cur:
                statement: Any = text  # the user's own SQL; values go in ``params``, bound
                cur.execute(statement, params)
                columns = [d.name for d in cur.description or []]
                rows = cur.fetchall() if cur.description else []
                return StatementResult(columns, rows, len(rows) if columns else cur.rowcount)
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


class PostgresSession:
    """A caller's transaction on one connection: the pool's (``own``: begun, committed and
    rolled back here) or the caller's own (left for the caller to end).

    Each write of the engine runs under a savepoint, so a refused write leaves the caller's
    transaction usable; a connection in autocommit with no transaction open commits it at once.
    """

    def __init__(
        self,
        store: PostgresStore,
        conn: psycopg.Connection[Any],
        own: bool,
        pool: ConnectionPool | None = None,
    ) -> None:
        self.store = store
        self.conn = conn
        self.own = own
        self.pool = pool  # where an own connection goes back
        if own:  # the block's thread reads its own rows, as on DuckDB
            store._joined.reads = self

    @contextlib.contextmanager
    def join(self) -> Iterator[None]:
        """While open, this thread's store writes and queries run on this connection."""
        local = self.store._joined
        before = getattr(local, "session", None)
        local.session = self
        try:
            yield
        finally:
            local.session = before

    def write(self, work: list[Statement]) -> list[list[tuple[Any, ...]]]:
        """Run the engine's statements in the transaction, under a savepoint."""
        conn = self.conn
        url = _safe(self.store.url)
        idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        try:
            if conn.autocommit and idle:  # no transaction open: this one commits at once
                with conn.transaction():
                    return [self.store._run(conn, s) for s in work]
            conn.execute("SAVEPOINT wfkit_write")
            try:
                results = [self.store._run(conn, s) for s in work]
            except BaseException:
                conn.execute("ROLLBACK TO SAVEPOINT wfkit_write")
                raise
            conn.execute("RELEASE SAVEPOINT wfkit_write")
            return results
        except LeaseLost:
            raise
        except (psycopg.errors.DataError, UnicodeError, ValueError, TypeError) as exc:
            raise ValueRefused(f"writing to {url} refused a value: {exc}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"writing to {url} failed: {exc}") from exc

    def query(self, name: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of the named query, read inside the transaction."""
        try:
            return self.conn.execute(_pg(name), list(params)).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"query {name!r} on {_safe(self.store.url)} failed: {exc}") from exc

    def execute(self, text: str, params: Sequence[Any] | None = None) -> StatementResult:
        """Run the caller's statement (``?`` placeholders); its rows are fetched at once."""
        _, converted = scan(text)
        values = check_params(params)
        try:
            with self.conn.cursor() as cur:
                statement: Any = text if values is None else converted  # the caller's own SQL
                cur.execute(statement, values)
                if cur.description is None:
                    return StatementResult([], [], cur.rowcount)
                rows = cur.fetchall()
                return StatementResult([d.name for d in cur.description], rows, len(rows))
        except psycopg.Error as exc:
            raise StoreError(
                f"the statement failed on {_safe(self.store.url)}: {exc}; the transaction cannot "
                "go on and is rolled back when the block ends (nothing of it is written)"
            ) from exc

    def commit(self) -> None:
        """Commit and give the connection back to the pool (own sessions only)."""
        if not self.own:
            return
        try:
            if self.conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                raise psycopg.errors.InFailedSqlTransaction("a statement in it failed")
            self.conn.execute("COMMIT")
        except psycopg.Error as exc:
            with contextlib.suppress(psycopg.Error):
                self.conn.execute("ROLLBACK")
            raise StoreError(
                f"committing the transaction on {_safe(self.store.url)} failed ({exc}); nothing "
                "of it was written"
            ) from exc
        finally:
            self._give_back()

    def rollback(self) -> None:
        """Roll back and give the connection back to the pool (own sessions only)."""
        if not self.own:
            return
        try:
            with contextlib.suppress(psycopg.Error):
                self.conn.execute("ROLLBACK")
        finally:
            self._give_back()

    def _give_back(self) -> None:
        if getattr(self.store._joined, "reads", None) is self:
            self.store._joined.reads = None
        if self.pool is not None:
            self.pool.putconn(self.conn)


def _safe(url: str) -> str:
    """The URL without its password."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    host, port, db = info.get("host", "localhost"), info.get("port", "5432"), info.get("dbname", "")
    return f"postgresql://{info.get('user', '')}@{host}:{port}/{db}"


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
