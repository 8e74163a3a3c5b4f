"""durability="batched" on both stores: runs do what they do with "step"; what is staged reaches
the store before anything reads it, and before the engine closes."""

from __future__ import annotations

from collections import Counter

import pytest

import wfkit as wf
from tests.engine.conftest import Activities


def _flow(acts: Activities) -> wf.Workflow:
    for name in ("bd.a", "bd.b", "bd.c", "bd.d", "bd.e"):
        acts.add(name)
    return (
        wf.Workflow("bd.flow", 1)
        .start_with("bd.a")
        .then("bd.b")
        .parallel(x=lambda b: b.then("bd.c"), y=lambda b: b.then("bd.d"))
        .wait_for_signal("go", correlate="key")
        .then("bd.e")
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_batched_runs_end_as_step_runs_do_and_every_checkpoint_is_written(
    open_engine, acts: Activities, workers: int
) -> None:
    engine = open_engine(durability="batched")
    engine.register(_flow(acts))
    if workers:
        engine.start_workers(workers)
    runs = engine.start_many("bd.flow", [{"key": f"k{i}"} for i in range(5)])
    engine.run_until_idle()
    assert [r.status for r in runs] == [wf.RunStatus.WAITING] * 5  # parked: written at once
    waits = engine.sql("SELECT count(*) FROM wf_bookmarks").fetchall()[0][0]
    assert waits == 5
    for i in range(5):
        assert engine.signal("go", f"k{i}")
    engine.run_until_idle()
    engine.close()

    reopened = open_engine(durability="step")
    for run in runs:
        again = reopened.run(run.id)
        assert again.status == wf.RunStatus.COMPLETED
        completed = Counter(e.node_id for e in again.history() if e.kind == "step.completed")
        assert completed == dict.fromkeys(("bd.a", "bd.b", "bd.c", "bd.d", "bd.e"), 1)
        seqs = [e.seq for e in again.history()]
        assert seqs == list(range(1, len(seqs) + 1))
    assert sum(acts.count(n) for n in ("bd.a", "bd.e")) == 10  # nothing ran twice


def test_an_unknown_durability_is_refused_with_the_choices(open_engine) -> None:
    with pytest.raises(wf.UsageError, match="'step', 'batched'"):
        open_engine(durability="sometimes")
