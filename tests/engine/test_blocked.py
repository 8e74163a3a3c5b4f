"""A step whose activity is not registered in this process is *blocked*, and says so.

It used to show ``running`` and "running 'b' (attempt 1)" forever, with only a log warning.
Now ``explain()`` says which activity is missing and how to register it, ``wf_jobs`` and
``node_statuses()`` (the widgets' colours) show ``blocked``, and on PostgreSQL an engine without
the activity gives the run back (and leaves it alone for a while) so that an engine that has the
activity completes it.
"""

from __future__ import annotations

import pytest

import wfkit as wf
from tests.engine.conftest import Activities, OpenEngine
from tests.polling import eventually
from wfkit.engine.vocabulary import NodeStatus

BLOCKED = (
    "step 'b' waits for activity 'b', which is not registered in this process; register it "
    "(@wf.activity('b') or engine.registry.register) and run the engine again (run_until_idle "
    "or start_workers)"
)


def flow() -> wf.Workflow:
    return wf.Workflow("w").start_with("a").then("b")


def without_b(acts: Activities) -> wf.ActivityRegistry:
    """A registry that has ``a`` (recorded in ``acts``) but not ``b``."""
    registry = wf.ActivityRegistry()
    registry.register("a", lambda ctx: acts.record("a", ctx))
    return registry


def jobs(engine: wf.Engine, run_id: str) -> list[tuple[str, str]]:
    rows = engine.sql(f"SELECT node_id, status FROM wf_jobs WHERE run_id = '{run_id}'").fetchall()
    return [(str(n), str(s)) for n, s in rows]


def test_a_step_whose_activity_is_not_registered_here_is_blocked_and_explained(
    open_engine: OpenEngine, acts: Activities
) -> None:
    acts.noop("a", "b")
    first = open_engine()
    first.register(flow())  # validated where both activities are registered
    run_id = first.start("w", {}).id
    first.close()

    engine = open_engine(registry=without_b(acts))
    engine.run_until_idle()
    run = engine.run(run_id)

    assert acts.names() == ["a"]
    assert run.status == wf.RunStatus.RUNNING
    assert run.explain() == BLOCKED
    assert run.node_statuses()["b"] == NodeStatus.BLOCKED == "blocked"
    assert jobs(engine, run_id) == [("b", "blocked")]

    engine.registry.register("b", lambda ctx: acts.record("b", ctx))
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["a", "b"]
    assert jobs(engine, run_id) == []


def test_a_monitor_colours_a_blocked_step(open_engine: OpenEngine, acts: Activities) -> None:
    from wfkit.widgets.surface import STATUS_CLASSES

    acts.noop("a", "b")
    first = open_engine()
    first.register(flow())
    run_id = first.start("w", {}).id
    first.close()
    engine = open_engine(registry=without_b(acts))
    engine.run_until_idle()

    monitor = wf.widgets.RunMonitor(engine, run_id, autostart=False)
    try:
        monitor.refresh()
        assert monitor.surface.status["b"] == "blocked"
    finally:
        monitor.close()
    assert {"blocked", "compensating"} <= set(STATUS_CLASSES)


@pytest.mark.parametrize("db_path", ["postgres"], indirect=True)
def test_an_engine_without_the_activity_leaves_the_run_to_one_that_has_it(
    open_engine: OpenEngine, acts: Activities
) -> None:
    acts.noop("a", "b")
    full = open_engine(registry=acts.registry, clock=None, lease="1s")
    full.register(flow())
    lacking = open_engine(registry=without_b(acts), clock=None, lease="1s")
    lacking.start_workers(2)
    run = lacking.start("w", {})

    # the engine that lacks 'b' runs 'a', then gives the run back with its step blocked
    def given_back() -> bool:
        owner = lacking.sql(f"SELECT owner FROM wf_instances WHERE run_id = '{run.id}'")
        return jobs(lacking, run.id) == [("b", "blocked")] and owner.fetchall() == [(None,)]

    assert eventually(given_back), (jobs(lacking, run.id), run.explain())
    assert acts.names() == ["a"]
    assert run.explain() == BLOCKED  # as this process sees it: it has no 'b'
    assert run.node_statuses()["b"] == "blocked"

    full.start_workers(2)
    assert full.run(run.id).result(timeout=20) == {}
    assert acts.names() == ["a", "b"]
    assert jobs(full, run.id) == []  # the blocked row the other engine wrote is gone
    assert lacking.runtime.scheduler.running  # it kept running workers all along
    lacking.stop()
    full.stop()
