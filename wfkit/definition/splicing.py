"""Where a graph's paths end, and grafting one workflow's graph into another.

A graph's *open ends* are the outlets with no edge whose unconnected meaning is "the path ends"
(docs/semantics.md §3, as each kind's entry in the kinds table says): ``next`` of a start,
action, delay, wait or call, every branch of a decision, ``completed`` of a join and
``approved`` of an approval — outside the body of every parallel/for_each (an end inside a body
ends a branch, not the run). The outlets that fail a step when unconnected (``failed``,
``fallback``, ``partial``, ``rejected``, ``expired``) and a wait's ``elapsed`` (which goes on
along ``next``) are never ends. A builder continues from them
when it splices a workflow in (:meth:`Steps.splice <wfkit.Steps.splice>`), and
``engine.append`` grows a run from them.

:func:`splice_graph` copies another workflow's graph into a host graph: every node reachable
from its start except the start itself, with their edges, policies, compensations, labels,
config and sagas. Node ids are kept where the host has no node of that id; a clashing id
becomes ``<other id>.<node id>`` (then ``-2``, ``-3``... while that is taken too), and saga ids
likewise, so the same two graphs always splice to the same ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from wfkit.definition import keys
from wfkit.definition.graph import iter_nodes, start_nodes
from wfkit.definition.kinds import Node, spec_for
from wfkit.definition.naming import FreeIds
from wfkit.errors import UsageError

__all__ = ["Splice", "end_labels", "open_ends", "splice_graph"]

Exit = tuple[str, str]


def _ending_outlets(node: Node) -> tuple[str, ...]:
    return tuple(o for o in node.outlets if node.spec.unconnected(o).ends_path)


def fork_bodies(G: nx.MultiDiGraph) -> set[str]:
    """Nodes inside the body of some parallel/for_each: reached from the fork without passing
    through its join."""
    nodes = dict(iter_nodes(G))
    join_of = {node.config.fork: n for n, node in nodes.items() if node.spec.gathers}
    inside: set[str] = set()
    for fork, node in nodes.items():
        if not node.spec.opens_frame:
            continue
        stop = {fork, join_of.get(fork)}
        seen: set[str] = set()
        stack = list(G.successors(fork))
        while stack:
            n = stack.pop()
            if n in stop or n in seen:
                continue
            seen.add(n)
            stack.extend(G.successors(n))
        inside |= seen
    return inside


def open_ends(G: nx.MultiDiGraph) -> list[Exit]:
    """The outlets where the paths of ``G`` end, as ``(node, outlet)`` in graph order.

    Examples
    --------
    >>> import wfkit as wf
    >>> flow = wf.Workflow("w").start_with("a").if_("x", then=lambda b: b.then("b"))
    >>> open_ends(flow.graph)
    [('if-1', 'false'), ('b', 'next')]
    """
    inside = fork_bodies(G)
    ends: list[Exit] = []
    for n, node in iter_nodes(G):
        if n in inside:
            continue
        used = {k for _, _, k in G.out_edges(n, keys=True)}
        ends += [(n, outlet) for outlet in _ending_outlets(node) if outlet not in used]
    return ends


def end_labels(G: nx.MultiDiGraph, ends: Iterable[Exit]) -> dict[Exit, str]:
    """Labels for the edges a builder will draw from ``ends``: an ``if_``'s ``true`` outlet
    shows its expression, as the builder draws it."""
    labels: dict[Exit, str] = {}
    for n, outlet in ends:
        config = G.nodes[n].get(keys.CONFIG) or {}
        if outlet == "true" and isinstance(config, Mapping) and config.get("expression"):
            labels[(n, outlet)] = str(config["expression"])
    return labels


@dataclass
class Splice:
    """What :func:`splice_graph` added: where the part begins and where its paths end."""

    entry: str
    ends: list[Exit]
    last: str
    ids: dict[str, str] = field(default_factory=dict)  # the other graph's id -> the new one
    sagas: dict[str, str] = field(default_factory=dict)
    labels: dict[Exit, str] = field(default_factory=dict)


def _rename(ids: list[str], taken: dict[str, Any], prefix: str, free: FreeIds) -> dict[str, str]:
    """Keep the ids not ``taken``; give the others ``prefix.id`` (``-2``... while taken).

    ``taken`` is read, not copied (the host graph's nodes), and ``free`` resumes where the
    last search for a name stopped, so a splice costs the size of the part spliced in, not of
    the host or of the parts spliced before.
    """
    used = {n for n in ids if n not in taken}
    mapping: dict[str, str] = {}
    for n in ids:
        if n in taken:
            mapping[n] = free.pick(taken, f"{prefix}.{n}", also=used)
            used.add(mapping[n])
        else:
            mapping[n] = n
    return mapping


def splice_graph(
    G: nx.MultiDiGraph,
    other: nx.MultiDiGraph,
    *,
    prefix: str,
    saga: str | None = None,
    free_ids: FreeIds | None = None,
    free_saga_ids: FreeIds | None = None,
) -> Splice:
    """Copy ``other`` (minus its start node) into ``G``; the caller connects ``entry``.

    ``prefix`` (the other workflow's id) prefixes clashing node and saga ids; ``saga`` is the
    host's saga at the cursor: the spliced nodes outside any saga of ``other`` join it, and
    ``other``'s outermost sagas nest in it (each must then have a policy). Nothing is added
    when a :class:`~wfkit.UsageError` is raised. ``free_ids`` and ``free_saga_ids`` are the
    builder's searches for free node and saga ids (see :mod:`wfkit.definition.naming`).
    """
    starts = start_nodes(other)
    if len(starts) != 1:
        raise UsageError(
            f"splice({prefix!r}): the workflow spliced in needs exactly one start node, it has "
            f"{len(starts)}; build it with start_with(...)"
        )
    start = starts[0]
    firsts = [v for _, v, k in other.out_edges(start, keys=True) if k == "next"]
    if not firsts:
        raise UsageError(
            f"splice({prefix!r}): the workflow spliced in has no step after its start; "
            "add steps to it first"
        )
    if other.in_degree(start):
        raise UsageError(
            f"splice({prefix!r}): an edge of the workflow spliced in leads back into its start "
            "node, which a splice leaves out; loop to its first real step instead"
        )
    reach = nx.descendants(other, start)
    ids = [n for n in other.nodes if n in reach and n != start]
    free_ids = free_ids or FreeIds()
    free_ids.sync(G._node)  # networkx keeps the nodes in G._node (its subclassing API)
    mapping = _rename(ids, G._node, prefix, free_ids)
    sagas_in: Mapping[str, Any] = other.graph.get(keys.SAGAS) or {}
    host_sagas = G.graph.get(keys.SAGAS) or {}
    host_sagas = host_sagas if isinstance(host_sagas, dict) else dict(host_sagas)
    free_saga_ids = free_saga_ids or FreeIds()
    free_saga_ids.sync(host_sagas)
    saga_ids = _rename(list(sagas_in), host_sagas, prefix, free_saga_ids)
    new_sagas: dict[str, Any] = {}
    for sid, spec in sagas_in.items():
        spec = dict(spec) if isinstance(spec, Mapping) else spec
        if isinstance(spec, dict):
            parent = spec.get("parent")
            if parent is None and saga is not None:
                if spec.get("policy") is None:
                    raise UsageError(
                        f"splice({prefix!r}) inside saga {saga!r}: saga {sid!r} of the workflow "
                        "spliced in would nest in it but has no policy; give it "
                        "policy='unwind' or policy='keep'"
                    )
                spec["parent"] = saga
            elif parent is not None:
                spec["parent"] = saga_ids.get(parent, parent)
        new_sagas[saga_ids[sid]] = spec
    ends = [(mapping[n], outlet) for n, outlet in open_ends(other) if n in mapping]
    # --- from here on the host graph changes (nothing below raises)
    for n in ids:
        attrs = _plain_copy(other.nodes[n])
        if keys.SAGA in attrs and attrs[keys.SAGA] is not None:
            attrs[keys.SAGA] = saga_ids.get(attrs[keys.SAGA], attrs[keys.SAGA])
        elif saga is not None and keys.KIND in attrs:
            attrs[keys.SAGA] = saga
        config = attrs.get(keys.CONFIG)
        spec = spec_for(attrs.get(keys.KIND))
        if spec is not None and spec.gathers and isinstance(config, dict):
            fork = config.get("fork")
            if isinstance(fork, str) and fork in mapping:
                config["fork"] = mapping[fork]
        G.add_node(mapping[n], **attrs)
    for u, v, k, attrs in other.edges(keys=True, data=True):
        if u in mapping and v in mapping:
            G.add_edge(mapping[u], mapping[v], key=k, **_plain_copy(attrs))
    free_ids.note(G._node)
    if new_sagas:
        G.graph[keys.SAGAS] = {**host_sagas, **new_sagas}
        free_saga_ids.note(G.graph[keys.SAGAS])
    return Splice(
        entry=mapping[firsts[0]],
        ends=ends,
        last=mapping[ids[-1]],
        ids=mapping,
        sagas=saga_ids,
        labels=end_labels(G, ends),
    )


def _plain_copy(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of plain attribute data (dicts and lists copied, values shared)."""

    def copy(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: copy(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [copy(v) for v in value]
        return value

    return {k: copy(v) for k, v in attrs.items()}
