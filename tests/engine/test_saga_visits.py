"""A compensated step visited several times: each saga entry keeps the output of its own visit,
and its compensation sees that output as ``ctx.outputs[ctx.node_id]``."""

from __future__ import annotations

from typing import Any

import wfkit as wf


def test_each_compensation_of_a_looped_step_sees_the_output_of_its_own_visit(engine, acts) -> None:
    refunds: list[Any] = []

    def charge(ctx: wf.ActivityContext[Any]) -> dict[str, str]:
        ctx.data["n"] += 1
        return {"payment": f"P{ctx.data['n']}"}

    def refund(ctx: wf.ActivityContext[Any]) -> None:
        refunds.append(ctx.outputs[ctx.node_id]["payment"])

    def ship(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("courier down")

    acts.add("charge", charge)
    acts.add("refund", refund)
    acts.add("ship", ship)
    engine.register(
        wf.Workflow("pay")
        .start_with()
        .saga(
            lambda s: (
                s.then("charge", id="charge", max_visits=3)
                .compensate_with("refund")
                .if_("n < 3", then=lambda t: t.goto("charge"))
                .then("ship", max_attempts=1)
            )
        )
    )
    run = engine.start("pay", {"n": 0})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert acts.count("charge") == 3
    assert refunds == ["P3", "P2", "P1"]
    assert run.outputs["charge"] == {"payment": "P3"}  # the run's outputs keep the last visit


def test_a_compensation_in_a_for_each_sees_its_item_and_its_output(engine, acts) -> None:
    refunds: list[Any] = []

    def refund(ctx: wf.ActivityContext[Any]) -> None:
        refunds.append((ctx.loop_index, ctx.loop_path, ctx.item, ctx.outputs[ctx.node_id]))

    def ship(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("courier down")

    acts.add("charge", lambda ctx: {"paid": ctx.item})
    acts.add("refund", refund)
    acts.add("ship", ship)
    engine.register(
        wf.Workflow("pay")
        .start_with()
        .saga(
            lambda s: s.for_each(
                "lines",
                lambda b: b.then("charge").compensate_with("refund"),
                max_parallelism=1,
            ).then("ship", max_attempts=1)
        )
    )
    run = engine.start("pay", {"lines": ["a", "b"]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert refunds == [(1, (1,), "b", {"paid": "b"}), (0, (0,), "a", {"paid": "a"})]


def test_a_saga_around_a_for_each_commits_once_the_join_leaves_it(engine, acts) -> None:
    def ship(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("courier down")

    acts.add("charge", lambda ctx: {"paid": ctx.item})
    acts.noop("refund")
    acts.add("ship", ship)
    engine.register(
        wf.Workflow("pay")
        .start_with()
        .saga(lambda s: s.for_each("lines", lambda b: b.then("charge").compensate_with("refund")))
        .then("ship", max_attempts=1)
    )
    run = engine.start("pay", {"lines": ["a", "b"]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert acts.count("refund") == 0  # the saga had ended: its steps stand
    committed = [e for e in run.history() if e.kind == "saga.committed"]
    assert len(committed) == 1


def test_a_failed_branch_of_a_parallel_unwinds_the_saga_around_it(engine, acts) -> None:
    def bad(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("no stock")

    acts.add("reserve", lambda ctx: {"reserved": True})
    acts.noop("release")
    acts.add("bad", bad)
    engine.register(
        wf.Workflow("pay")
        .start_with()
        .saga(
            lambda s: s.parallel(
                lambda p: p.then("reserve").compensate_with("release"),
                lambda p: p.then("bad", max_attempts=1),
            )
        )
    )
    run = engine.start("pay", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert acts.count("release") == 1


def test_recovering_a_branch_compensation_puts_the_run_back_to_running(engine, acts) -> None:
    """A cell's unwind runs while the run goes on: once an operator retries its suspended
    compensation, the run is running again (not compensating, which means a top-level unwind)."""
    tries = {"refund": 0}

    def refund(ctx: wf.ActivityContext[Any]) -> None:
        tries["refund"] += 1
        if tries["refund"] == 1:
            raise RuntimeError("bank offline")

    def ship(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("courier down")

    acts.add("charge", lambda ctx: {"paid": ctx.item})
    acts.add("refund", refund)
    acts.add("ship", ship)
    engine.register(
        wf.Workflow("pay")
        .start_with()
        .for_each(
            "lines",
            lambda b: b.saga(
                lambda s: (
                    s.then("charge")
                    .compensate_with("refund", policy={"max_attempts": 1})
                    .then("ship", max_attempts=1)
                )
            ),
        )
    )
    run = engine.start("pay", {"lines": ["a"]})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.SUSPENDED

    engine.recover_compensation(run.id, action="retry", actor="ops")
    assert run.status == wf.RunStatus.RUNNING
    engine.run_until_idle()

    assert tries["refund"] == 2
    assert run.status == wf.RunStatus.FAILED  # the cell failed after its unwind; so does the run
    assert [e.kind for e in run.history()].count("compensation.completed") == 1
