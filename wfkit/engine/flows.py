"""A registered workflow compiled for the engine: node models and outlet targets, looked up fast."""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
from pydantic import BaseModel

from wfkit.definition.graph import SagaSpec, saga_specs
from wfkit.definition.kinds import Node
from wfkit.definition.typed_outputs import loop_scopes
from wfkit.definition.workflow import Workflow

__all__ = ["CompiledFlow"]


@dataclass
class CompiledFlow:
    """What the engine needs of a workflow, precomputed once per ``(id, version, hash)``."""

    workflow: Workflow
    hash: str = ""
    nodes: dict[str, Node] = field(default_factory=dict)
    targets: dict[tuple[str, str], str] = field(default_factory=dict)
    join_of: dict[str, str] = field(default_factory=dict)
    visit_limit: dict[str, int] = field(default_factory=dict)
    sagas: dict[str, SagaSpec] = field(default_factory=dict)
    start: str = "start"
    # each node's enclosing for_each nodes, outermost first (what ctx.output reads by cell)
    loops: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def compile(cls, workflow: Workflow) -> CompiledFlow:
        """Compile a validated workflow."""
        flow = cls(workflow, workflow.content_hash)
        G = workflow.graph
        flow.sagas = saga_specs(G)
        for n in G.nodes:
            node = Node.model_validate(G.nodes[n])
            flow.nodes[n] = node
            if node.spec.entry:
                flow.start = n
            if node.spec.gathers:
                flow.join_of[node.config.fork] = n
        for u, v, k in G.edges(keys=True):
            flow.targets[(u, str(k))] = v
        flow.loops = loop_scopes(G, flow.nodes)
        flow.visit_limit = {n: node.policy.max_visits for n, node in flow.nodes.items()}
        for component in nx.strongly_connected_components(G):
            if len(component) > 1 or any(G.has_edge(n, n) for n in component):
                # a loop goes round as often as its most generous node allows; nodes that
                # kept the default of one visit share that bound
                bound = max(flow.visit_limit[n] for n in component)
                for n in component:
                    if flow.visit_limit[n] == 1:
                        flow.visit_limit[n] = bound
        return flow

    @property
    def id(self) -> str:
        """Workflow id."""
        return self.workflow.id

    @property
    def version(self) -> int:
        """Workflow version."""
        return self.workflow.version

    @property
    def data_model(self) -> type[BaseModel] | None:
        """The data document's model, if any."""
        return self.workflow.data_model

    def saga_chain(self, saga_id: str | None) -> tuple[str, ...]:
        """``saga_id`` and its ancestors, innermost first (empty for no saga)."""
        chain: list[str] = []
        while saga_id is not None and saga_id not in chain:
            chain.append(saga_id)
            spec = self.sagas.get(saga_id)
            saga_id = spec.parent if spec else None
        return tuple(chain)

    def node_sagas(self, node_id: str) -> tuple[str, ...]:
        """The sagas a node is in, innermost first."""
        return self.saga_chain(self.nodes[node_id].saga)

    def target(self, node_id: str, outlet: str) -> str | None:
        """The node ``outlet`` of ``node_id`` leads to, or None when unconnected."""
        return self.targets.get((node_id, outlet))
