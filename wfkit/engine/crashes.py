"""Runs taken up after their engine process died: crashed attempts, suspect steps, orphans.

A step whose current attempt carries the durable start marker (token field ``started``, written
just before a suspect attempt is dispatched) was running when the process died: it is recorded
``step.crashed`` and counted as a failed attempt. The other ready steps may have been running or
only queued: they are *suspects*, dispatched again only with a marker, so a crash loop is counted.
An engine that closes cleanly flags its runs' snapshots, so that reopening dispatches their ready
steps as usual, not as suspects.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from wfkit.engine import drains
from wfkit.engine.event_rows import summary
from wfkit.engine.executor import AttemptResult
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import EventKind, TokenState
from wfkit.store.base import Statement, Store

if TYPE_CHECKING:
    from wfkit.engine.writer import Writer

__all__ = ["abandon_orphans", "crash_error", "mark_closed", "reopened", "take_up"]


def crash_error(attempt: int, node_id: str) -> str:
    """The error of an attempt its engine process did not survive."""
    return (
        f"the engine process died during attempt {attempt} of {node_id!r} (killed, out of "
        "memory, os._exit or a crash in native code)"
    )


def take_up(writer: Writer, steps: list[tuple[RunState, str]]) -> list[tuple[RunState, str]]:
    """Steps ready in runs whose engine process died: record the crashes (in the batch being
    built), return the suspects."""
    suspects: list[tuple[RunState, str]] = []
    for run, token_id in steps:
        token = run.tokens.get(token_id)
        if token is None or token["st"] != TokenState.READY:
            continue
        if token.get("started") != token["att"]:
            suspects.append((run, token_id))
            continue
        now = writer.now()
        error = crash_error(token["att"], token["node"])
        if "comp" in token:  # a compensation counts it as one of its failed attempts
            entry = run.saga.get(token["entry"])
            writer.checkpoint(run).event(
                EventKind.STEP_CRASHED,
                token["node"],
                token_id,
                attempt=token["att"],
                error=error,
                detail={"compensation": entry["comp"] if entry is not None else None},
            )
        writer.apply_result(
            AttemptResult(
                run.run_id,
                token_id,
                token["node"],
                token["att"],
                now,
                now,
                ok=False,
                error=error,
                base_version=run.data_version,
                crashed=True,
            )
        )
    return suspects


def abandon_orphans(writer: Writer, run: RunState) -> bool:
    """A run taken up again whose tokens were cancelling: their attempts stopped with the
    engine that ran them. Record them abandoned and finish the run's end (uncommitted)."""
    orphans = [
        t
        for t, tok in run.tokens.items()
        if tok["st"] == TokenState.CANCELLING and not writer.attempt_running(run.run_id, t)
    ]
    if orphans:
        drains.abandon(writer.checkpoint(run), orphans)
    return bool(orphans)


def mark_closed(
    store: Store, runs: Iterable[RunState], running: set[tuple[str, str]], now: datetime
) -> None:
    """Flag the snapshots of ``runs`` that have no attempt ``running`` as closed cleanly."""
    rows = [
        summary(run, now, closed=True)
        for run in runs
        if not any((run.run_id, t) in running for t in run.tokens)
    ]
    if rows:
        store.write([Statement("update_instance", rows)])


def reopened(store: Store, runs: Iterable[RunState], now: datetime) -> None:
    """Clear the close flag of runs taken up again (a crash from now on is not clean)."""
    rows = []
    for run in runs:
        run.closed = False
        rows.append(summary(run, now))
    if rows:
        store.write([Statement("update_instance", rows)])
