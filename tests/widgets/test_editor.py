"""The graph editor, driven as a user drives it: clicks on the picture arrive as changes of the
surface's ``selected``/``selected_edge`` traits, a drag from node to node as the surface's
``connect`` message, buttons through ``Button.click()``, form fields by setting ``.value``.
Assertions read the networkx graph, the problems and the engine afterwards."""

from __future__ import annotations

import enum
import logging
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import networkx as nx
import pytest
from pydantic import BaseModel, Field

import wfkit as wf
from wfkit.definition.graph import graph_to_data
from wfkit.widgets import Editor
from wfkit.widgets.data_form import DataForm
from wfkit.widgets.forms import FormError


def drag(editor: Editor, source: str, target: str) -> None:
    """What the page sends when a node is dragged onto another."""
    editor.surface._handle_custom_msg({"type": "connect", "source": source, "target": target}, [])


def click_node(editor: Editor, node: str) -> None:
    """What the page does on a click on a node: ``selected`` changes, the edge is unselected."""
    editor.surface.selected_edge = []
    editor.surface.selected = node


def click_edge(editor: Editor, source: str, outlet: str, target: str) -> None:
    editor.surface.selected = ""
    editor.surface.selected_edge = [source, outlet, target]


def add(editor: Editor, kind: str, node_id: str = "") -> str:
    editor.add_kind.value = kind
    editor.add_id.value = node_id
    editor.add_button.click()
    return editor.surface.selected


def codes(editor: Editor) -> list[tuple[Any, str]]:
    return [(p.node, p.code) for p in editor.problems]


def node_classes(svg: str) -> dict[str, list[str]]:
    """Node id -> class list of its ``g.node`` group, read as a browser reads the SVG."""
    root = ET.fromstring(svg)
    return {
        g.get("id", "").removeprefix("node-"): (g.get("class") or "").split()
        for g in root.iter("{http://www.w3.org/2000/svg}g")
        if g.get("id", "").startswith("node-")
    }


def svg_changes(editor: Editor) -> list[str]:
    """A list that grows each time the surface is sent a new picture."""
    sent: list[str] = []
    editor.surface.observe(lambda change: sent.append(change["new"]), names="svg")
    return sent


@pytest.fixture
def three_steps() -> wf.Workflow:
    return wf.Workflow("three", 1).start_with("a").then("b")


def test_a_start_action_end_workflow_is_built_from_an_empty_graph(
    registry: wf.ActivityRegistry,
) -> None:
    G = nx.MultiDiGraph()
    editor = Editor(G, registry=registry, id="built")

    assert add(editor, "start") == "start"
    assert add(editor, "action") == "action-1"
    assert "needs an activity name" in editor.status_line.text
    editor.form.activity.value = "a"
    editor.form.apply_button.click()
    assert add(editor, "end") == "end"
    drag(editor, "start", "action-1")  # start has one outlet: connected at once
    assert editor.status_line.text == "Connected 'start' -[next]-> 'action-1'."
    drag(editor, "action-1", "end")  # next, failed, fallback: the user picks
    assert list(G.edges(keys=True)) == [("start", "action-1", "next")]
    assert "several free outlets (next, failed, fallback)" in editor.status_line.text
    assert (editor.connect_source.value, editor.connect_target.value) == ("action-1", "end")
    assert list(editor.connect_outlet.options) == ["next", "failed", "fallback"]
    assert editor.connect_outlet.value == "next"
    editor.connect_button.click()

    assert editor.graph is G and editor.workflow.graph is G
    assert dict(G.nodes(data=True)) == {
        "start": {"kind": "start"},
        "action-1": {"kind": "action", "activity": "a"},
        "end": {"kind": "end"},
    }
    assert list(G.edges(keys=True)) == [
        ("start", "action-1", "next"),
        ("action-1", "end", "next"),
    ]
    assert editor.problems == []
    assert "No problems" in editor.problems_view.value
    assert editor.workflow.check(registry=registry).id == "built"


def test_a_problem_shows_in_the_list_and_on_the_graph_and_goes_after_the_fix(
    three_steps: wf.Workflow, registry: wf.ActivityRegistry
) -> None:
    editor = Editor(three_steps, registry=registry)
    assert editor.problems == []

    click_node(editor, "b")
    editor.form.activity.value = "shipping.book"
    editor.form.apply_button.click()

    assert codes(editor) == [("b", "unknown-activity")]
    assert 'data-node="b" data-code="unknown-activity"' in editor.problems_view.value
    assert node_classes(editor.surface.svg)["b"] == ["node", "problem", "error"]
    assert editor.graph.nodes["b"]["activity"] == "shipping.book"

    registry.register("shipping.book", lambda ctx: None)
    editor.refresh_button.click()  # the activity now exists

    assert editor.problems == []
    assert node_classes(editor.surface.svg)["b"] == ["node"]


