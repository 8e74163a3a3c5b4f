"""What a token leaving through an outlet with no edge means, by node kind and outlet.

A token never vanishes silently: an unconnected outlet either ends the path (the ordinary end of
a sequence, or an end recorded as ``path.ended``), sends the token on along ``next``, or fails the
step (the failure rules apply). This table is the one place that says which; docs/semantics.md
gives the reasons. Outlets that must be connected (the branches of parallel and for_each) are
refused by validation and never reach it.
"""

from __future__ import annotations

from enum import StrEnum

from wfkit.definition.kinds import NodeKind

__all__ = ["Unconnected", "unconnected"]


class Unconnected(StrEnum):
    """What happens to a token that leaves through an outlet with no edge."""

    END = "end"  # the path ends: the ordinary end of a sequence (a main outlet)
    END_RECORDED = "end_recorded"  # the path ends, recorded as a `path.ended` event
    NEXT = "next"  # the token goes on along the node's `next` outlet
    FAIL = "fail"  # the step fails for good; the failure rules apply


_TABLE: dict[tuple[NodeKind, str], Unconnected] = {
    (NodeKind.START, "next"): Unconnected.END,
    (NodeKind.ACTION, "next"): Unconnected.END,
    (NodeKind.ACTION, "failed"): Unconnected.FAIL,
    (NodeKind.ACTION, "fallback"): Unconnected.FAIL,
    (NodeKind.DELAY, "next"): Unconnected.END,
    (NodeKind.WAIT, "next"): Unconnected.END,
    (NodeKind.WAIT, "elapsed"): Unconnected.NEXT,
    (NodeKind.JOIN, "completed"): Unconnected.END,
    (NodeKind.JOIN, "partial"): Unconnected.FAIL,
    (NodeKind.APPROVAL, "approved"): Unconnected.END,
    (NodeKind.APPROVAL, "rejected"): Unconnected.FAIL,
    (NodeKind.APPROVAL, "expired"): Unconnected.FAIL,
    (NodeKind.CALL, "next"): Unconnected.END,
    (NodeKind.CALL, "failed"): Unconnected.FAIL,
}


def unconnected(kind: NodeKind | str, outlet: str) -> Unconnected:
    """What an unconnected ``outlet`` of a ``kind`` node means.

    Every branch of a decision ends its path, recorded (validation warns about it); so does any
    outlet the table does not name, so that no token ever vanishes without a record.

    Examples
    --------
    >>> unconnected("wait", "elapsed")
    <Unconnected.NEXT: 'next'>
    >>> unconnected("decision", "maybe")
    <Unconnected.END_RECORDED: 'end_recorded'>
    """
    return _TABLE.get((NodeKind(kind), outlet), Unconnected.END_RECORDED)
