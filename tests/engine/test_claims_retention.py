"""Retention as README.md and docs/semantics.md §19.6 and §24.1 state it, on DuckDB and
PostgreSQL: a pass purges 500 runs per transaction, 100 when archiving, one chunk per round of
the writer (checked as stated, no constant patched); a pass that fails is logged, never stops
the engine and is tried again one period later; a purged run has no ready work to ask about."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import duckdb
import pytest

import wfkit as wf
from tests.engine.conftest import Activities, OpenEngine


def ended_runs(engine: wf.Engine, acts: Activities, n: int) -> None:
    acts.noop("note")
    engine.register(wf.Workflow("short").start_with("note"))
    engine.start_many("short", [{"i": i} for i in range(n)])
    engine.run_until_idle()
    assert (
        engine.sql("SELECT count(*) FROM wf_instances WHERE status = 'completed'").fetchall()[0][0]
        == n
    )


def count(engine: wf.Engine) -> int:
    return int(engine.sql("SELECT count(*) FROM wf_instances").fetchall()[0][0])


def chunks(caplog: pytest.LogCaptureFixture) -> list[int]:
    """The runs each retention transaction took, from its log line."""
    found = (re.search(r"retention: .*?purged (\d+) runs", r.getMessage()) for r in caplog.records)
    return [int(m.group(1)) for m in found if m]


def test_a_retention_pass_purges_500_runs_per_transaction(
    open_engine: OpenEngine,
    acts: Activities,
    clock: wf.ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = open_engine(retention=wf.Retention("1d", every="1h"))
    ended_runs(engine, acts, 501)
    clock.advance("2d")

    with caplog.at_level(logging.INFO, logger="wfkit.engine"):
        engine.run_until_idle()  # one round: one chunk
        after_one = count(engine)
        engine.run_until_idle()  # the next round: the rest

    assert after_one == 1
    assert count(engine) == 0
    assert chunks(caplog) == [500, 1]


def test_a_retention_pass_that_archives_takes_100_runs_per_transaction(
    open_engine: OpenEngine,
    acts: Activities,
    clock: wf.ManualClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = tmp_path / "archive"
    engine = open_engine(retention=wf.Retention("1d", archive_to=folder, every="1h"))
    ended_runs(engine, acts, 101)
    clock.advance("2d")

    with caplog.at_level(logging.INFO, logger="wfkit.engine"):
        engine.run_until_idle()
        after_one = count(engine)
        engine.run_until_idle()

    assert after_one == 1 and count(engine) == 0
    assert chunks(caplog) == [100, 1]
    # one archive per transaction: the first chunk's file, then the next number's
    with duckdb.connect() as conn:
        sizes = [
            conn.execute("SELECT count(*) FROM read_parquet(?)", [str(folder / name)]).fetchall()[
                0
            ][0]
            for name in ("wf_instances.parquet", "wf_instances-2.parquet")
        ]
    assert sizes == [100, 1]


def test_a_retention_pass_that_fails_is_logged_and_tried_again_a_period_later(
    open_engine: OpenEngine,
    acts: Activities,
    clock: wf.ManualClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = tmp_path / "archive"
    engine = open_engine(retention=wf.Retention("1d", archive_to=folder, every="1h"))
    ended_runs(engine, acts, 3)
    folder.rmdir()
    folder.write_text("not a directory any more")  # writing the archive now fails
    clock.advance("2d")

    with caplog.at_level(logging.INFO, logger="wfkit.engine"):
        engine.run_until_idle()
    failed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failed] == [
        "retention: purging runs ended over 1 day, 0:00:00 ago failed; it is tried again in 1:00:00"
    ]
    assert failed[0].exc_info is not None
    assert count(engine) == 3  # nothing purged
    later = engine.start("short", {"i": 99})  # the engine goes on
    engine.run_until_idle()
    assert later.status is wf.RunStatus.COMPLETED

    folder.unlink()
    folder.mkdir()
    clock.advance("59m")
    engine.run_until_idle()
    assert count(engine) == 4  # not tried again before the period is over
    clock.advance("2m")
    engine.run_until_idle()
    assert count(engine) == 1  # the three old runs, archived and purged; the new one is recent
    assert (folder / "wf_instances.parquet").exists()


def test_ready_work_of_a_purged_run_is_refused_like_an_unknown_run(
    engine: wf.Engine, acts: Activities, clock: wf.ManualClock
) -> None:
    ended_runs(engine, acts, 1)
    (info,) = engine.runs()
    assert engine.has_ready_work(info.run_id) is False  # ended: no ready work
    clock.advance("2d")
    assert engine.purge(older_than="1d") == 1

    with pytest.raises(wf.UsageError, match=f"no run '{info.run_id}'"):
        engine.has_ready_work(info.run_id)
    assert engine.has_ready_work() is False


def test_an_archive_never_overwrites_a_file_it_did_not_write(
    engine: wf.Engine, acts: Activities, clock: wf.ManualClock, tmp_path: Path
) -> None:
    ended_runs(engine, acts, 2)
    clock.advance("2d")
    mine = tmp_path / "wf_events.parquet"
    mine.write_text("the user's own file")
    (tmp_path / "wf_jobs-2.parquet").mkdir()  # in the way of the next number, for one table

    report = engine.archive(tmp_path, older_than="1d")

    assert mine.read_text() == "the user's own file"
    assert report.runs == 2 and count(engine) == 0
    assert {p.name for p in report.files} == {"wf_instances-3.parquet", "wf_events-3.parquet"}
    with duckdb.connect() as conn:
        archived = conn.execute(
            "SELECT count(*) FROM read_parquet(?)", [str(tmp_path / "wf_instances-3.parquet")]
        ).fetchall()
    assert archived == [(2,)]
