"""Building a workflow in the visual editor in a real browser: add nodes with the form, connect
them by dragging from node to node (choosing the outlet where a node has several), see a
validation problem appear on the graph and in the list and go away once fixed, undo and redo,
register the graph as the next version and run it.

The kernel-side truth (the edited graph, the problems, the engine's versions and the run) is
written by the notebook to a JSON file (see conftest.py) and every step is checked there.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RED = "rgb(204, 0, 0)"  # surface.css: a node with an error problem is outlined #cc0000

EDITOR = """
import ipywidgets as W
import wfkit as wf
from pathlib import Path
from wfkit.widgets import Editor, RunMonitor

registry = wf.ActivityRegistry()
registry.register("orders.check", lambda ctx: ctx.data.update(checked=True))
registry.register("orders.ship", lambda ctx: ctx.data.update(shipped=ctx.data["checked"]))
engine = wf.Engine(str(Path(TMP) / "runs.duckdb"), registry=registry)
engine.register(wf.Workflow("orders", 1).start_with("orders.ship"))  # v1 exists already

flow = wf.Workflow("orders", 1)
editor = Editor(flow, engine=engine)


def editor_state():
    G = editor.graph
    try:
        nodes = {str(n): dict(a) for n, a in G.nodes(data=True)}
        edges = sorted([str(u), str(k), str(v)] for u, v, k in G.edges(keys=True))
    except RuntimeError:  # the kernel changed the graph while this thread read it: next tick
        return last_editor_state
    return {
        "nodes": nodes,
        "edges": edges,
        "problems": [
            {"node": p.node, "code": p.code, "severity": p.severity.value}
            for p in list(editor.problems)
        ],
        "selected": editor.surface.selected,
        "selected_edge": list(editor.surface.selected_edge),
        "message": editor.status_line.text,
        "message_kind": editor.status_line.kind,
        "versions": engine.workflows().get("orders", []),
        "register_label": editor.register_button.description,
    }


last_editor_state = editor_state()


def snapshot():
    global last_editor_state
    last_editor_state = editor_state()
    return {"editor": last_editor_state}


# What a user does in the next cell once the editor registered the workflow: run it, watch it.
run_button = W.Button(description="Run the latest version")
run_button.add_class("test-run")
runs = W.VBox()


def run_latest(_):
    run = engine.start("orders", {"order": "o-1"})
    engine.run_until_idle()
    record(run=run_state(run), run_version=run.workflow.version)
    runs.children = [RunMonitor(engine, run, autostart=False)]


