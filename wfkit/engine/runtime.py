"""``Runtime``: the parts of one engine that its handles, commands and readers share.

An :class:`~wfkit.Engine` is the public face; what its run handles (:class:`~wfkit.Run`),
transactions, readiness, replay, metrics, the worker and the HTTP API need is this narrower
object: the settings (:class:`~wfkit.engine.config.EngineConfig`), the store, the writer and the
scheduler, the clock and the activity registry, the registered workflows, the artifact records,
the run commands (:class:`~wfkit.engine.operations.Operations`) and a few reads of a run's state.
They depend on it, never on the engine, so no module under ``wfkit/engine`` imports ``Engine``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wfkit.engine.artifact_records import IssuedRecords
from wfkit.engine.artifact_root import ArtifactRoot
from wfkit.engine.artifacts import load_artifact
from wfkit.engine.definitions import Definitions
from wfkit.engine.handles import check_known, explain
from wfkit.engine.logs import LogLine, read_logs
from wfkit.engine.operations import Operations
from wfkit.engine.ownership import LeasedOwnership, Ownership, SoleOwnership
from wfkit.engine.records import Event, RunInfo, RunStatus
from wfkit.engine.scheduler import Scheduler
from wfkit.engine.state import RunState
from wfkit.engine.subruns import Subruns
from wfkit.engine.vocabulary import EventKind
from wfkit.engine.writer import Released, Writer
from wfkit.errors import StoreError, UsageError
from wfkit.store.base import StoreBroken

if TYPE_CHECKING:
    from wfkit.definition.activities import ActivityRegistry
    from wfkit.engine.clock import Clock
    from wfkit.engine.config import EngineConfig
    from wfkit.store.base import Store

__all__ = ["Recovered", "Runtime"]

log = logging.getLogger("wfkit.engine")


@dataclass
class Recovered:
    """What an engine found when it opened: steps to queue, suspect steps, steps released."""

    clean: list[tuple[RunState, str]] = field(default_factory=list)
    suspects: list[tuple[RunState, str]] = field(default_factory=list)
    released: Released | None = None


class Runtime:
    """The store, writer, scheduler, clock, registry, settings and definitions of one engine."""

    def __init__(
        self, config: EngineConfig, clock: Clock, registry: ActivityRegistry, store: Store
    ) -> None:
        self.config = config
        self.clock = clock
        self.registry = registry
        self.store = store
        self.closed = False
        owner: Ownership = (
            LeasedOwnership(store, clock.now, config.lease)
            if store.shared  # many engine processes may advance this database's runs
            else SoleOwnership(store)
        )
        self.writer = Writer(store, clock.now, owner, config, registry)
        self.artifact_root = ArtifactRoot(config.artifacts or "")
        self.artifact_records = IssuedRecords(store, shared=config.artifacts_shared)
        self.scheduler = Scheduler(self.writer, clock, registry, config, self.artifact_records)
        self.definitions = Definitions(
            store, self.writer, self.scheduler, clock, registry, config.max_payload
        )
        self.operations = Operations(self)
        definitions = self.definitions
        subruns = Subruns(self.writer, definitions.resolve_call, definitions.admit)
        self.writer.bind(subruns, definitions.load)
        definitions.load()

    @property
    def target(self) -> str:
        """The engine's database: a DuckDB file, ``":memory:"`` or a ``postgresql://`` URL."""
        return self.config.target

    def __repr__(self) -> str:
        return f"Engine({self.target!r}, {len(self.definitions.latest)} workflows)"

    # --- opening and closing --------------------------------------------------------------------

    def recover(self) -> Recovered:
        """Take up the runs the store holds in flight (under the writer's lock)."""
        writer = self.writer
        with writer.lock:
            ready = writer.recover()
            # a step ready after a restart may have been running when the process died, unless
            # the last engine closed with nothing of the run running
            clean = [(run, t) for run, t in ready if run.closed]
            suspects = writer.take_up([(run, t) for run, t in ready if not run.closed])
            writer.reopened({run.run_id: run for run, _ in clean}.values())
            released = writer.commit() if writer.pending else None
        return Recovered(clean, suspects, released)

    def dispatch(self, recovered: Recovered) -> None:
        """Hand what :meth:`recover` found to the scheduler."""
        for run, token_id in recovered.clean:
            self.scheduler.enqueue(run, token_id)
        if recovered.released is not None:
            self.scheduler.release(recovered.released)
        self.scheduler.suspect(recovered.suspects)

    def close(self) -> None:
        """Stop the workers after their attempts, write the summaries, release the store."""
        self.scheduler.refuse_in_block("engine.close()")
        self.scheduler.stop()
        try:
            self.writer.flush_summaries()
            if not self.writer.owner.shared:  # the next engine on the file takes the runs up
                self.writer.mark_closed(self.scheduler.attempts_running())
        except StoreBroken:
            pass  # its file is gone (the log said so when it went): there is nothing to write to
        except StoreError as exc:  # e.g. a full disk: the store is released all the same
            log.warning(
                "closing %r: the runs' summary rows could not be written (%s); the next engine "
                "on it works them out from their events",
                self.target,
                exc,
            )
        self.scheduler.release_all()
        if self.writer.tracing is not None:
            self.writer.tracing.close(self.clock.now())
        self.store.close()
        self.closed = True
        reason = getattr(self.store, "closed_reason", "engine.close() closed it")
        self.scheduler.shut(f"the engine on {self.target!r} is closed: {reason}")

    # --- driving --------------------------------------------------------------------------------

    def run_until_idle(self, timeout: float | None = None) -> None:
        """``engine.run_until_idle``."""
        self.scheduler.refuse_in_block("engine.run_until_idle()")
        self.scheduler.refuse_closed()
        self.scheduler.run_until_idle(timeout)

    @property
    def driving(self) -> bool:
        """True while workers or a ``run_until_idle()`` move the runs on (``engine.driving``)."""
        return self.scheduler.running or self.scheduler.inline > 0

    def wait_terminal(self, run_id: str, timeout: float | None) -> RunStatus:
        """Wait until run ``run_id`` ends (driving it without workers), at most ``timeout``."""
        # the run cannot move before the block commits (on DuckDB its writer is held)
        self.scheduler.refuse_in_block("waiting for a run (run.result())")
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.scheduler.running:
            self.run_until_idle(timeout)
            return self.status(run_id)
        with self.scheduler.changed:
            while True:
                status = self.status(run_id)
                left = None if deadline is None else deadline - time.monotonic()
                if status.terminal or (left is not None and left <= 0):
                    return status
                self.scheduler.changed.wait(left if left is not None else 1.0)

    # --- reading runs ---------------------------------------------------------------------------

    def state(self, run_id: str) -> RunState:
        """A detached copy of the run's state (the live one belongs to the writer): as its last
        commit left it, read without the writer's lock; from the store for a run not in
        memory."""
        frozen = self.writer.view(run_id)
        if frozen is not None:
            return frozen.thaw()
        with self.writer.lock:
            run = self.writer.get_run(run_id)
            if run is None:
                raise UsageError(f"there is no run {run_id!r} in {self.target!r}")
            copy = RunState.restore(
                run.run_id, run.flow, json.loads(run.data_json()), run.snapshot(), run.seq
            )
            copy.input_json = run.input_json
            return copy

    def status(self, run_id: str) -> RunStatus:
        """Where the run stands as of its last commit (no lock, no query for a live run)."""
        frozen = self.writer.view(run_id)
        return RunStatus((frozen if frozen is not None else self.state(run_id)).status)

    def history(self, run_id: str) -> list[Event]:
        """Every event of the run, oldest first."""
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
            for r in self.store.query("run_history", [run_id])
        ]
        if not events:
            check_known(self, run_id)  # never existed, or purged: say so
        return events

    def logs(self, run_id: str, node_id: str | None, attempt: int | None) -> list[LogLine]:
        """The run's log lines (of ``node_id`` and ``attempt`` only, when given)."""
        rows = self.store.query("run_logs", [run_id, node_id, node_id, attempt, attempt])
        return read_logs(rows)

    def explain(self, run_id: str) -> str:
        """One sentence on where the run stands (``run.explain()``)."""
        return explain(self, run_id)

    def runs(
        self, status: str | RunStatus | None = None, workflow: str | None = None, limit: int = 1000
    ) -> list[RunInfo]:
        """Run summaries, newest first (``engine.runs``)."""
        self.writer.flush_summaries()
        value = RunStatus(status).value if status is not None else None
        rows = self.store.query("list_runs", [value, value, workflow, workflow, limit])
        return [
            RunInfo(r[0], r[1], r[2], RunStatus(r[3]), r[4], r[5], r[6], r[7], r[8]) for r in rows
        ]

    def load_for(self, run_id: str, ref: Any) -> Any:
        """``run.load(ref)``: an artifact of run ``run_id`` or of its family."""
        return load_artifact(ref, self.artifact_root, self.artifact_records, run_id)
