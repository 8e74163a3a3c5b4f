"""Runs end only after their attempts in flight have ended.

When a run is to fail, be cancelled or start a top-level saga unwind while other tokens have
attempts queued or running, those tokens become ``cancelling``: their cancel flag is raised (an
attempt not yet started does not start), each gets a durable ``drain`` timer, and the run records
``run.draining``. The pending end is part of the run's state (``run.ending``), so an engine that
restarts during the drain finishes it. When a cancelling token's attempt returns, its outcome is
recorded (``step.completed``, ``step.failed`` or ``step.cancelled``, detail
``{"after_cancel": true}``); a completed compensable step is pushed on its saga stack, so the
unwind that follows undoes it. An attempt that does not stop by its deadline (the step's
``attempt_timeout``, else the engine's drain timeout), or whose engine process stopped, is
recorded ``step.abandoned``: its outcome is unknown. Once no token is cancelling, the end
happens: ``run.failed``, ``run.cancelled`` or the saga unwind.

A join satisfied early (``any``, ``at_least``) takes its other branches away the same way
(:func:`take_away`), but the run goes on at once: the outcome of such an attempt is recorded as
``step.cancelled`` (``{"after_cancel": true, "completed": ...}``) — the run moved on without it,
so its data patch and output are not applied — and a compensable step it completed is still
pushed on its saga stack. Like any other end, the run's completion waits for these attempts.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from wfkit.engine import sagas
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Ending, Token
from wfkit.engine.executor import AttemptResult
from wfkit.engine.handles import humanize
from wfkit.engine.loops import loop_path
from wfkit.engine.merge import merge_result
from wfkit.engine.outputs import record_output
from wfkit.engine.vocabulary import EndKind, EventKind, RunStatus, TimerKind, TokenState

__all__ = ["abandon", "begin", "on_deadline", "on_result", "take_away"]

KEY = "run"  # the one entry of ``run.ending``
DRAIN = TimerKind.DRAIN  # the timer kind of a cancelling token's deadline


def begin(cp: Checkpoint, end: Ending, keep: str | None = None) -> bool:
    """Take away every token but ``keep``; those with an attempt in flight become cancelling.

    Returns True when the end must wait for them: it is then kept in the run's state and
    happens once the last of them has ended. ``end`` is ``{"end": "failed" | "cancelled" |
    "unwind", ...}`` with what that end needs (error, node, reason, token). An operator's cancel
    replaces a pending end; any other end waits behind the pending one.
    """
    run = cp.run
    pending = run.ending.get(KEY)
    draining: list[str] = []
    for token_id, token in list(run.tokens.items()):
        if token_id == keep:
            continue
        if token["st"] == TokenState.CANCELLING:
            draining.append(token_id)
        elif token["st"] == TokenState.READY and cp.in_flight and cp.in_flight(token_id):
            _cancelling(cp, token_id)
            draining.append(token_id)
        else:
            cp.remove(token_id)
    if not draining:
        return False
    if pending is not None and end["end"] != EndKind.CANCELLED:
        return True
    run.put("ending", KEY, end)
    if run.status not in (RunStatus.RUNNING.value, RunStatus.COMPENSATING.value):
        run.set_status(RunStatus.RUNNING.value, run.error)
    nodes = [run.tokens[t]["node"] for t in draining]
    cp.event(
        EventKind.RUN_DRAINING,
        end.get("node"),
        error=end.get("error"),
        detail={"end": end["end"], "tokens": draining, "nodes": nodes},
    )
    return True


def take_away(cp: Checkpoint, token_id: str) -> None:
    """A branch is no longer needed (its join is satisfied): an attempt in flight is asked to
    stop and its outcome recorded when it returns; anything else the token holds goes now."""
    token = cp.run.tokens[token_id]
    if token["st"] == TokenState.CANCELLING:
        return
    if token["st"] == TokenState.READY and cp.in_flight and cp.in_flight(token_id):
        _cancelling(cp, token_id, why="join")
    else:
        cp.remove(token_id)


def _cancelling(cp: Checkpoint, token_id: str, why: Literal["end", "join"] = "end") -> None:
    cp.set_token(token_id, st=TokenState.CANCELLING, why=why)
    cp.cancel.append(token_id)
    cp.start_timer(token_id, DRAIN, _deadline(cp, cp.run.tokens[token_id]))


def _deadline(cp: Checkpoint, token: Token) -> timedelta:
    """How long a cancelling attempt may take to stop: its attempt_timeout, else the engine's."""
    node = cp.flow.nodes[token["node"]]
    policy = node.policy
    if "comp" in token and node.compensation_policy is not None:
        policy = node.compensation_policy
    return policy.attempt_timeout or cp.drain_timeout


