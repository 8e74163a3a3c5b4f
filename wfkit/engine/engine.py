"""``Engine``: register workflows, start runs, drive them, and answer questions about them."""

from __future__ import annotations

import atexit
import json
import logging
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from wfkit.definition.activities import ActivityRegistry, default_registry
from wfkit.definition.durations import parse_duration
from wfkit.definition.graph import graph_from_data, starts_child_runs
from wfkit.definition.problems import Severity
from wfkit.definition.validation import DEFAULT_MAX_PAYLOAD, validate_data
from wfkit.definition.workflow import Workflow
from wfkit.engine.admission import Admission, Gate, refusal
from wfkit.engine.artifact_records import ArchivedRecords, IssuedRecords
from wfkit.engine.artifact_root import ArtifactRoot
from wfkit.engine.artifacts import default_root, load_artifact, root_url
from wfkit.engine.clock import Clock, SystemClock
from wfkit.engine.flows import CompiledFlow
from wfkit.engine.growth import Growth
from wfkit.engine.handles import Run, check_known, explain
from wfkit.engine.logs import LogLine, read_logs
from wfkit.engine.operations import Operations, refuse_unstorable
from wfkit.engine.ownership import LeasedOwnership, Ownership, SoleOwnership
from wfkit.engine.queues import served_queues
from wfkit.engine.readiness import check_workers, has_ready_work
from wfkit.engine.records import Event, RunInfo, RunStatus
from wfkit.engine.retention import Retaining, Retention, RetentionChore
from wfkit.engine.scheduler import Scheduler
from wfkit.engine.state import RunState
from wfkit.engine.subruns import Subruns
from wfkit.engine.tracing import open_tracing
from wfkit.engine.transactions import Transaction, start_on_connection
from wfkit.engine.vocabulary import EventKind
from wfkit.engine.writer import Writer
from wfkit.errors import AdmissionError, DefinitionError, StoreError, UsageError
from wfkit.store import open_store
from wfkit.store.base import Statement, StoreBroken
from wfkit.store.duckdb import holder as duckdb_holder
from wfkit.store.results import StatementResult

__all__ = ["Engine"]

log = logging.getLogger("wfkit.engine")

DURABILITY = ("step", "batched")

_OPEN: weakref.WeakSet[Engine] = weakref.WeakSet()
"""Engines not closed yet, closed at interpreter exit (a weak set: it keeps none alive)."""
_WORKING: set[Engine] = set()
"""Engines whose workers run: held until they stop, so that an engine the caller no longer
references (a script's local variable) is still closed at exit rather than torn down under its
writer thread."""


def _close_at_exit() -> None:
    """The interpreter exits (a script ended or raised, ``sys.exit``, a notebook kernel or
    ``wfkit serve`` stops): stop every engine's workers after their current attempts and close
    its store, before the interpreter tears down the threads that still use it."""
    for engine in {*_OPEN, *_WORKING}:
        try:
            engine.close()
        except Exception:  # the process is ending: say what went wrong, close the others
            log.warning("closing %r at exit failed", engine, exc_info=True)


def _replace_older(target: str) -> None:
    """Close the engine of this process that holds the DuckDB file ``target``, if one does.

    A notebook cell that opens an engine runs again: the new engine replaces the old one rather
    than fail, and two live engines never write one file. The old engine's workers stop after
    their current attempts first, as on ``close()``; later calls on it say it was replaced.
    """
    if target.startswith(("postgresql://", "postgres://")):
        return  # engines share a PostgreSQL database through leases
    held = duckdb_holder(target)
    older = next((e for e in list(_OPEN) if e._store is held and not e._closed), None)
    if held is None or older is None:
        return  # free, or held by something that is no engine: the store says so
    log.info("a new engine on %r replaces the one this process had open on it", target)
    held.closed_reason = (
        f"a newer wf.Engine({target!r}) replaced this engine at "
        f"{time.strftime('%H:%M:%S')} (the cell that opens it ran again?); use the newer "
        "engine, and make the widgets that held this one again with it"
    )
    older.close()


