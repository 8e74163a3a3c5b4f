"""Runs read back from the store: one run from its summary row, or every live run at start-up.

A run's state is its snapshot (the summary row's ``state``) and the checkpoints written after it,
replayed in order; only a run that was running can have checkpoints newer than its snapshot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from wfkit.engine.flows import CompiledFlow
from wfkit.engine.records import RunStatus
from wfkit.engine.state import RunState
from wfkit.errors import UsageError
from wfkit.store.base import Store
from wfkit.store.rows import LiveRun, ReplayEvent, RunRow

__all__ = ["load_live", "load_run", "run_row"]

log = logging.getLogger("wfkit.engine")

FlowOf = Callable[[str, int, str], CompiledFlow]  # (workflow id, version, digest) -> flow


def run_row(store: Store, run_id: str) -> RunRow | None:
    """The run's summary row; None if unknown."""
    rows = store.query("run_row", [run_id])
    return RunRow._make(rows[0]) if rows else None


def load_run(store: Store, flow_of: FlowOf, row: RunRow) -> RunState:
    """The run of a summary row, from its snapshot and the checkpoints written after it."""
    flow = flow_of(row.workflow_id, row.version, row.hash)
    data = json.loads(row.data or row.input)
    run = RunState.restore(row.run_id, flow, data, row.state, row.seq)
    run.input_json = row.input
    run.status = row.status if not row.state else run.status
    if RunStatus(row.status).terminal and run.status != row.status:
        # ended outside a checkpoint (a run whose checkpoint could not be written)
        run.status, run.error = row.status, row.error
    if row.status in (RunStatus.PENDING.value, RunStatus.RUNNING.value) or not row.state:
        # only a run that was running can have checkpoints newer than its snapshot: every
        # checkpoint that leaves a run out of memory writes the snapshot with it (an ended
        # run's too, when it gains events: see event_rows.stays_ended)
        for found in store.query("run_events_after", [row.run_id, row.seq]):
            event = ReplayEvent._make(found)
            run.replay(event.seq, event.delta, event.patch)
    return run


def load_live(store: Store, flow_of: FlowOf) -> dict[str, RunState]:
    """Every run not ended whose workflow this engine knows (the others are left as they are)."""
    live: dict[str, RunState] = {}
    for found in store.query("live_runs"):
        row = LiveRun._make(found)
        try:
            flow = flow_of(row.workflow_id, row.version, row.hash)
        except UsageError:
            log.warning(
                "run %s: workflow %s v%s is missing; left as it is",
                row.run_id,
                row.workflow_id,
                row.version,
            )
            continue
        summary = run_row(store, row.run_id)
        data = json.loads((summary.data if summary is not None else None) or row.input)
        run = RunState.restore(row.run_id, flow, data, row.state, row.seq)
        run.input_json = row.input
        if not row.state:
            run.status = row.status
        live[row.run_id] = run
    for found in store.query("live_events"):
        event = ReplayEvent._make(found)
        if event.run_id in live:
            live[event.run_id].replay(event.seq, event.delta, event.patch)
    return live
