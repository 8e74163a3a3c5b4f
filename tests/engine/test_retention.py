"""Retention: ``engine.purge`` and ``engine.archive`` take ended runs older than a cutoff, with
every row keyed by their run id, and never a run in flight; ``wf.Retention`` does it while the
engine runs. Every test runs on DuckDB and PostgreSQL and checks the tables by SQL."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

import wfkit as wf
from tests.engine.helpers import kinds, run_to_idle
from tests.polling import wait_until
from wfkit.engine import archive as archive_module
from wfkit.engine.retention import RUN_TABLES
from wfkit.store.queries import has_query, migrations

# --- a store with runs of every kind ------------------------------------------------------------


@dataclass
class Runs:
    """Old ended runs (completed with a saga, failed, cancelled), runs in flight started as
    long ago (waiting on a signal, on a delay, suspended), and a run ended recently."""

    completed: wf.Run
    failed: wf.Run
    cancelled: wf.Run
    waiting: wf.Run
    delayed: wf.Run
    suspended: wf.Run
    recent: wf.Run

    @property
    def old(self) -> list[wf.Run]:
        return [self.completed, self.failed, self.cancelled]

    @property
    def kept(self) -> list[wf.Run]:
        return [self.waiting, self.delayed, self.suspended, self.recent]


def _boom(ctx: Any) -> None:
    ctx.logger.warning("calling the backend")  # a wf_logs row that goes with the run
    raise RuntimeError("backend down")


def _receipt(ctx: Any) -> Any:
    ctx.logger.info("receipt sent")
    return {"copy": wf.Artifact(b"receipt")}  # a wf_artifacts row that goes with the run


@pytest.fixture
def engine(open_engine: Any, tmp_path: Path) -> wf.Engine:
    """The engine of these tests, its artifacts under the test's folder."""
    return open_engine(artifacts=tmp_path / "artifacts")


def register(engine: wf.Engine, acts: Any) -> None:
    acts.noop("reserve", "release", "after")
    acts.add("receipt", _receipt)
    acts.add("boom", _boom)
    engine.register(
        wf.Workflow("saga")
        .start_with()
        .saga(lambda s: s.then("reserve").compensate_with("release"), id="order")
        .then("receipt")
    )
    engine.register(wf.Workflow("fails").start_with("boom", max_attempts=1))
    engine.register(wf.Workflow("stuck").start_with("boom", max_attempts=1, on_failure="suspend"))
    engine.register(
        wf.Workflow("waits").start_with().wait_for_signal("go", correlate="key").then("after")
    )
    engine.register(wf.Workflow("sleeps").start_with().delay("90d", id="nap").then("after"))


def make_runs(engine: wf.Engine, acts: Any, clock: wf.ManualClock) -> Runs:
    """The runs of :class:`Runs`; the old ones ended 31 days before the clock's now."""
    register(engine, acts)
    completed = engine.start("saga", {})
    failed = engine.start("fails", {})
    cancelled = engine.start("waits", {"key": "c"})
    waiting = engine.start("waits", {"key": "w"})
    delayed = engine.start("sleeps", {})
    suspended = engine.start("stuck", {})
    engine.run_until_idle()
    engine.cancel(cancelled.id, actor="ops", reason="duplicate")
    # rows an older engine could have left behind for an ended run: they go with it too
    engine.sql(
        "INSERT INTO wf_timers (run_id, token, node_id, kind, due_at) "
        f"VALUES ('{completed.id}', 't9', 'x', 'delay', TIMESTAMP '2100-01-01 00:00:00')"
    )
    engine.sql(
        "INSERT INTO wf_bookmarks (run_id, token, node_id, kind, name, key, since) "
        f"VALUES ('{completed.id}', 't9', 'x', 'signal', 'gone', 'k', "
        "TIMESTAMP '2000-01-01 00:00:00')"
    )
    engine.sql(
        "INSERT INTO wf_jobs (run_id, token, node_id, status, attempt, updated_at) "
        f"VALUES ('{failed.id}', 't9', 'x', 'ready', 1, TIMESTAMP '2000-01-01 00:00:00')"
    )
    clock.advance("31d")
    recent = engine.start("saga", {})
    engine.run_until_idle()
    runs = Runs(completed, failed, cancelled, waiting, delayed, suspended, recent)
    assert [r.status.value for r in runs.old] == ["completed", "failed", "cancelled"]
    assert [r.status.value for r in runs.kept] == ["waiting", "waiting", "suspended", "completed"]
    return runs


