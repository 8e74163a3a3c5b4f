"""Whole-run retries: a run that failed for good is tried again from where it failed.

A workflow with a :class:`~wfkit.definition.run_retry.RunRetry` does not end ``failed`` while
its budget lasts: the failure (after any saga unwind it triggered) parks the run ``waiting`` on
a durable ``run_retry`` timer, recorded ``run.retrying``; when the timer fires the run is
recorded ``run.retried`` and goes on from its *resume point* — the step that failed, the fork
of a join that failed, or the first step of the outermost saga its unwind undid
(docs/semantics.md §16). ``engine.retry`` does the same by hand for a run that is ``failed``.

The run's retry record (``run.retry["run"]``: the run attempt, the resume point, the failing
token) is part of its state, so a pending retry survives a restart like any timer.
"""

from __future__ import annotations

import logging
from typing import Any

import networkx as nx

from wfkit.definition.run_retry import RunRetry
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import ResumePoint, RetryRecord, Token, Unwind
from wfkit.engine.flows import CompiledFlow
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import EventKind, RunStatus, SagaEntryState, TimerKind, TokenState
from wfkit.errors import DefinitionError

__all__ = [
    "TIMER",
    "after_unwind",
    "budget",
    "on_failed",
    "on_timer",
    "record",
    "resume_point",
    "retry_by_hand",
    "run_attempt",
    "waiting_error",
]

log = logging.getLogger("wfkit.engine")

KEY = "run"  # the one entry of ``run.retry``
TIMER = TimerKind.RUN_RETRY  # the timer kind of a run waiting for its next attempt

Resume = ResumePoint
"""Where a failed run goes on: ``{"node", "token", "auto"}`` (``auto``: a RunRetry may retry
it; False for ``on_failure="terminate"``, which only an operator retries)."""


def budget(flow: CompiledFlow) -> RunRetry | None:
    """The workflow's RunRetry; None without one, or when its stored graph holds a malformed one
    (registration refuses those; a definition written to the store by other means is run as
    having none, with a warning)."""
    try:
        return flow.workflow.retry
    except DefinitionError as exc:
        log.warning("%s; its runs are not retried", exc)
        return None


def record(run: RunState) -> RetryRecord | None:
    """The run's retry record (None before its first failure)."""
    return run.retry.get(KEY)


def run_attempt(run: RunState) -> int:
    """The run attempt under way, or the last one that ended (1 for a run never retried)."""
    kept = run.retry.get(KEY)
    return int(kept.get("attempt") or 1) if kept is not None else 1


def resumable(run: RunState) -> bool:
    """True when the run failed where it can go on (``engine.retry`` may take it up)."""
    kept = run.retry.get(KEY)
    return kept is not None and kept.get("resume") is not None


def resume_point(cp: Checkpoint, token_id: str, *, auto: bool = True) -> Resume | None:
    """Where a run failing at this token would go on: its node (a failed join: the fork that
    opened it); None for a token inside a branch or loop cell (its frame is gone with the run)."""
    token = cp.run.tokens.get(token_id)
    if token is None or token["fr"]:
        return None
    node_id = token["node"]
    node = cp.flow.nodes[node_id]
    if node.spec.gathers:
        node_id = node.config.fork
    return {"node": node_id, "token": token_id, "auto": auto}


def after_unwind(cp: Checkpoint, unwind: Unwind) -> Resume | None:
    """The resume point of a run whose top-level saga unwind just finished: the failing step
    when the unwind undid nothing, else the first step of the outermost saga whose steps it
    undid (of the sagas the failing step is in)."""
    run, flow = cp.run, cp.flow
    failing = unwind["then"]["token"]
    resume = resume_point(cp, failing)
    if resume is None:
        return None
    undone = [
        run.saga[e]
        for e in unwind["steps"]
        if e in run.saga
        and run.saga[e]["state"] in (SagaEntryState.COMPENSATED, SagaEntryState.SKIPPED)
    ]
    if not undone:
        return resume
    chain = flow.node_sagas(run.tokens[failing]["node"])
    # each undone step was undone as part of the innermost saga of the failing chain holding
    # it (a nested saga already left, policy="unwind", counts as the saga around it)
    touched = {
        next((s for s in flow.saga_chain(entry["saga"]) if s in chain), None) for entry in undone
    }
    outermost = [s for s in chain if s in touched]
    if outermost:
        resume = {**resume, "node": _saga_entry(cp, outermost[-1], resume["node"])}
    return resume


