"""Versioning: runs finish on the version they started with; changed graphs need a new version."""

from __future__ import annotations

import pytest

import wfkit as wf


def definitions(engine: wf.Engine) -> list[tuple[str, int]]:
    return engine.sql(
        "SELECT workflow_id, version FROM wf_definitions ORDER BY version, registered_at"
    ).fetchall()


def v1() -> wf.Workflow:
    return wf.Workflow("w", version=1).start_with("a").delay("1d").then("b")


def v1_changed() -> wf.Workflow:
    return wf.Workflow("w", version=1).start_with("a").delay("1d").then("b").then("c")


def test_registering_the_same_graph_again_is_a_no_op(engine, acts) -> None:
    acts.noop("a", "b")
    engine.register(v1())
    run = engine.start("w", {})

    engine.register(v1())
    engine.register(v1())

    assert definitions(engine) == [("w", 1)]
    assert engine.workflows() == {"w": [1]}
    engine.run_until_idle()
    assert run.status == wf.RunStatus.WAITING


def test_a_changed_graph_under_a_version_with_runs_in_flight_is_refused(engine, acts) -> None:
    acts.noop("a", "b", "c")
    engine.register(v1())
    run = engine.start("w", {})
    engine.run_until_idle()

    with pytest.raises(wf.DefinitionError) as info:
        engine.register(v1_changed())

    message = str(info.value)
    assert "'w' v1" in message
    assert "1 runs in flight" in message
    assert "version 2" in message
    assert definitions(engine) == [("w", 1)]
    assert run.status == wf.RunStatus.WAITING


def test_a_changed_graph_is_accepted_once_no_run_is_in_flight(engine, acts, clock) -> None:
    acts.noop("a", "b", "c")
    engine.register(v1())
    old = engine.start("w", {})
    engine.run_until_idle()
    clock.advance("1d")
    engine.run_until_idle()
    assert old.status == wf.RunStatus.COMPLETED

    engine.register(v1_changed())
    new = engine.start("w", {})
    engine.run_until_idle()
    clock.advance("1d")
    engine.run_until_idle()

    assert new.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["a", "b", "a", "b", "c"]
    assert definitions(engine) == [("w", 1), ("w", 1)]
    assert [e.kind for e in old.history()][-1] == "run.completed"


def test_runs_finish_on_the_version_they_started_with(engine, acts, clock) -> None:
    acts.noop("a", "b", "c")
    engine.register(v1())
    old = engine.start("w", {"which": "old"})
    engine.run_until_idle()

    engine.register(v1_changed().copy(version=2))
    new = engine.start("w", {"which": "new"})
    engine.run_until_idle()
    clock.advance("1d")
    engine.run_until_idle()

    assert old.status == new.status == wf.RunStatus.COMPLETED
    steps = {
        run.id: [e.node_id for e in run.history() if e.kind == "step.completed"]
        for run in (old, new)
    }
    assert steps == {old.id: ["a", "b"], new.id: ["a", "b", "c"]}
    versions = dict(engine.sql("SELECT run_id, version FROM wf_instances").fetchall())
    assert versions == {old.id: 1, new.id: 2}
    assert engine.workflows() == {"w": [1, 2]}


def test_start_with_an_explicit_version_pins_it(engine, acts, clock) -> None:
    acts.noop("a", "b", "c")
    engine.register(v1())
    engine.register(v1_changed().copy(version=2))

    pinned = engine.start("w", {}, version=1)
    latest = engine.start("w", {})
    engine.run_until_idle()
    clock.advance("1d")
    engine.run_until_idle()

    steps = [e.node_id for e in pinned.history() if e.kind == "step.completed"]
    assert steps == ["a", "b"]
    assert [e.node_id for e in latest.history() if e.kind == "step.completed"] == ["a", "b", "c"]
    assert [e.detail for e in pinned.history() if e.kind == "run.started"] == [
        {"workflow": "w", "version": 1}
    ]


def test_a_run_keeps_its_version_across_reopening(open_engine, acts, clock) -> None:
    acts.noop("a", "b", "c")
    first = open_engine()
    first.register(v1())
    old = first.start("w", {})
    first.run_until_idle()
    first.register(v1_changed().copy(version=2))
    first.close()

    second = open_engine()
    assert second.workflows() == {"w": [1, 2]}
    clock.advance("1d")
    second.run_until_idle()

    run = second.run(old.id)
    assert run.status == wf.RunStatus.COMPLETED
    assert [e.node_id for e in run.history() if e.kind == "step.completed"] == ["a", "b"]
    assert acts.count("c") == 0
