"""One DuckDB file under a store: opening it, its write-ahead log, and what happens to it.

:class:`DuckDBFile` holds the store's one connection and answers for the file:

- **Opening** (in this order, so that a file refused is not written to): the commit mark is read
  and compared with what the file holds (:mod:`wfkit.store.guard`), then the schema is migrated,
  then an accepted loss is recorded. A new file is created owner-only; a file held by another
  process, damaged, or on a full disk is refused with a :class:`StoreError` saying so, and left
  as it was found (no checkpoint at close).
- **The write-ahead log** ``<file>.wal``, which DuckDB deletes at every checkpoint and creates
  again at the next write: the store creates it first with the database file's permissions, so it
  is never more readable than the database. A log deleted by someone else is still written to by
  DuckDB through its open descriptor, so the commits since the last checkpoint are in no file a
  path names; finding it missing before a write (or at a ``/health`` check), the store
  checkpoints them into the database first, then creates the log again (after DuckDB's own
  deletion the checkpoint finds nothing to do: ~0.5 ms, once per 4 MB of log).
- **After DuckDB invalidated the database** (a fatal error, e.g. a checkpoint on a full disk),
  the connection is opened again before its next use, as DuckDB asks.
- **What errors mean**: :mod:`wfkit.store.faults` turns them into messages.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import os
import stat
import threading
from datetime import UTC, datetime

import duckdb

from wfkit.errors import StoreError
from wfkit.store.faults import (
    damaged,
    damaged_message,
    full_message,
    full_reason,
    held_by_another_process,
)
from wfkit.store.guard import FileGuard
from wfkit.store.queries import migrations, query

__all__ = ["DuckDBFile"]

log = logging.getLogger("wfkit.store")

_UMASK_LOCK = threading.Lock()  # the umask is the process's: one store changes it at a time
_PRIVATE_UMASK = 0o077


class DuckDBFile:
    """The connection to a DuckDB file (or ``:memory:``) and the checks that guard it.

    Parameters
    ----------
    url : str
        The database file, or ``":memory:"``.
    accept : bool
        Open it although it holds less than its engine committed, recording the loss.
    actor : str, optional
        Who accepts the loss (the login name by default).
    """

    accepted: tuple[int, int] | None = None
    """(expected, held) of the loss this opening accepted, if it accepted one."""

    def __init__(self, url: str, accept: bool = False, actor: str | None = None) -> None:
        self.url = url
        memory = url == ":memory:"
        self.wal = None if memory else os.path.abspath(url) + ".wal"
        self.guard = None if memory else FileGuard(url)
        self.invalid: BaseException | None = None  # DuckDB asked to be opened again
        self._conn: duckdb.DuckDBPyConnection | None = None
        try:
            self._open(accept, actor)
        except BaseException:
            self.abandon()
            raise

    def _open(self, accept: bool, actor: str | None) -> None:
        guard = self.guard
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
            raise StoreError(self.describe(exc, f"cannot open DuckDB file {self.url!r}")) from exc
        lost = guard is not None and guard.opened(held, accept)
        try:
            self._migrate(self.connection())
        except duckdb.Error as exc:
            raise StoreError(self.describe(exc, f"cannot migrate {self.url!r}")) from exc
        if guard is None:
            return
        guard.start(held)
        if lost and guard.expected is not None:
            self._accept(guard.expected, held, actor)

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """Open the database; a new file is created owner-only (umask 077 around the connect)."""
        config: dict[str, str | bool | int | float | list[str]] = {
            "threads": 1,
            "allocator_flush_threshold": "8MB",
            "checkpoint_threshold": "4MB",
        }
        if self.guard is None or os.path.lexists(self.url):
            return duckdb.connect(self.url, config=config)
        with _UMASK_LOCK:
            previous = os.umask(_PRIVATE_UMASK)
            try:
                return duckdb.connect(self.url, config=config)
            finally:
                os.umask(previous)

    def _held(self) -> int:
        """What the file holds of its commits (see :mod:`wfkit.store.marks`)."""
        conn = self.connection()
        tables = {row[0] for row in conn.execute(query("store_count_tables")).fetchall()}
        if "wf_events" not in tables:
            return 0
        name = "store_commit_count" if "wf_store_tally" in tables else "store_event_count"
        found = conn.execute(query(name)).fetchone()
        return int(found[0]) if found else 0

    def _migrate(self, conn: duckdb.DuckDBPyConnection) -> None:
        self.guard_wal()
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
                conn.execute(query("record_schema_version"), [version, now()])
                conn.execute("COMMIT")
            except duckdb.Error as exc:
                with contextlib.suppress(duckdb.Error):
                    conn.execute("ROLLBACK")
                raise StoreError(
                    self.describe(exc, f"migration {version} of {self.url!r} failed")
                ) from exc

    def _accept(self, expected: int, held: int, actor: str | None) -> None:
        """Record that the loss is accepted (one commit without events: the tally counts it),
        then checkpoint: the log DuckDB read up to where it was cut gives way to a whole file."""
        detail = {"expected": expected, "held": held, "missing": expected - held}
        row = [now(), "commits.lost", actor or _login(), json.dumps(detail)]
        conn = self.connection()
        try:
            conn.execute("BEGIN")
            conn.execute(query("insert_store_event"), row)
            conn.execute(query("add_store_tally"), [1])
            conn.execute("COMMIT")
            conn.execute("CHECKPOINT")
        except duckdb.Error as exc:
            with contextlib.suppress(duckdb.Error):
                conn.execute("ROLLBACK")
            raise StoreError(
                self.describe(exc, f"recording the loss in {self.url!r} failed")
            ) from exc
        self.committed(1)
        self.accepted = (expected, held)
        log.warning(
            "%s: the loss of %d of %d changes was accepted and recorded in wf_store_events",
            self.url,
            expected - held,
            expected,
        )

    # --- in use -------------------------------------------------------------------------------

    def connection(self) -> duckdb.DuckDBPyConnection:
        """The connection, opened again first when a fatal error invalidated the database."""
        if self._conn is None:
            raise StoreError(f"the DuckDB file {self.url!r} is not open")
        if self.invalid is None:
            return self._conn
        with contextlib.suppress(duckdb.Error):
            self._conn.close()
        try:
            self._conn = self._connect()
        except duckdb.Error as exc:
            raise StoreError(self.describe(exc, f"cannot open {self.url!r} again")) from exc
        log.info("%s was opened again after: %s", self.url, self.invalid)
        self.invalid = None
        if self.guard is not None:
            self.guard.check()  # still the file this store opened
        return self._conn

    def describe(self, exc: BaseException, doing: str) -> str:
        """The message of a StoreError for the driver's ``exc`` met while ``doing``; a fatal
        error has the database opened again before its next use."""
        if isinstance(exc, duckdb.FatalException):
            self.invalid = exc
        reason = full_reason(exc)
        if reason is not None:
            return full_message(self.url, reason)
        if damaged(exc):
            return damaged_message(self.url, exc)
        return f"{doing}: {exc}"

    def stood(self, exc: duckdb.FatalException) -> None:
        """A commit is durable although DuckDB failed right after it (a checkpoint on a full
        disk) and invalidated the database: it is opened again before its next use."""
        self.invalid = exc
        reason = full_reason(exc)
        log.warning(
            "%s: the commit is durable, but DuckDB's checkpoint after it failed (%s); the "
            "database is opened again before its next use",
            self.url,
            full_message(self.url, reason) if reason else exc,
        )

    def guard_wal(self, in_transaction: bool = False) -> None:
        """Before a write: when the write-ahead log is missing, checkpoint (outside a
        transaction) what DuckDB may still be writing to a deleted one, then create it empty,
        as readable as the database file and no more, before DuckDB creates it with the
        process's umask (0644 by default)."""
        wal = self.wal
        if wal is None or os.path.lexists(wal):
            return
        if not in_transaction:
            if self.guard is not None:
                self.guard.check()  # the database too may be gone: then nothing is written
            try:
                self.connection().execute("CHECKPOINT")
            except duckdb.FatalException as exc:  # (on a full disk): opened again for the write
                self.invalid = exc
            except duckdb.Error:
                pass  # the write says what stops it
        with contextlib.suppress(OSError):  # DuckDB reports what stops it from writing
            mode = stat.S_IMODE(os.stat(self.url).st_mode) & 0o666
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            os.close(os.open(wal, flags, mode))

    @property
    def counting(self) -> bool:
        """True when commits are counted (a file, not ``:memory:``)."""
        return self.guard is not None

    def committed(self, changes: int) -> None:
        """A transaction committed: check the file before anyone is told, move the mark on."""
        if self.guard is not None:
            self.guard.committed(changes)

    def refuse_broken(self) -> None:
        """Raise StoreBroken once the file was deleted or replaced."""
        if self.guard is not None:
            self.guard.refuse_broken()

    def check(self) -> None:
        """Raise StoreBroken when the path no longer names the file opened."""
        if self.guard is not None:
            self.guard.check()

    # --- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (DuckDB checkpoints then, unless the file is gone)."""
        if self._conn is not None:
            if self.guard is not None and self.guard.broken is not None:
                # the path names another file, or none: a checkpoint at close would write to the
                # old one and delete the write-ahead log at the path, which is not its own
                with contextlib.suppress(duckdb.Error):
                    self._conn.execute("PRAGMA disable_checkpoint_on_shutdown")
            with contextlib.suppress(duckdb.Error):
                self._conn.close()
        if self.guard is not None:
            self.guard.close()

    def abandon(self) -> None:
        """The file was not opened: close what was, without a checkpoint (a file refused, or
        damaged, is left as it was found)."""
        if self._conn is not None:
            with contextlib.suppress(duckdb.Error):
                self._conn.execute("PRAGMA disable_checkpoint_on_shutdown")
            with contextlib.suppress(duckdb.Error):
                self._conn.close()
        if self.guard is not None:
            self.guard.close()


def now() -> datetime:
    """The current time in UTC, as the tables hold it (no time zone)."""
    return datetime.now(UTC).replace(tzinfo=None)


def _login() -> str | None:
    """The login name of the user running this process, if there is one."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return None
