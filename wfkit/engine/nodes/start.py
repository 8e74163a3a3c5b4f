"""Start and end: where a run's token begins, and where a path explicitly ends."""

from __future__ import annotations

from wfkit.definition.kinds import Node, NodeKind
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Token
from wfkit.engine.nodes.base import NodeHandler, handles


@handles(NodeKind.START)
class Start(NodeHandler):
    """The token moves straight on through ``next``."""

    def enter(self, cp: Checkpoint, token_id: str, token: Token, node_id: str, node: Node) -> None:
        cp.leave(token_id, node_id, "next")
