"""Waits and approvals: one bookmark row, at-most-once delivery, binding, timeouts, decisions."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

import wfkit as wf


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def rows(engine: wf.Engine, sql: str) -> list[tuple[Any, ...]]:
    return engine.sql(sql).fetchall()


def _payment_flow(timeout: str | None = None) -> wf.Workflow:
    return (
        wf.Workflow("w")
        .start_with("invoice")
        .wait_for_signal(
            "paid",
            correlate="order_id",
            bind={"amount": "paid_amount", "ref": "payment.ref"},
            timeout=timeout,
            on_timeout=(lambda b: b.then("remind")) if timeout else None,
        )
        .then("ship")
    )


def test_a_wait_parks_on_one_bookmark_row_and_no_job(engine, acts, clock) -> None:
    acts.noop("invoice", "ship")
    engine.register(_payment_flow())

    run = engine.start("w", {"order_id": "o-7", "payment": {}})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.WAITING
    assert acts.names() == ["invoice"]
    marks = rows(
        engine, f"SELECT node_id, kind, name, key FROM wf_bookmarks WHERE run_id = '{run.id}'"
    )
    assert marks == [("paid", "signal", "paid", "o-7")]
    assert rows(engine, f"SELECT * FROM wf_jobs WHERE run_id = '{run.id}'") == []
    assert rows(engine, f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'") == []
    assert "waiting for signal 'paid' (key o-7)" in run.explain()
    waits = engine.waiting()
    assert [(w.run_id, w.node_id, w.kind, w.name, w.key, w.deadline) for w in waits] == [
        (run.id, "paid", "signal", "paid", "o-7", None)
    ]
    assert waits[0].since == clock.now()


def test_a_signal_resumes_the_wait_once_and_binds_its_payload(engine, acts) -> None:
    acts.add("ship", lambda ctx: {"shipping": ctx.data["paid_amount"]})
    acts.noop("invoice")
    engine.register(_payment_flow())
    run = engine.start("w", {"order_id": "o-7", "payment": {}})
    engine.run_until_idle()

    assert engine.signal("paid", "o-7", {"amount": 42, "ref": "tx-1", "extra": "x"}) is True
    assert engine.signal("paid", "o-7", {"amount": 99}) is False
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"order_id": "o-7", "payment": {"ref": "tx-1"}, "paid_amount": 42}
    assert run.outputs["ship"] == {"shipping": 42}
    assert acts.names() == ["invoice", "ship"]
    received = events(run, "signal.received")
    assert [(e.node_id, e.output) for e in received] == [
        ("paid", {"amount": 42, "ref": "tx-1", "extra": "x"})
    ]
    assert rows(engine, f"SELECT * FROM wf_bookmarks WHERE run_id = '{run.id}'") == []
    assert engine.waiting() == []


def test_a_signal_with_another_key_or_name_resumes_nothing(engine, acts) -> None:
    acts.noop("invoice", "ship")
    engine.register(_payment_flow())
    run = engine.start("w", {"order_id": "o-7", "payment": {}})
    engine.run_until_idle()

    assert engine.signal("paid", "o-8", {"amount": 1}) is False
    assert engine.signal("refunded", "o-7", {"amount": 1}) is False
    engine.run_until_idle()

    assert run.status == wf.RunStatus.WAITING
    assert acts.names() == ["invoice"]
    assert len(engine.waiting()) == 1


def test_signals_reach_the_run_their_key_correlates_with(engine, acts) -> None:
    acts.noop("invoice", "ship")
    engine.register(_payment_flow())
    first, second = engine.start_many(
        "w", [{"order_id": "o-1", "payment": {}}, {"order_id": "o-2", "payment": {}}]
    )
    engine.run_until_idle()

    assert engine.signal("paid", "o-2", {"amount": 2}) is True
    engine.run_until_idle()

    assert first.status == wf.RunStatus.WAITING
    assert second.status == wf.RunStatus.COMPLETED
    assert second.data["paid_amount"] == 2
    assert "paid_amount" not in first.data


def test_a_signal_payload_must_be_an_object(engine, acts) -> None:
    acts.noop("invoice", "ship")
    engine.register(_payment_flow())
    run = engine.start("w", {"order_id": "o-7", "payment": {}})
    engine.run_until_idle()

    with pytest.raises(wf.SignalError, match="JSON object"):
        engine.signal("paid", "o-7", ["not", "an", "object"])  # type: ignore[arg-type]
    assert run.status == wf.RunStatus.WAITING
    assert len(engine.waiting()) == 1


def test_a_wait_times_out_through_elapsed_when_the_clock_passes_its_deadline(
    engine, acts, clock
) -> None:
    acts.noop("invoice", "remind", "ship")
    engine.register(_payment_flow(timeout="3d"))
    started = clock.now()
    run = engine.start("w", {"order_id": "o-7", "payment": {}})
    engine.run_until_idle()

    assert rows(engine, f"SELECT kind, due_at FROM wf_timers WHERE run_id = '{run.id}'") == [
        ("timeout", started + timedelta(days=3))
    ]
    assert engine.waiting()[0].deadline == started + timedelta(days=3)
    assert "times out in 3 days" in run.explain()

    clock.advance("2d")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.WAITING

    clock.advance("1d")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["invoice", "remind", "ship"]
    assert [e.node_id for e in events(run, "signal.elapsed")] == ["paid"]
    assert engine.signal("paid", "o-7", {"amount": 1}) is False
    assert rows(engine, f"SELECT * FROM wf_bookmarks WHERE run_id = '{run.id}'") == []
    assert rows(engine, f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'") == []


def test_a_signal_before_the_deadline_removes_the_timeout(engine, acts, clock) -> None:
    acts.noop("invoice", "remind", "ship")
    engine.register(_payment_flow(timeout="3d"))
    run = engine.start("w", {"order_id": "o-7", "payment": {}})
    engine.run_until_idle()

    assert engine.signal("paid", "o-7", {"amount": 5}) is True
    engine.run_until_idle()
    clock.advance("4d")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["invoice", "ship"]
    assert events(run, "signal.elapsed") == []
    assert rows(engine, f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'") == []


# --- approvals --------------------------------------------------------------------------------


def _review_flow(timeout: str | None = None, id: str = "w") -> wf.Workflow:
    return (
        wf.Workflow(id)
        .start_with("prepare")
        .approval(
            "review",
            timeout=timeout,
            assignees=["finance"],
            on_reject=lambda b: b.then("rejected").end(),
            on_expire=(lambda b: b.then("expired").end()) if timeout else None,
        )
        .then("publish")
    )


def test_an_approval_parks_and_is_listed_with_its_assignees(engine, acts) -> None:
    acts.noop("prepare", "rejected", "publish")
    engine.register(_review_flow())

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.WAITING
    waits = engine.waiting()
    assert [(w.run_id, w.node_id, w.kind, w.key) for w in waits] == [
        (run.id, "review", "approval", run.id)
    ]
    assert waits[0].detail == {"assignees": ["finance"]}
    assert "waiting for approval 'review' by finance" in run.explain()
    assert rows(engine, f"SELECT * FROM wf_jobs WHERE run_id = '{run.id}'") == []


def test_approving_continues_and_records_actor_and_comment(engine, acts) -> None:
    acts.noop("prepare", "rejected", "publish")
    engine.register(_review_flow())
    run = engine.start("w", {})
    engine.run_until_idle()

    engine.approve(run.id, "review", approved=True, actor="ana", comment="looks right")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["prepare", "publish"]
    approved = events(run, "approval.approved")
    assert len(approved) == 1
    assert approved[0].actor == "ana"
    assert approved[0].output["comment"] == "looks right"
    assert approved[0].output["approved"] is True
    assert run.outputs["review"]["actor"] == "ana"
    sql_rows = rows(
        engine,
        "SELECT actor, CAST(output AS JSON) ->> 'comment' FROM wf_events "
        f"WHERE run_id = '{run.id}' AND kind = 'approval.approved'",
    )
    assert sql_rows == [("ana", "looks right")]
    assert engine.waiting() == []


def test_rejecting_takes_the_rejected_path(engine, acts) -> None:
    acts.noop("prepare", "rejected", "publish")
    engine.register(_review_flow())
    run = engine.start("w", {})
    engine.run_until_idle()

    engine.approve(run.id, "review", approved=False, actor="bo", comment="numbers are off")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["prepare", "rejected"]
    rejected = events(run, "approval.rejected")
    assert [(e.actor, e.output["comment"], e.output["approved"]) for e in rejected] == [
        ("bo", "numbers are off", False)
    ]


def test_deciding_an_approval_twice_is_refused(engine, acts) -> None:
    acts.noop("prepare", "rejected", "publish")
    engine.register(_review_flow())
    run = engine.start("w", {})
    engine.run_until_idle()
    engine.approve(run.id, "review", approved=True, actor="ana")
    engine.run_until_idle()

    with pytest.raises(wf.SignalError, match="no open approval 'review'"):
        engine.approve(run.id, "review", approved=False, actor="bo")
    assert acts.names() == ["prepare", "publish"]


def test_an_approval_expires_through_expired_after_its_timeout(engine, acts, clock) -> None:
    acts.noop("prepare", "rejected", "expired", "publish")
    engine.register(_review_flow(timeout="2d"))
    run = engine.start("w", {})
    engine.run_until_idle()
    assert "expires in 2 days" in run.explain()

    clock.advance("2d")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["prepare", "expired"]
    assert [e.node_id for e in events(run, "approval.expired")] == ["review"]
    with pytest.raises(wf.SignalError):
        engine.approve(run.id, "review", approved=True, actor="late")


def test_waiting_lists_every_open_wait_and_approval(engine, acts) -> None:
    acts.noop("invoice", "ship", "prepare", "rejected", "publish")
    engine.register(_payment_flow())
    engine.register(_review_flow(id="review"))

    pay = engine.start("w", {"order_id": "o-1", "payment": {}})
    review = engine.start("review", {})
    engine.run_until_idle()

    listed = {(w.run_id, w.node_id, w.kind) for w in engine.waiting()}
    assert listed == {(pay.id, "paid", "signal"), (review.id, "review", "approval")}


def test_of_concurrent_senders_exactly_one_resumes_the_wait(engine, acts) -> None:
    acts.noop("invoice", "ship")
    engine.register(_payment_flow())
    run = engine.start("w", {"order_id": "o-7", "payment": {}})
    engine.run_until_idle()
    barrier = threading.Barrier(8)
    answers: list[bool] = []

    def send(amount: int) -> None:
        barrier.wait()
        answers.append(engine.signal("paid", "o-7", {"amount": amount}))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    engine.run_until_idle()

    assert sorted(answers) == [False] * 7 + [True]
    assert run.status == wf.RunStatus.COMPLETED
    assert len(events(run, "signal.received")) == 1
    assert acts.names() == ["invoice", "ship"]