def test_a_parallel_branch_left_dangling_is_a_problem_until_it_is_connected(
    registry: wf.ActivityRegistry,
) -> None:
    flow = wf.Workflow("fork", 1).start_with().parallel(lambda b: b.then("a"))
    editor = Editor(flow, registry=registry)
    parallel = next(n for n, k in flow.graph.nodes(data="kind") if k == "parallel")
    click_node(editor, parallel)
    editor.form.config.children[0].inputs["branches"].value = "branch-1, late"
    editor.form.apply_button.click()
    assert (parallel, "dangling-branch") in codes(editor)

    drag(editor, parallel, "a")  # the only free outlet is "late"

    assert flow.graph.has_edge(parallel, "a", key="late")
    assert (parallel, "dangling-branch") not in codes(editor)


def test_an_invalid_config_is_refused_inline_and_the_graph_is_left_as_it_was(
    registry: wf.ActivityRegistry,
) -> None:
    flow = wf.Workflow("timer", 1).start_with().delay("7d").then("a")
    editor = Editor(flow, registry=registry)
    before = graph_to_data(flow.graph)
    pictures = svg_changes(editor)

    click_node(editor, "delay-1")
    duration = editor.form.config.children[0].inputs["duration"]
    assert duration.value == "7d"
    duration.value = "soon-ish"
    editor.form.apply_button.click()

    assert editor.form.error_lines == [
        "duration: 'soon-ish' is not a duration; write it like '90s', '7d', '1h30m' or '0.5s'"
    ]
    assert "<li>duration: &#x27;soon-ish&#x27; is not a duration" in editor.form.error.value
    assert editor.status_line.kind == "error"
    assert editor.status_line.text.startswith("Node 'delay-1' not changed: duration: ")
    assert graph_to_data(flow.graph) == before
    assert pictures == [] and editor.undo_button.disabled

    editor.form.policy.inputs["max_visits"].value = 0
    duration.value = "1h30m"
    editor.form.apply_button.click()
    assert editor.form.error_lines == ["policy.max_visits: must be at least 1 (got 0)"]
    assert graph_to_data(flow.graph) == before

    editor.form.policy.inputs["max_visits"].value = 5
    editor.form.apply_button.click()
    assert editor.form.error.value == ""
    assert flow.graph.nodes["delay-1"] == {
        "kind": "delay",
        "config": {"duration": "1h30m"},
        "policy": {"max_visits": 5},
    }


def test_unreadable_json_in_a_list_field_is_refused(registry: wf.ActivityRegistry) -> None:
    flow = wf.Workflow("choice", 1).start_with().if_("x > 1", then=lambda b: b.then("a"))
    editor = Editor(flow, registry=registry)
    before = graph_to_data(flow.graph)

    click_node(editor, "if-1")
    editor.form.config.children[0].inputs["branches"].value = '["true", "false"'
    editor.form.apply_button.click()

    assert "branches: not valid JSON" in editor.status_line.text
    assert graph_to_data(flow.graph) == before


def test_changing_the_kind_shows_that_kinds_fields_and_drops_the_activity(
    three_steps: wf.Workflow, registry: wf.ActivityRegistry
) -> None:
    editor = Editor(three_steps, registry=registry)
    click_node(editor, "b")
    editor.form.kind.value = "wait"
    inputs = editor.form.config.children[0].inputs
    assert list(inputs) == ["signal", "correlate", "bind", "timeout", "payload"]
    assert editor.form.activity.value == ""
    inputs["signal"].value = "paid"
    inputs["bind"].value = '{"amount": "paid_amount"}'
    inputs["timeout"].value = "3d"
    editor.form.apply_button.click()

    assert three_steps.graph.nodes["b"] == {
        "kind": "wait",
        "config": {"signal": "paid", "bind": {"amount": "paid_amount"}, "timeout": "3d"},
    }
    assert editor.problems == []


def test_delete_removes_the_selected_edge_then_the_selected_node(
    three_steps: wf.Workflow, registry: wf.ActivityRegistry
) -> None:
    editor = Editor(three_steps, registry=registry)
    G = three_steps.graph

    editor.delete_button.click()
    assert editor.status_line.kind == "error"
    assert "Select a node or an edge" in editor.status_line.text

    click_edge(editor, "a", "next", "b")
    editor.delete_button.click()
    assert list(G.edges(keys=True)) == [("start", "a", "next")]
    assert list(G.nodes) == ["start", "a", "b"]
    assert ("b", "unreachable") in codes(editor)

    click_node(editor, "a")
    editor.delete_button.click()
    assert list(G.nodes) == ["start", "b"]
    assert list(G.edges) == []
    assert editor.surface.selected == ""
    assert editor.form.node_id is None


