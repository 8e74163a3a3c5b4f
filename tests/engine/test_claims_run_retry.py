"""docs/semantics.md §16.4-16.5: visit counts start afresh for each run attempt. A failure that
unwound a saga goes on from the saga's first step, so every step of the saga is reached again;
steps allowed one visit still run in the next run attempt (DuckDB and PostgreSQL)."""

from __future__ import annotations

from typing import Any

import wfkit as wf
from tests.engine.conftest import Activities


def test_steps_allowed_one_visit_run_again_in_the_next_run_attempt(
    engine: wf.Engine, acts: Activities, clock: wf.ManualClock
) -> None:
    failures = {"left": 1}

    def book(ctx: wf.ActivityContext[Any]) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("no seats")

    acts.add("book", book)
    acts.noop("reserve", "release", "charge", "refund", "ship")

    def body(s: wf.Steps) -> None:
        s.then("reserve", max_visits=1).compensate_with("release")
        s.then("charge", max_visits=1).compensate_with("refund")
        s.then("book", max_attempts=1, max_visits=1)

    engine.register(
        wf.Workflow("trip", 1, retry=wf.RunRetry(max_attempts=2, delay="1m"))
        .start_with()
        .saga(body, id="trip")
        .then("ship")
    )
    run = engine.start("trip", {})
    engine.run_until_idle()
    assert run.status is wf.RunStatus.WAITING, run.explain()  # waiting for run attempt 2
    (retrying,) = [e for e in run.history() if e.kind == "run.retrying"]
    assert retrying.detail["resume"] == "reserve"  # the saga's first step: all of it again

    clock.advance("1m")
    engine.run_until_idle()

    assert run.status is wf.RunStatus.COMPLETED, run.explain()
    assert run.view().run_attempt == 2
    assert acts.names() == [
        "reserve", "charge", "book", "refund", "release",  # run attempt 1, unwound
        "reserve", "charge", "book", "ship",  # run attempt 2: each step's second visit
    ]  # fmt: skip
