"""Sub-workflows: a call node starts a child run, parks, and resumes when the child ends."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from pydantic import BaseModel

import wfkit as wf
from tests.engine.helpers import events, kinds, rows, run_to_idle
from tests.polling import wait_until
from wfkit.engine.clock import SystemClock


class Payment(BaseModel):
    amount: int
    currency: str = "EUR"
    receipt: str | None = None
    internal: str | None = None


def _payment(acts, *, wait: bool = False, fail: bool = False, version: int = 1) -> wf.Workflow:
    def charge(ctx: wf.ActivityContext[Payment]) -> None:
        if fail:
            raise RuntimeError(f"card declined for {ctx.data.amount}")
        ctx.data.receipt = f"r-{ctx.data.amount}-v{version}"
        ctx.data.internal = "not for the caller"

    acts.add(f"pay.charge.v{version}", charge)
    flow = wf.Workflow("payment", version, data=Payment).start_with(
        f"pay.charge.v{version}", max_attempts=1
    )
    if wait:
        flow.wait_for_signal("settled", correlate="receipt")
    return flow


def _shop(**call: Any) -> wf.Workflow:
    call.setdefault("input", {"amount": "total"})
    call.setdefault("bind", {"receipt": "receipt"})
    return wf.Workflow("shop", 1).start_with("shop.reserve").call("payment", **call).then("ship")


def test_a_call_starts_the_child_with_mapped_input_and_records_lineage_both_ways(
    engine, acts, clock
) -> None:
    acts.noop("shop.reserve", "ship")
    engine.register(_payment(acts, wait=True))
    run = run_to_idle(engine, _shop(), {"total": 42, "note": "gift"})

    (child,) = run.children()
    assert child.parent is not None and child.parent.id == run.id
    assert run.parent is None
    assert child.workflow_id == "payment" and child.version == 1
    assert run.status == wf.RunStatus.WAITING
    assert child.status == wf.RunStatus.WAITING  # parked on its own signal
    assert child.data.amount == 42 and child.data.currency == "EUR"
    assert child.data.receipt == "r-42-v1"
    started = events(run, "call.started")[0]
    assert started.node_id == "call-payment"
    assert started.detail == {"child_run": child.id, "workflow": "payment", "version": 1}
    assert events(child, "run.started")[0].detail["called_by"] == {
        "run": run.id,
        "node": "call-payment",
    }
    info = {r.run_id: r for r in engine.runs()}
    assert info[child.id].parent_run_id == run.id
    assert info[run.id].parent_run_id is None
    # the caller waits on one bookmark row, with no job and no timer row
    assert rows(
        engine, f"SELECT node_id, kind, name, key FROM wf_bookmarks WHERE run_id = '{run.id}'"
    ) == [("call-payment", "call", "payment", child.id)]
    assert rows(engine, f"SELECT * FROM wf_jobs WHERE run_id = '{run.id}'") == []
    assert rows(engine, f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'") == []
    assert run.id not in engine.runtime.writer.runs  # a parked caller leaves memory
    assert f"waiting at 'call-payment' for child run {child.id} of 'payment'" in run.explain()
    assert run.node_statuses()["call-payment"] == "waiting"

    assert engine.signal("settled", "r-42-v1") is True
    engine.run_until_idle()

    assert child.status == wf.RunStatus.COMPLETED
    assert run.status == wf.RunStatus.COMPLETED
    # only the bound field came back; the child's other fields stayed in the child
    assert run.data == {"total": 42, "note": "gift", "receipt": "r-42-v1"}
    assert acts.names() == ["shop.reserve", "pay.charge.v1", "ship"]
    assert [e.detail for e in events(run, "call.completed")] == [
        {"child_run": child.id, "workflow": "payment"}
    ]
    assert run.node_statuses()["call-payment"] == "succeeded"


def test_the_child_ends_and_the_caller_resumes_in_one_transaction(engine, acts) -> None:
    acts.noop("shop.reserve", "ship")
    engine.register(_payment(acts))
    run = run_to_idle(engine, _shop(), {"total": 5})

    (child,) = run.children()
    ended = rows(engine, f"SELECT updated_at FROM wf_instances WHERE run_id = '{child.id}'")
    resumed = events(run, "call.completed")
    assert ended[0][0] == resumed[0].at
    assert run.data == {"total": 5, "receipt": "r-5-v1"}


def test_without_input_the_whole_document_goes_and_without_bind_nothing_comes_back(
    engine, acts
) -> None:
    acts.noop("shop.reserve", "ship")
    engine.register(_payment(acts))
    run = run_to_idle(engine, _shop(input=None, bind=None), {"amount": 7, "currency": "SEK"})

    (child,) = run.children()
    assert child.data.model_dump() == {
        "amount": 7,
        "currency": "SEK",
        "receipt": "r-7-v1",
        "internal": "not for the caller",
    }
    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"amount": 7, "currency": "SEK"}


def test_the_latest_version_is_resolved_when_the_call_starts_or_the_pinned_one(
    engine, acts
) -> None:
    acts.noop("shop.reserve", "ship")
    engine.register(_payment(acts, version=1))
    engine.register(_shop())
    pinned = (
        wf.Workflow("pinned", 1)
        .start_with()
        .call("payment", version=1, input={"amount": "total"}, bind={"receipt": "receipt"})
    )
    engine.register(pinned)
    engine.register(_payment(acts, version=2))

    latest = engine.start("shop", {"total": 1})
    old = engine.start("pinned", {"total": 2})
    engine.run_until_idle()

    assert latest.data["receipt"] == "r-1-v2"
    assert events(latest, "call.started")[0].detail["version"] == 2
    assert old.data["receipt"] == "r-2-v1"
    assert events(old, "call.started")[0].detail["version"] == 1


def test_a_failed_child_leaves_the_call_through_its_failed_outlet(engine, acts) -> None:
    acts.noop("shop.reserve", "ship", "refund")
    engine.register(_payment(acts, fail=True))
    flow = (
        wf.Workflow("shop", 1)
        .start_with("shop.reserve")
        .call("payment", input={"amount": "total"}, on_failed=lambda b: b.then("refund").end())
        .then("ship")
    )
    run = run_to_idle(engine, flow, {"total": 9})

    (child,) = run.children()
    assert child.status == wf.RunStatus.FAILED
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["shop.reserve", "pay.charge.v1", "refund"]
    (failed,) = events(run, "call.failed")
    assert f"child run {child.id} of 'payment' failed" in failed.error
    assert "card declined for 9" in failed.error
    assert events(run, "step.routed")[0].detail == {"outlet": "failed"}
    assert run.node_statuses()["call-payment"] == "failed"


def test_a_failed_child_unwinds_the_callers_saga_and_fails_the_caller(engine, acts) -> None:
    acts.noop("stock.reserve", "stock.release", "ship")
    engine.register(_payment(acts, fail=True))
    flow = (
        wf.Workflow("shop", 1)
        .start_with()
        .saga(
            lambda s: (
                s.then("stock.reserve")
                .compensate_with("stock.release")
                .call("payment", input={"amount": "total"})
            )
        )
        .then("ship")
    )
    run = run_to_idle(engine, flow, {"total": 3})

    assert run.status == wf.RunStatus.FAILED
    assert acts.names() == ["stock.reserve", "pay.charge.v1", "stock.release"]
    assert "card declined for 3" in (run.view().error or "")
    with pytest.raises(wf.WorkflowFailed, match="card declined for 3"):
        run.result()


def test_input_the_childs_model_refuses_fails_the_call_and_starts_no_child(engine, acts) -> None:
    acts.noop("shop.reserve", "ship", "apologise")
    engine.register(_payment(acts))
    engine.register(_shop(input={"amount": "label"}))
    rescued = (
        wf.Workflow("rescued", 1)
        .start_with()
        .call("payment", input={"currency": "label"}, on_failed=lambda b: b.then("apologise"))
    )
    engine.register(rescued)

    run = engine.start("shop", {"total": 1, "label": "not a number"})
    other = engine.start("rescued", {"label": "SEK"})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    error = run.view().error or ""
    assert "data model of 'payment' v1 refused the input, so no child run was started" in error
    assert "data field 'amount'" in error
    assert other.status == wf.RunStatus.COMPLETED
    assert "data field 'amount': Field required" in events(other, "step.routed")[0].error
    assert run.children() == [] and other.children() == []
    assert engine.runs(workflow="payment") == []
    # two independent runs: started at one instant of the manual clock, taken up in any order
    assert sorted(acts.names()) == ["apologise", "shop.reserve"]


def test_cancelling_the_caller_cancels_its_child_and_grandchild_in_one_command(
    engine, acts
) -> None:
    acts.noop("shop.reserve", "ship")
    engine.register(_payment(acts, wait=True))
    checkout = wf.Workflow("checkout", 1).start_with().call("payment", input={"amount": "total"})
    engine.register(checkout)
    run = run_to_idle(engine, wf.Workflow("order", 1).start_with().call("checkout"), {"total": 4})
    (child,) = run.children()
    (grandchild,) = child.children()
    assert grandchild.parent is not None and grandchild.parent.id == child.id
    assert [r.status for r in (run, child, grandchild)] == [wf.RunStatus.WAITING] * 3

    engine.cancel(run.id, actor="ana", reason="customer left")

    assert [r.status for r in (run, child, grandchild)] == [wf.RunStatus.CANCELLED] * 3
    (cancelled,) = events(grandchild, "run.cancelled")
    assert cancelled.actor == "ana"
    assert cancelled.detail == {"reason": f"its calling run {child.id} was cancelled"}
    assert engine.waiting() == []
    stamps = {
        r[0]
        for r in rows(
            engine,
            "SELECT ended_at FROM wf_instances WHERE run_id IN "
            f"('{run.id}', '{child.id}', '{grandchild.id}')",
        )
    }
    assert len(stamps) == 1  # one transaction ended all three
    assert engine.signal("settled", "r-4-v1") is False


def test_a_child_cancelled_on_its_own_fails_the_call(engine, acts) -> None:
    acts.noop("shop.reserve", "ship")
    engine.register(_payment(acts, wait=True))
    run = run_to_idle(engine, _shop(), {"total": 6})
    (child,) = run.children()

    engine.cancel(child.id, reason="duplicate payment")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert f"child run {child.id} of 'payment' was cancelled: duplicate payment" in (
        run.view().error or ""
    )
    assert acts.count("ship") == 0


def test_a_caller_parked_across_a_restart_resumes_when_the_child_completes(
    open_engine, acts
) -> None:
    acts.noop("shop.reserve", "ship")
    first = open_engine()
    first.register(_payment(acts, wait=True))
    first.register(_shop())
    run_id = first.start("shop", {"total": 8}).id
    first.run_until_idle()
    first.close()

    second = open_engine()
    run = second.run(run_id)
    (child,) = run.children()
    assert run.status == wf.RunStatus.WAITING and child.status == wf.RunStatus.WAITING
    assert second.signal("settled", "r-8-v1") is True
    second.run_until_idle()

    assert child.status == wf.RunStatus.COMPLETED
    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"total": 8, "receipt": "r-8-v1"}
    assert acts.names() == ["shop.reserve", "pay.charge.v1", "ship"]


def test_a_child_whose_step_was_queued_at_close_finishes_after_reopening(open_engine, acts) -> None:
    acts.noop("shop.reserve", "ship")
    first = open_engine()
    first.register(_payment(acts))
    first.register(_shop())
    run_id = first.start("shop", {"total": 11}).id
    first.close()  # nothing ran: the caller's first step and everything after wait

    second = open_engine()
    second.run_until_idle()

    run = second.run(run_id)
    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"total": 11, "receipt": "r-11-v1"}
    assert acts.names() == ["shop.reserve", "pay.charge.v1", "ship"]


def test_nested_calls_bind_back_through_every_level(engine, acts) -> None:
    acts.noop("ship")
    engine.register(_payment(acts))
    checkout = (
        wf.Workflow("checkout", 1)
        .start_with()
        .call("payment", input={"amount": "sum"}, bind={"receipt": "paid_with"})
    )
    engine.register(checkout)
    order = (
        wf.Workflow("order", 1)
        .start_with()
        .call("checkout", input={"sum": "total * 2"}, bind={"paid_with": "receipt"})
        .then("ship")
    )
    run = run_to_idle(engine, order, {"total": 10})

    (child,) = run.children()
    (grandchild,) = child.children()
    assert grandchild.data.amount == 20
    assert child.data == {"sum": 20, "paid_with": "r-20-v1"}
    assert run.data == {"total": 10, "receipt": "r-20-v1"}
    assert run.status == child.status == grandchild.status == wf.RunStatus.COMPLETED


def test_calls_in_a_for_each_map_each_item_and_each_resume_once(engine, acts) -> None:
    acts.noop("ship")
    engine.register(_payment(acts))
    flow = (
        wf.Workflow("batch", 1)
        .start_with()
        .for_each("amounts", lambda b: b.call("payment", input={"amount": "item"}))
        .then("ship")
    )
    run = run_to_idle(engine, flow, {"amounts": [1, 2, 3]})

    assert run.status == wf.RunStatus.COMPLETED
    assert sorted(c.data.amount for c in run.children()) == [1, 2, 3]
    assert len(events(run, "call.completed")) == 3
    assert acts.count("ship") == 1


def test_many_callers_with_worker_threads_each_resume_exactly_once(open_engine, acts) -> None:
    engine = open_engine(clock=SystemClock())
    acts.noop("shop.reserve", "ship")
    engine.register(_payment(acts))
    engine.register(_shop())
    runs = engine.start_many("shop", [{"total": n} for n in range(20)])
    engine.start_workers(threads=4)
    try:
        results = [r.result(timeout=60) for r in runs]
    finally:
        engine.stop()

    assert [d["receipt"] for d in results] == [f"r-{n}-v1" for n in range(20)]
    assert acts.count("ship") == 20 and acts.count("pay.charge.v1") == 20
    for run in runs:
        assert len(events(run, "call.completed")) == 1
    counts = rows(
        engine,
        "SELECT count(*) FROM wf_events WHERE kind = 'call.completed'",
    )
    assert counts == [(20,)]


def test_a_call_is_refused_at_registration_when_its_workflow_is_not_registered(
    engine, acts
) -> None:
    acts.noop("shop.reserve", "ship")
    with pytest.raises(wf.DefinitionError, match="which is not registered") as caught:
        engine.register(_shop())
    assert "register it before the workflow that calls it" in str(caught.value)
    engine.register(_payment(acts))
    with pytest.raises(wf.DefinitionError, match=r"'payment' v4, which is not registered"):
        engine.register(_shop(version=4))
    with pytest.raises(wf.DefinitionError, match="does not have"):
        engine.register(_shop(bind={"reciept": "receipt"}))
    assert engine.workflows() == {"payment": [1]}


def test_an_ended_child_cannot_be_resumed_again_by_a_late_wake(engine, acts) -> None:
    acts.noop("shop.reserve", "ship")
    engine.register(_payment(acts))
    run = run_to_idle(engine, _shop(), {"total": 2})
    (child,) = run.children()
    token = next(e.token for e in run.history() if e.kind == "call.started")

    # a wake for the call that arrives after the caller moved on (as one written by another
    # engine process would) changes nothing
    writer = engine.runtime.writer
    with writer.lock:
        writer.fire_timer(engine.clock.now(), run.id, token, "call")
        writer.commit()
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert len(events(run, "call.completed")) == 1
    assert acts.count("ship") == 1
    done = engine.cancel(child.id)
    assert done.already_ended and done.status == wf.RunStatus.COMPLETED


def test_two_engines_one_starts_and_the_workers_of_another_finish(
    db_path, open_engine, acts
) -> None:
    if not str(db_path).startswith("postgresql"):
        pytest.skip("two engines share only a PostgreSQL database")
    acts.noop("shop.reserve", "ship")
    starter = open_engine(clock=SystemClock())
    starter.register(_payment(acts, wait=True))
    starter.register(_shop())
    worker = open_engine(clock=SystemClock())
    worker.start_workers(threads=2)
    try:
        run = starter.start("shop", {"total": 12})
        child = wait_until(lambda: (run.children() or [None])[0], "the child starts", 30)
        wait_until(lambda: child.status == wf.RunStatus.WAITING, "the child waits", 30)
        assert run.status == wf.RunStatus.WAITING
        assert starter.signal("settled", "r-12-v1") is True
        assert worker.run(run.id).result(timeout=30) == {"total": 12, "receipt": "r-12-v1"}
    finally:
        worker.stop()
    assert acts.names() == ["shop.reserve", "pay.charge.v1", "ship"]
    assert json.loads(
        rows(starter, f"SELECT detail FROM wf_events WHERE run_id = '{run.id}' AND seq = 1")[0][0]
    ) == {"workflow": "shop", "version": 1}


def test_a_child_ending_in_another_engine_wakes_the_caller_its_engine_holds(
    db_path, open_engine, acts
) -> None:
    if not str(db_path).startswith("postgresql"):
        pytest.skip("two engines share only a PostgreSQL database")
    release = threading.Event()
    holder_acts, payer_acts = wf.ActivityRegistry(), wf.ActivityRegistry()
    holder_acts.register("slow", lambda ctx: release.wait(30))
    holder_acts.register("ship", lambda ctx: None)
    payer_acts.register("pay.charge.v1", lambda ctx: setattr(ctx.data, "receipt", "paid"))
    both = wf.ActivityRegistry()
    for name in ("slow", "ship", "pay.charge.v1"):
        both.register(name, lambda ctx: None)
    setup = open_engine(clock=SystemClock(), registry=both)
    setup.register(wf.Workflow("payment", 1, data=Payment).start_with("pay.charge.v1"))
    flow = (
        wf.Workflow("shop", 1)
        .start_with()
        .parallel(
            lambda b: b.call("payment", input={"amount": "total"}, bind={"receipt": "receipt"}),
            lambda b: b.then("slow"),
        )
        .then("ship")
    )
    setup.register(flow)
    holder = open_engine(clock=SystemClock(), registry=holder_acts)
    payer = open_engine(clock=SystemClock(), registry=payer_acts)
    holder.start_workers(threads=2)
    run = holder.start("shop", {"total": 1})
    payer.start_workers(threads=2)
    try:
        child = wait_until(lambda: (run.children() or [None])[0], "the child starts", 30)
        wait_until(lambda: child.status == wf.RunStatus.COMPLETED, "the child completes", 30)
        wait_until(lambda: events(run, "call.completed"), "the caller hears of it", 30)
        assert run.status == wf.RunStatus.RUNNING  # "slow" still runs in the holder
        release.set()
        assert holder.run(run.id).result(timeout=30) == {"total": 1, "receipt": "paid"}
    finally:
        release.set()
        holder.stop()
        payer.stop()
    assert len(events(run, "call.completed")) == 1
    assert rows(setup, f"SELECT * FROM wf_timers WHERE run_id = '{run.id}'") == []


def test_a_join_satisfied_without_the_call_branch_cancels_its_child(engine, acts) -> None:
    acts.noop("quick", "ship")
    engine.register(_payment(acts, wait=True))
    flow = (
        wf.Workflow("race", 1)
        .start_with()
        .parallel(
            lambda b: b.call("payment", input={"amount": "total"}),
            lambda b: b.then("quick"),
            join="any",
        )
        .then("ship")
    )
    run = run_to_idle(engine, flow, {"total": 3})

    (child,) = run.children()
    assert run.status == wf.RunStatus.COMPLETED
    assert child.status == wf.RunStatus.CANCELLED
    (cancelled,) = events(child, "run.cancelled")
    assert cancelled.detail == {"reason": f"its calling run {run.id} no longer waits for it"}
    assert engine.waiting() == []


def test_a_caller_failing_elsewhere_cancels_the_child_it_waited_for(engine, acts) -> None:
    def boom(ctx: Any) -> None:
        raise RuntimeError("warehouse on fire")

    acts.add("boom", boom)
    engine.register(_payment(acts, wait=True))
    flow = (
        wf.Workflow("doomed", 1)
        .start_with()
        .parallel(
            lambda b: b.call("payment", input={"amount": "total"}),
            lambda b: b.then("boom", max_attempts=1).on_failure("terminate"),
        )
    )
    run = run_to_idle(engine, flow, {"total": 3})

    (child,) = run.children()
    assert run.status == wf.RunStatus.FAILED
    assert "warehouse on fire" in (run.view().error or "")
    assert child.status == wf.RunStatus.CANCELLED
    assert events(child, "run.cancelled")[0].detail == {
        "reason": f"its calling run {run.id} no longer waits for it"
    }


def test_a_child_that_ends_at_once_resumes_its_caller_in_the_same_checkpoint(engine, acts) -> None:
    acts.noop("ship")
    engine.register(wf.Workflow("noop", 1).start_with().end())
    engine.register(wf.Workflow("shop", 1).start_with().call("noop", bind={"x": "y"}).then("ship"))

    run = engine.start("shop", {"x": 1})

    (child,) = run.children()
    assert child.status == wf.RunStatus.COMPLETED
    assert kinds(run)[:3] == ["run.started", "call.started", "call.completed"]
    assert run.data == {"x": 1, "y": 1}
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED and acts.names() == ["ship"]


def test_an_input_expression_that_fails_at_run_time_fails_the_call(engine, acts) -> None:
    acts.noop("shop.reserve", "ship", "apologise")
    engine.register(_payment(acts))
    flow = (
        wf.Workflow("shop", 1)
        .start_with()
        .call(
            "payment", input={"amount": "total // count"}, on_failed=lambda b: b.then("apologise")
        )
    )
    run = run_to_idle(engine, flow, {"total": 3, "count": 0})

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["apologise"]
    (failed,) = events(run, "step.failed")
    assert failed.error.startswith("call 'call-payment': input expression failed:")
    assert run.children() == []


def test_a_bind_that_cannot_be_applied_fails_the_call_with_the_reason(engine, acts) -> None:
    acts.noop("ship")
    engine.register(_payment(acts))
    flow = (
        wf.Workflow("shop", 1)
        .start_with()
        .call("payment", input={"amount": "total"}, bind={"receipt": "total.receipt"})
    )
    run = run_to_idle(engine, flow, {"total": 3})

    assert run.status == wf.RunStatus.FAILED
    assert "cannot bind the child's data: 'total.receipt' runs through 'total'" in (
        run.view().error or ""
    )
    assert run.data == {"total": 3}


def test_calls_see_workflows_and_versions_another_engine_registered(
    db_path, open_engine, acts
) -> None:
    if not str(db_path).startswith("postgresql"):
        pytest.skip("two engines share only a PostgreSQL database")
    acts.noop("shop.reserve", "ship")
    first, second = open_engine(), open_engine()
    first.register(_payment(acts, version=1))
    second.register(_shop())  # 'payment' was registered by the other engine
    first.register(_payment(acts, version=2))

    run = second.start("shop", {"total": 5})
    second.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"total": 5, "receipt": "r-5-v2"}
    assert events(run, "call.started")[0].detail["version"] == 2


def test_a_call_takes_the_latest_active_version_and_a_deactivated_pin_fails_it(
    engine, acts
) -> None:
    acts.noop("shop.reserve", "ship")
    engine.register(_payment(acts, version=1))
    engine.register(_payment(acts, version=2))
    engine.register(_shop())
    engine.register(
        wf.Workflow("pinned", 1)
        .start_with("shop.reserve")
        .call("payment", version=2, input={"amount": "total"})
        .then("ship")
    )
    engine.deactivate("payment", 2)

    latest = engine.start("shop", {"total": 5})
    pinned = engine.start("pinned", {"total": 5})
    engine.run_until_idle()

    assert latest.status == wf.RunStatus.COMPLETED
    (child,) = latest.children()
    assert child.version == 1 and latest.data["receipt"] == "r-5-v1"
    assert pinned.status == wf.RunStatus.FAILED
    assert pinned.children() == []  # no child was started
    (failed,) = events(pinned, "step.failed")
    assert "'payment' v2 is deactivated" in (failed.error or "")


def _deepest_failed_call(run: wf.Run) -> tuple[int, wf.Run, wf.Event]:
    """How many calls down the failure started, that run and its failing call's event."""
    depth = 0
    while run.children():
        (run,) = run.children()
        depth += 1
    (failed,) = [e for e in run.history() if e.kind == "step.failed"]
    return depth, run, failed


