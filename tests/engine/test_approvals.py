"""Approvals: a person approves, rejects or lets it expire; each decision is recorded with its
actor and comment, and deciding what is not open changes nothing."""

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


def review_flow(timeout: str | None = None, workflow_id: str = "review") -> wf.Workflow:
    """prepare -> approval 'review' -> publish; rejected -> notify; expired -> escalate."""
    return (
        wf.Workflow(workflow_id)
        .start_with("prepare")
        .approval(
            "review",
            timeout=timeout,
            assignees=["finance", "ana"],
            on_reject=lambda b: b.then("notify").end(),
            on_expire=(lambda b: b.then("escalate").end()) if timeout else None,
        )
        .then("publish")
    )


def snapshot(engine: wf.Engine) -> tuple[list[tuple[Any, ...]], ...]:
    """Everything a refused decision must leave as it was."""
    return (
        rows(engine, "SELECT run_id, seq, kind FROM wf_events ORDER BY run_id, seq"),
        rows(engine, "SELECT run_id, token, node_id, kind FROM wf_bookmarks ORDER BY run_id"),
        rows(engine, "SELECT run_id, token, kind, due_at FROM wf_timers ORDER BY run_id"),
        rows(engine, "SELECT run_id, status, data, seq FROM wf_instances ORDER BY run_id"),
    )


@pytest.fixture
def reviewing(acts) -> None:
    acts.add("publish", lambda ctx: {"decision": ctx.outputs["review"]})
    acts.noop("prepare", "notify", "escalate")


def test_approving_takes_the_approved_outlet_and_records_actor_and_comment(
    engine, acts, clock, reviewing
) -> None:
    engine.register(review_flow())
    run = engine.start("review", {"doc": 1})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.WAITING
    clock.advance("5m")

    engine.approve(run.id, "review", approved=True, actor="ana", comment="looks right")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["prepare", "publish"]
    decision = {
        "approved": True,
        "actor": "ana",
        "comment": "looks right",
        "at": clock.now().isoformat(),
    }
    assert run.outputs["review"] == decision
    assert run.outputs["publish"] == {"decision": decision}  # later steps see the decision
    approved = events(run, "approval.approved")
    assert [(e.node_id, e.actor, e.output) for e in approved] == [("review", "ana", decision)]
    assert approved[0].at == clock.now()
    assert events(run, "approval.rejected") == []
    assert run.node_statuses()["review"] == "succeeded"
    assert rows(engine, f"SELECT * FROM wf_bookmarks WHERE run_id = '{run.id}'") == []
    assert engine.waiting() == []
    by_sql = rows(
        engine,
        "SELECT actor, CAST(output AS JSON) ->> 'comment' FROM wf_events "
        f"WHERE run_id = '{run.id}' AND kind = 'approval.approved'",
    )
    assert by_sql == [("ana", "looks right")]


def test_rejecting_takes_the_rejected_outlet_into_the_on_reject_branch(
    engine, acts, reviewing
) -> None:
    engine.register(review_flow())
    run = engine.start("review", {"doc": 1})
    engine.run_until_idle()

    engine.approve(run.id, "review", approved=False, actor="bo", comment="numbers are off")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["prepare", "notify"]
    assert "publish" not in run.outputs
    assert run.outputs["review"]["approved"] is False
    assert run.outputs["review"]["comment"] == "numbers are off"
    rejected = events(run, "approval.rejected")
    assert [(e.node_id, e.actor, e.output["comment"]) for e in rejected] == [
        ("review", "bo", "numbers are off")
    ]
    assert events(run, "approval.approved") == []


