"""Delays: durable timer rows that fire when the clock passes them, inline or with workers."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

import wfkit as wf
from wfkit.engine import SystemClock


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def timer_rows(engine: wf.Engine, run: wf.Run) -> list[tuple[Any, ...]]:
    return engine.sql(
        f"SELECT node_id, kind, due_at FROM wf_timers WHERE run_id = '{run.id}'"
    ).fetchall()


def _reminder_flow() -> wf.Workflow:
    return wf.Workflow("w").start_with("before").delay("7d", id="cool-off").then("after")


def test_a_delay_parks_the_run_on_a_timer_row_until_the_clock_passes_it(
    engine, acts, clock
) -> None:
    acts.noop("before", "after")
    engine.register(_reminder_flow())
    started = clock.now()

    run = engine.start("w", {"customer": "c-1"})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.WAITING
    assert acts.names() == ["before"]
    assert timer_rows(engine, run) == [("cool-off", "delay", started + timedelta(days=7))]
    assert engine.sql(f"SELECT count(*) FROM wf_jobs WHERE run_id = '{run.id}'").fetchall() == [
        (0,)
    ]
    explained = run.explain()
    assert "delay" in explained
    assert "'cool-off'" in explained
    assert "7 days" in explained

    clock.advance("6d")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.WAITING
    assert acts.names() == ["before"]
    assert "1 day" in run.explain()

    clock.advance("1d")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["before", "after"]
    assert run.data == {"customer": "c-1"}
    assert timer_rows(engine, run) == []
    assert [e.node_id for e in events(run, "delay.started")] == ["cool-off"]
    assert [e.node_id for e in events(run, "timer.fired")] == ["cool-off"]


def test_timers_of_several_runs_fire_in_due_order(engine, acts, clock) -> None:
    acts.noop("before", "after", "short", "long")
    engine.register(wf.Workflow("short").start_with().delay("1h").then("short"))
    engine.register(wf.Workflow("long").start_with().delay("2h").then("long"))

    long_run = engine.start("long", {})
    short_run = engine.start("short", {})
    engine.run_until_idle()
    clock.advance("90m")
    engine.run_until_idle()

    assert short_run.status == wf.RunStatus.COMPLETED
    assert long_run.status == wf.RunStatus.WAITING
    assert acts.names() == ["short"]

    clock.advance("30m")
    engine.run_until_idle()
    assert long_run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["short", "long"]


def test_advancing_a_manual_clock_wakes_the_worker_threads(engine, acts, clock) -> None:
    acts.noop("before", "after")
    engine.register(_reminder_flow())
    engine.start_workers(2)
    try:
        run = engine.start("w", {})
        deadline = time.monotonic() + 5
        while run.status != wf.RunStatus.WAITING and time.monotonic() < deadline:
            time.sleep(0.01)
        assert run.status == wf.RunStatus.WAITING
        assert acts.names() == ["before"]

        clock.advance("7d")
        began = time.monotonic()
        assert run.result(timeout=5) == {}
        waited = time.monotonic() - began
    finally:
        engine.stop()

    assert acts.names() == ["before", "after"]
    assert waited < 1.0, f"the writer took {waited:.2f}s to notice the clock moved"


def test_with_the_real_clock_run_until_idle_waits_for_a_short_timer(open_engine, acts) -> None:
    acts.noop("before", "after")
    engine = open_engine(clock=None)
    engine.register(wf.Workflow("w").start_with("before").delay("0.2s").then("after"))

    run = engine.start("w", {})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.WAITING

    engine.run_until_idle(timeout=5)
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["before", "after"]


def test_result_on_a_parked_run_times_out_and_says_where_it_stands(engine, acts) -> None:
    acts.noop("before", "after")
    engine.register(_reminder_flow())
    run = engine.start("w", {})

    with pytest.raises(TimeoutError) as info:
        run.result(timeout=0.1)

    message = str(info.value)
    assert run.id in message
    assert "waiting" in message
    assert "'cool-off'" in message
    assert acts.names() == ["before"]


@pytest.mark.parametrize("manual", [True, False], ids=["manual-clock", "real-clock"])
def test_an_idle_engine_with_workers_costs_no_cpu(open_engine, acts, manual) -> None:
    acts.noop("before", "after")
    engine = open_engine(clock=wf.ManualClock() if manual else None)
    engine.register(_reminder_flow())
    engine.start_workers(4)
    try:
        run = engine.start("w", {})
        deadline = time.monotonic() + 5
        while run.status != wf.RunStatus.WAITING and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        cpu = time.process_time()
        time.sleep(0.5)
        used = time.process_time() - cpu
    finally:
        engine.stop()

    assert run.status == wf.RunStatus.WAITING
    assert used < 0.1, f"an idle engine used {used:.3f}s of CPU in 0.5s (polling?)"


def test_a_timer_made_by_a_command_fires_while_workers_sleep_on_the_real_clock(
    open_engine, acts
) -> None:
    """approve() from the test thread creates the delay's timer; the writer thread, asleep with
    nothing due, must wake for it rather than wait for some other event."""
    acts.noop("after")
    engine = open_engine(clock=SystemClock())
    engine.register(wf.Workflow("w").start_with().approval("ok").delay("0.3s").then("after"))
    run = engine.start("w", {})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.WAITING
    engine.start_workers(2)
    try:
        time.sleep(0.3)  # let the writer thread go to sleep with no timer at all
        engine.approve(run.id, "ok", actor="ana")
        assert run.result(timeout=10) == {}
    finally:
        engine.stop()
    assert acts.names() == ["after"]
