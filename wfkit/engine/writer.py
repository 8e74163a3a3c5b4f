"""The single writer: turns attempt results, fired timers and commands into checkpoints.

Everything that changes a run passes through :meth:`Writer.commit` under one lock: node handlers
update the runs in memory, the checkpoints of the whole batch become one transaction of
multi-row statements, and only once it is durable are the next steps released. A run that only
waits (signals, approvals, timers) is written as a snapshot and dropped from memory, so a parked
run costs its rows and nothing else.

Its parts live beside it: ``event_rows`` (the rows a checkpoint writes), ``staging``
(durability="batched"), ``published`` (views), ``signal_lookups``, ``loading`` (runs read back),
``crashes`` (crashed steps, clean closes) and ``isolation`` (a batch that cannot be written whole).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from wfkit.definition.values import TOO_DEEP
from wfkit.definition.workflow import Workflow
from wfkit.engine import crashes, isolation
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.config import EngineConfig
from wfkit.engine.crashes import crash_error
from wfkit.engine.event_rows import NewRun, checkpoint_rows, job_rows, stageable, summary
from wfkit.engine.executor import AttemptResult
from wfkit.engine.failures import RULES
from wfkit.engine.flows import CompiledFlow
from wfkit.engine.leases import RunBusy
from wfkit.engine.loading import load_live, load_run, run_row
from wfkit.engine.nodes import NodeHandler, load_all
from wfkit.engine.ownership import Ownership, SoleOwnership
from wfkit.engine.published import Published
from wfkit.engine.records import RunStatus
from wfkit.engine.released import Released
from wfkit.engine.routing import route_result, route_timer
from wfkit.engine.rows import RunRows, merge
from wfkit.engine.signal_lookups import SignalLookups
from wfkit.engine.staging import Staging
from wfkit.engine.state import RunState
from wfkit.engine.subruns import Subruns
from wfkit.engine.tracing import Tracing, open_tracing
from wfkit.engine.vocabulary import IN_FLIGHT, TokenState
from wfkit.errors import StoreError, UsageError
from wfkit.store.base import TERMINAL_STATUSES, Statement, Store, ValueRefused
from wfkit.store.rows import RunRow, TimerKey, TimerRow

if TYPE_CHECKING:
    from wfkit.definition.activities import ActivityRegistry
    from wfkit.engine.metrics import EngineMetrics

__all__ = ["Released", "Writer", "crash_error"]

Steps = list[tuple[RunState, str]]  # (run, token) of ready steps


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
        self._new_runs: dict[str, NewRun] = {}
        self._jobs_rows: set[str] = set()  # runs with rows in wf_jobs
        self._pending_timers: list[TimerRow] = []
        self._stale_timers: list[TimerKey] = []  # rows of timers nothing waits for
        # the activities' lookup, for bound wait payloads (None: a writer without activities)
        self.binder: Callable[[str], Callable[..., Any]] | None = (
            registry.get if registry is not None else None
        )
        # the scheduler's attempts, read (never written) here: see watch_attempts
        self._inflight: Collection[tuple[str, str]] = {}
        self._heartbeats: Mapping[tuple[str, str], datetime] = {}
        self._blocked: Collection[tuple[RunState, str]] = []
        self.signals = SignalLookups(store, self.owner)
        self.reload_flows: Callable[[], None] | None = None
        self.failures = 0  # transactions that failed (their changes were dropped from memory)
        self.last_failure = ""  # why the last of them failed
        # "step": every checkpoint is durable before the steps it makes ready start; "batched":
        # a running run's checkpoints are written every BATCH_WINDOW, its next steps start now
        self.durability = settings.durability
        self._staging = Staging()
        self._force = False  # the next commit must be durable (start markers of suspect steps)
        self._wake: Callable[[], None] | None = None  # the scheduler's wake (new timers)
        self.metrics: EngineMetrics | None = None  # commit latencies, once metrics are enabled
        # how long a cancelled attempt with no attempt_timeout may take to stop (engine-wide)
        self.drain_timeout: timedelta = settings.drain_timeout
        # ready steps of runs taken for a timer or a command, for the scheduler's next round
        self._adopted: Steps = []
        self._adopted_suspects: Steps = []
        # each run's state as its last commit left it (frozen copies; readers take no lock):
        # the runs in memory, and the last few that left it (one engine per database only)
        self.views = Published(self.runs, self.owner.shared)
        # OpenTelemetry spans of committed checkpoints (an engine's writer only)
        self.tracing: Tracing | None = (
            None
            if config is None
            else open_tracing(
                config.tracer_provider, store, registry.queue_of if registry is not None else None
            )
        )

    def bind(self, subruns: Subruns, reload_flows: Callable[[], None]) -> None:
        """Hand the writer the engine's child runs and its definitions' reload, once, before
        anything runs: late because both are built over the writer (they add flows to it)."""
        self.subruns = subruns
        self.reload_flows = reload_flows

    # --- the scheduler's seam ---------------------------------------------------------------------

    def watch_attempts(
        self,
        running: Collection[tuple[str, str]],
        heartbeats: Mapping[tuple[str, str], datetime],
        blocked: Collection[tuple[RunState, str]],
    ) -> None:
        """Read the scheduler's attempts running, their heartbeats and its blocked steps."""
        self._inflight, self._heartbeats, self._blocked = running, heartbeats, blocked

    def on_new_timers(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` when a commit outside a scheduler round adds timers."""
        self._wake = wake

    def attempt_running(self, run_id: str, token_id: str) -> bool:
        """True while the scheduler runs an attempt of the step."""
        return (run_id, token_id) in self._inflight

    def take_adopted(self) -> tuple[Steps, Steps]:
        """The ready and the suspect steps of runs taken since the last call (emptied)."""
        taken = (self._adopted, self._adopted_suspects)
        self._adopted, self._adopted_suspects = [], []
        return taken

    def require_durable(self) -> None:
        """Make the next commit durable (a start marker is written before its attempt)."""
        self._force = True

    def mark_dirty(self, run_ids: Iterable[str]) -> None:
        """Write these runs' summary and wf_jobs rows at the next flush."""
        self.dirty.update(run_ids)

    def holds(self, run: RunState) -> bool:
        """True when ``run`` is the state of its run held in memory."""
        return self.runs.get(run.run_id) is run

    def let_go(self, run_ids: Iterable[str]) -> None:
        """Drop runs from memory (another engine holds them now, or they were given back)."""
        for run_id in run_ids:
            self.runs.pop(run_id, None)

    # --- signals ------------------------------------------------------------------------------

    @property
    def posted(self) -> set[tuple[str, str | None]]:
        """(name, key) of signals posted before their wait (only these waits query the table)."""
        return self.signals.posted

    @posted.setter
    def posted(self, keys: set[tuple[str, str | None]]) -> None:
        self.signals.posted = keys

    def find_signal_waits(self, keys: Iterable[tuple[str, str | None]]) -> None:
        """Read the open waits of many signals at once, with their runs' summary rows (two
        queries per signal name, not two per signal), for :meth:`signal_wait`."""
        self.signals.find_waits(keys)

    def clear_signal_waits(self) -> None:
        """Forget the waits read for a round's signals (a commit may move those runs on)."""
        self.signals.waits.clear()

    def signal_wait(self, name: str, key: str | None) -> tuple[Any, ...] | None:
        """The oldest open wait for signal (name, key): run, token, node, then the run's summary
        row when it was read with it (a round's signals are looked up together)."""
        return self.signals.wait(name, key, self._batch.values())

    def find_bookmark(self, kind: str, name: str, key: str | None) -> list[tuple[Any, ...]]:
        """The oldest open bookmark of (kind, name, key), as a list of at most one
        :class:`~wfkit.store.rows.BookmarkRow`."""
        return list(self.signals.find_bookmark(kind, name, key))

    # --- reads ------------------------------------------------------------------------------------

    def view(self, run_id: str) -> RunState | None:
        """The run as its last commit left it, without the lock; None when not published."""
        return self.views.view(run_id)

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
        found = run_row(self.store, run_id) if row is None else RunRow._make(row)
        return None if found is None else load_run(self.store, self.flow, found)

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
        if run is not None:  # its ready steps are dispatched by the scheduler's next round
            ready, suspects = self._hold(run, bool(claimed))
            self._adopted += ready
            self._adopted_suspects += suspects
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
            if run is not None:
                run_ready, run_suspects = self._hold(run, orphaned)
                ready += run_ready
                suspects += run_suspects
        return ready, suspects

    def _hold(self, run: RunState, orphaned: bool) -> tuple[Steps, Steps]:
        """Hold a run read from the store: publish it, end the drains its last owner left, and
        return its ready steps: to dispatch, or suspects when that owner died (``orphaned``:
        they may have been running then)."""
        self.runs[run.run_id] = run
        self.views.publish(run, True)  # as the store holds it: readers need not query
        crashes.abandon_orphans(self, run)
        steps = [(run, t) for t, tok in run.tokens.items() if tok["st"] == TokenState.READY]
        return ([], self.take_up(steps)) if orphaned else (steps, [])

    def _after_staged(self, released: Released) -> None:
        """Writing staged checkpoints outside a scheduler round released only their timers
        (their steps were dispatched when they were staged): wake the writer thread for them."""
        if released.timers and self._wake is not None:
            self._wake()

    def mark_closed(self, running: set[tuple[str, str]]) -> None:
        """The engine closes: flag the snapshots of the runs held here that have no attempt
        running, so that reopening dispatches their ready steps as usual (not as suspects)."""
        with self.lock:
            crashes.mark_closed(self.store, self.runs.values(), running, self.now())

    def reopened(self, runs: Iterable[RunState]) -> None:
        """Clear the close flag of runs taken up again (a crash from now on is not clean)."""
        crashes.reopened(self.store, runs, self.now())

    def take_up(self, steps: Steps) -> Steps:
        """Steps ready in runs whose engine process died: record the crashes, return suspects
        (see :mod:`wfkit.engine.crashes`)."""
        return crashes.take_up(self, steps)

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
        return bool(self._staging)

    def staged_for(self) -> float | None:
        """Seconds until the staged checkpoints are due to be written; None when none wait."""
        return self._staging.due_in()

    def recover(self) -> Steps:
        """Load every live run after a restart; return the steps to dispatch again."""
        if not self.owner.startup_runs():
            return []  # on a shared store runs are claimed as they become free
        live = load_live(self.store, self.flow)
        if [run for run in live.values() if crashes.abandon_orphans(self, run)]:
            self.commit()  # runs that were ending when the engine stopped end now
        ready: Steps = []
        for run in live.values():
            steps = [t for t, tok in run.tokens.items() if tok["st"] == TokenState.READY]
            if steps and run.status not in (RunStatus.SUSPENDED.value,):
                self.runs[run.run_id] = run
                self.views.publish(run, True)
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
            cp.in_flight = lambda token_id, run_id=run.run_id: self.attempt_running(
                run_id, token_id
            )
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
        return self.signals.take_posted(cp, name, key, self.now)

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
        self._new_runs[run.run_id] = NewRun(input_json, actor, self.now(), parent)
        if self.tracing is not None:
            self.tracing.admitted(run, self._new_runs[run.run_id].created, parent, caller)

    def apply_result(self, result: AttemptResult) -> None:
        """Fold an attempt's result into its run (stale results are dropped)."""
        run = self.runs.get(result.run_id)
        token = run.tokens.get(result.token_id) if run else None
        if run is None or token is None or token["att"] != result.attempt:
            return
        if self.tracing is not None:
            self.tracing.ended(result.run_id, result.token_id, result.attempt, result.ended_at)
        route_result(self.checkpoint, self.handlers, run, token, result)

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
            self._stale_timers.append(TimerKey(run_id, token_id, kind))
            if ended:
                self.runs.pop(run_id, None)
                self.owner.release([run_id])
            return
        parked_until = token.get("due")
        if parked_until and datetime.fromisoformat(parked_until) > due:
            return  # fired early: the token was parked again, on a later timer of this kind
        self.runs.setdefault(run_id, run)
        route_timer(self.checkpoint, self.handlers, run, token_id, kind)

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
        force, self._force = force or self._force, False
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
            and all(stageable(cp, parts[r], r in new_runs) for r, cp in batch.items())
            and self._staging.open()
        ):
            self._staging.add(batch, parts)
            return self._release(list(batch.values()))
        released_now = list(batch.values())
        if self._staging:  # written first, in this transaction
            batch, parts = self._staging.take(batch, parts)
        stale, self._stale_timers = self._stale_timers, []
        try:
            self._pending_timers = isolation.write_without(self, batch, parts, new_runs, stale)
        except StoreError as exc:
            one_refused = isinstance(exc, ValueRefused) and len(parts) == 1
            added = None
            if len(parts) >= 2 or one_refused:
                added = isolation.isolate(self, batch, parts, new_runs, stale, unwritable)
            if added is None:
                self.failures += 1
                self.last_failure = str(exc)
                for run_id in batch:  # memory ran ahead of the store: reload from the store
                    self.runs.pop(run_id, None)
                self.signals.taken = []
                isolation.fail_unwritable(self, unwritable, batch, new_runs)
                raise exc
            self._pending_timers = added
        isolation.fail_unwritable(self, unwritable, batch, new_runs)
        return self._release([cp for cp in released_now if cp.run.run_id in parts], new_runs)

    def write_rows(
        self,
        batch: dict[str, Checkpoint],
        parts: dict[str, RunRows],
        new_runs: Mapping[str, NewRun],
        stale: list[TimerKey],
    ) -> list[TimerRow]:
        """Write ``parts`` in one transaction (after the ownership's guard, deleting ``stale``
        timers too); return the timer rows it added."""
        head = self.owner.guard(list(batch.values()), dict(new_runs), summary)
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

    def _rows(self, cp: Checkpoint, new_runs: dict[str, NewRun]) -> RunRows:
        """The rows of one checkpoint (consumes the run's changes and numbers its events)."""
        run_id = cp.run.run_id
        rows = checkpoint_rows(cp, new_runs.get(run_id))
        if rows.update is not None:
            self.dirty.discard(run_id)
            # on a shared store another engine may have written its rows (e.g. blocked)
            if self.owner.shared or run_id in self._jobs_rows:
                self._jobs_rows.discard(run_id)
                rows.clear_jobs = True
        elif run_id not in new_runs and cp.start_status not in TERMINAL_STATUSES:
            self.dirty.add(run_id)  # running: its summary waits for the next flush
        return rows

    def _release(
        self, batch: Iterable[Checkpoint], new_runs: Mapping[str, NewRun] | None = None
    ) -> Released:
        new_runs = new_runs or {}
        released = Released()
        self.signals.settle()
        released.timers = bool(self._pending_timers)
        self.owner.add_timers((r.due_at, r.run_id, r.token, r.kind) for r in self._pending_timers)
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
                self.views.publish(run, True)
            else:
                self.runs.pop(run.run_id, None)  # parked or ended: its rows hold it now
                self.dirty.discard(run.run_id)
                self.views.publish(run, False)
        return released

    def flush_summaries(self) -> None:
        """Write the summary rows of running runs whose checkpoints moved them on (and the
        checkpoints staged by durability="batched" first)."""
        with self.lock:
            if self._staging and not self._batch:
                self._after_staged(self.commit(force=True))
            runs = [self.runs[r] for r in self.dirty if r in self.runs]
            self.dirty.clear()
            now = self.now()
            if self.posted:  # kept signals past their expiry go when the engine is idle
                self.store.write([Statement("delete_expired_signals", [(now,)])])
                self.signals.refresh_posted()
            if not runs:
                return
            blocked = {(run.run_id, token_id) for run, token_id in self._blocked}
            jobs = job_rows(runs, self._inflight, blocked, self._heartbeats, now)
            gone = [(r.run_id,) for r in runs if r.run_id in self._jobs_rows]
            self.store.write(
                [
                    Statement("update_instance", [summary(run, now) for run in runs]),
                    Statement("delete_jobs", gone),
                    Statement("insert_job", jobs),
                ]
            )
            self._jobs_rows |= {row.run_id for row in jobs}