def table_rows(engine: wf.Engine, run_ids: list[str]) -> dict[str, int]:
    """Rows of each run table that belong to ``run_ids``."""
    listed = ", ".join(f"'{r}'" for r in run_ids)
    return {
        table: engine.sql(f"SELECT count(*) FROM {table} WHERE run_id IN ({listed})").fetchall()[0][
            0
        ]
        for table in RUN_TABLES
    }


def ids(runs: list[wf.Run]) -> list[str]:
    return [r.id for r in runs]


def all_rows(engine: wf.Engine, table: str, run_ids: list[str]) -> list[tuple[Any, ...]]:
    listed = ", ".join(f"'{r}'" for r in run_ids)
    return sorted(
        engine.sql(f"SELECT * FROM {table} WHERE run_id IN ({listed})").fetchall(), key=repr
    )


def columns(engine: wf.Engine, table: str) -> list[str]:
    found = engine.sql(
        "SELECT column_name FROM information_schema.columns "
        f"WHERE table_name = '{table}' AND table_schema = current_schema() "
        "ORDER BY ordinal_position"
    ).fetchall()
    return [row[0] for row in found]


# --- purge ----------------------------------------------------------------------------------------


def test_purge_takes_the_old_ended_runs_with_every_row_and_leaves_the_others(
    engine, acts, clock
) -> None:
    runs = make_runs(engine, acts, clock)
    old = table_rows(engine, ids(runs.old))
    # every table holds rows of the old runs, so each deletion is seen
    assert all(old[t] > 0 for t in RUN_TABLES), old
    kept_before = {t: all_rows(engine, t, ids(runs.kept)) for t in RUN_TABLES}
    assert kept_before["wf_bookmarks"] and kept_before["wf_timers"]

    assert engine.purge(older_than="30d") == 3

    assert table_rows(engine, ids(runs.old)) == dict.fromkeys(RUN_TABLES, 0)
    assert {t: all_rows(engine, t, ids(runs.kept)) for t in RUN_TABLES} == kept_before
    assert {r.run_id for r in engine.runs()} == set(ids(runs.kept))
    assert engine.purge(older_than="30d") == 0  # nothing left to take


def test_purged_runs_are_forgotten_and_their_handles_say_they_do_not_exist(
    engine, acts, clock
) -> None:
    runs = make_runs(engine, acts, clock)
    assert runs.completed.data == {}  # read once: the writer keeps its frozen copy
    engine.purge(older_than="30d")
    for run in runs.old:
        for read in (
            lambda run=run: run.status,
            lambda run=run: run.data,
            lambda run=run: run.history(),
            lambda run=run: engine.run(run.id),
        ):
            with pytest.raises(wf.UsageError, match=f"there is no run '{run.id}'"):
                read()
    with pytest.raises(wf.UsageError, match="there is no run"):
        engine.restart_as_new(runs.failed.id)
    with pytest.raises(wf.UsageError, match="there is no run"):
        engine.cancel(runs.cancelled.id)


def test_runs_in_flight_keep_working_after_a_purge(engine, acts, clock) -> None:
    runs = make_runs(engine, acts, clock)
    engine.purge(older_than="0s")  # every ended run, however recent

    assert [r.status.value for r in runs.kept[:3]] == ["waiting", "waiting", "suspended"]
    assert engine.signal("go", "w", {}) is True
    clock.advance("90d")
    engine.run_until_idle()
    assert runs.waiting.status == wf.RunStatus.COMPLETED
    assert runs.delayed.status == wf.RunStatus.COMPLETED
    assert kinds(runs.waiting)[-1] == "run.completed"
    with pytest.raises(wf.UsageError):
        _ = runs.recent.status  # ended, so "0s" took it too


def test_the_cutoff_is_measured_on_the_engine_clock(engine, acts, clock) -> None:
    register(engine, acts)
    run = engine.start("saga", {})
    engine.run_until_idle()
    clock.advance("29d")
    assert engine.purge(older_than="30d") == 0
    assert run.status == wf.RunStatus.COMPLETED
    clock.advance("1d1s")
    assert engine.purge(older_than="30d") == 1


