"""Durability: runs survive closing the engine (and a crash); one process owns a DuckDB file."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

import wfkit as wf


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def statuses(engine: wf.Engine) -> dict[str, str]:
    return dict(engine.sql("SELECT run_id, status FROM wf_instances").fetchall())


def _stamp(field: str, value: Any) -> Any:
    def body(ctx: wf.ActivityContext[dict[str, Any]]) -> dict[str, Any]:
        ctx.data[field] = value
        return {field: value}

    return body


def test_a_run_parked_on_a_delay_finishes_in_a_new_engine(open_engine, acts, clock) -> None:
    acts.add("first", _stamp("first", 1))
    acts.add("second", lambda ctx: {"saw": ctx.data["first"], "out": ctx.outputs["first"]})
    first = open_engine()
    first.register(wf.Workflow("w").start_with("first").delay("7d").then("second"))
    run = first.start("w", {"id": "r-1"})
    done = first.start("w", {"id": "r-2"})
    first.run_until_idle()
    first.close()

    second = open_engine()
    assert second.workflows() == {"w": [1]}, "definitions are loaded from the file"
    assert statuses(second) == {run.id: "waiting", done.id: "waiting"}
    clock.advance("7d")
    second.run_until_idle()

    again = second.run(run.id)
    assert again.status == wf.RunStatus.COMPLETED
    assert again.data == {"id": "r-1", "first": 1}
    assert again.outputs == {"first": {"first": 1}, "second": {"saw": 1, "out": {"first": 1}}}
    assert acts.count("first") == 2
    assert acts.count("second") == 2
    assert statuses(second) == {run.id: "completed", done.id: "completed"}
    history = again.history()
    assert [e.seq for e in history] == list(range(1, len(history) + 1)), "seq restarted"
    kinds = [e.kind for e in history]
    assert kinds[0] == "run.started"
    assert kinds[-1] == "run.completed"
    assert "delay.started" in kinds and "timer.fired" in kinds


def test_a_step_ready_but_not_run_before_close_runs_exactly_once_after_reopen(
    open_engine, acts
) -> None:
    acts.add("only", _stamp("done", True))
    first = open_engine()
    first.register(wf.Workflow("w").start_with("only"))
    run = first.start("w", {})
    assert statuses(first) == {run.id: "running"}
    first.close()
    assert acts.count("only") == 0

    second = open_engine()
    assert statuses(second) == {run.id: "running"}
    second.run_until_idle()

    assert acts.count("only") == 1
    assert second.run(run.id).status == wf.RunStatus.COMPLETED
    assert second.run(run.id).data == {"done": True}
    assert statuses(second) == {run.id: "completed"}
    second.close()

    third = open_engine()
    third.run_until_idle()
    assert acts.count("only") == 1, "a completed step never runs again"
    assert third.run(run.id).status == wf.RunStatus.COMPLETED
    assert [e.kind for e in third.run(run.id).history()] == [
        "run.started",
        "step.completed",
        "run.completed",
    ]


def test_a_run_parked_on_a_signal_is_resumed_by_a_new_engine(open_engine, acts) -> None:
    acts.noop("ask", "after")
    first = open_engine()
    first.register(
        wf.Workflow("w")
        .start_with("ask")
        .wait_for_signal("answer", correlate="ticket", bind={"text": "reply"})
        .then("after")
    )
    run = first.start("w", {"ticket": "t-1"})
    first.run_until_idle()
    first.close()

    second = open_engine()
    assert [(w.run_id, w.name, w.key) for w in second.waiting()] == [(run.id, "answer", "t-1")]
    assert second.signal("answer", "t-1", {"text": "hello"}) is True
    second.run_until_idle()

    assert second.run(run.id).status == wf.RunStatus.COMPLETED
    assert second.run(run.id).data == {"ticket": "t-1", "reply": "hello"}
    assert acts.names() == ["ask", "after"]


def test_an_open_approval_survives_reopening(open_engine, acts) -> None:
    acts.noop("prepare", "publish")
    first = open_engine()
    first.register(wf.Workflow("w").start_with("prepare").approval("review").then("publish"))
    run = first.start("w", {})
    first.run_until_idle()
    first.close()

    second = open_engine()
    second.approve(run.id, "review", approved=True, actor="ana", comment="fine")
    second.run_until_idle()

    assert second.run(run.id).status == wf.RunStatus.COMPLETED
    assert acts.names() == ["prepare", "publish"]
    assert events(second.run(run.id), "approval.approved")[0].actor == "ana"


def test_a_pending_retry_keeps_its_attempt_number_across_reopening(
    open_engine, acts, clock
) -> None:
    def flaky(ctx: wf.ActivityContext[Any]) -> dict[str, int]:
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        return {"attempt": ctx.attempt}

    acts.add("flaky", flaky)
    first = open_engine()
    first.register(wf.Workflow("w").start_with("flaky", retry_delay="1m", jitter=0))
    run = first.start("w", {})
    first.run_until_idle()
    first.close()

    second = open_engine()
    assert second.run(run.id).status == wf.RunStatus.WAITING
    clock.advance("1m")
    second.run_until_idle()

    assert [c.attempt for c in acts.of("flaky")] == [1, 2]
    assert second.run(run.id).status == wf.RunStatus.COMPLETED
    assert second.run(run.id).outputs == {"flaky": {"attempt": 2}}


def test_parallel_branches_half_done_finish_after_reopening(open_engine, acts, clock) -> None:
    acts.add("quick", _stamp("quick", True))
    acts.add("late", _stamp("late", True))
    acts.noop("after")
    first = open_engine()
    first.register(
        wf.Workflow("w")
        .start_with()
        .parallel(lambda b: b.then("quick"), lambda b: b.delay("1h").then("late"))
        .then("after")
    )
    run = first.start("w", {})
    first.run_until_idle()
    first.close()

    second = open_engine()
    clock.advance("1h")
    second.run_until_idle()

    assert second.run(run.id).status == wf.RunStatus.COMPLETED
    assert second.run(run.id).data == {"quick": True, "late": True}
    assert acts.names() == ["quick", "late", "after"]


def test_a_for_each_half_way_through_finishes_every_item_once_after_reopening(
    open_engine, acts, clock
) -> None:
    acts.add("work", lambda ctx: {"item": ctx.item})
    acts.noop("after")
    first = open_engine()
    first.register(
        wf.Workflow("w")
        .start_with()
        .for_each("items", lambda b: b.delay("1h").then("work"), max_parallelism=2)
        .then("after")
    )
    run = first.start("w", {"items": ["a", "b", "c", "d"]})
    first.run_until_idle()
    clock.advance("1h")
    first.run_until_idle()
    assert sorted(c.item for c in acts.of("work")) == ["a", "b"]
    first.close()

    second = open_engine()
    for _ in range(3):
        clock.advance("1h")
        second.run_until_idle()

    again = second.run(run.id)
    assert again.status == wf.RunStatus.COMPLETED
    assert sorted(c.item for c in acts.of("work")) == ["a", "b", "c", "d"]
    assert acts.count("after") == 1
    assert again.outputs["work"] == {str(i): {"item": x} for i, x in enumerate("abcd")}


def test_a_step_whose_activity_is_registered_after_reopening_runs_then(
    open_engine, acts, clock
) -> None:
    acts.noop("a", "b")
    first = open_engine()
    first.register(wf.Workflow("w").start_with("a").delay("1h").then("b"))
    run = first.start("w", {})
    first.run_until_idle()
    first.close()

    later = wf.ActivityRegistry()  # a restarted kernel: "b" is defined in a later cell
    later.register("a", lambda ctx: None)
    second = open_engine(registry=later)
    clock.advance("1h")
    second.run_until_idle()
    assert second.run(run.id).status == wf.RunStatus.RUNNING

    later.register("b", lambda ctx: {"late": True})
    second.run_until_idle()
    assert second.run(run.id).status == wf.RunStatus.COMPLETED
    assert second.run(run.id).outputs == {"b": {"late": True}}


def test_closing_with_an_attempt_in_flight_checkpoints_it_before_letting_go(
    open_engine, acts, clock
) -> None:
    entered = threading.Event()

    def slow(ctx: wf.ActivityContext[dict[str, Any]]) -> dict[str, int]:
        entered.set()
        time.sleep(0.2)
        ctx.data["slow"] = True
        return {"s": 1}

    acts.add("slow", slow)
    acts.noop("after")
    first = open_engine()
    first.register(wf.Workflow("w").start_with("slow").delay("1h").then("after"))
    first.start_workers(2)
    run = first.start("w", {})
    assert entered.wait(5)
    first.close()

    second = open_engine()
    assert statuses(second) == {run.id: "waiting"}
    clock.advance("1h")
    second.run_until_idle()

    assert acts.names() == ["slow", "after"], "the finished attempt ran again"
    assert second.run(run.id).status == wf.RunStatus.COMPLETED
    assert second.run(run.id).data == {"slow": True}


def test_an_engine_uses_the_registry_it_is_given_even_while_empty(db_path: Path, clock) -> None:
    registry = wf.ActivityRegistry()
    engine = wf.Engine(db_path, clock=clock, registry=registry)
    try:
        assert engine.registry is registry, "an empty registry was replaced by the default one"
        registry.register("late.registered", lambda ctx: {"ok": True})
        engine.register(wf.Workflow("w").start_with("late.registered"))
        run = engine.start("w", {})
        engine.run_until_idle()
        assert run.outputs == {"late.registered": {"ok": True}}
    finally:
        engine.close()


# --- crash and file ownership (subprocesses) --------------------------------------------------


_CRASH_SCRIPT = """
import os, sys
import wfkit as wf

