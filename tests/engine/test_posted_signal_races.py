"""A posted signal is taken at most once, also when engine processes on one PostgreSQL race for it.

Two engines may both read a signal posted for their runs' waits before either commits; the
first commit wins, and the checkpoint of the other is not written: its run goes on from its
last stored checkpoint and finds the signal gone. These tests take the signal away between the
engine's read and its commit (as another process's committed take would) and check that the run
never resumes with it.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import wfkit as wf
from tests.engine.helpers import is_postgres, kinds


def _shared_only(db_path: Any) -> str:
    if not is_postgres(db_path):
        pytest.skip("engine processes share only a PostgreSQL database")
    return str(db_path)


def _taken_meanwhile(engine: wf.Engine, url: str) -> list[str]:
    """Make every posted signal the engine reads vanish before its commit (taken elsewhere)."""
    writer = engine.runtime.writer
    read = writer._take_posted
    taken: list[str] = []

    def take(cp: Any, name: str, key: str | None) -> Any:
        found = read(cp, name, key)
        if found is not None:
            signal_id = cp.posted_taken[-1]
            with psycopg.connect(url, autocommit=True) as other:
                other.execute("DELETE FROM wf_signals WHERE signal_id = %s", [signal_id])
            taken.append(signal_id)
        return found

    writer._take_posted = take  # type: ignore[method-assign]
    return taken


def _flow() -> wf.Workflow:
    return (
        wf.Workflow("paid", 1)
        .start_with("prep")
        .wait_for_signal("paid", correlate="key", bind={"amount": "amount"})
        .then("after")
    )


def test_a_run_that_lost_the_race_for_a_posted_signal_waits_without_it(
    db_path, engine, acts
) -> None:
    url = _shared_only(db_path)
    acts.noop("prep", "after")
    engine.register(_flow())
    engine.post_signal("paid", "k", {"amount": 5}, expires="1d")
    taken = _taken_meanwhile(engine, url)

    run = engine.start("paid", {"key": "k"})
    engine.run_until_idle()
    engine.run_until_idle()  # the run given back is taken up again

    assert len(taken) == 1
    assert run.status == wf.RunStatus.WAITING  # the signal went to the other taker
    assert "signal.received" not in kinds(run)
    assert acts.count("after") == 0
    assert 1 <= acts.count("prep") <= 2  # the dropped checkpoint's step may run once more
    assert engine.sql("SELECT count(*) FROM wf_signals").fetchall() == [(0,)]
    (wait,) = engine.waiting()
    assert (wait.run_id, wait.name, wait.key) == (run.id, "paid", "k")

    assert engine.signal("paid", "k", {"amount": 7}) is True  # a new signal still resumes it
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED and run.data["amount"] == 7


def test_a_new_run_that_lost_the_race_is_not_written_and_its_caller_is_told(
    db_path, engine, acts
) -> None:
    url = _shared_only(db_path)
    acts.noop("after")
    engine.register(
        wf.Workflow("direct", 1).start_with().wait_for_signal("paid", correlate="key").then("after")
    )
    engine.post_signal("paid", "k", {}, expires="1d")
    _taken_meanwhile(engine, url)

    with pytest.raises(wf.StoreError, match="taken by another engine process"):
        engine.start("direct", {"key": "k"})

    assert engine.sql("SELECT count(*) FROM wf_instances").fetchall() == [(0,)]
    assert engine.runs() == []
    again = engine.start("direct", {"key": "k"})  # nothing left over: it simply waits
    engine.run_until_idle()
    assert again.status == wf.RunStatus.WAITING and acts.count("after") == 0
