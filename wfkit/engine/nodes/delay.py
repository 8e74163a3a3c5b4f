"""Delay: a durable timer row with a due time, not a sleep."""

from __future__ import annotations

from wfkit.definition.kinds import Node, NodeKind
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Token
from wfkit.engine.nodes.base import NodeHandler, handles
from wfkit.engine.vocabulary import EventKind, TimerKind, TokenState


@handles(NodeKind.DELAY)
class Delay(NodeHandler):
    """Parks the token until the duration has passed."""

    def enter(self, cp: Checkpoint, token_id: str, token: Token, node_id: str, node: Node) -> None:
        cp.set_token(token_id, st=TokenState.TIMER)
        due = cp.start_timer(token_id, TimerKind.DELAY, node.config.duration)
        cp.event(EventKind.DELAY_STARTED, node_id, token_id, detail={"due": due.isoformat()})

    def on_timer(
        self, cp: Checkpoint, token_id: str, node_id: str, node: Node, kind: TimerKind
    ) -> None:
        cp.clear_timer(token_id)
        cp.event(EventKind.TIMER_FIRED, node_id, token_id, detail={"kind": kind})
        cp.leave(token_id, node_id, "next")