reg = wf.ActivityRegistry()

def first(ctx):
    ctx.data["first"] = "done"
    return {"first": 1}

def second(ctx):
    os._exit(17)   # the process dies with this attempt in flight

reg.register("first", first)
reg.register("second", second)
engine = wf.Engine(sys.argv[1], registry=reg)
engine.register(wf.Workflow("w").start_with("first").then("second"))
run = engine.start("w", {"n": 1})
print(run.id, flush=True)
engine.run_until_idle()
"""


@pytest.mark.slow
@pytest.mark.duckdb_only  # a restarted engine on PostgreSQL waits for the dead lease
def test_a_crash_reruns_only_the_attempt_in_flight(db_path: Path, open_engine, acts) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CRASH_SCRIPT, str(db_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 17, proc.stderr
    run_id = proc.stdout.strip()

    acts.add("first", _stamp("first", "again"))
    acts.add("second", lambda ctx: {"saw": ctx.data["first"]})
    engine = open_engine(clock=None)
    engine.run_until_idle()

    run = engine.run(run_id)
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["second"], "the completed first step must not run again"
    assert run.data == {"n": 1, "first": "done"}
    assert run.outputs == {"first": {"first": 1}, "second": {"saw": "done"}}


_SECOND_ENGINE = """
import sys
import threading
import time
import wfkit as wf
try:
    wf.Engine(sys.argv[1])
except wf.StoreError as exc:
    print(exc)
    sys.exit(3)
sys.exit(0)
"""


@pytest.mark.slow
@pytest.mark.duckdb_only
def test_a_second_process_cannot_open_a_file_an_engine_holds(db_path: Path, engine) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _SECOND_ENGINE, str(db_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    message = proc.stdout
    assert "lock" in message.lower()
    assert "HTTP API" in message
    assert str(db_path) in message


@pytest.mark.duckdb_only
def test_a_file_from_a_newer_wfkit_is_refused_with_a_hint_to_upgrade(
    db_path: Path, open_engine
) -> None:
    open_engine().close()
    conn = duckdb.connect(str(db_path))
    conn.execute("INSERT INTO wf_schema_version VALUES (999, TIMESTAMP '2030-01-01')")
    conn.close()

    with pytest.raises(wf.StoreError) as info:
        open_engine()
    message = str(info.value)
    assert "999" in message
    assert "upgrade wfkit" in message
    conn = duckdb.connect(str(db_path))  # the refused engine released the file
    assert conn.execute("SELECT max(version) FROM wf_schema_version").fetchall() == [(999,)]
    conn.close()
