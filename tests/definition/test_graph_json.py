"""The graph as plain data: JSON round trips, the data model by import path, the content hash."""

from __future__ import annotations

import json
from collections.abc import Callable

import networkx as nx
import pytest

import wfkit as wf
from wfkit.definition.graph import GRAPH_FORMAT, content_hash, graph_from_data, graph_to_data
from wfkit.examples import all_workflows
from wfkit.examples.fulfilment import OrderData


def same_graph(G: nx.MultiDiGraph, H: nx.MultiDiGraph) -> bool:
    """Equal nodes, node attributes, edges with keys and attributes, and graph attributes."""
    return (
        list(G.nodes(data=True)) == list(H.nodes(data=True))
        and list(G.edges(keys=True, data=True)) == list(H.edges(keys=True, data=True))
        and G.graph == H.graph
    )


def hand_built() -> nx.MultiDiGraph:
    """A graph written with networkx: labels, sagas, policies, two outlets to one target."""
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start", label="Go")
    G.add_node("a", kind="action", activity="a", policy={"max_attempts": 5, "retry_delay": "2s"})
    G.add_node("b", kind="action", activity="b", saga="s1", compensation="undo.b")
    G.add_node("ok?", kind="decision", config={"expression": "total > 1"})
    G.add_node("wait for it", kind="wait", config={"signal": "s", "timeout": "1h"})
    G.add_node("end", kind="end")
    G.add_edge("start", "a", key="next")
    G.add_edge("a", "b", key="next")
    G.add_edge("b", "ok?", key="next", label="then check")
    G.add_edge("ok?", "wait for it", key="true", label="total > 1")
    G.add_edge("ok?", "end", key="false")
    G.add_edge("wait for it", "end", key="next")
    G.add_edge("wait for it", "end", key="elapsed")
    G.graph["sagas"] = {"s1": {"label": "payment"}}
    return G


FLOWS: dict[str, Callable[[], wf.Workflow]] = {
    **{name: (lambda name=name: all_workflows()[name]) for name in all_workflows()},
    "hand-built": lambda: wf.Workflow.from_graph("hand", 7, hand_built()),
}


@pytest.mark.parametrize("name", list(FLOWS))
def test_json_round_trip_is_exact(name: str) -> None:
    flow = FLOWS[name]()
    text = flow.to_json()
    back = wf.Workflow.from_json(text)
    assert back.to_json() == text
    assert (back.id, back.version, back.data_model) == (flow.id, flow.version, flow.data_model)
    assert same_graph(back.graph, flow.graph)
    assert nx.utils.graphs_equal(back.graph, flow.graph)
    assert back.content_hash == flow.content_hash
    assert back.validate() == flow.validate()


def test_round_trip_keeps_two_outlets_to_the_same_target() -> None:
    back = wf.Workflow.from_json(wf.Workflow.from_graph("h", 1, hand_built()).to_json())
    assert set(back.graph["wait for it"]["end"]) == {"next", "elapsed"}
    assert back.graph.edges["ok?", "wait for it", "true"] == {"label": "total > 1"}


def test_round_trip_gives_an_independent_graph() -> None:
    flow = all_workflows()["onboarding"]
    back = wf.Workflow.from_json(flow.to_json())
    back.graph.nodes["if-1"]["label"] = "changed"
    assert "label" not in flow.graph.nodes["if-1"]


def test_json_is_plain_readable_data() -> None:
    data = json.loads(all_workflows()["fulfilment"].to_json(indent=2))
    assert data["format"] == "wfkit.workflow/1"
    assert (data["id"], data["version"]) == ("fulfilment", 1)
    assert data["data_model"] == "wfkit.examples.fulfilment:OrderData"
    assert data["graph"]["format"] == GRAPH_FORMAT
    assert data["graph"]["nodes"][0] == {"id": "start", "kind": "start"}
    assert {"source": "join-1", "target": "review", "outlet": "partial"} in data["graph"]["edges"]


def test_the_data_model_is_restored_by_import_path() -> None:
    flow = wf.Workflow.from_json(all_workflows()["fulfilment"].to_json())
    assert flow.data_model is OrderData


def test_a_given_data_model_overrides_the_import_path() -> None:
    from pydantic import BaseModel

    class Other(BaseModel):
        order_id: str

    flow = wf.Workflow.from_json(all_workflows()["fulfilment"].to_json(), data=Other)
    assert flow.data_model is Other


def test_a_workflow_without_model_round_trips_without_one() -> None:
    text = wf.Workflow("plain").start_with("a").to_json()
    assert json.loads(text)["data_model"] is None
    assert wf.Workflow.from_json(text).data_model is None


def test_an_unimportable_data_model_is_a_definition_error_saying_what_to_do() -> None:
    data = json.loads(all_workflows()["checkout"].to_json())
    data["data_model"] = "nowhere.models:Gone"
    with pytest.raises(wf.DefinitionError, match=r"'checkout'.*nowhere\.models:Gone.*data="):
        wf.Workflow.from_json(json.dumps(data), allow_imports=True)


def test_a_data_model_not_loaded_is_kept_and_reported_when_imports_are_not_allowed() -> None:
    data = json.loads(all_workflows()["checkout"].to_json())
    data["data_model"] = "nowhere.models:Gone"
    flow = wf.Workflow.from_json(json.dumps(data))
    assert (flow.data_model, flow.data_model_ref) == (None, "nowhere.models:Gone")
    assert flow.to_data()["data_model"] == "nowhere.models:Gone"  # written back as it was
    assert flow.copy().to_data()["data_model"] == "nowhere.models:Gone"
    [problem] = [p for p in flow.validate() if p.code == "data-model-not-loaded"]
    assert problem.severity is wf.Severity.ERROR
    assert "models=" in problem.message and "allow_imports=" in problem.message
    with pytest.raises(wf.DefinitionError, match="data-model-not-loaded"):
        flow.check()


