"""Named rows: one record per statement of ``sql/queries.sql`` that the engine builds or reads.

A field is named after its column, in the statement's order (its INSERT column list, its SELECT
list, or the ``col = ?`` bindings of an UPDATE or DELETE), so code reads ``row.status``, never
``row[4]``, and a column added to one side only fails ``tests/store/test_named_rows.py``, which
parses the statements and compares. The store binds these tuples as it binds any tuple; a read
becomes named with ``Row._make(row)``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

__all__ = [
    "STATEMENT_ROWS",
    "BookmarkKey",
    "BookmarkRow",
    "DueTimer",
    "EventRow",
    "FailedRunRow",
    "InstanceRow",
    "JobRow",
    "LiveRun",
    "PostedKey",
    "PostedSignal",
    "ReplayEvent",
    "RunRow",
    "SagaStepRow",
    "SagaStepUpdate",
    "SignalWait",
    "SnapshotRow",
    "SummaryRow",
    "TimerKey",
    "TimerRow",
]


class EventRow(NamedTuple):
    """One event of a run's history (``insert_event``)."""

    run_id: str
    seq: int
    occurred_at: datetime
    kind: str
    node_id: str | None
    token: str | None
    attempt: int | None
    started_at: datetime | None
    actor: str | None
    error: str | None
    output: str | None
    patch: str | None  # the data document's JSON patch (first event of a checkpoint only)
    delta: str | None  # the run cursor's delta (first event of a checkpoint only)
    detail: str | None


class InstanceRow(NamedTuple):
    """A new run's summary row (``insert_instance``)."""

    run_id: str
    workflow_id: str
    version: int
    hash: str
    status: str
    input: str
    data: str
    state: str
    seq: int
    error: str | None
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None
    parent_run_id: str | None
    actor: str | None


class SummaryRow(NamedTuple):
    """A run's summary as a commit leaves it (``update_instance``)."""

    status: str
    data: str
    state: str
    seq: int
    error: str | None
    updated_at: datetime
    ended_at: datetime | None
    run_id: str


class SnapshotRow(NamedTuple):
    """An ended run's snapshot after the events it gained (``update_instance_snapshot``)."""

    state: str
    seq: int
    run_id: str


class RunRow(NamedTuple):
    """A run's summary row as stored (``run_row``, ``run_rows``)."""

    run_id: str
    workflow_id: str
    version: int
    hash: str
    status: str
    input: str
    data: str | None
    state: str | None
    seq: int
    error: str | None
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None
    parent_run_id: str | None
    actor: str | None


class LiveRun(NamedTuple):
    """A run not ended, as a restart loads it (``live_runs``)."""

    run_id: str
    workflow_id: str
    version: int
    hash: str
    status: str
    input: str
    state: str | None
    seq: int


class ReplayEvent(NamedTuple):
    """An event newer than its run's snapshot (``live_events``, ``run_events_after``)."""

    run_id: str
    seq: int
    patch: str | None
    delta: str | None
    output: str | None
    node_id: str | None
    detail: str | None


class TimerRow(NamedTuple):
    """A timer (``insert_timer``)."""

    run_id: str
    token: str
    node_id: str
    kind: str
    due_at: datetime


class TimerKey(NamedTuple):
    """The key of a timer (``delete_timer``)."""

    run_id: str
    token: str
    kind: str


class DueTimer(NamedTuple):
    """A timer that came due (``due_timers``)."""

    run_id: str
    token: str
    node_id: str
    kind: str
    due_at: datetime


class BookmarkRow(NamedTuple):
    """An open wait: a signal, an approval or a call (``insert_bookmark``, ``find_bookmark``,
    ``find_bookmark_keyless``)."""

    run_id: str
    token: str
    node_id: str
    kind: str
    name: str
    key: str | None
    since: datetime
    deadline: datetime | None
    detail: str | None


class BookmarkKey(NamedTuple):
    """The key of an open wait (``delete_bookmark``)."""

    run_id: str
    token: str


class SignalWait(NamedTuple):
    """An open wait of a signal looked up with others of its name (``find_signal_waits``)."""

    key: str | None
    run_id: str
    token: str
    node_id: str


class JobRow(NamedTuple):
    """A ready or running step of a running run (``insert_job``)."""

    run_id: str
    token: str
    node_id: str
    status: str
    attempt: int
    loop_index: Any
    updated_at: datetime
    heartbeat_at: datetime | None


class SagaStepRow(NamedTuple):
    """A step recorded in a saga (``insert_saga_step``)."""

    run_id: str
    saga_id: str
    node_id: str
    token: str
    compensation: str | None
    position: int
    status: str
    updated_at: datetime


class SagaStepUpdate(NamedTuple):
    """A saga step's new status (``update_saga_step``)."""

    status: str
    updated_at: datetime
    run_id: str
    position: int


class PostedSignal(NamedTuple):
    """A signal posted before its wait (``first_posted_signal``)."""

    signal_id: str
    payload: str
    actor: str | None
    expires_at: datetime | None


class PostedKey(NamedTuple):
    """The (name, key) of a posted signal (``posted_keys``)."""

    name: str
    key: str | None


class FailedRunRow(NamedTuple):
    """A run failed because its checkpoint could not be written (``fail_unwritable_run``)."""

    error: str
    updated_at: datetime
    ended_at: datetime
    run_id: str


# the record of each statement's rows (what it writes, or what it reads)
STATEMENT_ROWS: dict[str, type[tuple[Any, ...]]] = {
    "insert_event": EventRow,
    "insert_instance": InstanceRow,
    "update_instance": SummaryRow,
    "update_instance_snapshot": SnapshotRow,
    "run_row": RunRow,
    "run_rows": RunRow,
    "live_runs": LiveRun,
    "live_events": ReplayEvent,
    "run_events_after": ReplayEvent,
    "insert_timer": TimerRow,
    "delete_timer": TimerKey,
    "due_timers": DueTimer,
    "insert_bookmark": BookmarkRow,
    "find_bookmark": BookmarkRow,
    "find_bookmark_keyless": BookmarkRow,
    "delete_bookmark": BookmarkKey,
    "find_signal_waits": SignalWait,
    "insert_job": JobRow,
    "insert_saga_step": SagaStepRow,
    "update_saga_step": SagaStepUpdate,
    "first_posted_signal": PostedSignal,
    "posted_keys": PostedKey,
    "fail_unwritable_run": FailedRunRow,
}
