"""Readiness: ``engine.has_ready_work``, ``engine.workers_running``, ``engine.driving``,
``Engine(workers=)``, and ``run.explain()`` saying when a ready step has nobody to run it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import wfkit as wf
from tests.engine.helpers import run_to_idle


@pytest.fixture
def approval_flow(engine: wf.Engine, acts: Any) -> wf.Engine:
    acts.noop("expense.submit", "expense.pay")
    engine.register(
        wf.Workflow("expense").start_with("expense.submit").approval("ok").then("expense.pay")
    )
    return engine


def test_an_approved_run_without_workers_says_nobody_runs_its_step(approval_flow, acts) -> None:
    engine = approval_flow
    run = engine.start("expense", {})
    engine.run_until_idle()
    assert not engine.has_ready_work(run.id) and not engine.has_ready_work()

    engine.approve(run.id, "ok", actor="ana")

    assert run.status == wf.RunStatus.RUNNING
    assert engine.has_ready_work(run.id) and engine.has_ready_work()
    assert not engine.workers_running and not engine.driving
    assert run.explain() == (
        "'expense.pay' is ready (attempt 1) but no worker is running in this process: "
        "call engine.start_workers() or engine.run_until_idle()"
    )
    assert acts.names() == ["expense.submit"]  # asking ran nothing

    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert not engine.has_ready_work(run.id) and not engine.has_ready_work()
    assert acts.names() == ["expense.submit", "expense.pay"]


def test_workers_running_and_driving_follow_start_and_stop(approval_flow) -> None:
    engine = approval_flow
    run = engine.start("expense", {})
    engine.start_workers(threads=1)
    assert engine.workers_running and engine.driving

    engine.run_until_idle()
    engine.approve(run.id, "ok", actor="ana")
    assert run.result(timeout=30) == {}
    assert "no worker" not in run.explain()

    engine.stop()
    assert not engine.workers_running and not engine.driving


def test_driving_is_true_while_run_until_idle_runs_on_another_thread(engine, acts) -> None:
    inside = threading.Event()
    go_on = threading.Event()
    seen: dict[str, Any] = {}

    def slow(ctx: Any) -> None:
        inside.set()
        go_on.wait(30)

    acts.add("slow", slow)
    engine.register(wf.Workflow("slow").start_with("slow"))
    run = engine.start("slow", {})
    driver = threading.Thread(target=engine.run_until_idle)
    driver.start()
    assert inside.wait(30)
    seen["driving"], seen["explain"] = engine.driving, run.explain()
    go_on.set()
    driver.join(30)

    assert seen == {"driving": True, "explain": "running 'slow' (attempt 1)"}
    assert not engine.driving and run.status == wf.RunStatus.COMPLETED


def test_a_due_retry_timer_is_ready_work(engine, acts, clock) -> None:
    calls: list[int] = []

    def flaky(ctx: Any) -> None:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("backend down")

    acts.add("flaky", flaky)
    run = run_to_idle(
        engine,
        wf.Workflow("flaky").start_with("flaky", policy={"retry_delay": "1m", "jitter": 0}),
        {},
    )
    assert not engine.has_ready_work(run.id)  # its retry is a minute away

    clock.advance("2m")

    assert engine.has_ready_work(run.id) and engine.has_ready_work()
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED and calls == [1, 2]


def test_a_step_whose_activity_is_missing_is_blocked_not_ready(open_engine, acts) -> None:
    acts.noop("here", "elsewhere")
    first = open_engine()
    first.register(wf.Workflow("gone").start_with("here").then("elsewhere"))
    run_id = first.start("gone", {}).id
    first.close()
    registry = wf.ActivityRegistry()
    registry.register("here", lambda ctx: None)
    engine = open_engine(registry=registry)  # a process where 'elsewhere' is not registered
    engine.run_until_idle()

    assert not engine.has_ready_work(run_id) and not engine.has_ready_work()
    assert "not registered in this process" in engine.run(run_id).explain()


def test_has_ready_work_of_an_unknown_run_says_there_is_none(engine) -> None:
    with pytest.raises(wf.UsageError, match="no run 'nope'"):
        engine.has_ready_work("nope")


def test_engine_workers_starts_background_workers_at_open(open_engine, acts) -> None:
    acts.noop("expense.submit", "expense.pay")
    engine = open_engine(workers=2)
    assert engine.workers_running and engine.driving
    engine.register(
        wf.Workflow("expense").start_with("expense.submit").approval("ok").then("expense.pay")
    )
    run = engine.start("expense", {})
    engine.run_until_idle()  # with workers: waits until they are idle
    assert run.status == wf.RunStatus.WAITING

    engine.approve(run.id, "ok", actor="ana")

    assert run.result(timeout=30) == {}
    assert acts.names() == ["expense.submit", "expense.pay"]
    engine.close()
    assert not engine.workers_running


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "2"])
def test_engine_workers_refuses_what_is_no_thread_count_and_writes_nothing(
    db_path, clock, bad
) -> None:
    with pytest.raises(wf.UsageError, match="workers must be a number of worker threads"):
        wf.Engine(db_path, clock=clock, workers=bad)
    if not str(db_path).startswith("postgresql"):
        assert not db_path.exists()  # refused before the database was opened


def test_the_readme_first_example_with_workers_ends_completed(db_path) -> None:
    from wfkit.examples import onboarding

    engine = wf.Engine(db_path, workers=2)  # the example's first line
    try:
        engine.register(onboarding.flow)
        run = engine.start(
            "onboarding", {"customer_id": "c-1", "email": "a@b.c", "needs_approval": True}
        )
        engine.run_until_idle()  # with workers: until they have nothing left to do now
        assert run.status == wf.RunStatus.WAITING
        assert run.explain().startswith("waiting for signal 'approval' (key c-1)")

        assert engine.signal("approval", "c-1", {"approved": True}) is True

        assert run.result(timeout=30).is_approved is True  # a worker ran the rest
        assert run.status == wf.RunStatus.COMPLETED and not engine.has_ready_work()
    finally:
        engine.close()
