"""Claim rounds' hand-overs on a shared store: runs this engine cannot advance are given back,
and runs handed over to it for a queue it serves are run here even when its registry files their
activities elsewhere (so that two engines never pass a run back and forth)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from wfkit.engine.queues import Served
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import TokenState
from wfkit.engine.writer import Writer

__all__ = ["give_back_blocked", "granted_steps"]

log = logging.getLogger("wfkit.engine")

Step = tuple[RunState, str]
Unserved = Callable[[RunState, str], str | None]  # the queue of a step not served here, or None


def give_back_blocked(writer: Writer, blocked: Sequence[Step], unserved: Unserved) -> set[str]:
    """Release the runs all of whose ready steps wait for an activity not registered in
    this process, or for a queue these workers do not serve (shared stores; the only
    engine of a database keeps them); return them. A run with a step of an unserved queue is
    handed over for that queue: only an engine serving it claims it (:meth:`Leases.hand_over`).
    The others are claimed again only after a back-off, so that an engine that has the
    activity takes them. Their wf_jobs rows say ``blocked`` meanwhile."""
    owner = writer.owner
    if not owner.shared or not blocked:
        return set()
    runs = writer.runs
    held = {(run.run_id, t) for run, t in blocked if writer.holds(run)}
    stuck = {
        run_id
        for run_id in {run_id for run_id, _ in held}
        if all(
            (run_id, t) in held
            for t, tok in runs[run_id].tokens.items()
            if tok["st"] == TokenState.READY
        )
    }
    if not stuck:
        return stuck
    writer.mark_dirty(stuck)
    writer.flush_summaries()
    wanted: dict[str, str] = {}  # run -> the first queue its steps wait for
    for run_id, token_id in sorted(held):
        queue = unserved(runs[run_id], token_id) if run_id in stuck else None
        if queue is not None:
            wanted.setdefault(run_id, queue)
    owner.back_off([run_id for run_id in stuck if run_id not in wanted])
    owner.hand_over(sorted(wanted.items()))
    writer.let_go(stuck)
    log.info(
        "runs given back (activities not registered here, or queues not served): %s",
        ", ".join(sorted(stuck)),
    )
    return stuck


def granted_steps(
    writer: Writer, claimed: list[Step], queues: Served, unserved: Unserved
) -> set[tuple[str, str]]:
    """Claimed steps that run here although this pool does not serve their queue: the
    steps of a run handed over for a queue served here, none of whose ready steps belongs
    to a served queue in this process's registry (the registries of the two engines file
    the activity in different queues). Running them rather than handing the run back
    means a hand-over is always followed by an attempt: two engines never pass a run
    back and forth. ``queues``: those the pool serves (None: every queue)."""
    runs = writer.owner.take_granted()
    if not runs or queues is None:
        return set()
    steps: dict[str, tuple[RunState, list[str]]] = {}
    for run, token_id in claimed:
        if run.run_id in runs:
            steps.setdefault(run.run_id, (run, []))[1].append(token_id)
    granted: set[tuple[str, str]] = set()
    for run_id, (run, tokens) in steps.items():
        if all(unserved(run, t) for t in tokens):
            found = sorted({str(unserved(run, t)) for t in tokens})
            log.warning(
                "run %s was handed over to this engine for a queue it serves, but here its "
                "ready steps belong to %s: the engines' registries disagree on the queue of "
                "an activity; running them here",
                run_id,
                ", ".join(repr(q) for q in found),
            )
            granted |= {(run_id, t) for t in tokens}
    return granted
