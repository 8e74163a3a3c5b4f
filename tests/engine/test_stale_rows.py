"""Rows a removed token held go with it, even when it parked in the very checkpoint that removed
it: a timer or a wait left behind would fire for nothing, be listed as open, and (on a shared
database, where every engine reads due timers from the table) be found due again forever."""

from __future__ import annotations

from typing import Any

import wfkit as wf


def rows(engine: wf.Engine, table: str, run: wf.Run) -> list[tuple[Any, ...]]:
    return engine.sql(f"SELECT token FROM {table} WHERE run_id = '{run.id}'").fetchall()


def test_a_delay_parked_and_taken_away_in_one_checkpoint_leaves_no_timer_row(
    engine, acts, clock
) -> None:
    acts.noop("after")
    engine.register(
        wf.Workflow("race")
        .start_with()
        .parallel(
            lambda b: b.delay("1h", id="slow"),
            lambda b: b.if_("True", then=lambda t: t.end(), id="quick"),
            join="any",
        )
        .then("after")
    )
    run = engine.start("race", {})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert rows(engine, "wf_timers", run) == []

    clock.advance("2h")
    engine.run_until_idle()  # returns: no timer is found due again and again
    assert [e.kind for e in run.history()].count("timer.fired") == 0
    assert acts.names() == ["after"]


def test_a_wait_opened_and_taken_away_in_one_checkpoint_leaves_no_open_wait(engine, acts) -> None:
    acts.noop("after")
    engine.register(
        wf.Workflow("race")
        .start_with()
        .parallel(
            lambda b: b.wait_for_signal("go", correlate="key", id="go"),
            lambda b: b.if_("True", then=lambda t: t.end(), id="quick"),
            join="any",
        )
        .then("after")
    )
    run = engine.start("race", {"key": "k"})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert rows(engine, "wf_bookmarks", run) == []
    assert engine.waiting() == []
    assert engine.signal("go", "k", {}) is False


def test_a_stale_timer_row_is_deleted_when_it_comes_due(open_engine, acts, clock) -> None:
    acts.noop("before")
    engine = open_engine()
    engine.register(wf.Workflow("w").start_with("before").delay("1h", id="pause"))
    run = engine.start("w", {})
    engine.run_until_idle()
    engine.cancel(run.id, reason="no longer needed")
    # a row nothing waits for (as an older engine could leave behind)
    engine.sql(
        "INSERT INTO wf_timers (run_id, token, node_id, kind, due_at) "
        f"VALUES ('{run.id}', 't99', 'pause', 'delay', TIMESTAMP '2000-01-01 00:00:00')"
    )
    engine.close()
    engine = open_engine()  # timers are read from the table when an engine opens
    clock.advance("2h")
    engine.run_until_idle()
    run = engine.run(run.id)
    assert rows(engine, "wf_timers", run) == []
    assert run.status == wf.RunStatus.CANCELLED
    owner = engine.sql(f"SELECT owner FROM wf_instances WHERE run_id = '{run.id}'").fetchall()
    assert owner == [(None,)]  # an ended run is not left held by the engine that looked at it