def test_status_narrows_the_purge_to_one_ended_status_or_a_list(engine, acts, clock) -> None:
    runs = make_runs(engine, acts, clock)
    assert engine.purge(older_than="30d", status="failed") == 1
    assert table_rows(engine, [runs.failed.id]) == dict.fromkeys(RUN_TABLES, 0)
    assert runs.completed.status == wf.RunStatus.COMPLETED
    assert runs.cancelled.status == wf.RunStatus.CANCELLED

    assert engine.purge(older_than="30d", status=[wf.RunStatus.CANCELLED, "completed"]) == 2
    assert {r.run_id for r in engine.runs()} == set(ids(runs.kept))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"status": "waiting"}, "runs that are waiting have not ended and are never purged"),
        ({"status": ["failed", "running"]}, "runs that are running have not ended"),
        ({"status": "suspended"}, "runs that are suspended have not ended"),
        ({"status": "done"}, "'done' is not a run status"),
        ({"status": []}, "status= is an empty list"),
        ({"older_than": "soon"}, "'soon' is not a duration"),
        ({"older_than": "-1d"}, "older_than"),
    ],
)
def test_a_refused_purge_writes_nothing(engine, acts, clock, kwargs, message) -> None:
    runs = make_runs(engine, acts, clock)
    every = ids(runs.old) + ids(runs.kept)
    before = {t: all_rows(engine, t, every) for t in RUN_TABLES}
    with pytest.raises(wf.UsageError, match=message) as refused:
        engine.purge(**{"older_than": "30d", **kwargs})
    assert "purged" in str(refused.value)
    assert {t: all_rows(engine, t, every) for t in RUN_TABLES} == before


def test_purge_is_a_command_of_the_writer_while_workers_run(engine, acts, clock) -> None:
    register(engine, acts)
    engine.start_workers(threads=2)
    old = [engine.start("saga", {}) for _ in range(5)]
    for run in old:
        run.result(timeout=10)
    clock.advance("31d")
    waiting = engine.start("waits", {"key": "k"})
    assert engine.purge(older_than="30d") == 5
    assert table_rows(engine, ids(old)) == dict.fromkeys(RUN_TABLES, 0)
    assert engine.signal("go", "k", {}) is True
    assert waiting.result(timeout=10) == {"key": "k"}


def test_a_run_whose_parent_was_purged_reads_and_runs_on(engine, acts, clock) -> None:
    register(engine, acts)
    parent = engine.start("waits", {"key": "p"})
    engine.cancel(parent.id)
    child = engine.restart_as_new(parent.id)
    engine.run_until_idle()
    clock.advance("31d")
    assert engine.purge(older_than="30d") == 1  # the parent; the child is in flight

    assert child.status == wf.RunStatus.WAITING
    assert [(r.run_id, r.parent_run_id) for r in engine.runs()] == [(child.id, parent.id)]
    assert child.history()[0].detail["restart_of"] == parent.id
    assert "waiting for signal 'go' (key p)" in child.explain()
    assert engine.signal("go", "p", {}) is True
    engine.run_until_idle()
    assert child.status == wf.RunStatus.COMPLETED


def test_a_run_whose_restart_was_purged_reads_and_restarts_again(engine, acts, clock) -> None:
    register(engine, acts)
    parent = engine.start("waits", {"key": "p"})
    engine.cancel(parent.id)
    child = engine.restart_as_new(parent.id)
    engine.run_until_idle()
    engine.cancel(child.id)
    clock.advance("1d")
    failed = engine.start("fails", {})
    engine.run_until_idle()
    assert engine.purge(older_than="0s", status="failed") == 1
    assert engine.purge(older_than="0s", status="cancelled") == 2
    assert engine.runs() == []
    with pytest.raises(wf.UsageError):
        _ = failed.status

    parent = engine.start("fails", {})
    engine.run_until_idle()
    child = engine.restart_as_new(parent.id)
    engine.run_until_idle()
    # the parent ended first, so a cutoff never takes the child alone; a status can
    engine.cancel(engine.restart_as_new(parent.id).id)
    engine.run_until_idle()  # its first step was queued: the cancel ends it once it stopped
    assert engine.purge(older_than="0s", status="cancelled") == 1
    restarted = [e.detail["new_run"] for e in parent.history() if e.kind == "run.restarted"]
    assert restarted[0] == child.id and len(restarted) == 2
    assert parent.status == wf.RunStatus.FAILED
    again = engine.restart_as_new(parent.id)
    engine.run_until_idle()
    assert again.status == wf.RunStatus.FAILED
    assert {r.parent_run_id for r in engine.runs()} == {None, parent.id}


