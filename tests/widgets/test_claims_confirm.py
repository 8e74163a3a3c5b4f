"""README.md, "Operating": the buttons that decide or change a run — in the Inbox, the Recovery
and the Dashboard's tabs of both — ask first, and only Yes acts. Every such button is clicked
here on a real engine; each question changes nothing, and No leaves the run as it was."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import wfkit as wf
from wfkit.widgets import Dashboard, Inbox, Recovery

NO_WAIT = {"retry_delay": timedelta(0), "jitter": 0}


def stopped_runs(engine: wf.Engine, acts: Any) -> dict[str, wf.Run]:
    """One run for every kind of Recovery row: suspended on a compensation, suspended on a
    step, failed (where it can be retried)."""
    acts.noop("reserve", "release", "charge", "refund", "book", "fetch", "store", "a", "b")
    acts.broken.update(book=True, refund=True, fetch=True, store=True)

    def saga(s: wf.Steps) -> None:
        s.then("reserve").compensate_with("release")
        s.then("charge").compensate_with("refund", policy={"max_attempts": 1, **NO_WAIT})
        s.then("book", max_attempts=1)

    engine.register(wf.Workflow("checkout").start_with().saga(saga, id="s").then("b"))
    engine.register(
        wf.Workflow("sync").start_with("fetch", max_attempts=1).on_failure("suspend").then("b")
    )
    engine.register(wf.Workflow("load").start_with("a").then("store", max_attempts=1))
    runs = {
        "compensation": engine.start("checkout", {}),
        "step": engine.start("sync", {}),
        "failed": engine.start("load", {}),
    }
    engine.run_until_idle()
    assert [r.status for r in runs.values()] == [
        wf.RunStatus.SUSPENDED,
        wf.RunStatus.SUSPENDED,
        wf.RunStatus.FAILED,
    ]
    return runs


def snapshot(engine: wf.Engine) -> list[tuple[str, str, int]]:
    return [(r.run_id, r.status.value, len(engine.run(r.run_id).history())) for r in engine.runs()]


@pytest.mark.parametrize("where", ["recovery", "dashboard"])
def test_every_recovery_button_asks_first_and_no_changes_nothing(engine, acts, where) -> None:
    runs = stopped_runs(engine, acts)
    if where == "recovery":
        recovery = Recovery(engine, actor="ana", refresh_every=None)
    else:
        recovery = Dashboard(engine, actor="ana", refresh_every=None).recovery
    offered = {kind: list(recovery.row(run.id).buttons) for kind, run in runs.items()}
    assert offered == {
        "compensation": ["retry", "skip", "abandon", "cancel"],
        "step": ["resume", "cancel"],
        "failed": ["retry-run", "restart"],
    }
    before = snapshot(engine)
    asked = 0
    for kind, run in runs.items():
        for action, button in recovery.row(run.id).buttons.items():
            button.click()
            question = recovery.confirm.pending
            assert question is not None and question.startswith("Really ")
            assert run.id in question, (kind, action)
            assert snapshot(engine) == before, (kind, action)  # asking is not acting
            recovery.confirm.no_button.click()
            assert recovery.confirm.pending is None
            assert snapshot(engine) == before, (kind, action)
            asked += 1
    assert asked == 8
    assert len(engine.runs()) == 3  # no restart made a new run


@pytest.mark.parametrize("where", ["inbox", "dashboard"])
def test_every_inbox_button_asks_first_and_no_changes_nothing(engine, acts, where) -> None:
    acts.noop("prepare", "publish", "invoice")
    engine.register(wf.Workflow("review").start_with("prepare").approval("review").then("publish"))
    engine.register(
        wf.Workflow("pay").start_with("invoice").wait_for_signal("paid").then("publish")
    )
    review = engine.start("review", {})
    pay = engine.start("pay", {})
    engine.run_until_idle()
    if where == "inbox":
        inbox = Inbox(engine, actor="ana", refresh_every=None)
    else:
        inbox = Dashboard(engine, actor="ana", refresh_every=None).inbox
    inbox.row(pay.id, "paid").payload.value = '{"ref": "x"}'
    before = snapshot(engine)
    clicks = [
        (review, "review", "approve", "Really approve review"),
        (review, "review", "reject", "Really reject review"),
        (pay, "paid", "send", "Really send"),
    ]
    for run, node, action, question in clicks:
        row = inbox.row(run.id, node)
        row.buttons[action].click()
        assert row.confirm.pending is not None and row.confirm.pending.startswith(question)
        assert snapshot(engine) == before, action
        row.confirm.no_button.click()
        assert snapshot(engine) == before, action
    assert sorted(w.node_id for w in engine.waiting()) == ["paid", "review"]
