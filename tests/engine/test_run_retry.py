"""Whole-run retries (docs/semantics.md §16): a run that fails for good is tried again after its
RunRetry delay, from where it failed, without running completed steps again; engine.retry does
it by hand."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import wfkit as wf
from tests.engine.helpers import events, rows, run_to_idle
from tests.polling import wait_until
from wfkit.widgets.timeline import spans_of


def row_status(engine: wf.Engine, run: wf.Run) -> str:
    found = rows(engine, f"SELECT status FROM wf_instances WHERE run_id = '{run.id}'")
    return str(found[0][0])


def retry_timers(engine: wf.Engine, run: wf.Run) -> list[tuple[Any, ...]]:
    return rows(
        engine,
        f"SELECT node_id, kind, due_at FROM wf_timers WHERE run_id = '{run.id}' ORDER BY due_at",
    )


@pytest.fixture
def broken() -> dict[str, int]:
    """How many more calls of an activity fail (a test sets it; each failing call counts it
    down)."""
    return {}


@pytest.fixture
def order(acts, broken: dict[str, int]) -> Any:
    """prepare writes the data; charge fails while broken['charge'] > 0; ship records."""

    def prepare(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
        ctx.data["prepared"] = ctx.data.get("prepared", 0) + 1

    def failing(name: str) -> Any:
        def body(ctx: wf.ActivityContext[dict[str, Any]]) -> dict[str, str]:
            if broken.get(name, 0) > 0:
                broken[name] -= 1
                raise RuntimeError(f"{name} backend down")
            return {name: "ok"}

        return body

    acts.add("prepare", prepare)
    acts.add("charge", failing("charge"))
    acts.add("notify", failing("notify"))
    acts.noop("ship", "handle")
    return acts


def order_flow(retry: wf.RunRetry | None = None, **charge: Any) -> wf.Workflow:
    """start -> prepare -> charge (one attempt unless told) -> ship."""
    charge.setdefault("max_attempts", 1)
    return (
        wf.Workflow("order", retry=retry)
        .start_with("prepare")
        .then("charge", **charge)
        .then("ship")
    )


THREE = wf.RunRetry(max_attempts=3, delay="1m", backoff=2.0)


def test_a_run_failing_twice_succeeds_on_its_third_attempt_without_rerunning_completed_steps(
    engine, order, broken, clock
) -> None:
    broken["charge"] = 2
    run = run_to_idle(engine, order_flow(THREE), {"n": 1})

    assert run.status == wf.RunStatus.WAITING
    assert row_status(engine, run) == "waiting"
    assert run.view().run_attempt == 1
    assert run.explain() == (
        "failed (run attempt 1 of 3): RuntimeError: charge backend down; tried again at "
        "00:01 (in 1 minute) from 'charge'"
    )
    assert run.node_statuses()["charge"] == "retrying"

    clock.advance("1m")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.WAITING
    assert run.view().run_attempt == 2
    clock.advance("2m")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.view().run_attempt == 3
    assert order.names() == ["prepare", "charge", "charge", "charge", "ship"]
    assert run.data == {"n": 1, "prepared": 1}  # prepare's change kept, prepare not re-run
    assert run.outputs == {"charge": {"charge": "ok"}}
    # each run attempt gives the failed step a fresh budget: its attempts start at 1 again,
    # and it keeps its idempotency key
    charges = order.of("charge")
    assert [c.attempt for c in charges] == [1, 1, 1]
    assert len({c.key for c in charges}) == 1
    retrying = events(run, "run.retrying")
    assert [(e.node_id, e.detail["run_attempt"], e.detail["next_attempt"]) for e in retrying] == [
        ("charge", 1, 2),
        ("charge", 2, 3),
    ]
    assert all("charge backend down" in (e.error or "") for e in retrying)
    retried = events(run, "run.retried")
    assert [
        (e.detail["run_attempt"], e.detail["resume"], e.detail["by_hand"]) for e in retried
    ] == [
        (2, "charge", False),
        (3, "charge", False),
    ]
    assert [e.at.isoformat() for e in retried] == ["2026-01-01T00:01:00", "2026-01-01T00:03:00"]
    assert events(run, "run.failed") == []
    assert retry_timers(engine, run) == []


def test_a_run_whose_budget_is_spent_fails_for_good_with_every_attempt_in_its_history(
    engine, order, broken, clock
) -> None:
    broken["charge"] = 99
    run = run_to_idle(engine, order_flow(THREE), {"n": 1})
    clock.advance("1m")
    engine.run_until_idle()
    clock.advance("2m")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert row_status(engine, run) == "failed"
    assert order.names() == ["prepare", "charge", "charge", "charge"]
    kinds = [e.kind for e in run.history() if e.kind.startswith("run.")]
    assert kinds == [
        "run.started",
        "run.retrying",
        "run.retried",
        "run.retrying",
        "run.retried",
        "run.failed",
    ]
    failed = events(run, "run.failed")[0]
    assert failed.detail == {"run_attempt": 3, "max_attempts": 3}
    assert "charge backend down" in (failed.error or "")
    assert run.explain() == "failed (run attempt 3 of 3): RuntimeError: charge backend down"
    assert run.view().run_attempt == 3
    with pytest.raises(wf.WorkflowFailed, match="charge backend down"):
        run.result(timeout=1)
    clock.advance("1d")  # nothing is left to fire
    engine.run_until_idle()
    assert order.count("charge") == 3
    assert retry_timers(engine, run) == []


def test_the_delay_grows_by_the_backoff_and_lives_in_a_timer_row(
    engine, order, broken, clock
) -> None:
    broken["charge"] = 2
    run = run_to_idle(engine, order_flow(wf.RunRetry(max_attempts=3, delay="10s", backoff=3.0)), {})

    ((node, kind, due),) = retry_timers(engine, run)
    assert (node, kind, due.isoformat()) == ("charge", "run_retry", "2026-01-01T00:00:10")
    clock.advance("9s")
    engine.run_until_idle()
    assert order.count("charge") == 1
    clock.advance("1s")
    engine.run_until_idle()
    assert order.count("charge") == 2

    # the second wait is 10s * 3 = 30s
    ((_, _, due),) = retry_timers(engine, run)
    assert due.isoformat() == "2026-01-01T00:00:40"
    clock.advance("29s")
    engine.run_until_idle()
    assert order.count("charge") == 2
    assert run.status == wf.RunStatus.WAITING
    clock.advance("1s")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert order.count("charge") == 3


def test_step_retries_are_spent_within_each_run_attempt(engine, order, broken, clock) -> None:
    broken["charge"] = 2  # both attempts of the first run attempt fail
    flow = order_flow(THREE, max_attempts=2, retry_delay="5s", jitter=0)
    run = run_to_idle(engine, flow, {})
    clock.advance("5s")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.WAITING
    clock.advance("1m")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert [c.attempt for c in order.of("charge")] == [1, 2, 1]


def test_a_run_waiting_to_be_retried_survives_closing_the_engine(
    open_engine, order, broken, clock
) -> None:
    broken["charge"] = 1
    first = open_engine()
    first.register(order_flow(THREE))
    run_id = first.start("order", {"n": 7}).id
    first.run_until_idle()
    assert first.run(run_id).status == wf.RunStatus.WAITING
    first.close()

    second = open_engine()  # nothing registered again
    run = second.run(run_id)
    assert run.status == wf.RunStatus.WAITING
    assert "tried again at 00:01" in run.explain()
    clock.advance("1m")
    second.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert order.names() == ["prepare", "charge", "charge", "ship"]
    assert run.view().run_attempt == 2
    assert run.data == {"n": 7, "prepared": 1}


def test_a_run_retried_in_the_engine_that_reopened_it_can_fail_again_and_wait_again(
    open_engine, order, broken, clock
) -> None:
    broken["charge"] = 2
    first = open_engine()
    first.register(order_flow(THREE))
    run_id = first.start("order", {}).id
    first.run_until_idle()
    first.close()
    second = open_engine()
    clock.advance("1m")
    second.run_until_idle()
    run = second.run(run_id)
    assert run.status == wf.RunStatus.WAITING
    assert run.view().run_attempt == 2
    second.close()

    third = open_engine()
    clock.advance("2m")
    third.run_until_idle()
    assert third.run(run_id).status == wf.RunStatus.COMPLETED
    assert order.count("charge") == 3
    assert order.count("prepare") == 1


# --- by hand ------------------------------------------------------------------------------------


def test_engine_retry_goes_on_from_the_failed_step_of_a_workflow_without_run_retry(
    engine, order, broken
) -> None:
    broken["charge"] = 1
    run = run_to_idle(engine, order_flow(), {"n": 1})
    assert run.status == wf.RunStatus.FAILED
    assert run.explain() == "failed: RuntimeError: charge backend down"
    assert events(run, "run.failed")[0].detail == {}

    engine.retry(run.id, actor="ops")
    assert row_status(engine, run) == "running"  # durable at once, before anything ran
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert order.names() == ["prepare", "charge", "charge", "ship"]
    retried = events(run, "run.retried")
    assert [(e.actor, e.node_id, e.detail) for e in retried] == [
        ("ops", "charge", {"run_attempt": 2, "resume": "charge", "by_hand": True})
    ]
    assert run.view().run_attempt == 2
    assert row_status(engine, run) == "completed"
    ended = rows(engine, f"SELECT ended_at FROM wf_instances WHERE run_id = '{run.id}'")
    assert ended[0][0] is not None


def test_engine_retry_of_a_run_whose_budget_is_spent_is_one_more_attempt(
    engine, order, broken, clock
) -> None:
    broken["charge"] = 3
    run = run_to_idle(engine, order_flow(wf.RunRetry(max_attempts=2, delay="1s")), {})
    clock.advance("1s")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.FAILED

    engine.retry(run.id, actor="ops")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.FAILED  # a third failure: no automatic retry after it
    assert run.explain() == "failed (run attempt 3 of 2): RuntimeError: charge backend down"
    engine.retry(run.id, actor="ops")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert order.count("charge") == 4
    assert [e.detail["run_attempt"] for e in events(run, "run.retried")] == [2, 3, 4]


def test_engine_retry_is_refused_for_a_run_that_is_not_failed(
    engine, order, broken, acts, clock
) -> None:
    acts.noop("later")
    engine.register(order_flow(THREE))
    engine.register(wf.Workflow("parked").start_with().delay("1h").then("later"))
    done = engine.start("order", {})
    parked = engine.start("parked", {})
    engine.run_until_idle()
    broken["charge"] = 5
    waiting = engine.start("order", {})
    engine.run_until_idle()
    cancelled = engine.start("parked", {})
    engine.run_until_idle()
    engine.cancel(cancelled.id, actor="ops")

    cases = [
        (done, "is completed, not failed; only a failed run can be retried"),
        (parked, "is waiting, not failed; only a failed run can be retried"),
        (waiting, "is waiting, not failed; it failed and waits for its next run attempt"),
        (cancelled, "is cancelled, not failed"),
    ]
    for run, message in cases:
        before = len(run.history())
        with pytest.raises(wf.UsageError, match=message):
            engine.retry(run.id, actor="ops")
        assert len(run.history()) == before
    with pytest.raises(wf.UsageError, match="there is no run 'nope'"):
        engine.retry("nope")
    assert waiting.status == wf.RunStatus.WAITING
    assert done.status == wf.RunStatus.COMPLETED


def test_engine_retry_refuses_a_run_whose_failure_left_nowhere_to_go_on(
    engine, acts, broken
) -> None:
    def conflict(value: str) -> Any:
        def body(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
            ctx.data["x"] = value

        return body

    acts.add("left", conflict("L"))
    acts.add("right", conflict("R"))
    flow = wf.Workflow("strict", strict_merges=True, retry=THREE).start_with()
    flow.parallel(lambda b: b.then("left"), lambda b: b.then("right"))
    run = run_to_idle(engine, flow, {})
    assert run.status == wf.RunStatus.FAILED  # a strict merge conflict is never retried
    assert events(run, "run.retrying") == []
    with pytest.raises(wf.UsageError, match=r"cannot go on.*restart_as_new"):
        engine.retry(run.id)


# --- what is and is not retried -------------------------------------------------------------------


def test_a_failure_through_a_connected_failed_outlet_is_no_run_failure(
    engine, order, broken
) -> None:
    broken["charge"] = 1
    flow = wf.Workflow("handled", retry=THREE).start_with("prepare")
    flow.then("charge", max_attempts=1)
    flow.graph.add_node("handle", kind="action", activity="handle")
    flow.graph.add_edge("charge", "handle", key="failed")
    run = run_to_idle(engine, flow, {})
    assert run.status == wf.RunStatus.COMPLETED
    assert order.names() == ["prepare", "charge", "handle"]
    assert events(run, "run.retrying") == []
    assert run.view().run_attempt == 1


def test_on_failure_terminate_fails_for_good_and_only_an_operator_retries_it(
    engine, order, broken, clock
) -> None:
    broken["charge"] = 1
    run = run_to_idle(engine, order_flow(THREE, on_failure="terminate"), {})
    clock.advance("1h")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.FAILED
    assert events(run, "run.retrying") == []
    assert events(run, "run.failed")[0].detail == {"run_attempt": 1, "max_attempts": 3}

    engine.retry(run.id, actor="ops")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert order.names() == ["prepare", "charge", "charge", "ship"]


def test_cancelling_a_run_waiting_to_be_retried_ends_it_for_good(
    engine, order, broken, clock
) -> None:
    broken["charge"] = 1
    run = run_to_idle(engine, order_flow(THREE), {})
    assert run.status == wf.RunStatus.WAITING

    engine.cancel(run.id, actor="ops", reason="customer gave up")
    assert run.status == wf.RunStatus.CANCELLED
    assert retry_timers(engine, run) == []
    clock.advance("1h")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.CANCELLED
    assert order.count("charge") == 1
    assert events(run, "run.retried") == []
    assert [e.actor for e in events(run, "run.cancelled")] == ["ops"]
    with pytest.raises(wf.UsageError, match="is cancelled, not failed"):
        engine.retry(run.id)


def test_a_failed_join_is_retried_from_its_fork(engine, order, broken, clock) -> None:
    broken["notify"] = 1
    flow = wf.Workflow("fan", retry=THREE).start_with()
    flow.parallel(lambda b: b.then("ship"), lambda b: b.then("notify", max_attempts=1))
    flow.then("prepare")
    run = run_to_idle(engine, flow, {})
    assert run.status == wf.RunStatus.WAITING
    (retrying,) = events(run, "run.retrying")
    fork = retrying.detail["resume"]
    assert run.workflow.node(fork).kind == wf.NodeKind.PARALLEL

    clock.advance("1m")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert sorted(order.names()) == ["notify", "notify", "prepare", "ship", "ship"]


def test_a_decision_failing_on_its_expression_is_retried_after_the_data_is_fixed(
    engine, acts, clock
) -> None:
    acts.noop("yes", "no")
    flow = wf.Workflow("pick", retry=wf.RunRetry(max_attempts=2, delay="1m")).start_with()
    flow.if_("amount > 10", then=lambda b: b.then("yes"), otherwise=lambda b: b.then("no"))
    run = run_to_idle(engine, flow, {"amount": "lots"})
    assert run.status == wf.RunStatus.WAITING
    clock.advance("1m")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.FAILED
    assert [e.detail["run_attempt"] for e in events(run, "run.retried")] == [2]
    assert acts.names() == []


# --- sagas -------------------------------------------------------------------------------------


@pytest.fixture
def trip(acts, broken: dict[str, int]) -> Any:
    """check (no compensation); reserve/release and charge/refund write and clear the data."""

    def step(name: str, field: str) -> Any:
        def body(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
            if broken.get(name, 0) > 0:
                broken[name] -= 1
                raise RuntimeError(f"{name} backend down")
            ctx.data[field] = "held"

        return body

    def undo(field: str) -> Any:
        def body(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
            ctx.data[field] = None

        return body

    acts.noop("check", "receipt")
    acts.add("reserve", step("reserve", "room"))
    acts.add("charge", step("charge", "payment"))
    acts.add("release", undo("room"))
    acts.add("refund", undo("payment"))
    return acts


def saga_flow() -> wf.Workflow:
    """start -> check -> saga[reserve (release), charge (refund)] -> receipt."""

    def body(s: wf.Steps) -> None:
        s.then("reserve", max_attempts=1).compensate_with("release")
        s.then("charge", max_attempts=1).compensate_with("refund")

    return (
        wf.Workflow("trip", retry=THREE).start_with("check").saga(body, id="trip").then("receipt")
    )


def test_a_run_whose_failure_unwound_its_saga_is_retried_from_the_sagas_first_step(
    engine, trip, broken, clock
) -> None:
    broken["charge"] = 1
    run = run_to_idle(engine, saga_flow(), {})

    assert run.status == wf.RunStatus.WAITING
    assert trip.names() == ["check", "reserve", "charge", "release"]
    assert run.data == {"room": None}
    (retrying,) = events(run, "run.retrying")
    assert retrying.detail["resume"] == "reserve"
    assert retrying.node_id == "charge"

    clock.advance("1m")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert trip.names() == [
        "check", "reserve", "charge", "release",  # first run attempt, unwound
        "reserve", "charge", "receipt",  # second: the saga again, then on
    ]  # fmt: skip
    assert run.data == {"room": "held", "payment": "held"}
    statuses = rows(
        engine,
        f"SELECT node_id, status FROM wf_saga_steps WHERE run_id = '{run.id}' ORDER BY position",
    )
    assert statuses == [
        ("reserve", "compensated"),
        ("reserve", "committed"),
        ("charge", "committed"),
    ]


def test_a_saga_failure_that_undid_nothing_is_retried_from_the_failed_step(
    engine, trip, broken, clock
) -> None:
    broken["reserve"] = 1  # the saga's first compensable step fails: nothing to undo
    run = run_to_idle(engine, saga_flow(), {})
    (retrying,) = events(run, "run.retrying")
    assert retrying.detail["resume"] == "reserve"
    assert events(run, "compensation.completed") == []

    clock.advance("1m")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert trip.names() == ["check", "reserve", "reserve", "charge", "receipt"]


def test_a_saga_whose_first_step_has_no_compensation_goes_on_from_that_step(
    engine, trip, broken, clock
) -> None:
    def body(s: wf.Steps) -> None:
        s.then("check")
        s.then("reserve").compensate_with("release")
        s.then("charge", max_attempts=1).compensate_with("refund")

    engine.register(wf.Workflow("trip", retry=THREE).start_with().saga(body, id="trip"))
    broken["charge"] = 1
    run = engine.start("trip", {})
    engine.run_until_idle()
    assert events(run, "run.retrying")[0].detail["resume"] == "check"
    clock.advance("1m")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert trip.names() == ["check", "reserve", "charge", "release", "check", "reserve", "charge"]


def test_the_timeline_draws_the_wait_for_the_next_run_attempt(engine, order, broken, clock) -> None:
    broken["charge"] = 1
    run = run_to_idle(engine, order_flow(THREE), {})
    clock.advance("1m")
    engine.run_until_idle()
    spans = spans_of(run.history(), clock.now())
    assert [(s.node_id, s.kind, s.outcome, s.seconds) for s in spans if s.kind == "wait"] == [
        ("charge", "wait", "waited", 60.0)
    ]
    charge = [s.outcome for s in spans if s.node_id == "charge" and s.kind == "attempt"]
    assert charge == ["failed", "succeeded"]


def test_workers_retry_a_run_on_their_own_and_by_hand(open_engine, order, broken, clock) -> None:
    broken["charge"] = 2
    engine = open_engine()
    engine.register(order_flow(wf.RunRetry(max_attempts=2, delay="1m")))
    engine.start_workers(threads=2)
    try:
        run = engine.start("order", {})
        wait_until(lambda: run.status == wf.RunStatus.WAITING, "the run waits")
        clock.advance("1m")  # wakes the sleeping writer: the retry fails again, for good
        wait_until(lambda: run.status == wf.RunStatus.FAILED, "the run fails")
        engine.retry(run.id, actor="ops")
        assert run.result(timeout=10) == {"prepared": 1}
    finally:
        engine.stop()
    assert order.names() == ["prepare", "charge", "charge", "charge", "ship"]


def test_a_retry_with_an_actor_that_cannot_be_stored_is_refused(engine, order, broken) -> None:
    broken["charge"] = 1
    run = run_to_idle(engine, order_flow(), {})
    before = len(run.history())
    with pytest.raises(wf.UsageError, match=r"retrying run .* refused: the actor"):
        engine.retry(run.id, actor="op\x00s")
    assert len(run.history()) == before
    assert run.status == wf.RunStatus.FAILED


@pytest.fixture
def nested_acts(acts, broken: dict[str, int]) -> Any:
    def step(name: str) -> Any:
        def body(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
            if broken.get(name, 0) > 0:
                broken[name] -= 1
                raise RuntimeError(f"{name} failed")
            ctx.data[name] = True

        return body

    for name in ("check", "outer1", "inner1", "inner2", "after"):
        acts.add(name, step(name))
        acts.add(f"{name}.undo", lambda ctx, name=name: ctx.data.update({name: False}))
    return acts


def nested_flow(*, outer_compensable: bool, policy: str = "unwind") -> wf.Workflow:
    """saga 'outer'[check, outer1, saga 'inner'(policy)[inner1, inner2], after]."""

    def inner_body(s: wf.Steps) -> None:
        s.then("inner1").compensate_with("inner1.undo")
        s.then("inner2", max_attempts=1).compensate_with("inner2.undo")

    def outer_body(s: wf.Steps) -> None:
        s.then("check")
        step = s.then("outer1")
        if outer_compensable:
            step.compensate_with("outer1.undo")
        s.saga(inner_body, policy=policy, id="inner")
        s.then("after", max_attempts=1)

    return wf.Workflow("nest", retry=THREE).start_with().saga(outer_body, id="outer")


def test_an_inner_saga_that_alone_was_undone_is_retried_from_its_own_first_step(
    engine, nested_acts, broken, clock
) -> None:
    broken["inner2"] = 1
    run = run_to_idle(engine, nested_flow(outer_compensable=False), {})
    assert events(run, "run.retrying")[0].detail["resume"] == "inner1"
    clock.advance("1m")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert nested_acts.names() == [
        "check", "outer1", "inner1", "inner2", "inner1.undo",
        "inner1", "inner2", "after",
    ]  # fmt: skip


def test_a_failure_that_undid_outer_steps_is_retried_from_the_outer_sagas_first_step(
    engine, nested_acts, broken, clock
) -> None:
    broken["inner2"] = 1
    run = run_to_idle(engine, nested_flow(outer_compensable=True), {})
    assert events(run, "run.retrying")[0].detail["resume"] == "check"
    clock.advance("1m")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert nested_acts.names() == [
        "check", "outer1", "inner1", "inner2", "inner1.undo", "outer1.undo",
        "check", "outer1", "inner1", "inner2", "after",
    ]  # fmt: skip
    assert run.data == {
        "check": True,
        "outer1": True,
        "inner1": True,
        "inner2": True,
        "after": True,
    }


def test_a_left_inner_saga_undone_by_an_outer_failure_is_run_again(
    engine, nested_acts, broken, clock
) -> None:
    broken["after"] = 1  # fails in 'outer' after 'inner' (policy unwind) was left
    run = run_to_idle(engine, nested_flow(outer_compensable=False), {})
    assert [c for c in nested_acts.names() if c.endswith(".undo")] == ["inner2.undo", "inner1.undo"]
    assert events(run, "run.retrying")[0].detail["resume"] == "check"
    clock.advance("1m")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert nested_acts.count("inner1") == 2 and nested_acts.count("after") == 2


def test_a_kept_inner_saga_stands_and_the_retry_goes_on_from_the_failed_step(
    engine, nested_acts, broken, clock
) -> None:
    broken["after"] = 1  # 'inner' (policy keep) was left: nothing of it is undone
    run = run_to_idle(engine, nested_flow(outer_compensable=False, policy="keep"), {})
    assert [c for c in nested_acts.names() if c.endswith(".undo")] == []
    assert events(run, "run.retrying")[0].detail["resume"] == "after"
    clock.advance("1m")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert nested_acts.count("inner1") == 1 and nested_acts.count("after") == 2


def test_the_history_reads_with_the_run_attempts(engine, order, broken, clock) -> None:
    broken["charge"] = 9
    run = run_to_idle(engine, order_flow(wf.RunRetry(max_attempts=2, delay="1m")), {})
    clock.advance("1m")
    engine.run_until_idle()
    lines = [str(e) for e in run.history() if e.kind.startswith("run.")]
    assert lines == [
        "00:00:00 run.started",
        "00:00:00 run.retrying charge (run attempt 1): RuntimeError: charge backend down",
        "00:01:00 run.retried charge (run attempt 2)",
        "00:01:00 run.failed charge (run attempt 2): RuntimeError: charge backend down",
    ]


def test_of_two_operators_retrying_one_failed_run_at_once_exactly_one_wins(
    engine, order, broken
) -> None:
    broken["charge"] = 1
    run = run_to_idle(engine, order_flow(), {})
    outcomes: list[str] = []
    go = threading.Barrier(2)

    def retry(actor: str) -> None:
        go.wait()
        try:
            engine.retry(run.id, actor=actor)
            outcomes.append("done")
        except wf.UsageError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=retry, args=(who,)) for who in ("ana", "bo")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(outcomes)[0] == "done"
    assert "is running, not failed" in sorted(outcomes)[1]
    assert len(events(run, "run.retried")) == 1
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert order.count("charge") == 2
