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
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from wfkit.definition.activities import ActivityRegistry
from wfkit.engine.claims import give_back_blocked, granted_steps
from wfkit.engine.clock import Clock
from wfkit.engine.commands import Command, CommandQueue, commit_with_retry, run_commands
from wfkit.engine.dispatch import Workers, blocked_activities, make_job, refuse_pool, run_jobs
from wfkit.engine.executor import AttemptResult, AttemptThreads, Job
from wfkit.engine.pacing import SUMMARY_DELAY, Chore, Inbox, gather_callers, sleep_for
from wfkit.engine.queues import Served, step_activity, unserved_queue
from wfkit.engine.state import RunState
from wfkit.engine.suspects import Suspects
from wfkit.engine.vocabulary import TokenState
from wfkit.engine.writer import Released, Writer
from wfkit.store.base import StoreBroken

if TYPE_CHECKING:
    from wfkit.engine.artifact_records import IssuedRecords
    from wfkit.engine.config import EngineConfig
    from wfkit.engine.metrics import EngineMetrics

__all__ = ["Command", "Scheduler"]

log = logging.getLogger("wfkit.engine")

T = TypeVar("T")

WRITES = "engine.start(), engine.signal() and the engine's other writes"


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
        # steps ready whose activity is not registered here, or whose queue is not served
        self.blocked: list[tuple[RunState, str]] = []
        # steps of runs taken up after their process died: each waits for a free worker and a
        # durable start marker (see _mark_suspects)
        self.suspects = Suspects()
        self.queues: Served = None  # the queues the workers serve (None: all; inline: all)
        self.inflight: dict[tuple[str, str], Job] = {}
        self.heartbeats: dict[tuple[str, str], datetime] = {}
        self.threads = AttemptThreads()  # timed attempts, each on a thread it may abandon
        self.max_payload: int | None = config.max_payload  # the data document's limit, in bytes
        self.artifacts: str | None = config.artifacts  # the artifact root URL every job carries
        self.records: IssuedRecords | None = records  # the artifacts ctx.load resolves through
        self.executor: Any = config.executor  # a DaskExecutor: attempts run on its cluster
        if self.executor is not None:
            self.executor.registry = registry
        self.changed = threading.Condition()
        self._inbox = Inbox()  # the writer thread's: results, wakes, the stop
        self._pool = Workers(self._inbox.put, lambda: self.executor, clock.now, self.threads)
        self._threads: list[threading.Thread] = []  # the workers and the writer thread
        # rounds of `process` under way: a result leaves `inflight` before the commit that
        # releases the next steps, so `idle()` counts the round as work (both read under _rounds)
        self._processing = 0
        self._rounds = threading.Lock()
        self.inline = 0  # threads inside run_until_idle, driving runs without workers
        self.claimed = 0  # runs the last shared round claimed
        # hand-backs of runs to the shared store, and how many a claim round that found nothing
        # more has seen: idle() waits until the two agree
        self._handed = 0
        self._looked = 0
        self.claim_chunk = 128
        self._unlisten: Callable[[], None] | None = None
        self.commands = CommandQueue()  # callers' commands not yet run
        self._last_callers = 0  # commands the writer thread's last round carried
        self.chore: Chore | None = None  # run after a round's commit when due
        self.metrics: EngineMetrics | None = None  # counters, once metrics are enabled
        # the writer reads what runs and what is blocked here for the wf_jobs rows
        writer.watch_attempts(self.inflight, self.heartbeats, self.blocked)
        writer.on_new_timers(self.wake)
        clock.subscribe(self.wake)

    def bind(self, chore: Chore) -> None:
        """Run ``chore`` (the engine's retention) after a round's commit when it is due; late:
        it makes its first pass once the engine has taken its runs up again."""
        self.chore = chore

    def shut(self, reason: str) -> None:
        """Refuse callers from now on, telling them ``reason`` (``engine.close()``)."""
        self.commands.closed_reason = reason

    @property
    def blocks(self) -> set[int]:
        """Threads inside an ``engine.transaction()`` block: their own commands are refused."""
        return self.commands.blocks

    @property
    def closed_reason(self) -> str | None:
        """Set by engine.close(): what its callers are told."""
        return self.commands.closed_reason

    # --- jobs -----------------------------------------------------------------------------------

    def make_job(self, run: RunState, token_id: str) -> Job | None:
        """A job for the token's step, or None when its activity is not registered here."""
        return make_job(
            run,
            token_id,
            self.registry,
            self._beat,
            self.max_payload,
            self.artifacts,
            self.records,
            self.writer.tracing,
        )

    def _beat(self, key: tuple[str, str]) -> None:
        self.heartbeats[key] = self.clock.now()

    def release(self, released: Released) -> None:
        """Queue the steps a commit made ready; cancel attempts it made moot."""
        for run_id, token_id in released.cancel:
            job = self.inflight.get((run_id, token_id))
            if job is not None:
                job.cancel.set()
        for run, token_id in released.dispatch:
            self.enqueue(run, token_id)
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

    def enqueue(self, run: RunState, token_id: str, granted: bool = False) -> None:
        """Queue a ready step: to a worker, inline, or blocked (no activity or queue here)."""
        started = run.tokens[token_id].get("started")
        if started is not None and started != run.tokens[token_id]["att"]:
            # a step that was suspect before: its next attempts are marked too, so that a
            # crash loop is counted even across retry timers
            self.suspects.add([(run, token_id)])
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
            self._pool.put(job)
        else:
            self.ready.append(job)

    def suspect(self, steps: list[tuple[RunState, str]]) -> None:
        """Queue steps that may have been running when their engine process died."""
        self.suspects.add(steps)
        if steps:
            self.wake()

    def _mark_suspects(self) -> None:
        """Release suspect steps to free workers (one at a time inline), each with a durable
        start marker (see :mod:`wfkit.engine.suspects`). Call under the writer lock."""
        free = max(len(self._pool), 1) - len(self.inflight)
        self.blocked += self.suspects.mark(
            self.writer,
            free,
            lambda run_id, token_id: (run_id, token_id) in self.inflight,
            lambda run, token_id: (
                step_activity(run, run.tokens[token_id]) not in self.registry
                or bool(self._unserved(run, token_id))
            ),
        )

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
            if token is not None and token["st"] == TokenState.READY and self.writer.holds(run):
                self.enqueue(run, token_id)

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
        self.commands.put(command)
        if self._threads and threading.current_thread() not in self._threads:
            self._inbox.wake()  # the writer thread runs it in its next round
            while not command.done.wait(0.5):
                if not self._threads:  # stopped meanwhile: run it here
                    break
            if command.done.is_set():
                return command.outcome()
        with self.writer.lock:
            if command.done.is_set():
                return command.outcome()
            commands = self.commands.take()
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
        self.commands.put(command)
        self._inbox.wake()
        if not self._threads:  # stopped meanwhile: whoever stops runs what is queued
            self._run_left()
        await ready
        return command.outcome()

    def refuse_closed(self) -> None:
        """Raise UsageError, saying why, once the engine is closed."""
        self.commands.refuse_closed()

    def refuse_in_block(self, what: str) -> None:
        """Raise UsageError on a thread inside an ``engine.transaction()`` block."""
        self.commands.refuse_in_block(what)

    def _run_left(self) -> None:
        """Run the commands still queued (the writer thread has stopped)."""
        with self.writer.lock:
            commands = self.commands.take()
            released = self._run_commands(commands) if commands else None
        if released is not None:
            self._finish(commands, released)

    def _run_commands(self, commands: list[Command[Any]]) -> Released:
        """Run ``commands`` into the batch and commit it (under the writer lock)."""
        return run_commands(commands, self.writer, self.commit_with_retry)

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
            commands = self.commands.take()
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
        granted = granted_steps(self.writer, claimed, self.queues, self._unserved)
        for run, token_id in claimed:
            self.enqueue(run, token_id, (run.run_id, token_id) in granted)
        self.claimed = len(claimed)
        if not claimed:
            with self._rounds:
                self._looked = max(self._looked, handed)

    def _due_timers(self) -> list[tuple[datetime, str, str, str]]:
        return self.writer.owner.due_timers(self.clock.now(), self.batch_size)

    def _claim_round(self) -> list[tuple[RunState, str]]:
        """Give back runs blocked here (shared stores), renew what this engine holds (when
        due), take runs that nobody advances, and hand out the steps of runs taken meanwhile."""
        writer = self.writer
        stuck = give_back_blocked(writer, self.blocked, self._unserved)
        if stuck:
            self.blocked[:] = [(run, t) for run, t in self.blocked if run.run_id not in stuck]
        writer.let_go(writer.owner.renew(list(writer.runs)))  # another engine holds them now
        # claim in modest chunks so that several engines share a burst of new runs
        room = min(max(self.batch_size - len(self.inflight), 0), self.claim_chunk)
        ready, suspects = writer.claim_waiting_work(room) if room else ([], [])
        # runs taken since the last round to fire a timer or run a command
        adopted, adopted_suspects = writer.take_adopted()
        ready += [(r, t) for r, t in adopted if writer.holds(r)]
        suspects += [(r, t) for r, t in adopted_suspects if writer.holds(r)]
        self.suspects.add(suspects)
        if suspects:
            self._mark_suspects()
        if writer.pending:  # crashes recorded, start markers: durable before dispatch
            ready += self.commit_with_retry().dispatch
        return ready

    def commit_with_retry(self, force: bool = False) -> Released:
        """Commit the batch (durably with ``force``), retrying what can be (under the lock)."""
        return commit_with_retry(self.writer, force, self._reload_lost, log)

    def _reload_lost(self) -> None:
        """After a failed write, runs dropped from memory come back from the store."""
        for (run_id, _token), _job in list(self.inflight.items()):
            if run_id not in self.writer.runs:
                self.inflight.pop((run_id, _token), None)
        for run, token_id in self.writer.recover():
            if (run.run_id, token_id) not in self.inflight:
                self.enqueue(run, token_id)

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
            due = self.writer.owner.next_due()
            if not jobs and self.claimed:
                continue
            if not jobs and self.suspects.releasable(self.writer):
                continue
            if not jobs and self.writer.staged:
                with self.writer.lock:
                    released = self.commit_with_retry(force=True)
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
            names = ", ".join(blocked_activities(self.blocked))
            log.warning("steps wait for activities not registered in this process: %s", names)

    def _run_jobs(self, jobs: list[Job]) -> list[AttemptResult]:
        """Run ``jobs`` here, but those the executor takes, which run on its cluster meanwhile."""
        return run_jobs(jobs, self.executor, self.clock.now, self.threads)

    # --- threads --------------------------------------------------------------------------------

    def start(self, threads: int, queues: Served = None) -> None:
        """Start ``threads`` workers serving ``queues`` (None: every queue), and the writer
        thread. One pool per engine: a second call is refused until :meth:`stop`."""
        refuse_pool(threads, self.queues if self._threads else False)
        self.queues = queues
        self.writer.owner.serve(queues)
        writer = threading.Thread(target=self._write_loop, name="wfkit-writer", daemon=True)
        self._threads = [*self._pool.create(threads), writer]
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
                self.writer.mark_dirty([run.run_id])
                continue
            self._pool.put(job)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the workers after their current attempts, then the writer."""
        if not self._threads:
            return
        # jobs not started stay for later: the workers stop after their attempts
        self.ready.extend(self._pool.stop(timeout))
        if self.executor is not None:  # attempts out on the cluster end before the writer
            self.executor.drain(timeout)
        self._inbox.stop()
        for t in self._threads:
            t.join(timeout)
        self._threads = []
        self.queues = None  # inline driving runs every queue
        self.writer.owner.serve(None)
        self._run_left()  # commands queued for the writer thread after its last round
        self.ready.extend(self._pool.unqueue())
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        self.writer.flush_summaries()
        self.release_all()

    def release_all(self) -> None:
        """Give back every run held here, so other engines take them at once (shared stores)."""
        owner = self.writer.owner
        if not owner.shared:
            return  # the only engine of its database keeps its runs until it closes
        with self.writer.lock:
            held = list(self.writer.runs)
            self.writer.flush_summaries()
            owner.release(held)
            self.writer.let_go(list(self.writer.runs))
            self.ready.clear()
            self.inflight.clear()
            self.suspects.clear()
            self.writer.take_adopted()

    def queue_depth(self) -> int:
        """Attempts ready and not yet taken by a worker (inline or threaded)."""
        return len(self.ready) + self._pool.qsize()

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
            self._inbox.wake()

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
            results, stop = self._inbox.collect(timeout, self.batch_size * 4)
            gather_callers(lambda: len(self.commands), self._last_callers)
            try:
                self.process(results)
                if stop or (flush_at is not None and time.monotonic() >= flush_at):
                    flush_at = None
                    self.writer.flush_summaries()
                elif flush_at is None and self._inbox.empty():
                    flush_at = time.monotonic() + SUMMARY_DELAY
            except StoreBroken as exc:  # every round fails alike: no traceback each time
                log.error("the writer cannot commit: %s", exc)
            except Exception:
                log.exception("the writer failed to commit; it will try again")
            with self.changed:
                self.changed.notify_all()
            if stop:
                return

    def _sleep_for(self) -> float | None:
        """How long the writer thread may sleep (see :func:`~wfkit.engine.pacing.sleep_for`)."""
        chore = self.chore.next_at if self.chore is not None else None
        owner = self.writer.owner
        due = self.writer.owner.next_due()
        return sleep_for(self.writer.staged_for(), due, chore, owner.wake_every(), self.clock)

    def idle(self) -> bool:
        """True when nothing is queued, in flight, being processed or due."""
        due = self.writer.owner.next_due()
        with self._rounds:
            busy = self._processing or self.inflight or self.ready or self.writer.staged
            busy = busy or (self._handed > self._looked and bool(self._threads))
        return (
            not busy
            and not self.suspects.releasable(self.writer)
            and (due is None or due > self.clock.now())
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
