"""``Engine``: register workflows, start runs, drive them, and answer questions about them.

The public face over a :class:`~wfkit.engine.runtime.Runtime` and the collaborators that carry
the commands (``Operations``, ``Growth``, ``Admission``, ``Retaining``): each public method
delegates in one line; a command's docstring is its collaborator's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from wfkit.definition.activities import ActivityRegistry, default_registry
from wfkit.definition.builder import Steps
from wfkit.definition.validation import DEFAULT_MAX_PAYLOAD
from wfkit.definition.workflow import Workflow
from wfkit.engine import lifecycle
from wfkit.engine.admission import Admission, AdmissionPolicy, DefinitionInfo
from wfkit.engine.artifact_records import ArchivedRecords
from wfkit.engine.artifacts import load_artifact
from wfkit.engine.cancellation import CancelResult
from wfkit.engine.clock import Clock, SystemClock
from wfkit.engine.config import EngineConfig
from wfkit.engine.growth import Growth
from wfkit.engine.handles import Run, check_known
from wfkit.engine.operations import Operations
from wfkit.engine.queues import served_queues
from wfkit.engine.readiness import check_workers, has_ready_work
from wfkit.engine.records import RunInfo, RunStatus, WaitInfo
from wfkit.engine.retention import ArchiveReport, Retaining, Retention
from wfkit.engine.runtime import Runtime
from wfkit.engine.transactions import Transaction, start_on_connection
from wfkit.errors import AdmissionError, UsageError
from wfkit.store import open_store
from wfkit.store.results import StatementResult

__all__ = ["Engine"]

F = TypeVar("F", bound=Callable[..., Any])


def _doc(source: Callable[..., Any]) -> Callable[[F], F]:
    """Give the decorated method the docstring of ``source``, the command it delegates to."""

    def give(method: F) -> F:
        method.__doc__ = source.__doc__
        return method

    return give


class Engine:
    """The durable engine: runs workflows on a DuckDB file (``":memory:"`` for scratch).

    Parameters
    ----------
    target : str or Path
        DuckDB file path, ``":memory:"``, or a ``postgresql://`` URL (any number of engine
        processes may share a PostgreSQL database).
    clock : Clock, optional
        ``wf.ManualClock()`` to move time by hand; the real clock by default.
    registry : ActivityRegistry, optional
        Where activities are looked up; the default registry (``@wf.activity``) by default.
    max_payload : int
        Largest data document, in bytes of JSON (256 KiB by default): checked at admission, on
        signal payloads, and after every attempt that changes the document.
    lease : str or timedelta
        PostgreSQL only: how long a run stays this engine's without a renewal (30 seconds by
        default); the runs of a process that died change hands after it.
    batch_size : int
        Most steps a group commit takes at once (1,024 by default).
    drain_timeout : str or timedelta
        A run that fails, is cancelled or unwinds its saga ends only once its other attempts in
        flight have stopped; an attempt asked to stop that has no ``attempt_timeout`` of its own
        gets this long before it is recorded ``step.abandoned`` and the run ends without it
        (60 seconds by default).
    retention : str, timedelta or Retention, optional
        Purge ended runs older than this while the engine runs (``"30d"``, or
        ``wf.Retention("30d", archive_to="archive/", every="1h")`` to archive them to Parquet
        first): once when the engine opens, then at most every ``every`` from the writer,
        between its transactions. Off by default.
    workers : int, optional
        Start this many background worker threads once the engine is open (what
        ``engine.start_workers(threads=workers)`` does), so that runs move on by themselves: a
        notebook's approvals and signals, timers, retries. None (the default) starts none: runs
        move only in ``run_until_idle()`` or after ``start_workers()``. Workers are never
        started behind the caller's back (not even in a notebook kernel), so the same code runs
        the same way in a script, a test and a notebook; the notebook widgets show a run that
        waits for a worker and offer to start them.
    artifacts : str or Path, optional
        Where ``wf.Artifact`` results are stored: any fsspec URL (``"file:///data/wf"``,
        ``"s3://bucket/wf"``, ``"memory://wf"`` for one process) or a local folder. By default
        a folder next to the DuckDB file (``runs.duckdb.artifacts/``), a fresh temporary folder
        for ``":memory:"``, and ``~/.local/share/wfkit/artifacts/<host>-<port>-<database>/``
        for PostgreSQL (engines or Dask workers on several hosts need a root they all reach).
    artifacts_shared : bool
        Let every run load every artifact this engine stored. By default a run (``ctx.load``,
        ``run.load``) loads only its own artifacts and those of its family, the runs linked to
        it by calls and restarts; a reference to any other artifact is refused
        (docs/semantics.md §26).
    tracer_provider : opentelemetry.trace.TracerProvider, optional
        Where the runs' OpenTelemetry spans go (docs/semantics.md §27); OpenTelemetry's global
        provider by default, when ``opentelemetry-api`` is installed (``wfkit[otel]``).
    accept_lost_commits : bool
        DuckDB only: open the file although it holds less than this engine committed to it
        (its write-ahead log was cut short or deleted, or an older copy was restored), which is
        otherwise refused with a ``StoreError`` saying how much is missing. The loss is
        recorded in ``wf_store_events`` and the engine goes on with what the file holds (what
        ``wfkit store accept-loss`` does).

    Examples
    --------
    >>> import wfkit as wf
    >>> @wf.activity("docs.double")
    ... def double(ctx):
    ...     ctx.data["n"] *= 2
    >>> engine = wf.Engine(":memory:")
    >>> _ = engine.register(wf.Workflow("doubler", 1).start_with("docs.double"))
    >>> run = engine.start("doubler", {"n": 21})
    >>> engine.run_until_idle()
    >>> run.status.value, run.data
    ('completed', {'n': 42})
    """

    def __init__(
        self,
        target: str | Path = ":memory:",
        *,
        clock: Clock | None = None,
        registry: ActivityRegistry | None = None,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        lease: str | timedelta = "30s",
        batch_size: int = 1024,
        drain_timeout: str | timedelta = "60s",
        durability: str = "step",
        retention: str | timedelta | Retention | None = None,
        workers: int | None = None,
        artifacts: str | Path | None = None,
        artifacts_shared: bool = False,
        executor: Any = None,
        tracer_provider: Any = None,
        accept_lost_commits: bool = False,
    ) -> None:
        check_workers(workers)
        config = EngineConfig.of(
            target,
            durability=durability,
            lease=lease,
            drain_timeout=drain_timeout,
            batch_size=batch_size,
            max_payload=max_payload,
            artifacts=artifacts,
            artifacts_shared=artifacts_shared,
            executor=executor,
            tracer_provider=tracer_provider,
        )
        policy = None if retention is None else Retention.of(retention)
        self.durability = durability
        self.target = config.target
        self.clock: Clock = clock or SystemClock()
        self.registry = registry if registry is not None else default_registry
        self.max_payload = max_payload
        self.artifacts: str = config.artifacts or ""
        lifecycle.replace_older(self.target)
        store = open_store(self.target, accept_lost_commits=accept_lost_commits)
        try:
            self._rt = Runtime(config, self.clock, self.registry, store)
            recovered = self._rt.recover()
        except BaseException:
            store.close()  # the file stays free: a damaged store says so once
            raise
        self._ops = self._rt.operations
        self._growth = Growth(self._rt)
        self._admission = Admission(self._rt)
        self._retention = Retaining(self._rt)
        lifecycle.opened(self)
        self._rt.dispatch(recovered)
        if policy is not None:
            try:
                self._retention.keep(policy)
            except BaseException:
                self.close()
                raise
        if workers is not None:
            self.start_workers(threads=workers)

    @property
    def runtime(self) -> Runtime:
        """The engine's parts, for wfkit's own layers (the worker, the HTTP API, the widgets):
        not a stable API of its own."""
        return self._rt

    def load_artifact(self, ref: Any, *, archive: str | Path | None = None) -> Any:
        """The value of an artifact this engine stored, for any of its runs (what ``ctx.load``
        returns in an activity): a DataFrame, a numpy array, bytes, str, or a local
        ``pathlib.Path`` for a file.

        The reference must name a file under the engine's artifact root that the engine
        recorded when it stored it, and match that record; at most the recorded size is read,
        and its SHA-256 is checked before it is decoded. ``run.load`` does the same for one
        run and its family only.

        Parameters
        ----------
        ref : dict
            An artifact reference, as a step recorded it (``wf.ArtifactRef``).
        archive : str or Path, optional
            The directory of an archive (``engine.archive(...)``): the reference is looked up
            among the records of the runs archived there (whose files stay in place) instead
            of the store.

        Raises
        ------
        UsageError
            ``ref`` is not an artifact reference.
        ArtifactError
            The reference is refused (not issued by this engine, not under its root, not
            matching its record), or the artifact is missing or was changed since it was
            stored; the message names the reference.
        """
        records = self._rt.artifact_records if archive is None else ArchivedRecords(archive)
        return load_artifact(ref, self._rt.artifact_root, records)

    # --- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop workers, write summaries and release the database file."""
        if self._rt.closed:
            return
        self._rt.close()
        lifecycle.forget(self, closed=True)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._rt)

    # --- definitions --------------------------------------------------------------------------

    def register(self, workflow: Workflow) -> Workflow:
        """Validate ``workflow`` and store it under ``(id, version)``.

        Re-registering the same graph is a no-op. A changed graph under an ``(id, version)``
        that has runs in flight is refused: register it as a new version. A workflow that
        calls another (``flow.call(...)``) is registered after the one it calls.

        Raises
        ------
        DefinitionError
            With every problem, when the workflow is invalid or its version is taken.
        """
        return self._rt.definitions.register(workflow)

    def definition(self, workflow_id: str, version: int | None = None) -> Workflow:
        """The registered workflow (the latest version unless ``version`` is given)."""
        try:
            return self._rt.definitions.resolve(workflow_id, version).workflow
        except AdmissionError as exc:
            raise UsageError(str(exc)) from None

    def workflows(self) -> dict[str, list[int]]:
        """Registered workflow ids and their versions, active or not (:meth:`definitions`
        says which versions take new runs)."""
        return {
            wid: sorted(versions) for wid, versions in sorted(self._rt.definitions.latest.items())
        }

    # --- starting runs ------------------------------------------------------------------------

    def start(
        self,
        workflow_id: str,
        data: Any = None,
        *,
        version: int | None = None,
        actor: str | None = None,
        connection: Any = None,
    ) -> Run:
        """Admit a run: validate its data, then write the run and its first steps atomically.

        Without ``version``, the latest active version (see :meth:`deactivate`). The data is
        checked against the workflow's model, then every admission policy is asked
        (:meth:`add_admission_policy`).

        Parameters
        ----------
        workflow_id : str
            A registered workflow.
        data : dict or pydantic model, optional
            The run's data document (checked against the workflow's model).
        version : int, optional
            The version to run; the latest registered by default.
        actor : str, optional
            Who starts it, recorded on the run.
        connection : psycopg.Connection, optional
            PostgreSQL only: write the run inside the transaction open on this connection of
            yours (to the engine's database); it commits with your commit and vanishes with
            your rollback, and workers take it up only once it is committed. On DuckDB use
            ``with engine.transaction() as tx: tx.start(...)``.

        Raises
        ------
        AdmissionError
            Listing every reason (the model's, then the policies'); nothing is written.
        UsageError
            For ``connection=`` on DuckDB, or a connection that is not usable.
        """
        return self.start_many(
            workflow_id, [data], version=version, actor=actor, connection=connection
        )[0]

    def start_many(
        self,
        workflow_id: str,
        documents: Iterable[Any],
        *,
        version: int | None = None,
        actor: str | None = None,
        connection: Any = None,
    ) -> list[Run]:
        """Admit many runs of one workflow in one transaction (all or none); ``connection``
        as in :meth:`start`."""
        if connection is not None:
            return start_on_connection(self._rt, connection, workflow_id, documents, version, actor)
        admit = self._rt.definitions.admission(workflow_id, documents, version, actor)
        ids = self._rt.scheduler.submit(admit)
        self._rt.scheduler.wake()  # on a shared store the new runs wait to be claimed
        return [Run(self._rt, run_id) for run_id in ids]

    async def start_async(
        self,
        workflow_id: str,
        data: Any = None,
        *,
        version: int | None = None,
        actor: str | None = None,
    ) -> Run:
        """:meth:`start` for asyncio code: awaits the durable commit without blocking the loop
        (nor holding a thread while workers run)."""
        admit = self._rt.definitions.admission(workflow_id, [data], version, actor)
        ids = await self._rt.scheduler.submit_async(admit)
        self._rt.scheduler.wake()
        return Run(self._rt, ids[0])

    def transaction(self) -> Transaction:
        """A transaction on the engine's database for your rows and new runs together.

        ``with engine.transaction() as tx:`` — ``tx.execute(sql, params)`` runs your SQL
        (``?`` placeholders, your tables in the engine's database), ``tx.start(...)`` and
        ``tx.start_many(...)`` admit runs as :meth:`start` does. Leaving the block commits it
        all at once; an exception rolls it all back (no run row, no handle that resolves, no
        step run). The runs' first steps are dispatched only after the commit.

        On DuckDB the block holds the engine's writer until it ends: steps, workers' results
        and other threads' calls wait for it, so keep it short. On PostgreSQL it holds one
        connection of the engine's pool. On the block's thread, engine writes other than
        ``tx.start`` (``engine.start``, ``signal``, ``run_until_idle``, ``register``...) and a
        nested ``engine.transaction()`` raise :class:`UsageError`.

        Returns
        -------
        Transaction
            Use it as a context manager, on the thread that opened it.
        """
        return Transaction(self._rt)

    # --- driving ------------------------------------------------------------------------------

    def run_until_idle(self, timeout: float | None = None) -> None:
        """Run every ready step and due timer until nothing is left to do now.

        With ``timeout`` (seconds) it also waits for timers due within that time (real clock).
        """
        self._rt.run_until_idle(timeout)

    def start_workers(self, threads: int = 4, queues: Iterable[str] | None = None) -> None:
        """Run steps on ``threads`` background threads (plus one writer thread).

        Parameters
        ----------
        threads : int
            Worker threads (1 or more).
        queues : list of str, optional
            Run only the steps whose activity belongs to one of these queues
            (``@wf.activity(name, queue=...)``; ``"default"`` unless given). By default the
            workers serve every queue. The steps of other queues stay ready and are explained
            (``run.explain()``, ``wf_jobs`` status ``blocked``); on PostgreSQL their runs are
            handed over to the engines that serve those queues.

        Raises
        ------
        UsageError
            When workers already run (an engine has one pool: ``stop()`` first), for
            ``threads`` below 1, or for ``queues`` that is a bare string, empty, or holds a
            name that is not a non-empty string.
        """
        self._rt.scheduler.refuse_in_block("engine.start_workers()")
        self._rt.scheduler.refuse_closed()
        served = served_queues(queues)
        self._rt.scheduler.start(threads, served)
        lifecycle.working(self)

    @property
    def workers_running(self) -> bool:
        """True while background workers run (``start_workers()`` or ``Engine(workers=)``)."""
        return self._rt.scheduler.running

    @property
    def driving(self) -> bool:
        """True while something in this process moves the runs on: background workers, or a
        ``run_until_idle()`` (or ``run.result()`` without workers) under way on any thread."""
        return self._rt.driving

    def has_ready_work(self, run_id: str | None = None) -> bool:
        """True when run ``run_id`` (any run, when None) has work to do now: a step ready to
        run in this engine (queued, or its attempt in flight) or a timer that is due.

        With ``not engine.driving`` such a run stands still until ``start_workers()`` or
        ``run_until_idle()``; ``run.explain()`` says so. A step whose activity is not
        registered here (or whose queue the workers do not serve) is blocked, not ready.

        Raises
        ------
        UsageError
            When there is no run ``run_id``.
        """
        return has_ready_work(self._rt, run_id)

    def stop(self) -> None:
        """Stop background workers; attempts in flight finish first."""
        self._rt.scheduler.refuse_in_block("engine.stop()")
        self._rt.scheduler.stop()
        lifecycle.forget(self, closed=False)

    # --- runs ---------------------------------------------------------------------------------

    def run(self, run_id: str) -> Run:
        """A handle on an existing run."""
        check_known(self._rt, run_id)
        return Run(self._rt, run_id)

    def runs(
        self, status: str | RunStatus | None = None, workflow: str | None = None, limit: int = 1000
    ) -> list[RunInfo]:
        """Run summaries, newest first, optionally filtered by status and workflow id."""
        return self._rt.runs(status, workflow, limit)

    def sql(self, query: str, params: Sequence[Any] | None = None) -> StatementResult:
        """Run SQL over the wfkit tables (and the application's own, in the same database).

        Parameters
        ----------
        query : str
            The statement; values go in ``params``, bound to ``?`` placeholders (DuckDB) or
            ``%s`` (PostgreSQL).
        params : sequence, optional
            The values of the placeholders.

        Returns
        -------
        StatementResult
            The same type on DuckDB and PostgreSQL: ``.fetchall()``, ``.fetchone()``,
            ``.columns``, and DataFrames with ``.df()`` (pandas) and ``.pl()`` (polars); on
            DuckDB made by DuckDB itself from its relation (``.relation``).

        Examples
        --------
        >>> import wfkit as wf
        >>> engine = wf.Engine(":memory:")
        >>> engine.sql("select count(*) as runs from wf_instances").fetchall()
        [(0,)]
        >>> engine.close()
        """
        self._rt.writer.flush_summaries()
        return self._rt.store.sql(query, params)

    # --- commands (their docstrings are the collaborators') -----------------------------------

    @_doc(Operations.cancel)
    def cancel(self, run_id: str, actor: str | None = None, reason: str = "") -> CancelResult:
        return self._ops.cancel(run_id, actor, reason)

    @_doc(Operations.signal)
    def signal(
        self,
        name: str,
        key: Any = None,
        payload: dict[str, Any] | None = None,
        *,
        actor: str | None = None,
    ) -> bool:
        return self._ops.signal(name, key, payload, actor=actor)

    @_doc(Operations.check_payload)
    def check_payload(self, run_id: str, node_id: str, payload: Any) -> dict[str, Any]:
        return self._ops.check_payload(run_id, node_id, payload)

    @_doc(Operations.post_signal)
    def post_signal(
        self,
        name: str,
        key: Any = None,
        payload: dict[str, Any] | None = None,
        *,
        expires: str | timedelta | None = "1d",
        actor: str | None = None,
    ) -> bool:
        return self._ops.post_signal(name, key, payload, expires=expires, actor=actor)

    @_doc(Operations.approve)
    def approve(
        self,
        run_id: str,
        node: str,
        approved: bool = True,
        *,
        actor: str | None = None,
        comment: str | None = None,
        loop_path: Sequence[int] | None = None,
    ) -> None:
        self._ops.approve(run_id, node, approved, actor=actor, comment=comment, loop_path=loop_path)

    @_doc(Operations.resume)
    def resume(self, run_id: str, *, actor: str | None = None) -> None:
        self._ops.resume(run_id, actor=actor)

    @_doc(Operations.recover_compensation)
    def recover_compensation(
        self, run_id: str, action: str = "retry", *, actor: str | None = None
    ) -> None:
        self._ops.recover_compensation(run_id, action, actor=actor)

    @_doc(Operations.retry)
    def retry(self, run_id: str, *, actor: str | None = None) -> None:
        self._ops.retry(run_id, actor=actor)

    @_doc(Operations.restart_as_new)
    def restart_as_new(self, run_id: str, *, actor: str | None = None) -> Run:
        return self._ops.restart_as_new(run_id, actor=actor)

    @_doc(Operations.waiting)
    def waiting(self) -> list[WaitInfo]:
        return self._ops.waiting()

    @_doc(Growth.append)
    def append(
        self, run_id: str, steps: Callable[[Steps], Any], *, actor: str | None = None
    ) -> Workflow:
        return self._growth.append(run_id, steps, actor=actor)

    @_doc(Admission.add_admission_policy)
    def add_admission_policy(self, fn: AdmissionPolicy) -> AdmissionPolicy:
        return self._admission.add_admission_policy(fn)

    @_doc(Admission.remove_admission_policy)
    def remove_admission_policy(self, fn: AdmissionPolicy) -> None:
        self._admission.remove_admission_policy(fn)

    @_doc(Admission.deactivate)
    def deactivate(self, workflow_id: str, version: int) -> None:
        self._admission.deactivate(workflow_id, version)

    @_doc(Admission.activate)
    def activate(self, workflow_id: str, version: int) -> None:
        self._admission.activate(workflow_id, version)

    @_doc(Admission.definitions)
    def definitions(self) -> list[DefinitionInfo]:
        return self._admission.definitions()

    @_doc(Retaining.purge)
    def purge(
        self,
        older_than: str | timedelta = "30d",
        status: str | RunStatus | Iterable[str | RunStatus] | None = None,
    ) -> int:
        return self._retention.purge(older_than, status)

    @_doc(Retaining.archive)
    def archive(
        self,
        directory: str | Path,
        older_than: str | timedelta = "30d",
        status: str | RunStatus | Iterable[str | RunStatus] | None = None,
    ) -> ArchiveReport:
        return self._retention.archive(directory, older_than, status)