def test_an_approval_expires_through_expired_once_the_clock_passes_it(
    engine, acts, clock, reviewing
) -> None:
    engine.register(review_flow(timeout="2d"))
    run = engine.start("review", {"doc": 1})
    engine.run_until_idle()
    assert rows(engine, f"SELECT kind FROM wf_timers WHERE run_id = '{run.id}'") == [("expiry",)]

    clock.advance(timedelta(days=2) - timedelta(seconds=1))
    engine.run_until_idle()
    assert run.status == wf.RunStatus.WAITING
    assert acts.names() == ["prepare"]

    clock.advance("1s")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["prepare", "escalate"]
    assert [e.node_id for e in events(run, "approval.expired")] == ["review"]
    assert rows(engine, f"SELECT * FROM wf_bookmarks WHERE run_id = '{run.id}'") == []
    assert rows(engine, f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'") == []
    with pytest.raises(wf.SignalError, match="no open approval 'review'"):
        engine.approve(run.id, "review", approved=True, actor="late")


def test_a_decision_before_the_expiry_removes_its_timer(engine, acts, clock, reviewing) -> None:
    engine.register(review_flow(timeout="2d"))
    run = engine.start("review", {"doc": 1})
    engine.run_until_idle()

    engine.approve(run.id, "review", approved=True, actor="ana")
    engine.run_until_idle()
    clock.advance("3d")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["prepare", "publish"]
    assert events(run, "approval.expired") == []
    assert rows(engine, f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'") == []


def test_waiting_lists_the_approval_with_its_deadline_and_assignees(
    engine, acts, clock, reviewing
) -> None:
    engine.register(review_flow(timeout="2d"))
    started = clock.now()
    run = engine.start("review", {"doc": 1})
    engine.run_until_idle()

    waits = engine.waiting()
    assert [(w.run_id, w.node_id, w.kind, w.name, w.key) for w in waits] == [
        (run.id, "review", "approval", "review", run.id)
    ]
    assert waits[0].since == started
    assert waits[0].deadline == started + timedelta(days=2)
    assert waits[0].detail == {"assignees": ["finance", "ana"]}
    assert "waiting for approval 'review' by finance, ana" in run.explain()
    assert "expires in 2 days" in run.explain()
    assert rows(engine, f"SELECT * FROM wf_jobs WHERE run_id = '{run.id}'") == []
    waiting = events(run, "approval.waiting")
    assert [(e.node_id, e.detail["deadline"]) for e in waiting] == [
        ("review", (started + timedelta(days=2)).isoformat())
    ]


def test_approving_a_run_with_no_open_approval_raises_and_changes_nothing(
    engine, acts, reviewing
) -> None:
    acts.noop("invoice")
    engine.register(review_flow())
    engine.register(
        wf.Workflow("pay").start_with("invoice").wait_for_signal("paid", correlate="order_id")
    )
    review = engine.start("review", {"doc": 1})
    pay = engine.start("pay", {"order_id": "o-1"})
    engine.run_until_idle()
    before = snapshot(engine)

    with pytest.raises(wf.SignalError, match="no open approval 'review'"):
        engine.approve(pay.id, "review", approved=True, actor="ana")  # pay has no approval
    with pytest.raises(wf.SignalError, match="open: review"):
        engine.approve(review.id, "sign-off", approved=True, actor="ana")  # wrong node
    with pytest.raises(wf.SignalError, match="no open approval 'paid'"):
        engine.approve(pay.id, "paid", approved=True, actor="ana")  # a wait is not an approval
    with pytest.raises(wf.SignalError):
        engine.approve("no-such-run", "review", approved=True, actor="ana")

    assert snapshot(engine) == before
    assert review.status == wf.RunStatus.WAITING
    assert pay.status == wf.RunStatus.WAITING
    assert sorted(acts.names()) == ["invoice", "prepare"]  # two runs: any order

    # and the open approval still works afterwards
    engine.approve(review.id, "review", approved=True, actor="ana")
    engine.run_until_idle()
    assert review.status == wf.RunStatus.COMPLETED


def test_deciding_twice_is_refused_and_the_first_decision_stands(engine, acts, reviewing) -> None:
    engine.register(review_flow())
    run = engine.start("review", {"doc": 1})
    engine.run_until_idle()
    engine.approve(run.id, "review", approved=True, actor="ana", comment="ok")
    engine.run_until_idle()
    before = snapshot(engine)

    with pytest.raises(wf.SignalError, match="no open approval 'review'"):
        engine.approve(run.id, "review", approved=False, actor="bo", comment="no")

    assert snapshot(engine) == before
    assert run.outputs["review"]["actor"] == "ana"
    assert acts.names() == ["prepare", "publish"]


def test_a_signal_cannot_decide_an_approval(engine, acts, reviewing) -> None:
    engine.register(review_flow())
    run = engine.start("review", {"doc": 1})
    engine.run_until_idle()

    assert engine.signal("review", run.id, {"approved": True}) is False

    assert run.status == wf.RunStatus.WAITING
    assert acts.names() == ["prepare"]


def test_of_people_deciding_at_once_exactly_one_decision_counts(engine, acts, reviewing) -> None:
    engine.register(review_flow())
    run = engine.start("review", {"doc": 1})
    engine.run_until_idle()
    people = [(f"p{i}", i % 2 == 0) for i in range(12)]
    barrier = threading.Barrier(len(people))
    outcome: dict[str, str] = {}

    def decide(actor: str, approved: bool) -> None:
        barrier.wait(10)
        try:
            engine.approve(run.id, "review", approved=approved, actor=actor)
            outcome[actor] = "decided"
        except wf.SignalError:
            outcome[actor] = "refused"

    threads = [threading.Thread(target=decide, args=p) for p in people]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    engine.run_until_idle()

    deciders = [a for a, o in outcome.items() if o == "decided"]
    assert len(outcome) == len(people)
    assert len(deciders) == 1
    decided = dict(people)[deciders[0]]
    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs["review"]["actor"] == deciders[0]
    assert acts.names() == ["prepare", "publish" if decided else "notify"]
    decisions = events(run, "approval.approved") + events(run, "approval.rejected")
    assert [e.actor for e in decisions] == deciders


# --- approvals inside a for_each: one per item -------------------------------------------------


def batch_flow() -> wf.Workflow:
    """for_each item of 'items': approval 'review' -> publish; then done."""
    return (
        wf.Workflow("batch")
        .start_with("prepare")
        .for_each("items", lambda b: b.approval("review").then("publish"))
        .then("done")
    )


def test_each_item_of_a_for_each_has_its_approval_and_loop_path_decides_which(engine, acts) -> None:
    acts.noop("prepare", "publish", "done")
    engine.register(batch_flow())
    run = engine.start("batch", {"items": ["a", "b", "c"]})
    engine.run_until_idle()
    waits = engine.waiting()
    assert sorted(w.loop_path for w in waits) == [(0,), (1,), (2,)]
    assert {(w.node_id, w.kind, w.detail["loop_path"][0]) for w in waits} == {
        ("review", "approval", 0),
        ("review", "approval", 1),
        ("review", "approval", 2),
    }

    engine.approve(run.id, "review", loop_path=[2], actor="ana", comment="c is fine")
    engine.run_until_idle()
    assert [c.item for c in acts.calls if c.name == "publish"] == ["c"]
    assert sorted(w.loop_path for w in engine.waiting()) == [(0,), (1,)]
    decided = events(run, "approval.approved")
    assert [(e.actor, e.output["comment"]) for e in decided] == [("ana", "c is fine")]

    engine.approve(run.id, "review", loop_path=(0,), actor="bo")
    engine.approve(run.id, "review", loop_path=[1], actor="cy")
    engine.run_until_idle()
    assert sorted(c.item for c in acts.calls if c.name == "publish") == ["a", "b", "c"]
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names()[-1] == "done"


def test_an_item_that_has_no_open_approval_is_refused_and_nothing_changes(engine, acts) -> None:
    acts.noop("prepare", "publish", "done")
    engine.register(batch_flow())
    run = engine.start("batch", {"items": ["a", "b"]})
    engine.run_until_idle()
    engine.approve(run.id, "review", loop_path=[0], actor="ana")
    engine.run_until_idle()
    before = snapshot(engine)

    with pytest.raises(wf.SignalError, match=r"no open approval 'review' for item \[0\]") as err:
        engine.approve(run.id, "review", loop_path=[0], actor="ana")
    assert "open for items: [1]" in str(err.value)
    with pytest.raises(wf.SignalError, match=r"for item \[1, 0\]"):
        engine.approve(run.id, "review", loop_path=[1, 0], actor="ana")
    for bad in ("1", "0", 3, True, [-1], [True], [False], ["0"], [1.0], [None], {0: 0}):
        with pytest.raises(wf.UsageError, match="list of integers"):
            engine.approve(run.id, "review", loop_path=bad, actor="ana")
    assert snapshot(engine) == before


def test_an_item_is_found_by_its_token_where_the_bookmark_does_not_name_it(engine, acts) -> None:
    """Bookmarks written before their detail named the item (an upgrade with runs waiting)."""
    acts.noop("prepare", "publish", "done")
    engine.register(batch_flow())
    run = engine.start("batch", {"items": ["a", "b"]})
    engine.run_until_idle()
    engine.sql("UPDATE wf_bookmarks SET detail = '{}'")
    assert [w.loop_path for w in engine.waiting()] == [(), ()]

    engine.approve(run.id, "review", loop_path=[1], actor="ana")
    engine.run_until_idle()
    assert [c.item for c in acts.calls if c.name == "publish"] == ["b"]


def test_nested_for_each_approvals_are_told_apart_by_their_whole_loop_path(engine, acts) -> None:
    acts.noop("prepare", "publish", "done")
    engine.register(
        wf.Workflow("nested")
        .start_with("prepare")
        .for_each(
            "groups",
            lambda g: g.for_each("item", lambda b: b.approval("review").then("publish")),
        )
        .then("done")
    )
    run = engine.start("nested", {"groups": [["a", "b"], ["c"]]})
    engine.run_until_idle()
    assert sorted(w.loop_path for w in engine.waiting()) == [(0, 0), (0, 1), (1, 0)]

    engine.approve(run.id, "review", loop_path=[0, 1], actor="ana")
    engine.run_until_idle()
    assert [c.item for c in acts.calls if c.name == "publish"] == ["b"]
    for path in ([1, 0], [0, 0]):
        engine.approve(run.id, "review", loop_path=path, actor="ana")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED


def test_without_a_loop_path_the_oldest_approval_of_the_node_is_decided(
    engine, acts, clock
) -> None:
    acts.noop("prepare", "publish", "done")
    engine.register(
        wf.Workflow("staggered")
        .start_with("prepare")
        .for_each(
            "items",
            lambda b: (
                b.if_("item == 'late'", then=lambda t: t.delay("1h"))
                .approval("review")
                .then("publish")
            ),
        )
        .then("done")
    )
    run = engine.start("staggered", {"items": ["late", "early"]})
    engine.run_until_idle()
    clock.advance(timedelta(hours=1))
    engine.run_until_idle()
    assert [w.loop_path for w in engine.waiting()] == [(1,), (0,)]  # oldest first

    engine.approve(run.id, "review", actor="ana")
    engine.run_until_idle()
    assert [c.item for c in acts.calls if c.name == "publish"] == ["early"]
    assert [w.loop_path for w in engine.waiting()] == [(0,)]
