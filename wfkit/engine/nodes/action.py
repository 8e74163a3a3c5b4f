"""Action: run the registered activity, retry with backoff, route the outcome by outlet."""

from __future__ import annotations

from wfkit.definition.kinds import Node, NodeKind
from wfkit.engine import sagas
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Token
from wfkit.engine.executor import AttemptResult
from wfkit.engine.loops import loop_detail, loop_path
from wfkit.engine.merge import merge_result
from wfkit.engine.nodes.base import NodeHandler, handles
from wfkit.engine.outputs import record_output
from wfkit.engine.vocabulary import EventKind, TimerKind, TokenState


@handles(NodeKind.ACTION)
class Action(NodeHandler):
    """A step that runs code: ready on arrival; each attempt's result is checkpointed."""

    def enter(self, cp: Checkpoint, token_id: str, token: Token, node_id: str, node: Node) -> None:
        cp.ready(token_id, attempt=1)

    def on_result(
        self, cp: Checkpoint, token_id: str, node_id: str, node: Node, result: AttemptResult
    ) -> None:
        token = cp.run.tokens[token_id]
        path = loop_path(cp.flow, token["fr"])
        detail = loop_detail(path)
        if result.ok:
            merge_result(cp, token_id, result)
            if cp.strict_conflict:
                error, cp.strict_conflict = cp.strict_conflict, None
                cp.fail_run(error, node_id=node_id)
                return
            record_output(cp, node_id, path, result.output)
            cp.event(
                EventKind.STEP_COMPLETED,
                node_id,
                token_id,
                attempt=result.attempt,
                started_at=result.started_at,
                output=result.output,
                detail=detail,
            )
            if node.compensation:
                sagas.push(cp, token_id, node_id, result.output)
            self.succeeded(cp, token_id, node_id, node, result)
            return
        # Fallback, or an output the node cannot use, leaves through a connected `fallback`
        has_fallback = cp.flow.target(node_id, "fallback") is not None
        fallback = has_fallback and (result.fallback or result.unusable)
        retry = (
            not result.fallback
            and not fallback
            and not result.cancelled
            and result.attempt < node.policy.max_attempts
        )
        info = dict(detail or {})
        if retry:
            delay = node.policy.delay_before(result.attempt + 1)
            info["retry_in_s"] = round(delay.total_seconds(), 3)
        elif fallback:
            info["outlet"] = "fallback"
        cp.event(
            EventKind.STEP_CRASHED if result.crashed else EventKind.STEP_FAILED,
            node_id,
            token_id,
            attempt=result.attempt,
            started_at=result.started_at,
            error=result.error,
            detail=info or None,
        )
        if fallback:
            cp.leave(token_id, node_id, "fallback")
        elif retry:
            if delay.total_seconds() <= 0:
                cp.ready(token_id, attempt=result.attempt + 1)
            else:
                cp.set_token(token_id, st=TokenState.RETRY, att=result.attempt + 1)
                cp.start_timer(token_id, TimerKind.RETRY, delay)
        else:
            cp.fail(token_id, result.error or "failed")

    def succeeded(
        self, cp: Checkpoint, token_id: str, node_id: str, node: Node, result: AttemptResult
    ) -> None:
        """Where the token goes after a successful attempt."""
        cp.leave(token_id, node_id, "next")

    def on_timer(
        self, cp: Checkpoint, token_id: str, node_id: str, node: Node, kind: TimerKind
    ) -> None:
        cp.clear_timer(token_id)
        token = cp.run.tokens[token_id]
        retrying = EventKind.COMPENSATION_RETRYING if "comp" in token else EventKind.STEP_RETRYING
        cp.event(retrying, node_id, token_id, attempt=token["att"])
        cp.ready(token_id)
