"""docs/semantics.md §15: calls that recurse through other workflows are bounded at run time — a
call that would nest child runs more than 32 deep fails (§15.8, the limit checked as stated); a
child that is suspended leaves its caller waiting (§15.4); a caller that fails while another
engine holds its child leaves the child running and says so (§15.6, PostgreSQL)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

import wfkit as wf
from tests.engine.conftest import Activities, OpenEngine


def test_calls_recursing_through_two_workflows_stop_32_deep(
    engine: wf.Engine, acts: Activities
) -> None:
    acts.noop("step")
    engine.register(wf.Workflow("a", 1).start_with("step"))
    engine.register(wf.Workflow("b", 1).start_with("step").call("a"))  # a: the latest when called
    engine.register(wf.Workflow("a", 2).start_with("step").call("b"))  # a -> b -> a -> ...

    top = engine.start("a", {})
    engine.run_until_idle()

    family = [top]
    while children := family[-1].children():
        (child,) = children
        family.append(child)
    assert len(family) == 33  # the run and 32 levels of child runs
    assert [run.status for run in family] == [wf.RunStatus.FAILED] * 33
    assert acts.count("step") == 33
    deepest = family[-1].view().error
    assert deepest is not None
    assert "would nest child runs 33 deep: the workflows call each other without end" in deepest
    assert "(b -> a -> b); break the cycle" in deepest
    assert len(engine.runs()) == 33


def test_a_suspended_child_leaves_its_caller_waiting_until_it_goes_on(
    engine: wf.Engine, acts: Activities
) -> None:
    broken = {"on": True}

    def charge(ctx: wf.ActivityContext[Any]) -> None:
        if broken["on"]:
            raise RuntimeError("card service down")
        ctx.data["receipt"] = "r-1"

    acts.add("charge", charge)
    acts.noop("reserve", "ship")
    engine.register(
        wf.Workflow("payment", 1).start_with("charge", max_attempts=1, on_failure="suspend")
    )
    engine.register(
        wf.Workflow("shop", 1)
        .start_with("reserve")
        .call("payment", bind={"receipt": "receipt"})
        .then("ship")
    )
    run = engine.start("shop", {})
    engine.run_until_idle()

    (child,) = run.children()
    assert child.status is wf.RunStatus.SUSPENDED
    assert run.status is wf.RunStatus.WAITING  # the caller neither fails nor goes on
    kinds = [e.kind for e in run.history()]
    assert "call.failed" not in kinds and "call.completed" not in kinds
    assert acts.names() == ["reserve", "charge"]

    broken["on"] = False
    engine.resume(child.id, actor="ops")
    engine.run_until_idle()

    assert child.status is wf.RunStatus.COMPLETED
    assert run.status is wf.RunStatus.COMPLETED and run.data["receipt"] == "r-1"
    assert acts.names() == ["reserve", "charge", "charge", "ship"]


@pytest.mark.parametrize("db_path", ["postgres"], indirect=True)
def test_a_caller_failing_while_another_engine_holds_its_child_leaves_the_child_running(
    open_engine: OpenEngine, acts: Activities, caplog: pytest.LogCaptureFixture
) -> None:
    """§15.6: the caller fails in this engine while the child runs in another (which serves the
    child's queue): the child is not cancelled, and a warning says how to cancel it."""
    started, release = threading.Event(), threading.Event()

    def work(ctx: wf.ActivityContext[Any]) -> None:
        started.set()
        assert release.wait(20)

    def boom(ctx: wf.ActivityContext[Any]) -> None:
        assert started.wait(20)  # the other engine holds the child now
        raise RuntimeError("warehouse on fire")

    acts.add("boom", boom)
    elsewhere = wf.ActivityRegistry()
    elsewhere.register("gpu.work", work, queue="gpu")
    acts.registry.register("gpu.work", work, queue="gpu")
    here = open_engine(clock=None)
    there = open_engine(clock=None, registry=elsewhere)
    here.register(wf.Workflow("payment", 1).start_with("gpu.work"))
    here.register(
        wf.Workflow("doomed", 1)
        .start_with()
        .parallel(
            lambda b: b.call("payment"),
            lambda b: b.then("boom", max_attempts=1).on_failure("terminate"),
        )
    )
    there.start_workers(1, queues=["gpu"])
    with caplog.at_level(logging.WARNING, logger="wfkit.engine"):
        here.start_workers(2, queues=["default"])
        run = here.start("doomed", {})
        deadline = time.monotonic() + 20
        while run.status is not wf.RunStatus.FAILED and time.monotonic() < deadline:
            time.sleep(0.02)
    (child,) = run.children()
    try:
        assert run.status is wf.RunStatus.FAILED
        assert child.status is wf.RunStatus.RUNNING  # left running, not cancelled
        warned = [r.getMessage() for r in caplog.records if "no longer waits" in r.getMessage()]
        assert warned == [
            f"run {run.id} no longer waits for its child run {child.id}, which another engine "
            f"process holds now; cancel the child with engine.cancel({child.id!r})"
        ]
    finally:
        release.set()
    assert there.run(child.id).result(timeout=20) == {}
    assert "run.cancelled" not in [e.kind for e in child.history()]
