"""End: the token's path ends here (other paths of the run go on)."""

from __future__ import annotations

from wfkit.definition.kinds import Node, NodeKind
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Token
from wfkit.engine.nodes.base import NodeHandler, handles


@handles(NodeKind.END)
class End(NodeHandler):
    """Ends the path."""

    def enter(self, cp: Checkpoint, token_id: str, token: Token, node_id: str, node: Node) -> None:
        cp.end_path(token_id)
