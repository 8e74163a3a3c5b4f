"""Attempts on a Dask cluster: ``wf.Engine(db, executor=wf.DaskExecutor(client))``.

The engine keeps owning the run: its writer thread stays the one place that commits, so
checkpoints, group commit and the guarantees are unchanged. Only the call of the activity moves:
a picklable copy of the :class:`Job` (every field as it is, minus the heartbeat callback and the
cancel flag, which live in the engine) is shipped to a Dask worker, :func:`run_attempt` runs
there, and the :class:`AttemptResult` comes back. No engine thread waits on a future: each
future's done-callback (on the Dask client's thread) hands its result to the writer, and one
dispatcher thread cancels futures and beats hearts; so the number of engine threads never caps
the cluster's parallelism; ``max_parallelism`` of a fan-out still bounds how many attempts are
out at once.

Placement is by queue: ``DaskExecutor(client, queues=["heavy"])`` sends only the activities of
those queues (``@wf.activity("fit", queue="heavy")``) to Dask; the others stay on the engine's
threads. Without ``queues`` every attempt goes to Dask. ``run_until_idle()`` sends them too.

A worker lost during an attempt is a crash of that attempt: the future fails with
``KilledWorker`` (or is cancelled, or its worker is gone) and the attempt is recorded
``step.crashed`` and re-run under the step's retry policy, as a crash of the engine process is.
Dask itself re-runs a task whose worker died up to ``distributed.scheduler.allowed-failures``
times before it raises ``KilledWorker``. So that such a re-run never runs the attempt a second
time unrecorded, on any cluster, each task first notes its start in a Dask ``Event`` named after
the attempt (``rerun_check``, on by default: two scheduler round trips, ~2 ms): a task that finds
its event already set was started before on a worker that died, and reports that crash instead
of running the activity. :func:`local_cluster` also sets ``allowed-failures`` to 0, so a lost
worker is counted at once.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from wfkit.definition.activities import ActivityRegistry, CancelFlag
from wfkit.engine.executor import AttemptResult, AttemptThreads, Job, failed_result, run_attempt
from wfkit.errors import UsageError

__all__ = ["DaskExecutor", "local_cluster"]

log = logging.getLogger("wfkit.engine")

EXTRA = "wfkit[dask]"
POLL = 0.05  # seconds between the dispatcher's looks at cancel flags and heartbeats
HEARTBEAT_EVERY = 1.0  # seconds between heartbeats of attempts out on the cluster


def _distributed() -> Any:
    try:
        return importlib.import_module("distributed")
    except ImportError as exc:  # pragma: no cover - the extra is installed in the dev setup
        raise UsageError(f"DaskExecutor needs dask.distributed: pip install '{EXTRA}'") from exc


def local_cluster(n_workers: int = 2, threads_per_worker: int = 1, **kwargs: Any) -> Any:
    """A ``distributed.LocalCluster`` of worker processes whose scheduler never re-runs a task
    whose worker died (``allowed-failures`` 0): the engine counts that as a crash instead."""
    distributed = _distributed()
    dask = importlib.import_module("dask")
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        return distributed.LocalCluster(
            n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True, **kwargs
        )


def _now() -> datetime:
    return datetime.now(UTC)


def _result(
    job: Job, error: str, *, crashed: bool = False, cancelled: bool = False
) -> AttemptResult:
    return failed_result(job, error, _now(), crashed=crashed, cancelled=cancelled)


def _on_worker(shipped: bytes, head: Job, marker: str = "") -> tuple[AttemptResult, str, int]:
    """Run on a Dask worker: unpickle the job, run the attempt; (result, worker address, pid).

    With a ``marker``, an attempt started before (its worker died and Dask rescheduled the task)
    reports that crash instead of running again."""
    try:
        where = _distributed().get_worker().address
    except (ImportError, ValueError):
        where = "?"
    if marker:
        started = _distributed().Event(marker)
        if started.is_set():
            return (
                _result(head, _lost(head, "its Dask worker died mid-attempt"), crashed=True),
                where,
                os.getpid(),
            )
        started.set()
    try:
        job: Job = pickle.loads(shipped)
    except (ImportError, AttributeError) as exc:
        return (
            _result(
                head,
                f"activity {head.activity!r} cannot be loaded on the Dask worker {where}: "
                f"{type(exc).__name__}: {exc}; install its module on the workers (the same "
                "environment as the engine), define the function in an importable module, or "
                "ship the module with client.upload_file(path)",
            ),
            where,
            os.getpid(),
        )
    return run_attempt(job, _now, AttemptThreads()), where, os.getpid()


def _pickle(job: Job) -> bytes:
    """The job as it travels (:meth:`Job.travelling`: no heartbeat callback or cancel flag,
    and the records of the artifacts it may load in place of the engine's store)."""
    cloudpickle = importlib.import_module("cloudpickle")
    data: bytes = cloudpickle.dumps(job.travelling())
    return data


class DaskExecutor:
    """Run attempts as tasks on a Dask cluster.

    ``client_or_address`` is a ``distributed.Client``, a cluster, or a scheduler address
    (``"tcp://host:8786"``). ``queues`` names the activity queues whose attempts go to Dask
    (None: every attempt). The last worker that ran each attempt is kept in :attr:`placed`
    (``(run_id, token_id, attempt) -> (worker address, pid)``, the latest 10,000).
    """

    def __init__(
        self,
        client_or_address: Any,
        queues: Iterable[str] | None = None,
        *,
        rerun_check: bool = True,
    ) -> None:
        distributed = _distributed()
        self._owns_client = not isinstance(client_or_address, distributed.Client)
        if self._owns_client:  # a cluster or an address: this executor's own client
            self.client = distributed.Client(client_or_address)
        else:
            self.client = client_or_address
        if isinstance(queues, str):
            raise UsageError(f"queues must be a list of queue names: write queues=[{queues!r}]")
        self.queues = None if queues is None else frozenset(queues)
        self.registry: ActivityRegistry | None = None
        self.placed: dict[tuple[str, str, int], tuple[str, int]] = {}
        self._lock = threading.Lock()
        self._pending: dict[Any, tuple[Job, Callable[[AttemptResult], None]]] = {}
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition(self._lock)
        self.rerun_check = rerun_check
        self._stale: list[str] = []  # start markers of attempts that answered, to delete

    def close(self) -> None:
        """Close the client this executor made (one it was given is left to its owner)."""
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    local_cluster = staticmethod(local_cluster)  # wf.DaskExecutor.local_cluster(n_workers=2)

    @property
    def dashboard_link(self) -> str:
        """The Dask dashboard's address."""
        return str(self.client.dashboard_link)

    def takes(self, job: Job) -> bool:
        """True when the attempt goes to Dask (its activity's queue is placed there)."""
        if self.queues is None:
            return True
        queue_of = self.registry.queue_of if self.registry is not None else None
        return queue_of is not None and queue_of(job.activity) in self.queues

    def submit(self, job: Job, done: Callable[[AttemptResult], None]) -> None:
        """Send the attempt to the cluster; ``done(result)`` is called once it is over."""
        if job.cancel.is_set():
            done(run_attempt(job, _now))  # says it was never started
            return
        head = dataclasses.replace(  # what a failed result needs: no data, no function
            job,
            function=_missing,
            heartbeat=None,
            cancel=CancelFlag(),
            model=None,
            output_type=None,
            data_json="",
            outputs_json="",
            input_json=None,
            item_json=None,
            own_output=(),
            records=None,
        )
        try:
            shipped = _pickle(job)
        except Exception as exc:
            done(_result(job, f"activity {job.activity!r} cannot be sent to Dask: {exc}"))
            return
        key = f"wfkit-{job.activity}-{job.run_id}-{job.token_id}-{job.attempt}"
        marker = key if self.rerun_check else ""
        future = self.client.submit(
            _on_worker, shipped, head, marker, key=key, pure=False, retries=0
        )
        with self._lock:
            self._pending[future] = (job, done)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._dispatch, name="wfkit-dask", daemon=True
                )
                self._thread.start()
        future.add_done_callback(self._finish)  # on the client's callback thread

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until no attempt is out on the cluster; True when none is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._pending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def _dispatch(self) -> None:
        """Cancel the futures of attempts the engine cancelled; beat for those still out. Ends
        when nothing is out (``submit`` starts it again)."""
        beat = time.monotonic()
        while True:
            with self._lock:
                if not self._pending and not self._stale:
                    self._thread = None
                    return
                pending = list(self._pending.items())
                stale, self._stale = self._stale, []
            for marker in stale:  # a cleared Dask event is deleted from the scheduler
                try:
                    _distributed().Event(marker, client=self.client).clear()
                except Exception:  # the cluster went away: nothing left to delete
                    pass
            for future, (job, _done) in pending:
                if job.cancel.is_set() and not future.done():
                    future.cancel()
            if time.monotonic() - beat >= HEARTBEAT_EVERY:
                beat = time.monotonic()
                for _future, (job, _done) in pending:
                    if job.heartbeat is not None:
                        try:
                            job.heartbeat()
                        except Exception:
                            log.exception("heartbeat of %r failed", job.node_id)
            time.sleep(POLL)

    def _finish(self, future: Any) -> None:
        with self._lock:
            entry = self._pending.get(future)
        if entry is None:
            return
        job, done = entry
        result = self._outcome(future, job)
        try:
            done(result)
        finally:
            with self._idle:
                self._pending.pop(future, None)
                if self.rerun_check:
                    self._stale.append(future.key)
                self._idle.notify_all()

    def _outcome(self, future: Any, job: Job) -> AttemptResult:
        distributed = _distributed()
        if future.cancelled() or future.status == "cancelled":
            if job.cancel.is_set():
                return _result(
                    job,
                    f"Cancelled: attempt {job.attempt} of {job.node_id!r} was cancelled on Dask",
                    cancelled=True,
                )
            return _result(job, _lost(job, "its Dask task was cancelled"), crashed=True)
        try:
            result, where, pid = future.result()
        except distributed.KilledWorker as exc:
            return _result(job, _lost(job, f"its Dask worker died ({exc})"), crashed=True)
        except (distributed.client.FutureCancelledError, OSError) as exc:
            return _result(job, _lost(job, f"its Dask worker was lost ({exc})"), crashed=True)
        except Exception as exc:
            return _result(job, f"the Dask task of attempt {job.attempt} failed: {exc!r}")
        with self._lock:
            self.placed[(job.run_id, job.token_id, job.attempt)] = (where, pid)
            if len(self.placed) > 10_000:
                self.placed.pop(next(iter(self.placed)))
        if job.cancel.is_set() and not result.ok:
            result.cancelled = True
        return result


def _lost(job: Job, why: str) -> str:
    return (
        f"attempt {job.attempt} of {job.node_id!r} crashed: {why}; it is re-run under the "
        "step's retry policy"
    )


def _missing(ctx: Any) -> None:  # the head of a job never runs
    raise RuntimeError("the function of this job was not shipped")