def test_undo_and_redo_restore_the_exact_graph_data_in_the_same_graph(
    three_steps: wf.Workflow, registry: wf.ActivityRegistry
) -> None:
    editor = Editor(three_steps, registry=registry)
    G = three_steps.graph
    snapshots = [graph_to_data(G)]
    add(editor, "end", "finish")
    snapshots.append(graph_to_data(G))
    editor.connect("b", "next", "finish")
    snapshots.append(graph_to_data(G))
    click_node(editor, "a")
    editor.form.label.value = "Charge the card"
    editor.form.policy.inputs["max_attempts"].value = 7
    editor.form.apply_button.click()
    snapshots.append(graph_to_data(G))
    click_edge(editor, "start", "next", "a")
    editor.delete_button.click()
    snapshots.append(graph_to_data(G))

    for expected in reversed(snapshots[:-1]):
        editor.undo_button.click()
        assert graph_to_data(G) == expected
    assert editor.undo_button.disabled
    editor.undo()
    assert editor.status_line.text == "Nothing to undo."
    for expected in snapshots[1:]:
        editor.redo_button.click()
        assert graph_to_data(G) == expected
    assert editor.graph is G and editor.redo_button.disabled

    editor.undo_button.click()
    add(editor, "end", "other")  # a new change forgets what was undone
    assert editor.redo_button.disabled


def test_selection_and_status_never_redraw_but_an_edit_does(
    three_steps: wf.Workflow, registry: wf.ActivityRegistry
) -> None:
    editor = Editor(three_steps, registry=registry)
    pictures = svg_changes(editor)

    click_node(editor, "a")
    assert editor.form.activity.value == "a"
    assert editor.connect_source.value == "a"
    assert editor.status_line.text.startswith("Selected action node 'a'")
    click_edge(editor, "a", "next", "b")
    assert editor.form.node_id is None
    click_node(editor, "b")
    editor.surface.status = {"a": "succeeded", "b": "running"}
    editor.refresh()
    assert pictures == []

    add(editor, "end")
    assert len(pictures) == 1
    assert list(node_classes(pictures[0])) == ["start", "a", "b", "end"]


def test_connect_refuses_an_outlet_in_use_and_a_node_without_outlets(
    three_steps: wf.Workflow, registry: wf.ActivityRegistry
) -> None:
    editor = Editor(three_steps, registry=registry)
    add(editor, "end")
    before = graph_to_data(three_steps.graph)

    assert not editor.connect("a", "next", "end")
    assert "outlet 'next' of 'a' already leads to 'b'" in editor.status_line.text
    assert not editor.connect("a", "approved", "end")
    assert "no outlet 'approved' (it declares: next, failed, fallback)" in (editor.status_line.text)
    drag(editor, "end", "a")
    assert "has no outlets" in editor.status_line.text
    drag(editor, "start", "end")
    assert "every outlet of 'start' (next) is already connected" in editor.status_line.text
    assert graph_to_data(three_steps.graph) == before

    editor.connect_source.value = "a"
    assert list(editor.connect_outlet.options) == ["next", "failed", "fallback"]
    assert editor.connect_outlet.value == "failed"  # the first free one
    editor.connect_target.value = "end"
    editor.connect_button.click()
    assert three_steps.graph.has_edge("a", "end", key="failed")


def test_added_nodes_get_readable_unique_ids_and_a_taken_id_is_refused(
    registry: wf.ActivityRegistry,
) -> None:
    editor = Editor(nx.MultiDiGraph(), registry=registry)
    assert [add(editor, k) for k in ("delay", "delay", "decision", "end", "end")] == [
        "delay-1",
        "delay-2",
        "if-1",
        "end",
        "end-2",
    ]
    assert add(editor, "approval", "review") == "review"

    add(editor, "wait", "review")

    assert editor.status_line.kind == "error"
    assert "a node called 'review' already exists" in editor.status_line.text
    assert editor.graph.nodes["review"] == {"kind": "approval"}


