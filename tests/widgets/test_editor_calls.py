"""Call nodes in the graph editor: the kind in the add menu, its form, live checks against the
engine's workflows, and opening the called workflow's definition."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import wfkit as wf
from wfkit.widgets import Editor


def click_node(editor: Editor, node: str) -> None:
    editor.surface.selected_edge = []
    editor.surface.selected = node


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[wf.Engine]:
    registry = wf.ActivityRegistry()
    registry.register("pay.charge", lambda ctx: None)
    registry.register("shop.reserve", lambda ctx: None)
    engine = wf.Engine(tmp_path / "runs.duckdb", registry=registry, clock=wf.ManualClock())
    yield engine
    engine.close()


def test_a_call_node_is_added_from_the_menu_and_configured_in_its_form(engine) -> None:
    flow = wf.Workflow("shop", 1).start_with("shop.reserve")
    editor = Editor(flow, engine)
    assert "call" in editor.add_kind.options

    editor.add_kind.value = "call"
    editor.add_button.click()

    assert editor.surface.selected == "call-1"
    assert "It still needs settings" in editor.status_line.text
    inputs = editor.form.config.children[0].inputs
    assert list(inputs) == ["workflow_id", "version", "input", "bind"]
    inputs["workflow_id"].value = "payment"
    inputs["input"].value = '{"amount": "total"}'
    inputs["bind"].value = '{"receipt": "receipt"}'
    editor.form.apply_button.click()

    assert flow.graph.nodes["call-1"] == {
        "kind": "call",
        "config": {
            "workflow_id": "payment",
            "input": {"amount": "total"},
            "bind": {"receipt": "receipt"},
        },
    }
    # checked live against the engine: 'payment' is not registered yet
    assert ("call-1", "unknown-workflow") in [(p.node, p.code) for p in editor.problems]
    engine.register(wf.Workflow("payment", 1).start_with("pay.charge"))
    editor.refresh()
    assert "unknown-workflow" not in [p.code for p in editor.problems]


def test_open_called_workflow_opens_a_copy_of_the_registered_definition(engine) -> None:
    payment = engine.register(wf.Workflow("payment", 1).start_with("pay.charge"))
    engine.register(payment.copy(version=2))
    flow = (
        wf.Workflow("shop", 1)
        .start_with("shop.reserve")
        .call("payment", version=1, id="pay")
        .call("payment", id="pay-latest")
    )
    editor = Editor(flow, engine)
    assert editor.open_child_button.layout.display == "none"  # nothing selected

    click_node(editor, "shop.reserve")
    assert editor.open_child_button.layout.display == "none"  # not a call
    click_node(editor, "pay")
    assert editor.open_child_button.layout.display is None
    editor.open_child_button.click()

    child = editor.child
    assert child is not None and (child.workflow.id, child.workflow.version) == ("payment", 1)
    assert list(editor.child_box.children)[1] is child
    assert "Opened 'payment' v1 below" in editor.status_line.text
    child.graph.add_node("extra", kind="end")  # edits the copy, not the engine's definition
    assert "extra" not in engine.definition("payment", 1).graph

    click_node(editor, "pay-latest")
    opened = editor.open_child()
    assert opened is not None and opened.workflow.version == 2


def test_open_called_workflow_says_why_it_cannot(engine, tmp_path: Path) -> None:
    flow = wf.Workflow("shop", 1).start_with().call("billing")
    editor = Editor(flow, engine)
    click_node(editor, "call-billing")
    assert editor.open_child() is None
    assert "Cannot open the called workflow: no workflow 'billing' is registered" in (
        editor.status_line.text
    )
    without_engine = Editor(wf.Workflow("shop", 1).start_with().call("billing"))
    click_node(without_engine, "call-billing")
    assert without_engine.open_child_button.layout.display == "none"
    assert without_engine.open_child() is None
    assert "with an engine given to the editor" in without_engine.status_line.text


def test_the_inbox_does_not_offer_a_call_waiting_for_its_child(engine) -> None:
    from wfkit.widgets import Inbox

    payment = wf.Workflow("payment", 1).start_with().wait_for_signal("settled", correlate="ref")
    engine.register(payment)
    engine.register(wf.Workflow("shop", 1).start_with().call("payment"))
    run = engine.start("shop", {"ref": "p-1"})
    engine.run_until_idle()

    assert sorted(w.kind for w in engine.waiting()) == ["call", "signal"]
    inbox = Inbox(engine, actor="ana")
    assert inbox.summary.value == "1 open: 0 approvals, 1 signal wait"
    (child,) = run.children()
    assert [key[0] for key in inbox.rows] == [child.id]
    inbox.close()  # stops its update thread


def test_the_timeline_draws_the_time_a_call_waited_for_its_child(engine) -> None:
    from wfkit.widgets.timeline import spans_of

    engine.register(wf.Workflow("payment", 1).start_with().wait_for_signal("settled"))
    engine.register(wf.Workflow("shop", 1).start_with().call("payment"))
    run = engine.start("shop", {})
    engine.run_until_idle()
    engine.clock.advance("2h")  # type: ignore[attr-defined]
    assert engine.signal("settled") is True
    engine.run_until_idle()

    spans = spans_of(run.history(), engine.clock.now())
    (span,) = [s for s in spans if s.node_id == "call-payment"]
    assert (span.kind, span.outcome, span.seconds) == ("wait", "waited", 7200.0)
