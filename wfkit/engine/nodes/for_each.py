"""for_each: one branch per item of a list in the data, at most ``max_parallelism`` at once."""

from __future__ import annotations

from wfkit.definition.expressions import evaluate
from wfkit.definition.kinds import Node, NodeKind
from wfkit.definition.values import json_problem
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Token
from wfkit.engine.frames import decide, launch_items, open_frame
from wfkit.engine.nodes.base import NodeHandler, handles
from wfkit.engine.nodes.decision import expression_scope
from wfkit.engine.vocabulary import EventKind
from wfkit.errors import ExpressionError


@handles(NodeKind.FOR_EACH)
class ForEach(NodeHandler):
    """Evaluates the items expression and opens a frame over the items."""

    def enter(self, cp: Checkpoint, token_id: str, token: Token, node_id: str, node: Node) -> None:
        config = node.config
        try:
            items = evaluate(config.items, cp.run.data, extra=expression_scope(cp, token))
        except ExpressionError as exc:
            cp.fail_step(token_id, str(exc))
            return
        if not isinstance(items, list):
            error = (
                f"for_each {node_id!r}: items expression {config.items!r} gave a "
                f"{type(items).__name__}, not a list; point it at a list in the data"
            )
            cp.fail_step(token_id, error)
            return
        problem = json_problem(items, "items")
        if problem is not None:  # each item is handed over and recorded as JSON
            cp.fail_step(
                token_id,
                f"for_each {node_id!r}: items expression {config.items!r} gave a value that "
                f"cannot be stored: {problem}",
            )
            return
        limit = config.max_parallelism or max(len(items), 1)
        frame_id = open_frame(cp, node_id, token, len(items), limit=limit)
        cp.run.put("items", frame_id, items)
        cp.end_path(token_id, commit=False)
        detail = {"items": len(items), "limit": limit}
        cp.event(EventKind.FOR_EACH_STARTED, node_id, token_id, detail=detail)
        launch_items(cp, frame_id)
        decide(cp, frame_id)
