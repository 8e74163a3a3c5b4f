"""``run_until_idle`` with worker threads returns only once the work it was waiting for is done."""

from __future__ import annotations

import wfkit as wf


def test_run_until_idle_with_workers_waits_for_every_step_of_every_run(engine, acts) -> None:
    # The writer thread takes a result out of the in-flight table before the commit that
    # releases the next step; an idle check in that gap used to return with work still to do.
    acts.noop("one", "two", "three")
    engine.register(wf.Workflow("w").start_with("one").then("two").then("three"))
    engine.start_workers(4)
    try:
        for round_ in range(5):
            runs = engine.start_many("w", [{"i": i} for i in range(100)])
            engine.run_until_idle()
            statuses = [run.status for run in runs]
            done = statuses.count(wf.RunStatus.COMPLETED)
            assert done == 100, f"round {round_}: {done} of 100 runs completed when it returned"
    finally:
        engine.stop()
    assert acts.count("three") == 500
