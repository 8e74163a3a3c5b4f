"""Events: every transition is a wf_events row; history() reads them in sequence order."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import wfkit as wf


def kinds(run: wf.Run) -> list[str]:
    return [e.kind for e in run.history()]


def sql_events(engine: wf.Engine, run: wf.Run) -> list[tuple[Any, ...]]:
    return engine.sql(
        "SELECT seq, kind, node_id, attempt, actor FROM wf_events "
        f"WHERE run_id = '{run.id}' ORDER BY seq"
    ).fetchall()


class PaymentRejected(RuntimeError):
    """Raised by the test activity."""


def test_a_completed_run_has_one_event_per_transition(engine, acts) -> None:
    acts.add("a", lambda ctx: {"x": 1})
    acts.noop("b")
    engine.register(wf.Workflow("w").start_with("a").then("b"))

    run = engine.start("w", {}, actor="ana")
    engine.run_until_idle()

    assert kinds(run) == ["run.started", "step.completed", "step.completed", "run.completed"]
    history = run.history()
    assert history[0].actor == "ana"
    assert history[0].detail == {"workflow": "w", "version": 1}
    assert [(e.node_id, e.attempt, e.output) for e in history[1:3]] == [
        ("a", 1, {"x": 1}),
        ("b", 1, None),
    ]
    assert all(e.started_at is not None and e.started_at <= e.at for e in history[1:3])
    assert all(e.run_id == run.id for e in history)
    assert sql_events(engine, run) == [
        (1, "run.started", None, None, "ana"),
        (2, "step.completed", "a", 1, None),
        (3, "step.completed", "b", 1, None),
        (4, "run.completed", None, None, None),
    ]
    summary = engine.sql(
        f"SELECT status, actor, ended_at IS NOT NULL FROM wf_instances WHERE run_id = '{run.id}'"
    ).fetchall()
    assert summary == [("completed", "ana", True)]


def test_failed_attempts_record_the_error_with_its_traceback(engine, acts) -> None:
    def charge(ctx: wf.ActivityContext[Any]) -> None:
        raise PaymentRejected(f"card refused on attempt {ctx.attempt}")

    acts.add("charge", charge)
    engine.register(wf.Workflow("w").start_with("charge", max_attempts=2, retry_delay="0s"))

    run = engine.start("w", {})
    engine.run_until_idle()

    assert kinds(run) == ["run.started", "step.failed", "step.failed", "run.failed"]
    failed = [e for e in run.history() if e.kind == "step.failed"]
    assert [e.attempt for e in failed] == [1, 2]
    for event, attempt in zip(failed, (1, 2), strict=True):
        assert event.error is not None
        assert event.error.startswith("Traceback (most recent call last)")
        assert f"PaymentRejected: card refused on attempt {attempt}" in event.error
        assert "in charge" in event.error, "the traceback names the activity's frame"
    assert "retry_in_s" in failed[0].detail
    assert "retry_in_s" not in (failed[1].detail or {})
    end = run.history()[-1]
    assert "Traceback" in (end.error or "")
    assert end.node_id == "charge"
    rows = engine.sql(
        "SELECT count(*) FROM wf_events "
        f"WHERE run_id = '{run.id}' AND kind = 'step.failed' AND error LIKE 'Traceback%'"
    ).fetchall()
    assert rows == [(2,)]
    summary = engine.sql(
        f"SELECT status, error FROM wf_instances WHERE run_id = '{run.id}'"
    ).fetchall()
    assert summary[0][0] == "failed"
    assert "PaymentRejected: card refused on attempt 2" in summary[0][1]


def test_cancel_records_the_actor_and_stops_the_run(engine, acts, clock) -> None:
    acts.noop("a", "b")
    engine.register(wf.Workflow("w").start_with("a").delay("1d").then("b"))
    run = engine.start("w", {})
    engine.run_until_idle()

    engine.cancel(run.id, actor="ops-bob", reason="customer withdrew")

    assert run.status == wf.RunStatus.CANCELLED
    cancelled = run.history()[-1]
    assert cancelled.kind == "run.cancelled"
    assert cancelled.actor == "ops-bob"
    assert cancelled.detail == {"reason": "customer withdrew"}
    assert engine.sql(f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'").fetchall() == []
    clock.advance("2d")
    engine.run_until_idle()
    assert acts.names() == ["a"]
    with pytest.raises(wf.WorkflowFailed, match="cancelled"):
        run.result(timeout=1)
    assert engine.cancel(run.id, actor="ops-bob").already_ended  # left as it is
    assert [e.kind for e in run.history()].count("run.cancelled") == 1
    assert [r.run_id for r in engine.runs(status="cancelled")] == [run.id]


def test_cancel_removes_an_open_wait(engine, acts) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("w").start_with("a").wait_for_signal("go", correlate="k"))
    run = engine.start("w", {"k": "1"})
    engine.run_until_idle()

    engine.cancel(run.id, actor="ana")

    assert engine.waiting() == []
    assert engine.signal("go", "1", {}) is False
    assert run.history()[-1].actor == "ana"


def test_cancel_tells_an_attempt_in_flight_to_stop(engine, acts) -> None:
    entered, exited = threading.Event(), threading.Event()
    outcome: list[str] = []

    def long_job(ctx: wf.ActivityContext[Any]) -> None:
        entered.set()
        try:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                ctx.raise_if_cancelled()
                time.sleep(0.01)
            outcome.append("ran to the end")
        except wf.Cancelled:
            outcome.append("cancelled")
            raise
        finally:
            exited.set()

    acts.add("long", long_job)
    acts.noop("after")
    engine.register(wf.Workflow("w").start_with("long").then("after"))
    engine.start_workers(2)
    try:
        run = engine.start("w", {})
        assert entered.wait(5)
        engine.cancel(run.id, actor="ana")
        assert exited.wait(2), "the attempt was not told to stop"
    finally:
        engine.stop()

    assert outcome == ["cancelled"]
    assert run.status == wf.RunStatus.CANCELLED
    assert acts.names() == ["long"]
    assert kinds(run)[-1] == "run.cancelled"
    assert kinds(run).count("run.cancelled") == 1


def test_cancelling_an_unknown_run_says_how_to_find_runs(engine) -> None:
    with pytest.raises(wf.UsageError, match=r"engine\.runs\(\)"):
        engine.cancel("no-such-run", actor="ana")


def test_history_is_in_sequence_order_and_matches_the_table(engine, acts, clock) -> None:
    acts.add("item", lambda ctx: {"i": ctx.loop_index})
    acts.noop("a", "b")
    flow = (
        wf.Workflow("w")
        .start_with("a")
        .parallel(
            lambda b: b.for_each("items", lambda s: s.then("item")),
            lambda b: b.delay("1h").then("b"),
        )
    )
    engine.register(flow)
    run = engine.start("w", {"items": [1, 2, 3]})
    engine.run_until_idle()
    clock.advance("1h")
    engine.run_until_idle()

    history = run.history()
    seqs = [e.seq for e in history]
    assert seqs == list(range(1, len(history) + 1))
    assert [(e.seq, e.kind) for e in history] == [(r[0], r[1]) for r in sql_events(engine, run)]
    assert history[0].kind == "run.started"
    assert history[-1].kind == "run.completed"
    ats = [e.at for e in history]
    assert ats == sorted(ats)
    items = [e for e in history if e.kind == "step.completed" and e.node_id == "item"]
    assert sorted(e.detail["loop_index"] for e in items) == [0, 1, 2]


def test_an_ended_run_numbers_the_events_it_gains_on_from_its_last(engine, acts, open_engine):
    """A run that ended gains events (each restart_as_new writes run.restarted on it) while its
    summary row stands: the next number comes from its log, never again from the summary, or
    two restarts would share one number and history() could list them either way round."""

    def boom(ctx: Any) -> None:
        raise PaymentRejected("no")

    acts.add("boom", boom)
    engine.register(wf.Workflow("fails").start_with("boom", max_attempts=1))
    parent = engine.start("fails", {})
    engine.run_until_idle()
    first = engine.restart_as_new(parent.id)
    second = engine.restart_as_new(parent.id)
    engine.run_until_idle()

    seqs = [seq for seq, *_ in sql_events(engine, parent)]
    assert seqs == list(range(1, len(seqs) + 1))
    restarts = [e.detail["new_run"] for e in parent.history() if e.kind == "run.restarted"]
    assert restarts == [first.id, second.id]

    # and once the engine is opened again, from the store alone
    engine.close()
    again = open_engine()
    third = again.restart_as_new(parent.id)
    seqs = [seq for seq, *_ in sql_events(again, again.run(parent.id))]
    assert seqs == list(range(1, len(seqs) + 1))
    history = again.run(parent.id).history()
    restarts = [e.detail["new_run"] for e in history if e.kind == "run.restarted"]
    assert restarts == [first.id, second.id, third.id]
