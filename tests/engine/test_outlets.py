"""Unconnected outlets: a token that leaves through an outlet with no edge never vanishes
silently. It goes on along ``next`` (a wait's ``elapsed``), fails the step (an approval's
``rejected``/``expired``) or ends its path, recorded as ``path.ended`` (a decision's branch)."""

from __future__ import annotations

import networkx as nx
import pytest

import wfkit as wf


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def test_a_wait_that_times_out_with_no_on_timeout_goes_on_along_next(engine, acts, clock) -> None:
    acts.noop("invite", "remind", "welcome")
    engine.register(
        wf.Workflow("onboard")
        .start_with("invite")
        .wait_for_signal("accepted", correlate="email", timeout="3d")
        .then("welcome")
    )
    run = engine.start("onboard", {"email": "a@example.com"})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.WAITING

    clock.advance("3d")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["invite", "welcome"]
    assert [e.node_id for e in events(run, "signal.elapsed")] == ["accepted"]
    assert events(run, "path.ended") == []
    assert run.data == {"email": "a@example.com"}  # the payload stays unbound
    assert "accepted" not in run.outputs


def _decision_graph() -> nx.MultiDiGraph:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node("check", kind="decision", config={"expression": "amount > 10"})
    G.add_node("big", kind="action", activity="big")
    G.add_edge("start", "check", key="next")
    G.add_edge("check", "big", key="true")
    return G


def test_a_decision_branch_with_no_edge_ends_the_path_with_a_record(engine, acts) -> None:
    acts.noop("big")
    engine.register(wf.Workflow("decide", graph=_decision_graph()))

    run = engine.start("decide", {"amount": 3})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == []
    ended = events(run, "path.ended")
    assert [(e.node_id, e.detail) for e in ended] == [("check", {"outlet": "false"})]
    assert ended[0].token is not None


def test_validate_warns_about_a_decision_branch_with_no_edge() -> None:
    problems = wf.Workflow("decide", graph=_decision_graph()).validate(registry=None)
    assert [(p.code, p.node, p.severity) for p in problems] == [
        ("open-decision-branch", "check", wf.Severity.WARNING)
    ]
    assert "'false'" in problems[0].message and "path.ended" in problems[0].message


def _review(**branches: object) -> wf.Workflow:
    return (
        wf.Workflow("review")
        .start_with("prepare")
        .approval("sign-off", timeout="2d", **branches)  # type: ignore[arg-type]
        .then("publish")
    )


def test_a_rejection_with_no_on_reject_fails_the_step_and_the_run(engine, acts) -> None:
    acts.noop("prepare", "publish")
    engine.register(_review())
    run = engine.start("review", {})
    engine.run_until_idle()

    engine.approve(run.id, "sign-off", approved=False, actor="bo", comment="numbers are off")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert acts.names() == ["prepare"]
    error = "approval 'sign-off' was rejected by bo: numbers are off"
    assert events(run, "run.failed")[0].error == error
    assert [(e.node_id, e.error) for e in events(run, "step.failed")] == [("sign-off", error)]


def test_an_expiry_with_no_on_expire_fails_the_step_and_the_run(engine, acts, clock) -> None:
    acts.noop("prepare", "publish")
    engine.register(_review())
    run = engine.start("review", {})
    engine.run_until_idle()

    clock.advance("2d")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    expired = "approval 'sign-off' expired after 2d with no decision"
    assert events(run, "run.failed")[0].error == expired
    assert acts.names() == ["prepare"]


def test_a_rejection_inside_a_saga_unwinds_it(engine, acts) -> None:
    acts.noop("prepare", "charge", "refund", "publish")
    engine.register(
        wf.Workflow("pay")
        .start_with("prepare")
        .saga(lambda s: s.then("charge").compensate_with("refund").approval("ok"))
        .then("publish")
    )
    run = engine.start("pay", {})
    engine.run_until_idle()
    engine.approve(run.id, "ok", approved=False, actor="bo")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert events(run, "run.failed")[0].error == "approval 'ok' was rejected by bo"
    assert acts.names() == ["prepare", "charge", "refund"]


def test_an_approval_that_is_approved_with_no_edge_ends_the_path_quietly(engine, acts) -> None:
    acts.noop("prepare")
    engine.register(wf.Workflow("review").start_with("prepare").approval("sign-off"))
    run = engine.start("review", {})
    engine.run_until_idle()
    engine.approve(run.id, "sign-off", approved=True, actor="ana")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert events(run, "path.ended") == []


@pytest.mark.parametrize(
    ("kind", "outlet", "rule"),
    [
        ("action", "next", "end"),
        ("wait", "elapsed", "next"),
        ("approval", "approved", "end"),
        ("approval", "rejected", "fail"),
        ("approval", "expired", "fail"),
        ("join", "completed", "end"),
        ("join", "partial", "fail"),
        ("decision", "true", "end_recorded"),
        ("decision", "vip", "end_recorded"),
    ],
)
def test_the_outlet_table_says_what_an_unconnected_outlet_means(
    kind: str, outlet: str, rule: str
) -> None:
    from wfkit.engine.outlets import unconnected

    assert unconnected(kind, outlet) == rule


def test_a_path_that_ends_inside_a_for_each_branch_completes_that_branch(engine, acts) -> None:
    acts.noop("x", "after")
    flow = (
        wf.Workflow("skip-some", 1)
        .start_with()
        .for_each("items", lambda b: b.if_("item > 1", then=lambda t: t.then("x").end()))
        .then("after")
    )
    engine.register(flow)
    run = engine.start("skip-some", {"items": [1, 2, 3]})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.count("x") == 2
    assert acts.count("after") == 1  # the join heard of every branch, ended or not
    joins = events(run, "join.completed")
    assert [e.detail["completed"] for e in joins] == [3]


def test_a_path_that_ends_at_an_inner_join_completes_the_outer_branch(engine, acts) -> None:
    acts.noop("inner", "after")
    flow = (
        wf.Workflow("nested-end", 1)
        .start_with()
        .parallel(
            lambda b: b.for_each("items", lambda c: c.then("inner")).end(),
            lambda b: b.then("inner"),
        )
        .then("after")
    )
    engine.register(flow)
    run = engine.start("nested-end", {"items": [1, 2]})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.count("after") == 1
