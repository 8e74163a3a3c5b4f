"""Stepping through a run's stored history: ``run.checkpoints()``, ``run.data_at(seq)`` rebuilt
from the stored patches, ``run.node_statuses_at(seq)`` and ``run.attempts(node)``, checked
against what the activities saw as they ran, on both backends."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

import wfkit as wf
from tests.engine.helpers import Seen, run_to_idle

NO_WAIT = {"retry_delay": timedelta(0), "jitter": 0}


@pytest.fixture
def seen() -> Seen:
    return Seen()


def assert_inputs_match(run: wf.Run, seen: Seen) -> None:
    """Every attempt's ``input_seq`` rebuilds exactly the document the activity started from."""
    attempts = [a for a in run.attempts() if a.status in ("succeeded", "failed")]
    assert {(a.node_id, a.attempt, a.cell) for a in attempts} == set(seen.started)
    for a in attempts:
        assert run.data_at(a.input_seq) == seen.started[(a.node_id, a.attempt, a.cell)], a


def test_data_at_every_checkpoint_of_a_sequential_run_with_a_retry(engine, acts, seen) -> None:
    tries = {"n": 0}

    def flaky(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
        tries["n"] += 1
        ctx.data["tries"] = tries["n"]  # a failed attempt's changes are not kept
        if tries["n"] == 1:
            raise RuntimeError("ledger offline")
        ctx.data["charged"] = ctx.data["amount"]
        return {"receipt": "r-1"}

    def ship(ctx: wf.ActivityContext[Any]) -> None:
        ctx.data["shipped"] = True
        ctx.data["amount"] = 0

    acts.add("charge", seen.wrap(flaky))
    acts.add("ship", seen.wrap(ship))
    run = run_to_idle(
        engine, wf.Workflow("pay").start_with("charge", **NO_WAIT).then("ship"), {"amount": 5}
    )
    assert run.status == wf.RunStatus.COMPLETED

    points = run.checkpoints()
    assert points[0].kinds == ("run.started",) and points[0].seq == 1
    assert [p.seq for p in points] == sorted(p.seq for p in points)
    assert points[-1].seq == run.history()[-1].seq
    assert run.data_at(0) == {"amount": 5} == run.input
    assert run.data_at(points[-1].seq) == run.view().data
    assert run.data_at(points[-1].seq) == {"amount": 0, "charged": 5, "shipped": True, "tries": 2}
    completed = {e.node_id: e.seq for e in run.history() if e.kind == "step.completed"}
    assert run.data_at(completed["charge"]) == seen.ended[("charge", 2, "")]
    assert run.data_at(completed["ship"]) == seen.ended[("ship", 1, "")]
    failed = next(e.seq for e in run.history() if e.kind == "step.failed")
    assert run.data_at(failed) == {"amount": 5}  # the failed attempt wrote nothing
    assert_inputs_match(run, seen)
    copy_ = run.data_at(points[-1].seq)
    copy_["amount"] = 99
    assert run.data_at(points[-1].seq)["amount"] == 0  # a fresh copy every time


def test_attempts_carry_times_status_error_and_output(engine, acts) -> None:
    tries = {"n": 0}

    def flaky(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
        tries["n"] += 1
        if tries["n"] < 3:
            raise ValueError(f"card declined (try {tries['n']})")
        return {"receipt": "r-3"}

    acts.add("charge", flaky)
    run = run_to_idle(
        engine, wf.Workflow("pay").start_with("charge", max_attempts=3, **NO_WAIT), {}
    )

    attempts = run.attempts("charge")
    assert [(a.attempt, a.status, a.retried) for a in attempts] == [
        (1, "failed", True),
        (2, "failed", True),
        (3, "succeeded", False),
    ]
    assert "Traceback (most recent call last)" in (attempts[0].error or "")
    assert "ValueError: card declined (try 1)" in (attempts[0].error or "")
    assert attempts[2].output == {"receipt": "r-3"} and attempts[2].error is None
    for a in attempts:
        assert a.started_at is not None and a.started_at <= a.ended_at
        assert a.seconds is not None and a.seconds >= 0
    assert run.attempts() == attempts  # the only node with attempts
    with pytest.raises(wf.UsageError, match="has no node 'nope'"):
        run.attempts("nope")


def test_node_statuses_at_each_point(engine, acts) -> None:
    tries = {"n": 0}

    def flaky(ctx: wf.ActivityContext[Any]) -> None:
        tries["n"] += 1
        if tries["n"] == 1:
            raise RuntimeError("down")

    acts.add("charge", flaky)
    acts.noop("ship")
    run = run_to_idle(
        engine, wf.Workflow("pay").start_with("charge", retry_delay="1m", jitter=0).then("ship"), {}
    )
    failed = next(e.seq for e in run.history() if e.kind == "step.failed")
    assert run.node_statuses_at(1) == {"charge": "running"}
    assert run.node_statuses_at(failed) == {"charge": "retrying"}
    assert run.status == wf.RunStatus.WAITING

    engine.clock.advance("1m")
    engine.run_until_idle()
    completed = next(e.seq for e in run.history() if e.kind == "step.completed")
    assert run.node_statuses_at(completed) == {"charge": "succeeded", "ship": "running"}
    last = run.checkpoints()[-1].seq
    assert (
        run.node_statuses_at(last)
        == run.node_statuses()
        == {
            "charge": "succeeded",
            "ship": "succeeded",
        }
    )
    assert run.node_statuses_at(failed) == {"charge": "retrying"}  # the past stays as it was


def test_for_each_cells_writing_disjoint_paths(engine, acts, seen) -> None:
    def ship(ctx: wf.ActivityContext[Any]) -> None:
        ctx.data["shipped"][ctx.loop_index] = ctx.item * 10

    acts.add("ship", seen.wrap(ship))
    acts.add("total", seen.wrap(lambda ctx: ctx.data.update(total=sum(ctx.data["shipped"]))))
    flow = (
        wf.Workflow("lines")
        .start_with()
        .for_each("items", lambda b: b.then("ship"), max_parallelism=2)
        .then("total")
    )
    run = run_to_idle(engine, flow, {"items": [1, 2, 3, 4, 5], "shipped": [0] * 5})
    assert run.status == wf.RunStatus.COMPLETED

    last = run.checkpoints()[-1].seq
    assert run.data_at(last) == run.view().data
    assert run.data_at(last)["total"] == 150
    assert_inputs_match(run, seen)
    # each cell's write is there from the checkpoint that recorded it on, never before
    for a in run.attempts("ship"):
        i = a.loop_path[0]
        assert run.data_at(a.seq)["shipped"][i] == (i + 1) * 10
        assert run.data_at(a.input_seq)["shipped"][i] == 0


def test_parallel_branches_on_worker_threads(engine, acts, seen) -> None:
    def setter(field: str) -> Any:
        def body(ctx: wf.ActivityContext[Any]) -> None:
            time.sleep(0.01)
            ctx.data[field] = ctx.node_id

        return body

    for name in ("pack", "bill", "label"):
        acts.add(name, seen.wrap(setter(name)))
    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(lambda b: b.then("pack"), lambda b: b.then("bill"), lambda b: b.then("label"))
    )
    engine.register(flow)
    run = engine.start("w", {"order": 7})
    engine.start_workers(3)
    run.result(timeout=20)

    points = run.checkpoints()
    assert run.data_at(points[-1].seq) == run.view().data
    assert run.data_at(points[-1].seq) == {
        "order": 7,
        "pack": "pack",
        "bill": "bill",
        "label": "label",
    }
    previous: dict[str, Any] = {}
    for point in points:  # the document only grows, one branch's write at a time
        data = run.data_at(point.seq)
        assert previous.items() <= data.items()
        previous = data
    for a in run.attempts():
        assert run.data_at(a.seq)[a.node_id] == a.node_id
        assert a.node_id not in run.data_at(a.input_seq)


def test_a_run_reopened_after_an_engine_restart(open_engine, acts, seen) -> None:
    acts.add("prepare", seen.wrap(lambda ctx: ctx.data.update(prepared=True)))
    acts.add("finish", seen.wrap(lambda ctx: ctx.data.update(done=ctx.data["approved"])))
    flow = (
        wf.Workflow("gate")
        .start_with("prepare")
        .wait_for_signal("go", correlate="key", bind={"ok": "approved"})
        .then("finish")
    )
    first = open_engine()
    first.register(flow)
    run_id = first.start("gate", {"key": "k-1"}).id
    first.run_until_idle()
    before = [p.seq for p in first.run(run_id).checkpoints()]
    first.close()

    second = open_engine()
    second.register(flow)
    run = second.run(run_id)
    assert [p.seq for p in run.checkpoints()] == before
    assert run.data_at(before[-1]) == {"key": "k-1", "prepared": True} == run.view().data
    assert second.signal("go", "k-1", {"ok": "yes"}) is True
    second.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED

    received = next(e.seq for e in run.history() if e.kind == "signal.received")
    assert run.data_at(received)["approved"] == "yes"  # the signal's bind is a patch too
    last = run.checkpoints()[-1].seq
    assert (
        run.data_at(last)
        == run.view().data
        == {
            "key": "k-1",
            "prepared": True,
            "approved": "yes",
            "done": "yes",
        }
    )
    assert_inputs_match(run, seen)
    assert run.node_statuses_at(before[-1])["go"] == "waiting"


def test_bad_points_and_unknown_runs_are_refused(engine, acts) -> None:
    acts.noop("step")
    run = run_to_idle(engine, wf.Workflow("one").start_with("step"), {"a": 1})
    last = run.checkpoints()[-1].seq
    for bad in (-1, last + 1, "2", 1.0, True, None):
        with pytest.raises(wf.UsageError, match=f"pass a seq between 0 \\(its input\\) and {last}"):
            run.data_at(bad)  # type: ignore[arg-type]
        with pytest.raises(wf.UsageError, match="pass a seq between"):
            run.node_statuses_at(bad)  # type: ignore[arg-type]
    ghost = wf.Run(engine.runtime, "no-such-run")  # a stale handle (engine.run refuses the id)
    with pytest.raises(wf.UsageError, match="no-such-run"):
        ghost.checkpoints()
    with pytest.raises(wf.UsageError, match="no-such-run"):
        ghost.data_at(0)
