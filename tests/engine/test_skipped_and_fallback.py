"""What a run reports: nodes an ended run never reached are ``skipped``; and an output its node
cannot use (an unstorable return value, a decision naming no branch) leaves through a connected
``fallback`` (docs/semantics.md §17.2, §17.4)."""

from __future__ import annotations

from typing import Any

import pytest

import wfkit as wf
from tests.engine.helpers import events, run_to_idle

from .conftest import Activities, OpenEngine


def start_node(flow: wf.Workflow) -> str:
    return next(n for n, a in flow.graph.nodes(data=True) if a["kind"] == "start")


def branching() -> wf.Workflow:
    return (
        wf.Workflow("w")
        .start_with("a")
        .if_("x > 1", then=lambda b: b.then("big"), otherwise=lambda b: b.then("small"), id="if")
        .then("done")
    )


# --- skipped ----------------------------------------------------------------------------------


def test_a_completed_run_reports_the_nodes_it_never_reached_as_skipped(engine, acts) -> None:
    acts.noop("a", "big", "small", "done")
    flow = branching()
    run = run_to_idle(engine, flow, {"x": 5})

    assert run.status == wf.RunStatus.COMPLETED
    assert run.node_statuses() == {
        "a": "succeeded",
        "if": "succeeded",
        "big": "succeeded",
        "small": "skipped",
        "done": "succeeded",
    }
    assert start_node(flow) not in run.node_statuses()  # reached, nothing to report


def test_a_run_in_flight_leaves_nodes_not_reached_out_and_cancelling_skips_them(
    engine, acts
) -> None:
    acts.noop("a", "after")
    run = run_to_idle(engine, wf.Workflow("w").start_with("a").approval("review").then("after"))

    assert run.node_statuses() == {"a": "succeeded", "review": "waiting"}
    engine.cancel(run.id, actor="ops")
    # the approval was reached (it waited): not skipped; the step after it never was
    assert run.node_statuses() == {"a": "succeeded", "after": "skipped"}


