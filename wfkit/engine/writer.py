"""The single writer: turns attempt results, fired timers and commands into checkpoints.

Everything that changes a run passes through :meth:`Writer.commit` under one lock: node handlers
update the runs in memory, the checkpoints of the whole batch become one transaction of
multi-row statements, and only once it is durable are the next steps released. A run that only
waits (signals, approvals, timers) is written as a snapshot and dropped from memory, so a parked
run costs its rows and nothing else.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from wfkit.definition.values import TOO_DEEP
from wfkit.definition.workflow import Workflow
from wfkit.engine import drains, logs, run_retries, sagas
from wfkit.engine.checkpoint import Checkpoint, dumps
from wfkit.engine.config import EngineConfig
from wfkit.engine.executor import AttemptResult, printable
from wfkit.engine.failures import RULES
from wfkit.engine.flows import CompiledFlow
from wfkit.engine.leases import RunBusy
from wfkit.engine.nodes import NodeHandler, load_all
from wfkit.engine.ownership import Ownership, SoleOwnership
from wfkit.engine.records import RunStatus
from wfkit.engine.rows import RunRows, merge
from wfkit.engine.state import RunState
from wfkit.engine.subruns import Subruns
from wfkit.engine.tracing import Tracing, open_tracing
from wfkit.engine.vocabulary import IN_FLIGHT, EventKind, JobStatus, TimerKind, TokenState
from wfkit.errors import StoreError, UsageError
from wfkit.store.base import (
    TERMINAL_STATUSES,
    AlreadyTaken,
    LeaseLost,
    Statement,
    Store,
    ValueRefused,
)

if TYPE_CHECKING:
    from wfkit.definition.activities import ActivityRegistry
    from wfkit.engine.metrics import EngineMetrics

__all__ = ["Released", "Writer", "crash_error"]

log = logging.getLogger("wfkit.engine")

# durability="batched": checkpoints of running runs wait at most this long before they are written
# (their next steps start at once); a crash re-runs the steps of at most this window
BATCH_WINDOW = 0.005

RECENT_VIEWS = 256  # ended runs whose last committed state readers get without a query

# the tokens of a running run that have a wf_jobs row, and what it says unless the attempt runs
_JOB_STATES = {
    TokenState.READY: JobStatus.READY,
    TokenState.RETRY: JobStatus.RETRY,
    TokenState.CANCELLING: JobStatus.CANCELLING,
}


@dataclass
class Released:
    """What a commit made ready: steps to dispatch and attempts to cancel."""

    dispatch: list[tuple[RunState, str]] = field(default_factory=list)
    cancel: list[tuple[str, str]] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)
    timers: bool = False  # new timers: a sleeping writer thread must look at its clock again
    handed: int = 0  # new or woken runs left in a shared store for whichever engine claims them

    def merge(self, other: Released) -> None:
        """Add what another commit released."""
        self.dispatch += other.dispatch
        self.cancel += other.cancel
        self.changed |= other.changed
        self.timers = self.timers or other.timers
        self.handed += other.handed


class Writer:
    """Owns the runs in memory, the timer heap and every write to the store."""

    # starts call nodes' child runs and carries their ends back; handed in by bind() (the
    # engine resolves and admits the called workflows) before the first checkpoint
    subruns: Subruns

    def __init__(
        self,
        store: Store,
        now: Callable[[], datetime],
        owner: Ownership | None = None,
        config: EngineConfig | None = None,
        registry: ActivityRegistry | None = None,
    ) -> None:
        settings = config if config is not None else EngineConfig()
        self.store = store
        self.now = now
        # how this engine owns runs: alone on its database, or leased on a shared one
        self.owner: Ownership = owner if owner is not None else SoleOwnership(store)
        self.lock = threading.RLock()
        self.handlers: dict[str, NodeHandler] = load_all()
        self.runs: dict[str, RunState] = {}
        self.flows: dict[tuple[str, int, str], CompiledFlow] = {}
        self.dirty: set[str] = set()
        self._batch: dict[str, Checkpoint] = {}
        self._new_runs: dict[str, tuple[str, str | None, datetime, str | None]] = {}
        self._jobs_rows: set[str] = set()  # runs with rows in wf_jobs
        self._pending_timers: list[tuple[Any, ...]] = []
        self._stale_timers: list[tuple[str, str, str]] = []  # rows of timers nothing waits for
        # the activities' lookup, for bound wait payloads (None: a writer without activities)
        self.binder: Callable[[str], Callable[..., Any]] | None = (
            registry.get if registry is not None else None
        )
        # shared with the scheduler, read when summaries are written
        self.inflight: dict[tuple[str, str], Any] = {}
        self.heartbeats: dict[tuple[str, str], datetime] = {}
        # steps ready whose activity is not registered in this process (the scheduler's list)
        self.blocked: list[tuple[RunState, str]] = []
        # (name, key) of signals posted before their wait: only these waits query the table
        self.posted = {(n, k) for n, k in store.query("posted_keys")}
        self._taken: list[str] = []
        self.reload_flows: Callable[[], None] | None = None
        self.failures = 0  # transactions that failed (their changes were dropped from memory)
        self.last_failure = ""  # why the last of them failed
        # "step": every checkpoint is durable before the steps it makes ready start; "batched":
        # a running run's checkpoints are written every BATCH_WINDOW, its next steps start now
        self.durability = settings.durability
        self._staged: dict[str, Checkpoint] = {}
        self._staged_rows: dict[str, RunRows] = {}
        self._staged_at = 0.0
        self.force = False  # the next commit must be durable (start markers of suspect steps)
        self.wake_hook: Callable[[], None] | None = None  # the scheduler's wake (new timers)
        self.metrics: EngineMetrics | None = None  # commit latencies, once metrics are enabled
        # how long a cancelled attempt with no attempt_timeout may take to stop (engine-wide)
        self.drain_timeout: timedelta = settings.drain_timeout
        # ready steps of runs taken for a timer or a command, for the scheduler's next round
        self.adopted: list[tuple[RunState, str]] = []
        self.adopted_suspects: list[tuple[RunState, str]] = []
        # each run's state as its last commit left it (frozen copies; readers take no lock):
        # the runs in memory, and the last few that left it (one engine per database only)
        self.views: OrderedDict[str, tuple[RunState, RunState]] = OrderedDict()
        # the open waits of the signals in this round's commands: (name, key) -> row or None
        self.signal_waits: dict[tuple[str, str | None], tuple[Any, ...] | None] = {}
        # OpenTelemetry spans of committed checkpoints (an engine's writer only)
        self.tracing: Tracing | None = (
            None
            if config is None
            else open_tracing(
                config.tracer_provider, store, registry.queue_of if registry is not None else None
            )
        )

    def bind(self, subruns: Subruns, reload_flows: Callable[[], None]) -> None:
        """Hand the writer the engine's child runs and its definitions' reload.

        They are late because they are built over the writer: the child runs start through the
        engine's definitions (which add their flows to this writer), and reloading the
        definitions adds flows to it too. The engine calls this once, right after building the
        writer and before anything runs.
        """
        self.subruns = subruns
        self.reload_flows = reload_flows

    def find_signal_waits(self, keys: Iterable[tuple[str, str | None]]) -> None:
        """Read the open waits of many signals at once, with their runs' summary rows (two
        queries per signal name, not two per signal), for :meth:`signal_wait`."""
        wanted = {k for k in keys if k[1] is not None and k not in self.signal_waits}
        if not wanted:
            return
        self.signal_waits.update(dict.fromkeys(wanted))
        found: dict[tuple[str, str | None], tuple[Any, ...]] = {}
        for name in sorted({name for name, _ in wanted}):
            name_keys = sorted(str(key) for n, key in wanted if n == name)
            for key, run_id, token_id, node_id in self.store.query(
                "find_signal_waits", [name, name_keys]
            ):
                found.setdefault((name, key), (run_id, token_id, node_id))  # the oldest
        run_ids = sorted({wait[0] for wait in found.values()})
        rows = {row[0]: row for row in self.store.query("run_rows", [run_ids])} if run_ids else {}
        for key, wait in found.items():
            row = rows.get(wait[0])
            self.signal_waits[key] = (*wait, *row) if row is not None else wait

    def signal_wait(self, name: str, key: str | None) -> tuple[Any, ...] | None:
        """The oldest open wait for signal (name, key): run, token, node, then the run's summary
        row when it was read with it (a round's signals are looked up together)."""
        if (name, key) in self.signal_waits:
            found = self.signal_waits.pop((name, key))
            if found is not None:
                return found
        else:
            rows = self.find_bookmark("signal", name, key)
            if rows:
                return rows[0][:3]
        # a wait opened in this round (its checkpoint is not written yet) takes it too
        for cp in self._batch.values():
            for token_id, node_id, kind, b_name, b_key, *_ in cp.bookmarks_add:
                if kind == "signal" and b_name == name and b_key == key:
                    return (cp.run.run_id, token_id, node_id)
        return None

    def find_bookmark(self, kind: str, name: str, key: str | None) -> list[tuple[Any, ...]]:
        """The oldest open bookmark of (kind, name, key), as a list of at most one row."""
        if key is None:
            return self.store.query("find_bookmark_keyless", [kind, name])
        return self.store.query("find_bookmark", [kind, name, key])

    # --- reads ------------------------------------------------------------------------------------

    def view(self, run_id: str) -> RunState | None:
        """The run as its last commit left it, without the lock; None when not published."""
        entry = self.views.get(run_id)
        if entry is None:
            return None
        live, frozen = entry
        if self.owner.shared and self.runs.get(run_id) is not live:
            return None  # another engine may have moved it on since
        return frozen

    def _publish(self, run: RunState, in_memory: bool) -> None:
        """Publish the run's state after a commit that changed it."""
        views = self.views
        if not in_memory and (self.owner.shared or not RunStatus(run.status).terminal):
            # parked: its row answers (a parked run costs its rows and no memory); on a shared
            # store another engine may move it on
            views.pop(run.run_id, None)
            return
        views[run.run_id] = (run, run.freeze())
        views.move_to_end(run.run_id)
        spare = len(views) - len(self.runs) - RECENT_VIEWS
        while spare > 0 and views:
            oldest = next(iter(views))
            if oldest in self.runs:
                views.move_to_end(oldest)
            else:
                views.popitem(last=False)
            spare -= 1

    # --- definitions and runs -------------------------------------------------------------------

    def flow(self, workflow_id: str, version: int, digest: str) -> CompiledFlow:
        """The compiled workflow a run pinned."""
        key = (workflow_id, version, digest)
        if key not in self.flows and self.reload_flows is not None:
            self.reload_flows()  # another engine on a shared store may have registered it
        if key not in self.flows:
            raise UsageError(
                f"workflow {workflow_id!r} v{version} ({digest[:12]}) is not in this store; "
                "register it before running"
            )
        return self.flows[key]

    def add_flow(self, workflow: Workflow) -> CompiledFlow:
        """Compile and remember a workflow."""
        flow = CompiledFlow.compile(workflow)
        self.flows[(flow.id, flow.version, flow.hash)] = flow
        return flow

    def get_run(self, run_id: str, row: tuple[Any, ...] | None = None) -> RunState | None:
        """The run in memory, or loaded from its snapshot and later checkpoints (``row``: its
        summary row, when the caller has read it already); None if unknown."""
        run = self.runs.get(run_id)
        if run is not None:
            return run
        if row is None:
            rows = self.store.query("run_row", [run_id])
            if not rows:
                return None
            row = rows[0]
        flow = self.flow(row[1], row[2], row[3])
        data = json.loads(row[6] or row[5])
        run = RunState.restore(run_id, flow, data, row[7], row[8])
        run.input_json = row[5]
        run.status = row[4] if not row[7] else run.status
        if RunStatus(row[4]).terminal and run.status != row[4]:
            # ended outside a checkpoint (a run whose checkpoint could not be written)
            run.status, run.error = row[4], row[9]
        if (
            row[4] in (RunStatus.PENDING.value, RunStatus.RUNNING.value)
            or RunStatus(row[4]).terminal
            or not row[7]
        ):
            # a run that was running can have checkpoints newer than its snapshot (every
            # checkpoint that leaves a run out of memory writes the snapshot with it), and so
            # can an ended one: the events it gains (run.restarted...) leave its summary as it
            # was, so the next event's number is known only from the log
            for _, seq, patch, delta, *_ in self.store.query("run_events_after", [run_id, row[8]]):
                run.replay(seq, delta, patch)
        return run

    def take(self, run_id: str, row: tuple[Any, ...] | None = None) -> RunState | None:
        """The run, held in memory to be changed by this engine (claimed first when shared);
        ``row`` is its summary row when the caller has read it already.

        Raises :class:`~wfkit.engine.leases.RunBusy` when another engine process holds it.
        """
        run = self.runs.get(run_id)
        if run is not None:
            return run
        if run_id in self._batch:  # a run this round made or took (not written yet)
            return self._batch[run_id].run
        claimed = self.owner.claim(run_id)
        if claimed is None:
            if not self.store.query("run_row", [run_id]):
                return None
            raise RunBusy(run_id)
        # a row read before the claim may be older on a shared store (another engine may have
        # moved the run on meanwhile): read it again there
        run = self.get_run(run_id, None if self.owner.shared else row)
        if run is not None:
            self.runs[run_id] = run
            self._publish(run, True)  # as the store holds it: readers need not query
            self._abandon_orphans(run)
            # its ready steps are dispatched by the scheduler's next round
            steps = [(run, t) for t, tok in run.tokens.items() if tok["st"] == TokenState.READY]
            if claimed:  # taken from an engine that died: they may have been running
                self.adopted_suspects += self.take_up(steps)
            else:
                self.adopted += steps
        return run

    def claim_waiting_work(
        self, limit: int
    ) -> tuple[list[tuple[RunState, str]], list[tuple[RunState, str]]]:
        """Take runs nobody advances (shared stores: new ones, or their owner died).

        Returns the steps to dispatch and the *suspect* steps: those ready in a run whose owner
        died, which may have been running then (see :meth:`take_up`). Crashes found, and the
        ends of runs whose drain the dead owner left, are in the batch, to be committed.
        """
        ready: list[tuple[RunState, str]] = []
        suspects: list[tuple[RunState, str]] = []
        for run_id, orphaned in self.owner.claim_free(limit):
            if run_id in self.runs:
                continue
            run = self.get_run(run_id)
            if run is None:
                continue
            self.runs[run_id] = run
            self._publish(run, True)
            self._abandon_orphans(run)
            steps = [(run, t) for t, tok in run.tokens.items() if tok["st"] == TokenState.READY]
            if orphaned:
                suspects += self.take_up(steps)
            else:
                ready += steps
        return ready, suspects

    def _abandon_orphans(self, run: RunState) -> bool:
        """A run taken up again whose tokens were cancelling: their attempts stopped with the
        engine that ran them. Record them abandoned and finish the run's end (uncommitted)."""
        orphans = [
            t
            for t, tok in run.tokens.items()
            if tok["st"] == TokenState.CANCELLING and (run.run_id, t) not in self.inflight
        ]
        if orphans:
            drains.abandon(self.checkpoint(run), orphans)
        return bool(orphans)

    def _after_staged(self, released: Released) -> None:
        """Writing staged checkpoints outside a scheduler round released only their timers
        (their steps were dispatched when they were staged): wake the writer thread for them."""
        if released.timers and self.wake_hook is not None:
            self.wake_hook()

    def mark_closed(self, running: set[tuple[str, str]]) -> None:
        """The engine closes: flag the snapshots of the runs held here that have no attempt
        running, so that reopening dispatches their ready steps as usual (not as suspects)."""
        with self.lock:
            now = self.now()
            rows = []
            for run in self.runs.values():
                if any((run.run_id, t) in running for t in run.tokens):
                    continue
                status, data, _, seq, error, at, ended, run_id = self._summary(run, now)
                rows.append(
                    (status, data, run.snapshot(closed=True), seq, error, at, ended, run_id)
                )
            if rows:
                self.store.write([Statement("update_instance", rows)])

    def reopened(self, runs: Iterable[RunState]) -> None:
        """Clear the close flag of runs taken up again (a crash from now on is not clean)."""
        rows = []
        now = self.now()
        for run in runs:
            run.closed = False
            rows.append(self._summary(run, now))
        if rows:
            self.store.write([Statement("update_instance", rows)])

    def take_up(self, steps: list[tuple[RunState, str]]) -> list[tuple[RunState, str]]:
        """Steps ready in runs whose engine process died: record the crashes, return suspects.

        A step whose current attempt carries the durable start marker (``started``, written
        just before a suspect attempt is dispatched) was running when the process died: it is
        recorded ``step.crashed`` and the crash counts as a failed attempt (retried, or failed
        for good when its attempts are spent). The other ready steps may have been running or
        only queued: they are returned as suspects, not counted, and dispatched with a marker.
        """
        suspects: list[tuple[RunState, str]] = []
        for run, token_id in steps:
            token = run.tokens.get(token_id)
            if token is None or token["st"] != TokenState.READY:
                continue
            if token.get("started") != token["att"]:
                suspects.append((run, token_id))
                continue
            now = self.now()
            error = crash_error(token["att"], token["node"])
            if "comp" in token:  # a compensation counts it as one of its failed attempts
                entry = run.saga.get(token["entry"])
                self.checkpoint(run).event(
                    EventKind.STEP_CRASHED,
                    token["node"],
                    token_id,
                    attempt=token["att"],
                    error=error,
                    detail={"compensation": entry["comp"] if entry is not None else None},
                )
            self.apply_result(
                AttemptResult(
                    run.run_id,
                    token_id,
                    token["node"],
                    token["att"],
                    now,
                    now,
                    ok=False,
                    error=error,
                    base_version=run.data_version,
                    crashed=True,
                )
            )
        return suspects

    def batch_checkpoints(self) -> list[Checkpoint]:
        """The checkpoints of the batch being built, in the order they joined it."""
        return list(self._batch.values())

    def forget(self, run_ids: Iterable[str]) -> None:
        """Runs deleted from the store (retention): drop everything memory keeps of them."""
        for run_id in run_ids:
            self.views.pop(run_id, None)
            self.runs.pop(run_id, None)
            self.dirty.discard(run_id)
            self._jobs_rows.discard(run_id)

    def batch_runs(self) -> list[str]:
        """The runs with a checkpoint in the batch being built."""
        return list(self._batch)

    def in_batch(self, run_id: str) -> bool:
        """True when the batch being built changes ``run_id``."""
        return run_id in self._batch

    def forget_new(self, run_ids: set[str]) -> None:
        """Leave out of the batch the checkpoints of new runs a refused command made (a run
        already stored keeps its checkpoint: commands check before they change anything)."""
        for run_id in run_ids:
            if run_id in self._new_runs:
                del self._new_runs[run_id]
                self._batch.pop(run_id, None)
                self.runs.pop(run_id, None)

    @property
    def pending(self) -> bool:
        """True when checkpoints wait in the batch for the next commit."""
        return bool(self._batch) or bool(self._stale_timers)

    @property
    def staged(self) -> bool:
        """True when checkpoints of running runs wait to be written (durability="batched")."""
        return bool(self._staged_rows)

    def staged_for(self) -> float | None:
        """Seconds until the staged checkpoints are due to be written; None when none wait."""
        if not self._staged_rows:
            return None
        return max(self._staged_at + BATCH_WINDOW - time.monotonic(), 0.0)

    def _stageable(self, cp: Checkpoint, rows: RunRows, new_runs: dict[str, Any]) -> bool:
        """A checkpoint that may wait for the next write while its next steps run: a running
        run that stays in memory and changes nothing another run or caller could see (no new
        run, wait, summary, cancel, taken signal, saga status or artifact record)."""
        run = cp.run
        return (
            run.run_id not in new_runs
            and cp.start_status == RunStatus.RUNNING.value
            and run.status == RunStatus.RUNNING.value
            and rows.update is None
            and not rows.clear_jobs
            and not rows.marks
            and not rows.posted
            and not rows.saga_set
            and rows.graph is None
            and not rows.artifacts  # a next step may load them: recorded before it starts
            and not cp.cancel
            and any(t["st"] in IN_FLIGHT for t in run.tokens.values())
        )

    def recover(self) -> list[tuple[RunState, str]]:
        """Load every live run after a restart; return the steps to dispatch again."""
        if not self.owner.startup_runs():
            return []  # on a shared store runs are claimed as they become free
        live: dict[str, RunState] = {}
        for run_id, wid, version, digest, status, input_json, state, seq in self.store.query(
            "live_runs"
        ):
            try:
                flow = self.flow(wid, version, digest)
            except UsageError:
                log.warning(
                    "run %s: workflow %s v%s is missing; left as it is", run_id, wid, version
                )
                continue
            data_rows = self.store.query("run_row", [run_id])
            data = json.loads(data_rows[0][6] or input_json)
            run = RunState.restore(run_id, flow, data, state, seq)
            run.input_json = input_json
            if not state:
                run.status = status
            live[run_id] = run
        for run_id, seq, patch, delta, *_rest in self.store.query("live_events"):
            if run_id in live:
                live[run_id].replay(seq, delta, patch)
        if [run for run in live.values() if self._abandon_orphans(run)]:
            self.commit()  # runs that were ending when the engine stopped end now
        ready: list[tuple[RunState, str]] = []
        for run in live.values():
            steps = [t for t, tok in run.tokens.items() if tok["st"] == TokenState.READY]
            if steps and run.status not in (RunStatus.SUSPENDED.value,):
                self.runs[run.run_id] = run
                self._publish(run, True)
                ready += [(run, t) for t in steps]
        return ready

    # --- checkpoints ----------------------------------------------------------------------------

    def checkpoint(self, run: RunState, actor: str | None = None) -> Checkpoint:
        """The checkpoint of ``run`` in the batch being built (one per run per batch)."""
        cp = self._batch.get(run.run_id)
        if cp is None:
            cp = Checkpoint(run, self.now(), self.handlers, RULES, actor)
            cp.posted_source = self._take_posted
            cp.binder = self.binder
            cp.in_flight = lambda token_id, run_id=run.run_id: (run_id, token_id) in self.inflight
            cp.drain_timeout = self.drain_timeout
            cp.calls = self.subruns
            self._batch[run.run_id] = cp
        elif actor is not None:
            cp.actor = actor
        return cp

    def _take_posted(
        self, cp: Checkpoint, name: str, key: str | None
    ) -> tuple[dict[str, Any], str | None] | None:
        """The oldest unexpired signal posted for (name, key) and its sender, taken in this
        checkpoint."""
        if not self.owner.may_have_posted(name, key, self.posted):
            return None
        for signal_id, payload, actor, _expires in self.store.query(
            "first_posted_signal", [name, key, self.now()]
        ):
            if signal_id not in self._taken:
                self._taken.append(signal_id)
                cp.posted_taken.append(signal_id)
                return dict(json.loads(payload)), actor
        return None

    def add_instance(
        self,
        run: RunState,
        input_json: str,
        actor: str | None,
        parent: str | None = None,
        caller: Any = None,
    ) -> None:
        """A new run: its summary row is written with its first checkpoint. ``caller`` is the
        tracing context of whoever started it (see :mod:`wfkit.engine.tracing`)."""
        run.input_json = input_json
        self._new_runs[run.run_id] = (input_json, actor, self.now(), parent)
        if self.tracing is not None:
            self.tracing.admitted(run, self._new_runs[run.run_id][2], parent, caller)

    def apply_result(self, result: AttemptResult) -> None:
        """Fold an attempt's result into its run (stale results are dropped)."""
        run = self.runs.get(result.run_id)
        token = run.tokens.get(result.token_id) if run else None
        if run is None or token is None or token["att"] != result.attempt:
            return
        if self.tracing is not None:
            self.tracing.ended(result.run_id, result.token_id, result.attempt, result.ended_at)
        if result.logs is not None and token["st"] in (TokenState.CANCELLING, TokenState.READY):
            logs.keep(self.checkpoint(run), result)
        if result.artifacts and token["st"] in (TokenState.CANCELLING, TokenState.READY):
            # recorded with the checkpoint that records the attempt: durable exactly when it is
            self.checkpoint(run).artifacts += result.artifacts
        if token["st"] == TokenState.CANCELLING:
            drains.on_result(self.checkpoint(run), result.token_id, result)
            return
        if token["st"] != TokenState.READY:
            return
        node = run.flow.nodes[result.node_id]
        cp = self.checkpoint(run)
        if "comp" in token:
            sagas.on_compensation_result(cp, result.token_id, result)
            return
        self.handlers[node.kind.value].on_result(cp, result.token_id, result.node_id, node, result)

    def fire_timer(self, due: datetime, run_id: str, token_id: str, kind: str) -> None:
        """A timer came due: let the token's node handle it (stale timers are dropped)."""
        try:
            run = self.take(run_id)
        except RunBusy:
            return  # the engine that holds the run fires it
        token = run.tokens.get(token_id) if run else None
        ended = run is not None and RunStatus(run.status).terminal
        if run is None or token is None or token.get("timer") != kind or ended:
            # nothing waits for it any more: delete its row, or every engine of a shared
            # database would find it due again in every round
            self._stale_timers.append((run_id, token_id, kind))
            if ended:
                self.runs.pop(run_id, None)
                self.owner.release([run_id])
            return
        parked_until = token.get("due")
        if parked_until and datetime.fromisoformat(parked_until) > due:
            return  # fired early: the token was parked again, on a later timer of this kind
        self.runs.setdefault(run_id, run)
        if kind == drains.DRAIN and token["st"] == TokenState.CANCELLING:
            drains.on_deadline(self.checkpoint(run), token_id)
            return
        if kind == run_retries.TIMER and token["st"] == TokenState.RUN_RETRY:
            run_retries.on_timer(self.checkpoint(run), token_id)
            return
        node = run.flow.nodes[token["node"]]
        cp = self.checkpoint(run)
        self.handlers[node.kind.value].on_timer(cp, token_id, token["node"], node, TimerKind(kind))

    def commit(self, force: bool = False) -> Released:
        """Write the batch in one transaction; then release what it made ready.

        On a shared database a run of the batch may have changed hands (this process stalled
        longer than its lease and another engine took the run over): the transaction is then
        written again without the runs lost, which leave memory, so the other runs' steps are
        not run twice.

        With ``durability="batched"`` a batch of running runs' checkpoints is staged instead
        (released at once, written with the next commit, at most BATCH_WINDOW later), unless
        ``force`` (a caller waits for its outcome).
        """
        # every run's status settles; child runs that end resume their callers in this batch
        self.subruns.settle()
        batch, self._batch = self._batch, {}
        new_runs, self._new_runs = self._new_runs, {}
        force, self.force = force or self.force, False
        parts: dict[str, RunRows] = {}
        unwritable: dict[str, str] = {}
        for run_id, cp in batch.items():
            try:
                parts[run_id] = self._rows(cp, new_runs)
            except RecursionError:  # json.dumps gave up on a value's nesting
                unwritable[run_id] = f"a value in its state is {TOO_DEEP}"
            except Exception as exc:  # a value in its state that cannot be written
                unwritable[run_id] = f"{type(exc).__name__}: {exc}"
        if (
            self.durability == "batched"
            and not force
            and not unwritable
            and not self._stale_timers
            and all(self._stageable(cp, parts[r], new_runs) for r, cp in batch.items())
            and (not self._staged_rows or time.monotonic() < self._staged_at + BATCH_WINDOW)
        ):
            if not self._staged_rows:
                self._staged_at = time.monotonic()
            self._stage(batch, parts)
            return self._release(list(batch.values()))
        released_now = list(batch.values())
        if self._staged_rows:  # written first, in this transaction
            staged, self._staged = self._staged, {}
            rows, self._staged_rows = self._staged_rows, {}
            for run_id, later in parts.items():
                if run_id in rows:
                    rows[run_id].absorb(later)
                else:
                    rows[run_id] = later
            parts = rows
            batch = {**staged, **batch}
        stale, self._stale_timers = self._stale_timers, []
        try:
            for tries_left in range(3, -1, -1):
                try:
                    self._pending_timers = self._write(batch, parts, new_runs, stale)
                    break
                except LeaseLost:
                    lost = self.owner.lost([r for r in batch if r not in new_runs])
                    if not lost or not tries_left:
                        raise
                    self._drop_lost(lost, batch, parts)
                except AlreadyTaken as exc:
                    if not tries_left:
                        raise
                    self._drop_taken(set(exc.keys), batch, parts, new_runs)
        except StoreError as exc:
            one_refused = isinstance(exc, ValueRefused) and len(parts) == 1
            if not (len(parts) >= 2 or one_refused) or not self._isolate(
                batch, parts, new_runs, stale, unwritable
            ):
                self.failures += 1
                self.last_failure = str(exc)
                for run_id in batch:  # memory ran ahead of the store: reload from the store
                    self.runs.pop(run_id, None)
                self._taken = []
                self._fail_unwritable(unwritable, batch, new_runs)
                raise exc
        self._fail_unwritable(unwritable, batch, new_runs)
        return self._release([cp for cp in released_now if cp.run.run_id in parts], new_runs)

    def _stage(self, batch: dict[str, Checkpoint], parts: dict[str, RunRows]) -> None:
        for run_id, rows in parts.items():
            if run_id in self._staged_rows:
                self._staged_rows[run_id].absorb(rows)
            else:
                self._staged_rows[run_id] = rows
        self._staged.update(batch)

    def _isolate(
        self,
        batch: dict[str, Checkpoint],
        parts: dict[str, RunRows],
        new_runs: dict[str, Any],
        stale: list[tuple[str, str, str]],
        unwritable: dict[str, str],
    ) -> bool:
        """The batch was refused: write its runs one by one, so that a run the store refuses
        (a value it cannot hold) does not take the others down. False when the store itself
        fails (not a refused value): the caller retries the whole batch later."""
        written: dict[str, RunRows] = {}
        refused: dict[str, str] = {}
        added: list[tuple[Any, ...]] = []
        for run_id, rows in parts.items():
            one = {run_id: batch[run_id]}
            try:
                added += self._write(one, {run_id: rows}, new_runs, stale if not written else [])
            except LeaseLost:
                self._drop_lost({run_id}, batch, parts={run_id: rows})
                written[run_id] = rows  # not ours any more: nothing to fail here
                continue
            except ValueRefused as exc:
                refused[run_id] = str(exc)
                continue
            except StoreError:
                return False  # the store itself fails: the whole batch is retried later
            written[run_id] = rows
        if not written and not refused:
            return False
        self._pending_timers = added
        for run_id in refused:
            parts.pop(run_id)
        unwritable.update(refused)
        return True

    def _fail_unwritable(
        self, unwritable: dict[str, str], batch: dict[str, Checkpoint], new_runs: dict[str, Any]
    ) -> None:
        """Runs whose checkpoint cannot be written fail as they last stood in the store, with
        the reason: one poison value never stalls the runs it shares a batch with."""
        for run_id, reason in unwritable.items():
            batch.pop(run_id, None)
            self.runs.pop(run_id, None)
            self.views.pop(run_id, None)
            self.dirty.discard(run_id)
            error = printable(
                f"the engine could not write this run's checkpoint, so it failed as it last "
                f"stood: {reason}"
            )
            log.error("run %s failed: %s", run_id, error)
            if run_id in new_runs:
                continue  # never written: there is nothing to fail
            now = self.now()
            seq = self.store.query("last_event_seq", [run_id])[0][0] + 1
            event = (run_id, seq, now, EventKind.RUN_FAILED, None, None, None, None, None, error)
            try:
                self.store.write(
                    [
                        Statement("fail_unwritable_run", [(error, now, now, run_id)]),
                        Statement("insert_event", [(*event, None, None, None, None)]),
                        Statement("delete_run_timers", [(run_id,)]),
                        Statement("delete_run_bookmarks", [(run_id,)]),
                        Statement("delete_jobs", [(run_id,)]),
                    ]
                )
            except StoreError:
                log.exception("run %s: its failure could not be recorded either", run_id)

    def _write(
        self,
        batch: dict[str, Checkpoint],
        parts: dict[str, RunRows],
        new_runs: dict[str, Any],
        stale: list[tuple[str, str, str]],
    ) -> list[tuple[Any, ...]]:
        head = self._lease_guard(batch.values(), new_runs)
        statements, added_timers = merge(list(parts.values()), head, stale)
        if self.tracing is not None:
            statements += self.tracing.statements(parts.values())
        began = time.perf_counter()
        self.store.write(statements)
        if self.metrics is not None:
            self.metrics.on_commit(time.perf_counter() - began)
        if self.tracing is not None:
            self.tracing.committed(parts.values(), {r: cp.run for r, cp in batch.items()})
        return added_timers

    def _drop(
        self, run_ids: set[str], batch: dict[str, Checkpoint], parts: dict[str, RunRows]
    ) -> None:
        """Leave the checkpoints of ``run_ids`` out of the transaction, forget the posted
        signals they took, and drop the runs from memory."""
        for run_id in run_ids:
            batch.pop(run_id, None)
            taken = parts.pop(run_id).posted
            self._taken = [s for s in self._taken if s not in taken]
            self.runs.pop(run_id, None)
            self.dirty.discard(run_id)

    def _drop_lost(
        self, lost: set[str], batch: dict[str, Checkpoint], parts: dict[str, RunRows]
    ) -> None:
        """Runs another engine holds now: their checkpoints are not written, and they leave
        memory (their attempts' results will be dropped as stale)."""
        self._drop(lost, batch, parts)
        log.warning(
            "runs taken over by another engine process (this one did not renew their leases "
            "in time; is it starved of CPU, or is the lease too short?): %s; their checkpoints "
            "here are dropped and the engine that holds them goes on",
            ", ".join(sorted(lost)),
        )

    def _drop_taken(
        self,
        signals: set[str],
        batch: dict[str, Checkpoint],
        parts: dict[str, RunRows],
        new_runs: dict[str, Any],
    ) -> None:
        """Posted signals another engine process took first (at most once: the first taker
        wins): the checkpoints that took them are not written, their runs leave memory and are
        given back, so that they go on from their last stored checkpoint and find the signal
        gone. A new run cannot go back to a stored checkpoint: the whole round fails then, and
        its callers are told, with nothing written."""
        takers = {run_id for run_id, rows in parts.items() if signals & set(rows.posted)}
        if takers & set(new_runs):
            raise StoreError(
                "a signal posted for the wait of a run started in this round was taken by "
                "another engine process at the same moment; nothing of the round was written: "
                "start the run again"
            )
        self._drop(takers, batch, parts)
        self.owner.release(sorted(takers))
        log.info(
            "posted signals %s were taken by another engine process first; runs %s go on from "
            "their last stored checkpoint",
            ", ".join(sorted(signals)),
            ", ".join(sorted(takers)),
        )

    def _rows(
        self, cp: Checkpoint, new_runs: dict[str, tuple[str, str | None, datetime, str | None]]
    ) -> RunRows:
        """The rows of one checkpoint (consumes the run's changes and numbers its events)."""
        run = cp.run
        rows = RunRows(run.run_id)
        delta, patch = run.take_changes()
        if (delta or patch) and not cp.events:
            cp.event(EventKind.CHECKPOINT)
        for i, ev in enumerate(cp.events):
            run.seq += 1
            rows.events.append(
                (
                    run.run_id,
                    run.seq,
                    cp.now,
                    ev.kind,
                    ev.node_id,
                    ev.token,
                    ev.attempt,
                    ev.started_at,
                    ev.actor,
                    ev.error,
                    dumps(ev.output),
                    patch if i == 0 else None,
                    delta if i == 0 else None,
                    dumps(ev.detail),
                )
            )
        if run.run_id in new_runs:
            input_json, actor, created, parent = new_runs[run.run_id]
            status, data, state, seq, error, now, ended, _ = self._summary(run, cp.now)
            rows.instance = (
                run.run_id,
                run.flow.id,
                run.flow.version,
                run.flow.hash,
                status,
                input_json,
                data,
                state,
                seq,
                error,
                created,
                now,
                ended,
                parent,
                actor,
            )
        elif cp.start_status in TERMINAL_STATUSES and run.status == cp.start_status:
            pass  # an ended run only gains events (e.g. restarted): its summary stands
        elif run.status != RunStatus.RUNNING.value or cp.start_status in TERMINAL_STATUSES:
            # (a failed run tried again by hand is live again: its row must say so at once)
            rows.update = self._summary(run, cp.now)
            self.dirty.discard(run.run_id)
            # on a shared store another engine may have written its rows (e.g. blocked)
            if self.owner.shared or run.run_id in self._jobs_rows:
                self._jobs_rows.discard(run.run_id)
                rows.clear_jobs = True
        else:
            self.dirty.add(run.run_id)
        rows.timer_ops(cp.timers_add, cp.timers_del)
        for run_id, token_id, node_id, due in cp.wakes:  # callers another engine holds
            rows.timers[(run_id, token_id, "call")] = (
                "add",
                (run_id, token_id, node_id, "call", due),
            )
        rows.bookmark_ops(cp.bookmarks_add, cp.bookmarks_del)
        for op, row in cp.saga_rows:
            (rows.saga_add if op == "add" else rows.saga_set).append(row)
        rows.posted = list(cp.posted_taken)
        rows.graph = cp.graph
        if cp.logs:
            rows.logs = logs.log_rows(cp, run.seq)
        if cp.artifacts:
            rows.artifacts = [record.row(cp.now) for record in cp.artifacts]
        return rows

    def _lease_guard(
        self, batch: Iterable[Checkpoint], new_runs: dict[str, Any]
    ) -> list[Statement]:
        """What the ownership puts first in the transaction (see ``Ownership.guard``)."""
        return self.owner.guard(list(batch), new_runs, self._summary)

    def _summary(self, run: RunState, now: datetime) -> tuple[Any, ...]:
        ended = now if RunStatus(run.status).terminal else None
        return (
            run.status,
            run.data_json(),
            run.snapshot(),
            run.seq,
            run.error,
            now,
            ended,
            run.run_id,
        )

    def _release(
        self, batch: Iterable[Checkpoint], new_runs: dict[str, Any] | None = None
    ) -> Released:
        new_runs = new_runs or {}
        released = Released()
        if self._taken:
            self._taken = []
            self.posted = {(n, k) for n, k in self.store.query("posted_keys")}
        released.timers = bool(self._pending_timers)
        self.owner.add_timers((r[4], r[0], r[1], r[3]) for r in self._pending_timers)
        self._pending_timers = []
        for cp in batch:
            run = cp.run
            released.changed.add(run.run_id)
            released.cancel += [(run.run_id, t) for t in cp.cancel]
            if self.owner.shared and (run.run_id in new_runs or cp.woke):
                # a new or resumed run on a shared store: whichever engine claims it runs it
                self.views.pop(run.run_id, None)
                self.runs.pop(run.run_id, None)
                self.dirty.discard(run.run_id)
                released.handed += 1
                continue
            for token_id in cp.dispatch:
                token = run.tokens.get(token_id)
                if token is not None and token["st"] == TokenState.READY:
                    released.dispatch.append((run, token_id))
            if any(t["st"] in IN_FLIGHT for t in run.tokens.values()):
                self.runs[run.run_id] = run
                self._publish(run, True)
            else:
                self.runs.pop(run.run_id, None)  # parked or ended: its rows hold it now
                self.dirty.discard(run.run_id)
                self._publish(run, False)
        return released

    def flush_summaries(self) -> None:
        """Write the summary rows of running runs whose checkpoints moved them on (and the
        checkpoints staged by durability="batched" first)."""
        with self.lock:
            if self._staged_rows and not self._batch:
                self._after_staged(self.commit(force=True))
            runs = [self.runs[r] for r in self.dirty if r in self.runs]
            self.dirty.clear()
            now = self.now()
            if self.posted:  # kept signals past their expiry go when the engine is idle
                self.store.write([Statement("delete_expired_signals", [(now,)])])
                self.posted = {(n, k) for n, k in self.store.query("posted_keys")}
            if not runs:
                return
            jobs = Statement("insert_job")
            blocked = {(run.run_id, token_id) for run, token_id in self.blocked}
            for run in runs:
                for token_id, t in run.tokens.items():
                    if t["st"] in _JOB_STATES:
                        key = (run.run_id, token_id)
                        status = JobStatus.RUNNING if key in self.inflight else _JOB_STATES[t["st"]]
                        if t["st"] == TokenState.CANCELLING:
                            status = JobStatus.CANCELLING  # asked to stop, not yet ended
                        if key in blocked:
                            status = JobStatus.BLOCKED
                        beat = self.heartbeats.get(key)
                        jobs.rows.append(
                            (run.run_id, token_id, t["node"], status, t["att"], t["li"], now, beat)
                        )
            gone = [(r.run_id,) for r in runs if r.run_id in self._jobs_rows]
            self.store.write(
                [
                    Statement("update_instance", [self._summary(run, now) for run in runs]),
                    Statement("delete_jobs", gone),
                    jobs,
                ]
            )
            self._jobs_rows |= {row[0] for row in jobs.rows}


def crash_error(attempt: int, node_id: str) -> str:
    """The error of an attempt its engine process did not survive."""
    return (
        f"the engine process died during attempt {attempt} of {node_id!r} (killed, out of "
        "memory, os._exit or a crash in native code)"
    )