def test_a_deep_acyclic_chain_of_calls_says_it_nests_deeper_than_the_limit(engine, acts) -> None:
    acts.noop("leaf")
    engine.register(wf.Workflow("w59", 1).start_with("leaf"))
    for i in reversed(range(59)):  # w0 calls w1, which calls w2... down to w59: no cycle
        engine.register(wf.Workflow(f"w{i}", 1).start_with().call(f"w{i + 1}"))
    run = engine.start("w0", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    depth, deepest, failed = _deepest_failed_call(run)
    assert depth == 32 and deepest.workflow_id == "w32"
    assert failed.node_id == "call-w33"
    assert failed.error == (
        "call 'call-w33' would nest child runs 33 deep: calls nest deeper than the limit of 32 "
        "(w0 -> w1 -> w2 -> ... -> w31 -> w32 -> w33, no workflow calling itself); flatten the "
        "chain, e.g. splice() a called workflow into its caller instead of calling it"
    )
    assert "without end" not in (run.view().error or "")
    assert "deeper than the limit of 32" in (run.view().error or "")
    assert acts.names() == []  # w59's step was never reached


def test_workflows_calling_each_other_in_a_cycle_are_told_to_break_it(engine, acts) -> None:
    acts.noop("ping.log")
    engine.register(wf.Workflow("pong", 1).start_with("ping.log"))  # so that ping may call it
    engine.register(wf.Workflow("ping", 1).start_with("ping.log").call("pong"))
    engine.register(wf.Workflow("pong", 2).start_with().call("ping"))  # the latest pong: a cycle
    run = engine.start("ping", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    depth, deepest, failed = _deepest_failed_call(run)
    assert depth == 32 and deepest.workflow_id == "ping"
    assert failed.error == (
        "call 'call-pong' would nest child runs 33 deep: the workflows call each other without "
        "end (pong -> ping -> pong); break the cycle, or give the recursion a condition that "
        "ends it sooner"
    )
    assert "limit of 32" not in (run.view().error or "")
    assert acts.names() == ["ping.log"] * 17
