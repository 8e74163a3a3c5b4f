"""GraphSurface, kernel side: the SVG and id map the front end reads, messages it sends, and
overlays (status, selection, tooltips) that never resend the picture."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from importlib import resources

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


def test_a_drag_from_an_outlet_handle_names_the_outlet() -> None:
    surface = GraphSurface()
    seen: list[tuple[str, ...]] = []
    surface.on_connect(lambda *ends: seen.append(ends))

    surface._handle_custom_msg({"type": "connect", "source": "a", "target": "b"}, [])
    surface._handle_custom_msg(
        {"type": "connect", "source": "a", "target": "b", "outlet": "failed"}, []
    )

    assert seen == [("a", "b"), ("a", "b", "failed")]


def test_a_palette_chip_dropped_reaches_every_drop_handler_with_the_node_it_landed_on() -> None:
    surface = GraphSurface(palette=["action", "delay"])
    seen: list[tuple[str, str | None]] = []
    surface.on_drop(lambda kind, after: seen.append((kind, after)))

    surface._handle_custom_msg({"type": "drop", "kind": "delay"}, [])
    surface._handle_custom_msg({"type": "drop", "kind": "action", "after": "card.charge"}, [])

    assert seen == [("delay", None), ("action", "card.charge")]
    assert surface.palette == ["action", "delay"]


def test_canvas_keys_reach_every_key_handler() -> None:
    surface = GraphSurface()
    seen: list[str] = []
    surface.on_key(seen.append)

    for action in ("delete", "undo", "redo"):
        surface._handle_custom_msg({"type": "key", "action": action}, [])

    assert seen == ["delete", "undo", "redo"]


@pytest.mark.parametrize(
    "message",
    [
        {"type": "connect", "source": "a", "target": "b", "outlet": 3},
        {"type": "connect", "source": "a", "target": "b", "outlet": ""},
        {"type": "drop"},
        {"type": "drop", "kind": ""},
        {"type": "drop", "kind": "action", "after": 7},
        {"type": "drop", "kind": ["action"]},
        {"type": "key"},
        {"type": "key", "action": "format-disk"},
        {"type": "key", "action": None},
        {"type": None},
    ],
)
def test_malformed_canvas_messages_are_logged_and_ignored(
    message: object, caplog: pytest.LogCaptureFixture
) -> None:
    surface = GraphSurface()
    seen: list[object] = []
    surface.on_connect(lambda *ends: seen.append(ends))
    surface.on_drop(lambda kind, after: seen.append((kind, after)))
    surface.on_key(seen.append)

    with caplog.at_level(logging.WARNING, logger="wfkit.widgets.surface"):
        surface._handle_custom_msg(message, [])

    assert seen == []
    assert "GraphSurface ignored" in caplog.text


def test_outlets_are_a_synced_map_of_node_to_outlet_names() -> None:
    surface = GraphSurface(outlets={"check": ["next", "failed"]})
    assert surface.outlets == {"check": ["next", "failed"]}
    state = surface.get_state()
    assert state["outlets"] == {"check": ["next", "failed"]}
    assert state["palette"] == []  # no palette: the monitor's case
    with pytest.raises(Exception, match="outlets"):
        surface.outlets = {"check": "next"}


def test_the_static_picture_carries_status_and_tooltips_but_no_element_ids() -> None:
    flow = checkout()
    surface = GraphSurface()
    surface.draw(flow.graph, title="checkout v1")
    surface.status = {"card.charge": "succeeded", "card.charge-2": "failed"}

    html = surface.static_html()

    assert f'data-wfkit-fallback="{surface.fallback_key}"' in html
    assert 'class="node succeeded"' in html and 'class="node failed"' in html
    assert ' id="' not in html  # the live view on the same page owns the ids
    assert "<title>" in html and 'xlink:title="card.charge (action)"' in html
    assert ".wfkit-graph g.node.succeeded" in html  # its colours travel with it
    assert GraphSurface().static_html() == ""  # nothing drawn, nothing saved


def test_displaying_a_surface_shows_the_view_then_its_static_picture() -> None:
    surface = GraphSurface()
    assert [sorted(b) for b in surface.display_bundles()] == [
        ["application/vnd.jupyter.widget-view+json", "text/plain"]
    ]
    surface.draw(checkout().graph)

    view, picture = surface.display_bundles()

    assert view["application/vnd.jupyter.widget-view+json"]["model_id"] == surface.model_id
    assert picture["text/html"] == surface.static_html()


def test_a_shown_static_picture_follows_the_status() -> None:
    surface = GraphSurface()
    surface.draw(checkout().graph)
    updates: list[str] = []

    class Handle:
        def update(self, bundle: dict[str, str], raw: bool) -> None:
            assert raw
            updates.append(bundle["text/html"])

    surface._keep_displayed(Handle())
    surface.status = {"card.charge": "running"}
    surface.tooltips = {"card.charge": "attempt 1"}  # not drawn in the static picture

    assert len(updates) == 1 and 'class="node running"' in updates[0]
