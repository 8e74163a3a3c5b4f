"""parallel + join: all, any, at_least(n), partial joins, and merging the branches' data."""

from __future__ import annotations

import time
from typing import Any

import pytest

import wfkit as wf


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def setter(field: str, value: Any) -> Any:
    def body(ctx: wf.ActivityContext[dict[str, Any]]) -> dict[str, Any]:
        ctx.data[field] = value
        return {field: value}

    return body


def broken(ctx: wf.ActivityContext[Any]) -> None:
    raise RuntimeError(f"warehouse {ctx.node_id} is offline")


def test_join_all_waits_for_every_branch_and_merges_their_data(engine, acts) -> None:
    acts.add("pack", setter("packed", True))
    acts.add("bill", setter("invoice", "inv-1"))
    acts.add("label", setter("label", "lbl-9"))
    acts.add("after", lambda ctx: {"seen": sorted(ctx.data)})
    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(lambda b: b.then("pack"), lambda b: b.then("bill"), lambda b: b.then("label"))
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {"order": "o-1"})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"order": "o-1", "packed": True, "invoice": "inv-1", "label": "lbl-9"}
    assert sorted(acts.names()[:3]) == ["bill", "label", "pack"]
    assert acts.names()[3:] == ["after"]
    assert run.outputs["after"] == {"seen": ["invoice", "label", "order", "packed"]}
    joined = events(run, "join.completed")
    assert [e.detail for e in joined] == [{"completed": 3, "failed": 0, "expected": 3}]
    assert events(run, "merge.conflict") == [], "disjoint writes are not conflicts"
    forked = events(run, "parallel.forked")
    assert forked[0].detail == {"branches": ["branch-1", "branch-2", "branch-3"]}


def test_join_all_merges_branches_running_on_worker_threads(engine, acts) -> None:
    def slow_setter(field: str) -> Any:
        def body(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
            time.sleep(0.05)
            ctx.data[field] = ctx.node_id

        return body

    for name in ("a", "b", "c", "d"):
        acts.add(name, slow_setter(name))
    acts.noop("after")
    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(*[lambda b, n=n: b.then(n) for n in ("a", "b", "c", "d")])
        .then("after")
    )
    engine.register(flow)
    run = engine.start("w", {})

    engine.start_workers(4)
    try:
        assert run.result(timeout=10) == {"a": "a", "b": "b", "c": "c", "d": "d"}
    finally:
        engine.stop()
    assert sorted(acts.names()) == ["a", "after", "b", "c", "d"]
    assert acts.names()[-1] == "after"
    assert events(run, "merge.conflict") == []