def test_a_data_model_path_that_is_no_model_is_a_definition_error() -> None:
    data = json.loads(all_workflows()["checkout"].to_json())
    data["data_model"] = "wfkit.examples.checkout:reserve"
    with pytest.raises(wf.DefinitionError, match="not a pydantic model"):
        wf.Workflow.from_json(json.dumps(data))


@pytest.mark.parametrize("fmt", [None, "wfkit.workflow/0", "something else"])
def test_a_wrong_workflow_format_is_a_definition_error(fmt: str | None) -> None:
    data = json.loads(all_workflows()["checkout"].to_json())
    data["format"] = fmt
    with pytest.raises(wf.DefinitionError, match=r"not a wfkit workflow.*to_json"):
        wf.Workflow.from_json(json.dumps(data))


def test_a_wrong_graph_format_inside_a_workflow_is_a_definition_error() -> None:
    data = json.loads(all_workflows()["checkout"].to_json())
    data["graph"]["format"] = "wfkit.graph/0"
    with pytest.raises(wf.DefinitionError, match=r"wfkit\.graph/1"):
        wf.Workflow.from_json(json.dumps(data))


def test_graph_from_data_refuses_a_wrong_format() -> None:
    with pytest.raises(ValueError, match="not a wfkit graph"):
        graph_from_data({"format": "gml", "nodes": [], "edges": []})


def test_graph_data_round_trip_for_plain_graphs() -> None:
    G = hand_built()
    assert same_graph(graph_from_data(json.loads(json.dumps(graph_to_data(G)))), G)


def test_copy_is_independent_and_can_change_version() -> None:
    flow = all_workflows()["checkout"]
    copy = flow.copy(version=2)
    assert (copy.id, copy.version, copy.data_model) == ("checkout", 2, flow.data_model)
    assert copy.content_hash == flow.content_hash
    copy.graph.nodes["card.charge"]["policy"] = {"max_attempts": 9}
    assert copy.content_hash != flow.content_hash
    assert flow.node("card.charge").policy.max_attempts == 2


# --- content hash -----------------------------------------------------------------------------


def test_the_hash_ignores_insertion_order() -> None:
    G = hand_built()
    H = nx.MultiDiGraph()
    H.graph.update(G.graph)
    for n, attrs in reversed(list(G.nodes(data=True))):
        H.add_node(n, **dict(reversed(list(attrs.items()))))
    for u, v, k, attrs in reversed(list(G.edges(keys=True, data=True))):
        H.add_edge(u, v, key=k, **attrs)
    assert list(H.nodes) != list(G.nodes)
    assert content_hash(H) == content_hash(G)


def test_the_hash_is_a_sha256_hex_digest_and_stable() -> None:
    first = content_hash(hand_built())
    assert len(first) == 64 and int(first, 16) >= 0
    assert content_hash(hand_built()) == first


def _changed(edit: Callable[[nx.MultiDiGraph], object]) -> str:
    G = hand_built()
    edit(G)
    return content_hash(G)


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda G: G.nodes["wait for it"]["config"].update(timeout="2h"), id="config"),
        pytest.param(lambda G: G.nodes["a"]["policy"].update(max_attempts=6), id="policy"),
        pytest.param(lambda G: G.nodes["b"].update(compensation="undo.a"), id="compensation"),
        pytest.param(lambda G: G.nodes["a"].update(activity="c"), id="activity"),
        pytest.param(lambda G: G.add_edge("a", "end", key="failed"), id="edge-added"),
        pytest.param(lambda G: G.remove_edge("wait for it", "end", key="elapsed"), id="edge-gone"),
        pytest.param(lambda G: G.add_node("extra", kind="end"), id="node-added"),
        pytest.param(lambda G: G.graph["sagas"]["s1"].update(policy="keep"), id="saga"),
    ],
)
def test_the_hash_changes_when_what_the_engine_does_changes(
    edit: Callable[[nx.MultiDiGraph], object],
) -> None:
    assert _changed(edit) != content_hash(hand_built())


def test_the_hash_tells_outlets_apart() -> None:
    G, H = hand_built(), hand_built()
    H.remove_edge("ok?", "end", key="false")
    H.add_edge("ok?", "end", key="true")  # same source and target, another outlet
    assert content_hash(G) != content_hash(H)


def test_workflow_content_hash_follows_the_live_graph() -> None:
    flow = wf.Workflow("w").start_with("a").then("b")
    before = flow.content_hash
    flow.graph.nodes["b"]["policy"] = {"max_attempts": 4}
    assert flow.content_hash != before


# --- from_graph -------------------------------------------------------------------------------


def test_from_graph_uses_the_given_graph_object() -> None:
    G = hand_built()
    flow = wf.Workflow.from_graph("hand", 1, G, data=OrderData)
    assert flow.graph is G
    assert (flow.id, flow.version, flow.data_model) == ("hand", 1, OrderData)
    G.add_node("late", kind="action", activity="b")
    G.add_edge("end", "late", key="next")
    assert "late" in flow.graph
    assert ("unknown-outlet", "end") in [(p.code, p.node) for p in flow.validate(registry=None)]


def test_from_graph_then_verbs_extend_the_same_graph() -> None:
    G = nx.MultiDiGraph()
    flow = wf.Workflow.from_graph("w", 1, G).start_with("a")
    assert list(G.nodes) == ["start", "a"]
    assert flow.node("a").activity == "a"


def test_node_names_a_missing_node() -> None:
    with pytest.raises(wf.UsageError, match=r"'w' has no node 'zz'"):
        wf.Workflow("w").start_with("a").node("zz")
