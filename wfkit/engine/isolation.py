"""A commit that cannot be written whole: runs another engine took, signals another engine took,
and values the store refuses. The rest of the batch is written without them.

On a shared database a run of the batch may have changed hands (this process stalled longer than
its lease): its checkpoint is left out and the run leaves memory. A posted signal another engine
took first sends the runs that took it back to their last stored checkpoint. A batch the store
refuses is written again run by run, so that one poison value fails only its own run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.event_rows import NewRun
from wfkit.engine.executor import printable
from wfkit.engine.rows import RunRows
from wfkit.engine.vocabulary import EventKind
from wfkit.errors import StoreError
from wfkit.store.base import AlreadyTaken, LeaseLost, Statement, ValueRefused
from wfkit.store.rows import EventRow, FailedRunRow, TimerKey, TimerRow

if TYPE_CHECKING:
    from wfkit.engine.writer import Writer

__all__ = ["drop", "drop_lost", "drop_taken", "fail_unwritable", "isolate", "write_without"]

log = logging.getLogger("wfkit.engine")

Batch = dict[str, Checkpoint]
Parts = dict[str, RunRows]


def write_without(
    writer: Writer,
    batch: Batch,
    parts: Parts,
    new_runs: Mapping[str, NewRun],
    stale: list[TimerKey],
) -> list[TimerRow]:
    """Write the batch in one transaction; when runs of it changed hands, or posted signals it
    took were taken by another engine first, write it again without their runs (three times at
    most). Returns the timer rows written."""
    for tries_left in range(3, -1, -1):
        try:
            return writer.write_rows(batch, parts, new_runs, stale)
        except LeaseLost:
            lost = writer.owner.lost([r for r in batch if r not in new_runs])
            if not lost or not tries_left:
                raise
            drop_lost(writer, lost, batch, parts)
        except AlreadyTaken as exc:
            if not tries_left:
                raise
            drop_taken(writer, set(exc.keys), batch, parts, new_runs)
    raise AssertionError("unreachable")


def drop(writer: Writer, run_ids: set[str], batch: Batch, parts: Parts) -> None:
    """Leave the checkpoints of ``run_ids`` out of the transaction, forget the posted
    signals they took, and drop the runs from memory."""
    for run_id in run_ids:
        batch.pop(run_id, None)
        writer.signals.give_back(parts.pop(run_id).posted)
        writer.runs.pop(run_id, None)
        writer.dirty.discard(run_id)


def drop_lost(writer: Writer, lost: set[str], batch: Batch, parts: Parts) -> None:
    """Runs another engine holds now: their checkpoints are not written, and they leave
    memory (their attempts' results will be dropped as stale)."""
    drop(writer, lost, batch, parts)
    log.warning(
        "runs taken over by another engine process (this one did not renew their leases "
        "in time; is it starved of CPU, or is the lease too short?): %s; their checkpoints "
        "here are dropped and the engine that holds them goes on",
        ", ".join(sorted(lost)),
    )


def drop_taken(
    writer: Writer, signals: set[str], batch: Batch, parts: Parts, new_runs: Mapping[str, NewRun]
) -> None:
    """Posted signals another engine process took first (at most once: the first taker
    wins): the checkpoints that took them are not written, their runs leave memory and are
    given back, so that they go on from their last stored checkpoint and find the signal
    gone. A new run cannot go back to a stored checkpoint: the whole round fails then, and
    its callers are told, with nothing written."""
    takers = {run_id for run_id, rows in parts.items() if signals & set(rows.posted)}
    if takers & set(new_runs):
        raise StoreError(
            "a signal posted for the wait of a run started in this round was taken by "
            "another engine process at the same moment; nothing of the round was written: "
            "start the run again"
        )
    drop(writer, takers, batch, parts)
    writer.owner.release(sorted(takers))
    log.info(
        "posted signals %s were taken by another engine process first; runs %s go on from "
        "their last stored checkpoint",
        ", ".join(sorted(signals)),
        ", ".join(sorted(takers)),
    )


def isolate(
    writer: Writer,
    batch: Batch,
    parts: Parts,
    new_runs: Mapping[str, NewRun],
    stale: list[TimerKey],
    unwritable: dict[str, str],
) -> list[TimerRow] | None:
    """The batch was refused: write its runs one by one, so that a run the store refuses
    (a value it cannot hold) does not take the others down; return the timer rows written.
    None when the store itself fails (not a refused value): the caller retries the whole
    batch later. The refused runs leave ``parts`` and join ``unwritable`` with the reason."""
    written: Parts = {}
    refused: dict[str, str] = {}
    added: list[TimerRow] = []
    for run_id, rows in parts.items():
        one = {run_id: batch[run_id]}
        try:
            added += writer.write_rows(one, {run_id: rows}, new_runs, stale if not written else [])
        except LeaseLost:
            drop_lost(writer, {run_id}, batch, parts={run_id: rows})
            written[run_id] = rows  # not ours any more: nothing to fail here
            continue
        except ValueRefused as exc:
            refused[run_id] = str(exc)
            continue
        except StoreError:
            return None  # the store itself fails: the whole batch is retried later
        written[run_id] = rows
    if not written and not refused:
        return None
    for run_id in refused:
        parts.pop(run_id)
    unwritable.update(refused)
    return added


def fail_unwritable(
    writer: Writer, unwritable: dict[str, str], batch: Batch, new_runs: Mapping[str, NewRun]
) -> None:
    """Runs whose checkpoint cannot be written fail as they last stood in the store, with
    the reason: one poison value never stalls the runs it shares a batch with."""
    for run_id, reason in unwritable.items():
        batch.pop(run_id, None)
        writer.runs.pop(run_id, None)
        writer.views.pop(run_id, None)
        writer.dirty.discard(run_id)
        error = printable(
            f"the engine could not write this run's checkpoint, so it failed as it last "
            f"stood: {reason}"
        )
        log.error("run %s failed: %s", run_id, error)
        if run_id in new_runs:
            continue  # never written: there is nothing to fail
        now = writer.now()
        seq = writer.store.query("last_event_seq", [run_id])[0][0] + 1
        kind = EventKind.RUN_FAILED
        event = EventRow(
            run_id, seq, now, kind, None, None, None, None, None, error, None, None, None, None
        )
        try:
            writer.store.write(
                [
                    Statement("fail_unwritable_run", [FailedRunRow(error, now, now, run_id)]),
                    Statement("insert_event", [event]),
                    Statement("delete_run_timers", [(run_id,)]),
                    Statement("delete_run_bookmarks", [(run_id,)]),
                    Statement("delete_jobs", [(run_id,)]),
                ]
            )
        except StoreError:
            log.exception("run %s: its failure could not be recorded either", run_id)