def test_a_failed_run_skips_the_steps_after_the_failure(engine, acts) -> None:
    def broken(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("no stock")

    acts.noop("a", "ship")
    acts.add("reserve", broken)
    run = run_to_idle(
        engine,
        wf.Workflow("w").start_with("a").then("reserve", max_attempts=1).then("ship").end(id="e"),
    )

    assert run.status == wf.RunStatus.FAILED
    assert run.node_statuses() == {
        "a": "succeeded",
        "reserve": "failed",
        "ship": "skipped",
        "e": "skipped",
    }


def test_skipped_nodes_are_the_same_after_a_restart(open_engine: OpenEngine, acts) -> None:
    acts.noop("a", "big", "small", "done")
    first = open_engine()
    first.register(branching())
    run_id = first.start("w", {"x": 0}).id
    first.run_until_idle()
    before = first.run(run_id).node_statuses()
    first.close()

    second = open_engine()
    assert second.run(run_id).node_statuses() == before
    assert before["big"] == "skipped" and before["small"] == "succeeded"


def test_an_end_node_reached_is_not_skipped(engine, acts) -> None:
    acts.noop("a")
    run = run_to_idle(engine, wf.Workflow("w").start_with("a").end(id="finish"))

    assert run.node_statuses() == {"a": "succeeded"}


def test_a_for_each_body_never_run_on_an_empty_list_is_skipped(engine, acts) -> None:
    acts.noop("line")
    run = run_to_idle(
        engine,
        wf.Workflow("w").start_with().for_each("items", lambda b: b.then("line")),
        {"items": []},
    )

    statuses = run.node_statuses()
    assert run.status == wf.RunStatus.COMPLETED
    assert statuses["line"] == "skipped"
    assert "skipped" not in {s for n, s in statuses.items() if n != "line"}


# --- fallback for an output the node cannot use ----------------------------------------------


def unstorable(ctx: wf.ActivityContext[Any]) -> Any:
    ctx.data["touched"] = True
    return {"tags": {1, 2}}  # a set is not JSON


def test_an_unstorable_output_leaves_through_a_connected_fallback_without_retries(
    engine, acts: Activities
) -> None:
    acts.add("quote", unstorable)
    acts.noop("cached", "finish")
    run = run_to_idle(
        engine,
        wf.Workflow("w")
        .start_with("quote", max_attempts=3, retry_delay="0s")
        .on_fallback(lambda b: b.then("cached"))
        .then("finish"),
        {},
    )

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["quote", "cached", "finish"]
    (failed,) = events(run, "step.failed")
    assert failed.detail == {"outlet": "fallback"}
    assert "returned a value that is not JSON or cannot be stored" in (failed.error or "")
    assert "quote" not in run.outputs
    assert run.data == {}, "the attempt's data changes are not applied"
    assert run.node_statuses()["cached"] == "succeeded"


def test_without_a_fallback_an_unstorable_output_is_a_failed_attempt_as_before(
    engine, acts: Activities
) -> None:
    acts.add("quote", unstorable)
    run = run_to_idle(
        engine, wf.Workflow("w").start_with("quote", max_attempts=2, retry_delay="0s"), {}
    )

    assert run.status == wf.RunStatus.FAILED
    assert acts.names() == ["quote", "quote"]
    assert all(e.detail.get("outlet") is None for e in events(run, "step.failed"))
    assert "return a dict of plain values" in (run.view().error or "")


def test_raising_fallback_records_the_outlet_it_left_through(engine, acts: Activities) -> None:
    def closed(ctx: wf.ActivityContext[Any]) -> None:
        raise wf.Fallback("closed")

    acts.add("quote", closed)
    acts.noop("cached")
    run = run_to_idle(
        engine, wf.Workflow("w").start_with("quote").on_fallback(lambda b: b.then("cached"))
    )

    assert run.status == wf.RunStatus.COMPLETED
    assert [e.detail for e in events(run, "step.failed")] == [{"outlet": "fallback"}]


def deciding(returned: Any, *, fallback: bool = True, last: bool = False) -> tuple[Any, Any]:
    def pick(ctx: wf.ActivityContext[Any]) -> Any:
        ctx.data["picked"] = True
        return returned

    branches: dict[str, Any] = {"left": lambda b: b.then("left"), "right": None}
    if fallback:
        branches["fallback"] = None if last else (lambda b: b.then("manual"))
    flow = wf.Workflow("w").start_with().decide("pick", branches, id="pick")
    if not last:
        flow = flow.then("done")
    return flow, pick


@pytest.mark.parametrize("returned", ["purple", 42, None])
def test_a_decision_naming_no_branch_leaves_through_its_fallback_branch(
    engine, acts: Activities, returned: Any
) -> None:
    flow, pick = deciding(returned)
    acts.add("pick", pick)
    acts.noop("left", "manual", "done")
    run = run_to_idle(engine, flow, {})

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["pick", "manual", "done"]
    (failed,) = events(run, "step.failed")
    assert failed.detail == {"outlet": "fallback"}
    assert f"gave {returned!r}, which names none of its outlets" in (failed.error or "")
    assert run.data == {"picked": True}
    assert events(run, "decision.taken") == []
    statuses = run.node_statuses()
    assert statuses["left"] == "skipped" and statuses["manual"] == "succeeded"


def test_a_decision_returning_an_unstorable_value_leaves_through_its_fallback_branch(
    engine, acts: Activities
) -> None:
    flow, pick = deciding({"left"})
    acts.add("pick", pick)
    acts.noop("left", "manual", "done")
    run = run_to_idle(engine, flow, {})

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["pick", "manual", "done"]
    assert "not JSON" in (events(run, "step.failed")[0].error or "")


def test_a_decision_naming_a_declared_branch_still_takes_it(engine, acts: Activities) -> None:
    flow, pick = deciding("left")
    acts.add("pick", pick)
    acts.noop("left", "manual", "done")
    run = run_to_idle(engine, flow, {})

    assert acts.names() == ["pick", "left", "done"]
    assert [e.detail for e in events(run, "decision.taken")] == [{"outlet": "left"}]


@pytest.mark.parametrize("declared", [False, True], ids=["no-fallback", "fallback-unconnected"])
def test_without_a_connected_fallback_an_unknown_branch_fails_the_step_as_before(
    engine, acts: Activities, declared: bool
) -> None:
    flow, pick = deciding("purple", fallback=declared, last=True)
    acts.add("pick", pick)
    acts.noop("left")
    run = run_to_idle(engine, flow, {})

    assert run.status == wf.RunStatus.FAILED
    assert acts.names() == ["pick"]
    assert "names none of its outlets" in (run.view().error or "")
    assert run.node_statuses()["pick"] == "failed"
