"""Starting runs inside the application's own database transaction.

``with engine.transaction() as tx:`` opens one transaction on the engine's database; the
application's statements (``tx.execute``) and the rows of the runs it starts (``tx.start``)
commit together when the block ends, or vanish together when it raises. A run's first steps are
handed to the workers only after the commit, so no step of a run that may still roll back ever
runs. ``engine.start(..., connection=conn)`` does the same inside a transaction the caller holds
on its own psycopg connection (PostgreSQL).

DuckDB has one connection and one writer: a block holds the writer from start to end, so the
engine's steps, workers' results and other threads' calls wait for it (they go on once it ends);
a block still open after :data:`HOLD_WARNING` seconds is logged. On PostgreSQL a block holds one
connection of the engine's pool and the writer only while ``tx.start`` writes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from wfkit.engine.handles import Run
from wfkit.engine.writer import Released, Writer
from wfkit.errors import StoreError, UsageError
from wfkit.store.sessions import Session, StatementResult

if TYPE_CHECKING:
    from collections.abc import Callable

    from wfkit.engine.runtime import Runtime

__all__ = ["HOLD_WARNING", "Transaction", "start_on_connection"]

log = logging.getLogger("wfkit.engine")

HOLD_WARNING = 5.0
"""Seconds after which a block still open is logged (on DuckDB the whole engine waits for it)."""


class Transaction:
    """One transaction on the engine's database, for the application's rows and new runs.

    Made by :meth:`Engine.transaction`; use it as a context manager on one thread. Leaving the
    block commits everything; an exception rolls everything back and propagates.

    Examples
    --------
    >>> import wfkit as wf
    >>> engine = wf.Engine(":memory:")
    >>> _ = engine.register(wf.Workflow("checkout", 1).start_with())
    >>> _ = engine.sql("CREATE TABLE orders (id INTEGER, item TEXT)")
    >>> with engine.transaction() as tx:
    ...     _ = tx.execute("INSERT INTO orders VALUES (?, ?)", [1, "x"])
    ...     run = tx.start("checkout", {"order": 1})
    ...     tx.execute("SELECT count(*) FROM orders").fetchall()
    [(1,)]
    >>> engine.run_until_idle()
    >>> run.status.value
    'completed'
    """

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self._session: Session | None = None
        self._thread: int | None = None
        self._ended = False
        self._holds_writer = not runtime.store.shared  # one connection, one writer
        self._failed: BaseException | None = None  # a statement failed: only rollback is left
        self._run_ids: list[str] = []
        self._released: list[Released] = []  # what the block's runs made ready, after commit
        self._before: list[Released] = []  # what commits before the block made ready
        self._warning: threading.Timer | None = None
        self._opened = 0.0

    # --- the block ------------------------------------------------------------------------

    def __enter__(self) -> Transaction:
        runtime = self._rt
        scheduler = runtime.scheduler
        if self._thread is not None or self._ended:
            raise UsageError("this transaction was used already; open a new engine.transaction()")
        if runtime.closed:
            raise UsageError(f"{runtime!r} is closed; open a new engine to start runs")
        if threading.get_ident() in scheduler.blocks:
            raise UsageError(
                "nested engine.transaction() blocks are not supported: a block is already open "
                "on this thread; do the work in the outer block (tx.execute, tx.start)"
            )
        writer = runtime.writer
        if self._holds_writer:
            writer.lock.acquire()
        try:
            if self._holds_writer:
                self._before.append(settle(runtime, summaries=True))
            self._session = runtime.store.session()
        except BaseException:
            if self._holds_writer:
                writer.lock.release()
            for released in self._before:  # what was committed before stays committed
                scheduler.release(released)
            raise
        self._thread = threading.get_ident()
        scheduler.blocks.add(self._thread)
        self._opened = time.monotonic()
        self._warning = threading.Timer(HOLD_WARNING, self._warn_open)
        self._warning.daemon = True
        self._warning.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        runtime = self._rt
        session = self._session
        assert session is not None and self._thread is not None
        self._ended = True
        runtime.scheduler.blocks.discard(self._thread)
        if self._warning is not None:
            self._warning.cancel()
        committed = False
        try:
            if exc_type is None and self._failed is None:
                try:
                    session.commit()
                except BaseException:
                    self._forget_runs()
                    raise
                committed = True
            else:
                session.rollback()
                self._forget_runs()
        finally:
            if self._holds_writer:
                runtime.writer.lock.release()
            for released in self._before + (self._released if committed else []):
                runtime.scheduler.release(released)
        if committed:
            runtime.scheduler.wake()  # on a shared store the new runs wait to be claimed
        elif exc_type is None:
            raise StoreError(
                f"the transaction was rolled back, nothing of it was written: a statement in it "
                f"failed ({self._failed}); fix it and run the block again"
            ) from self._failed

    def _warn_open(self) -> None:
        log.warning(
            "an engine.transaction() block on %r has been open for %.1f s: %s; keep blocks "
            "short (do slow work before the block, then write in it)",
            self._rt.target,
            time.monotonic() - self._opened,
            "the engine's writer waits for it (steps, results and other callers stall)"
            if self._holds_writer
            else "it holds a connection of the pool kept for blocks and locks the rows it wrote",
        )

    def _forget_runs(self) -> None:
        """The block rolled back: its runs leave memory (nothing of them is in the store), and
        so do the runs their first checkpoints made or changed (a call node's child run)."""
        touched = set(self._run_ids).union(*(r.changed for r in self._released))
        if not touched:
            return
        writer = self._rt.writer
        with writer.lock:
            for run_id in touched:
                writer.runs.pop(run_id, None)
                writer.views.pop(run_id, None)
                writer.dirty.discard(run_id)
            # a first step may have taken a signal posted for its wait: it is posted again
            writer.posted = {(n, k) for n, k in writer.store.query("posted_keys")}

    def _check(self, what: str) -> Session:
        if self._session is None or self._ended:
            raise UsageError(
                f"tx.{what} needs an open block: `with engine.transaction() as tx: "
                f"tx.{what}(...)` (the block has {'ended' if self._ended else 'not begun'})"
            )
        if threading.get_ident() != self._thread:
            raise UsageError(
                f"tx.{what} was called on another thread than the one that opened the block; "
                "a transaction belongs to its thread: open one on this thread instead"
            )
        if self._failed is not None:
            raise UsageError(
                f"tx.{what} refused: an earlier statement of this transaction failed "
                f"({self._failed}), so it can only roll back; leave the block and run it again"
            )
        return self._session

    # --- what a block does ------------------------------------------------------------------

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> StatementResult:
        """Run one of the application's statements inside the transaction.

        Parameters
        ----------
        sql : str
            SQL for the engine's database, with ``?`` placeholders on both DuckDB and
            PostgreSQL. Transaction control (``BEGIN``, ``COMMIT``, ``ROLLBACK``...) is refused:
            the block commits when it ends.
        params : list or tuple, optional
            The values of the placeholders, bound (never formatted into the SQL).

        Returns
        -------
        StatementResult
            ``fetchall()`` / ``fetchone()`` give the rows (tuples) of a query or of
            ``... RETURNING``; ``rowcount`` the rows an INSERT, UPDATE or DELETE changed.

        Raises
        ------
        StoreError
            When the database refuses the statement. The transaction is then spoiled (on both
            databases): the block rolls back when it ends, whether or not the error is caught.
        """
        session = self._check("execute")
        try:
            return session.execute(sql, params)
        except StoreError as exc:
            self._failed = exc
            raise

    def start(
        self,
        workflow_id: str,
        data: Any = None,
        *,
        version: int | None = None,
        actor: str | None = None,
    ) -> Run:
        """Admit a run in this transaction: as :meth:`Engine.start`, but it commits with the
        block, and its first steps run only after that commit.

        Raises
        ------
        AdmissionError
            Listing every reason; nothing was written and the block may go on (catch it) or
            let it roll everything back (leave it uncaught).
        """
        return self.start_many(workflow_id, [data], version=version, actor=actor)[0]

    def start_many(
        self,
        workflow_id: str,
        documents: Iterable[Any],
        *,
        version: int | None = None,
        actor: str | None = None,
    ) -> list[Run]:
        """Admit many runs of one workflow in this transaction (see :meth:`start`)."""
        session = self._check("start")
        runtime = self._rt
        admit = runtime.definitions.admission(workflow_id, documents, version, actor)
        try:
            ids, released = write_runs(runtime, session, admit, settle_first=not self._holds_writer)
        except BaseException as exc:
            self._failed = exc
            raise
        self._run_ids += ids
        self._released.append(released)
        return [Run(runtime, run_id) for run_id in ids]


def settle(runtime: Runtime, summaries: bool) -> Released:
    """Commit what the writer has pending or staged (durability="batched"), so that the
    caller's transaction holds only its own rows, and with ``summaries`` the running runs'
    summaries too (a block holding the writer would otherwise write them inside). Call under the
    writer lock; the caller releases what it returns once the lock is free."""
    writer = runtime.writer
    released = Released()
    if writer.pending or writer.staged:
        released = runtime.scheduler.commit_with_retry(force=True)
    if summaries:
        writer.flush_summaries()
    return released


def write_runs(
    runtime: Runtime,
    session: Session,
    admit: Callable[[Writer], list[str]],
    settle_first: bool,
) -> tuple[list[str], Released]:
    """Add the admitted runs to the writer's batch and write it inside ``session``; return
    their ids and what the commit made ready (to release once the session commits).

    ``settle_first``: the caller does not hold the writer lock (PostgreSQL blocks, a caller's
    own connection): pending checkpoints are committed first, and released here.
    """
    writer = runtime.writer
    with writer.lock:
        before = settle(runtime, summaries=False) if settle_first else Released()
        batch = set(writer.batch_runs())
        with session.join():
            try:
                ids = admit(writer)
            except BaseException:
                writer.forget_new(set(writer.batch_runs()) - batch)
                raise
            released = writer.commit(force=True)
    if settle_first:
        # only a caller that does not hold the writer outside this call: releasing takes the
        # scheduler's condition, which a thread waiting for a run holds while it takes the lock
        runtime.scheduler.release(before)
    return ids, released


def start_on_connection(
    runtime: Runtime,
    connection: Any,
    workflow_id: str,
    documents: Iterable[Any],
    version: int | None,
    actor: str | None,
) -> list[Run]:
    """:meth:`Engine.start_many` inside the transaction of the caller's own connection."""
    session = runtime.store.adopt(connection)  # DuckDB refuses: it has one connection
    admit = runtime.definitions.admission(workflow_id, documents, version, actor)
    ids, released = write_runs(runtime, session, admit, settle_first=True)
    # on PostgreSQL the runs are claimed from the store, where they appear once the caller
    # commits (its NOTIFY wakes the workers then); before that nothing can take them
    runtime.scheduler.release(released)
    runtime.scheduler.wake()
    return [Run(runtime, run_id) for run_id in ids]
