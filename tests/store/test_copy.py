"""``wfkit store copy``: a DuckDB file with runs in every state moves into PostgreSQL (and back),
and the runs go on there: waits take their signals, timers fire, suspended sagas get recovered.

Real files and real PostgreSQL databases (``tests.postgres``); a per-test activity registry and a
manual clock shared by the engines on both sides.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest
from typer.testing import CliRunner

import wfkit as wf
import wfkit.store.copy as copy_module
from tests.postgres import postgres_database
from wfkit.cli import app
from wfkit.store import Statement, Store, open_store
from wfkit.store.copy import TABLES, CopyReport, copy_store

WFKIT = Path(sys.executable).parent / "wfkit"
WIDE = {"COLUMNS": "400", "NO_COLOR": "1"}
TABLE_NAMES = [spec.name for spec in TABLES]


# --- the source: a DuckDB file with a run in every interesting state ---------------------------


@dataclass
class Source:
    """A closed DuckDB file and what its runs looked like when its engine closed."""

    path: Path
    ids: dict[str, str]  # completed, waiting, suspended, delayed -> run id
    statuses: dict[str, wf.RunStatus] = field(default_factory=dict)
    histories: dict[str, list[wf.Event]] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Activities:
    registry: wf.ActivityRegistry
    calls: list[str]


@pytest.fixture
def acts() -> Activities:
    """Activities of the four workflows; ``refund`` always fails (the saga suspends)."""
    calls: list[str] = []
    registry = wf.ActivityRegistry()

    def recording(name: str, fails: bool = False) -> Any:
        def run(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
            calls.append(name)
            if fails:
                raise RuntimeError(f"{name} backend down")

        return run

    for name in ("a", "b", "invoice", "ship", "reserve", "charge", "release"):
        registry.register(name, recording(name))
    registry.register("book", recording("book", fails=True))
    registry.register("refund", recording("refund", fails=True))
    return Activities(registry, calls)


@pytest.fixture
def clock() -> wf.ManualClock:
    return wf.ManualClock()


def flows() -> list[wf.Workflow]:
    def checkout(s: wf.Steps) -> None:
        s.then("reserve").compensate_with("release")
        s.then("charge").compensate_with("refund", policy={"max_attempts": 1})
        s.then("book", max_attempts=1)

    return [
        wf.Workflow("done").start_with("a").then("b"),
        wf.Workflow("pay")
        .start_with("invoice")
        .wait_for_signal("paid", correlate="order_id", bind={"amount": "paid"})
        .then("ship"),
        wf.Workflow("checkout").start_with().saga(checkout, id="checkout").then("b"),
        wf.Workflow("later").start_with("a").delay("1h").then("b"),
    ]


def build_source(path: Path, acts: Activities, clock: wf.ManualClock) -> Source:
    """A completed run, a run waiting on a signal, a run suspended on a failed compensation and
    a run parked on a delay; plus a posted signal nobody waits for yet."""
    with wf.Engine(path, registry=acts.registry, clock=clock) as engine:
        for flow in flows():
            engine.register(flow)
        ids = {
            "completed": engine.start("done", {"n": 1}).id,
            "waiting": engine.start("pay", {"order_id": "o-1"}).id,
            "suspended": engine.start("checkout", {"order": "c-1"}).id,
            "delayed": engine.start("later", {}).id,
        }
        engine.run_until_idle()
        engine.post_signal("refund-approved", "c-1", {"ok": True}, expires="7d")
        source = Source(path, ids)
        snapshot(engine, source)
    expected = {
        "completed": wf.RunStatus.COMPLETED,
        "waiting": wf.RunStatus.WAITING,
        "suspended": wf.RunStatus.SUSPENDED,
    }
    assert {k: source.statuses[k] for k in expected} == expected
    assert source.statuses["delayed"] not in (wf.RunStatus.COMPLETED, wf.RunStatus.FAILED)
    return source


def snapshot(engine: wf.Engine, source: Source) -> None:
    for label, run_id in source.ids.items():
        run = engine.run(run_id)
        source.statuses[label] = run.status
        source.histories[label] = run.history()
        source.data[label] = run.data


def counts(target: str | Path) -> dict[str, int]:
    """Rows per wfkit table, read straight from the database (not through wfkit)."""
    text = str(target)
    sql = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in TABLE_NAMES)
    if text.startswith("postgresql://"):
        with psycopg.connect(text) as conn:
            rows = conn.execute(sql).fetchall()
    else:
        with duckdb.connect(text, read_only=True) as conn:
            rows = conn.execute(sql).fetchall()
    return {str(name): int(n) for name, n in rows}


def assert_complete(report: CopyReport, expected: dict[str, int]) -> None:
    """Every row of every table copied, nothing skipped, the destination holds exactly them."""
    assert {t: c.source for t, c in report.tables.items()} == expected
    assert {t: c.copied for t, c in report.tables.items()} == expected
    assert {t: c.destination for t, c in report.tables.items()} == expected
    assert all(c.skipped == 0 for c in report.tables.values())


@pytest.fixture
def source(tmp_path: Path, acts: Activities, clock: wf.ManualClock) -> Source:
    return build_source(tmp_path / "notebook.duckdb", acts, clock)


@pytest.fixture
def pg() -> Iterator[str]:
    with postgres_database() as url:
        yield url


# --- the acceptance path ---------------------------------------------------------------------


def test_a_duckdb_file_moves_into_postgresql_and_its_runs_finish_there(
    source: Source,
    pg: str,
    acts: Activities,
    clock: wf.ManualClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    in_file = counts(source.path)
    assert in_file["wf_bookmarks"] == 1 and in_file["wf_timers"] >= 1
    assert in_file["wf_saga_steps"] >= 2 and in_file["wf_signals"] == 1

    lines: list[str] = []
    report = copy_store(str(source.path), pg, progress=lines.append)

    assert_complete(report, in_file)
    assert counts(pg) == in_file
    assert report.runs == 4 and report.definitions == 4
    assert report.skipped_runs == [] and not report.merge
    assert any("one transaction" in line for line in lines)
    assert report.summary().startswith(
        f"copied 4 runs, 4 definitions and {in_file['wf_events']} events from {source.path} to "
    )

    called = len(acts.calls)
    with wf.Engine(pg, registry=acts.registry, clock=clock) as engine:
        for label, run_id in source.ids.items():
            run = engine.run(run_id)
            assert run.status == source.statuses[label], label
            assert run.history() == source.histories[label], label
            assert run.data == source.data[label], label
        engine.run_until_idle()
        assert len(acts.calls) == called  # opening the copy re-ran nothing

        assert engine.signal("paid", "o-1", {"amount": 42}) is True
        engine.run_until_idle()
        waiting = engine.run(source.ids["waiting"])
        assert waiting.status == wf.RunStatus.COMPLETED
        assert waiting.data == {"order_id": "o-1", "paid": 42}
        assert acts.calls[called:] == ["ship"]

        clock.advance("1h")
        engine.run_until_idle()
        assert engine.run(source.ids["delayed"]).status == wf.RunStatus.COMPLETED

        suspended = engine.run(source.ids["suspended"])
        engine.recover_compensation(suspended.id, action="skip", actor="ops")
        engine.run_until_idle()
        assert suspended.status == wf.RunStatus.FAILED
        skipped = [e for e in suspended.history() if e.kind == "compensation.skipped"]
        assert [(e.node_id, e.actor) for e in skipped] == [("charge", "ops")]
        assert acts.calls[-1] == "release"  # the unwind went on past the skipped refund

        posted = engine.sql("SELECT name, key FROM wf_signals").fetchall()
        assert posted == [("refund-approved", "c-1")]
        finished = {label: engine.run(i).status for label, i in source.ids.items()}
        histories = {label: engine.run(i).history() for label, i in source.ids.items()}

    # ... and back into a new DuckDB file, in small chunks (several statements per table, some
    # of a single row): the same rows arrive.
    monkeypatch.setattr(copy_module, "CHUNK", 4)
    back = tmp_path / "back.duckdb"
    in_pg = counts(pg)
    report = copy_store(pg, str(back))
    assert_complete(report, in_pg)
    assert counts(back) == in_pg
    assert in_pg["wf_events"] > in_file["wf_events"]
    with wf.Engine(back, registry=acts.registry, clock=clock) as engine:
        assert {label: engine.run(i).status for label, i in source.ids.items()} == finished
        assert {label: engine.run(i).history() for label, i in source.ids.items()} == histories


def test_artifact_records_move_with_their_runs_and_load_under_the_same_root(
    pg: str, acts: Activities, clock: wf.ManualClock, tmp_path: Path
) -> None:
    acts.registry.register("keep", lambda ctx: wf.Artifact(b"moved with its record"))
    root = tmp_path / "artifacts"
    with wf.Engine(tmp_path / "a.duckdb", registry=acts.registry, artifacts=root) as engine:
        engine.register(wf.Workflow("keeps").start_with("keep"))
        run_id = engine.start("keeps", {}).id
        engine.run_until_idle()
        ref = engine.run(run_id).outputs["keep"]
    report = copy_store(str(tmp_path / "a.duckdb"), pg)
    assert report.tables["wf_artifacts"].copied == 1
    with wf.Engine(pg, registry=acts.registry, clock=clock, artifacts=root) as engine:
        assert engine.run(run_id).load(ref) == b"moved with its record"
    with wf.Engine(pg, registry=acts.registry, clock=clock, artifacts=tmp_path / "elsewhere") as e:
        with pytest.raises(wf.ArtifactError, match="does not lie under this engine's artifact"):
            e.run(run_id).load(ref)


# --- refusals --------------------------------------------------------------------------------


def test_a_non_empty_destination_is_refused_and_nothing_is_written(
    source: Source, pg: str, tmp_path: Path
) -> None:
    copy_store(str(source.path), pg)
    before = counts(pg)
    with pytest.raises(wf.UsageError, match=r"not empty .*nothing was copied.*--merge"):
        copy_store(str(source.path), pg)
    assert counts(pg) == before

    # a DuckDB destination holding only a definition is not empty either
    other = tmp_path / "other.duckdb"
    with wf.Engine(other, registry=wf.ActivityRegistry(), clock=wf.ManualClock()) as engine:
        engine.register(wf.Workflow("nothing").start_with())
    with pytest.raises(wf.UsageError, match=r"\(1 row in wf_definitions\)"):
        copy_store(str(source.path), str(other))
    assert counts(other) == {**dict.fromkeys(TABLE_NAMES, 0), "wf_definitions": 1}


def test_merge_adds_the_new_runs_and_skips_those_already_there(
    source: Source, pg: str, acts: Activities, clock: wf.ManualClock
) -> None:
    copy_store(str(source.path), pg)
    before = counts(pg)
    with wf.Engine(source.path, registry=acts.registry, clock=clock) as engine:
        new = engine.start("done", {"n": 2})
        engine.run_until_idle()
        new_history = new.history()
    in_file = counts(source.path)

    report = copy_store(source.path, pg, merge=True)  # a Path is fine too

    assert report.runs == 1 and report.definitions == 0
    assert report.skipped_runs == sorted(source.ids.values())
    assert [d[0] for d in report.skipped_definitions] == ["checkout", "done", "later", "pay"]
    assert report.tables["wf_events"].copied == len(new_history)
    assert report.tables["wf_events"].skipped == before["wf_events"]
    assert report.tables["wf_signals"].skipped == 1
    assert "(skipped, already there: 4 runs, 4 definitions, 1 posted signal)" in report.summary()
    assert counts(pg) == in_file  # every row once: nothing doubled
    with wf.Engine(pg, registry=acts.registry, clock=clock) as engine:
        assert engine.run(new.id).status == wf.RunStatus.COMPLETED
        assert engine.run(new.id).history() == new_history
        assert len(engine.runs()) == 5


def test_a_store_cannot_be_copied_onto_itself(source: Source, pg: str, tmp_path: Path) -> None:
    before = counts(source.path)
    same = tmp_path / "sub" / ".." / source.path.name
    (tmp_path / "sub").mkdir()
    for dst in (str(source.path), str(same)):
        with pytest.raises(wf.UsageError, match="are the same store"):
            copy_store(str(source.path), dst)
    assert counts(source.path) == before

    alias = pg.replace("127.0.0.1", "localhost")
    for dst in (pg, alias):
        with pytest.raises(wf.UsageError, match="are the same store"):
            copy_store(pg, dst)


def test_memory_stores_and_missing_files_are_refused(tmp_path: Path, pg: str) -> None:
    missing = tmp_path / "missing.duckdb"
    with pytest.raises(wf.UsageError, match="no such DuckDB file"):
        copy_store(str(missing), pg)
    assert not missing.exists()  # not created by the attempt
    with pytest.raises(wf.UsageError, match="cannot be ':memory:'"):
        copy_store(":memory:", pg)
    with pytest.raises(wf.UsageError, match="cannot be ':memory:'"):
        copy_store(pg, ":memory:")


def test_a_source_held_by_an_engine_gives_the_engines_lock_error(
    source: Source, pg: str, acts: Activities, clock: wf.ManualClock
) -> None:
    with (
        wf.Engine(source.path, registry=acts.registry, clock=clock),
        pytest.raises(wf.StoreError, match="already open in this process"),
    ):
        copy_store(str(source.path), pg)

    holder = textwrap.dedent(
        f"""
        import sys
        import wfkit as wf
        engine = wf.Engine({str(source.path)!r})
        print("ready", flush=True)
        sys.stdin.read()
        engine.close()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        with pytest.raises(wf.StoreError, match="held by another process"):
            copy_store(str(source.path), pg)
    finally:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()
    with psycopg.connect(pg) as conn:  # the source is opened first: the destination is untouched
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'wf%'"
        ).fetchone()
    assert tables == (0,)


