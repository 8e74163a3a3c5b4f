"""Ready steps become jobs, and jobs run: on this thread (inline), on a worker thread, or on a
Dask cluster when the engine has an executor that takes them."""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from wfkit.definition.activities import ActivityRegistry
from wfkit.engine.executor import AttemptResult, AttemptThreads, Job, failed_result, run_attempt
from wfkit.engine.loops import job_cell
from wfkit.engine.queues import Served
from wfkit.engine.state import RunState
from wfkit.engine.tracing import Tracing
from wfkit.errors import UsageError

if TYPE_CHECKING:
    from wfkit.engine.artifact_records import IssuedRecords

__all__ = ["Workers", "blocked_activities", "make_job", "refuse_pool", "run_jobs", "work"]

STOP = object()  # put on a worker's queue: the worker returns


def make_job(
    run: RunState,
    token_id: str,
    registry: ActivityRegistry,
    beat: Callable[[tuple[str, str]], None],
    max_payload: int | None,
    artifacts: str | None,
    records: IssuedRecords | None,
    tracing: Tracing | None,
) -> Job | None:
    """A job for the token's step, or None when its activity is not registered here.
    ``beat(key)`` records a heartbeat of the attempt; the rest is what every job carries."""
    token = run.tokens[token_id]
    node = run.flow.nodes[token["node"]]
    name = node.activity or ""
    policy = node.policy
    if "comp" in token:  # a compensation runs the undo activity under its own policy
        name = node.compensation or ""
        policy = node.compensation_policy or policy.__class__()
    if name not in registry:
        return None
    path, item, own = job_cell(run, token)
    timeout = policy.attempt_timeout
    key = (run.run_id, token_id)
    return Job(
        run.run_id,
        token_id,
        token["node"],
        token["att"],
        registry.get(name),
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
        max_data=max_payload,
        heartbeat=lambda: beat(key),
        input_json=run.input_json,
        output_type=registry.output_type(name),
        loop_scopes=run.flow.loops,
        artifacts=artifacts,
        records=records,
        trace_parent=tracing.parent_of(run.run_id) if tracing else None,
    )


def run_jobs(
    jobs: list[Job], executor: Any, now: Callable[[], datetime], threads: AttemptThreads
) -> list[AttemptResult]:
    """Run ``jobs`` here, but those the executor takes, which run on its cluster meanwhile."""
    if executor is None:
        return [run_attempt(job, now, threads) for job in jobs]
    remote: list[Job] = []
    here: list[Job] = []
    for job in jobs:
        (remote if executor.takes(job) else here).append(job)
    box: queue.SimpleQueue[AttemptResult] = queue.SimpleQueue()
    for job in remote:
        executor.submit(job, box.put)
    results = [run_attempt(job, now, threads) for job in here]
    return results + [box.get() for _ in remote]


def work(
    jobs: queue.SimpleQueue[Any],
    results: Callable[[AttemptResult], None],
    executor: Callable[[], Any],
    now: Callable[[], datetime],
    threads: AttemptThreads,
) -> None:
    """A worker thread: run the jobs of ``jobs`` (``executor()``'s on its cluster) and hand
    their results to ``results`` until it takes :data:`STOP`."""
    while True:
        job = jobs.get()
        if job is STOP:
            return
        remote = executor()
        if remote is not None and remote.takes(job):
            remote.submit(job, results)  # its result comes back there
            continue
        try:
            result = run_attempt(job, now, threads)
        except BaseException:  # the worker survives anything an attempt throws
            result = failed_result(job, traceback.format_exc(), now())
        results(result)


def blocked_activities(blocked: list[tuple[RunState, str]]) -> list[str]:
    """The activities blocked steps wait for (not registered in this process), sorted."""
    return sorted(
        {
            run.flow.nodes[run.tokens[t]["node"]].activity or "?"
            for run, t in blocked
            if t in run.tokens
        }
    )


class Workers:
    """The worker threads of a pool and the queue of jobs they take."""

    def __init__(
        self,
        results: Callable[[AttemptResult], None],
        executor: Callable[[], Any],
        now: Callable[[], datetime],
        threads: AttemptThreads,
    ) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._work_args = (self._jobs, results, executor, now, threads)
        self._threads: list[threading.Thread] = []

    def __len__(self) -> int:
        return len(self._threads)

    def create(self, count: int) -> list[threading.Thread]:
        """Make ``count`` worker threads (the caller starts them)."""
        self._threads = [
            threading.Thread(target=work, args=self._work_args, name="wfkit-worker", daemon=True)
            for _ in range(count)
        ]
        return list(self._threads)

    def put(self, job: Job) -> None:
        """Queue a job for the next free worker."""
        self._jobs.put(job)

    def qsize(self) -> int:
        """Jobs queued and not yet taken by a worker."""
        return self._jobs.qsize()

    def unqueue(self) -> list[Job]:
        """Take back the jobs no worker has started."""
        jobs: list[Job] = []
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return jobs
            if job is not STOP:
                jobs.append(job)

    def stop(self, timeout: float) -> list[Job]:
        """Stop the workers after their current attempts (waiting ``timeout`` for each);
        return the jobs none of them started."""
        unstarted = self.unqueue()
        for _ in self._threads:
            self._jobs.put(STOP)
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []
        return unstarted


def refuse_pool(threads: int, running: Served | Literal[False]) -> None:
    """Refuse a second worker pool (``running``: the queues the running pool serves, False
    when none runs) and a pool of fewer than one thread."""
    if running is not False:
        serving = "every queue" if running is None else sorted(running)
        raise UsageError(
            f"workers are already running (serving {serving}); an engine has one worker "
            "pool: call engine.stop() first, then start_workers again with every queue "
            "it should serve"
        )
    if threads < 1:
        raise UsageError(f"threads must be 1 or more, got {threads}")
