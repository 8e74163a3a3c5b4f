"""Free functions over a workflow graph (a ``networkx.MultiDiGraph``), ``G`` first.

The graph is plain data: node attributes are JSON values under the keys in
:mod:`wfkit.definition.keys`, edge keys are outlet names, and ``G.graph["sagas"]`` describes saga
scopes. These functions read it through the pydantic models and write it back as plain data.
"""

from __future__ import annotations

import hashlib
import json
import reprlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import networkx as nx
from pydantic import BaseModel, ConfigDict, ValidationError

from wfkit.definition import keys
from wfkit.definition.kinds import Node, spec_for
from wfkit.definition.naming import FreeIds
from wfkit.definition.policy import SagaPolicy

__all__ = [
    "GRAPH_FORMAT",
    "MAX_SAGA_DEPTH",
    "SagaNesting",
    "SagaSpec",
    "content_hash",
    "graph_from_data",
    "graph_to_data",
    "iter_nodes",
    "node_spec",
    "saga_nesting",
    "saga_specs",
    "starts_child_runs",
    "unique_node_id",
]

GRAPH_FORMAT = "wfkit.graph/1"

MAX_SAGA_DEPTH = 32
"""Sagas nest at most this deep (a saga with no parent is at depth 1); validation reports a
deeper one as ``saga-too-deep`` and pictures draw deeper sagas inside their 32nd ancestor."""


class SagaSpec(BaseModel):
    """A saga scope: nodes whose ``saga`` attribute names it belong to it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parent: str | None = None
    policy: SagaPolicy | None = None
    label: str | None = None


def node_spec(G: nx.MultiDiGraph, n: str) -> Node:
    """Validate node ``n``'s attributes; raises ``pydantic.ValidationError`` when they are bad."""
    return Node.model_validate(G.nodes[n])


def iter_nodes(G: nx.MultiDiGraph) -> Iterator[tuple[str, Node]]:
    """Yield ``(id, Node)`` for every node whose attributes validate (skip the others)."""
    for n in G.nodes:
        try:
            yield n, node_spec(G, n)
        except ValidationError:
            continue


def saga_specs(G: nx.MultiDiGraph) -> dict[str, SagaSpec]:
    """The saga scopes declared in ``G.graph['sagas']``."""
    raw = G.graph.get(keys.SAGAS) or {}
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"G.graph['sagas'] must map saga ids to their specs, got {type(raw).__name__}"
        )
    return {sid: SagaSpec.model_validate(spec) for sid, spec in raw.items()}


@dataclass(frozen=True)
class SagaNesting:
    """How saga scopes nest, worked out once in linear time.

    ``depth`` gives every saga its depth (1 for a saga with no parent, an unknown parent, or
    a parent chain that runs into a cycle: the cycle's members count as depth 1). ``cycle``
    maps every saga whose parents run round a cycle to that cycle's members.
    """

    depth: dict[str, int]
    cycle: dict[str, tuple[str, ...]]


def saga_nesting(sagas: Mapping[str, SagaSpec]) -> SagaNesting:
    """Depths and parent cycles of ``sagas``; each saga is looked at once."""
    depth: dict[str, int] = {}
    cycle: dict[str, tuple[str, ...]] = {}
    for sid in sagas:
        path: list[str] = []
        on_path: dict[str, int] = {}
        cur: str | None = sid
        while cur is not None and cur in sagas and cur not in depth and cur not in on_path:
            on_path[cur] = len(path)
            path.append(cur)
            cur = sagas[cur].parent
        ring: tuple[str, ...] | None = None
        if cur is not None and cur in on_path:  # the walk came round to itself: a cycle
            ring = tuple(path[on_path[cur] :])
            for member in ring:
                depth[member], cycle[member] = 1, ring
            del path[on_path[cur] :]
            base = 1
        elif cur is not None and cur in depth:
            base, ring = depth[cur], cycle.get(cur)
        else:
            base = 0
        for member in reversed(path):
            base += 1
            depth[member] = base
            if ring is not None:
                cycle[member] = ring
    return SagaNesting(depth, cycle)


