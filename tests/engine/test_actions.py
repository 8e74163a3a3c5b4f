"""Action nodes: outputs and data changes, retries on durable timers, failure routing, limits."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

import wfkit as wf


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def timer_rows(engine: wf.Engine, run: wf.Run) -> list[tuple[Any, ...]]:
    return engine.sql(
        f"SELECT node_id, kind, due_at FROM wf_timers WHERE run_id = '{run.id}'"
    ).fetchall()


def fail_until(attempt: int, message: str = "flaky backend") -> Any:
    """A body that raises until ``ctx.attempt`` reaches ``attempt``."""

    def body(ctx: wf.ActivityContext[Any]) -> dict[str, int]:
        if ctx.attempt < attempt:
            raise RuntimeError(f"{message} (attempt {ctx.attempt})")
        return {"attempt": ctx.attempt}

    return body


def always_fail(message: str = "backend down") -> Any:
    def body(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError(f"{message} (attempt {ctx.attempt})")

    return body


# --- success ----------------------------------------------------------------------------------


def test_a_successful_step_records_its_output_and_its_data_change(engine, acts) -> None:
    def total(ctx: wf.ActivityContext[dict[str, Any]]) -> dict[str, int]:
        ctx.data["total"] = sum(ctx.data["prices"])
        return {"lines": len(ctx.data["prices"])}

    acts.add("order.total", total)
    acts.add("order.check", lambda ctx: {"seen_total": ctx.data["total"], **ctx.outputs})
    engine.register(wf.Workflow("order").start_with("order.total").then("order.check"))

    run = engine.start("order", {"prices": [3, 4, 5]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"prices": [3, 4, 5], "total": 12}
    assert run.outputs == {
        "order.total": {"lines": 3},
        "order.check": {"seen_total": 12, "order.total": {"lines": 3}},
    }
    assert acts.names() == ["order.total", "order.check"]
    completed = events(run, "step.completed")
    assert [(e.node_id, e.attempt, e.output) for e in completed] == [
        ("order.total", 1, {"lines": 3}),
        ("order.check", 1, {"seen_total": 12, "order.total": {"lines": 3}}),
    ]
    rows = engine.sql(
        f"SELECT node_id, output FROM wf_outputs WHERE run_id = '{run.id}' ORDER BY occurred_at"
    ).fetchall()
    assert [r[0] for r in rows] == ["order.total", "order.check"]
    assert run.result(timeout=1) == {"prices": [3, 4, 5], "total": 12}


def test_async_activities_run_and_their_changes_are_checkpointed(engine, acts) -> None:
    async def fetch(ctx: wf.ActivityContext[dict[str, Any]]) -> dict[str, str]:
        await asyncio.sleep(0)
        ctx.data["fetched"] = True
        return {"source": "async"}

    acts.add_async("remote.fetch", fetch)
    acts.noop("after")
    engine.register(wf.Workflow("io").start_with("remote.fetch").then("after"))

    run = engine.start("io", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"fetched": True}
    assert run.outputs == {"remote.fetch": {"source": "async"}}
    assert acts.names() == ["remote.fetch", "after"]


def test_many_runs_on_worker_threads_run_every_step_exactly_once(engine, acts) -> None:
    def step(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
        ctx.data.setdefault("trail", []).append(ctx.node_id)

    for name in ("one", "two", "three"):
        acts.add(name, step)
    engine.register(wf.Workflow("w").start_with("one").then("two").then("three"))
    runs = engine.start_many("w", [{"n": i} for i in range(60)])

    engine.start_workers(4)
    try:
        results = [run.result(timeout=30) for run in runs]
    finally:
        engine.stop()

    assert [r["n"] for r in results] == list(range(60))
    assert all(r["trail"] == ["one", "two", "three"] for r in results)
    assert len(acts.calls) == 180
    assert len({(c.key, c.attempt) for c in acts.calls}) == 180
    assert {i.status for i in engine.runs()} == {wf.RunStatus.COMPLETED}


# --- retries ----------------------------------------------------------------------------------


def test_a_step_failing_twice_then_succeeding_completes_on_attempt_three(engine, acts) -> None:
    acts.add("flaky", fail_until(3))
    acts.noop("after")
    engine.register(wf.Workflow("w").start_with("flaky", retry_delay="0s").then("after"))

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert [c.attempt for c in acts.of("flaky")] == [1, 2, 3]
    assert acts.names() == ["flaky", "flaky", "flaky", "after"]
    failed = events(run, "step.failed")
    assert [(e.node_id, e.attempt) for e in failed] == [("flaky", 1), ("flaky", 2)]
    assert "flaky backend (attempt 1)" in (failed[0].error or "")
    assert "flaky backend (attempt 2)" in (failed[1].error or "")
    done = events(run, "step.completed")
    assert [(e.node_id, e.attempt) for e in done] == [("flaky", 3), ("after", 1)]
    assert run.outputs["flaky"] == {"attempt": 3}


def test_a_retry_delay_is_a_durable_timer_that_fires_when_the_clock_passes_it(
    engine, acts, clock
) -> None:
    acts.add("flaky", fail_until(2))
    engine.register(wf.Workflow("w").start_with("flaky", retry_delay="10s", jitter=0))
    started = clock.now()

    run = engine.start("w", {})
    engine.run_until_idle()

    assert acts.count("flaky") == 1
    assert not run.status.terminal
    assert run.status == wf.RunStatus.WAITING  # parked on a timer only
    assert timer_rows(engine, run) == [("flaky", "retry", started + timedelta(seconds=10))]
    assert "retrying 'flaky' (attempt 2)" in run.explain()
    assert "10 seconds" in run.explain()
    assert events(run, "step.failed")[0].detail == {"retry_in_s": 10.0}

    clock.advance("9s")
    engine.run_until_idle()
    assert acts.count("flaky") == 1

    clock.advance("1s")
    engine.run_until_idle()
    assert [c.attempt for c in acts.of("flaky")] == [1, 2]
    assert run.status == wf.RunStatus.COMPLETED
    assert timer_rows(engine, run) == []
    assert [e.attempt for e in events(run, "step.retrying")] == [2]


def test_retry_delays_double_with_backoff(engine, acts, clock) -> None:
    acts.add("flaky", fail_until(3))
    engine.register(wf.Workflow("w").start_with("flaky", retry_delay="10s", jitter=0))

    run = engine.start("w", {})
    engine.run_until_idle()
    clock.advance("10s")
    engine.run_until_idle()
    assert [c.attempt for c in acts.of("flaky")] == [1, 2]
    assert [e.detail for e in events(run, "step.failed")] == [
        {"retry_in_s": 10.0},
        {"retry_in_s": 20.0},
    ]

    clock.advance("5s")
    engine.run_until_idle()
    assert acts.count("flaky") == 2, "the 2nd retry waits 20 s, not 10 s"
    assert run.status == wf.RunStatus.WAITING

    clock.advance("15s")
    engine.run_until_idle()
    assert [c.attempt for c in acts.of("flaky")] == [1, 2, 3]
    assert run.status == wf.RunStatus.COMPLETED


def test_exhausting_max_attempts_fails_the_run_with_the_last_traceback(engine, acts) -> None:
    acts.add("broken", always_fail())
    acts.noop("never")
    engine.register(
        wf.Workflow("w").start_with("broken", max_attempts=2, retry_delay="0s").then("never")
    )

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert [c.attempt for c in acts.of("broken")] == [1, 2]
    assert acts.count("never") == 0
    with pytest.raises(wf.WorkflowFailed) as info:
        run.result(timeout=1)
    assert info.value.run_id == run.id
    assert info.value.error is not None
    assert "Traceback" in info.value.error
    assert "RuntimeError: backend down (attempt 2)" in info.value.error
    assert "backend down (attempt 2)" in str(info.value)
    assert "run.history()" in str(info.value)
    assert [r.run_id for r in engine.runs(status="failed")] == [run.id]


def test_a_connected_failed_outlet_takes_the_failure_and_the_run_completes(engine, acts) -> None:
    acts.add("charge", always_fail("card declined"))
    acts.noop("notify.support", "finish")
    flow = (
        wf.Workflow("w")
        .start_with("charge", max_attempts=2, retry_delay="0s")
        .on_failed(lambda b: b.then("notify.support"))
        .then("finish")
    )
    engine.register(flow)

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["charge", "charge", "notify.support", "finish"]
    routed = events(run, "step.routed")
    assert [(e.node_id, e.detail) for e in routed] == [("charge", {"outlet": "failed"})]
    assert "card declined (attempt 2)" in (routed[0].error or "")


def test_raising_fallback_leaves_through_fallback_without_retrying(engine, acts) -> None:
    def quote(ctx: wf.ActivityContext[Any]) -> None:
        raise wf.Fallback("pricing service is closed")

    acts.add("price.quote", quote)
    acts.noop("price.cached", "finish")
    flow = (
        wf.Workflow("w")
        .start_with("price.quote", max_attempts=5, retry_delay="0s")
        .on_fallback(lambda b: b.then("price.cached"))
        .then("finish")
    )
    engine.register(flow)

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["price.quote", "price.cached", "finish"]
    failed = events(run, "step.failed")
    assert len(failed) == 1
    assert "pricing service is closed" in (failed[0].error or "")


def test_an_attempt_over_its_timeout_is_cancelled_and_retried(engine, acts) -> None:
    saw_cancel: list[bool] = []

    def slow_first(ctx: wf.ActivityContext[Any]) -> dict[str, int]:
        if ctx.attempt == 1:
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and not ctx.cancelled:
                time.sleep(0.01)
            saw_cancel.append(ctx.cancelled)
            return {"attempt": 1}
        return {"attempt": ctx.attempt}

    acts.add("slow", slow_first)
    engine.register(
        wf.Workflow("w").start_with(
            "slow", attempt_timeout="0.2s", max_attempts=3, retry_delay="0s"
        )
    )

    run = engine.start("w", {})
    began = time.monotonic()
    engine.run_until_idle()
    elapsed = time.monotonic() - began

    assert run.status == wf.RunStatus.COMPLETED
    assert [c.attempt for c in acts.of("slow")] == [1, 2]
    failed = events(run, "step.failed")
    assert [e.attempt for e in failed] == [1]
    assert "timed out after 0.2s" in (failed[0].error or "")
    assert run.outputs["slow"] == {"attempt": 2}
    assert elapsed < 1.5, "the engine waited for the slow attempt instead of timing it out"
    deadline = time.monotonic() + 2.0
    while not saw_cancel and time.monotonic() < deadline:
        time.sleep(0.01)
    assert saw_cancel == [True], "the timed-out attempt was not told to stop"


# --- on_failure -------------------------------------------------------------------------------


def _terminate_flow(terminate: bool) -> wf.Workflow:
    def bad(b: wf.Steps) -> None:
        b.then("bad", max_attempts=2, retry_delay="0s")
        if terminate:
            b.on_failure("terminate")

    return (
        wf.Workflow("w")
        .start_with()
        .parallel(bad, lambda b: b.delay("1h").then("good"), join="any")
        .then("after")
    )


def test_a_failing_branch_of_an_any_join_lets_the_other_branch_finish(engine, acts, clock) -> None:
    acts.add("bad", always_fail())
    acts.noop("good", "after")
    engine.register(_terminate_flow(terminate=False))

    run = engine.start("w", {})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.WAITING
    clock.advance("1h")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["bad", "bad", "good", "after"]


def test_on_failure_terminate_fails_the_run_at_once_after_the_retries(engine, acts, clock) -> None:
    acts.add("bad", always_fail())
    acts.noop("good", "after")
    engine.register(_terminate_flow(terminate=True))

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert [c.attempt for c in acts.of("bad")] == [1, 2]
    assert timer_rows(engine, run) == []
    clock.advance("1h")
    engine.run_until_idle()
    assert acts.names() == ["bad", "bad"]
    assert [e.node_id for e in events(run, "run.failed")] == ["bad"]


def test_on_failure_suspend_parks_the_run_for_an_operator(engine, acts) -> None:
    acts.add("bad", always_fail("ledger locked"))
    acts.noop("after")
    flow = (
        wf.Workflow("w")
        .start_with("bad", max_attempts=2, retry_delay="0s")
        .on_failure("suspend")
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.SUSPENDED
    assert acts.names() == ["bad", "bad"]
    assert [e.node_id for e in events(run, "run.suspended")] == ["bad"]
    assert "suspended at 'bad'" in run.explain()
    assert "ledger locked" in run.explain()
    rows = engine.sql(f"SELECT status FROM wf_instances WHERE run_id = '{run.id}'").fetchall()
    assert rows == [("suspended",)]
    engine.run_until_idle()
    assert acts.names() == ["bad", "bad"]


# --- loops ------------------------------------------------------------------------------------


def _counter(acts: Any) -> None:
    def inc(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
        ctx.data["n"] += 1

    acts.add("inc", inc)
    acts.noop("done")


def test_a_loop_bounded_by_max_visits_on_one_node_stops_after_that_many_rounds(
    engine, acts
) -> None:
    # DESIGN: max_visits is what lets a loop terminate; validation accepts a loop where one
    # node carries it. The loop must go round 3 times, then fail on the 4th arrival.
    _counter(acts)
    flow = (
        wf.Workflow("w")
        .start_with("inc")
        .with_policy(max_visits=3)
        .if_("n < 100", then=lambda b: b.goto("inc"))
        .then("done")
    )
    assert flow.validate(registry=acts.registry) == []
    engine.register(flow)

    run = engine.start("w", {"n": 0})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert acts.count("inc") == 3
    assert run.data == {"n": 3}
    error = events(run, "run.failed")[0].error or ""
    assert "VisitLimitExceeded" in error
    assert "'inc'" in error
    assert acts.count("done") == 0


def test_a_loop_exiting_through_its_if_before_the_limit_completes(engine, acts) -> None:
    _counter(acts)
    flow = (
        wf.Workflow("w")
        .start_with("inc")
        .with_policy(max_visits=3)
        .if_("n < 2", then=lambda b: b.goto("inc"))
        .then("done")
    )
    engine.register(flow)

    run = engine.start("w", {"n": 0})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"n": 2}
    assert acts.names() == ["inc", "inc", "done"]


def test_a_loop_whose_every_node_allows_three_visits_goes_round_three_times(engine, acts) -> None:
    _counter(acts)
    flow = (
        wf.Workflow("w")
        .start_with("inc")
        .with_policy(max_visits=3)
        .if_("n < 100", then=lambda b: b.goto("inc"))
        .with_policy(max_visits=3)
        .then("done")
    )
    engine.register(flow)

    run = engine.start("w", {"n": 0})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert acts.count("inc") == 3
    assert run.data == {"n": 3}
    with pytest.raises(wf.WorkflowFailed, match="VisitLimitExceeded"):
        run.result(timeout=1)
    assert "max_visits=3" in (events(run, "run.failed")[0].error or "")


# --- idempotency ------------------------------------------------------------------------------


def test_the_idempotency_key_is_stable_across_attempts_and_differs_across_steps(
    engine, acts
) -> None:
    acts.add("pay", fail_until(3))
    acts.noop("ship")
    engine.register(wf.Workflow("w").start_with("pay", retry_delay="0s").then("ship"))

    first = engine.start("w", {})
    second = engine.start("w", {})
    engine.run_until_idle()

    assert first.status == second.status == wf.RunStatus.COMPLETED
    for run in (first, second):
        pay = [c.key for c in acts.of("pay") if run.id in c.key]
        ship = [c.key for c in acts.of("ship") if run.id in c.key]
        assert len(pay) == 3 and len(set(pay)) == 1, "attempts of one step share one key"
        assert len(ship) == 1
        assert ship[0] != pay[0], "two steps have two keys"
    assert len({c.key for c in acts.calls}) == 4, "pay and ship of two runs: four keys"


def test_the_idempotency_key_survives_a_retry_on_a_timer(engine, acts, clock) -> None:
    acts.add("pay", fail_until(2))
    engine.register(wf.Workflow("w").start_with("pay", retry_delay="1m", jitter=0))
    run = engine.start("w", {})
    engine.run_until_idle()
    clock.advance("1m")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    keys = [c.key for c in acts.of("pay")]
    assert len(keys) == 2
    assert keys[0] == keys[1]


def test_a_failed_attempt_keeps_none_of_its_data_changes(engine, acts, clock) -> None:
    def half_done(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
        ctx.data["charged"] = ctx.attempt
        if ctx.attempt == 1:
            raise RuntimeError("crashed after writing")

    acts.add("charge", half_done)
    acts.add("check", lambda ctx: {"seen": ctx.data.get("charged")})
    engine.register(
        wf.Workflow("w")
        .start_with("charge", max_attempts=2, retry_delay="1m", jitter=0)
        .then("check")
    )
    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.data == {}, "the failed attempt's change leaked into the document"
    clock.advance("1m")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"charged": 2}
    assert run.outputs["check"] == {"seen": 2}


def test_an_output_that_is_not_json_fails_the_attempt_with_a_hint(engine, acts) -> None:
    acts.add("bad.output", lambda ctx: {"when": object()})
    engine.register(wf.Workflow("w").start_with("bad.output", max_attempts=1))

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    error = events(run, "step.failed")[0].error or ""
    assert "not JSON" in error
    assert "'bad.output'" in error
    assert "return a dict of plain values" in error
