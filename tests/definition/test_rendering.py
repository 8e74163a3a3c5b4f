"""Pictures drawn by the real Graphviz ``dot``: ids, labels, sagas, problems, formats."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import networkx as nx
import pytest

import wfkit as wf
from wfkit.definition.rendering import PROBLEM_COLOUR
from wfkit.examples import all_workflows

pytestmark = pytest.mark.skipif(
    shutil.which("dot") is None, reason="the Graphviz 'dot' program is not installed"
)

SVG = "{http://www.w3.org/2000/svg}"
XLINK_TITLE = "{http://www.w3.org/1999/xlink}title"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def by_id(root: ET.Element) -> dict[str, ET.Element]:
    return {e.get("id"): e for e in root.iter() if e.get("id")}  # type: ignore[misc]


def texts(element: ET.Element) -> list[str]:
    return [t.text or "" for t in element.iter(f"{SVG}text")]


def tooltip(group: ET.Element) -> str:
    return next(a.get(XLINK_TITLE) for a in group.iter(f"{SVG}a"))  # type: ignore[return-value]


@pytest.fixture(scope="module")
def examples() -> dict[str, wf.Workflow]:
    return all_workflows()


@pytest.fixture(scope="module")
def svgs(examples: dict[str, wf.Workflow]) -> dict[str, ET.Element]:
    return {name: parse(flow.to_svg()) for name, flow in examples.items()}


@pytest.mark.parametrize("name", ["onboarding", "fulfilment", "checkout", "trip"])
def test_every_node_and_edge_has_an_element_with_its_id(
    name: str, examples: dict[str, wf.Workflow], svgs: dict[str, ET.Element]
) -> None:
    ids = by_id(svgs[name])
    G = examples[name].graph
    for n in G.nodes:
        assert f"node-{n}" in ids, n
        assert ids[f"node-{n}"].get("class") == "node"  # the examples have no problems
    for u, v, k in G.edges(keys=True):
        assert f"edge-{u}-{k}-{v}" in ids


def test_the_title_names_workflow_and_version(svgs: dict[str, ET.Element]) -> None:
    assert "fulfilment v1" in texts(svgs["fulfilment"])


def test_edge_labels_show_outlets_and_the_if_expression(svgs: dict[str, ET.Element]) -> None:
    onboarding = by_id(svgs["onboarding"])
    assert texts(onboarding["edge-if-1-true-approval"]) == ["true: needs_approval"]
    assert texts(onboarding["edge-if-1-false-mail.welcome"]) == ["false"]
    assert texts(onboarding["edge-start-next-accounts.create"]) == []  # 'next' is implied

    fulfilment = by_id(svgs["fulfilment"])
    assert texts(fulfilment["edge-join-1-partial-review"]) == ["partial"]
    assert texts(fulfilment["edge-join-1-completed-orders.confirm"]) == ["completed"]
    assert texts(fulfilment["edge-for_each-1-each-orders.ship-line"]) == ["each"]
    assert texts(fulfilment["edge-review-approved-orders.confirm"]) == ["approved"]


def test_node_labels_describe_the_step(svgs: dict[str, ET.Element]) -> None:
    fulfilment = by_id(svgs["fulfilment"])
    assert "orders.ship-line" in texts(fulfilment["node-orders.ship-line"])
    assert "for each lines ×4" in texts(fulfilment["node-for_each-1"])
    assert texts(fulfilment["node-review"]) == ["♙ review", "≤ 2d"]
    onboarding = by_id(svgs["onboarding"])
    assert "needs_approval" in texts(onboarding["node-if-1"])
    assert "approval (3d)" in texts(onboarding["node-approval"])


def test_node_tooltips_give_id_and_kind(svgs: dict[str, ET.Element]) -> None:
    ids = by_id(svgs["fulfilment"])
    assert tooltip(ids["node-join-1"]) == "join-1 (join)"
    assert tooltip(ids["edge-join-1-partial-review"]) == "join-1 -[partial]-> review"


def test_saga_clusters_are_drawn_with_their_labels(svgs: dict[str, ET.Element]) -> None:
    checkout = by_id(svgs["checkout"])
    assert checkout["saga-saga-1"].get("class") == "cluster"
    assert "saga checkout" in texts(checkout["saga-saga-1"])
    trip = by_id(svgs["trip"])
    assert "saga trip" in texts(trip["saga-saga-1"])
    assert "saga stay (unwind)" in texts(trip["saga-saga-2"])


def test_compensations_are_dashed_boxes_linked_by_dashed_edges(
    svgs: dict[str, ET.Element],
) -> None:
    ids = by_id(svgs["checkout"])
    for step, undo in [
        ("inventory.reserve", "inventory.release"),
        ("card.charge", "card.refund"),
        ("courier.book", "courier.cancel"),
    ]:
        box = ids[f"compensation-{step}"]
        assert f"⟲ {undo}" in texts(box)
        assert any(p.get("stroke-dasharray") for p in box.iter(f"{SVG}path"))
        link = ids[f"compensates-{step}"]
        assert any(p.get("stroke-dasharray") for p in link.iter(f"{SVG}path"))
        assert tooltip(link) == f"undo: {undo}"
    assert "compensation-mail.receipt" not in ids


def test_a_problem_node_is_red_with_its_message_as_tooltip() -> None:
    # mail.welcome is registered by the examples, so the only problem is the middle step
    flow = (
        wf.Workflow("broken", version=2)
        .start_with("mail.welcome")
        .then("nobody.registered")
        .then("mail.welcome")
    )
    [problem] = flow.validate()
    node = by_id(parse(flow.to_svg()))["node-nobody.registered"]
    assert (node.get("class") or "").split() == ["node", "problem", "error"]
    assert tooltip(node) == str(problem)
    assert "is not registered" in tooltip(node)
    strokes = {p.get("stroke") for p in node.iter(f"{SVG}path")}
    assert strokes == {PROBLEM_COLOUR} == {"#cc0000"}
    assert "⚠ nobody.registered" in texts(node)


def test_every_problem_of_a_node_is_in_its_tooltip() -> None:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node("x", kind="action", activity="ghost.activity", compensation="ghost.undo")
    G.add_edge("start", "x", key="next")
    node = by_id(parse(wf.Workflow.from_graph("w", 1, G).to_svg()))["node-x"]
    assert "activity 'ghost.activity'" in tooltip(node)
    assert "compensation 'ghost.undo'" in tooltip(node)


def test_a_warning_is_drawn_but_not_as_an_error() -> None:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node("island", kind="end")
    node = by_id(parse(wf.Workflow.from_graph("w", 1, G).to_svg()))["node-island"]
    assert (node.get("class") or "").split() == ["node", "problem", "warning"]
    assert "unreachable" in tooltip(node)


def test_a_problem_edge_is_red_with_its_message() -> None:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node("a", kind="action", activity="a")
    G.add_edge("start", "a", key="sideways")
    edge = by_id(parse(wf.Workflow.from_graph("w", 1, G).to_svg(problems=True)))[
        "edge-start-sideways-a"
    ]
    assert PROBLEM_COLOUR in {p.get("stroke") for p in edge.iter(f"{SVG}path")}
    assert "[unknown-outlet]" in tooltip(edge)


def test_problems_false_draws_without_them() -> None:
    flow = wf.Workflow("w").start_with("nobody.registered")
    node = by_id(parse(flow.to_svg(problems=False)))["node-nobody.registered"]
    assert node.get("class") == "node"
    assert PROBLEM_COLOUR not in flow.to_svg(problems=False)


def test_broken_nodes_still_draw() -> None:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node("d", kind="delay")  # no duration
    G.add_edge("start", "d", key="next")
    G.add_edge("d", "ghost", key="next")  # ghost has no kind at all
    ids = by_id(parse(wf.Workflow.from_graph("w", 1, G).to_svg()))
    assert "bad-config" in tooltip(ids["node-d"])
    assert "undefined-node" in tooltip(ids["node-ghost"])


def test_rendering_is_deterministic(examples: dict[str, wf.Workflow]) -> None:
    for flow in examples.values():
        assert flow.to_svg().encode() == flow.to_svg().encode()
        assert flow.to_svg() == flow.copy().to_svg()


def test_render_writes_the_format_the_suffix_names(tmp_path: Path) -> None:
    flow = all_workflows()["checkout"]
    png = flow.render(tmp_path / "checkout.png")
    pdf = flow.render(tmp_path / "sub" / "checkout.PDF")
    svg = flow.render(tmp_path / "checkout.svg")
    assert png == tmp_path / "checkout.png"
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert pdf.read_bytes().startswith(b"%PDF")
    assert "node-card.charge" in by_id(parse(svg.read_text()))


def test_render_format_overrides_the_suffix(tmp_path: Path) -> None:
    out = all_workflows()["checkout"].render(tmp_path / "picture.out", format="png")
    assert out.read_bytes().startswith(b"\x89PNG")


def test_render_refuses_an_unknown_suffix_before_writing(tmp_path: Path) -> None:
    target = tmp_path / "checkout.gif"
    with pytest.raises(wf.WfkitError, match=r"checkout\.gif.*\.svg, \.png or \.pdf"):
        all_workflows()["checkout"].render(target)
    assert not target.exists()


def test_the_notebook_display_bundle_has_svg_and_text(examples: dict[str, wf.Workflow]) -> None:
    flow = examples["onboarding"]
    bundle = flow._repr_mimebundle_()
    assert bundle["text/plain"] == "Workflow('onboarding', version=1, 5 nodes, 5 edges)"
    assert "node-if-1" in by_id(parse(bundle["image/svg+xml"]))


def test_to_dot_is_graphviz_source_with_generated_names(examples: dict[str, wf.Workflow]) -> None:
    dot = examples["onboarding"].to_dot()
    assert dot.startswith("digraph workflow {")
    assert 'id="node-accounts.create"' in dot


@pytest.mark.parametrize(
    "weird",
    [
        "with space",
        'say "hi"',
        "it's",
        "ünïcødé ✓ 日本",
        "a->b",
        "a -- b",
        "R&D <tag>",
        "{braces}",
        "semi;colon",
        "graph",
        "node",
    ],
)
def test_weird_node_ids_render_with_their_exact_id(weird: str) -> None:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node(weird, kind="approval")
    G.add_node("end", kind="end")
    G.add_edge("start", weird, key="next")
    G.add_edge(weird, "end", key="approved")
    flow = wf.Workflow.from_graph("w", 1, G)
    assert flow.validate() == []
    ids = by_id(parse(flow.to_svg()))
    assert f"node-{weird}" in ids
    assert f"edge-{weird}-approved-end" in ids
    assert tooltip(ids[f"node-{weird}"]) == f"{weird} (approval)"


@pytest.mark.parametrize("weird", ["C:\\temp", "x\\N", "\\G-\\L", "ends with \\", "R&amp;D"])
def test_ids_that_look_like_graphviz_escapes_are_kept_verbatim(weird: str) -> None:
    # Graphviz expands \N, \G, \L... and decodes &amp; in attribute strings; the module
    # promises "any id renders" with the real id as element id and tooltip.
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node(weird, kind="end")
    G.add_edge("start", weird, key="next")
    ids = by_id(parse(wf.Workflow.from_graph("w", 1, G).to_svg()))
    assert f"node-{weird}" in ids
    assert tooltip(ids[f"node-{weird}"]) == f"{weird} (end)"