def test_export_writes_an_svg_with_the_node_ids_and_a_png(
    three_steps: wf.Workflow, registry: wf.ActivityRegistry, tmp_path: Path
) -> None:
    editor = Editor(three_steps, registry=registry)
    editor.export_path.value = str(tmp_path / "pictures" / "three.svg")

    editor.export_svg_button.click()
    editor.export_png_button.click()

    svg = (tmp_path / "pictures" / "three.svg").read_text(encoding="utf-8")
    assert list(node_classes(svg)) == ["start", "a", "b"]
    assert "three v1" in svg
    png = (tmp_path / "pictures" / "three.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert editor.status_line.text.startswith(f"Wrote {tmp_path / 'pictures' / 'three.png'}")


class Recorder:
    def __init__(self) -> None:
        self.registry = wf.ActivityRegistry()
        self.calls: list[str] = []
        for name in ("a", "b", "c"):
            self.registry.register(name, self._recording(name))

    def _recording(self, name: str) -> Any:
        def run(ctx: Any) -> None:
            self.calls.append(name)

        return run


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def engine(tmp_path: Path, recorder: Recorder) -> Iterator[wf.Engine]:
    engine = wf.Engine(tmp_path / "editor.duckdb", registry=recorder.registry)
    yield engine
    engine.close()


def test_register_as_the_next_version_with_a_real_engine(
    engine: wf.Engine, recorder: Recorder
) -> None:
    flow = wf.Workflow("ship", 1).start_with("a").then("b")
    engine.register(flow.copy())
    editor = Editor(flow, engine=engine)
    assert editor.register_button.description == "Register as version 2"
    assert editor.register_button.disabled  # nothing changed since v1

    click_node(editor, "b")
    editor.form.activity.value = "c"
    editor.form.apply_button.click()
    assert not editor.register_button.disabled
    editor.register_button.click()

    assert engine.workflows() == {"ship": [1, 2]}
    assert editor.status_line.kind == "ok"
    assert editor.status_line.text.startswith("Registered 'ship' v2")
    assert flow.version == 2 and editor.workflow is flow
    assert editor.register_button.description == "Register as version 3"
    assert editor.register_button.disabled
    assert "ship v2" in editor.surface.svg
    run = engine.start("ship", {}, version=2)
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert recorder.calls == ["a", "c"]


def test_register_shows_why_an_invalid_graph_is_refused(engine: wf.Engine) -> None:
    flow = wf.Workflow("ship", 1).start_with("a")
    editor = Editor(flow, engine=engine)
    assert editor.register_button.description == "Register as version 1"
    click_node(editor, "a")
    editor.form.activity.value = "ghost"
    editor.form.apply_button.click()

    editor.register_button.click()

    assert engine.workflows() == {}
    assert editor.status_line.kind == "error"
    assert editor.status_line.text.startswith("Not registered:")
    assert "'ghost' is not registered" in editor.status_line.text
    assert flow.version == 1


# --- the node form shows what the kind takes ---------------------------------------------------

FIELDS = {  # kind -> (activity, compensation, config fields, policy fields) the form shows
    "start": (False, False, [], []),
    "action": (
        True,
        True,
        [],
        [
            "max_attempts",
            "attempt_timeout",
            "retry_delay",
            "backoff",
            "max_delay",
            "jitter",
            "max_visits",
            "on_failure",
        ],
    ),
    "decision": (
        True,
        False,
        ["expression", "branches"],
        [
            "max_attempts",
            "attempt_timeout",
            "retry_delay",
            "backoff",
            "max_delay",
            "jitter",
            "max_visits",
            "on_failure",
        ],
    ),
    "parallel": (False, False, ["branches"], ["max_visits", "on_failure"]),
    "join": (False, False, ["fork", "mode", "count"], ["max_visits", "on_failure"]),
    "for_each": (False, False, ["items", "max_parallelism"], ["max_visits", "on_failure"]),
    "delay": (False, False, ["duration"], ["max_visits", "on_failure"]),
    "wait": (
        False,
        False,
        ["signal", "correlate", "bind", "timeout", "payload"],
        ["max_visits", "on_failure"],
    ),
    "approval": (False, False, ["timeout", "assignees"], ["max_visits", "on_failure"]),
    "call": (
        False,
        False,
        ["workflow_id", "version", "input", "bind"],
        ["max_visits", "on_failure"],
    ),
    "end": (False, False, [], []),
}


def shown_fields(editor: Editor) -> tuple[bool, bool, list[str], list[str]]:
    form = editor.form
    config = list(form.config.children[0].inputs) if form.config.children else []
    policy = [n for n, box in form.policy.inputs.items() if box.layout.display != "none"]
    if form.policy_box.layout.display == "none":
        policy = []
    return (
        form.activity.layout.display != "none",
        form.compensation.layout.display != "none",
        config,
        policy,
    )


def test_every_kind_lists_exactly_its_fields_in_the_form(registry: wf.ActivityRegistry) -> None:
    assert set(FIELDS) == {k.value for k in wf.NodeKind}
    editor = Editor(nx.MultiDiGraph(), registry=registry)
    for kind, expected in FIELDS.items():
        add(editor, kind)
        assert shown_fields(editor) == expected, kind
    click_node(editor, "action-1")  # switching the kind in the form switches the fields too
    editor.form.kind.value = "approval"
    assert shown_fields(editor) == FIELDS["approval"]


def test_an_approval_shows_no_activity_unless_it_holds_one_and_then_it_can_be_cleared(
    registry: wf.ActivityRegistry,
) -> None:
    flow = wf.Workflow("review", 1).start_with().approval("review")
    flow.graph.nodes["review"]["activity"] = "a"  # written by hand: an approval takes none
    editor = Editor(flow, registry=registry)
    assert [(p.node, p.code) for p in editor.problems] == [("review", "bad-config")]
    assert editor.problems[0].message.startswith("a approval node takes no activity ('a')")

    click_node(editor, "review")
    assert editor.form.activity.layout.display != "none"  # shown, so it can be cleared
    assert editor.form.activity.value == "a"
    editor.form.activity.value = ""
    editor.form.apply_button.click()

    assert flow.graph.nodes["review"] == {"kind": "approval"}
    assert editor.problems == []
    click_node(editor, "start")
    click_node(editor, "review")
    assert shown_fields(editor) == FIELDS["approval"]


def test_policy_fields_the_kind_hides_are_kept_when_the_form_is_applied(
    registry: wf.ActivityRegistry,
) -> None:
    flow = wf.Workflow("loop", 1).start_with().wait_for_signal("paid", correlate="id")
    flow.graph.nodes["paid"]["policy"] = {"max_visits": 3, "backoff": 3.0}
    editor = Editor(flow, registry=registry)
    click_node(editor, "paid")
    # backoff means nothing to a wait, but the node holds one: it shows, with the wait's own
    assert shown_fields(editor)[3] == ["backoff", "max_visits", "on_failure"]
    editor.form.label.value = "Paid?"
    editor.form.apply_button.click()
    assert flow.graph.nodes["paid"]["policy"] == {"max_visits": 3, "backoff": 3.0}
    assert flow.graph.nodes["paid"]["label"] == "Paid?"


# --- problems in words -------------------------------------------------------------------------


def test_problems_read_as_words_without_pydantic_links(registry: wf.ActivityRegistry) -> None:
    editor = Editor(nx.MultiDiGraph(), registry=registry)
    add(editor, "start")
    add(editor, "delay")
    assert (
        "It still needs settings (duration: required — e.g. 90s, 7d or 1h30m)"
        in editor.status_line.text
    )
    [problem] = [p for p in editor.problems if p.code == "bad-config"]
    assert problem.message == (
        "config does not fit kind 'delay': duration: required — e.g. 90s, 7d or 1h30m; "
        "fix the node's attributes"
    )
    add(editor, "join")
    inputs = editor.form.config.children[0].inputs
    inputs["mode"].value = "at_least"
    editor.form.policy.inputs["max_visits"].value = 0
    editor.form.apply_button.click()
    assert editor.form.error_lines == [
        "mode 'at_least' needs a count, e.g. wf.at_least(2)",
        "policy.max_visits: must be at least 1 (got 0)",
    ]
    inputs["count"].value = "two"
    editor.form.policy.inputs["max_visits"].value = 1
    editor.form.apply_button.click()
    assert editor.form.error_lines == ["count: 'two' is not a number; type one or leave it blank"]
    for text in (editor.problems_view.value, editor.form.error.value, editor.status_line.text):
        for raw in ("errors.pydantic.dev", "[type=", "validation error for", "Field required"):
            assert raw not in text


# --- the canvas: palette drops, outlet drags, keys ----------------------------------------------


def send(editor: Editor, message: Any) -> None:
    """A custom message from the page, as the surface receives it."""
    editor.surface._on_front_end_message(editor.surface, message, [])


def test_the_surface_offers_every_kind_and_each_nodes_outlets(
    registry: wf.ActivityRegistry,
) -> None:
    flow = (
        wf.Workflow("fork", 1).start_with().parallel(lambda b: b.then("a"), lambda b: b.then("b"))
    )
    editor = Editor(flow, registry=registry)
    assert editor.surface.palette == [k.value for k in wf.NodeKind]
    assert editor.surface.outlets == {
        "start": ["next"],
        "parallel-1": ["branch-1", "branch-2"],
        "a": ["next", "failed", "fallback"],
        "b": ["next", "failed", "fallback"],
        "join-1": ["completed", "partial"],
    }
    add(editor, "decision")
    assert editor.surface.outlets["if-1"] == ["true", "false"]
    editor.form.config.children[0].inputs["branches"].value = "small, large"
    editor.form.config.children[0].inputs["expression"].value = "'small'"
    editor.form.apply_button.click()
    assert editor.surface.outlets["if-1"] == ["small", "large"]


def test_a_chip_dropped_on_the_background_adds_and_selects_a_node_undoably(
    three_steps: wf.Workflow, registry: wf.ActivityRegistry
) -> None:
    editor = Editor(three_steps, registry=registry)
    before = graph_to_data(three_steps.graph)

    send(editor, {"type": "drop", "kind": "approval"})

    assert three_steps.graph.nodes["approval-1"] == {"kind": "approval"}
    assert editor.surface.selected == "approval-1"
    assert editor.form.node_id == "approval-1"
    assert editor.status_line.text.startswith("Added approval node 'approval-1'.")
    send(editor, {"type": "key", "action": "undo"})
    assert graph_to_data(three_steps.graph) == before
    assert editor.surface.selected == ""


def test_a_chip_dropped_on_a_node_follows_it_through_its_first_free_outlet(
    three_steps: wf.Workflow, registry: wf.ActivityRegistry
) -> None:
    editor = Editor(three_steps, registry=registry)
    send(editor, {"type": "drop", "kind": "end", "after": "b"})

    assert three_steps.graph.has_edge("b", "end", key="next")
    assert editor.surface.selected == "end"
    assert editor.status_line.text == "Added end node 'end'. Connected 'b' -[next]-> 'end'."
    send(editor, {"type": "drop", "kind": "end", "after": "b"})  # next is taken: failed is free
    assert three_steps.graph.has_edge("b", "end-2", key="failed")


def test_a_chip_dropped_on_a_node_whose_outlets_are_taken_is_inserted_after_it(
    three_steps: wf.Workflow, registry: wf.ActivityRegistry
) -> None:
    editor = Editor(three_steps, registry=registry)
    send(editor, {"type": "drop", "kind": "delay", "after": "start"})

    assert sorted(three_steps.graph.edges(keys=True)) == [
        ("a", "b", "next"),
        ("delay-1", "a", "next"),
        ("start", "delay-1", "next"),
    ]
    assert "Inserted it on 'start' -[next]-> 'a'" in editor.status_line.text
    send(editor, {"type": "key", "action": "undo"})
    assert sorted(three_steps.graph.edges(keys=True)) == [
        ("a", "b", "next"),
        ("start", "a", "next"),
    ]


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ({"type": "drop", "kind": "teleport"}, "'teleport' is not a node kind; add one of start"),
        ({"type": "drop", "kind": "end", "after": "ghost"}, "there is no node 'ghost' to add"),
        ({"type": "drop", "kind": "end", "after": "end"}, "node 'end' has no outlets"),
        (
            {"type": "drop", "kind": "parallel", "after": "start"},
            "every outlet of 'start' (next) is connected and a parallel node has no outlet",
        ),
    ],
)
def test_a_drop_that_cannot_be_made_changes_nothing_and_says_why(
    registry: wf.ActivityRegistry, message: dict[str, Any], says: str
) -> None:
    flow = wf.Workflow("short", 1).start_with("a").end()
    editor = Editor(flow, registry=registry)
    before = graph_to_data(flow.graph)

    send(editor, message)

    assert editor.status_line.kind == "error"
    assert says in editor.status_line.text
    assert graph_to_data(flow.graph) == before
    assert editor.history.undo_stack == []