def on_result(cp: Checkpoint, token_id: str, result: AttemptResult) -> None:
    """The attempt of a cancelling token returned: record its outcome, then end if it was the
    last."""
    token = cp.run.tokens[token_id]
    node_id = token["node"]
    detail: dict[str, Any] = {"after_cancel": True}
    if token["li"] is not None:
        detail["loop_index"] = token["li"]
    timing = {"attempt": result.attempt, "started_at": result.started_at}
    if token.get("why") == "join":
        _branch_outcome(cp, token_id, result, detail)
    elif "comp" in token:
        sagas.late_compensation(cp, token_id, result, detail)
    elif result.ok:
        merge_result(cp, token_id, result)
        cp.strict_conflict = None  # the run ends anyway; the conflict is recorded as an event
        record_output(cp, node_id, loop_path(cp.flow, token["fr"]), result.output)
        done = EventKind.STEP_COMPLETED
        cp.event(done, node_id, token_id, output=result.output, detail=detail, **timing)
        sagas.push(cp, token_id, node_id, result.output)  # an unwind that follows undoes it
    else:
        kind = EventKind.STEP_CANCELLED if result.cancelled else EventKind.STEP_FAILED
        cp.event(kind, node_id, token_id, error=result.error, detail=detail, **timing)
    _settle(cp, token_id)


def on_deadline(cp: Checkpoint, token_id: str) -> None:
    """A cancelling token's drain timer fired: its attempt did not stop in time."""
    token = cp.run.tokens[token_id]
    cp.event(
        EventKind.STEP_ABANDONED,
        token["node"],
        token_id,
        attempt=token["att"],
        error=(
            f"attempt {token['att']} of {token['node']!r} did not stop within "
            f"{humanize(_deadline(cp, token))} of being cancelled; its outcome is unknown (give "
            "the activity an attempt_timeout, or let it check ctx.cancelled)"
        ),
        detail={"after_cancel": True, "reason": "deadline"},
    )
    _settle(cp, token_id)


def abandon(cp: Checkpoint, token_ids: list[str]) -> None:
    """Cancelling tokens of a run taken up again have no attempt any more: the engine that ran
    them stopped. Record them abandoned and let the end happen."""
    for token_id in token_ids:
        token = cp.run.tokens[token_id]
        cp.event(
            EventKind.STEP_ABANDONED,
            token["node"],
            token_id,
            attempt=token["att"],
            error=(
                f"the engine stopped while attempt {token['att']} of {token['node']!r} was being "
                "cancelled; its outcome is unknown"
            ),
            detail={"after_cancel": True, "reason": "engine stopped"},
        )
        _settle(cp, token_id)


def _settle(cp: Checkpoint, token_id: str) -> None:
    cp.clear_timer(token_id)
    cp.run.drop("tokens", token_id)
    run = cp.run
    if KEY not in run.ending:
        return
    if any(t["st"] == TokenState.CANCELLING for t in run.tokens.values()):
        return
    end = run.ending[KEY]
    run.drop("ending", KEY)
    if end["end"] == EndKind.CANCELLED:
        cp.end_cancelled(end.get("reason") or "", end.get("actor"))
    elif end["end"] == EndKind.UNWIND and end["token"] in run.tokens:
        sagas.start_unwind(cp, end["token"], end["error"])
    else:
        cp.end_failed(end["error"], node_id=end.get("node"), resume=end.get("resume"))


def _branch_outcome(
    cp: Checkpoint, token_id: str, result: AttemptResult, detail: dict[str, Any]
) -> None:
    """An attempt of a branch its join no longer needed came back: the run moved on without
    it, so only the fact is recorded (and a completed compensable step is remembered)."""
    node_id = cp.run.tokens[token_id]["node"]
    cp.event(
        EventKind.STEP_CANCELLED,
        node_id,
        token_id,
        attempt=result.attempt,
        started_at=result.started_at,
        error=None if result.ok else result.error,
        output=result.output if result.ok else None,
        detail={**detail, "completed": result.ok},
    )
    if result.ok:
        sagas.push(cp, token_id, node_id, result.output)