def test_a_failed_run_retried_by_hand_is_in_flight_again_and_stays(engine, acts, clock) -> None:
    register(engine, acts)
    gone, back = engine.start("fails", {}), engine.start("fails", {})
    engine.run_until_idle()
    clock.advance("31d")
    assert engine.purge(older_than="30d", status="completed") == 0
    engine.retry(back.id, actor="ops")  # its next run attempt fails again, now
    engine.run_until_idle()
    assert back.status == wf.RunStatus.FAILED
    assert engine.purge(older_than="30d") == 1  # the one that ended 31 days ago
    assert [r.run_id for r in engine.runs()] == [back.id]
    with pytest.raises(wf.UsageError, match=f"there is no run '{gone.id}'"):
        engine.retry(gone.id)


def test_a_child_run_stays_while_its_caller_is_in_flight(engine, acts, clock) -> None:
    acts.noop("pay", "ship")
    engine.register(wf.Workflow("payment").start_with("pay"))
    caller = run_to_idle(
        engine,
        wf.Workflow("shop")
        .start_with()
        .call("payment")
        .wait_for_signal("shipped", correlate="key")
        .then("ship"),
        {"key": "k"},
    )
    (child,) = caller.children()
    assert (child.status, caller.status) == (wf.RunStatus.COMPLETED, wf.RunStatus.WAITING)
    clock.advance("31d")
    assert engine.purge(older_than="30d") == 0  # its caller still runs
    assert child.status == wf.RunStatus.COMPLETED and child.parent is not None

    assert engine.signal("shipped", "k", {}) is True
    engine.run_until_idle()
    assert engine.purge(older_than="30d") == 1  # the child; its caller ended just now
    assert caller.status == wf.RunStatus.COMPLETED
    assert kinds(caller)[-1] == "run.completed"
    (gone,) = caller.children()  # a handle on the purged child says it is gone
    assert gone.id == child.id
    with pytest.raises(wf.UsageError, match=f"there is no run '{child.id}'"):
        _ = gone.status


def test_a_grown_run_is_purged_and_its_graph_stays_a_definition(open_engine, acts, clock) -> None:
    acts.noop("a", "x")
    engine = open_engine()
    run = run_to_idle(
        engine, wf.Workflow("w", 1).start_with("a").wait_for_signal("go", correlate="k"), {"k": "1"}
    )
    engine.append(run.id, lambda b: b.then("x"))
    assert engine.signal("go", "1", {}) is True
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    definitions = engine.sql("SELECT count(*) FROM wf_definitions").fetchall()[0][0]
    clock.advance("31d")
    assert engine.purge(older_than="30d") == 1
    assert engine.sql("SELECT count(*) FROM wf_definitions").fetchall()[0][0] == definitions
    engine.close()
    engine = open_engine()  # the definitions load as before
    assert engine.workflows() == {"w": [1]}
    again = engine.start("w", {"k": "2"})
    engine.run_until_idle()
    assert again.status == wf.RunStatus.WAITING


def orphans(engine: wf.Engine) -> dict[str, int]:
    """Rows of each run table whose run has no summary row (a purge left them behind)."""
    return {
        table: engine.sql(
            f"SELECT count(*) FROM {table} WHERE run_id NOT IN (SELECT run_id FROM wf_instances)"
        ).fetchall()[0][0]
        for table in RUN_TABLES[1:]
    }