def unique_node_id(G: nx.MultiDiGraph, base: str, *, numbered: bool = False) -> str:
    """A readable id not yet in ``G``: ``base``, ``base-2``...; or ``base-1``... if numbered."""
    # networkx keeps the nodes in G._node, an insertion-ordered dict (its subclassing API)
    return FreeIds().pick(G._node, base, numbered=numbered)


def _plain(value: Any) -> Any:
    """Round-trip a value through JSON so tuples become lists and nothing non-JSON survives."""
    return json.loads(json.dumps(value))


def graph_to_data(G: nx.MultiDiGraph) -> dict[str, Any]:
    """Plain JSON data for ``G``, in insertion order (so layout and round-trips are stable)."""
    return {
        "format": GRAPH_FORMAT,
        "graph": _plain(dict(G.graph)),
        "nodes": [{"id": n, **_plain(attrs)} for n, attrs in G.nodes(data=True)],
        "edges": [
            {"source": u, "target": v, "outlet": k, **_plain(attrs)}
            for u, v, k, attrs in G.edges(keys=True, data=True)
        ],
    }


def graph_from_data(data: dict[str, Any]) -> nx.MultiDiGraph:
    """Rebuild the graph written by :func:`graph_to_data`."""
    if not isinstance(data, Mapping):
        raise ValueError(f"not a wfkit graph (a {type(data).__name__}, not a mapping)")
    if data.get("format") != GRAPH_FORMAT:
        found = _clip(data.get("format"))
        raise ValueError(f"not a wfkit graph (format {found}, expected {GRAPH_FORMAT!r})")
    graph, nodes, edges = data.get("graph") or {}, data.get("nodes"), data.get("edges")
    if not isinstance(graph, Mapping) or not isinstance(nodes, list) or not isinstance(edges, list):
        raise ValueError("a wfkit graph holds a 'graph' mapping and 'nodes' and 'edges' lists")
    G = nx.MultiDiGraph()
    G.graph.update(graph)
    for node in nodes:
        if not isinstance(node, Mapping) or "id" not in node:
            raise ValueError(f"a node must be a mapping with an 'id', got {_clip(node)}")
        attrs = dict(node)
        G.add_node(attrs.pop("id"), **attrs)
    for edge in edges:
        if not isinstance(edge, Mapping) or not {"source", "target", "outlet"} <= edge.keys():
            raise ValueError(
                f"an edge must be a mapping with 'source', 'target' and 'outlet', got {_clip(edge)}"
            )
        attrs = dict(edge)
        u, v, k = attrs.pop("source"), attrs.pop("target"), attrs.pop("outlet")
        G.add_edge(u, v, key=k, **attrs)
    return G


def _clip(value: object) -> str:
    return reprlib.repr(value)  # bounded in length and depth, whatever the value


def content_hash(G: nx.MultiDiGraph) -> str:
    """SHA-256 of the graph's content, independent of insertion order.

    Two graphs with the same nodes, attributes, edges and sagas hash the same; any change to what
    the engine would do (a kind, a config value, a policy, an edge) changes the hash.
    """
    data = graph_to_data(G)
    canonical = {
        "graph": data["graph"],
        "nodes": sorted(data["nodes"], key=lambda d: str(d["id"])),
        "edges": sorted(
            data["edges"], key=lambda d: (str(d["source"]), str(d["target"]), str(d["outlet"]))
        ),
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def starts_child_runs(G: nx.MultiDiGraph) -> bool:
    """True where a node of ``G`` starts a child run of another workflow (a call)."""
    return any((spec := spec_for(k)) and spec.child_run for _, k in G.nodes(data=keys.KIND))


def start_nodes(G: nx.MultiDiGraph) -> list[str]:
    """Ids of the nodes whose kind is ``start`` (the table's entry kind)."""
    return [n for n, k in G.nodes(data=keys.KIND) if (spec := spec_for(k)) and spec.entry]
