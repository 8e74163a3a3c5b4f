"""``wfkit demo`` runs the examples durably on a DuckDB file; ``wfkit runs`` lists them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import wfkit as wf
from wfkit import cli
from wfkit.cli import DemoRun, app

WFKIT = Path(sys.executable).parent / "wfkit"
WIDE = {"COLUMNS": "400", "NO_COLOR": "1"}
WORKFLOWS = ["onboarding", "fulfilment", "checkout", "trip"]
ROW = re.compile(r"^([0-9a-f]{16})  +(\S+)  +(\d+)  +(\S+)  +(.*)$", re.M)
"""A row of the demo's run table: id, workflow, version, status, explanation."""
LISTED = re.compile(r"^([0-9a-f]{16})  +(\S+)  +(\d+)  +(\S+)  +(\S+ \S+)  +(.*)$", re.M)
"""A row of ``wfkit runs``: id, workflow, version, status, started, explanation."""

OWN_FLOW = """\
from pydantic import BaseModel

import wfkit as wf


class Ticket(BaseModel):
    title: str
    done: bool = False


@wf.activity("tickets.close")
def close(ctx):
    ctx.data.done = True


flow = wf.Workflow("tickets", version=2, data=Ticket).start_with("tickets.close")

if __name__ == "__main__":
    with wf.Engine("own.duckdb") as engine:
        engine.register(flow)
        run = engine.start("tickets", {"title": "printer on fire"})
        engine.run_until_idle()
        print(run.status.value)
"""
"""A workflow whose data model (``__main__:Ticket``) and activity exist only in its script."""

HOLDER = """\
import sys

import wfkit as wf

engine = wf.Engine(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
engine.close()
"""
"""Holds an engine (and so the DuckDB file's lock) open until its stdin closes."""


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env=WIDE, prog_name="wfkit")


