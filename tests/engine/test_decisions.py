"""Decisions: if_ over the data, a registered function naming a branch, expressions on outputs."""

from __future__ import annotations

from typing import Any

import pytest

import wfkit as wf


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def _review_flow() -> wf.Workflow:
    return (
        wf.Workflow("w")
        .start_with()
        .if_(
            "amount > 100",
            then=lambda b: b.then("review"),
            otherwise=lambda b: b.then("auto"),
            id="big",
        )
        .then("done")
    )


@pytest.mark.parametrize(
    ("amount", "branch", "outlet"), [(500, "review", "true"), (20, "auto", "false")]
)
def test_if_takes_the_branch_its_expression_picks(engine, acts, amount, branch, outlet) -> None:
    acts.noop("review", "auto", "done")
    engine.register(_review_flow())

    run = engine.start("w", {"amount": amount})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == [branch, "done"]
    taken = events(run, "decision.taken")
    assert [(e.node_id, e.detail) for e in taken] == [("big", {"outlet": outlet})]


def test_if_sees_changes_made_by_earlier_steps(engine, acts) -> None:
    def raise_amount(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
        ctx.data["amount"] = 1000

    acts.add("raise", raise_amount)
    acts.noop("review", "auto", "done")
    flow = (
        wf.Workflow("w")
        .start_with("raise")
        .if_("amount > 100", then=lambda b: b.then("review"), otherwise=lambda b: b.then("auto"))
        .then("done")
    )
    engine.register(flow)

    run = engine.start("w", {"amount": 1})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["raise", "review", "done"]


def test_if_without_otherwise_goes_straight_on_when_false(engine, acts) -> None:
    acts.noop("review", "done")
    flow = wf.Workflow("w").start_with().if_("vip", then=lambda b: b.then("review")).then("done")
    engine.register(flow)

    runs = engine.start_many("w", [{"vip": True}, {"vip": False}])
    engine.run_until_idle()

    assert [r.status for r in runs] == [wf.RunStatus.COMPLETED] * 2
    assert sorted(acts.names()) == ["done", "done", "review"]


def _shipping_flow() -> wf.Workflow:
    return (
        wf.Workflow("w")
        .start_with()
        .decide(
            "route",
            branches={
                "express": lambda b: b.then("ship.express"),
                "standard": lambda b: b.then("ship.standard"),
            },
        )
        .then("done")
    )


@pytest.mark.parametrize("tier", ["express", "standard"])
def test_a_registered_decision_function_picks_a_branch_by_name(engine, acts, tier) -> None:
    acts.add("route", lambda ctx: ctx.data["tier"])
    acts.noop("ship.express", "ship.standard", "done")
    engine.register(_shipping_flow())

    run = engine.start("w", {"tier": tier})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["route", f"ship.{tier}", "done"]
    taken = events(run, "decision.taken")
    assert [(e.node_id, e.detail) for e in taken] == [("route", {"outlet": tier})]


def test_a_decision_returning_an_unknown_branch_fails_the_run_naming_the_outlets(
    engine, acts
) -> None:
    acts.add("route", lambda ctx: "overnight")
    acts.noop("ship.express", "ship.standard", "done")
    engine.register(_shipping_flow())

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert acts.names() == ["route"], "a wrong answer is not retried"
    with pytest.raises(wf.WorkflowFailed) as info:
        run.result(timeout=1)
    error = info.value.error or ""
    assert "'overnight'" in error
    assert "express" in error and "standard" in error
    assert "return one of those names" in error


def test_a_decision_function_that_raises_is_retried_like_an_action(engine, acts) -> None:
    def route(ctx: wf.ActivityContext[Any]) -> str:
        if ctx.attempt == 1:
            raise ConnectionError("rules service unavailable")
        return "standard"

    acts.add("route", route)
    acts.noop("ship.express", "ship.standard", "done")
    flow = _shipping_flow()
    flow.graph.nodes["route"]["policy"] = {"retry_delay": "0s"}
    engine.register(flow)

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["route", "route", "ship.standard", "done"]


def test_an_expression_can_read_recorded_outputs(engine, acts) -> None:
    acts.add("risk.score", lambda ctx: {"value": ctx.data["seed"] * 10})
    acts.noop("block", "allow")
    flow = (
        wf.Workflow("w")
        .start_with("risk.score")
        .if_(
            "outputs['risk.score']['value'] >= 50",
            then=lambda b: b.then("block"),
            otherwise=lambda b: b.then("allow"),
        )
    )
    engine.register(flow)

    risky = engine.start("w", {"seed": 9})
    engine.run_until_idle()
    safe = engine.start("w", {"seed": 1})
    engine.run_until_idle()

    assert risky.status == safe.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["risk.score", "block", "risk.score", "allow"]


def test_an_expression_over_a_missing_field_fails_the_run_with_the_expression(engine, acts) -> None:
    acts.noop("review", "auto", "done")
    engine.register(_review_flow())

    run = engine.start("w", {"total": 5})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert acts.names() == []
    error = events(run, "run.failed")[0].error or ""
    assert "amount" in error