def _saga_entry(cp: Checkpoint, saga_id: str, failing_node: str) -> str:
    """The node where a path enters saga ``saga_id`` on its way to ``failing_node``."""
    flow = cp.flow
    G: nx.MultiDiGraph = flow.workflow.graph
    members = {n for n in flow.nodes if saga_id in flow.node_sagas(n)}
    entries = [
        n
        for n in G.nodes
        if n in members
        and (G.in_degree(n) == 0 or any(p not in members for p in G.predecessors(n)))
    ]
    for n in entries:
        if n == failing_node or nx.has_path(G, n, failing_node):
            return str(n)
    return entries[0] if entries else failing_node


def on_failed(
    cp: Checkpoint, error: str, node_id: str | None, resume: Resume | None
) -> dict[str, Any] | None:
    """The run is to fail for good: keep where it could go on; when its RunRetry has attempts
    left, park it on the retry timer instead and return None. Otherwise return the detail of
    its ``run.failed`` event."""
    run = cp.run
    attempt = run_attempt(run)
    retry = budget(cp.flow)
    kept: RetryRecord = {"attempt": attempt, "resume": None, "token": None}
    if resume is not None:
        kept = {**kept, "resume": resume["node"], "token": resume["token"]}
    run.put("retry", KEY, kept)
    if retry is None:
        return {}
    detail = {"run_attempt": attempt, "max_attempts": retry.max_attempts}
    if resume is None or not resume["auto"] or attempt >= retry.max_attempts:
        return detail
    token_id = resume["token"]
    run.put(
        "tokens",
        token_id,
        {"node": resume["node"], "st": TokenState.RUN_RETRY, "att": 1, "fr": [], "li": None},
    )
    due = cp.start_timer(token_id, TIMER, retry.delay_before(attempt + 1))
    run.set_status(RunStatus.WAITING.value, error)
    cp.event(
        EventKind.RUN_RETRYING,
        node_id,
        token_id,
        error=error,
        detail={
            **detail,
            "next_attempt": attempt + 1,
            "due": due.isoformat(),
            "resume": resume["node"],
        },
    )
    return None


def on_timer(cp: Checkpoint, token_id: str) -> None:
    """The retry timer of a waiting run fired: its next run attempt starts."""
    cp.clear_timer(token_id)
    _resume(cp, by_hand=False)


def retry_by_hand(cp: Checkpoint) -> None:
    """An operator tries a failed run again now (one more run attempt, whatever its budget)."""
    _resume(cp, by_hand=True)


def _resume(cp: Checkpoint, *, by_hand: bool) -> None:
    """Start the next run attempt at the resume point: a fresh token (the failing token's id,
    so the step keeps its idempotency key) whose step gets attempts afresh; visits count anew."""
    run, flow = cp.run, cp.flow
    kept = record(run)
    assert kept is not None and kept["resume"] is not None and kept["token"] is not None
    node_id, token_id = kept["resume"], kept["token"]
    attempt = int(kept.get("attempt") or 1) + 1
    run.put("retry", KEY, {"attempt": attempt, "resume": None, "token": None})
    for scope in list(run.visits):
        run.drop("visits", scope)
    run.set_status(RunStatus.RUNNING.value)
    retry = budget(flow)
    detail: dict[str, Any] = {"run_attempt": attempt, "resume": node_id, "by_hand": by_hand}
    if retry is not None:
        detail["max_attempts"] = retry.max_attempts
    cp.event(EventKind.RUN_RETRIED, node_id, token_id, detail=detail)
    token: Token = {"node": node_id, "st": TokenState.NEW, "att": 1, "fr": [], "li": None}
    run.put("tokens", token_id, token)
    node = flow.nodes[node_id]
    cp.handlers[node.kind.value].enter(cp, token_id, token, node_id, node)


def waiting_error(run: RunState) -> tuple[int, int | None, str]:
    """A run waiting for its next attempt: the attempt that failed, the budget, the error's
    last line."""
    retry = budget(run.flow)
    lines = [line for line in (run.error or "").strip().splitlines() if line.strip()]
    error = lines[-1].strip() if lines else "failed"
    return run_attempt(run), retry.max_attempts if retry is not None else None, error
