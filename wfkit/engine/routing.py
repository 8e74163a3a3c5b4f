"""Where an attempt's result or a due timer goes: to a draining step's end, a compensation, a
run's retry, or the handler of the token's node kind. The writer has checked they are current."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from wfkit.engine import drains, logs, run_retries, sagas
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Token
from wfkit.engine.executor import AttemptResult
from wfkit.engine.nodes import NodeHandler
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import TimerKind, TokenState

__all__ = ["route_result", "route_timer"]

CheckpointOf = Callable[[RunState], Checkpoint]  # the run's checkpoint in the batch being built


def route_result(
    checkpoint: CheckpointOf,
    handlers: Mapping[str, NodeHandler],
    run: RunState,
    token: Token,
    result: AttemptResult,
) -> None:
    """Fold the result of the token's current attempt into its run's checkpoint."""
    if result.logs is not None and token["st"] in (TokenState.CANCELLING, TokenState.READY):
        logs.keep(checkpoint(run), result)
    if result.artifacts and token["st"] in (TokenState.CANCELLING, TokenState.READY):
        # recorded with the checkpoint that records the attempt: durable exactly when it is
        checkpoint(run).artifacts += result.artifacts
    if token["st"] == TokenState.CANCELLING:
        drains.on_result(checkpoint(run), result.token_id, result)
        return
    if token["st"] != TokenState.READY:
        return
    node = run.flow.nodes[result.node_id]
    cp = checkpoint(run)
    if "comp" in token:
        sagas.on_compensation_result(cp, result.token_id, result)
        return
    handlers[node.kind.value].on_result(cp, result.token_id, result.node_id, node, result)


def route_timer(
    checkpoint: CheckpointOf,
    handlers: Mapping[str, NodeHandler],
    run: RunState,
    token_id: str,
    kind: str,
) -> None:
    """Let the token's drain, run retry or node handle its timer that came due."""
    token = run.tokens[token_id]
    if kind == drains.DRAIN and token["st"] == TokenState.CANCELLING:
        drains.on_deadline(checkpoint(run), token_id)
        return
    if kind == run_retries.TIMER and token["st"] == TokenState.RUN_RETRY:
        run_retries.on_timer(checkpoint(run), token_id)
        return
    node = run.flow.nodes[token["node"]]
    cp = checkpoint(run)
    handlers[node.kind.value].on_timer(cp, token_id, token["node"], node, TimerKind(kind))