def test_a_drag_from_an_outlet_connects_that_outlet_or_says_why_not(
    three_steps: wf.Workflow, registry: wf.ActivityRegistry
) -> None:
    editor = Editor(three_steps, registry=registry)
    add(editor, "end")
    G = three_steps.graph
    before = graph_to_data(G)

    send(editor, {"type": "connect", "source": "a", "target": "end", "outlet": "fallback"})
    assert G.has_edge("a", "end", key="fallback")
    assert editor.status_line.text == "Connected 'a' -[fallback]-> 'end'."

    send(editor, {"type": "connect", "source": "a", "target": "end", "outlet": "next"})
    assert editor.status_line.kind == "error"
    assert "outlet 'next' of 'a' already leads to 'b'" in editor.status_line.text
    send(editor, {"type": "connect", "source": "a", "target": "end", "outlet": "approved"})
    assert "a action node has no outlet 'approved'" in editor.status_line.text
    assert not G.has_edge("a", "end", key="next")

    send(editor, {"type": "key", "action": "undo"})
    assert graph_to_data(G) == before
    send(editor, {"type": "key", "action": "redo"})
    assert G.has_edge("a", "end", key="fallback")


def test_delete_undo_and_redo_keys_act_on_the_selection(
    three_steps: wf.Workflow, registry: wf.ActivityRegistry
) -> None:
    editor = Editor(three_steps, registry=registry)
    G = three_steps.graph

    send(editor, {"type": "key", "action": "delete"})
    assert editor.status_line.kind == "error"
    assert "Select a node or an edge on the graph" in editor.status_line.text

    click_node(editor, "b")
    send(editor, {"type": "key", "action": "delete"})
    assert list(G.nodes) == ["start", "a"]
    click_edge(editor, "start", "next", "a")
    send(editor, {"type": "key", "action": "delete"})
    assert list(G.edges) == []
    send(editor, {"type": "key", "action": "undo"})
    send(editor, {"type": "key", "action": "undo"})
    assert list(G.edges(keys=True)) == [("start", "a", "next"), ("a", "b", "next")]
    send(editor, {"type": "key", "action": "redo"})
    assert list(G.nodes) == ["start", "a"]
    send(editor, {"type": "key", "action": "redo"})
    send(editor, {"type": "key", "action": "redo"})
    assert editor.status_line.text == "Nothing to redo."


