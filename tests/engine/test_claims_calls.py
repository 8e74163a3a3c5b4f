"""docs/semantics.md §15.8: calls that recurse through other workflows are bounded at run time —
a call that would nest child runs more than 32 deep fails (the limit checked as stated, on
DuckDB and PostgreSQL)."""

from __future__ import annotations

import wfkit as wf
from tests.engine.conftest import Activities


def test_calls_recursing_through_two_workflows_stop_32_deep(
    engine: wf.Engine, acts: Activities
) -> None:
    acts.noop("step")
    engine.register(wf.Workflow("a", 1).start_with("step"))
    engine.register(wf.Workflow("b", 1).start_with("step").call("a"))  # a: the latest when called
    engine.register(wf.Workflow("a", 2).start_with("step").call("b"))  # a -> b -> a -> ...

    top = engine.start("a", {})
    engine.run_until_idle()

    family = [top]
    while children := family[-1].children():
        (child,) = children
        family.append(child)
    assert len(family) == 33  # the run and 32 levels of child runs
    assert [run.status for run in family] == [wf.RunStatus.FAILED] * 33
    assert acts.count("step") == 33
    deepest = family[-1].view().error
    assert deepest is not None
    assert "would nest child runs 33 deep (at most 32)" in deepest
    assert "break the cycle" in deepest
    assert len(engine.runs()) == 33
