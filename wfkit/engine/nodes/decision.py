"""Decision: a safe expression over the data, or a registered function, picks the outlet."""

from __future__ import annotations

from typing import Any

from wfkit.definition.expressions import evaluate
from wfkit.definition.kinds import Node, NodeKind
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Token
from wfkit.engine.executor import AttemptResult
from wfkit.engine.loops import loop_item, loop_path
from wfkit.engine.nodes.action import Action
from wfkit.engine.nodes.base import handles
from wfkit.engine.vocabulary import EventKind
from wfkit.errors import ExpressionError


def expression_scope(cp: Checkpoint, token: Token) -> dict[str, Any]:
    """Names an expression may read besides the data fields: outputs, and inside for_each
    loops the innermost loop's item and loop_index. (The expression language refuses method
    calls and assignments, so an expression cannot change what it reads.)"""
    scope: dict[str, Any] = {"outputs": cp.run.outputs}
    path = loop_path(cp.flow, token["fr"])
    if path:
        scope["item"] = loop_item(cp.flow, cp.run.frames, token["fr"], cp.run.items)
        scope["loop_index"] = path[-1]
    return scope


def outlet_for(value: Any, node: Node) -> str | None:
    """The outlet a decision's value names: booleans pick true/false, strings name outlets."""
    if isinstance(value, bool):
        name = "true" if value else "false"
    elif isinstance(value, str):
        name = value
    else:
        return None
    return name if name in node.outlets else None


@handles(NodeKind.DECISION)
class Decision(Action):
    """Expression decisions are taken on arrival; function decisions run as a step."""

    def enter(self, cp: Checkpoint, token_id: str, token: Token, node_id: str, node: Node) -> None:
        if node.activity:
            cp.ready(token_id, attempt=1)
            return
        expression = node.config.expression
        try:
            value = evaluate(expression, cp.run.data, extra=expression_scope(cp, token))
        except ExpressionError as exc:
            cp.fail_step(token_id, str(exc), attempt=1)
            return
        self._choose(cp, token_id, node_id, node, value, f"expression {expression!r}")

    def succeeded(
        self, cp: Checkpoint, token_id: str, node_id: str, node: Node, result: AttemptResult
    ) -> None:
        self._choose(cp, token_id, node_id, node, result.output, f"activity {node.activity!r}")

    def _choose(
        self, cp: Checkpoint, token_id: str, node_id: str, node: Node, value: Any, source: str
    ) -> None:
        outlet = outlet_for(value, node)
        if outlet is None:
            error = (
                f"decision {node_id!r}: {source} gave {value!r}, which names none of its "
                f"outlets ({', '.join(node.outlets)}); return one of those names or a boolean"
            )
            if cp.flow.target(node_id, "fallback") is not None:  # a declared, connected branch
                detail = {"outlet": "fallback"}
                cp.event(EventKind.STEP_FAILED, node_id, token_id, error=error, detail=detail)
                cp.leave(token_id, node_id, "fallback")
                return
            cp.fail_step(token_id, error)
            return
        cp.event(EventKind.DECISION_TAKEN, node_id, token_id, detail={"outlet": outlet})
        cp.leave(token_id, node_id, outlet)