def test_join_any_continues_after_the_first_branch_and_discards_the_others(
    engine, acts, clock
) -> None:
    acts.noop("fast", "slow", "slower", "after")
    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(
            lambda b: b.then("fast"),
            lambda b: b.delay("1h").then("slow"),
            lambda b: b.delay("2h").then("slower"),
            join="any",
        )
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["fast", "after"]
    assert engine.sql(f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'").fetchall() == []
    clock.advance("3h")
    engine.run_until_idle()
    assert acts.names() == ["fast", "after"], "discarded branches must not run later"
    joined = events(run, "join.completed")
    assert [e.detail for e in joined] == [{"completed": 1, "failed": 0, "expected": 3}]


def test_join_any_runs_the_following_step_once_when_branches_finish_together(engine, acts) -> None:
    acts.noop("x", "y", "z", "after")
    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(lambda b: b.then("x"), lambda b: b.then("y"), lambda b: b.then("z"), join="any")
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.count("after") == 1
    assert len(events(run, "join.completed")) == 1
    assert len(events(run, "run.completed")) == 1


def test_join_at_least_two_of_three_completes_despite_a_failing_branch(engine, acts) -> None:
    acts.noop("ok1", "ok2", "after")
    acts.add("bad", broken)
    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(
            lambda b: b.then("bad", max_attempts=1),
            lambda b: b.then("ok1"),
            lambda b: b.then("ok2"),
            join=wf.at_least(2),
        )
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.count("after") == 1
    assert acts.count("bad") == 1
    joined = events(run, "join.completed")
    assert len(joined) == 1
    assert joined[0].detail["completed"] == 2


def test_join_at_least_fails_when_too_few_branches_complete(engine, acts) -> None:
    acts.noop("ok", "after")
    acts.add("bad", broken)
    acts.add("bad2", broken)
    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(
            lambda b: b.then("bad", max_attempts=1),
            lambda b: b.then("bad2", max_attempts=1),
            lambda b: b.then("ok"),
            join=wf.at_least(2),
        )
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert acts.count("after") == 0
    assert "partial" in (events(run, "run.failed")[0].error or "")


def _partial_flow(on_partial: bool) -> wf.Workflow:
    return (
        wf.Workflow("w")
        .start_with()
        .parallel(
            lambda b: b.then("ok"),
            lambda b: b.then("bad", max_attempts=2, retry_delay="0s"),
            on_partial=(lambda b: b.then("repair")) if on_partial else None,
        )
        .then("after")
    )


def test_join_all_with_a_failed_branch_takes_the_partial_path(engine, acts) -> None:
    acts.noop("ok", "repair", "after")
    acts.add("bad", broken)
    engine.register(_partial_flow(on_partial=True))

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.count("bad") == 2, "a branch fails for good only after its retries"
    assert acts.names()[-2:] == ["repair", "after"]
    partial = events(run, "join.partial")
    assert len(partial) == 1
    assert partial[0].detail["completed"] == 1
    assert partial[0].detail["failed"] == 1
    assert "warehouse bad is offline" in partial[0].detail["errors"][0]["error"]
    failed = events(run, "branch.failed")
    assert [e.detail["index"] for e in failed] == [1]


def test_join_all_with_a_failed_branch_and_no_partial_path_fails_the_run(engine, acts) -> None:
    acts.noop("ok", "after")
    acts.add("bad", broken)
    engine.register(_partial_flow(on_partial=False))

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert acts.count("after") == 0
    with pytest.raises(wf.WorkflowFailed) as info:
        run.result(timeout=1)
    error = info.value.error or ""
    assert "partial" in error
    assert "1 of 2 branches completed" in error
    assert "warehouse bad is offline" in error
    assert "on_partial" in error


def test_two_branches_writing_the_same_field_record_a_merge_conflict(engine, acts) -> None:
    acts.add("left", setter("owner", "left"))
    acts.add("right", setter("owner", "right"))
    acts.noop("after")
    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(lambda b: b.then("left"), lambda b: b.then("right"))
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {"owner": None})
    engine.run_until_idle()

    conflicts = events(run, "merge.conflict")
    assert len(conflicts) == 1
    assert conflicts[0].node_id in ("left", "right")
    assert conflicts[0].detail["paths"] == ["/owner"]
    rows = engine.sql(
        f"SELECT node_id FROM wf_events WHERE run_id = '{run.id}' AND kind = 'merge.conflict'"
    ).fetchall()
    assert rows == [(conflicts[0].node_id,)]
    assert run.data["owner"] in ("left", "right")


def test_a_workflow_asking_for_strict_merges_fails_on_a_conflict(engine, acts) -> None:
    acts.add("left", setter("owner", "left"))
    acts.add("right", setter("owner", "right"))
    acts.noop("after")
    flow = (
        wf.Workflow("w", strict_merges=True)
        .start_with()
        .parallel(lambda b: b.then("left"), lambda b: b.then("right"))
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {"owner": None})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert "after" not in acts.names()
    assert len(events(run, "merge.conflict")) == 1
    with pytest.raises(wf.WorkflowFailed, match="strict merges"):
        run.result(timeout=1)


def test_branches_discarded_by_an_any_join_leave_no_open_wait(engine, acts) -> None:
    acts.noop("fast", "after")
    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(
            lambda b: b.then("fast"),
            lambda b: b.wait_for_signal("manual", correlate="ref", timeout="1d"),
            join="any",
        )
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {"ref": "r-1"})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert engine.waiting() == []
    assert engine.sql(f"SELECT * FROM wf_bookmarks WHERE run_id = '{run.id}'").fetchall() == []
    assert engine.sql(f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'").fetchall() == []
    assert engine.signal("manual", "r-1", {}) is False
    assert acts.names() == ["fast", "after"]