def test_purges_while_runs_start_and_end_leave_no_row_behind(engine, acts, clock) -> None:
    register(engine, acts)
    engine.start_workers(threads=2)
    started: list[wf.Run] = []
    purged = 0
    for _ in range(15):
        started += [engine.start("saga", {}) for _ in range(4)]
        started.append(engine.start("waits", {"key": f"k{len(started)}"}))
        purged += engine.purge(older_than="0s")  # whatever has ended by now
    for run in started:
        if run.id not in {w.run_id for w in engine.waiting()}:
            with contextlib.suppress(wf.UsageError):  # purged already
                assert run.result(timeout=10) == {}
    purged += engine.purge(older_than="0s")
    engine.stop()
    assert purged == 60  # every saga run, each purged exactly once
    assert orphans(engine) == dict.fromkeys(RUN_TABLES[1:], 0)
    assert {r.status for r in engine.runs()} == {wf.RunStatus.WAITING}
    assert len(engine.waiting()) == 15


def test_two_engines_purging_one_database_at_once_take_each_run_once(
    db_path, open_engine, acts, clock, tmp_path
) -> None:
    if not str(db_path).startswith("postgresql"):
        pytest.skip("two engines share only a PostgreSQL database")
    first, second = open_engine(), open_engine()
    register(first, acts)
    for _ in range(10):
        first.start_many("saga", [{} for _ in range(20)])
    first.run_until_idle()
    clock.advance("31d")
    reports: list[Any] = []
    barrier = threading.Barrier(2)

    def archive(engine: wf.Engine, folder: str) -> None:
        barrier.wait()
        reports.append(engine.archive(tmp_path / folder, older_than="30d"))

    threads = [
        threading.Thread(target=archive, args=(e, name))
        for e, name in ((first, "a"), (second, "b"))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sum(r.runs for r in reports) == 200
    archived = [
        run_id
        for folder in ("a", "b")
        if (tmp_path / folder / "wf_instances.parquet").exists()
        for (run_id,) in duckdb.sql(
            f"SELECT run_id FROM read_parquet('{tmp_path / folder / 'wf_instances.parquet'}')"
        ).fetchall()
    ]
    assert len(archived) == len(set(archived)) == 200  # each run in one archive only
    assert first.runs() == [] and orphans(first) == dict.fromkeys(RUN_TABLES[1:], 0)


# --- archive --------------------------------------------------------------------------------------


def read_parquet(path: Path) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Columns and rows of a Parquet file, read by DuckDB."""
    with duckdb.connect() as conn:
        found = conn.execute("SELECT * FROM read_parquet(?)", [str(path)])
        names = [d[0] for d in found.description or []]
        return names, sorted(found.fetchall(), key=repr)


def test_archive_writes_every_table_to_parquet_then_purges(engine, acts, clock, tmp_path) -> None:
    runs = make_runs(engine, acts, clock)
    old = ids(runs.old)
    before = {t: all_rows(engine, t, old) for t in RUN_TABLES}
    names = {t: columns(engine, t) for t in RUN_TABLES}

    report = engine.archive(tmp_path / "archive", older_than="30d")

    folder = (tmp_path / "archive").resolve()
    assert report.runs == 3
    assert report.directory == folder
    assert report.files == tuple(folder / f"{t}.parquet" for t in RUN_TABLES)
    assert report.rows == {t: len(before[t]) for t in RUN_TABLES}
    assert sorted(os.listdir(folder)) == sorted(f"{t}.parquet" for t in RUN_TABLES)
    for table in RUN_TABLES:
        assert read_parquet(folder / f"{table}.parquet") == (names[table], before[table])
    assert table_rows(engine, old) == dict.fromkeys(RUN_TABLES, 0)
    assert {r.run_id for r in engine.runs()} == set(ids(runs.kept))
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.runs = 0  # type: ignore[misc]


@pytest.mark.duckdb_only
def test_engine_sql_reads_the_archive_back_on_duckdb(engine, acts, clock, tmp_path) -> None:
    runs = make_runs(engine, acts, clock)
    history = kinds(runs.completed)
    engine.archive(tmp_path, older_than="30d", status="completed")
    path = tmp_path / "wf_events.parquet"
    found = engine.sql(
        f"SELECT kind FROM read_parquet('{path}') WHERE run_id = '{runs.completed.id}' ORDER BY seq"
    ).fetchall()
    assert [row[0] for row in found] == history


def test_a_second_archive_into_the_same_directory_never_overwrites_the_first(
    engine, acts, clock, tmp_path
) -> None:
    runs = make_runs(engine, acts, clock)
    first = engine.archive(tmp_path, older_than="30d", status="failed")
    saved = {path: path.read_bytes() for path in first.files}
    assert [p.name for p in first.files] == [
        "wf_instances.parquet",
        "wf_events.parquet",
        "wf_jobs.parquet",
        "wf_logs.parquet",
    ]
    second = engine.archive(tmp_path, older_than="30d")
    assert second.runs == 2
    # every table with rows of those runs (the failed run took the only job row)
    assert [p.name for p in second.files] == [
        f"{t}-2.parquet" for t in RUN_TABLES if t != "wf_jobs"
    ]
    assert {path: path.read_bytes() for path in first.files} == saved
    third = engine.archive(tmp_path, older_than="0s")  # the recent run
    assert [p.name for p in third.files][:2] == ["wf_instances-3.parquet", "wf_events-3.parquet"]
    empty = engine.archive(tmp_path, older_than="0s")
    assert (empty.runs, empty.files, empty.rows) == (0, (), {})

    with duckdb.connect() as conn:
        archived = conn.execute(
            "SELECT DISTINCT run_id FROM read_parquet(?)", [str(tmp_path / "wf_instances*.parquet")]
        ).fetchall()
    assert {row[0] for row in archived} == {*ids(runs.old), runs.recent.id}


def test_an_archive_into_a_path_that_is_a_file_purges_nothing(
    engine, acts, clock, tmp_path
) -> None:
    runs = make_runs(engine, acts, clock)
    in_the_way = tmp_path / "archive"
    in_the_way.write_text("not a directory")
    before = table_rows(engine, ids(runs.old))
    for target in (in_the_way, in_the_way / "inside"):
        with pytest.raises(wf.UsageError, match="nothing was archived or purged"):
            engine.archive(target, older_than="30d")
    assert table_rows(engine, ids(runs.old)) == before
    assert in_the_way.read_text() == "not a directory"


def test_an_archive_that_fails_half_way_leaves_no_file_and_purges_nothing(
    engine, acts, clock, tmp_path, monkeypatch
) -> None:
    runs = make_runs(engine, acts, clock)
    before = {t: all_rows(engine, t, ids(runs.old)) for t in RUN_TABLES}
    write = archive_module.ArchiveFiles._write

    def full_disk(self: Any, table: str, names: list[str], rows: list[Any]) -> None:
        if table == "wf_jobs":  # the files of the tables before it are written by now
            raise OSError(28, "No space left on device")
        write(self, table, names, rows)

    monkeypatch.setattr(archive_module.ArchiveFiles, "_write", full_disk)
    folder = tmp_path / "archive"
    with pytest.raises(wf.UsageError, match="No space left on device") as failed:
        engine.archive(folder, older_than="30d")
    assert "wf_jobs.parquet" in str(failed.value)
    assert os.listdir(folder) == []  # neither the files written nor temporary ones
    assert {t: all_rows(engine, t, ids(runs.old)) for t in RUN_TABLES} == before
    assert runs.completed.status == wf.RunStatus.COMPLETED

    monkeypatch.setattr(archive_module.ArchiveFiles, "_write", write)
    assert engine.archive(folder, older_than="30d").runs == 3  # fixed: the same runs go


# --- periodic retention ---------------------------------------------------------------------------


def count(engine: wf.Engine) -> int:
    return len(engine.runs())


def test_retention_purges_at_open_then_at_most_every_period(open_engine, acts, clock) -> None:
    engine = open_engine()
    register(engine, acts)
    for _ in range(3):
        engine.start("saga", {})
    waiting = engine.start("waits", {"key": "k"})
    engine.run_until_idle()
    engine.close()
    clock.advance("2d")

    engine = open_engine(retention=wf.Retention("1d", every="1h"))
    register(engine, acts)
    assert [r.run_id for r in engine.runs()] == [waiting.id]  # purged at open

    engine.start_workers(threads=2)
    done = engine.start("saga", {})
    done.result(timeout=10)
    clock.advance("1d1m")  # old enough, but the last pass was 1d1m ago: due now
    wait_until(lambda: count(engine) == 1, "one run is left")
    later = engine.start("saga", {})
    later.result(timeout=10)
    clock.advance("1d")  # old enough and due: purged at the pass this advance wakes
    wait_until(lambda: count(engine) == 1, "one run is left")
    assert engine.run(waiting.id).status == wf.RunStatus.WAITING

    last = engine.start("saga", {})
    last.result(timeout=10)
    clock.advance("30m")
    time.sleep(0.2)  # rounds run, but the next pass is not due
    assert count(engine) == 2
    engine.stop()


def test_retention_between_passes_waits_for_its_period(open_engine, acts, clock) -> None:
    engine = open_engine(retention=wf.Retention("1h", every="1d"))
    register(engine, acts)
    engine.start_workers(threads=1)
    run = engine.start("saga", {})
    run.result(timeout=10)
    clock.advance("2h")  # old enough, but the pass at open was 2 hours ago
    time.sleep(0.2)
    assert count(engine) == 1
    clock.advance("22h")
    wait_until(lambda: count(engine) == 0, "no run is left")
    engine.stop()


def test_a_pass_takes_its_runs_a_chunk_per_round_while_other_work_goes_on(
    open_engine, acts, clock, monkeypatch
) -> None:
    from wfkit.engine import retention

    monkeypatch.setattr(retention, "CHUNK", 2)  # five runs: three transactions
    engine = open_engine()
    register(engine, acts)
    for _ in range(5):
        engine.start("saga", {})
    engine.run_until_idle()
    clock.advance("2d")
    engine.close()
    engine = open_engine(retention=wf.Retention("1d", every="1h"))
    assert count(engine) == 0  # at open: every chunk
    register(engine, acts)

    for _ in range(5):
        engine.start("saga", {})
    engine.run_until_idle()
    clock.advance("2d")
    waiting = engine.start("waits", {"key": "k"})
    engine.run_until_idle()  # one round: one chunk taken, the new run advanced to its wait
    assert count(engine) == 4 and waiting.status == wf.RunStatus.WAITING
    engine.run_until_idle()
    engine.run_until_idle()
    assert [r.run_id for r in engine.runs()] == [waiting.id]


def test_retention_can_archive_first(open_engine, acts, clock, tmp_path) -> None:
    engine = open_engine(retention=wf.Retention("1d", archive_to=tmp_path / "a", every="1h"))
    register(engine, acts)
    run = engine.start("saga", {})
    engine.run_until_idle()
    clock.advance("2d")
    engine.run_until_idle()  # inline rounds look too
    assert count(engine) == 0
    names, rows = read_parquet(tmp_path / "a" / "wf_instances.parquet")
    assert [row[names.index("run_id")] for row in rows] == [run.id]


def test_a_bad_retention_is_refused_before_the_engine_opens(db_path, clock) -> None:
    with pytest.raises(wf.UsageError, match="older_than: 'soon' is not a duration"):
        wf.Engine(db_path, clock=clock, retention="soon")
    with pytest.raises(wf.UsageError, match="every='0s' must be longer than zero"):
        wf.Retention("1d", every="0s")
    with pytest.raises(wf.UsageError, match="every: duration '-1h' is negative"):
        wf.Retention("1d", every="-1h")
    assert wf.Retention("30d") == wf.Retention(timedelta(days=30), every="1h")


def test_an_archive_directory_in_the_way_is_refused_and_the_store_released(
    db_path, clock, tmp_path
) -> None:
    in_the_way = tmp_path / "file"
    in_the_way.write_text("x")
    with pytest.raises(wf.UsageError, match=r"file' is not a directory"):
        wf.Engine(db_path, clock=clock, retention=wf.Retention("1d", archive_to=in_the_way))
    wf.Engine(db_path, clock=clock).close()  # the store was closed again


# --- the schema -----------------------------------------------------------------------------------


def test_every_table_keyed_by_run_id_is_purged() -> None:
    with duckdb.connect() as conn:
        for _, text in migrations():
            conn.execute(text)
        keyed = {
            row[0]
            for row in conn.execute(
                "SELECT c.table_name FROM information_schema.columns c "
                "JOIN information_schema.tables t USING (table_name) "
                "WHERE c.column_name = 'run_id' AND t.table_type = 'BASE TABLE'"
            ).fetchall()
        }
    # a run's grown graph (engine.append) is a definition other runs may pin: it stays
    assert keyed == {*RUN_TABLES, "wf_definitions"}
    for table in RUN_TABLES:
        assert has_query(f"retention_delete_{table}") and has_query(f"retention_take_{table}")