def run_wfkit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **WIDE}
    return subprocess.run(
        [str(WFKIT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def demo_rows(output: str) -> list[tuple[str, ...]]:
    return [m.groups() for m in ROW.finditer(output)]


def listed_rows(output: str) -> list[tuple[str, ...]]:
    return [m.groups() for m in LISTED.finditer(output)]


def check_demo_output(output: str, errors: str) -> list[tuple[str, ...]]:
    """The facts every successful demo prints; returns the run table's rows."""
    for name in WORKFLOWS:
        assert name in output
    assert "completed" in output
    rows = demo_rows(output)
    assert [r[1] for r in rows] == WORKFLOWS, output
    assert [r[2] for r in rows] == ["1"] * 4
    assert [r[3] for r in rows] == ["completed"] * 4
    assert [r[4] for r in rows] == ["completed"] * 4
    assert "'orders.ship-line' failed 3 times" in output
    assert "ShippingError: carrier refused BROKEN-7" in output
    assert "waiting for approval 'review'" in output
    assert "the demo approves 'review' as actor 'demo'" in output
    assert "wf.ManualClock" in output
    assert re.search(r"^all 4 runs reached their expected status in [\d.]+ s", output, re.M)
    assert "the manual clock moved 6 s" in output  # the retry delays: 2 s, then 4 s
    assert "4/4" in errors  # tqdm's progress bar, on stderr
    assert "Traceback" not in output + errors
    return rows


# --- demo in process ------------------------------------------------------------------------


def test_demo_runs_every_example_to_its_end(tmp_path: Path) -> None:
    db, out = tmp_path / "demo.duckdb", tmp_path / "pics"
    result = invoke("demo", "--db", str(db), "--out", str(out))
    assert result.exit_code == 0, result.output
    rows = check_demo_output(result.stdout, result.stderr)
    assert f"runs are written to {db.resolve()} (a new file)" in result.stdout
    assert db.is_file()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{n}.{ext}" for n in WORKFLOWS for ext in ("svg", "png")
    )

    with wf.Engine(db) as engine:  # what the file holds, read by a new engine
        stored = engine.runs()
        assert sorted(r.run_id for r in stored) == sorted(r[0] for r in rows)
        assert {r.status for r in stored} == {wf.RunStatus.COMPLETED}
        fulfilment = engine.run(rows[1][0])
        history = fulfilment.history()
        failed = [e for e in history if e.kind == "step.failed"]
        assert [e.attempt for e in failed] == [1, 2, 3]
        assert all("BROKEN-7" in (e.error or "") for e in failed)
        assert "join.partial" in [e.kind for e in history]
        (decision,) = [e for e in history if e.kind == "approval.approved"]
        assert decision.actor == "demo" and decision.node_id == "review"
        assert fulfilment.data.confirmed is True
        assert engine.run(rows[3][0]).data.booked == ["flight", "hotel", "car"]
        assert engine.waiting() == []


def test_demo_twice_on_one_file_adds_runs(tmp_path: Path) -> None:
    db, out = tmp_path / "demo.duckdb", tmp_path / "pics"
    first = invoke("demo", "--db", str(db), "--out", str(out))
    assert first.exit_code == 0, first.output
    second = invoke("demo", "--db", str(db), "--out", str(out))
    assert second.exit_code == 0, second.output
    assert f"{db} already holds 4 runs from before; this demo adds 4 more" in second.stdout
    old = [r[0] for r in check_demo_output(first.stdout, first.stderr)]
    new = [r[0] for r in check_demo_output(second.stdout, second.stderr)]
    assert not set(old) & set(new), "the second table must show only the second demo's runs"

    listed = invoke("runs", "--db", str(db))
    assert listed.exit_code == 0, listed.output
    rows = listed_rows(listed.stdout)
    assert len(rows) == 8 and {r[3] for r in rows} == {"completed"}
    assert {r[0] for r in rows[:4]} == set(new), "newest first: the second demo's runs lead"
    assert f"8 of 8 runs in {db}" in listed.stdout


def test_demo_fails_when_a_run_misses_its_expected_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    declined = DemoRun("checkout", {"order_id": "o-9", "amount": 5.0, "card_ok": False}, "declined")
    monkeypatch.setattr(cli, "DEMO_RUNS", (declined,))
    result = invoke("demo", "--db", str(tmp_path / "d.duckdb"), "--out", str(tmp_path / "p"))
    assert result.exit_code == 1, result.output
    (row,) = demo_rows(result.stdout)
    assert row[1:4] == ("checkout", "1", "failed")
    assert f"error: run {row[0]} of checkout is failed, expected completed" in result.stderr
    assert "card declined for order o-9" in result.stderr
    assert "reached their expected status" not in result.stdout


# --- runs in process ------------------------------------------------------------------------


def test_runs_filters_by_status_workflow_and_limit(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    assert invoke("demo", "--db", str(db), "--out", str(tmp_path / "p")).exit_code == 0

    everything = invoke("runs", "--db", str(db))
    assert everything.exit_code == 0, everything.output
    rows = listed_rows(everything.stdout)
    assert sorted(r[1] for r in rows) == sorted(WORKFLOWS)
    assert {r[3] for r in rows} == {"completed"} and {r[5] for r in rows} == {"completed"}
    assert everything.stdout.splitlines()[0].split() == [
        "RUN", "WORKFLOW", "VERSION", "STATUS", "STARTED", "(UTC)", "EXPLAIN"
    ]  # fmt: skip

    failed = invoke("runs", "--db", str(db), "--status", "failed")
    assert failed.exit_code == 0, failed.output
    assert listed_rows(failed.stdout) == []
    assert failed.stdout.strip() == f"no runs with status failed in {db} (4 runs in all)"

    one = invoke("runs", "--db", str(db), "--workflow", "fulfilment", "--status", "COMPLETED")
    assert [r[1] for r in listed_rows(one.stdout)] == ["fulfilment"]

    newest = invoke("runs", "--db", str(db), "--limit", "2")
    assert len(listed_rows(newest.stdout)) == 2
    assert "2 of 4 runs" in newest.stdout and "raise --limit" in newest.stdout


def test_runs_on_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "nope.duckdb"
    result = invoke("runs", "--db", str(db))
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"error: no such file: {db}; run 'wfkit demo --db {db}' first, or point --db at an "
        "existing wfkit DuckDB file"
    )
    assert list(tmp_path.iterdir()) == []


def test_runs_on_a_file_that_is_not_duckdb(tmp_path: Path) -> None:
    junk = tmp_path / "junk.duckdb"
    junk.write_text("not a database\n")
    result = invoke("runs", "--db", str(junk))
    assert result.exit_code == 1
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"error: cannot open DuckDB file '{junk}'")
    assert junk.read_text() == "not a database\n"


def test_runs_rejects_an_unknown_status(tmp_path: Path) -> None:
    result = invoke("runs", "--db", str(tmp_path / "x.duckdb"), "--status", "bogus")
    assert result.exit_code == 2
    assert "'bogus' is not one of" in " ".join(result.stderr.split())


# --- the installed program ------------------------------------------------------------------


@pytest.mark.slow
def test_program_demo_then_runs_in_new_processes(tmp_path: Path) -> None:
    db, out = tmp_path / "demo.duckdb", tmp_path / "pics"
    done = run_wfkit("demo", "--db", str(db), "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    check_demo_output(done.stdout, done.stderr)
    assert db.is_file()

    listed = run_wfkit("runs", "--db", str(db), cwd=tmp_path)  # a new process: nothing in memory
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == ""
    rows = listed_rows(listed.stdout)
    assert sorted(r[1] for r in rows) == sorted(WORKFLOWS)
    assert [r[3] for r in rows] == ["completed"] * 4

    failed = run_wfkit("runs", "--db", str(db), "--status", "failed", cwd=tmp_path)
    assert failed.returncode == 0, failed.stderr
    assert listed_rows(failed.stdout) == []
    assert "no runs with status failed" in failed.stdout


@pytest.mark.slow
def test_program_demo_twice_uses_default_file_in_cwd(tmp_path: Path) -> None:
    for _ in range(2):
        done = run_wfkit("demo", "--out", "pics", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        check_demo_output(done.stdout, done.stderr)
    assert "demo.duckdb already holds 4 runs from before" in done.stdout
    listed = run_wfkit("runs", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert len(listed_rows(listed.stdout)) == 8
    assert "8 of 8 runs in demo.duckdb" in listed.stdout


@pytest.mark.slow
def test_program_runs_on_a_missing_file(tmp_path: Path) -> None:
    done = run_wfkit("runs", "--db", "missing.duckdb", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("error: no such file: missing.duckdb;")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "missing.duckdb").exists()


@pytest.mark.slow
def test_program_lists_runs_whose_activities_cannot_be_imported(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "own_flow.py").write_text(textwrap.dedent(OWN_FLOW))
    made = subprocess.run(
        [sys.executable, "own_flow.py"], cwd=src, capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0 and made.stdout.strip() == "completed", made.stderr
    # From another folder neither the activity nor the model (__main__:Ticket) can be imported.
    done = run_wfkit("runs", "--db", "src/own.duckdb", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    ((_, workflow, version, status, _, explain),) = listed_rows(done.stdout)
    assert (workflow, version, status, explain) == ("tickets", "2", "completed", "completed")


@pytest.mark.slow
def test_program_reports_a_locked_file_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    assert run_wfkit("demo", "--db", str(db), "--out", "pics", cwd=tmp_path).returncode == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        for args in (("runs", "--db", str(db)), ("demo", "--db", str(db), "--out", "pics")):
            done = run_wfkit(*args, cwd=tmp_path)
            assert done.returncode == 1, done.stdout
            (line,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
            assert line == done.stderr.strip().splitlines()[-1]
            assert line.startswith(f"error: the DuckDB file '{db}' is held by another process")
            assert "Traceback" not in done.stderr
    finally:
        holder.communicate("", timeout=30)
    assert holder.returncode == 0
    after = run_wfkit("runs", "--db", str(db), cwd=tmp_path)  # released: readable again
    assert after.returncode == 0 and len(listed_rows(after.stdout)) == 4
