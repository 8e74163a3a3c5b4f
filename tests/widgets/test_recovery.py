"""Recovery: each action asks "Really ...?" first — only Yes calls the engine — and is recorded
with the actor; the buttons a run gets depend on why it stopped."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import wfkit as wf
from tests.polling import wait_until
from wfkit.widgets import Recovery

NO_WAIT = {"retry_delay": timedelta(0), "jitter": 0}


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def saga_statuses(engine: wf.Engine, run: wf.Run) -> dict[str, str]:
    rows = engine.sql(
        f"SELECT node_id, status FROM wf_saga_steps WHERE run_id = '{run.id}' ORDER BY position"
    ).fetchall()
    return dict(rows)


@pytest.fixture
def on_compensation(engine: wf.Engine, acts: Any) -> wf.Run:
    """A checkout whose 'book' failed and whose 'refund' compensation failed twice: suspended."""
    acts.noop("reserve", "charge", "release", "receipt", "refund", "book")
    acts.broken.update(book=True, refund=True)

    def body(s: wf.Steps) -> None:
        s.then("reserve").compensate_with("release")
        s.then("charge").compensate_with("refund", policy={"max_attempts": 2, **NO_WAIT})
        s.then("book", max_attempts=1)

    engine.register(wf.Workflow("checkout").start_with().saga(body, id="checkout").then("receipt"))
    run = engine.start("checkout", {"order": "o-1"})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.SUSPENDED
    return run


@pytest.fixture
def on_step(engine: wf.Engine, acts: Any) -> wf.Run:
    """A run whose 'fetch' step failed with on_failure='suspend'."""
    acts.noop("fetch", "store")
    acts.broken["fetch"] = True
    engine.register(
        wf.Workflow("sync").start_with("fetch", max_attempts=1).on_failure("suspend").then("store")
    )
    run = engine.start("sync", {"n": 1})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.SUSPENDED
    return run


def test_a_run_suspended_on_a_compensation_offers_retry_skip_abandon_and_cancel(
    engine, on_compensation
) -> None:
    recovery = Recovery(engine, actor="ana", refresh_every=None)

    row = recovery.row(on_compensation.id)
    assert row.kind == "compensation"
    assert list(row.buttons) == ["retry", "skip", "abandon", "cancel"]
    assert "wfkit-recovery-skip" in row.buttons["skip"]._dom_classes
    assert f"wfkit-run-{on_compensation.id}" in row._dom_classes
    assert "refund" in row.children[0].value  # the reason, from explain()
    assert recovery.summary.value == "1 suspended, 0 failed"


def test_skip_asks_first_and_no_changes_nothing(engine, on_compensation) -> None:
    recovery = Recovery(engine, actor="ana", refresh_every=None)
    before = len(on_compensation.history())

    recovery.row(on_compensation.id).buttons["skip"].click()

    assert recovery.confirm.pending == (
        f"Really skip the failed compensation of run {on_compensation.id}?"
    )
    assert recovery.confirm.layout.display == "flex"
    assert len(on_compensation.history()) == before  # asking is not acting

    recovery.confirm.no_button.click()

    assert recovery.confirm.pending is None
    assert recovery.confirm.layout.display == "none"
    assert len(on_compensation.history()) == before
    assert on_compensation.status == wf.RunStatus.SUSPENDED
    assert saga_statuses(engine, on_compensation)["charge"] != "skipped"


def test_skip_then_yes_records_the_decision_with_the_actor(engine, acts, on_compensation) -> None:
    recovery = Recovery(engine, actor="ana", refresh_every=None)

    recovery.row(on_compensation.id).buttons["skip"].click()
    recovery.confirm.yes_button.click()

    skipped = events(on_compensation, "compensation.skipped")
    assert [(e.node_id, e.actor) for e in skipped] == [("charge", "ana")]
    assert saga_statuses(engine, on_compensation)["charge"] == "skipped"
    assert recovery.message.kind == "ok" and "ana" in recovery.message.text
    engine.run_until_idle()
    assert acts.calls[-1] == "release"  # the unwind went on
    assert on_compensation.status == wf.RunStatus.FAILED
    assert saga_statuses(engine, on_compensation) == {
        "reserve": "compensated",
        "charge": "skipped",
    }


def test_retry_with_the_cause_fixed_finishes_the_unwind(engine, acts, on_compensation) -> None:
    recovery = Recovery(engine, actor="bo", refresh_every=None)
    acts.broken["refund"] = False

    recovery.row(on_compensation.id).buttons["retry"].click()
    recovery.confirm.yes_button.click()
    engine.run_until_idle()

    assert [e.actor for e in events(on_compensation, "compensation.retried")] == ["bo"]
    assert set(saga_statuses(engine, on_compensation).values()) == {"compensated"}
    assert on_compensation.status == wf.RunStatus.FAILED
    recovery.refresh()
    assert recovery.row(on_compensation.id).kind == "failed"


def test_abandon_fails_the_run_at_once(engine, on_compensation) -> None:
    recovery = Recovery(engine, actor="cy", refresh_every=None)

    recovery.row(on_compensation.id).buttons["abandon"].click()
    assert "abandon the unwind" in recovery.confirm.pending
    recovery.confirm.yes_button.click()

    assert [e.actor for e in events(on_compensation, "compensation.abandoned")] == ["cy"]
    assert on_compensation.status == wf.RunStatus.FAILED
    assert "abandoned by cy" in (events(on_compensation, "run.failed")[0].error or "")
    assert list(recovery.row(on_compensation.id).buttons) == ["restart"]


def test_a_suspended_step_offers_resume_and_resume_records_the_actor(engine, acts, on_step) -> None:
    recovery = Recovery(engine, actor="ana", refresh_every=None)
    row = recovery.row(on_step.id)
    assert row.kind == "step"
    assert list(row.buttons) == ["resume", "cancel"]

    acts.broken["fetch"] = False
    row.buttons["resume"].click()
    assert recovery.confirm.pending == f"Really resume run {on_step.id}?"
    recovery.confirm.yes_button.click()
    engine.run_until_idle()

    assert [e.actor for e in events(on_step, "run.resumed")] == ["ana"]
    assert on_step.status == wf.RunStatus.COMPLETED
    assert acts.calls == ["fetch", "fetch", "store"]
    assert recovery.rows == {}


def test_cancel_records_the_actor(engine, on_step) -> None:
    recovery = Recovery(engine, actor="ana", refresh_every=None)

    recovery.row(on_step.id).buttons["cancel"].click()
    recovery.confirm.yes_button.click()

    cancelled = events(on_step, "run.cancelled")
    assert [e.actor for e in cancelled] == ["ana"]
    assert "ana" in cancelled[0].detail["reason"]
    assert on_step.status == wf.RunStatus.CANCELLED
    assert on_step.id not in recovery.rows  # cancelled runs are not listed


def test_restart_as_new_starts_a_fresh_run_recorded_with_the_actor(
    engine, acts, on_compensation
) -> None:
    engine.recover_compensation(on_compensation.id, action="abandon", actor="ops")
    recovery = Recovery(engine, actor="ana", refresh_every=None)
    acts.broken.clear()

    recovery.row(on_compensation.id).buttons["restart"].click()
    assert recovery.confirm.pending == f"Really restart run {on_compensation.id} as new?"
    recovery.confirm.yes_button.click()

    restarted = events(on_compensation, "run.restarted")
    assert [e.actor for e in restarted] == ["ana"]
    new = engine.run(restarted[0].detail["new_run"])
    assert new.id in recovery.message.text
    assert events(new, "run.started")[0].actor == "ana"
    assert [r.parent_run_id for r in engine.runs() if r.run_id == new.id] == [on_compensation.id]
    engine.run_until_idle()
    assert new.status == wf.RunStatus.COMPLETED
    assert new.data == {"order": "o-1"}


def test_without_an_actor_nothing_is_asked_or_done(engine, on_step) -> None:
    recovery = Recovery(engine, actor=" ", refresh_every=None)

    recovery.row(on_step.id).buttons["cancel"].click()

    assert recovery.confirm.pending is None
    assert recovery.message.kind == "error" and "actor" in recovery.message.text
    assert on_step.status == wf.RunStatus.SUSPENDED


def test_an_action_the_engine_refuses_shows_why(engine, acts, on_step) -> None:
    recovery = Recovery(engine, actor="ana", refresh_every=None)
    recovery.row(on_step.id).buttons["resume"].click()
    engine.cancel(on_step.id, actor="someone-else")  # between the click and the Yes

    recovery.confirm.yes_button.click()

    assert recovery.message.kind == "error"
    assert "not suspended" in recovery.message.text
    assert on_step.status == wf.RunStatus.CANCELLED
    assert events(on_step, "run.resumed") == []


def test_retry_run_goes_on_with_a_failed_run_from_where_it_failed(engine, acts) -> None:
    acts.noop("fetch", "store")
    acts.broken["store"] = True
    engine.register(wf.Workflow("sync").start_with("fetch").then("store", max_attempts=1))
    run = engine.start("sync", {"n": 1})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.FAILED
    recovery = Recovery(engine, actor="ana", refresh_every=None)
    row = recovery.row(run.id)
    assert list(row.buttons) == ["retry-run", "restart"]
    assert "wfkit-recovery-retry-run" in row.buttons["retry-run"]._dom_classes
    acts.broken.clear()

    row.buttons["retry-run"].click()
    assert recovery.confirm.pending == f"Really retry failed run {run.id} from where it failed?"
    assert events(run, "run.retried") == []  # only Yes acts
    recovery.confirm.yes_button.click()

    assert [e.actor for e in events(run, "run.retried")] == ["ana"]
    assert recovery.message.text == f"retried run {run.id} from where it failed as ana"
    assert run.id not in recovery.rows  # running again: not listed
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.calls == ["fetch", "store", "store"]  # fetch did not run again


def test_cancelling_a_run_that_ended_meanwhile_says_so_and_changes_nothing(engine, on_step) -> None:
    recovery = Recovery(engine, actor="ana", refresh_every=None)
    recovery.row(on_step.id).buttons["cancel"].click()
    engine.cancel(on_step.id, actor="someone-else")  # between the click and the Yes
    before = len(on_step.history())

    recovery.confirm.yes_button.click()

    assert recovery.message.kind == "error"
    assert "had already ended (cancelled); nothing was cancelled" in recovery.message.text
    assert len(on_step.history()) == before
    assert [e.actor for e in events(on_step, "run.cancelled")] == ["someone-else"]


# --- live updates -----------------------------------------------------------------------------


def test_a_run_that_fails_appears_without_refresh_and_a_pending_question_survives(
    engine, acts, on_step
) -> None:
    recovery = Recovery(engine, actor="ana", refresh_every=0.05)
    row = recovery.row(on_step.id)
    row.buttons["resume"].click()  # pending while the list updates
    engine.start_workers(threads=1)
    acts.add("explode")
    acts.broken["explode"] = True
    engine.register(wf.Workflow("bad").start_with("explode", max_attempts=1))
    failing = engine.start("bad", {})

    wait_until(lambda: failing.id in recovery.rows, "the failed run listed")

    assert recovery.summary.value == "1 suspended, 1 failed"
    assert recovery.count == 2
    assert recovery.row(on_step.id) is row  # unchanged: the same row, not rebuilt
    assert recovery.confirm.pending == f"Really resume run {on_step.id}?"
    assert on_step.status == wf.RunStatus.SUSPENDED
    recovery.close()
    assert recovery.live is not None and not recovery.live.running
