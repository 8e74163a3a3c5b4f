"""The graph canvas in a real browser: a long workflow fits the width, zooms and pans, and the
gestures the editor builds on (drag node onto node, drag from an outlet handle, drop a palette
chip, Delete / Ctrl+Z / Ctrl+Shift+Z) reach the kernel after zooming and panning.

Every gesture is checked on the kernel side: the notebook records what the surface's handlers
received (see conftest.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from .test_browser_editor import centre

pytestmark = [pytest.mark.browser, pytest.mark.slow]

STEPS = 20

CANVAS = f"""
import wfkit as wf
from wfkit.widgets import GraphSurface

flow = wf.Workflow("long", 1).start_with("s0")
for i in range(1, {STEPS}):
    flow = flow.then(f"s{{i}}")
surface = GraphSurface(palette=["action", "delay"],
                       outlets={{n: ["next", "failed"] for n in flow.graph}})
surface.draw(flow.graph, title="long v1")
events = []


def seen(*event):
    events.append([str(part) if part is not None else None for part in event])
    record(events=events)


surface.on_connect(lambda *ends: seen("connect", *ends))
surface.on_drop(lambda kind, after: seen("drop", kind, after))
surface.on_key(lambda action: seen("key", action))
surface.observe(lambda change: record(selected=change["new"]), names="selected")
record(events=[], selected="")
surface
"""


def node(page: Page, node_id: str) -> Locator:
    return page.locator(f".wfkit-surface g.node[data-node-id='{node_id}']")


def zoom(page: Page) -> float:
    return float(page.locator(".wfkit-surface").get_attribute("data-zoom") or "nan")


def drag_between(page: Page, start: tuple[float, float], end: tuple[float, float]) -> None:
    page.mouse.move(*start)
    page.mouse.down()
    page.mouse.move(start[0] + 8, start[1] + 8, steps=2)
    page.mouse.move(*end, steps=12)
    page.mouse.up()


def events_after(notebook: Any, count: int) -> list[list[str | None]]:
    state = notebook.wait_for(lambda s: len(s["events"]) >= count, f"{count} events")
    return list(state["events"])


def on_stage(page: Page, point: tuple[float, float]) -> bool:
    box = page.locator(".wfkit-surface-stage").bounding_box()
    assert box is not None
    x, y = point
    return box["x"] < x < box["x"] + box["width"] and box["y"] < y < box["y"] + box["height"]


def test_a_long_graph_fits_then_zooms_and_pans_and_gestures_still_land(
    voila, page, notebook, screenshot
) -> None:
    notebook.write(CANVAS)
    voila.open(page, notebook, ".wfkit-surface[data-ready='true']")
    surface = page.locator(".wfkit-surface")
    stage = page.locator(".wfkit-surface-stage")
    svg = stage.locator("svg")

    # fit by default: the whole picture shows at the widget's width
    expect(surface).to_have_attribute("data-fit", "true")
    fitted = zoom(page)
    assert 0 < fitted < 1
    assert svg.evaluate("s => s.getBoundingClientRect().width") <= stage.evaluate(
        "s => s.clientWidth"
    )
    assert stage.evaluate("s => s.scrollWidth <= s.clientWidth")
    # the static picture saved next to the view is hidden while the view is live
    expect(page.locator("[data-wfkit-fallback]")).to_be_hidden()
    screenshot(surface, "canvas-fit.png")

    page.locator(".wfkit-zoom-in").click()
    assert zoom(page) == pytest.approx(fitted * 1.25, rel=0.01)
    expect(surface).to_have_attribute("data-fit", "false")
    page.locator(".wfkit-zoom-reset").click()
    assert zoom(page) == 1
    expect(page.locator(".wfkit-zoom-level")).to_have_text("100 %")
    assert stage.evaluate("s => s.scrollWidth > s.clientWidth")  # wider than the widget now

    # drag on the background pans
    box = stage.bounding_box()
    assert box is not None
    drag_between(page, (box["x"] + 400, box["y"] + 10), (box["x"] + 100, box["y"] + 10))
    assert stage.evaluate("s => s.scrollLeft") > 250

    # drag from node to node at this zoom and scroll position
    visible = [f"s{i}" for i in range(STEPS) if on_stage(page, centre(node(page, f"s{i}")))]
    assert len(visible) >= 3, visible
    source, target = visible[0], visible[2]
    drag_between(page, centre(node(page, source)), centre(node(page, target)))
    assert events_after(notebook, 1)[-1] == ["connect", source, target]

    # select a node: its outlets appear as handles; drag one onto a node
    node(page, source).click()
    notebook.wait_for(lambda s: s["selected"] == source, f"{source} selected")
    handle = page.locator(f"g.wfkit-outlet[data-source='{source}'][data-outlet='failed']")
    expect(handle).to_have_count(1)
    drag_between(page, centre(handle), centre(node(page, target)))
    assert events_after(notebook, 2)[-1] == ["connect", source, target, "failed"]

    # palette chips: onto the background, onto a node, and a plain click
    chip = page.locator(".wfkit-palette-chip[data-kind='delay']")
    drag_between(page, centre(chip), (box["x"] + 40, box["y"] + box["height"] - 6))
    assert events_after(notebook, 3)[-1] == ["drop", "delay", None]
    drag_between(page, centre(chip), centre(node(page, target)))
    assert events_after(notebook, 4)[-1] == ["drop", "delay", target]
    page.locator(".wfkit-palette-chip[data-kind='action']").click()
    assert events_after(notebook, 5)[-1] == ["drop", "action", None]

    # keys while the canvas has the focus
    node(page, target).click()
    for key in ("Delete", "Control+z", "Control+Shift+Z", "Control+y"):
        page.keyboard.press(key)
    actions = [e[1] for e in events_after(notebook, 9)[5:]]
    assert actions == ["delete", "undo", "redo", "redo"]

    # Ctrl+wheel zooms around the pointer; fit goes back to the whole graph
    page.locator(".wfkit-zoom-fit").click()
    assert zoom(page) == pytest.approx(fitted, rel=0.01)
    x, y = centre(node(page, "s10"))
    page.mouse.move(x, y)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -200)
    page.keyboard.up("Control")
    expect(surface).to_have_attribute("data-fit", "false")
    assert zoom(page) > fitted * 1.3
    after = centre(node(page, "s10"))
    assert abs(after[0] - x) < 30 and abs(after[1] - y) < 30  # the pointed-at node stayed put
    assert notebook.state()["events"][-1] == ["key", "redo"]  # nothing else reached the kernel
