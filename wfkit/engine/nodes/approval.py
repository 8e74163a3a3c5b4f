"""Approval: park for a person to approve or reject, with an optional expiry."""

from __future__ import annotations

from typing import Any

from wfkit.definition.kinds import Node, NodeKind
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.nodes import NodeHandler, handles
from wfkit.engine.nodes.wait import park, unpark


@handles(NodeKind.APPROVAL)
class Approval(NodeHandler):
    """Leaves through ``approved``, ``rejected`` or ``expired``."""

    def enter(
        self, cp: Checkpoint, token_id: str, token: dict[str, Any], node_id: str, node: Node
    ) -> None:
        detail = {"assignees": list(node.config.assignees)}
        park(
            cp,
            token_id,
            node_id,
            "approval",
            node_id,
            cp.run.run_id,
            node.config.timeout,
            "expiry",
            detail,
        )

    def on_timer(self, cp: Checkpoint, token_id: str, node_id: str, node: Node, kind: str) -> None:
        cp.bookmarks_del.append(token_id)
        unpark(cp, token_id)
        cp.event("approval.expired", node_id, token_id)
        cp.leave(token_id, node_id, "expired")

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
        cp.run.put("outputs", node_id, decision)
        kind = "approved" if approved else "rejected"
        cp.event(f"approval.{kind}", node_id, token_id, output=decision)
        cp.leave(token_id, node_id, kind)
