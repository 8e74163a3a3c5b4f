"""Opening an engine again on a DuckDB file this process holds replaces the older engine (a
notebook cell run twice); a closed engine says why when it is used; two live engines never write
one file."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

import wfkit as wf
from tests.engine.helpers import run_to_idle
from wfkit.store.duckdb import DuckDBStore

duckdb_only = pytest.mark.duckdb_only


def parked_flow() -> wf.Workflow:
    return wf.Workflow("w").start_with("first").wait_for_signal("go", correlate="id").then("last")


@duckdb_only
def test_a_second_engine_on_the_file_replaces_the_first(
    db_path: Path, open_engine, acts, caplog: pytest.LogCaptureFixture
) -> None:
    acts.noop("first", "last")
    older = open_engine()
    run = run_to_idle(older, parked_flow(), {"id": "k-1"})
    assert run.status == wf.RunStatus.WAITING

    with caplog.at_level(logging.INFO, logger="wfkit.engine"):
        newer = open_engine()
    assert [r.message for r in caplog.records if r.name == "wfkit.engine"] == [
        f"a new engine on {str(db_path)!r} replaces the one this process had open on it"
    ]
    assert newer.run(run.id).status == wf.RunStatus.WAITING  # the run is in the file
    assert newer.signal("go", "k-1", {}) is True
    newer.run_until_idle()
    assert newer.run(run.id).status == wf.RunStatus.COMPLETED
    assert acts.names() == ["first", "last"]

    for call in (
        lambda: older.start("w", {"id": "k-2"}),
        lambda: older.signal("go", "k-1", {}),
        older.run_until_idle,
        lambda: older.start_workers(threads=1),
    ):
        with pytest.raises(wf.UsageError, match="replaced this engine") as info:
            call()
        assert str(db_path) in str(info.value) and "use the newer engine" in str(info.value)
    with pytest.raises(wf.StoreError, match="replaced this engine"):
        older.runs()  # reads go to the store, which says the same
    assert [r.run_id for r in newer.runs()] == [run.id]  # the refused start wrote nothing


@duckdb_only
def test_the_older_engines_attempt_in_flight_finishes_before_the_newer_opens(
    db_path: Path, open_engine, acts
) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(ctx: wf.ActivityContext[dict[str, object]]) -> dict[str, str]:
        started.set()
        assert release.wait(30)
        return {"by": "older"}

    acts.add("slow", slow)
    acts.noop("after")
    older = open_engine()
    older.register(wf.Workflow("s").start_with("slow").then("after"))
    older.start_workers(threads=1)
    run = older.start("s", {})
    assert started.wait(30)

    opened: list[wf.Engine] = []
    opener = threading.Thread(target=lambda: opened.append(open_engine()))
    opener.start()
    opener.join(0.5)
    assert opener.is_alive() and not opened, "the newer engine must wait for the attempt"
    release.set()
    opener.join(30)
    (newer,) = opened
    newer.run_until_idle()
    again = newer.run(run.id)
    assert again.status == wf.RunStatus.COMPLETED
    assert again.outputs["slow"] == {"by": "older"}
    assert acts.names() == ["slow", "after"], "the attempt in flight ran once"


@duckdb_only
def test_the_same_file_under_another_name_is_replaced_too(
    db_path: Path, open_engine, acts, tmp_path: Path
) -> None:
    older = open_engine()
    link = tmp_path / "link.duckdb"
    os.symlink(db_path, link)
    newer = open_engine(path=link)
    with pytest.raises(wf.UsageError, match="replaced"):
        older.run_until_idle()
    assert newer.runs() == []


@duckdb_only
def test_a_file_held_by_a_store_that_is_no_engine_is_still_refused(
    db_path: Path, open_engine
) -> None:
    store = DuckDBStore(db_path)  # e.g. `wfkit store copy` reading it
    try:
        with pytest.raises(wf.StoreError, match="already open in this process"):
            open_engine()
        assert store.query("schema_version")  # the holder keeps its file
    finally:
        store.close()
    assert open_engine().runs() == []


def test_a_closed_engine_refuses_work_and_says_so(db_path: Path, open_engine, acts) -> None:
    acts.noop("first", "last")
    engine = open_engine()
    engine.register(parked_flow())
    engine.close()
    for call in (
        lambda: engine.start("w", {"id": "k-1"}),
        engine.run_until_idle,
        lambda: engine.start_workers(threads=1),
    ):
        with pytest.raises(wf.UsageError, match=r"is closed: engine\.close\(\) closed it"):
            call()
    assert open_engine().runs() == []  # nothing was written


def test_memory_engines_and_postgresql_engines_are_never_replaced(
    db_path: Path, open_engine, acts
) -> None:
    acts.noop("first", "last")
    if isinstance(db_path, Path):  # the DuckDB half: ":memory:" engines are independent
        first, second = open_engine(path=":memory:"), open_engine(path=":memory:")
    else:  # PostgreSQL: many engines share a database through leases
        first, second = open_engine(), open_engine()
    run = run_to_idle(first, parked_flow(), {"id": "k-1"})
    assert first.run(run.id).status == wf.RunStatus.WAITING  # still open and working
    shared = [] if isinstance(db_path, Path) else [run.id]
    assert [r.run_id for r in second.runs()] == shared
