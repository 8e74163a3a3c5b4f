"""Parallel: fork one token per branch into a new frame that the paired join gathers."""

from __future__ import annotations

from wfkit.definition.kinds import Node, NodeKind
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import FrameRef, Token
from wfkit.engine.frames import open_frame
from wfkit.engine.nodes.base import NodeHandler, handles
from wfkit.engine.vocabulary import EventKind


@handles(NodeKind.PARALLEL)
class Parallel(NodeHandler):
    """Every branch outlet gets a token; the frame remembers how many to expect."""

    def enter(self, cp: Checkpoint, token_id: str, token: Token, node_id: str, node: Node) -> None:
        branches = list(node.config.branches)
        frame_id = open_frame(cp, node_id, token, expected=len(branches))
        cp.end_path(token_id, commit=False)
        cp.event(EventKind.PARALLEL_FORKED, node_id, token_id, detail={"branches": branches})
        for index, branch in enumerate(branches):
            frame = cp.run.frames.get(frame_id)
            if frame is None or frame["closed"]:
                break  # an `any` join already completed on an empty branch
            target = cp.flow.target(node_id, branch)
            assert target is not None  # validation refuses a branch that leads nowhere
            cp.spawn(target, [*token["fr"], FrameRef(node_id, frame_id, index)])
