"""Delay: a durable timer row with a due time, not a sleep."""

from __future__ import annotations

from typing import Any

from wfkit.definition.kinds import Node, NodeKind
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.nodes.base import NodeHandler, handles


@handles(NodeKind.DELAY)
class Delay(NodeHandler):
    """Parks the token until the duration has passed."""

    def enter(
        self, cp: Checkpoint, token_id: str, token: dict[str, Any], node_id: str, node: Node
    ) -> None:
        cp.set_token(token_id, st="timer")
        due = cp.start_timer(token_id, "delay", node.config.duration)
        cp.event("delay.started", node_id, token_id, detail={"due": due.isoformat()})

    def on_timer(self, cp: Checkpoint, token_id: str, node_id: str, node: Node, kind: str) -> None:
        cp.clear_timer(token_id)
        cp.event("timer.fired", node_id, token_id, detail={"kind": kind})
        cp.leave(token_id, node_id, "next")
