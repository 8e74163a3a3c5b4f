"""``engine.cancel`` says what it did: what pending work it cancelled, which attempts in flight
it asked to stop, and where the run stands; an ended run is left as it is."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import wfkit as wf
from tests.engine.helpers import run_to_idle
from tests.polling import wait_until

from .conftest import Activities
from .test_drain import Gate


def event_count(engine: wf.Engine) -> int:
    return int(engine.sql("SELECT count(*) FROM wf_events").fetchall()[0][0])


def waiting_everywhere() -> wf.Workflow:
    """A run parked on a wait, an approval and a delay, in three branches."""
    return (
        wf.Workflow("parked")
        .start_with()
        .parallel(
            lambda b: b.wait_for_signal("paid", correlate="order"),
            lambda b: b.approval("review"),
            lambda b: b.delay("1d"),
        )
    )


def test_cancelling_a_parked_run_counts_what_was_pending(engine) -> None:
    run = run_to_idle(engine, waiting_everywhere(), {"order": "o-1"})
    assert run.status == wf.RunStatus.WAITING

    done = engine.cancel(run.id, actor="ops", reason="duplicate")

    assert done == wf.CancelResult(run.id, 3, 0, False, wf.RunStatus.CANCELLED)
    assert run.status == wf.RunStatus.CANCELLED
    assert engine.waiting() == []
    assert engine.sql("SELECT count(*) FROM wf_timers").fetchall()[0][0] == 0
    assert str(done) == f"run {run.id}: 3 pending steps cancelled; the run is cancelled"


def test_a_step_waiting_to_retry_is_pending_work(engine, acts: Activities) -> None:
    def flaky(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("not yet")

    acts.add("flaky", flaky)
    run = run_to_idle(engine, wf.Workflow("w").start_with("flaky", retry_delay="1h"))

    done = engine.cancel(run.id)

    assert (done.pending_cancelled, done.attempts_stopping) == (1, 0)
    assert done.status == wf.RunStatus.CANCELLED
    assert acts.count("flaky") == 1


@pytest.mark.parametrize("how", ["completed", "failed", "cancelled"])
def test_cancelling_an_ended_run_writes_nothing_and_says_it_had_ended(
    engine, acts: Activities, how: str
) -> None:
    def bad(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("broken")

    acts.noop("ok")
    acts.add("bad", bad)
    engine.register(wf.Workflow("ok").start_with("ok"))
    engine.register(wf.Workflow("bad").start_with("bad", max_attempts=1))
    engine.register(wf.Workflow("wait").start_with().approval("sign"))
    run = engine.start({"completed": "ok", "failed": "bad", "cancelled": "wait"}[how])
    engine.run_until_idle()
    if how == "cancelled":
        engine.cancel(run.id, actor="first")
    before = event_count(engine)
    history = run.history()

    done = engine.cancel(run.id, actor="second", reason="again")

    assert done == wf.CancelResult(run.id, 0, 0, True, wf.RunStatus(how))
    assert run.status == wf.RunStatus(how)
    assert event_count(engine) == before
    assert run.history() == history
    assert str(done) == f"run {run.id} had already ended ({how}); nothing to cancel"


def test_cancelling_an_unknown_run_still_raises(engine) -> None:
    with pytest.raises(wf.UsageError, match="there is no run 'nosuchrun'"):
        engine.cancel("nosuchrun")


def test_an_attempt_in_flight_is_asked_to_stop_and_the_run_ends_once_it_has(
    engine, acts: Activities
) -> None:
    long = Gate(cooperative=True)
    acts.add("long", long)
    engine.register(
        wf.Workflow("w").start_with().parallel(lambda b: b.then("long"), lambda b: b.delay("1h"))
    )
    run = engine.start("w", {})
    engine.start_workers(1)
    try:
        assert long.started.wait(10)
        done = engine.cancel(run.id, actor="ops")
        assert done == wf.CancelResult(run.id, 1, 1, False, wf.RunStatus.RUNNING)
        assert "1 attempt in flight asked to stop" in str(done)
        # asked again while it drains: nothing more is pending, the attempt still stops
        again = engine.cancel(run.id, actor="ops")
        assert (again.pending_cancelled, again.attempts_stopping) == (0, 1)
        assert not again.already_ended
        long.open.set()
        wait_until(lambda: run.status == wf.RunStatus.CANCELLED, "the run is cancelled")
    finally:
        long.open.set()
        engine.stop()
    assert engine.cancel(run.id).already_ended


def test_the_result_is_a_frozen_record(engine) -> None:
    run = run_to_idle(engine, wf.Workflow("w").start_with().approval("sign"))
    done = engine.cancel(run.id)

    with pytest.raises(dataclasses.FrozenInstanceError):
        done.status = wf.RunStatus.RUNNING  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(done)] == [
        "run_id",
        "pending_cancelled",
        "attempts_stopping",
        "already_ended",
        "status",
    ]