@pytest.mark.parametrize(
    "message",
    [
        {"type": "key", "action": "explode"},
        {"type": "key"},
        {"type": "drop"},
        {"type": "drop", "kind": "end", "after": 3},
        {"type": "connect", "source": "a", "target": "b", "outlet": 7},
    ],
)
def test_malformed_canvas_messages_are_logged_and_change_nothing(
    three_steps: wf.Workflow,
    registry: wf.ActivityRegistry,
    message: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    editor = Editor(three_steps, registry=registry)
    before = graph_to_data(three_steps.graph)
    with caplog.at_level(logging.WARNING, logger="wfkit.widgets.surface"):
        send(editor, message)
    assert "GraphSurface ignored" in caplog.text
    assert graph_to_data(three_steps.graph) == before


# --- the Run panel -----------------------------------------------------------------------------


class Size(enum.Enum):
    SMALL = "small"
    LARGE = "large"


class Address(BaseModel):
    city: str
    zip: str = ""


class Order(BaseModel):
    customer: str = Field(..., description="customer id")
    amount: float
    lines: int = 1
    express: bool = False
    size: Size = Size.SMALL
    channel: Literal["web", "shop"]
    note: str | None = None
    address: Address = Field(default_factory=lambda: Address(city="Lyon"))
    tags: list[str] = Field(default_factory=list)


def test_the_run_form_follows_the_data_model_with_defaults_and_required_fields() -> None:
    form = DataForm(Order)
    kinds = {name: type(box).__name__ for name, box in form.inputs.items()}
    assert kinds == {
        "customer": "Text",
        "amount": "Text",  # required: a number box would start at a made-up 0
        "lines": "IntText",
        "express": "Checkbox",
        "size": "Dropdown",
        "channel": "Dropdown",
        "note": "Text",
        "address": "Textarea",
        "tags": "Textarea",
    }
    labels = {name: box.description for name, box in form.inputs.items()}
    assert [n for n, label in labels.items() if label.endswith(" *")] == [
        "customer",
        "amount",
        "channel",
    ]
    values = {name: box.value for name, box in form.inputs.items()}
    assert values == {
        "customer": "",
        "amount": "",
        "lines": 1,
        "express": False,
        "size": "small",
        "channel": None,
        "note": "",
        "address": '{"city": "Lyon", "zip": ""}',
        "tags": "[]",
    }
    assert form.inputs["size"].label == "small"
    assert [label for label, _ in form.inputs["size"].options] == ["small", "large"]
    assert [value for _, value in form.inputs["channel"].options] == ["web", "shop"]
    assert form.inputs["customer"].tooltip == "customer id"

    with pytest.raises(FormError):
        form.read()
    assert form.error_lines == [
        "customer: required — customer id",
        "amount: required",
        "channel: required",
    ]
    form.inputs["customer"].value = "c-7"
    form.inputs["amount"].value = "12,5"
    form.inputs["address"].value = '{"city": "Lyon",}'
    with pytest.raises(FormError):
        form.read()
    assert form.error_lines[0] == "amount: '12,5' is not a number; type one like 12.5"
    assert form.error_lines[1].startswith("address: not valid JSON (")
    form.inputs["amount"].value = "12.5"
    form.inputs["address"].value = '{"zip": "69001"}'
    form.inputs["channel"].value = "web"
    with pytest.raises(FormError):
        form.read()
    assert form.error_lines == ["address.city: required"]
    form.inputs["address"].value = '{"city": "Lyon", "zip": "69001"}'
    form.inputs["size"].value = "large"
    form.inputs["tags"].value = '["gift"]'

    assert form.read() == {
        "customer": "c-7",
        "amount": 12.5,
        "lines": 1,
        "express": False,
        "size": "large",
        "channel": "web",
        "note": None,
        "address": {"city": "Lyon", "zip": "69001"},
        "tags": ["gift"],
    }
    assert form.error_lines == [] and form.error.value == ""


def test_a_workflow_without_a_model_gets_a_json_object_box() -> None:
    form = DataForm(None)
    assert form.inputs == {} and form.json.value == "{}"
    form.json.value = "[1, 2]"
    with pytest.raises(FormError, match="a run's data is a JSON object"):
        form.read()
    form.json.value = '{"order": "o-1"'
    with pytest.raises(FormError, match="data: not valid JSON"):
        form.read()
    form.json.value = '{"order": "o-1"}'
    assert form.read() == {"order": "o-1"}


def test_without_an_engine_run_is_disabled_and_says_why(registry: wf.ActivityRegistry) -> None:
    editor = Editor(wf.Workflow("x", 1).start_with("a"), registry=registry)
    assert editor.run_button.disabled
    assert editor.run_button.tooltip == (
        "No engine: create the editor with Editor(flow, engine=engine) to run the workflow."
    )
    assert editor.start_run() is None
    assert editor.run_panel.status.text.startswith("No engine")


@pytest.fixture
def ordered(recorder: Recorder) -> wf.Workflow:
    def charge(ctx: Any) -> None:
        recorder.calls.append(f"charge {ctx.data.amount}")

    recorder.registry.register("charge", charge)
    return wf.Workflow("order", 1, data=Order).start_with("charge").then("a")


def fill(editor: Editor, **values: Any) -> None:
    for name, value in values.items():
        editor.run_panel.form.inputs[name].value = value


def test_run_registers_the_edited_graph_starts_a_run_and_monitors_it(
    engine: wf.Engine, recorder: Recorder, ordered: wf.Workflow
) -> None:
    engine.register(ordered.copy())
    editor = Editor(ordered, engine=engine)
    assert not editor.run_button.disabled
    editor.run_button.click()
    assert editor.run_panel.is_open
    fill(editor, customer="c-1", amount="40", channel="shop")

    editor.run_panel.start_button.click()  # the graph equals v1: v1 runs, nothing registered

    first = editor.run_panel.run
    assert first is not None and first.workflow.version == 1
    assert engine.workflows() == {"order": [1]}
    assert first.status == wf.RunStatus.COMPLETED
    assert recorder.calls == ["charge 40.0", "a"]
    assert (first.data.customer, first.data.channel, first.data.size) == ("c-1", "shop", Size.SMALL)
    monitor = editor.run_panel.monitor
    assert monitor is not None and monitor.run.id == first.id
    assert editor.run_panel.monitor_box.children == (monitor,)
    assert editor.run_panel.status.text.startswith(f"Started run {first.id} of 'order' v1")

    click_node(editor, "a")
    editor.form.activity.value = "b"
    editor.form.apply_button.click()
    second = editor.start_run()  # changed: registered as v2 first, then run

    assert second is not None and second.workflow.version == 2
    assert engine.workflows() == {"order": [1, 2]}
    assert ordered.version == 2
    assert recorder.calls[-2:] == ["charge 40.0", "b"]
    assert editor.run_panel.monitor is not None and editor.run_panel.monitor.run.id == second.id
    assert not monitor.running or monitor.live._stop.is_set()
    assert [r.run_id for r in engine.runs()] == [second.id, first.id]
    editor.close()


def test_run_refuses_bad_data_an_invalid_graph_and_a_policy_and_starts_nothing(
    engine: wf.Engine, recorder: Recorder, ordered: wf.Workflow
) -> None:
    editor = Editor(ordered, engine=engine)
    editor.run_button.click()

    assert editor.start_run() is None  # required fields left blank
    assert editor.run_panel.form.error_lines == [
        "customer: required — customer id",
        "amount: required",
        "channel: required",
    ]
    assert editor.run_panel.status.text.startswith("Not started: customer: required")
    assert engine.workflows() == {}

    fill(editor, customer="c-1", amount="5", channel="web")
    click_node(editor, "a")
    editor.form.activity.value = "ghost"
    editor.form.apply_button.click()
    assert editor.start_run() is None
    assert "could not be registered (Not registered:" in editor.run_panel.status.text
    assert "'ghost' is not registered" in editor.run_panel.status.text
    assert engine.workflows() == {}

    editor.form.activity.value = "a"
    editor.form.apply_button.click()
    engine.add_admission_policy(
        lambda flow, data, actor: ["orders over 1 are closed today"] if data["amount"] > 1 else []
    )
    assert editor.start_run() is None
    assert editor.run_panel.form.error_lines == ["orders over 1 are closed today"]
    assert editor.run_panel.status.kind == "error"
    assert "refused the run, nothing was written" in editor.run_panel.status.text
    assert engine.workflows() == {"order": [1]}  # the graph was fine: it is registered
    assert engine.runs() == [] and recorder.calls == []

    fill(editor, amount="1")
    run = editor.start_run()
    assert run is not None and run.status == wf.RunStatus.COMPLETED
    assert editor.run_panel.form.error_lines == []
    editor.close()


def test_run_without_driving_leaves_the_run_to_the_workers(
    engine: wf.Engine, recorder: Recorder
) -> None:
    flow = wf.Workflow("plain", 1).start_with("a")
    editor = Editor(flow, engine=engine)
    editor.run_button.click()
    assert isinstance(editor.run_panel.form, DataForm) and editor.run_panel.form.model is None
    editor.run_panel.form.json.value = '{"order": "o-9"}'
    editor.run_panel.drive.value = False

    run = editor.start_run()

    assert run is not None and run.data == {"order": "o-9"}
    assert recorder.calls == []  # nothing ran it yet
    assert "it advances as the engine's workers take its steps" in editor.run_panel.status.text
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED and recorder.calls == ["a"]
    editor.close()


def test_a_wide_graph_claims_the_row_so_the_form_wraps_below_it(
    registry: wf.ActivityRegistry,
) -> None:
    narrow = Editor(wf.Workflow("one", 1).start_with("a"), registry=registry)
    flow = wf.Workflow("long", 1).start_with("a")
    for step in range(12):
        flow = flow.then("b", id=f"b-{step}")
    wide = Editor(flow, registry=registry)

    assert narrow.surface.layout.flex == "1 1 360px"  # beside the form from 360 px + 18 em
    basis = int(wide.surface.layout.flex.split()[-1].removesuffix("px"))
    assert 1200 < basis <= 1600  # wider than JupyterLab's notebook column: the form wraps
    add(wide, "end")
    assert wide.surface.layout.flex != f"1 1 {basis}px"  # redrawn: measured again
