"""Node semantics, one module per family; each registers a handler for its kinds.

Adding a node kind means adding a module here (and importing it below), not editing a chain of
``if kind == ...``. The handler interface is :class:`~wfkit.engine.nodes.base.NodeHandler`.
"""

from __future__ import annotations

from wfkit.engine.nodes import (  # each module registers its handler on import
    action,
    approval,
    call,
    decision,
    delay,
    end,
    for_each,
    join,
    parallel,
    start,
    wait,
)
from wfkit.engine.nodes.base import HANDLERS, NodeHandler, handles

__all__ = [
    "HANDLERS",
    "NodeHandler",
    "action",
    "approval",
    "call",
    "decision",
    "delay",
    "end",
    "for_each",
    "handles",
    "join",
    "load_all",
    "parallel",
    "start",
    "wait",
]


def load_all() -> dict[str, NodeHandler]:
    """The handler of every node kind."""
    return HANDLERS