run_button.on_click(run_latest)
watch(snapshot)
W.VBox([editor, run_button, runs])
"""


def node(page: Page, node_id: str) -> Locator:
    return page.locator(f".wfkit-editor-surface g.node[data-node-id='{node_id}']")


def centre(locator: Locator) -> tuple[float, float]:
    # the surface redraws (and refits) its picture after every edit: a node of the new picture
    # has a box once it is laid out, so ask until it has one
    deadline = time.monotonic() + 10
    box = None
    while box is None and time.monotonic() < deadline:
        locator.wait_for(state="attached", timeout=10_000)
        box = locator.bounding_box(timeout=10_000)
        if box is None or not box["width"]:
            box = None
            time.sleep(0.1)
    assert box is not None, f"{locator} is not on screen"
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def drag(page: Page, source: str, target: str) -> None:
    """Press on ``source``, move onto ``target`` in small steps, release (a connect gesture)."""
    (x0, y0), (x1, y1) = centre(node(page, source)), centre(node(page, target))
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move(x0 + 8, y0 + 8, steps=2)
    page.mouse.move(x1, y1, steps=12)
    page.mouse.up()


def add_node(page: Page, kind: str, node_id: str = "") -> None:
    page.locator(".wfkit-editor-add-kind select").select_option(kind)
    page.locator(".wfkit-editor-add-id input").fill(node_id)
    page.locator(".wfkit-editor-add").click()


def activity_box(page: Page) -> Locator:
    # the node form's fields carry no CSS hook of their own: find them by their labels
    return page.locator(".wfkit-node-form").get_by_label("activity", exact=True)


def set_activity(page: Page, name: str) -> None:
    activity_box(page).fill(name)
    page.locator(".wfkit-editor-apply").click()


def problems_of(state: dict[str, Any], node_id: str) -> list[str]:
    return [p["code"] for p in state["editor"]["problems"] if p["node"] == node_id]


def stroke(locator: Locator) -> str:
    shape = locator.locator("polygon, ellipse, path").first
    return str(shape.evaluate("e => getComputedStyle(e).stroke"))


def test_build_fix_register_and_run_a_workflow_in_the_editor(
    voila, page, notebook, screenshot
) -> None:
    notebook.write(EDITOR)
    voila.open(page, notebook, ".wfkit-editor .wfkit-editor-surface[data-ready='true']")
    state = notebook.wait_for(lambda s: "editor" in s, "the editor built")
    assert state["editor"]["nodes"] == {}
    expect(page.locator(".wfkit-editor-register")).to_have_text("Register as version 2")

    # three nodes through the add row and the property form
    add_node(page, "start")
    notebook.wait_for(lambda s: "start" in s["editor"]["nodes"], "a start node")
    add_node(page, "action", "check")
    notebook.wait_for(lambda s: s["editor"]["selected"] == "check", "check added and selected")
    expect(page.locator(".wfkit-node-form")).to_contain_text("check")
    set_activity(page, "orders.chek")  # a typo: no such activity is registered
    # the node and its problems are published one after the other: wait for both
    notebook.wait_for(
        lambda s: (
            s["editor"]["nodes"]["check"].get("activity") == "orders.chek"
            and "unknown-activity" in problems_of(s, "check")
        ),
        "check running the typed activity, reported as unknown",
    )
    add_node(page, "action", "ship")
    notebook.wait_for(lambda s: s["editor"]["selected"] == "ship", "ship added and selected")
    set_activity(page, "orders.ship")
    notebook.wait_for(
        lambda s: s["editor"]["nodes"]["ship"].get("activity") == "orders.ship",
        "ship running orders.ship",
    )

    # the kernel has ship's activity; wait until the browser shows the picture drawn from it
    # too (ship no longer in error, only unreachable): a drag aimed at the picture before would
    # land where the next one, refitted, puts another node or none
    expect(node(page, "ship")).to_have_class(re.compile(r"\bproblem warning\b"))
    # connect by dragging: start has one outlet, so the drag connects it at once
    drag(page, "start", "check")
    state = notebook.wait_for(
        lambda s: ["start", "next", "check"] in s["editor"]["edges"], "start -[next]-> check"
    )
    # an action has several outlets (next, failed, fallback): the drag asks which one
    expect(page.locator(".wfkit-editor-surface g.edge[data-source='start']")).to_have_count(1)
    drag(page, "check", "ship")
    state = notebook.wait_for(
        lambda s: "several free outlets" in s["editor"]["message"],
        "the editor asking for an outlet",
    )
    assert state["editor"]["edges"] == [["start", "next", "check"]]
    outlet = page.locator(".wfkit-editor-connect-outlet select")
    expect(outlet).to_have_value("next")
    expect(page.locator(".wfkit-editor-connect-target select")).to_have_value("ship")
    outlet.select_option("next")
    page.locator(".wfkit-editor-connect").click()
    state = notebook.wait_for(
        lambda s: ["check", "next", "ship"] in s["editor"]["edges"], "check -[next]-> ship"
    )
    assert state["editor"]["edges"] == [["check", "next", "ship"], ["start", "next", "check"]]

    # the problem is listed and drawn red on the node
    assert [p["code"] for p in state["editor"]["problems"]] == ["unknown-activity"]
    problem = page.locator(".wfkit-editor-problems tr.wfkit-problem-error[data-node='check']")
    expect(problem).to_have_attribute("data-code", "unknown-activity")
    expect(node(page, "check")).to_have_class(re.compile(r"\bproblem\b"))
    node(page, "ship").click()  # move the selection off check, whose outline shows the problem
    notebook.wait_for(lambda s: s["editor"]["selected"] == "ship", "ship selected")
    expect(node(page, "check")).not_to_have_class(re.compile(r"wfkit-selected"))
    assert stroke(node(page, "check")) == RED
    expect(page.locator(".wfkit-editor-register")).to_be_enabled()
    screenshot(page.locator(".wfkit-editor"), "editor.png")

    # fix it: click the node, correct the activity, Apply
    node(page, "check").click()
    notebook.wait_for(lambda s: s["editor"]["selected"] == "check", "check selected by a click")
    expect(activity_box(page)).to_have_value("orders.chek")
    set_activity(page, "orders.check")
    state = notebook.wait_for(
        lambda s: (
            s["editor"]["nodes"]["check"].get("activity") == "orders.check"
            and not s["editor"]["problems"]
        ),
        "the problem gone once the activity is fixed",
    )
    expect(page.locator(".wfkit-editor-problems .wfkit-problems-none")).to_be_visible()
    expect(node(page, "check")).not_to_have_class(re.compile(r"\bproblem\b"))

    # undo brings the typo (and its problem) back; redo fixes it again
    page.locator(".wfkit-editor-undo").click()
    notebook.wait_for(
        lambda s: (
            s["editor"]["nodes"]["check"].get("activity") == "orders.chek"
            and problems_of(s, "check") == ["unknown-activity"]
        ),
        "undo restoring the typo",
    )
    expect(node(page, "check")).to_have_class(re.compile(r"\bproblem\b"))
    page.locator(".wfkit-editor-redo").click()
    notebook.wait_for(
        lambda s: (
            s["editor"]["nodes"]["check"].get("activity") == "orders.check"
            and not s["editor"]["problems"]
        ),
        "redo fixing it again",
    )

    # a thin edge is clickable a few pixels off its line (its wide transparent hit path), and
    # can be deleted; (a straight edge's box has no height, so click by position)
    x, y = centre(
        page.locator(
            ".wfkit-editor-surface g.edge[data-source='check'][data-target='ship'] path.wfkit-hit"
        )
    )
    page.mouse.click(x, y + 4)
    notebook.wait_for(
        lambda s: s["editor"]["selected_edge"] == ["check", "next", "ship"], "the edge selected"
    )
    page.locator(".wfkit-editor-delete").click()
    state = notebook.wait_for(
        lambda s: s["editor"]["edges"] == [["start", "next", "check"]], "the edge deleted"
    )
    assert "unreachable" in problems_of(state, "ship")  # a warning: ship is cut off now
    page.locator(".wfkit-editor-undo").click()
    state = notebook.wait_for(
        lambda s: ["check", "next", "ship"] in s["editor"]["edges"] and not s["editor"]["problems"],
        "undo restoring the edge",
    )

    # register as the next version, then run it
    register = page.locator(".wfkit-editor-register")
    expect(register).to_have_text("Register as version 2")
    register.click()
    state = notebook.wait_for(lambda s: s["editor"]["versions"] == [1, 2], "orders v2 registered")
    assert state["editor"]["message_kind"] == "ok", state["editor"]["message"]
    expect(page.locator(".wfkit-editor-status.wfkit-ok")).to_contain_text("Registered 'orders' v2")
    expect(register).to_be_disabled()  # nothing changed since: no v3 to register

    page.locator(".test-run").click()
    state = notebook.wait_for(lambda s: "run" in s, "the run of the registered version")
    run = state["run"]
    assert state["run_version"] == 2
    assert run["status"] == "completed"
    assert run["data"] == {"order": "o-1", "checked": True, "shipped": True}
    completed = [e["node"] for e in run["events"] if e["kind"] == "step.completed"]
    assert completed == ["check", "ship"]
    monitor = page.locator(".wfkit-monitor .wfkit-monitor-graph")
    for step in ("check", "ship"):
        expect(monitor.locator(f"g.node[data-node-id='{step}']")).to_have_class(
            re.compile(r"\bsucceeded\b")
        )
