"""What validation rules read: the graph, its valid nodes, and what validation was given.

:func:`~wfkit.definition.validation.validate` runs the rules every graph must meet, then, for
each valid node, the ``rules`` of its kind's :class:`~wfkit.definition.kind_spec.KindSpec`
(a wait's binding, a call's target workflow; written beside the kind's config model in
:mod:`wfkit.definition.configs`). All of them read one :class:`RuleContext`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import networkx as nx
from pydantic import BaseModel

if TYPE_CHECKING:
    from wfkit.definition.activities import ActivityRegistry
    from wfkit.definition.kinds import Node

__all__ = ["Registered", "RuleContext", "field_names", "listed"]

Registered = Mapping[str, Mapping[int, type[BaseModel] | None]]
"""Workflows a call may name: id -> version -> data model (None where it declares none)."""

_LISTED = 10
"""Names listed in one message before the rest are counted ("and 5 more")."""


def listed(items: Iterable[object], sep: str = ", ") -> str:
    """At most ``_LISTED`` names joined, then how many more: messages stay short.

    Examples
    --------
    >>> listed(range(12))
    '0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more'
    """
    names = list(items)
    text = sep.join(str(x) for x in names[:_LISTED])
    return text + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


def field_names(model: type[BaseModel]) -> set[str]:
    """The field names of a data model, aliases included."""
    names = set(model.model_fields)
    names |= {f.alias for f in model.model_fields.values() if f.alias}
    return names


class RuleContext:
    """What the rules share: the graph, its valid nodes, and the data model's field names."""

    def __init__(
        self,
        G: nx.MultiDiGraph,
        registry: ActivityRegistry | None,
        model: type[BaseModel] | None,
        workflows: Registered | None = None,
        workflow_id: str | None = None,
    ) -> None:
        self.G = G
        self.registry = registry
        self.workflows = workflows
        self.workflow_id = workflow_id
        self.fields: set[str] | None = field_names(model) if model is not None else None
        self.nodes: dict[str, Node] = {}
        self.broken: set[str] = set()