class Engine(Operations, Growth, Admission, Retaining):
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
        if durability not in DURABILITY:
            raise UsageError(
                f"durability must be one of {', '.join(map(repr, DURABILITY))}, not "
                f"{durability!r}: 'step' makes every checkpoint durable before the next step "
                "starts; 'batched' writes a running run's checkpoints every few milliseconds"
            )
        self.durability = durability
        policy = None if retention is None else Retention.of(retention)
        self.target = str(target)
        self.clock: Clock = clock or SystemClock()
        self.registry = registry if registry is not None else default_registry
        self.max_payload = max_payload
        self.artifacts = default_root(self.target) if artifacts is None else root_url(artifacts)
        _replace_older(self.target)
        self._store = open_store(self.target, accept_lost_commits=accept_lost_commits)
        try:
            owner: Ownership = (
                LeasedOwnership(self._store, self.clock.now, parse_duration(lease))
                if self._store.shared  # many engine processes may advance this database's runs
                else SoleOwnership(self._store)
            )
            self._writer = Writer(self._store, self.clock.now, owner)
            self._writer.drain_timeout = parse_duration(drain_timeout)
            self._writer.durability = durability
            self._writer.tracing = open_tracing(tracer_provider)
            if self._writer.tracing is not None:
                self._writer.tracing.store, self._writer.tracing.queue_of = (
                    self._store,
                    (self.registry.queue_of),
                )
            self._scheduler = Scheduler(self._writer, self.clock, self.registry, batch_size)
            self._scheduler.max_payload = max_payload
            self._scheduler.artifacts = self.artifacts
            self._artifact_root = ArtifactRoot(self.artifacts)
            self._artifact_records = IssuedRecords(self._store, shared=artifacts_shared)
            self._scheduler.records = self._artifact_records
            if executor is not None:  # a wf.DaskExecutor: the attempts it takes run on its cluster
                executor.registry = self.registry
                self._scheduler.executor = executor
            self._writer.binder = self.registry.get
            self._writer.subruns = Subruns(self._writer, self._resolve_call, self._admit)
            self._latest: dict[str, dict[int, CompiledFlow]] = {}
            # runs' own graphs grown by append(): (id, version, hash) -> the registered hash
            self._grown: dict[tuple[str, int, str], str] = {}
            self._gate = Gate(self._store, self._latest)
            self._closed = False
            self._load_definitions()
            self._writer.reload_flows = self._load_definitions
            with self._writer.lock:
                ready = self._writer.recover()
                # a step ready after a restart may have been running when the process died, unless
                # the last engine closed with nothing of the run running
                clean = [(run, t) for run, t in ready if run.closed]
                suspects = self._writer.take_up([(run, t) for run, t in ready if not run.closed])
                self._writer.reopened({run.run_id: run for run, _ in clean}.values())
                released = self._writer.commit() if self._writer.pending else None
        except BaseException:
            self._store.close()  # the file stays free: a damaged store says so once
            raise
        for run, token_id in clean:
            self._scheduler._enqueue(run, token_id)
        _OPEN.add(self)
        # exit hooks run last registered first: registered again after the store is open, so
        # that the engine closes before the database client's own exit hook (DuckDB's interrupts
        # the queries still running, which the writer thread may be in)
        atexit.unregister(_close_at_exit)
        atexit.register(_close_at_exit)
        if released is not None:
            self._scheduler.release(released)
        self._scheduler.suspect(suspects)
        if policy is not None:
            self._retain(policy)
        if workers is not None:
            self.start_workers(threads=workers)

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
        records = self._artifact_records if archive is None else ArchivedRecords(archive)
        return load_artifact(ref, self._artifact_root, records)

    def _load_for(self, run_id: str, ref: Any) -> Any:
        """``run.load(ref)``: an artifact of run ``run_id`` or of its family."""
        return load_artifact(ref, self._artifact_root, self._artifact_records, run_id)

    def _retain(self, policy: Retention) -> None:
        """Apply ``policy`` once now, then from the writer's rounds."""
        try:
            chore = RetentionChore(policy, self._writer, self.clock, self.artifacts)
        except BaseException:
            self.close()
            raise
        with self._writer.lock:
            chore.run_all()
        self._scheduler.chore = chore

    # --- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop workers, write summaries and release the database file."""
        if self._closed:
            return
        self._scheduler.refuse_in_block("engine.close()")
        self._scheduler.stop()
        try:
            self._writer.flush_summaries()
            if not self._writer.owner.shared:  # the next engine on the file takes the runs up
                self._writer.mark_closed(self._scheduler.attempts_running())
        except StoreBroken:
            pass  # its file is gone (the log said so when it went): there is nothing to write to
        except StoreError as exc:  # e.g. a full disk: the store is released all the same
            log.warning(
                "closing %r: the runs' summary rows could not be written (%s); the next engine "
                "on it works them out from their events",
                self.target,
                exc,
            )
        self._scheduler.release_all()
        if self._writer.tracing is not None:
            self._writer.tracing.close(self.clock.now())
        self._store.close()
        self._closed = True
        reason = getattr(self._store, "closed_reason", "engine.close() closed it")
        self._scheduler.closed_reason = f"the engine on {self.target!r} is closed: {reason}"
        _OPEN.discard(self)
        _WORKING.discard(self)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Engine({self.target!r}, {len(self._latest)} workflows)"

    # --- definitions --------------------------------------------------------------------------

    def _load_definitions(self) -> None:
        for wid, version, digest, registered in self._store.query("grown_definitions"):
            self._grown[(wid, version, digest)] = registered
        for wid, version, digest, graph_json, model_path, _at in self._store.query("definitions"):
            if (wid, version, digest) in self._writer.flows:
                continue
            data = json.loads(graph_json)
            try:
                workflow = Workflow.from_data(data, allow_imports=True)  # own store
            except DefinitionError:
                log.warning("data model %s of %s v%s cannot be imported", model_path, wid, version)
                workflow = Workflow(wid, version, None, graph=graph_from_data(data["graph"]))
            flow = self._writer.add_flow(workflow)
            if (wid, version, digest) not in self._grown:  # a run's own graph is no version
                self._latest.setdefault(wid, {})[version] = flow

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
        self._scheduler.refuse_in_block("engine.register()")
        if self._store.shared and starts_child_runs(workflow.graph):
            self._load_definitions()  # a called workflow another engine registered counts
        registered = {
            wid: {v: flow.data_model for v, flow in versions.items()}
            for wid, versions in self._latest.items()
        }
        errors = [
            p
            for p in workflow.validate(registry=self.registry, workflows=registered)
            if p.severity == Severity.ERROR
        ]
        if errors:
            raise DefinitionError.from_problems(
                f"Workflow {workflow.id!r} v{workflow.version}", errors
            )
        digest = workflow.content_hash
        known = self._latest.get(workflow.id, {}).get(workflow.version)
        if known is not None and known.hash == digest:
            return workflow
        with self._writer.lock:
            in_flight = self._store.query(
                "runs_in_flight", [workflow.id, workflow.version, digest]
            )[0][0]
            if in_flight:
                latest = max(self._latest.get(workflow.id, {workflow.version: None}))
                raise DefinitionError(
                    f"Workflow {workflow.id!r} v{workflow.version} has {in_flight} runs in flight "
                    f"and its graph changed; register it as version {latest + 1} (in-flight runs "
                    f"finish on v{workflow.version})"
                )
            snapshot = workflow.copy()
            key = (workflow.id, workflow.version, digest)
            # a graph first stored as a run's grown graph (append) becomes the version's graph
            grown = self._grown.pop(key, None) is not None
            if key not in self._writer.flows or grown:
                self._store.write(
                    [
                        Statement(
                            "insert_definition",
                            [
                                (
                                    workflow.id,
                                    workflow.version,
                                    digest,
                                    snapshot.to_json(),
                                    snapshot.to_data()["data_model"],
                                    self.clock.now(),
                                )
                            ],
                        ),
                        Statement("register_grown_definition", [key] if grown else []),
                    ]
                )
            flow = self._writer.add_flow(snapshot)
            self._latest.setdefault(workflow.id, {})[workflow.version] = flow
        return workflow

    def definition(self, workflow_id: str, version: int | None = None) -> Workflow:
        """The registered workflow (the latest version unless ``version`` is given)."""
        try:
            return self._resolve(workflow_id, version).workflow
        except AdmissionError as exc:
            raise UsageError(str(exc)) from None

    def workflows(self) -> dict[str, list[int]]:
        """Registered workflow ids and their versions, active or not (:meth:`definitions`
        says which versions take new runs)."""
        return {wid: sorted(versions) for wid, versions in sorted(self._latest.items())}

    def _resolve(self, workflow_id: str, version: int | None) -> CompiledFlow:
        versions = self._latest.get(workflow_id)
        if not versions:
            known = ", ".join(sorted(self._latest)) or "none"
            raise AdmissionError(
                f"no workflow {workflow_id!r} is registered (registered: {known}); "
                "call engine.register(flow) first",
                [f"unknown workflow {workflow_id!r}"],
            )
        chosen = max(versions) if version is None else version
        if chosen not in versions:
            raise AdmissionError(
                f"workflow {workflow_id!r} has no version {version} (versions: "
                f"{', '.join(map(str, sorted(versions)))}); pick one of those",
                [f"unknown version {version}"],
            )
        return versions[chosen]

    def _resolve_call(self, workflow_id: str, version: int | None) -> CompiledFlow:
        """The workflow a call node starts: on a shared store another engine may have
        registered it (or a later version) since this one loaded the definitions."""
        known = self._latest.get(workflow_id, {})
        if self._store.shared and (version is None or version not in known):
            # (a pinned version this engine knows resolves the same whatever else was added)
            latest = self._store.query("latest_definition_version", [workflow_id])[0][0]
            if latest is not None and (version is not None or latest not in known):
                self._load_definitions()
        return self._startable(workflow_id, version)  # as for a start

    def _startable(self, workflow_id: str, version: int | None) -> CompiledFlow:
        """The flow a new run starts on: ``version``, else the latest active one;
        AdmissionError for an unknown workflow or version, or a deactivated one."""
        flow = self._resolve(workflow_id, self._admissible(workflow_id, version))
        self._gate.check_active(flow)
        return flow

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
            return start_on_connection(self, connection, workflow_id, documents, version, actor)
        admit = self._admission(workflow_id, documents, version, actor)
        ids = self._scheduler.submit(admit)
        self._scheduler.wake()  # on a shared store the new runs wait to be claimed
        return [Run(self, run_id) for run_id in ids]

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
        admit = self._admission(workflow_id, [data], version, actor)
        ids = await self._scheduler.submit_async(admit)
        self._scheduler.wake()
        return Run(self, ids[0])

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
        return Transaction(self)

    def _admission(
        self, workflow_id: str, documents: Iterable[Any], version: int | None, actor: str | None
    ) -> Callable[[Writer], list[str]]:
        """Check documents before anything is queued (AdmissionError writes nothing); return
        the command that adds the runs to the writer's batch."""
        self._scheduler.refuse_closed()
        flow = self._startable(workflow_id, version)
        refuse_unstorable(AdmissionError, f"starting {workflow_id!r}", actor=actor)
        docs = [self._admit(flow, d, actor) for d in documents]
        texts = [json.dumps(doc, separators=(",", ":")) for doc in docs]
        caller = self._writer.tracing.current() if self._writer.tracing else None

        def admit(writer: Writer) -> list[str]:
            self._gate.check_active(flow)  # a deactivate committed since the check above wins
            ids: list[str] = []
            for doc, text in zip(docs, texts, strict=True):
                run = RunState(uuid.uuid4().hex[:16], flow, doc)
                writer.add_instance(run, text, actor, caller=caller)
                cp = writer.checkpoint(run, actor)
                detail = {"workflow": flow.id, "version": flow.version}
                cp.event(EventKind.RUN_STARTED, detail=detail)
                cp.spawn(flow.start, [])
                ids.append(run.run_id)
            return ids

        return admit

    def _admit(self, flow: CompiledFlow, data: Any, actor: str | None = None) -> dict[str, Any]:
        """The document as admitted; ``AdmissionError`` with the model's errors and then every
        admission policy's reasons (policies see the data as given when the model refused it)."""
        model = flow.data_model
        if data is None:
            data = {}
        problems = validate_data(data, model, max_payload=self.max_payload)
        doc: dict[str, Any] | None = None
        if problems:
            reasons = [p.message for p in problems]
        elif model is not None:
            source = data.model_dump() if isinstance(data, BaseModel) else data
            doc = model.model_validate(source).model_dump(mode="json")
        elif isinstance(data, BaseModel):
            doc = data.model_dump(mode="json")
        elif not isinstance(data, dict):
            raise AdmissionError(
                f"run of {flow.id!r} refused: the data document must be a JSON object (a dict), "
                f"got {type(data).__name__}; wrap it, e.g. {{'value': ...}}",
                ["data is not an object"],
            )
        else:
            doc = json.loads(json.dumps(data))
        if doc is not None:
            reasons = self._gate.reasons(flow.workflow, doc, actor)
        else:
            given = data.model_dump() if isinstance(data, BaseModel) else data
            reasons += self._gate.reasons(flow.workflow, given, actor)
        if reasons or doc is None:
            raise refusal(flow, reasons)
        return doc

    # --- driving ------------------------------------------------------------------------------

    def run_until_idle(self, timeout: float | None = None) -> None:
        """Run every ready step and due timer until nothing is left to do now.

        With ``timeout`` (seconds) it also waits for timers due within that time (real clock).
        """
        self._scheduler.refuse_in_block("engine.run_until_idle()")
        self._scheduler.refuse_closed()
        self._scheduler.run_until_idle(timeout)

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
        self._scheduler.refuse_in_block("engine.start_workers()")
        self._scheduler.refuse_closed()
        served = served_queues(queues)
        self._scheduler.start(threads, served)
        _WORKING.add(self)

    @property
    def workers_running(self) -> bool:
        """True while background workers run (``start_workers()`` or ``Engine(workers=)``)."""
        return self._scheduler.running

    @property
    def driving(self) -> bool:
        """True while something in this process moves the runs on: background workers, or a
        ``run_until_idle()`` (or ``run.result()`` without workers) under way on any thread."""
        return self._scheduler.running or self._scheduler.inline > 0

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
        return has_ready_work(self, run_id)

    def stop(self) -> None:
        """Stop background workers; attempts in flight finish first."""
        self._scheduler.refuse_in_block("engine.stop()")
        self._scheduler.stop()
        _WORKING.discard(self)

    # --- runs ---------------------------------------------------------------------------------

    def run(self, run_id: str) -> Run:
        """A handle on an existing run."""
        check_known(self, run_id)
        return Run(self, run_id)

    def runs(
        self, status: str | RunStatus | None = None, workflow: str | None = None, limit: int = 1000
    ) -> list[RunInfo]:
        """Run summaries, newest first, optionally filtered by status and workflow id."""
        self._writer.flush_summaries()
        value = RunStatus(status).value if status is not None else None
        rows = self._store.query("list_runs", [value, value, workflow, workflow, limit])
        return [
            RunInfo(r[0], r[1], r[2], RunStatus(r[3]), r[4], r[5], r[6], r[7], r[8]) for r in rows
        ]

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
        self._writer.flush_summaries()
        return self._store.sql(query, params)

    # --- internals used by Run handles --------------------------------------------------------

    def _state(self, run_id: str) -> RunState:
        """A detached copy of the run's state (the live one belongs to the writer): as its last
        commit left it, read without the writer's lock; from the store for a run not in
        memory."""
        frozen = self._writer.view(run_id)
        if frozen is not None:
            return frozen.thaw()
        with self._writer.lock:
            run = self._writer.get_run(run_id)
            if run is None:
                raise UsageError(f"there is no run {run_id!r} in {self.target!r}")
            copy = RunState.restore(
                run.run_id, run.flow, json.loads(run.data_json()), run.snapshot(), run.seq
            )
            copy.input_json = run.input_json
            return copy

    def _history(self, run_id: str) -> list[Event]:
        events = [
            Event(
                r[0],
                r[1],
                r[2],
                EventKind(r[3]),
                r[4],
                r[5],
                r[6],
                r[7],
                r[8],
                r[9],
                json.loads(r[10]) if r[10] else None,
                json.loads(r[11]) if r[11] else {},
            )
            for r in self._store.query("run_history", [run_id])
        ]
        if not events:
            check_known(self, run_id)  # never existed, or purged: say so
        return events

    def _logs(self, run_id: str, node_id: str | None, attempt: int | None) -> list[LogLine]:
        rows = self._store.query("run_logs", [run_id, node_id, node_id, attempt, attempt])
        return read_logs(rows)

    def _explain(self, run_id: str) -> str:
        return explain(self, run_id)

    def _status(self, run_id: str) -> RunStatus:
        """Where the run stands as of its last commit (no lock, no query for a live run)."""
        frozen = self._writer.view(run_id)
        return RunStatus((frozen if frozen is not None else self._state(run_id)).status)

    def _wait_terminal(self, run_id: str, timeout: float | None) -> RunStatus:
        # the run cannot move before the block commits (on DuckDB its writer is held)
        self._scheduler.refuse_in_block("waiting for a run (run.result())")
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._scheduler.running:
            self.run_until_idle(timeout)
            return self._status(run_id)
        with self._scheduler.changed:
            while True:
                status = self._status(run_id)
                left = None if deadline is None else deadline - time.monotonic()
                if status.terminal or (left is not None and left <= 0):
                    return status
                self._scheduler.changed.wait(left if left is not None else 1.0)