# --- what a copy checks --------------------------------------------------------------------------


class Tampered:
    """A destination store whose writes are altered on their way (the rest is the real one)."""

    def __init__(self, store: Store, change: Any) -> None:
        self._store = store
        self._change = change

    def write(self, statements: list[Statement]) -> Any:
        return self._store.write(self._change(statements))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def tamper(monkeypatch: pytest.MonkeyPatch, dst: Path, change: Any) -> None:
    def opened(target: str) -> Any:
        store = open_store(target)
        return Tampered(store, change) if Path(target) == dst else store

    monkeypatch.setattr(copy_module, "open_store", opened)


def test_counts_that_differ_after_the_copy_raise(
    source: Source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dst = tmp_path / "copy.duckdb"

    def drop_an_event(statements: list[Statement]) -> list[Statement]:
        return [
            Statement(s.name, s.rows[:-1]) if s.name == "copy_wf_events" else s for s in statements
        ]

    tamper(monkeypatch, dst, drop_an_event)
    with pytest.raises(wf.StoreError, match=r"does not add up: wf_events: \d+ rows written"):
        copy_store(str(source.path), str(dst))


def test_a_failed_write_leaves_the_destination_empty(
    source: Source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dst = tmp_path / "copy.duckdb"

    def break_the_last(statements: list[Statement]) -> list[Statement]:
        return [*statements, Statement("copy_wf_signals", [("only", "two")])]

    tamper(monkeypatch, dst, break_the_last)
    with pytest.raises(wf.StoreError, match="writing to"):
        copy_store(str(source.path), str(dst))
    assert counts(dst) == dict.fromkeys(TABLE_NAMES, 0)  # one transaction: all or nothing


def test_a_column_the_copy_does_not_know_stops_it_before_writing(
    source: Source, tmp_path: Path
) -> None:
    dst = tmp_path / "copy.duckdb"
    open_store(str(dst)).close()
    with duckdb.connect(str(dst)) as conn:
        conn.execute("ALTER TABLE wf_events ADD COLUMN mood VARCHAR")
    with pytest.raises(wf.StoreError, match=r"wf_events has mood, which this copy does not know"):
        copy_store(str(source.path), str(dst))
    assert counts(dst) == dict.fromkeys(TABLE_NAMES, 0)


# --- the command line ------------------------------------------------------------------------


def test_the_cli_copies_prints_counts_and_refuses_in_one_line(source: Source, pg: str) -> None:
    in_file = counts(source.path)
    runner = CliRunner()
    result = runner.invoke(app, ["store", "copy", str(source.path), pg], env=WIDE)

    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines()
    assert out[0].split() == ["TABLE", "SOURCE", "COPIED", "SKIPPED", "DESTINATION"]
    rows = {line.split()[0]: line.split()[1:] for line in out[1:-1]}
    assert rows == {t: [str(n), str(n), "0", str(n)] for t, n in in_file.items()}
    assert out[-1].startswith("copied 4 runs, 4 definitions and ")
    assert out[-1].endswith("counts match")
    assert counts(pg) == in_file

    again = runner.invoke(app, ["store", "copy", str(source.path), pg], env=WIDE)
    assert again.exit_code == 1
    assert again.stdout == ""
    (error,) = again.stderr.splitlines()  # one line, no progress: refused before reading
    assert error.startswith("error: the destination postgresql://")
    assert "is not empty (4 rows in wf_definitions, 4 rows in wf_instances, " in error
    assert error.endswith("or copy into an empty database")
    assert "--merge" in error

    merged = runner.invoke(app, ["store", "copy", "--merge", str(source.path), pg], env=WIDE)
    assert merged.exit_code == 0, merged.output
    assert "copied 0 runs" in merged.stdout
    assert "(skipped, already there: 4 runs, 4 definitions, 1 posted signal)" in merged.stdout
    assert counts(pg) == in_file


@pytest.mark.slow
def test_the_installed_program_moves_a_file_whose_waiting_run_completes_after_a_signal(
    source: Source, pg: str, acts: Activities, clock: wf.ManualClock, tmp_path: Path
) -> None:
    assert WFKIT.is_file() and os.access(WFKIT, os.X_OK), f"{WFKIT} missing: pip install -e ."
    env = {**os.environ, **WIDE}
    done = subprocess.run(
        [str(WFKIT), "store", "copy", str(source.path), pg],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("copied 4 runs")
    assert counts(pg) == counts(source.path)
    with wf.Engine(pg, registry=acts.registry, clock=clock) as engine:
        assert engine.signal("paid", "o-1", {"amount": 7}) is True
        engine.run_until_idle()
        assert engine.run(source.ids["waiting"]).status == wf.RunStatus.COMPLETED

    refused = subprocess.run(
        [str(WFKIT), "store", "copy", str(source.path), str(source.path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"error: {source.path} and {source.path} are the same store; copy into another "
        "DuckDB file or PostgreSQL database"
    ]
