"""What a node kind does with a token: the handler interface and its registry.

A handler's ``enter`` is called when a token arrives at a node of its kind. Nodes that run code
mark the token ready (the scheduler runs the attempt and the writer calls ``on_result``); nodes
that wait park the token on a timer or bookmark row (``on_timer`` / ``on_signal`` resume it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wfkit.definition.kinds import Node, NodeKind
from wfkit.engine.vocabulary import TimerKind

if TYPE_CHECKING:
    from wfkit.engine.checkpoint import Checkpoint
    from wfkit.engine.cursor import Token
    from wfkit.engine.executor import AttemptResult

__all__ = ["HANDLERS", "NodeHandler", "handles"]


class NodeHandler:
    """What a node kind does with a token."""

    def enter(self, cp: Checkpoint, token_id: str, token: Token, node_id: str, node: Node) -> None:
        """A token arrived at the node."""
        raise NotImplementedError

    def on_result(
        self, cp: Checkpoint, token_id: str, node_id: str, node: Node, result: AttemptResult
    ) -> None:
        """An attempt of the node's activity finished."""
        raise TypeError(f"a {node.kind.value} node runs no activity")

    def on_timer(
        self, cp: Checkpoint, token_id: str, node_id: str, node: Node, kind: TimerKind
    ) -> None:
        """A timer of the token fired."""
        raise TypeError(f"a {node.kind.value} node has no {kind} timer")


HANDLERS: dict[str, NodeHandler] = {}


def handles(*kinds: NodeKind) -> Any:
    """Class decorator: register one instance of the handler for ``kinds``."""

    def register(cls: type[NodeHandler]) -> type[NodeHandler]:
        instance = cls()
        for kind in kinds:
            HANDLERS[kind.value] = instance
        return cls

    return register
