"""Runs end only after their attempts in flight have ended: a failing branch, an operator cancel
or a saga unwind waits for the other attempts (asked to stop, or finished), records their
outcomes, and only then records the end; a hung attempt is abandoned after the drain timeout, and
an engine that restarts during the drain finishes it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import wfkit as wf
from tests.polling import wait_until


def kinds(run: wf.Run) -> list[tuple[str, str | None]]:
    return [(e.kind, e.node_id) for e in run.history()]


def event(run: wf.Run, kind: str, node_id: str | None = None) -> wf.Event:
    found = [e for e in run.history() if e.kind == kind and node_id in (e.node_id, None)]
    assert len(found) == 1, (kind, node_id, kinds(run))
    return found[0]


def position(run: wf.Run, kind: str, node_id: str | None = None) -> int:
    return kinds(run).index((kind, node_id))


def draining(run: wf.Run) -> bool:
    return any(e.kind == "run.draining" for e in run.history())


class Gate:
    """An activity body that blocks until the test opens the gate (and says when it started)."""

    def __init__(self, result: Any = None, *, cooperative: bool = False) -> None:
        self.started = threading.Event()
        self.open = threading.Event()
        self.ended = threading.Event()
        self.result = result
        self.cooperative = cooperative

    def __call__(self, ctx: wf.ActivityContext[dict[str, Any]]) -> Any:
        self.started.set()
        try:
            assert self.open.wait(20), "the test never opened the gate"
            if self.cooperative:
                ctx.raise_if_cancelled()
            ctx.data[ctx.node_id] = "done"
            return self.result
        finally:
            self.ended.set()


def fail_after(gate: Gate) -> Callable[[wf.ActivityContext[Any]], None]:
    def bad(ctx: wf.ActivityContext[Any]) -> None:
        assert gate.started.wait(10)  # the sibling is in flight when this fails
        raise RuntimeError("warehouse offline")

    return bad


def slow_and_bad(*, bad_first: bool = False) -> wf.Workflow:
    def bad(b: wf.Steps) -> None:
        b.then("bad", max_attempts=1).on_failure("terminate")

    def slow(b: wf.Steps) -> None:
        b.then("slow")

    return wf.Workflow("w").start_with().parallel(*((bad, slow) if bad_first else (slow, bad)))


def test_a_failing_branch_fails_the_run_only_after_its_sibling_in_flight_ended(
    engine, acts
) -> None:
    slow = Gate({"shipped": 1})
    acts.add("slow", slow)
    acts.add("bad", fail_after(slow))
    engine.register(slow_and_bad())
    run = engine.start("w", {})
    engine.start_workers(2)
    try:
        wait_until(lambda: draining(run), "the run drains")
        assert run.status == wf.RunStatus.RUNNING, "the run ended before 'slow' did"
        assert "run.failed" not in [k for k, _ in kinds(run)]
        assert run.explain() == (
            "ending: waiting for 1 attempt in flight to stop ('slow' attempt 1); "
            "then it fails: RuntimeError: warehouse offline"
        )
        stopping = run.view().tokens[event(run, "run.draining").detail["tokens"][0]]
        assert (stopping.node_id, stopping.state) == ("slow", wf.TokenState.CANCELLING)
        jobs = f"SELECT node_id, status FROM wf_jobs WHERE run_id = '{run.id}'"
        wait_until(lambda: engine.sql(jobs).fetchall() == [("slow", "cancelling")], "wf_jobs")
        slow.open.set()
        with pytest.raises(wf.WorkflowFailed, match="warehouse offline"):
            run.result(timeout=10)
    finally:
        slow.open.set()
        engine.stop()

    assert slow.ended.is_set()
    completed = event(run, "step.completed", "slow")
    assert completed.detail == {"after_cancel": True}
    assert completed.output == {"shipped": 1}
    assert position(run, "step.completed", "slow") < position(run, "run.failed", "bad")
    assert position(run, "run.draining", "bad") < position(run, "step.completed", "slow")
    assert run.data == {"slow": "done"}, "the outcome of the attempt is recorded, data included"
    assert run.explain().startswith("failed: RuntimeError: warehouse offline")
    assert engine.sql(f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'").fetchall() == []


def test_inline_siblings_of_the_same_batch_are_recorded_before_the_run_fails(engine, acts) -> None:
    acts.add("slow", lambda ctx: {"shipped": 1})
    acts.add("bad", lambda ctx: (_ for _ in ()).throw(RuntimeError("warehouse offline")))
    engine.register(slow_and_bad(bad_first=True))  # bad's result is applied first
    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert position(run, "step.completed", "slow") < position(run, "run.failed", "bad")
    assert event(run, "step.completed", "slow").detail == {"after_cancel": True}


def test_attempts_queued_but_not_started_do_not_start_once_the_run_is_ending(
    open_engine, acts
) -> None:
    acts.add("bad", lambda ctx: (_ for _ in ()).throw(RuntimeError("warehouse offline")))
    acts.noop("later-1", "later-2")

    def bad(b: wf.Steps) -> None:
        b.then("bad", max_attempts=1).on_failure("terminate")

    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(bad, lambda b: b.then("later-1"), lambda b: b.then("later-2"))
    )
    engine = open_engine(batch_size=1)  # one attempt per round: the others wait their turn
    engine.register(flow)
    run = engine.start("w", {})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.FAILED

    assert acts.names() == ["bad"], "a cancelled attempt that had not started ran anyway"
    for node in ("later-1", "later-2"):
        cancelled = event(run, "step.cancelled", node)
        assert cancelled.detail == {"after_cancel": True}
        assert position(run, "step.cancelled", node) < position(run, "run.failed", "bad")


def test_cancel_waits_for_the_attempt_in_flight_to_stop(engine, acts) -> None:
    long = Gate(cooperative=True)
    acts.add("long", long)
    engine.register(wf.Workflow("w").start_with("long"))
    run = engine.start("w", {})
    engine.start_workers(1)
    try:
        assert long.started.wait(10)
        engine.cancel(run.id, actor="ops", reason="customer left")
        assert run.status == wf.RunStatus.RUNNING
        assert run.explain() == (
            "ending: waiting for 1 attempt in flight to stop ('long' attempt 1); "
            "then it is cancelled"
        )
        assert engine.signal("nothing", None, {}) is False
        long.open.set()
        wait_until(lambda: run.status == wf.RunStatus.CANCELLED, "the run is cancelled")
    finally:
        long.open.set()
        engine.stop()

    cancelled = event(run, "step.cancelled", "long")
    assert cancelled.detail == {"after_cancel": True}
    assert "Cancelled" in (cancelled.error or "")
    assert position(run, "step.cancelled", "long") < position(run, "run.cancelled")
    assert event(run, "run.cancelled").actor == "ops"
    assert run.data == {}, "the attempt stopped before it changed anything"


def test_a_saga_unwind_compensates_a_sibling_that_completes_during_the_drain(engine, acts) -> None:
    ship = Gate({"parcel": "p-1"})
    acts.add("ship", ship)
    acts.noop("quick", "unship")

    def bill(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("card declined")

    acts.add("bill", bill)

    def body(s: wf.Steps) -> None:
        s.parallel(
            lambda b: b.then("ship").compensate_with("unship"),
            lambda b: b.then("quick"),
            join="any",
        )
        s.then("bill", max_attempts=1)

    engine.register(wf.Workflow("w").start_with().saga(body, id="order"))
    run = engine.start("w", {})
    engine.start_workers(2)
    try:
        # quick satisfies the join while ship is still running; bill then fails for good
        wait_until(lambda: draining(run), "the unwind waits for 'ship'")
        assert run.status == wf.RunStatus.COMPENSATING
        assert acts.count("unship") == 0
        assert "then its saga unwinds" in run.explain()
        ship.open.set()
        with pytest.raises(wf.WorkflowFailed, match="card declined"):
            run.result(timeout=10)
    finally:
        ship.open.set()
        engine.stop()

    assert acts.names() == ["ship", "quick", "bill", "unship"]
    shipped = event(run, "step.cancelled", "ship")
    assert shipped.detail == {"after_cancel": True, "completed": True}
    assert position(run, "step.cancelled", "ship") < position(run, "saga.unwinding", "bill")
    assert event(run, "saga.unwinding", "bill").detail["steps"] == ["ship"]
    assert position(run, "compensation.completed", "ship") < position(run, "run.failed", "bill")


def test_a_hung_sibling_is_abandoned_after_the_drain_timeout(open_engine, acts, clock) -> None:
    hung = Gate()
    acts.add("slow", hung)
    acts.add("bad", fail_after(hung))
    engine = open_engine(drain_timeout="5s")
    engine.register(slow_and_bad())
    run = engine.start("w", {})
    engine.start_workers(2)
    try:
        wait_until(lambda: draining(run), "the run drains")
        clock.advance("4s")
        time.sleep(0.2)
        assert run.status == wf.RunStatus.RUNNING
        clock.advance("2s")
        wait_until(lambda: run.status == wf.RunStatus.FAILED, "the run fails")
        assert not hung.ended.is_set()
    finally:
        hung.open.set()
        engine.stop()

    abandoned = event(run, "step.abandoned", "slow")
    assert abandoned.detail == {"after_cancel": True, "reason": "deadline"}
    assert "did not stop within 5 seconds" in (abandoned.error or "")
    assert position(run, "step.abandoned", "slow") < position(run, "run.failed", "bad")
    assert "step.completed" not in [k for k, _ in kinds(run)]


def test_the_drain_deadline_of_a_step_is_its_attempt_timeout(open_engine, acts, clock) -> None:
    hung = Gate()
    acts.add("slow", hung)
    acts.add("bad", fail_after(hung))
    engine = open_engine()  # the engine-wide drain timeout stays 60 s

    def bad(b: wf.Steps) -> None:
        b.then("bad", max_attempts=1).on_failure("terminate")

    engine.register(
        wf.Workflow("w").start_with().parallel(lambda b: b.then("slow", attempt_timeout="2s"), bad)
    )
    run = engine.start("w", {})
    engine.start_workers(2)
    try:
        wait_until(lambda: draining(run), "the run drains")
        clock.advance("3s")
        wait_until(lambda: run.status == wf.RunStatus.FAILED, "the run fails")
    finally:
        hung.open.set()
        engine.stop()
    assert "within 2 seconds" in (event(run, "step.abandoned", "slow").error or "")


def test_an_engine_restarted_during_the_drain_finishes_the_end(open_engine, acts) -> None:
    hung = Gate()
    acts.add("slow", hung)
    acts.add("bad", fail_after(hung))
    first = open_engine()
    first.register(slow_and_bad())
    run = first.start("w", {})
    first.start_workers(2)
    try:
        wait_until(lambda: draining(run), "the run drains")
        # the engine stops without waiting for the hung attempt (as a killed process would)
        first.runtime.scheduler.stop(timeout=0.2)
        first.close()

        second = open_engine()
        second.run_until_idle()
        again = second.run(run.id)
        assert again.status == wf.RunStatus.FAILED
    finally:
        hung.open.set()

    abandoned = event(again, "step.abandoned", "slow")
    assert abandoned.detail == {"after_cancel": True, "reason": "engine stopped"}
    assert "the engine stopped while attempt 1 of 'slow'" in (abandoned.error or "")
    assert position(again, "step.abandoned", "slow") < position(again, "run.failed", "bad")
    rows = second.sql(f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'").fetchall()
    assert rows == [], "the drain timer of the abandoned attempt is gone"


def test_cancelling_a_suspended_run_waits_for_a_sibling_still_in_flight(engine, acts) -> None:
    slow = Gate({"shipped": 1})
    acts.add("slow", slow)
    acts.add("bad", fail_after(slow))

    def bad(b: wf.Steps) -> None:
        b.then("bad", max_attempts=1).on_failure("suspend")

    engine.register(wf.Workflow("w").start_with().parallel(lambda b: b.then("slow"), bad))
    run = engine.start("w", {})
    engine.start_workers(2)
    try:
        wait_until(lambda: run.status == wf.RunStatus.SUSPENDED, "the run is suspended")
        engine.cancel(run.id, actor="ops")
        assert run.status == wf.RunStatus.RUNNING, "the run ended before 'slow' did"
        assert run.explain().startswith("ending: waiting for 1 attempt in flight to stop")
        slow.open.set()
        wait_until(lambda: run.status == wf.RunStatus.CANCELLED, "the run is cancelled")
    finally:
        slow.open.set()
        engine.stop()

    assert event(run, "step.completed", "slow").detail == {"after_cancel": True}
    assert position(run, "step.completed", "slow") < position(run, "run.cancelled")


def test_the_other_waits_of_a_draining_run_refuse_signals(engine, acts) -> None:
    slow = Gate()
    acts.add("slow", slow)
    acts.add("bad", fail_after(slow))
    acts.noop("after-signal")

    def bad(b: wf.Steps) -> None:
        b.then("bad", max_attempts=1).on_failure("terminate")

    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(
            lambda b: b.then("slow"),
            lambda b: b.wait_for_signal("go", correlate="ref").then("after-signal"),
            bad,
        )
    )
    engine.register(flow)
    run = engine.start("w", {"ref": "r-1"})
    engine.start_workers(2)
    try:
        wait_until(lambda: draining(run), "the run drains")
        assert engine.signal("go", "r-1", {}) is False
        assert engine.waiting() == []
        slow.open.set()
        wait_until(lambda: run.status == wf.RunStatus.FAILED, "the run fails")
    finally:
        slow.open.set()
        engine.stop()
    assert acts.count("after-signal") == 0


def test_a_drained_for_each_cell_keeps_its_output_under_its_cell(engine, acts) -> None:
    def body(ctx: wf.ActivityContext[dict[str, Any]]) -> dict[str, Any]:
        if ctx.item == "bad":
            raise RuntimeError("bad item")
        return {"item": ctx.item}

    acts.add("cell", body)
    flow = (
        wf.Workflow("drain-cells", 1)
        .start_with()
        .for_each("items", lambda b: b.then("cell", max_attempts=1).on_failure("terminate"))
    )
    engine.register(flow)
    run = engine.start("drain-cells", {"items": ["bad", "x", "y"]})
    engine.run_until_idle()  # inline: one batch; the bad cell's failure is applied first
    assert run.status == wf.RunStatus.FAILED
    assert run.outputs["cell"] == {"1": {"item": "x"}, "2": {"item": "y"}}
    late = [e for e in run.history() if e.kind == "step.completed"]
    assert [e.detail["after_cancel"] for e in late] == [True, True]
