"""The rows of a batch, kept per run until they are merged into one transaction.

The writer turns every checkpoint of a batch into the rows it writes (:class:`RunRows`) once —
that consumes the run's pending changes and numbers its events — and :func:`merge` folds the
rows of any subset of the batch into the column-wise multi-row statements of one transaction.
Keeping them apart lets the writer write a batch again without a run that must not be written
(a run another engine took over), instead of failing every run of the batch with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from wfkit.store.base import Statement
from wfkit.store.rows import (
    BookmarkKey,
    BookmarkRow,
    EventRow,
    InstanceRow,
    SagaStepRow,
    SagaStepUpdate,
    SnapshotRow,
    SummaryRow,
    TimerKey,
    TimerRow,
)

__all__ = ["RunRows", "merge"]


@dataclass
class RunRows:
    """Everything one run's checkpoint writes."""

    run_id: str
    instance: InstanceRow | None = None  # a new run's summary row
    events: list[EventRow] = field(default_factory=list)
    update: SummaryRow | None = None  # the summary row of a run that parked or ended
    snapshot: SnapshotRow | None = None  # an ended run's snapshot, after events it gained
    clear_jobs: bool = False
    timers: dict[TimerKey, tuple[str, TimerRow | TimerKey]] = field(default_factory=dict)
    marks: dict[BookmarkKey, tuple[str, BookmarkRow | BookmarkKey]] = field(default_factory=dict)
    saga_add: list[SagaStepRow] = field(default_factory=list)
    saga_set: list[SagaStepUpdate] = field(default_factory=list)
    posted: list[str] = field(default_factory=list)  # posted signals its waits took
    graph: tuple[Any, ...] | None = None  # the run's own grown graph, and the run repinned to it
    logs: list[tuple[Any, ...]] = field(default_factory=list)  # its attempts' log lines
    artifacts: list[tuple[Any, ...]] = field(default_factory=list)  # artifacts they stored

    def timer_ops(
        self, added: Sequence[tuple[str, str, str, datetime]], deleted: list[tuple[str, str]]
    ) -> None:
        """Record the checkpoint's timer changes (a delete and an add of one key: the add)."""
        for token_id, kind in deleted:
            key = TimerKey(self.run_id, token_id, kind)
            self.timers[key] = ("del", key)
        for token_id, node_id, kind, due in added:
            self.timers[TimerKey(self.run_id, token_id, kind)] = (
                "add",
                TimerRow(self.run_id, token_id, node_id, kind, due),
            )

    def absorb(self, later: RunRows) -> None:
        """Fold in the rows of the same run's next checkpoint, as if both were one."""
        self.events += later.events
        self.update = later.update or self.update
        self.snapshot = later.snapshot or self.snapshot
        self.clear_jobs = self.clear_jobs or later.clear_jobs
        self.timers.update(later.timers)  # the later operation on a timer wins
        self.marks.update(later.marks)
        self.saga_add += later.saga_add
        # an entry's later status wins: one update row per (run, position)
        sets = {(row.run_id, row.position): row for row in [*self.saga_set, *later.saga_set]}
        self.saga_set = list(sets.values())
        self.posted += later.posted
        self.graph = later.graph or self.graph
        self.logs += later.logs
        self.artifacts += later.artifacts

    def bookmark_ops(self, added: list[tuple[Any, ...]], deleted: list[str]) -> None:
        """Record the checkpoint's bookmark changes (an add after a delete of one key wins)."""
        for token_id in deleted:
            key = BookmarkKey(self.run_id, token_id)
            self.marks[key] = ("del", key)
        for row in added:
            self.marks[BookmarkKey(self.run_id, row[0])] = ("add", BookmarkRow(self.run_id, *row))


def merge(
    parts: list[RunRows], head: list[Statement], stale_timers: list[TimerKey]
) -> tuple[list[Statement], list[TimerRow]]:
    """The statements of one transaction writing ``parts`` after ``head`` (the ownership's
    guard), deleting ``stale_timers`` too; and the timer rows it adds."""
    timers = {k: v for p in parts for k, v in p.timers.items()}
    marks = {k: v for p in parts for k, v in p.marks.items()}
    added_timers = [row for op, row in timers.values() if isinstance(row, TimerRow)]
    statements = [
        *head,
        Statement("insert_instance", [p.instance for p in parts if p.instance is not None]),
        Statement("insert_event", [row for p in parts for row in p.events]),
        Statement("delete_timer", [*stale_timers, *timers]),
        Statement("insert_timer", added_timers),
        Statement("delete_bookmark", list(marks)),
        Statement(
            "insert_bookmark", [row for _, row in marks.values() if isinstance(row, BookmarkRow)]
        ),
        Statement("update_instance", [p.update for p in parts if p.update is not None]),
        Statement("update_instance_snapshot", [p.snapshot for p in parts if p.snapshot]),
        Statement("delete_jobs", [(p.run_id,) for p in parts if p.clear_jobs]),
        Statement("insert_saga_step", [row for p in parts for row in p.saga_add]),
        Statement("update_saga_step", [row for p in parts for row in p.saga_set]),
        Statement("delete_posted_signal", [(s,) for p in parts for s in p.posted], claim=True),
        Statement("insert_grown_definition", [p.graph for p in parts if p.graph is not None]),
        Statement("repin_instance", [(p.graph[2], p.run_id) for p in parts if p.graph is not None]),
        Statement("insert_log", [row for p in parts for row in p.logs]),
        Statement("insert_artifact", [row for p in parts for row in p.artifacts]),
    ]
    return statements, added_timers
