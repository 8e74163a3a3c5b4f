"""What a token leaving through an outlet with no edge means, read from the node-kinds table.

A token never vanishes silently: an unconnected outlet either ends the path (the ordinary end of
a sequence, or an end recorded as ``path.ended``), sends the token on along ``next``, or fails the
step (the failure rules apply). Each kind's entry in :data:`~wfkit.definition.kinds.KINDS` says
which, outlet by outlet; docs/semantics.md §3 gives the reasons. Outlets that must be connected
(the branches of parallel and for_each) are refused by validation and never reach the engine;
should one, it ends its path with a record, like any outlet the table does not name.
"""

from __future__ import annotations

from wfkit.definition.kind_spec import Unconnected
from wfkit.definition.kinds import KINDS, NodeKind

__all__ = ["Unconnected", "unconnected"]


def unconnected(kind: NodeKind | str, outlet: str) -> Unconnected:
    """What an unconnected ``outlet`` of a ``kind`` node means to the engine.

    Examples
    --------
    >>> unconnected("wait", "elapsed")
    <Unconnected.NEXT: 'next'>
    >>> unconnected("decision", "maybe")
    <Unconnected.END_RECORDED: 'end_recorded'>
    """
    rule = KINDS[NodeKind(kind)].unconnected(outlet)
    return Unconnected.END_RECORDED if rule is Unconnected.REFUSED else rule
