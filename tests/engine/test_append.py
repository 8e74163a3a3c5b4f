"""Growing a run in flight: ``engine.append`` adds steps after the ends of the run's own graph,
stores the grown graph under a new hash, and leaves the registered graph and other runs alone."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pydantic import BaseModel

import wfkit as wf
from tests.engine.helpers import events, kinds, rows, run_to_idle
from tests.polling import wait_until


class Order(BaseModel):
    order_id: str = "o-1"
    total: float = 0


def waiting_flow() -> wf.Workflow:
    return wf.Workflow("w", 1).start_with("a").wait_for_signal("go", correlate="order_id")


def counts(engine: wf.Engine) -> tuple[int, int]:
    """(events, definitions) in the store."""
    events = rows(engine, "SELECT count(*) FROM wf_events")[0][0]
    definitions = rows(engine, "SELECT count(*) FROM wf_definitions")[0][0]
    return events, definitions


def pinned(engine: wf.Engine, run: wf.Run) -> str:
    return rows(engine, f"SELECT hash FROM wf_instances WHERE run_id = '{run.id}'")[0][0]


def waiting_run(engine: wf.Engine, acts: Any, *names: str) -> wf.Run:
    acts.noop("a", *names)
    run = run_to_idle(engine, waiting_flow(), {"order_id": "o-1"})
    assert run.status == wf.RunStatus.WAITING
    return run


# --- growing a waiting run --------------------------------------------------------------------


def test_steps_appended_to_a_waiting_run_run_after_its_wait(engine, acts) -> None:
    run = waiting_run(engine, acts, "x", "y")

    grown = engine.append(run.id, lambda b: b.then("x").then("y"), actor="ana")

    assert list(grown.graph.successors("go")) == ["x"]
    assert run.status == wf.RunStatus.WAITING
    assert acts.names() == ["a"]
    assert engine.signal("go", "o-1", {}) is True
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["a", "x", "y"]
    assert kinds(run).index("run.appended") < kinds(run).index("signal.received")


def test_steps_appended_after_a_call_run_when_its_child_completes(engine, acts) -> None:
    acts.noop("a", "b", "x")
    engine.register(wf.Workflow("child", 1).start_with("b").wait_for_signal("go"))
    run = run_to_idle(engine, wf.Workflow("w", 1).start_with("a").call("child"), {})
    assert run.status == wf.RunStatus.WAITING

    grown = engine.append(run.id, lambda b: b.then("x"))

    assert list(grown.graph.successors("call-child")) == ["x"]
    assert engine.signal("go", None, {}) is True
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["a", "b", "x"]


def test_the_event_carries_the_new_hash_and_the_added_nodes(engine, acts) -> None:
    run = waiting_run(engine, acts, "x", "y")
    registered = engine.definition("w", 1).content_hash

    grown = engine.append(run.id, lambda b: b.then("x").then("y"), actor="ana")

    (event,) = events(run, "run.appended")
    assert event.actor == "ana"
    assert event.detail == {
        "hash": grown.content_hash,
        "previous": registered,
        "nodes": ["x", "y"],
        "ends": [["go", "next"]],
    }
    assert grown.content_hash != registered
    assert pinned(engine, run) == grown.content_hash
    assert run.workflow.content_hash == grown.content_hash
    assert rows(
        engine,
        "SELECT hash, run_id, grown_from FROM wf_definitions WHERE workflow_id = 'w' "
        "ORDER BY registered_at",
    ) == [(registered, None, None), (grown.content_hash, run.id, registered)]


def test_appending_twice_grows_from_the_new_ends_and_keeps_the_registered_origin(
    engine, acts
) -> None:
    run = waiting_run(engine, acts, "x", "y")
    registered = engine.definition("w", 1).content_hash

    first = engine.append(run.id, lambda b: b.then("x"))
    second = engine.append(run.id, lambda b: b.then("y"))

    assert list(second.graph.successors("x")) == ["y"]
    assert rows(
        engine, f"SELECT grown_from FROM wf_definitions WHERE hash = '{second.content_hash}'"
    ) == [(registered,)]
    details = [e.detail for e in run.history() if e.kind == "run.appended"]
    assert [d["previous"] for d in details] == [registered, first.content_hash]
    engine.signal("go", "o-1", {})
    engine.run_until_idle()
    assert acts.names() == ["a", "x", "y"]


def test_the_new_steps_continue_from_every_open_end(engine, acts) -> None:
    acts.noop("a", "b", "c", "x")
    flow = (
        wf.Workflow("w", 1, data=Order)
        .start_with("a")
        .wait_for_signal("go", correlate="order_id")
        .if_("total > 10", then=lambda b: b.then("b"))
    )
    engine.register(flow)
    big = engine.start("w", {"total": 20})
    small = engine.start("w", {"order_id": "o-2", "total": 1})
    engine.run_until_idle()

    for run in (big, small):
        engine.append(run.id, lambda b: b.then("x").on_failed(lambda f: f.then("c")))
        (event,) = events(run, "run.appended")
        assert event.detail["ends"] == [["if-1", "false"], ["b", "next"]]
    engine.signal("go", "o-1", {})
    engine.signal("go", "o-2", {})
    engine.run_until_idle()

    assert big.status == small.status == wf.RunStatus.COMPLETED
    done = [e.node_id for e in big.history() if e.kind == "step.completed"]
    assert done == ["a", "b", "x"]
    assert [e.node_id for e in small.history() if e.kind == "step.completed"] == ["a", "x"]
    assert "path.ended" not in kinds(small)


def test_a_workflow_can_be_spliced_into_a_run(engine, acts) -> None:
    run = waiting_run(engine, acts, "card.charge", "mail.receipt")
    payment = wf.Workflow("payment", 1).start_with("card.charge").then("mail.receipt")

    grown = engine.append(run.id, lambda b: b.splice(payment))

    assert [e.detail["nodes"] for e in run.history() if e.kind == "run.appended"] == [
        ["card.charge", "mail.receipt"]
    ]
    assert "card.charge" in grown.graph
    engine.signal("go", "o-1", {})
    engine.run_until_idle()
    assert acts.names() == ["a", "card.charge", "mail.receipt"]


def test_a_run_just_started_grows_before_its_first_step_ran(engine, acts) -> None:
    acts.noop("a", "x")
    engine.register(wf.Workflow("w", 1).start_with("a"))
    run = engine.start("w", {})
    assert acts.names() == []

    engine.append(run.id, lambda b: b.then("x"))
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["a", "x"]


def test_a_suspended_run_grows_and_runs_the_new_steps_once_resumed(engine, acts) -> None:
    failures = iter([RuntimeError("down")])

    def flaky(ctx: Any) -> None:
        error = next(failures, None)
        if error is not None:
            raise error

    acts.add("flaky", flaky)
    acts.noop("x")
    run = run_to_idle(
        engine, wf.Workflow("w", 1).start_with("flaky", max_attempts=1).on_failure("suspend"), {}
    )
    assert run.status == wf.RunStatus.SUSPENDED

    engine.append(run.id, lambda b: b.then("x"))
    assert run.status == wf.RunStatus.SUSPENDED
    engine.resume(run.id, actor="ops")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["flaky", "flaky", "x"]


# --- a running run ------------------------------------------------------------------------------


@pytest.mark.parametrize("durability", ["step", "batched"])
def test_steps_appended_while_the_last_step_runs_on_a_worker_run_after_it(
    open_engine, acts, durability: str
) -> None:
    engine = open_engine(durability=durability)
    started, release = threading.Event(), threading.Event()

    def slow(ctx: Any) -> None:
        started.set()
        assert release.wait(20), "the test never released the step"

    acts.add("slow", slow)
    acts.noop("x", "y")
    engine.register(wf.Workflow("w", 1).start_with("slow"))
    run = engine.start("w", {})
    engine.start_workers(2)
    try:
        assert started.wait(10)
        assert run.status == wf.RunStatus.RUNNING
        engine.append(run.id, lambda b: b.then("x").then("y"))
        release.set()
        assert run.result(timeout=10) == {}
    finally:
        release.set()
        engine.stop()

    assert acts.names() == ["slow", "x", "y"]
    assert [e.node_id for e in run.history() if e.kind == "step.completed"] == ["slow", "x", "y"]


def test_a_run_that_completed_before_the_append_is_refused(engine, acts) -> None:
    acts.noop("a", "x")
    engine.register(wf.Workflow("w", 1).start_with("a"))
    run = engine.start("w", {})
    engine.start_workers(1)
    try:
        run.result(timeout=10)
    finally:
        engine.stop()
    before = counts(engine)

    with pytest.raises(wf.UsageError, match=f"run {run.id} is completed: a run that ended"):
        engine.append(run.id, lambda b: b.then("x"))

    assert counts(engine) == before
    assert acts.names() == ["a"]


def test_a_run_that_drains_before_it_fails_is_refused(engine, acts) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(ctx: Any) -> None:
        started.set()
        assert release.wait(20)

    def bad(ctx: Any) -> None:
        assert started.wait(10)
        raise RuntimeError("warehouse offline")

    acts.add("slow", slow)
    acts.add("bad", bad)
    acts.noop("x")
    flow = (
        wf.Workflow("w", 1)
        .start_with()
        .parallel(
            lambda b: b.then("slow"),
            lambda b: b.then("bad", max_attempts=1).on_failure("terminate"),
        )
    )
    engine.register(flow)
    run = engine.start("w", {})
    engine.start_workers(2)
    try:
        wait_until(lambda: "run.draining" in kinds(run), "the run drains")
        with pytest.raises(wf.UsageError, match="is ending \\(failed\\)"):
            engine.append(run.id, lambda b: b.then("x"))
        release.set()
        with pytest.raises(wf.WorkflowFailed):
            run.result(timeout=10)
    finally:
        release.set()
        engine.stop()
    assert "run.appended" not in kinds(run)
    assert acts.count("x") == 0


def test_a_run_whose_paths_all_ended_while_an_attempt_still_stops_is_refused(engine, acts) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(ctx: Any) -> None:
        started.set()
        assert release.wait(20)

    acts.add("slow", slow)
    acts.add("quick", lambda ctx: started.wait(10) and None)
    acts.noop("x")
    flow = (
        wf.Workflow("w", 1)
        .start_with()
        .parallel(lambda b: b.then("slow"), lambda b: b.then("quick"), join="any")
    )
    engine.register(flow)
    run = engine.start("w", {})
    engine.start_workers(2)
    try:
        # 'quick' satisfied the join, whose path ended there; 'slow' was asked to stop
        wait_until(lambda: "join.completed" in kinds(run), "the join completes")
        assert run.status == wf.RunStatus.RUNNING
        before = counts(engine)
        with pytest.raises(wf.UsageError, match="has ended every path and only waits for 1 "):
            engine.append(run.id, lambda b: b.then("x"))
        assert counts(engine) == before
        release.set()
        assert run.result(timeout=10) == {}
    finally:
        release.set()
        engine.stop()
    assert "run.appended" not in kinds(run)
    assert acts.count("x") == 0


# --- restarts and other processes ----------------------------------------------------------------


def test_a_grown_run_keeps_its_own_graph_across_an_engine_restart(open_engine, acts) -> None:
    engine = open_engine()
    run = waiting_run(engine, acts, "x", "y")
    registered = engine.definition("w", 1).content_hash
    grown = engine.append(run.id, lambda b: b.then("x").then("y"))
    engine.close()

    again = open_engine()
    run = again.run(run.id)
    assert run.workflow.content_hash == grown.content_hash
    assert again.definition("w", 1).content_hash == registered
    assert again.workflows() == {"w": [1]}
    assert again.signal("go", "o-1", {}) is True
    again.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["a", "x", "y"]


def test_a_running_grown_run_goes_on_with_its_graph_after_a_restart(open_engine, acts) -> None:
    acts.noop("a", "b", "x")
    engine = open_engine()
    run = run_to_idle(engine, wf.Workflow("w", 1).start_with("a").delay("1h").then("b"), {})
    engine.append(run.id, lambda b: b.then("x"))
    engine.close()

    again = open_engine()
    again.run_until_idle()
    again.clock.advance("1h")
    again.run_until_idle()
    assert again.run(run.id).status == wf.RunStatus.COMPLETED
    assert acts.names() == ["a", "b", "x"]


def test_registering_the_same_version_again_after_a_restart_is_still_a_no_op(
    open_engine, acts
) -> None:
    engine = open_engine()
    run = waiting_run(engine, acts, "x", "c")
    engine.append(run.id, lambda b: b.then("x"))
    engine.close()

    again = open_engine()
    again.register(waiting_flow())  # as `wfkit worker --module ...` does at start-up
    changed = wf.Workflow("w", 1).start_with("a").wait_for_signal("go").then("c")
    with pytest.raises(wf.DefinitionError, match="1 runs in flight"):
        again.register(changed)
    assert again.run(run.id).workflow.graph.has_node("x")


def test_another_engine_on_postgresql_runs_the_grown_graph(db_path, open_engine, acts) -> None:
    if not str(db_path).startswith("postgresql"):
        pytest.skip("one DuckDB file has one engine process")
    first = open_engine()
    run = waiting_run(first, acts, "x", "y")
    second = open_engine()  # loaded its definitions before the run grew
    grown = first.append(run.id, lambda b: b.then("x").then("y"))

    assert second.run(run.id).workflow.content_hash == grown.content_hash
    assert second.signal("go", "o-1", {}) is True
    second.run_until_idle()
    assert second.run(run.id).status == wf.RunStatus.COMPLETED
    assert acts.names() == ["a", "x", "y"]
    assert second.definition("w", 1).content_hash == first.definition("w", 1).content_hash


# --- refusals ----------------------------------------------------------------------------------


def test_invalid_growth_is_refused_with_every_problem_and_nothing_written(engine, acts) -> None:
    acts.noop("a", "x")
    run = run_to_idle(
        engine,
        wf.Workflow("w", 1, data=Order).start_with("a").wait_for_signal("go", correlate="order_id"),
        {},
    )
    before, graph = counts(engine), run.workflow.content_hash

    with pytest.raises(wf.DefinitionError) as info:
        engine.append(run.id, lambda b: b.if_("totl > 1", then=lambda t: t.then("missing")))

    codes = sorted(p.code for p in info.value.problems)
    assert codes == ["unknown-activity", "unknown-name"]
    assert f"Growing run {run.id} of 'w' v1 (nothing was written)" in str(info.value)
    assert "'totl'" in str(info.value) and "'missing'" in str(info.value)
    assert counts(engine) == before
    assert run.workflow.content_hash == graph == pinned(engine, run)
    engine.signal("go", "o-1", {})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED  # it goes on as it was


def test_an_unregistered_activity_is_refused(engine, acts) -> None:
    run = waiting_run(engine, acts)
    before = counts(engine)

    with pytest.raises(wf.DefinitionError, match="activity 'nowhere' is not registered"):
        engine.append(run.id, lambda b: b.then("nowhere"))

    assert counts(engine) == before


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        (lambda b: None, "added nothing"),
        (lambda b: b.then(""), "malformed|needs an activity"),
        ("x", "takes the steps as a callable"),
    ],
)
def test_growth_that_is_not_growth_is_refused(engine, acts, steps: Any, message: str) -> None:
    run = waiting_run(engine, acts)
    before = counts(engine)

    with pytest.raises(wf.UsageError, match=message):
        engine.append(run.id, steps)

    assert counts(engine) == before


def test_a_graph_whose_every_path_ends_at_an_end_node_has_nowhere_to_grow(engine, acts) -> None:
    acts.noop("a", "x")
    run = run_to_idle(engine, wf.Workflow("w", 1).start_with("a").wait_for_signal("go").end(), {})

    with pytest.raises(wf.UsageError, match="no open end to grow from"):
        engine.append(run.id, lambda b: b.then("x"))


def test_an_unknown_run_is_refused(engine, acts) -> None:
    acts.noop("x")
    with pytest.raises(wf.UsageError, match="there is no run 'nope'"):
        engine.append("nope", lambda b: b.then("x"))


# --- other runs and the registered graph --------------------------------------------------------


def test_other_runs_and_the_registered_graph_are_unaffected(engine, acts) -> None:
    run = waiting_run(engine, acts, "x")
    other = engine.start("w", {"order_id": "o-2"})
    engine.run_until_idle()
    registered = engine.definition("w", 1)

    engine.append(run.id, lambda b: b.then("x"))
    later = engine.start("w", {"order_id": "o-3"})
    engine.run_until_idle()

    assert "x" not in engine.definition("w", 1).graph
    assert engine.definition("w", 1).content_hash == registered.content_hash
    assert pinned(engine, other) == pinned(engine, later) == registered.content_hash
    for key in ("o-1", "o-2", "o-3"):
        engine.signal("go", key, {})
    engine.run_until_idle()
    assert [r.status for r in (run, other, later)] == [wf.RunStatus.COMPLETED] * 3
    assert acts.count("x") == 1
    assert [c.key.split(":")[0] for c in acts.of("x")] == [run.id]


def test_a_grown_run_restarted_as_new_follows_its_grown_graph(engine, acts) -> None:
    run = waiting_run(engine, acts, "x")
    grown = engine.append(run.id, lambda b: b.then("x"))
    engine.signal("go", "o-1", {})
    engine.run_until_idle()

    again = engine.restart_as_new(run.id)
    engine.run_until_idle()
    engine.signal("go", "o-1", {})
    engine.run_until_idle()

    assert again.workflow.content_hash == grown.content_hash
    assert again.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["a", "x", "a", "x"]


# --- pictures -------------------------------------------------------------------------------------


def test_the_runs_view_and_monitor_show_its_grown_graph(engine, acts) -> None:
    from wfkit.widgets import RunMonitor

    run = waiting_run(engine, acts, "x.appended")
    monitor = RunMonitor(engine, run, autostart=False)
    try:
        assert "x.appended" not in monitor.surface.svg
        engine.append(run.id, lambda b: b.then("x.appended"))
        monitor.refresh()
        assert "x.appended" in monitor.surface.svg
        assert monitor.workflow.graph.has_node("x.appended")
        engine.signal("go", "o-1", {})
        engine.run_until_idle()
        monitor.refresh()
        assert monitor.surface.status["x.appended"] == "succeeded"
    finally:
        monitor.close()
    assert run.node("x.appended").activity == "x.appended"


def test_a_grown_run_copied_to_another_store_keeps_its_graph(
    db_path, tmp_path, open_engine, acts
) -> None:
    from wfkit.store.copy import copy_store

    source = tmp_path / "source.duckdb"
    engine = open_engine(path=source)
    run = waiting_run(engine, acts, "x")
    grown = engine.append(run.id, lambda b: b.then("x"))
    engine.close()
    target = db_path if str(db_path).startswith("postgresql") else tmp_path / "target.duckdb"

    copy_store(str(source), str(target))

    copied = open_engine(path=target)
    assert copied.run(run.id).workflow.content_hash == grown.content_hash
    assert copied.definition("w", 1).content_hash != grown.content_hash
    assert copied.signal("go", "o-1", {}) is True
    copied.run_until_idle()
    assert copied.run(run.id).status == wf.RunStatus.COMPLETED
    assert acts.names() == ["a", "x"]


def test_a_grown_graph_registered_later_as_the_version_becomes_the_versions_graph(
    open_engine, acts
) -> None:
    engine = open_engine()
    run = waiting_run(engine, acts, "x")
    grown = engine.append(run.id, lambda b: b.then("x"))
    engine.signal("go", "o-1", {})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED

    engine.register(wf.Workflow.from_json(grown.to_json()))

    assert engine.definition("w", 1).content_hash == grown.content_hash
    assert rows(
        engine, f"SELECT run_id, grown_from FROM wf_definitions WHERE hash = '{grown.content_hash}'"
    ) == [(None, None)]
    engine.close()
    assert open_engine().definition("w", 1).content_hash == grown.content_hash
