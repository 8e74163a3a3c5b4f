"""The rows a commit writes: a checkpoint's events and summary, and running runs' wf_jobs rows.

Building them consumes the run's pending changes and numbers its events; the writer decides
what to do with them (write now, stage for durability="batched", or isolate a refused one).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import NamedTuple

from wfkit.engine import logs
from wfkit.engine.checkpoint import Checkpoint, dumps
from wfkit.engine.records import RunStatus
from wfkit.engine.rows import RunRows
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import IN_FLIGHT, EventKind, JobStatus, TimerKind, TokenState
from wfkit.store.base import TERMINAL_STATUSES
from wfkit.store.rows import (
    EventRow,
    InstanceRow,
    JobRow,
    SagaStepRow,
    SnapshotRow,
    SummaryRow,
    TimerKey,
    TimerRow,
)

__all__ = [
    "NewRun",
    "checkpoint_rows",
    "job_rows",
    "stageable",
    "stays_ended",
    "summary",
    "summary_due",
]

# the tokens of a running run that have a wf_jobs row, and what it says unless the attempt runs
_JOB_STATES = {
    TokenState.READY: JobStatus.READY,
    TokenState.RETRY: JobStatus.RETRY,
    TokenState.CANCELLING: JobStatus.CANCELLING,
}


class NewRun(NamedTuple):
    """What a new run's summary row holds besides its state."""

    input_json: str
    actor: str | None
    created: datetime
    parent: str | None


def summary(run: RunState, now: datetime, closed: bool = False) -> SummaryRow:
    """The run's summary row as of ``now`` (``closed``: its snapshot carries the close flag)."""
    ended = now if RunStatus(run.status).terminal else None
    state = run.snapshot(closed=True) if closed else run.snapshot()
    return SummaryRow(
        run.status, run.data_json(), state, run.seq, run.error, now, ended, run.run_id
    )


def stays_ended(cp: Checkpoint) -> bool:
    """True when the checkpoint's run had ended and stays so: it only gains events (e.g.
    ``run.restarted``), and its summary stands but for its snapshot and last event number."""
    return cp.start_status in TERMINAL_STATUSES and cp.run.status == cp.start_status


def summary_due(cp: Checkpoint) -> bool:
    """True when the checkpoint's run parked, ended or came back to life: its summary row
    is written with it (a running run's summary waits for the writer's next flush)."""
    run = cp.run
    if stays_ended(cp):
        return False
    # (a failed run tried again by hand is live again: its row must say so at once)
    return run.status != RunStatus.RUNNING.value or cp.start_status in TERMINAL_STATUSES


def checkpoint_rows(cp: Checkpoint, new: NewRun | None) -> RunRows:
    """The rows of one checkpoint (consumes the run's changes and numbers its events); ``new``
    when its run is new (its summary row is inserted)."""
    run = cp.run
    rows = RunRows(run.run_id)
    delta, patch = run.take_changes()
    if (delta or patch) and not cp.events:
        cp.event(EventKind.CHECKPOINT)
    for i, ev in enumerate(cp.events):
        run.seq += 1
        rows.events.append(
            EventRow(
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
    if new is not None:
        now = summary(run, cp.now)
        rows.instance = InstanceRow(
            run.run_id,
            run.flow.id,
            run.flow.version,
            run.flow.hash,
            now.status,
            new.input_json,
            now.data,
            now.state,
            now.seq,
            now.error,
            new.created,
            now.updated_at,
            now.ended_at,
            new.parent,
            new.actor,
        )
    elif stays_ended(cp):
        # the next load numbers the run's events on from these (the run leaves memory after
        # the command that wrote them, and a load reads only the snapshot of an ended run)
        rows.snapshot = SnapshotRow(run.snapshot(), run.seq, run.run_id)
    elif summary_due(cp):
        rows.update = summary(run, cp.now)
    rows.timer_ops(cp.timers_add, cp.timers_del)
    for run_id, token_id, node_id, due in cp.wakes:  # callers another engine holds
        rows.timers[TimerKey(run_id, token_id, TimerKind.CALL)] = (
            "add",
            TimerRow(run_id, token_id, node_id, TimerKind.CALL, due),
        )
    rows.bookmark_ops(cp.bookmarks_add, cp.bookmarks_del)
    for _, row in cp.saga_rows:
        if isinstance(row, SagaStepRow):
            rows.saga_add.append(row)
        else:
            rows.saga_set.append(row)
    rows.posted = list(cp.posted_taken)
    rows.graph = cp.graph
    if cp.logs:
        rows.logs = logs.log_rows(cp, run.seq)
    if cp.artifacts:
        rows.artifacts = [record.row(cp.now) for record in cp.artifacts]
    return rows


def stageable(cp: Checkpoint, rows: RunRows, new: bool) -> bool:
    """A checkpoint that may wait for the next write while its next steps run: a running
    run that stays in memory and changes nothing another run or caller could see (no new
    run, wait, summary, cancel, taken signal, saga status or artifact record)."""
    run = cp.run
    return (
        not new
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


def job_rows(
    runs: list[RunState],
    running: Collection[tuple[str, str]],
    blocked: Collection[tuple[str, str]],
    heartbeats: Mapping[tuple[str, str], datetime],
    now: datetime,
) -> list[JobRow]:
    """The wf_jobs rows of running runs: one per step ready, retrying or cancelling, saying
    whether its attempt is ``running`` now or its activity is ``blocked`` here."""
    rows: list[JobRow] = []
    for run in runs:
        for token_id, t in run.tokens.items():
            if t["st"] in _JOB_STATES:
                key = (run.run_id, token_id)
                status = JobStatus.RUNNING if key in running else _JOB_STATES[t["st"]]
                if t["st"] == TokenState.CANCELLING:
                    status = JobStatus.CANCELLING  # asked to stop, not yet ended
                if key in blocked:
                    status = JobStatus.BLOCKED
                beat = heartbeats.get(key)
                rows.append(
                    JobRow(run.run_id, token_id, t["node"], status, t["att"], t["li"], now, beat)
                )
    return rows
