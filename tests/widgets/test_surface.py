"""GraphSurface, kernel side: the SVG and id map the front end reads, messages it sends, and
overlays (status, selection, tooltips) that never resend the picture."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

import pytest

import wfkit as wf
from wfkit.widgets import GraphSurface
from wfkit.widgets.surface import STATUS_CLASSES

SVG = "{http://www.w3.org/2000/svg}"


def checkout() -> wf.Workflow:
    """Ids with dots and dashes, a compensation box and a failed outlet."""
    return (
        wf.Workflow("checkout", 1)
        .start_with("card.charge")
        .compensate_with("card.refund")
        .then("card.charge", id="card.charge-2")
        .then("mail.send-receipt")
    )


def groups(svg: str, cls: str) -> dict[str, ET.Element]:
    """SVG ``<g>`` elements whose class list holds ``cls``, by id (entities decoded, as a page)."""
    root = ET.fromstring(svg)
    return {
        g.get("id", ""): g for g in root.iter(f"{SVG}g") if cls in (g.get("class") or "").split()
    }


def test_every_node_and_edge_is_a_group_the_front_end_can_map_back() -> None:
    flow = checkout()
    surface = GraphSurface()
    surface.draw(flow.graph, title="checkout v1")

    nodes = groups(surface.svg, "node")
    assert {f"node-{n}" for n in flow.graph} <= set(nodes)
    assert "compensation-card.charge" in nodes
    edges = groups(surface.svg, "edge")
    expected = {f"edge-{u}-{k}-{v}": [u, k, v] for u, v, k in flow.graph.edges(keys=True)}
    assert surface.edge_map == expected
    assert set(expected) <= set(edges)  # compensation links are drawn but not in the map


def test_problems_are_drawn_as_a_problem_class_on_the_node() -> None:
    G = wf.Workflow("broken", 1).start_with("nobody.registered").graph
    problems = wf.validate(G, registry=wf.ActivityRegistry())
    surface = GraphSurface()
    surface.draw(G, problems)

    node = groups(surface.svg, "node")["node-nobody.registered"]
    assert "problem" in (node.get("class") or "").split()


def test_a_drag_message_from_the_page_reaches_every_connect_handler() -> None:
    surface = GraphSurface()
    seen: list[tuple[str, str]] = []
    surface.on_connect(lambda s, t: seen.append((s, t)))
    surface.on_connect(lambda s, t: seen.append((t, s)))

    surface._handle_custom_msg({"type": "connect", "source": "a", "target": "b"}, [])

    assert seen == [("a", "b"), ("b", "a")]


@pytest.mark.parametrize(
    "message",
    [
        {"type": "teleport"},
        {"type": "connect", "source": "a"},
        {"type": "connect", "source": 1, "target": "b"},
        ["connect", "a", "b"],
    ],
)
def test_messages_it_does_not_know_are_logged_and_ignored(
    message: object, caplog: pytest.LogCaptureFixture
) -> None:
    surface = GraphSurface()
    seen: list[tuple[str, str]] = []
    surface.on_connect(lambda s, t: seen.append((s, t)))

    with caplog.at_level(logging.WARNING, logger="wfkit.widgets.surface"):
        surface._handle_custom_msg(message, [])

    assert seen == []
    assert "GraphSurface ignored" in caplog.text


def test_status_selection_and_tooltips_never_resend_the_picture() -> None:
    flow = checkout()
    surface = GraphSurface()
    surface.draw(flow.graph)
    sent: list[str] = []
    surface.observe(lambda change: sent.append(change["name"]), names=["svg", "edge_map"])

    surface.status = {n: STATUS_CLASSES[i % len(STATUS_CLASSES)] for i, n in enumerate(flow.graph)}
    surface.selected = "card.charge"
    surface.selected_edge = ["start", "next", "card.charge"]
    surface.tooltips = {"card.charge": "attempt 2 of 3"}

    assert sent == []


def test_the_front_end_ships_inside_the_package_and_holds_the_dom_contract() -> None:
    package = resources.files("wfkit.widgets")
    js = package.joinpath("surface.js").read_text(encoding="utf-8")
    css = str(GraphSurface._css)  # surface.css after the status colours of picture.css

    assert package.joinpath("surface.css").read_text(encoding="utf-8") in css
    assert "export default { render }" in js
    assert not re.search(r"^\s*import\b", js, re.MULTILINE)  # no build step, no network
    assert set(re.findall(r"https?://[^\s\"]+", js)) <= {
        "http://www.w3.org/2000/svg",
        "http://www.w3.org/1999/xlink",
    }
    hooks = ("wfkit-surface", "dataset.nodeId", "wfkit-selected", "wfkit-hit", '"connect"')
    hooks += ('"drop"', '"key"', "wfkit-outlet", "wfkit-palette-chip", "dataset.zoom")
    for hook in hooks:
        assert hook in js
    for status in STATUS_CLASSES:
        assert f".{status}" in css
    assert str(GraphSurface._esm) == js  # anywidget serves the file's text


def test_the_package_data_names_the_front_end_files() -> None:
    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    assert '"widgets/*.js", "widgets/*.css"' in text
    assert '"definition/*.css"' in text


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_es_module_parses() -> None:
    js = resources.files("wfkit.widgets").joinpath("surface.js").read_text(encoding="utf-8")
    done = subprocess.run(
        ["node", "--input-type=module", "--check"],
        input=js,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
