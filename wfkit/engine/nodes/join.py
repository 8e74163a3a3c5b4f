"""Join: a branch token arriving counts as completed (see :mod:`wfkit.engine.frames`)."""

from __future__ import annotations

from wfkit.definition.kinds import Node, NodeKind
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Token
from wfkit.engine.frames import branch_completed
from wfkit.engine.nodes.base import NodeHandler, handles


@handles(NodeKind.JOIN)
class Join(NodeHandler):
    """A branch token arriving at its join counts as completed."""

    def enter(self, cp: Checkpoint, token_id: str, token: Token, node_id: str, node: Node) -> None:
        frames = token["fr"]
        if not frames or frames[-1].fork != node.config.fork:
            cp.fail(
                token_id,
                f"a token reached join {node_id!r} from outside the branches of "
                f"{node.config.fork!r}; connect only that fork's branches to it",
                bypass_failed_outlet=True,
            )
            return
        cp.end_path(token_id, commit=False)
        branch_completed(cp, frames[-1].frame)
