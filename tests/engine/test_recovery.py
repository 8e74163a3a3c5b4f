"""Recovery: restart a finished run as new (lineage kept), cancel a parked run, and waits,
approvals, posted signals and suspended runs that outlive the engine that parked them."""

from __future__ import annotations

from typing import Any

import pytest

import wfkit as wf


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def rows(engine: wf.Engine, sql: str) -> list[tuple[Any, ...]]:
    return engine.sql(sql).fetchall()


def instance(engine: wf.Engine, run_id: str) -> tuple[Any, ...]:
    """(workflow, version, hash, status, input, parent) of one wf_instances row."""
    found = rows(
        engine,
        "SELECT workflow_id, version, hash, status, input, parent_run_id FROM wf_instances "
        f"WHERE run_id = '{run_id}'",
    )
    assert len(found) == 1, found
    return found[0]


@pytest.fixture
def broken() -> dict[str, bool]:
    """Which activities fail right now (a test flips one to 'fix the cause')."""
    return {}


@pytest.fixture
def order_acts(acts, broken: dict[str, bool]) -> Any:
    """prepare writes the data; work fails while broken['work']; undo/remind/ship record."""

    def prepare(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
        ctx.data["prepared"] = True

    def work(ctx: wf.ActivityContext[dict[str, Any]]) -> dict[str, int]:
        if broken.get("work"):
            raise RuntimeError(f"work backend down (attempt {ctx.attempt})")
        return {"n": ctx.data["n"]}

    def undo(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
        if broken.get("undo"):
            raise RuntimeError("undo backend down")
        ctx.data["prepared"] = False

    acts.add("prepare", prepare)
    acts.add("work", work)
    acts.add("undo", undo)
    acts.noop("remind", "ship", "v2.step")
    return acts


def failing_flow(version: int = 1) -> wf.Workflow:
    return wf.Workflow("job", version=version).start_with("prepare").then("work", max_attempts=1)


# --- restart as new -------------------------------------------------------------------------


def test_restart_as_new_starts_a_fresh_run_with_the_same_input_and_lineage(
    engine, order_acts, broken
) -> None:
    broken["work"] = True
    engine.register(failing_flow())
    old = engine.start("job", {"n": 5}, actor="ana")
    engine.run_until_idle()
    assert old.status == wf.RunStatus.FAILED
    assert old.data == {"n": 5, "prepared": True}

    broken["work"] = False
    new = engine.restart_as_new(old.id, actor="ops")
    engine.run_until_idle()

    assert new.id != old.id
    assert new.status == wf.RunStatus.COMPLETED
    assert new.outputs["work"] == {"n": 5}
    assert new.data == {"n": 5, "prepared": True}
    old_row, new_row = instance(engine, old.id), instance(engine, new.id)
    assert new_row[:3] == old_row[:3]  # same workflow, version and graph
    assert new_row[4] == old_row[4]  # the same input, not the data the old run ended with
    assert new_row[5] == old.id
    assert old_row[5] is None
    assert (old_row[3], new_row[3]) == ("failed", "completed")
    restarted = events(old, "run.restarted")
    assert [(e.actor, e.detail) for e in restarted] == [("ops", {"new_run": new.id})]
    started = events(new, "run.started")
    assert [(e.actor, e.detail["restart_of"]) for e in started] == [("ops", old.id)]
    assert old.status == wf.RunStatus.FAILED  # the old run stays as it ended
    listed = {r.run_id: r.parent_run_id for r in engine.runs()}
    assert listed == {old.id: None, new.id: old.id}
    assert order_acts.names() == ["prepare", "work", "prepare", "work"]


def test_restarting_a_run_leaves_the_old_run_ended_when_it_ended(
    engine, order_acts, broken, clock
) -> None:
    broken["work"] = True
    engine.register(failing_flow())
    old = engine.start("job", {"n": 5})
    engine.run_until_idle()
    failed_at = clock.now()
    before = rows(
        engine, f"SELECT status, error, ended_at FROM wf_instances WHERE run_id = '{old.id}'"
    )
    assert before[0][2] == failed_at

    clock.advance("3h")
    engine.restart_as_new(old.id, actor="ops")
    engine.run_until_idle()

    after = rows(
        engine, f"SELECT status, error, ended_at FROM wf_instances WHERE run_id = '{old.id}'"
    )
    assert after[0][:2] == before[0][:2]  # still failed, same error
    assert after[0][2] == failed_at  # ended when it failed, not when it was restarted
    # the new run fails too (the work is still broken); the old one keeps its own row
    assert old.id in [r.run_id for r in engine.runs(status="failed")]


def test_restart_as_new_keeps_the_definition_version_of_the_old_run(
    engine, order_acts, broken
) -> None:
    broken["work"] = True
    engine.register(failing_flow(version=1))
    old = engine.start("job", {"n": 1})
    engine.run_until_idle()
    engine.register(wf.Workflow("job", version=2).start_with("v2.step"))

    broken["work"] = False
    new = engine.restart_as_new(old.id)
    engine.run_until_idle()

    assert instance(engine, new.id)[1] == 1
    assert new.status == wf.RunStatus.COMPLETED
    assert order_acts.count("v2.step") == 0
    assert order_acts.names()[-2:] == ["prepare", "work"]
    assert engine.start("job", {"n": 1}).id  # a plain start takes the latest version
    engine.run_until_idle()
    assert order_acts.names()[-1] == "v2.step"


def test_restart_as_new_of_a_cancelled_run_is_allowed(engine, order_acts) -> None:
    engine.register(wf.Workflow("wait").start_with("prepare").wait_for_signal("go", correlate="n"))
    old = engine.start("wait", {"n": 1})
    engine.run_until_idle()
    engine.cancel(old.id, actor="ops")

    new = engine.restart_as_new(old.id, actor="ops")
    engine.run_until_idle()

    assert instance(engine, new.id)[5] == old.id
    assert new.status == wf.RunStatus.WAITING
    assert old.status == wf.RunStatus.CANCELLED


def test_restart_as_new_of_a_live_run_is_refused_and_writes_nothing(
    engine, order_acts, broken
) -> None:
    engine.register(wf.Workflow("wait").start_with("prepare").wait_for_signal("go", correlate="n"))
    engine.register(wf.Workflow("stuck").start_with("work", max_attempts=1).on_failure("suspend"))
    broken["work"] = True
    waiting = engine.start("wait", {"n": 1})
    suspended = engine.start("stuck", {"n": 2})
    engine.run_until_idle()
    assert (waiting.status, suspended.status) == (
        wf.RunStatus.WAITING,
        wf.RunStatus.SUSPENDED,
    )
    before = rows(engine, "SELECT run_id, seq, kind FROM wf_events ORDER BY run_id, seq")

    with pytest.raises(wf.UsageError, match="waiting; cancel it first"):
        engine.restart_as_new(waiting.id, actor="ops")
    with pytest.raises(wf.UsageError, match="suspended"):
        engine.restart_as_new(suspended.id, actor="ops")
    with pytest.raises(wf.UsageError, match="no run 'nope'"):
        engine.restart_as_new("nope")

    assert rows(engine, "SELECT count(*) FROM wf_instances") == [(2,)]
    assert rows(engine, "SELECT run_id, seq, kind FROM wf_events ORDER BY run_id, seq") == before
    assert waiting.status == wf.RunStatus.WAITING


# --- cancel ---------------------------------------------------------------------------------


def test_cancelling_a_waiting_run_removes_its_bookmark_and_timer(engine, order_acts, clock) -> None:
    engine.register(
        wf.Workflow("wait")
        .start_with("prepare")
        .wait_for_signal("go", correlate="n", timeout="1h", on_timeout=lambda b: b.then("remind"))
        .then("ship")
    )
    run = engine.start("wait", {"n": 1})
    other = engine.start("wait", {"n": 2})
    engine.run_until_idle()
    assert rows(engine, f"SELECT kind FROM wf_bookmarks WHERE run_id = '{run.id}'") == [("signal",)]
    assert rows(engine, f"SELECT kind FROM wf_timers WHERE run_id = '{run.id}'") == [("timeout",)]

    engine.cancel(run.id, actor="ops", reason="customer left")

    assert run.status == wf.RunStatus.CANCELLED
    assert rows(engine, f"SELECT * FROM wf_bookmarks WHERE run_id = '{run.id}'") == []
    assert rows(engine, f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'") == []
    cancelled = events(run, "run.cancelled")
    assert [(e.actor, e.detail) for e in cancelled] == [("ops", {"reason": "customer left"})]
    status, ended = rows(
        engine, f"SELECT status, ended_at FROM wf_instances WHERE run_id = '{run.id}'"
    )[0]
    assert (status, ended) == ("cancelled", clock.now())
    assert [w.run_id for w in engine.waiting()] == [other.id]

    assert engine.signal("go", "1", {}) is False
    clock.advance("2h")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.CANCELLED
    assert events(run, "signal.elapsed") == []
    assert order_acts.count("remind") == 1  # only the other run timed out
    assert other.status == wf.RunStatus.COMPLETED
    again = engine.cancel(run.id, actor="ops")  # an ended run is left as it is
    assert (again.already_ended, again.status) == (True, wf.RunStatus.CANCELLED)
    assert len(events(run, "run.cancelled")) == 1


def test_cancelling_a_run_parked_on_an_approval_closes_the_approval(engine, order_acts) -> None:
    engine.register(wf.Workflow("ok").start_with("prepare").approval("review").then("ship"))
    run = engine.start("ok", {"n": 1})
    engine.run_until_idle()

    engine.cancel(run.id, actor="ops")

    assert run.status == wf.RunStatus.CANCELLED
    assert engine.waiting() == []
    with pytest.raises(wf.SignalError):
        engine.approve(run.id, "review", approved=True, actor="ana")
    assert order_acts.count("ship") == 0
    assert [e.actor for e in events(run, "run.cancelled")] == ["ops"]


def test_cancelling_a_retrying_run_stops_its_retries(engine, order_acts, broken, clock) -> None:
    broken["work"] = True
    engine.register(
        wf.Workflow("job").start_with("work", max_attempts=5, retry_delay="1m", jitter=0)
    )
    run = engine.start("job", {"n": 1})
    engine.run_until_idle()
    assert rows(engine, f"SELECT kind FROM wf_timers WHERE run_id = '{run.id}'") == [("retry",)]

    engine.cancel(run.id, actor="ops")
    clock.advance("1h")
    engine.run_until_idle()

    assert order_acts.count("work") == 1
    assert run.status == wf.RunStatus.CANCELLED
    assert rows(engine, f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'") == []
    assert rows(engine, f"SELECT * FROM wf_jobs WHERE run_id = '{run.id}'") == []


# --- waits that outlive their engine ---------------------------------------------------------


def wait_flow() -> wf.Workflow:
    return (
        wf.Workflow("wait")
        .start_with("prepare")
        .wait_for_signal(
            "go",
            correlate="n",
            bind={"value": "value", "ref": "meta.ref"},
            timeout="1d",
            on_timeout=lambda b: b.then("remind"),
        )
        .then("ship")
    )


def test_a_wait_survives_closing_the_engine_and_a_new_engine_resumes_it(
    open_engine, order_acts
) -> None:
    first = open_engine()
    first.register(wait_flow())
    run_id = first.start("wait", {"n": 1, "meta": {}}).id
    first.run_until_idle()
    first.close()

    second = open_engine()  # same file; nothing registered again
    run = second.run(run_id)
    assert run.status == wf.RunStatus.WAITING
    assert [(w.run_id, w.name, w.key) for w in second.waiting()] == [(run_id, "go", "1")]

    assert second.signal("go", 1, {"value": 42, "ref": "r-1"}, actor="bank") is True
    second.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"n": 1, "meta": {"ref": "r-1"}, "value": 42, "prepared": True}
    assert order_acts.names() == ["prepare", "ship"]
    assert [e.actor for e in events(run, "signal.received")] == ["bank"]
    assert rows(second, f"SELECT * FROM wf_bookmarks WHERE run_id = '{run_id}'") == []
    assert rows(second, f"SELECT * FROM wf_timers WHERE run_id = '{run_id}'") == []


def test_a_wait_timeout_fires_in_the_engine_opened_after_a_restart(
    open_engine, order_acts, clock
) -> None:
    first = open_engine()
    first.register(wait_flow())
    run_id = first.start("wait", {"n": 1, "meta": {}}).id
    first.run_until_idle()
    first.close()

    second = open_engine()
    clock.advance("1d")
    second.run_until_idle()

    run = second.run(run_id)
    assert run.status == wf.RunStatus.COMPLETED
    assert order_acts.names() == ["prepare", "remind", "ship"]
    assert [e.node_id for e in events(run, "signal.elapsed")] == ["go"]
    assert second.signal("go", 1, {"value": 1}) is False


def test_an_approval_survives_closing_the_engine(open_engine, order_acts) -> None:
    first = open_engine()
    first.register(wf.Workflow("ok").start_with("prepare").approval("review").then("ship"))
    run_id = first.start("ok", {"n": 1}).id
    first.run_until_idle()
    first.close()

    second = open_engine()
    second.approve(run_id, "review", approved=True, actor="ana", comment="fine")
    second.run_until_idle()

    run = second.run(run_id)
    assert run.status == wf.RunStatus.COMPLETED
    assert [(e.actor, e.output["comment"]) for e in events(run, "approval.approved")] == [
        ("ana", "fine")
    ]


def test_a_posted_signal_survives_closing_the_engine(open_engine, order_acts) -> None:
    first = open_engine()
    first.register(wait_flow())
    assert first.post_signal("go", 1, {"value": 7}) is False
    first.close()

    second = open_engine()
    run = second.start("wait", {"n": 1, "meta": {}})
    second.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.data["value"] == 7
    assert rows(second, "SELECT * FROM wf_signals") == []


def test_a_suspended_compensation_can_be_recovered_after_a_restart(
    open_engine, order_acts, broken
) -> None:
    broken["work"] = broken["undo"] = True
    first = open_engine()
    first.register(
        wf.Workflow("saga")
        .start_with()
        .saga(
            lambda s: (
                s.then("prepare")
                .compensate_with("undo", policy={"max_attempts": 1})
                .then("work", max_attempts=1)
            ),
            id="s",
        )
    )
    run_id = first.start("saga", {"n": 1}).id
    first.run_until_idle()
    assert first.run(run_id).status == wf.RunStatus.SUSPENDED
    first.close()

    broken["undo"] = False
    second = open_engine()
    run = second.run(run_id)
    assert run.status == wf.RunStatus.SUSPENDED
    second.recover_compensation(run_id, action="retry", actor="ops")
    second.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert run.data == {"n": 1, "prepared": False}
    assert order_acts.names() == ["prepare", "work", "undo", "undo"]
    assert rows(second, f"SELECT node_id, status FROM wf_saga_steps WHERE run_id = '{run_id}'") == [
        ("prepare", "compensated")
    ]
    assert [e.actor for e in events(run, "compensation.retried")] == ["ops"]


def test_a_suspended_step_can_be_resumed_after_a_restart(open_engine, order_acts, broken) -> None:
    broken["work"] = True
    first = open_engine()
    first.register(
        wf.Workflow("stuck").start_with("work", max_attempts=1).on_failure("suspend").then("ship")
    )
    run_id = first.start("stuck", {"n": 3}).id
    first.run_until_idle()
    first.close()

    broken["work"] = False
    second = open_engine()
    second.resume(run_id, actor="ops")
    second.run_until_idle()

    run = second.run(run_id)
    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs["work"] == {"n": 3}
    assert order_acts.names() == ["work", "work", "ship"]
    assert [e.actor for e in events(run, "run.resumed")] == ["ops"]
