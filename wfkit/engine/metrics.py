"""Prometheus metrics of one engine: counters kept on the hot path, gauges computed at scrape.

:func:`enable_metrics` gives an engine an :class:`EngineMetrics` with its own
``CollectorRegistry`` (never the process-wide default one, so that many engines in one process
do not clash). Until then the engine keeps no metrics and ``prometheus_client`` is not imported
(it is the optional extra ``wfkit[metrics]``).

What the engine does on the hot path is counting: an increment or a histogram observation per
attempt started and ended, per commit and per round. Everything read from the store (runs by
status, open waits, the oldest wait) is one grouped query per scrape, when Prometheus asks. On
a shared PostgreSQL database these gauges count the whole database's runs (every worker reports
the same figures); the counters and histograms are the scraped process's own.

Metric names (all prefixed ``wfkit_``):

- ``wfkit_runs{workflow, status}``: runs in the store by workflow and status (gauge, at scrape).
- ``wfkit_steps_started_total{workflow, activity}``: attempts handed to the workers.
- ``wfkit_steps_completed_total{workflow, activity}``: attempts that returned.
- ``wfkit_steps_failed_total{workflow, activity}``: attempts that raised, timed out or were
  cancelled.
- ``wfkit_attempt_duration_seconds{activity}``: how long attempts ran (histogram).
- ``wfkit_commit_duration_seconds``: the writer's transactions, from start to commit (histogram).
- ``wfkit_commit_batch_size``: attempt results plus callers' commands per writer round
  (histogram; the group commit's batch).
- ``wfkit_ready_queue_depth``: attempts ready and not yet taken by a worker (gauge, at scrape).
- ``wfkit_steps_in_flight``: attempts handed out and not ended (gauge, at scrape).
- ``wfkit_open_waits{kind}``: steps parked on a signal or an approval (gauge, at scrape).
- ``wfkit_oldest_wait_age_seconds``: how long the longest waiting step has waited (gauge, at
  scrape; 0 when nothing waits).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from wfkit.errors import UsageError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from wfkit.engine.executor import AttemptResult, Job
    from wfkit.engine.runtime import Runtime
    from wfkit.engine.scheduler import Scheduler

__all__ = ["ATTEMPT_BUCKETS", "BATCH_BUCKETS", "COMMIT_BUCKETS", "EngineMetrics", "enable_metrics"]

ATTEMPT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
"""Attempt durations, in seconds: from a quick function to a long job."""
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
"""Commit latencies, in seconds: a local DuckDB fsync to a remote PostgreSQL round trip."""
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
"""Items per group commit (attempt results plus callers' commands)."""


def _prometheus() -> Any:
    try:  # imported when metrics are first enabled, never with the engine
        prometheus_client = importlib.import_module("prometheus_client")
    except ImportError:
        raise UsageError(
            "metrics need prometheus_client: install the extra with "
            "pip install 'wfkit[metrics]', then try again"
        ) from None
    return prometheus_client


class EngineMetrics:
    """The counters of one engine, and the collector that reads the rest at scrape time."""

    def __init__(self, runtime: Runtime) -> None:
        prom = _prometheus()
        self.registry: CollectorRegistry = prom.CollectorRegistry(auto_describe=True)
        reg = self.registry
        labels = ["workflow", "activity"]
        self.started = prom.Counter(
            "wfkit_steps_started", "Attempts handed to the workers.", labels, registry=reg
        )
        self.completed = prom.Counter(
            "wfkit_steps_completed", "Attempts that returned.", labels, registry=reg
        )
        self.failed = prom.Counter(
            "wfkit_steps_failed",
            "Attempts that raised, timed out or were cancelled.",
            labels,
            registry=reg,
        )
        self.duration = prom.Histogram(
            "wfkit_attempt_duration_seconds",
            "How long attempts ran, by activity.",
            ["activity"],
            buckets=ATTEMPT_BUCKETS,
            registry=reg,
        )
        self.commit_latency = prom.Histogram(
            "wfkit_commit_duration_seconds",
            "The writer's transactions, from start to commit.",
            buckets=COMMIT_BUCKETS,
            registry=reg,
        )
        self.batch = prom.Histogram(
            "wfkit_commit_batch_size",
            "Attempt results plus callers' commands per writer round (the group commit).",
            buckets=BATCH_BUCKETS,
            registry=reg,
        )
        reg.register(_StoreCollector(runtime))

    def on_start(self, job: Job) -> None:
        """An attempt was handed to the workers."""
        self.started.labels(job.definition_id, job.activity).inc()

    def on_end(self, job: Job, result: AttemptResult) -> None:
        """An attempt ended (its result reached the writer)."""
        counter = self.completed if result.ok else self.failed
        counter.labels(job.definition_id, job.activity).inc()
        seconds = (result.ended_at - result.started_at).total_seconds()
        self.duration.labels(job.activity).observe(max(seconds, 0.0))

    def on_commit(self, seconds: float) -> None:
        """A transaction of the writer committed after ``seconds``."""
        self.commit_latency.observe(seconds)

    def on_round(self, items: int) -> None:
        """A writer round carried ``items`` attempt results and commands (none: not counted)."""
        if items:
            self.batch.observe(items)

    def exposition(self) -> tuple[bytes, str]:
        """The metrics in Prometheus' text format, and its content type."""
        prom = _prometheus()
        return prom.generate_latest(self.registry), prom.CONTENT_TYPE_LATEST


class _StoreCollector:
    """Gauges read when scraped: one grouped query each over runs and waits, and the queues."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.families = importlib.import_module("prometheus_client.core")

    def describe(self) -> list[Any]:
        return []  # computed at scrape; nothing to check at registration

    def collect(self) -> Iterator[Any]:
        core = self.families
        runtime = self.runtime
        store = runtime.store
        runtime.writer.flush_summaries()  # as engine.runs() does: running runs' rows are current
        runs = core.GaugeMetricFamily(
            "wfkit_runs", "Runs in the store by workflow and status.", labels=["workflow", "status"]
        )
        for workflow, status, count in store.query("metrics_runs"):
            runs.add_metric([str(workflow), str(status)], float(count))
        yield runs
        waits = core.GaugeMetricFamily(
            "wfkit_open_waits", "Steps parked on a signal or an approval.", labels=["kind"]
        )
        oldest: datetime | None = None
        for kind, count, since in store.query("metrics_waits"):
            waits.add_metric([str(kind)], float(count))
            if since is not None and (oldest is None or since < oldest):
                oldest = since
        yield waits
        age = 0.0
        if oldest is not None:
            now = runtime.clock.now()
            if oldest.tzinfo is not None:
                oldest = oldest.astimezone(UTC).replace(tzinfo=None)
            age = max((now - oldest).total_seconds(), 0.0)
        yield core.GaugeMetricFamily(
            "wfkit_oldest_wait_age_seconds",
            "How long the longest waiting step has waited (0 when none waits).",
            value=age,
        )
        scheduler: Scheduler = runtime.scheduler
        yield core.GaugeMetricFamily(
            "wfkit_ready_queue_depth",
            "Attempts ready and not yet taken by a worker.",
            value=float(scheduler.queue_depth()),
        )
        yield core.GaugeMetricFamily(
            "wfkit_steps_in_flight",
            "Attempts handed out and not ended.",
            value=float(len(scheduler.inflight)),
        )


def enable_metrics(runtime: Runtime) -> EngineMetrics:
    """The engine's metrics, kept from now on (the same object when called again).

    Raises
    ------
    UsageError
        When ``prometheus_client`` is not installed (the extra ``wfkit[metrics]``).
    """
    scheduler = runtime.scheduler
    if scheduler.metrics is None:
        metrics = EngineMetrics(runtime)
        scheduler.metrics = metrics
        runtime.writer.metrics = metrics
    return scheduler.metrics
