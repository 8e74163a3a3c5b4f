"""What the graph editor does to a workflow graph, as free functions over ``G`` plus its history.

The front end knows node ids only as text (they come from SVG ``id`` attributes), so lookups take
text and find the graph's own node, whatever its type. :class:`History` keeps
:func:`~wfkit.definition.graph.graph_to_data` snapshots and restores them into the *same* graph
object, so ``flow.graph`` stays the graph the user holds.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import networkx as nx

from wfkit.definition import keys
from wfkit.definition.graph import graph_from_data, graph_to_data, unique_node_id
from wfkit.definition.kinds import KINDS, Node, NodeKind, outlets_of, spec_for
from wfkit.definition.problems import Problem, Severity

__all__ = [
    "History",
    "called_workflow",
    "declared_outlets",
    "default_node_id",
    "find_edge",
    "find_node",
    "problems_html",
    "restore_graph",
    "used_outlets",
]


def default_node_id(G: nx.MultiDiGraph, kind: NodeKind | str) -> str:
    """A readable id for a new node of ``kind``, unique in ``G``, as the builder makes them.

    Examples
    --------
    >>> G = nx.MultiDiGraph()
    >>> default_node_id(G, "start"), default_node_id(G, "delay"), default_node_id(G, "decision")
    ('start', 'delay-1', 'if-1')
    """
    spec = KINDS[NodeKind(kind)]
    return unique_node_id(G, spec.node_id_base(), numbered=spec.numbered_ids)


def find_node(G: nx.MultiDiGraph, name: str) -> Any:
    """The node of ``G`` whose id reads ``name`` (ids need not be strings); None for ``""``."""
    if not name:
        return None
    if name in G:
        return name
    return next((n for n in G if str(n) == name), None)


def find_edge(G: nx.MultiDiGraph, ends: Sequence[str]) -> tuple[Any, Any, Any] | None:
    """``(u, outlet, v)`` of the edge ``ends`` (``[source, outlet, target]`` as text), or None."""
    if len(ends) != 3:
        return None
    u, k, v = find_node(G, ends[0]), ends[1], find_node(G, ends[2])
    if u is None or v is None:
        return None
    key = next((key for key in G[u].get(v, {}) if str(key) == k), None)
    return None if key is None else (u, key, v)


def declared_outlets(G: nx.MultiDiGraph, n: Any) -> tuple[str, ...]:
    """The outlets node ``n`` declares; a half-edited node still has its kind's outlets."""
    attrs = dict(G.nodes[n])
    try:
        return Node.model_validate(attrs).outlets
    except ValueError:  # pydantic's ValidationError is a ValueError
        try:
            return outlets_of(str(attrs.get(keys.KIND)), attrs.get(keys.CONFIG))
        except ValueError:
            return ()


def called_workflow(G: nx.MultiDiGraph, n: Any) -> tuple[str, int | None] | None:
    """The workflow (and pinned version) node ``n`` starts as a child run; None where it starts
    none (it is not a call, or names no workflow yet)."""
    attrs = G.nodes[n]
    spec, config = spec_for(attrs.get(keys.KIND)), attrs.get(keys.CONFIG)
    if spec is None or not spec.child_run or not isinstance(config, dict):
        return None
    workflow_id = config.get("workflow_id")
    return (workflow_id, config.get("version")) if workflow_id else None


def used_outlets(G: nx.MultiDiGraph, n: Any) -> dict[str, Any]:
    """Outlet -> target of the edges leaving ``n``."""
    return {str(k): v for _, v, k in G.out_edges(n, keys=True)}


def restore_graph(G: nx.MultiDiGraph, data: dict[str, Any]) -> None:
    """Make ``G`` (the same object) hold exactly the graph :func:`graph_to_data` wrote.

    Examples
    --------
    >>> G = nx.MultiDiGraph()
    >>> G.add_edge("a", "b", key="next")
    'next'
    >>> saved = graph_to_data(G)
    >>> G.remove_node("b")
    >>> restore_graph(G, saved)
    >>> list(G.edges(keys=True))
    [('a', 'b', 'next')]
    """
    source = graph_from_data(data)
    G.clear()
    G.graph.update(source.graph)
    G.add_nodes_from(source.nodes(data=True))
    G.add_edges_from(source.edges(keys=True, data=True))


class History:
    """Undo and redo stacks of graph snapshots (the newest ``limit`` kept)."""

    def __init__(self, limit: int = 200) -> None:
        self.limit = limit
        self.undo_stack: list[dict[str, Any]] = []
        self.redo_stack: list[dict[str, Any]] = []

    def record(self, before: dict[str, Any]) -> None:
        """Remember ``before``, the graph as it was before a change; forget what was undone."""
        self.undo_stack = [*self.undo_stack[-self.limit + 1 :], before]
        self.redo_stack = []

    def undo(self, G: nx.MultiDiGraph) -> bool:
        """Put ``G`` back before its last change; False when there is nothing to undo."""
        return self._travel(G, self.undo_stack, self.redo_stack)

    def redo(self, G: nx.MultiDiGraph) -> bool:
        """Make the last undone change again; False when there is nothing to redo."""
        return self._travel(G, self.redo_stack, self.undo_stack)

    @staticmethod
    def _travel(G: nx.MultiDiGraph, source: list[Any], sink: list[Any]) -> bool:
        if not source:
            return False
        sink.append(graph_to_data(G))
        restore_graph(G, source.pop())
        return True


def problems_html(problems: Sequence[Problem]) -> str:
    """The problems as a table (severity, where, code, message), or a line saying there are none.

    Each row is ``tr.wfkit-problem.wfkit-problem-<severity>`` with ``data-node`` and
    ``data-code`` attributes.
    """
    if not problems:
        return '<div class="wfkit-problems-none">No problems: the workflow is valid.</div>'
    rows = []
    for p in problems:
        where = f"{p.edge[0]} -[{p.edge[2]}]-> {p.edge[1]}" if p.edge else (p.node or "workflow")
        colour = (
            "var(--jp-error-color1, #cc0000)"
            if p.severity == Severity.ERROR
            else "var(--jp-warn-color1, #e08a00)"
        )
        rows.append(
            f'<tr class="wfkit-problem wfkit-problem-{p.severity.value}" '
            f'data-node="{html.escape(str(p.node or ""))}" data-code="{html.escape(p.code)}">'
            f'<td style="color:{colour}">{p.severity.value}</td>'
            f"<td><code>{html.escape(str(where))}</code></td>"
            f"<td><code>{html.escape(p.code)}</code></td><td>{html.escape(p.message)}</td></tr>"
        )
    head = "<tr><th></th><th>where</th><th>code</th><th>message</th></tr>"
    return f'<table class="wfkit-problems-table">{head}{"".join(rows)}</table>'
