"""A run handle carries the commands that act on its run: ``run.cancel()``, ``run.approve()``,
``run.retry()``, ``run.resume()`` and ``run.recover_compensation()`` do what the engine's
command of the same name does for that run (both spellings keep working)."""

from __future__ import annotations

from typing import Any

import pytest

import wfkit as wf
from tests.engine.helpers import events, run_to_idle


@pytest.fixture
def switches() -> dict[str, bool]:
    """Activities named here raise while their switch is on."""
    return {}


@pytest.fixture
def steps(acts, switches: dict[str, bool]) -> Any:
    def step(name: str) -> Any:
        def body(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
            if switches.get(name):
                raise RuntimeError(f"{name} backend down")
            ctx.data.setdefault("done", []).append(name)

        return body

    for name in ("prepare", "charge", "refund", "ship"):
        acts.add(name, step(name))
    return acts


def test_run_cancel_cancels_its_run_and_records_the_actor_and_reason(engine, steps) -> None:
    flow = wf.Workflow("cancel-me").start_with("prepare").wait_for_signal("go").then("ship")
    engine.register(flow)
    run = engine.start("cancel-me", {})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.WAITING

    result = run.cancel(actor="ops", reason="customer left")

    assert result == wf.CancelResult(run.id, 1, 0, False, wf.RunStatus.CANCELLED)
    assert run.status == wf.RunStatus.CANCELLED
    cancelled = events(run, "run.cancelled")
    assert [e.actor for e in cancelled] == ["ops"]
    assert "customer left" in f"{cancelled[0].detail} {cancelled[0].error}"
    assert engine.waiting() == []  # its wait went with it
    again = run.cancel(actor="ops")  # as engine.cancel: an ended run is left as it is
    assert again.already_ended and again.status == wf.RunStatus.CANCELLED
    assert engine.cancel(run.id).already_ended  # the engine's spelling still works


def test_run_approve_decides_its_own_approval(engine, steps) -> None:
    flow = (
        wf.Workflow("review")
        .start_with("prepare")
        .approval("review", on_reject=lambda b: b.then("refund").end())
        .then("ship")
    )
    engine.register(flow)
    approved = engine.start("review", {})
    rejected = engine.start("review", {})
    engine.run_until_idle()

    approved.approve("review", actor="ana", comment="looks right")
    rejected.approve("review", False, actor="bo")
    engine.run_until_idle()

    assert approved.status == rejected.status == wf.RunStatus.COMPLETED
    assert approved.data["done"] == ["prepare", "ship"]
    assert rejected.data["done"] == ["prepare", "refund"]
    yes = events(approved, "approval.approved")
    assert [(e.node_id, e.actor, e.output["comment"]) for e in yes] == [
        ("review", "ana", "looks right")
    ]
    assert [(e.node_id, e.actor) for e in events(rejected, "approval.rejected")] == [
        ("review", "bo")
    ]
    with pytest.raises(wf.SignalError, match="no open approval 'review'"):
        approved.approve("review", actor="ana")  # decided already: nothing changes


def test_run_retry_goes_on_from_the_failed_step(engine, steps, switches) -> None:
    switches["charge"] = True
    flow = wf.Workflow("pay").start_with("prepare").then("charge", max_attempts=1).then("ship")
    run = run_to_idle(engine, flow, {})
    assert run.status == wf.RunStatus.FAILED

    switches["charge"] = False
    run.retry(actor="ops")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.data["done"] == ["prepare", "charge", "ship"]  # prepare did not run again
    assert [e.actor for e in events(run, "run.retried")] == ["ops"]
    with pytest.raises(wf.UsageError, match="not failed"):
        run.retry()


def test_run_resume_continues_its_suspended_step(engine, steps, switches) -> None:
    switches["charge"] = True
    flow = (
        wf.Workflow("suspending")
        .start_with("prepare")
        .then("charge", max_attempts=1, on_failure="suspend")
        .then("ship")
    )
    run = run_to_idle(engine, flow, {})
    assert run.status == wf.RunStatus.SUSPENDED

    switches["charge"] = False
    run.resume(actor="ops")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.data["done"] == ["prepare", "charge", "ship"]
    assert [(e.actor, e.detail["steps"]) for e in events(run, "run.resumed")] == [
        ("ops", ["charge"])
    ]
    with pytest.raises(wf.UsageError, match="not suspended"):
        run.resume(actor="ops")


def test_run_recover_compensation_decides_its_failed_compensation(engine, steps, switches) -> None:
    switches["ship"] = switches["refund"] = True

    def body(s: wf.Steps) -> None:
        s.then("charge").compensate_with("refund", policy={"max_attempts": 1})
        s.then("ship", max_attempts=1)

    engine.register(wf.Workflow("undo").start_with("prepare").saga(body, id="undo"))
    run = engine.start("undo", {})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.SUSPENDED  # the refund failed for good
    with pytest.raises(wf.UsageError, match="retry', 'skip' or 'abandon'"):
        run.recover_compensation("ignore", actor="ops")

    run.recover_compensation("skip", actor="ops")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    skipped = events(run, "compensation.skipped")
    assert [(e.node_id, e.actor) for e in skipped] == [("charge", "ops")]
    with pytest.raises(wf.UsageError, match="no failed compensation"):
        run.recover_compensation(actor="ops")  # "retry" by default, as the engine's


def test_run_commands_mirror_the_engine_commands_arguments() -> None:
    import inspect

    pairs = {
        "cancel": "cancel",
        "approve": "approve",
        "retry": "retry",
        "resume": "resume",
        "recover_compensation": "recover_compensation",
    }
    for on_run, on_engine in pairs.items():
        run_params = list(inspect.signature(getattr(wf.Run, on_run)).parameters.values())
        engine_params = list(inspect.signature(getattr(wf.Engine, on_engine)).parameters.values())
        # the engine's take the run id after self; the run's are the rest, unchanged
        assert [(p.name, p.kind, p.default) for p in run_params[1:]] == [
            (p.name, p.kind, p.default) for p in engine_params[2:]
        ], on_run
