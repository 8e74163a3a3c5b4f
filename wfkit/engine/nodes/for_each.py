"""for_each: one branch per item of a list in the data, at most ``max_parallelism`` at once."""

from __future__ import annotations

from typing import Any

from wfkit.definition.expressions import evaluate
from wfkit.definition.kinds import Node, NodeKind
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.nodes import NodeHandler, handles
from wfkit.engine.nodes.decision import expression_scope
from wfkit.engine.nodes.join import decide, open_frame, update_frame
from wfkit.errors import ExpressionError


def launch_items(cp: Checkpoint, frame_id: str) -> None:
    """Start branches for the next items while fewer than ``max_parallelism`` are in flight."""
    frame = cp.run.frames[frame_id]
    fork_id = frame["fork"]
    target = cp.flow.target(fork_id, "each")
    while not frame["closed"] and frame["next"] < frame["n"]:
        in_flight = frame["next"] - frame["done"] - len(frame["failed"])
        if in_flight >= frame["limit"]:
            break
        index = frame["next"]
        frame = update_frame(cp, frame_id, next=index + 1)
        cp.spawn(target, [*frame["fr"], [fork_id, frame_id, index]])
        frame = cp.run.frames.get(frame_id) or {**frame, "closed": True}


@handles(NodeKind.FOR_EACH)
class ForEach(NodeHandler):
    """Evaluates the items expression and opens a frame over the items."""

    def enter(
        self, cp: Checkpoint, token_id: str, token: dict[str, Any], node_id: str, node: Node
    ) -> None:
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
        limit = config.max_parallelism or max(len(items), 1)
        frame_id = open_frame(cp, node_id, token, len(items), items=items, next=0, limit=limit)
        cp.end_path(token_id, commit=False)
        cp.event(
            "for_each.started", node_id, token_id, detail={"items": len(items), "limit": limit}
        )
        launch_items(cp, frame_id)
        decide(cp, frame_id)
