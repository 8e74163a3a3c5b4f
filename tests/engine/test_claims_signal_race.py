"""docs/semantics.md (signals): a posted signal is taken at most once, also when engine
processes sharing a PostgreSQL database race for it. tests/engine/test_posted_signal_races.py
forces the race by taking the signal away between an engine's read and its commit; here two
real engines with their own workers start runs for the same posted signals at once, and every
signal still resumes exactly one run."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import wfkit as wf
from tests.engine.conftest import Activities, OpenEngine

KEYS = 30


@pytest.mark.parametrize("db_path", ["postgres"], indirect=True)
def test_two_engines_racing_for_posted_signals_take_each_once(
    open_engine: OpenEngine, acts: Activities
) -> None:
    acts.noop("prep", "after")
    flow = (
        wf.Workflow("paid", 1)
        .start_with("prep")
        .wait_for_signal("paid", correlate="key", bind={"amount": "amount"})
        .then("after")
    )
    engines = [open_engine(clock=None), open_engine(clock=None)]
    for engine in engines:
        engine.register(flow.copy())
    for i in range(KEYS):
        engines[0].post_signal("paid", f"k{i}", {"amount": i}, expires="1d")
    for engine in engines:
        engine.start_workers(2)

    started: list[list[wf.Run]] = [[], []]
    barrier = threading.Barrier(2)

    def start_all(n: int) -> None:
        barrier.wait(10)
        for i in range(KEYS):
            started[n].append(engines[n].start("paid", {"key": f"k{i}"}))

    threads = [threading.Thread(target=start_all, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [len(runs) for runs in started] == [KEYS, KEYS]

    def settled() -> bool:
        statuses = [engines[0].run(r.id).status for runs in started for r in runs]
        return (
            statuses.count(wf.RunStatus.COMPLETED) == KEYS
            and statuses.count(wf.RunStatus.WAITING) == KEYS
            and acts.count("after") == KEYS
        )

    deadline = time.monotonic() + 60
    while not settled() and time.monotonic() < deadline:
        time.sleep(0.05)

    reader = engines[0]
    by_key: dict[str, list[Any]] = {}
    for runs in started:
        for run in runs:
            handle = reader.run(run.id)
            by_key.setdefault(handle.input["key"], []).append(handle)
    for i in range(KEYS):
        pair = by_key[f"k{i}"]
        statuses = sorted(r.status.value for r in pair)
        assert statuses == ["completed", "waiting"], (i, statuses)
        (done,) = [r for r in pair if r.status is wf.RunStatus.COMPLETED]
        assert done.data["amount"] == i
    received = reader.sql("SELECT count(*) FROM wf_events WHERE kind = 'signal.received'")
    assert received.fetchall() == [(KEYS,)]
    assert reader.sql("SELECT count(*) FROM wf_signals").fetchall() == [(0,)]
    assert acts.count("after") == KEYS
    assert sorted(w.key for w in reader.waiting()) == sorted(f"k{i}" for i in range(KEYS))
