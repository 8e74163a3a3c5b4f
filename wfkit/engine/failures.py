"""Failure routing, and the rules a checkpoint follows when a token's move reaches further.

A step that failed for good is routed by :func:`route`, in the order docs/semantics.md (§5.1)
gives: its ``failed`` outlet where connected; ``on_failure="suspend"`` parks the run;
``"terminate"`` fails it undoing nothing; a step inside a saga unwinds it (:mod:`sagas`); a branch
of a parallel or for_each reports to its join (:mod:`frames`); otherwise the run fails, once its
attempts in flight have ended (:mod:`drains`).

:data:`RULES` is what the writer hands every :class:`~wfkit.engine.checkpoint.Checkpoint`: this
module imports sagas, frames and drains so that the checkpoint needs none of them.
"""

from __future__ import annotations

from typing import Any

from wfkit.definition.policy import OnFailure
from wfkit.engine import drains, frames, run_retries, sagas
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Ending, FrameRef, ResumePoint
from wfkit.engine.vocabulary import EventKind, RunStatus, SagaEntryState, TokenState

__all__ = ["RULES", "Semantics", "route"]


def route(cp: Checkpoint, token_id: str, error: str, bypass_failed_outlet: bool = False) -> None:
    """Route the failure of the token's step, as the failure rules say."""
    token = cp.run.tokens[token_id]
    node_id = token["node"]
    node = cp.flow.nodes[node_id]
    if not bypass_failed_outlet and cp.flow.target(node_id, "failed") is not None:
        detail = {"outlet": "failed"}
        cp.event(EventKind.STEP_ROUTED, node_id, token_id, detail=detail, error=error)
        cp.leave(token_id, node_id, "failed")
        return
    policy = node.policy.on_failure
    if policy == OnFailure.SUSPEND:
        cp.set_token(token_id, st=TokenState.SUSPENDED, error=error)
        cp.run.set_status(RunStatus.SUSPENDED.value, error)
        cp.event(EventKind.RUN_SUSPENDED, node_id, token_id, error=error)
        return
    if policy != OnFailure.TERMINATE:
        if cp.flow.sagas and sagas.unwind_for(cp, token_id, error):
            return
        if token["fr"]:
            frames.branch_failed(cp, token_id, error)
            return
    # a run retry goes on here; after on_failure="terminate" only an operator's engine.retry
    resume = run_retries.resume_point(cp, token_id, auto=policy != OnFailure.TERMINATE)
    cp.fail_run(error, node_id=node_id, resume=resume)


class Semantics:
    """The :class:`~wfkit.engine.checkpoint.Rules` of this engine."""

    def moved(
        self, cp: Checkpoint, from_node: str, to_node: str | None, frames_: list[FrameRef]
    ) -> None:
        if cp.flow.sagas:
            sagas.on_move(cp, from_node, to_node, frames_)

    def branch_completed(self, cp: Checkpoint, frame_id: str) -> None:
        frames.branch_completed(cp, frame_id)

    def branch_failed(self, cp: Checkpoint, token_id: str, error: str) -> None:
        frames.branch_failed(cp, token_id, error)

    def fail(self, cp: Checkpoint, token_id: str, error: str, bypass_failed_outlet: bool) -> None:
        route(cp, token_id, error, bypass_failed_outlet)

    def end(self, cp: Checkpoint, end: Ending, keep: str | None = None) -> bool:
        return drains.begin(cp, end, keep)

    def close_sagas(self, cp: Checkpoint, status: SagaEntryState) -> None:
        sagas.close_open(cp, status)

    def retry_run(
        self, cp: Checkpoint, error: str, node_id: str | None, resume: ResumePoint | None
    ) -> dict[str, Any] | None:
        return run_retries.on_failed(cp, error, node_id, resume)


RULES = Semantics()
