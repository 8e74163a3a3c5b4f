"""Validation and drawing cost time linear in the graph, and deep saga nesting is bounded.

Two thousand nested sagas (95 KiB of JSON) took 8.6 s and 4.6 GB to turn into DOT source, and
validation was quadratic (a 16,000-node chain took 5.3 s; 100,000 nodes did not finish). The
speed figures are in ``benchmarks/definition_costs.py``; these tests check structure only.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wfkit as wf
from wfkit.definition import rendering, validation
from wfkit.definition.graph import MAX_SAGA_DEPTH, SagaSpec, saga_nesting

needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None, reason="the Graphviz 'dot' program is not installed"
)


def chain(n: int) -> nx.MultiDiGraph:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    prev = "start"
    for i in range(n):
        G.add_node(f"a{i}", kind="action", activity="a")
        G.add_edge(prev, f"a{i}", key="next")
        prev = f"a{i}"
    return G


def nested_sagas(depth: int, *, steps_in_each: bool = False) -> nx.MultiDiGraph:
    G = nx.MultiDiGraph()
    G.graph["sagas"] = {
        f"s{i}": {"parent": f"s{i - 1}", "policy": "unwind"} if i else {} for i in range(depth)
    }
    G.add_node("start", kind="start")
    prev = "start"
    for i in range(depth) if steps_in_each else [depth - 1]:
        G.add_node(f"a{i}", kind="action", activity="a", saga=f"s{i}")
        G.add_edge(prev, f"a{i}", key="next")
        prev = f"a{i}"
    return G


def codes(G: nx.MultiDiGraph) -> list[str]:
    return [p.code for p in wf.validate(G, registry=None)]


# --- saga nesting -------------------------------------------------------------------------------


def test_sagas_nested_to_the_limit_are_fine() -> None:
    assert codes(nested_sagas(MAX_SAGA_DEPTH, steps_in_each=True)) == []


def test_sagas_nested_past_the_limit_are_one_saga_too_deep_problem() -> None:
    G = nested_sagas(MAX_SAGA_DEPTH + 8, steps_in_each=True)
    [problem] = wf.validate(G, registry=None)
    assert problem.code == "saga-too-deep"
    assert problem.severity is wf.Severity.ERROR
    first_too_deep = f"s{MAX_SAGA_DEPTH}"  # s0 is at depth 1
    assert problem.node == f"a{MAX_SAGA_DEPTH}"  # the first step of that saga
    assert repr(first_too_deep) in problem.message
    assert f"at most {MAX_SAGA_DEPTH} deep" in problem.message


def test_two_thousand_nested_sagas_are_one_problem_and_a_bounded_picture() -> None:
    G = nested_sagas(2000)
    assert len(wf.Workflow.from_graph("nested", 1, G).to_json()) > 90_000
    assert codes(G) == ["saga-too-deep"]
    source = rendering.to_dot(G)
    assert source.count("subgraph cluster_") == MAX_SAGA_DEPTH
    depth = deepest = 0
    for line in source.splitlines():
        depth += line.count("{") - line.count("}")
        deepest = max(deepest, depth)
    assert deepest == MAX_SAGA_DEPTH + 1  # the digraph and one level per drawn saga
    assert re.search(r'^\s*n1 \[.*id="node-a1999"', source, re.MULTILINE)


@needs_dot
def test_a_step_in_a_saga_deeper_than_drawn_is_in_the_deepest_drawn_cluster() -> None:
    root = ET.fromstring(rendering.to_svg(nested_sagas(2000)))
    ids = {e.get("id"): e for e in root.iter() if e.get("id")}
    assert f"saga-s{MAX_SAGA_DEPTH - 1}" in ids
    assert f"saga-s{MAX_SAGA_DEPTH}" not in ids
    assert "node-a1999" in ids


def test_saga_parents_running_round_a_cycle_after_a_long_tail_give_short_messages() -> None:
    sagas = {f"t{i}": {"parent": f"t{i + 1}", "policy": "keep"} for i in range(3000)}
    sagas["t3000"] = {"parent": "t3001", "policy": "keep"}
    sagas["t3001"] = {"parent": "t3000", "policy": "keep"}
    G = nx.MultiDiGraph(sagas=sagas)
    G.add_node("start", kind="start")
    problems = [p for p in wf.validate(G, registry=None) if p.code == "bad-saga"]
    assert len(problems) == len(sagas)  # every saga whose parents never reach a top
    assert max(len(p.message) for p in problems) < 300
    # the cycle's two members are drawn at the top, the tail nested under one of them
    source = rendering.to_dot(G)
    assert source.count("subgraph cluster_") == 2 + (MAX_SAGA_DEPTH - 1)
    depth = deepest = 0
    for line in source.splitlines():
        depth += line.count("{") - line.count("}")
        deepest = max(deepest, depth)
    assert deepest == 1 + MAX_SAGA_DEPTH


def test_saga_nesting_depths_and_cycles() -> None:
    specs = {
        "top": SagaSpec(),
        "mid": SagaSpec(parent="top", policy="keep"),
        "low": SagaSpec(parent="mid", policy="keep"),
        "orphan": SagaSpec(parent="ghost", policy="keep"),
        "x": SagaSpec(parent="y", policy="keep"),
        "y": SagaSpec(parent="x", policy="keep"),
        "tail": SagaSpec(parent="x", policy="keep"),
    }
    nesting = saga_nesting(specs)
    assert nesting.depth == {"top": 1, "mid": 2, "low": 3, "orphan": 1, "x": 1, "y": 1, "tail": 2}
    assert set(nesting.cycle) == {"x", "y", "tail"}
    assert set(nesting.cycle["tail"]) == {"x", "y"}


# --- large graphs -------------------------------------------------------------------------------


def test_a_twenty_thousand_node_chain_validates() -> None:
    assert wf.validate(chain(20_000), registry=None) == []


def test_a_long_unbounded_loop_is_one_problem_with_a_short_message() -> None:
    G = chain(5_000)
    G.add_edge("a4999", "a0", key="failed")
    [problem] = wf.validate(G, registry=None)
    assert problem.code == "unbounded-cycle"
    assert problem.node == "a0"
    assert "a0, a1, a2" in problem.message
    assert "and 4990 more" in problem.message
    assert len(problem.message) < 400


@needs_dot
def test_a_graph_too_large_to_draw_is_refused_before_dot_runs() -> None:
    G = chain(20_000)
    assert rendering.to_dot(G).count(" -> ") == 20_000  # the source is always available
    with pytest.raises(wf.RenderingUnavailable, match=r"20,001 nodes and 20,000 edges.*10,000"):
        rendering.to_svg(G)


def fork_pairs(k: int) -> nx.MultiDiGraph:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    prev, outlet = "start", "next"
    for i in range(k):
        G.add_node(f"p{i}", kind="parallel", config={"branches": ["x", "y"]})
        G.add_node(f"x{i}", kind="action", activity="a")
        G.add_node(f"y{i}", kind="action", activity="a")
        G.add_node(f"j{i}", kind="join", config={"fork": f"p{i}"})
        G.add_edges_from(
            [(prev, f"p{i}", outlet), (f"p{i}", f"x{i}", "x"), (f"p{i}", f"y{i}", "y")]
        )
        G.add_edges_from([(f"x{i}", f"j{i}", "next"), (f"y{i}", f"j{i}", "next")])
        prev, outlet = f"j{i}", "completed"
    return G


def test_thousands_of_fork_join_pairs_validate() -> None:
    assert codes(fork_pairs(2_000)) == []


def test_joins_their_forks_cannot_reach_are_each_reported() -> None:
    G = fork_pairs(300)
    G.remove_edge("x7", "j7", key="next")
    G.remove_edge("y7", "j7", key="next")
    G.add_edge("j6", "j7", key="partial")  # j7 reached, but not from p7
    found = wf.validate(G, registry=None)
    assert [(p.code, p.node) for p in found if p.code == "join-unreachable"] == [
        ("join-unreachable", "j7")
    ]


@settings(max_examples=150, deadline=None)
@given(
    st.integers(2, 12).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n),
            st.lists(st.integers(0, n - 1), min_size=1, max_size=4, unique=True),
        )
    )
)
def test_reachability_agrees_with_a_search_per_pair(
    case: tuple[int, list[tuple[int, int]], list[int]],
) -> None:
    n, edges, sources = case
    G = nx.MultiDiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from(edges)
    reaches = validation._reachability(G, sources, range(n))
    for s in sources:
        for t in range(n):
            assert reaches(s, t) == nx.has_path(G, s, t), (s, t)


@needs_dot
def test_dot_is_stopped_when_it_takes_longer_than_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rendering, "DOT_TIMEOUT", 0.001)  # no dot starts and lays out this fast
    with pytest.raises(wf.RenderingUnavailable, match=r"took more than 0\.001 s.*stopped"):
        rendering.to_svg(chain(300))


def test_without_dot_on_the_path_rendering_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(wf.RenderingUnavailable, match="apt-get install graphviz"):
        rendering.to_svg(chain(2))
