"""Dispatching ready steps: inline (``run_until_idle``) or on worker threads with a writer thread.

Workers only run activities; they hand results to the writer, which commits everything that is
ready in one transaction and then releases the next steps. The writer sleeps until the next timer
is due or a result arrives — there is no polling loop — and a ``ManualClock`` wakes it on advance.

Callers' writes (start, signal, approve, cancel...) are :class:`Command` objects: each caller hands
its command over and waits for its own outcome, and whichever thread commits next runs every
command queued so far in one transaction with the attempt results of its round (group commit).
With workers running that is the writer thread; without them, the first caller to take the lock
commits for everyone queued behind it.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from wfkit.definition.activities import ActivityRegistry
from wfkit.engine.clock import Clock
from wfkit.engine.executor import (
    AttemptResult,
    AttemptThreads,
    Job,
    failed_result,
    run_attempt,
)
from wfkit.engine.loops import job_cell
from wfkit.engine.queues import Served, step_activity, unserved_queue
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import TokenState
from wfkit.engine.writer import Released, Writer
from wfkit.errors import StoreError, UsageError
from wfkit.store.base import StoreBroken

if TYPE_CHECKING:
    from wfkit.engine.artifact_records import IssuedRecords
    from wfkit.engine.config import EngineConfig
    from wfkit.engine.metrics import EngineMetrics

__all__ = ["Command", "Scheduler"]

log = logging.getLogger("wfkit.engine")

_WAKE = object()
_STOP = object()

T = TypeVar("T")

# signals in one round from which two queries find all their waits and runs (one: a point
# lookup of each is faster; measured here 1.4 ms for one, 1.75 ms for eight together)
SIGNALS_TOGETHER = 2
SUMMARY_DELAY = 0.2  # seconds of quiet before the writer thread writes running runs' summaries
COMMIT_DELAY = 0.001  # longest wait for more callers' commands before a round commits
WRITES = "engine.start(), engine.signal() and the engine's other writes"


class Chore(Protocol):
    """Housekeeping the writer does between its transactions (e.g. retention)."""

    next_at: datetime | None  # when it is next due, on the engine's clock

    def tick(self) -> bool:
        """Do it if due (under the writer lock); True when more waits for the next round."""


class Command(Generic[T]):
    """One caller's write: run under the writer lock by whichever thread commits next.

    ``fn`` changes runs through the writer's checkpoints (it never commits); the caller waits
    until the transaction holding its changes is durable and gets ``fn``'s value, or the
    exception ``fn`` raised (its new runs are then left out: a refused command writes nothing),
    or the store's error when the transaction failed. An ``alone`` command commits on its own
    (it reads the store for rows the same batch could still be writing).
    """

    __slots__ = ("_claim", "alone", "done", "error", "fn", "notify", "signal", "value")

    def __init__(
        self,
        fn: Callable[[Writer], T],
        alone: bool = False,
        signal: tuple[str, str | None] | None = None,
    ) -> None:
        self.fn = fn
        self.alone = alone
        self.signal = signal  # the (name, key) of the wait it looks up, if any
        self.notify: Callable[[], None] | None = None  # called once when it is done
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self._claim = threading.Lock()

    def finish(self) -> None:
        """Mark it done (its value or error is set) and tell an asyncio caller."""
        if self.done.is_set():
            return
        self.done.set()
        if self.notify is not None:
            self.notify()

    def claim(self) -> bool:
        """True for the one thread that runs this command."""
        return self._claim.acquire(blocking=False)

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value


class Scheduler:
    """The ready queue, the workers, and the loop that feeds the writer."""

    def __init__(
        self,
        writer: Writer,
        clock: Clock,
        registry: ActivityRegistry,
        config: EngineConfig,
        records: IssuedRecords | None = None,
    ) -> None:
        self.writer = writer
        self.clock = clock
        self.registry = registry
        self.batch_size = config.batch_size
        self.ready: deque[Job] = deque()
        self.blocked: list[tuple[RunState, str]] = writer.blocked  # shared: wf_jobs shows them
        # steps ready when their run was taken up after its process died: each is dispatched
        # only once a worker is free for it, after a durable start marker (see _mark_suspects)
        self.suspects: deque[tuple[RunState, str]] = deque()
        self._workers = 0
        self.queues: Served = None  # the queues the workers serve (None: all; inline: all)
        self.inflight: dict[tuple[str, str], Job] = writer.inflight
        self.heartbeats: dict[tuple[str, str], datetime] = writer.heartbeats
        self.threads = AttemptThreads()  # timed attempts, each on a thread it may abandon
        self.max_payload: int | None = config.max_payload  # the data document's limit, in bytes
        self.artifacts: str | None = config.artifacts  # the artifact root URL every job carries
        # the engine's artifact records, which ctx.load resolves through
        self.records: IssuedRecords | None = records
        # a DaskExecutor: the attempts it takes run on its cluster, with this registry
        self.executor: Any = config.executor
        if self.executor is not None:
            self.executor.registry = registry
        self.changed = threading.Condition()
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        # rounds of `process` under way: a result leaves `inflight` before the commit that
        # releases the next steps, so `idle()` counts the round as work (both read under _rounds)
        self._processing = 0
        self._rounds = threading.Lock()
        self.inline = 0  # threads inside run_until_idle, driving runs without workers
        self.claimed = 0  # runs the last shared round claimed
        # hand-backs of runs to the shared store, and how many of them a claim round that found
        # nothing more to take has seen: idle() waits until the two agree
        self._handed = 0
        self._looked = 0
        self.claim_chunk = 128
        self._unlisten: Callable[[], None] | None = None
        self._waiting: deque[Command[Any]] = deque()  # callers' commands not yet run
        # threads inside an `engine.transaction()` block: their own commands are refused
        self.blocks: set[int] = set()
        self.closed_reason: str | None = None  # set by engine.close(): what its callers are told
        self._last_callers = 0  # commands the writer thread's last round carried
        self.chore: Chore | None = None  # run after a round's commit when due
        self.metrics: EngineMetrics | None = None  # counters, once metrics are enabled
        writer.wake_hook = self.wake
        clock.subscribe(self.wake)

    def bind(self, chore: Chore) -> None:
        """Run ``chore`` after a round's commit when it is due: the engine's retention, late
        because it makes its first pass once the engine has taken its runs up again, before
        the scheduler takes it over."""
        self.chore = chore

    def shut(self, reason: str) -> None:
        """Refuse callers from now on, telling them ``reason`` (``engine.close()``)."""
        self.closed_reason = reason

    # --- jobs -----------------------------------------------------------------------------------

    def make_job(self, run: RunState, token_id: str) -> Job | None:
        """A job for the token's step, or None when its activity is not registered here."""
        token = run.tokens[token_id]
        node = run.flow.nodes[token["node"]]
        name = node.activity or ""
        policy = node.policy
        if "comp" in token:  # a compensation runs the undo activity under its own policy
            name = node.compensation or ""
            policy = node.compensation_policy or policy.__class__()
        if name not in self.registry:
            return None
        path, item, own = job_cell(run, token)
        timeout = policy.attempt_timeout
        key = (run.run_id, token_id)
        return Job(
            run.run_id,
            token_id,
            token["node"],
            token["att"],
            self.registry.get(name),
            name,
            run.flow.id,
            run.flow.version,
            run.data_json(),
            run.data_version,
            run.flow.data_model,
            run.outputs_json(),
            loop_path=path,
            item_json=item,
            own_output=own,
            timeout=timeout.total_seconds() if timeout else None,
            max_data=self.max_payload,
            heartbeat=lambda: self.heartbeats.__setitem__(key, self.clock.now()),
            input_json=run.input_json,
            output_type=self.registry.output_type(name),
            loop_scopes=run.flow.loops,
            artifacts=self.artifacts,
            records=self.records,
            trace_parent=self.writer.tracing.parent_of(run.run_id) if self.writer.tracing else None,
        )

    def release(self, released: Released) -> None:
        """Queue the steps a commit made ready; cancel attempts it made moot."""
        for run_id, token_id in released.cancel:
            job = self.inflight.get((run_id, token_id))
            if job is not None:
                job.cancel.set()
        for run, token_id in released.dispatch:
            self._enqueue(run, token_id)
        if released.handed:
            # runs left in the shared store: not idle before a claim round has looked at them
            with self._rounds:
                self._handed += 1
        if released.handed or (
            released.timers and threading.current_thread().name != "wfkit-writer"
        ):
            self.wake()  # the writer thread may be asleep past a new timer, or work to claim
        with self.changed:
            self.changed.notify_all()

    def _enqueue(self, run: RunState, token_id: str, granted: bool = False) -> None:
        started = run.tokens[token_id].get("started")
        if started is not None and started != run.tokens[token_id]["att"]:
            # a step that was suspect before: its next attempts are marked too, so that a
            # crash loop is counted even across retry timers
            self.suspects.append((run, token_id))
            self.wake()  # the writer marks it in its next round
            return
        if not granted and self._unserved(run, token_id):
            job = None  # blocked like a missing activity: the pool does not serve its queue
        else:
            job = self.make_job(run, token_id)
        if job is None:
            self.blocked.append((run, token_id))
            if self.writer.owner.shared:
                self.wake()  # the next round gives the run back to engines that have it
            return
        self.inflight[(job.run_id, job.token_id)] = job
        if self.metrics is not None:
            self.metrics.on_start(job)
        if self._threads:
            self._jobs.put(job)
        else:
            self.ready.append(job)

    def suspect(self, steps: list[tuple[RunState, str]]) -> None:
        """Queue steps that may have been running when their engine process died."""
        self.suspects.extend(steps)
        if steps:
            self.wake()

    def _mark_suspects(self) -> None:
        """Release suspect steps to free workers, each with a start marker in this checkpoint.

        The marker (token field ``started`` = the attempt) is committed before the attempt is
        dispatched, and only as many are released as workers are free (one at a time inline),
        so a marked attempt is always running, never merely queued, when a process dies: the
        next recovery counts it as crashed (:meth:`Writer.take_up`). Call under the writer lock.
        """
        free = max(self._workers, 1) - len(self.inflight)
        writer = self.writer
        while self.suspects and free > 0:
            run, token_id = self.suspects.popleft()
            token = run.tokens.get(token_id)
            if (
                token is None
                or token["st"] != TokenState.READY
                or writer.runs.get(run.run_id) is not run
                or (run.run_id, token_id) in self.inflight
            ):
                continue
            if step_activity(run, token) not in self.registry or self._unserved(run, token_id):
                self.blocked.append((run, token_id))  # a blocked step is not marked: it waits
                continue
            cp = writer.checkpoint(run)
            cp.set_token(token_id, started=token["att"])
            cp.dispatch.append(token_id)
            writer.force = True  # the marker is durable before the attempt starts
            free -= 1

    def _unserved(self, run: RunState, token_id: str) -> str | None:
        """The queue of a ready step when the workers do not serve it, else None."""
        if self.queues is None:  # every queue is served (the common case: no lookup)
            return None
        return unserved_queue(self.registry, self.queues, run, run.tokens[token_id])

    def retry_blocked(self) -> None:
        """Queue steps whose activity has been registered since they became ready."""
        blocked = list(self.blocked)
        self.blocked.clear()
        self.writer.owner.forget_back_off()  # runs given back: this process may have them now
        for run, token_id in blocked:
            token = run.tokens.get(token_id)
            if (
                token is not None
                and token["st"] == TokenState.READY
                and self.writer.runs.get(run.run_id) is run
            ):
                self._enqueue(run, token_id)

    # --- callers' writes ------------------------------------------------------------------------

    def submit(
        self,
        fn: Callable[[Writer], T],
        *,
        alone: bool = False,
        signal: tuple[str, str | None] | None = None,
    ) -> T:
        """Run ``fn`` in the next group commit and return its value once it is durable."""
        self.refuse_in_block(WRITES)
        self.refuse_closed()
        command: Command[T] = Command(fn, alone, signal)
        self._waiting.append(command)
        if self._threads and threading.current_thread() not in self._threads:
            self._results.put(_WAKE)  # the writer thread runs it in its next round
            while not command.done.wait(0.5):
                if not self._threads:  # stopped meanwhile: run it here
                    break
            if command.done.is_set():
                return command.outcome()
        with self.writer.lock:
            if command.done.is_set():
                return command.outcome()
            commands = self._take_commands()
            released = self._run_commands(commands)
        self._finish(commands, released)
        return command.outcome()

    async def submit_async(
        self,
        fn: Callable[[Writer], T],
        *,
        alone: bool = False,
        signal: tuple[str, str | None] | None = None,
    ) -> T:
        """:meth:`submit` for an asyncio caller: awaits the writer thread's round without
        holding a thread (without workers, the blocking path runs on a thread)."""
        self.refuse_in_block(WRITES)
        self.refuse_closed()
        if not self._threads:
            return await asyncio.to_thread(self.submit, fn, alone=alone, signal=signal)
        loop = asyncio.get_running_loop()
        ready = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        def notify() -> None:
            loop.call_soon_threadsafe(wake)

        command: Command[T] = Command(fn, alone, signal)
        command.notify = notify
        self._waiting.append(command)
        self._results.put(_WAKE)
        if not self._threads:  # stopped meanwhile: whoever stops runs what is queued
            self._run_left()
        await ready
        return command.outcome()

    def refuse_closed(self) -> None:
        """Raise UsageError, saying why, once the engine is closed."""
        if self.closed_reason is not None:
            raise UsageError(self.closed_reason)

    def refuse_in_block(self, what: str) -> None:
        """Raise UsageError on a thread inside an ``engine.transaction()`` block: the engine's
        own writes would commit outside the block's transaction, or wait for the writer the
        block holds."""
        if threading.get_ident() in self.blocks:
            raise UsageError(
                f"{what} cannot run inside a `with engine.transaction() as tx:` block on the "
                "same thread: it would commit outside the block's transaction (or wait for the "
                "writer the block holds). Start runs with tx.start(...) / tx.start_many(...) "
                "inside the block; make other engine calls after it"
            )

    def _run_left(self) -> None:
        """Run the commands still queued (the writer thread has stopped)."""
        with self.writer.lock:
            commands = self._take_commands()
            if not commands:
                return
            released = self._run_commands(commands)
        self._finish(commands, released)

    def _take_commands(self) -> list[Command[Any]]:
        """The commands queued so far that no other thread has taken."""
        taken: list[Command[Any]] = []
        while self._waiting:
            try:
                command = self._waiting.popleft()
            except IndexError:
                break
            if command.claim():
                taken.append(command)
        return taken

    def _run_commands(self, commands: list[Command[Any]]) -> Released:
        """Run ``commands`` into the batch and commit it (under the writer lock); each one
        learns its outcome once the commit is durable."""
        released = Released()
        pending: list[Command[Any]] = []
        signals = [c.signal for c in commands if c.signal is not None and not c.alone]
        try:
            if len(signals) >= SIGNALS_TOGETHER:  # one query finds them all
                self.writer.find_signal_waits(signals)
        except StoreError as exc:
            for command in commands:
                command.error = exc
                command.finish()
            return released
        for command in commands:
            if command.alone:
                released.merge(self._commit_commands(pending))
                pending = []
                self.writer.signal_waits.clear()  # its commit may move those runs on
                self._run_one(command)
                released.merge(self._commit_commands([command]))
            else:
                self._run_one(command)
                pending.append(command)
        self.writer.signal_waits.clear()
        released.merge(self._commit_commands(pending))
        return released

    def _run_one(self, command: Command[Any]) -> None:
        writer = self.writer
        before = set(writer.batch_runs())
        try:
            command.value = command.fn(writer)
        except BaseException as exc:  # the caller gets it; its new runs are not written
            command.error = exc
            writer.forget_new(set(writer.batch_runs()) - before)
            command.finish()

    def _commit_commands(self, commands: list[Command[Any]]) -> Released:
        """Commit the batch; the commands whose changes it holds learn whether it stuck."""
        failures = self.writer.failures
        try:
            released = self._commit_with_retry(force=bool(commands))
        except BaseException as exc:
            for command in commands:
                command.error = exc
                command.finish()
            raise
        if self.writer.failures != failures:  # a failed try dropped their changes
            for command in commands:
                command.error = StoreError(
                    "the store refused the transaction holding this change, so it was not "
                    f"made ({self.writer.last_failure}); nothing changed: try again"
                )
                command.finish()
        for command in commands:
            command.finish()
        return released

    def _finish(self, commands: list[Command[Any]], released: Released) -> None:
        self.release(released)
        for command in commands:
            command.finish()

    # --- one round ------------------------------------------------------------------------------

    def process(self, results: list[AttemptResult]) -> None:
        """Apply results, fire due timers and run the callers' commands, commit once, release."""
        with self._rounds:
            self._processing += 1
        try:
            self._process(results)
        finally:
            with self._rounds:
                self._processing -= 1

    def _process(self, results: list[AttemptResult]) -> None:
        writer = self.writer
        claimed: list[tuple[RunState, str]] = []
        with self._rounds:
            handed = self._handed
        with writer.lock:
            for result in results:
                job = self.inflight.pop((result.run_id, result.token_id), None)
                if self.metrics is not None and job is not None:
                    self.metrics.on_end(job, result)
                self.heartbeats.pop((result.run_id, result.token_id), None)
                writer.apply_result(result)
            for due, run_id, token_id, kind in self._due_timers():
                writer.fire_timer(due, run_id, token_id, kind)
            self._mark_suspects()
            commands = self._take_commands()
            self._last_callers = len(commands)
            if self.metrics is not None:
                self.metrics.on_round(len(results) + len(commands))
            try:
                released = self._run_commands(commands)
            finally:
                for command in commands:
                    command.finish()  # the failure, if any, is theirs too
            claimed = self._claim_round()
            if self.chore is not None and not writer.pending and self.chore.tick():
                self.wake()  # more to do: another round soon, after the work at hand
        self._finish(commands, released)
        granted = self._granted(claimed)
        for run, token_id in claimed:
            self._enqueue(run, token_id, (run.run_id, token_id) in granted)
        self.claimed = len(claimed)
        if not claimed:
            with self._rounds:
                self._looked = max(self._looked, handed)

    def _due_timers(self) -> list[tuple[datetime, str, str, str]]:
        return self.writer.owner.due_timers(self.clock.now(), self.batch_size)

    def _claim_round(self) -> list[tuple[RunState, str]]:
        """Give back runs blocked here (shared stores), renew what this engine holds (when
        due), take runs that nobody advances, and hand out the steps of runs taken meanwhile."""
        self._give_back_blocked()
        for run_id in self.writer.owner.renew(list(self.writer.runs)):
            self.writer.runs.pop(run_id, None)  # another engine holds it now
        # claim in modest chunks so that several engines share a burst of new runs
        room = min(max(self.batch_size - len(self.inflight), 0), self.claim_chunk)
        ready, suspects = self.writer.claim_waiting_work(room) if room else ([], [])
        # runs taken since the last round to fire a timer or run a command
        runs = self.writer.runs
        ready += [(r, t) for r, t in self.writer.adopted if runs.get(r.run_id) is r]
        suspects += [(r, t) for r, t in self.writer.adopted_suspects if runs.get(r.run_id) is r]
        self.writer.adopted, self.writer.adopted_suspects = [], []
        self.suspects.extend(suspects)
        if suspects:
            self._mark_suspects()
        if self.writer.pending:  # crashes recorded, start markers: durable before dispatch
            ready += self._commit_with_retry().dispatch
        return ready

    def _granted(self, claimed: list[tuple[RunState, str]]) -> set[tuple[str, str]]:
        """Claimed steps that run here although this pool does not serve their queue: the
        steps of a run handed over for a queue served here, none of whose ready steps belongs
        to a served queue in this process's registry (the registries of the two engines file
        the activity in different queues). Running them rather than handing the run back
        means a hand-over is always followed by an attempt: two engines never pass a run
        back and forth."""
        runs = self.writer.owner.take_granted()
        if not runs or self.queues is None:
            return set()
        steps: dict[str, tuple[RunState, list[str]]] = {}
        for run, token_id in claimed:
            if run.run_id in runs:
                steps.setdefault(run.run_id, (run, []))[1].append(token_id)
        granted: set[tuple[str, str]] = set()
        for run_id, (run, tokens) in steps.items():
            if all(self._unserved(run, t) for t in tokens):
                queues = sorted({str(self._unserved(run, t)) for t in tokens})
                log.warning(
                    "run %s was handed over to this engine for a queue it serves, but here its "
                    "ready steps belong to %s: the engines' registries disagree on the queue of "
                    "an activity; running them here",
                    run_id,
                    ", ".join(repr(q) for q in queues),
                )
                granted |= {(run_id, t) for t in tokens}
        return granted

    def _give_back_blocked(self) -> None:
        """Release the runs all of whose ready steps wait for an activity not registered in
        this process, or for a queue these workers do not serve (shared stores; the only
        engine of a database keeps them). A run with a step of an unserved queue is handed
        over for that queue: only an engine serving it claims it (:meth:`Leases.hand_over`).
        The others are claimed again only after a back-off, so that an engine that has the
        activity takes them. Their wf_jobs rows say ``blocked`` meanwhile."""
        owner = self.writer.owner
        if not owner.shared or not self.blocked:
            return
        runs = self.writer.runs
        blocked = {(run.run_id, t) for run, t in self.blocked if runs.get(run.run_id) is run}
        stuck = {
            run_id
            for run_id in {run_id for run_id, _ in blocked}
            if all(
                (run_id, t) in blocked
                for t, tok in runs[run_id].tokens.items()
                if tok["st"] == TokenState.READY
            )
        }
        if not stuck:
            return
        self.writer.dirty.update(stuck)
        self.writer.flush_summaries()
        wanted: dict[str, str] = {}  # run -> the first queue its steps wait for
        for run_id, token_id in sorted(blocked):
            queue = self._unserved(runs[run_id], token_id) if run_id in stuck else None
            if queue is not None:
                wanted.setdefault(run_id, queue)
        owner.back_off([run_id for run_id in stuck if run_id not in wanted])
        owner.hand_over(sorted(wanted.items()))
        for run_id in stuck:
            runs.pop(run_id, None)
        self.blocked[:] = [(run, t) for run, t in self.blocked if run.run_id not in stuck]
        log.info(
            "runs given back (activities not registered here, or queues not served): %s",
            ", ".join(sorted(stuck)),
        )

    def _commit_with_retry(self, force: bool = False) -> Released:
        delay = 0.05
        for attempt in range(6):
            try:
                return self.writer.commit(force)
            except StoreBroken:
                raise  # its file is gone: trying again cannot help
            except StoreError:
                if attempt == 5:
                    raise
                log.warning("store write failed; the steps will run again", exc_info=True)
                time.sleep(delay)
                delay *= 2
                self._reload_lost()
        raise AssertionError("unreachable")

    def _reload_lost(self) -> None:
        """After a failed write, runs dropped from memory come back from the store."""
        for (run_id, _token), _job in list(self.inflight.items()):
            if run_id not in self.writer.runs:
                self.inflight.pop((run_id, _token), None)
        for run, token_id in self.writer.recover():
            if (run.run_id, token_id) not in self.inflight:
                self._enqueue(run, token_id)

    # --- inline driving -------------------------------------------------------------------------

    def run_until_idle(self, timeout: float | None = None) -> None:
        """Run ready steps and due timers on this thread until nothing is left to do now.

        With ``timeout`` (seconds), also wait for timers due within it (real clock only).
        """
        if self._threads:
            self.wait_idle(timeout)
            return
        with self._rounds:
            self.inline += 1
        try:
            self._run_inline(timeout)
        finally:
            with self._rounds:
                self.inline -= 1

    def _run_inline(self, timeout: float | None) -> None:
        deadline = time.monotonic() + timeout if timeout else None
        self.retry_blocked()
        while True:
            if not self.ready:
                self.process([])  # fire due timers, take free runs, release a suspect step
            jobs = [self.ready.popleft() for _ in range(min(self.batch_size, len(self.ready)))]
            now = self.clock.now()
            due = self._next_due()
            if not jobs and self.claimed:
                continue
            if not jobs and self._releasable():
                continue
            if not jobs and self.writer.staged:
                with self.writer.lock:
                    released = self._commit_with_retry(force=True)
                self.release(released)
                continue
            if not jobs and (due is None or due > now):
                if deadline is None or due is None or self.clock.manual:
                    break
                wait = (due - now).total_seconds()
                if time.monotonic() + wait > deadline:
                    break
                time.sleep(max(wait, 0))
                continue
            self.process(self._run_jobs(jobs))
        self.writer.flush_summaries()
        if self.blocked:
            names = sorted(
                {
                    run.flow.nodes[run.tokens[t]["node"]].activity or "?"
                    for run, t in self.blocked
                    if t in run.tokens
                }
            )
            log.warning(
                "steps wait for activities not registered in this process: %s", ", ".join(names)
            )

    def _run_jobs(self, jobs: list[Job]) -> list[AttemptResult]:
        """Run ``jobs`` here, but those the executor takes, which run on its cluster meanwhile."""
        if self.executor is None:
            return [run_attempt(job, self.clock.now, self.threads) for job in jobs]
        remote: list[Job] = []
        here: list[Job] = []
        for job in jobs:
            (remote if self.executor.takes(job) else here).append(job)
        box: queue.SimpleQueue[AttemptResult] = queue.SimpleQueue()
        for job in remote:
            self.executor.submit(job, box.put)
        results = [run_attempt(job, self.clock.now, self.threads) for job in here]
        return results + [box.get() for _ in remote]

    # --- threads --------------------------------------------------------------------------------

    def start(self, threads: int, queues: Served = None) -> None:
        """Start ``threads`` workers serving ``queues`` (None: every queue), and the writer
        thread. One pool per engine: a second call is refused until :meth:`stop`."""
        if self._threads:
            serving = "every queue" if self.queues is None else sorted(self.queues)
            raise UsageError(
                f"workers are already running (serving {serving}); an engine has one worker "
                "pool: call engine.stop() first, then start_workers again with every queue "
                "it should serve"
            )
        if threads < 1:
            raise UsageError(f"threads must be 1 or more, got {threads}")
        self.queues = queues
        self.writer.owner.serve(queues)
        self._workers = threads
        for _ in range(threads):
            self._threads.append(
                threading.Thread(target=self._work, name="wfkit-worker", daemon=True)
            )
        writer = threading.Thread(target=self._write_loop, name="wfkit-writer", daemon=True)
        self._threads.append(writer)
        self._hand_ready_to_workers()
        for thread in self._threads:
            thread.start()
        self._unlisten = self.writer.owner.listen(self.wake)  # work made by other engines
        self.wake()  # a first round at once: claim what is already waiting
        self.retry_blocked()

    def _hand_ready_to_workers(self) -> None:
        """Jobs queued inline go to the workers, but those of queues the pool does not serve:
        they are blocked (and their wf_jobs rows say so)."""
        while self.ready:
            job = self.ready.popleft()
            run = self.writer.runs.get(job.run_id)
            if run is not None and self._unserved(run, job.token_id):
                self.inflight.pop((job.run_id, job.token_id), None)
                self.blocked.append((run, job.token_id))
                self.writer.dirty.add(run.run_id)
                continue
            self._jobs.put(job)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the workers after their current attempts, then the writer."""
        if not self._threads:
            return
        workers = [t for t in self._threads if t.name == "wfkit-worker"]
        self._unqueue()  # jobs not started stay for later: the workers stop after their attempts
        for _ in workers:
            self._jobs.put(_STOP)
        for t in workers:
            t.join(timeout)
        if self.executor is not None:  # attempts out on the cluster end before the writer
            self.executor.drain(timeout)
        self._results.put(_STOP)
        for t in self._threads:
            t.join(timeout)
        self._threads = []
        self._workers = 0
        self.queues = None  # inline driving runs every queue
        self.writer.owner.serve(None)
        self._run_left()  # commands queued for the writer thread after its last round
        self._unqueue()
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        self.writer.flush_summaries()
        self.release_all()

    def _unqueue(self) -> None:
        """Jobs not started go back to the inline queue."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not _STOP:
                self.ready.append(job)

    def release_all(self) -> None:
        """Give back every run held here, so other engines take them at once (shared stores)."""
        owner = self.writer.owner
        if not owner.shared:
            return  # the only engine of its database keeps its runs until it closes
        with self.writer.lock:
            held = list(self.writer.runs)
            self.writer.flush_summaries()
            owner.release(held)
            self.writer.runs.clear()
            self.ready.clear()
            self.inflight.clear()
            self.suspects.clear()
            self.writer.adopted, self.writer.adopted_suspects = [], []

    def queue_depth(self) -> int:
        """Attempts ready and not yet taken by a worker (inline or threaded)."""
        return len(self.ready) + self._jobs.qsize()

    def attempts_running(self) -> set[tuple[str, str]]:
        """(run, token) of attempts started and not ended (after :meth:`stop`: those that did
        not end in time)."""
        queued = {(job.run_id, job.token_id) for job in self.ready}
        return {key for key in self.inflight if key not in queued}

    @property
    def running(self) -> bool:
        """True while worker threads run."""
        return bool(self._threads)

    def wake(self) -> None:
        """Wake the writer thread (a nearer timer, or the manual clock moved)."""
        if self._threads:
            self._results.put(_WAKE)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            if self.executor is not None and self.executor.takes(job):
                self.executor.submit(job, self._results.put)  # its result comes back there
                continue
            try:
                result = run_attempt(job, self.clock.now, self.threads)
            except BaseException:  # the worker survives anything an attempt throws
                result = failed_result(job, traceback.format_exc(), self.clock.now())
            self._results.put(result)

    def _write_loop(self) -> None:
        # summary rows of running runs are written once the writer has had nothing to do for
        # SUMMARY_DELAY (readers in this process flush them first): a steady trickle of work
        # commits one transaction per round, not two
        flush_at: float | None = None
        while True:
            timeout = self._sleep_for()
            if flush_at is not None:
                left = max(flush_at - time.monotonic(), 0.0)
                timeout = left if timeout is None else min(timeout, left)
            try:
                first = self._results.get(timeout=timeout)
            except queue.Empty:
                first = _WAKE
            items = [first]
            while len(items) < self.batch_size * 4:
                try:
                    items.append(self._results.get_nowait())
                except queue.Empty:
                    break
            self._gather_callers()
            stop = any(i is _STOP for i in items)
            results = [i for i in items if isinstance(i, AttemptResult)]
            try:
                self.process(results)
                if stop or (flush_at is not None and time.monotonic() >= flush_at):
                    flush_at = None
                    self.writer.flush_summaries()
                elif flush_at is None and self._results.empty():
                    flush_at = time.monotonic() + SUMMARY_DELAY
            except StoreBroken as exc:  # every round fails alike: no traceback each time
                log.error("the writer cannot commit: %s", exc)
            except Exception:
                log.exception("the writer failed to commit; it will try again")
            with self.changed:
                self.changed.notify_all()
            if stop:
                return

    def _gather_callers(self) -> None:
        """Group commit across callers: when the last round carried callers' commands and
        fewer are queued now, wait up to COMMIT_DELAY for the others (they are between their
        last answer and their next command) so that one transaction carries them all with the
        attempt results at hand, rather than a round of results, then one of commands."""
        if len(self._waiting) >= self._last_callers:  # all there (or no callers lately)
            return
        deadline = time.monotonic() + COMMIT_DELAY
        while len(self._waiting) < self._last_callers and time.monotonic() < deadline:
            time.sleep(0.0001)

    def _next_due(self) -> datetime | None:
        return self.writer.owner.next_due()

    def _sleep_for(self) -> float | None:
        """How long the writer thread may sleep: until the next timer (a manual clock wakes
        it when moved) or the ownership's own beat, whichever comes first."""
        staged = self.writer.staged_for()
        if staged is not None:
            return staged  # staged checkpoints are written once their window is over
        due = self._next_due()
        chore = self.chore.next_at if self.chore is not None else None
        if chore is not None and (due is None or chore < due):
            due = chore
        beat = self.writer.owner.wake_every()
        until_due: float | None = None
        if due is not None:
            now = self.clock.now()
            if due <= now:
                return 0.0
            until_due = None if self.clock.manual else (due - now).total_seconds()
        if until_due is None or beat is None:
            return until_due if beat is None else beat
        return min(until_due, beat)

    def idle(self) -> bool:
        """True when nothing is queued, in flight, being processed or due."""
        due = self._next_due()
        with self._rounds:
            busy = self._processing or self.inflight or self.ready or self.writer.staged
            busy = busy or (self._handed > self._looked and bool(self._threads))
        return not busy and not self._releasable() and (due is None or due > self.clock.now())

    def _releasable(self) -> bool:
        """True when suspect steps wait for a marker (a blocked one never becomes ready)."""
        return any(
            (token := run.tokens.get(t)) is not None
            and token["st"] == TokenState.READY
            and self.writer.runs.get(run.run_id) is run
            for run, t in self.suspects
        )

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until the workers are idle (or ``timeout`` passes); True when idle."""
        deadline = time.monotonic() + timeout if timeout is not None else None
        with self.changed:
            while not self.idle():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.changed.wait(left if left is not None else 1.0)
        self.writer.flush_summaries()
        return True
