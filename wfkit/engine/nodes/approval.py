"""Approval: park for a person to approve or reject, with an optional expiry."""

from __future__ import annotations

from wfkit.definition.durations import format_duration
from wfkit.definition.kinds import Node, NodeKind
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Token
from wfkit.engine.loops import loop_path
from wfkit.engine.nodes.base import NodeHandler, handles
from wfkit.engine.nodes.wait import park, unpark
from wfkit.engine.outputs import record_output
from wfkit.engine.vocabulary import EventKind, TimerKind, WaitKind


@handles(NodeKind.APPROVAL)
class Approval(NodeHandler):
    """Leaves through ``approved``, ``rejected`` or ``expired``; the last two, unconnected, fail
    the step (engine/outlets.py)."""

    def enter(self, cp: Checkpoint, token_id: str, token: Token, node_id: str, node: Node) -> None:
        detail = {"assignees": list(node.config.assignees)}
        park(
            cp,
            token_id,
            node_id,
            WaitKind.APPROVAL,
            node_id,
            cp.run.run_id,
            node.config.timeout,
            TimerKind.EXPIRY,
            detail,
        )

    def on_timer(
        self, cp: Checkpoint, token_id: str, node_id: str, node: Node, kind: TimerKind
    ) -> None:
        cp.drop_bookmark(token_id)
        unpark(cp, token_id)
        cp.event(EventKind.APPROVAL_EXPIRED, node_id, token_id)
        timeout = format_duration(node.config.timeout) if node.config.timeout else "its timeout"
        error = f"approval {node_id!r} expired after {timeout} with no decision"
        cp.leave(token_id, node_id, "expired", error=error)

    def decide(
        self, cp: Checkpoint, token_id: str, node_id: str, approved: bool, comment: str | None
    ) -> None:
        """A person decided; the bookmark was already consumed."""
        unpark(cp, token_id)
        decision = {
            "approved": approved,
            "actor": cp.actor,
            "comment": comment,
            "at": cp.now.isoformat(),
        }
        record_output(cp, node_id, loop_path(cp.flow, cp.run.tokens[token_id]["fr"]), decision)
        if approved:
            cp.event(EventKind.APPROVAL_APPROVED, node_id, token_id, output=decision)
            cp.leave(token_id, node_id, "approved")
            return
        cp.event(EventKind.APPROVAL_REJECTED, node_id, token_id, output=decision)
        error = f"approval {node_id!r} was rejected by {cp.actor or 'an unnamed actor'}"
        cp.leave(token_id, node_id, "rejected", error=f"{error}: {comment}" if comment else error)
