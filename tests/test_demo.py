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
from wfkit import demo
from wfkit.cli import app
from wfkit.demo import DemoRun

WFKIT = Path(sys.executable).parent / "wfkit"
WIDE = {"COLUMNS": "400", "NO_COLOR": "1"}
WORKFLOWS = ["onboarding", "fulfilment", "checkout", "trip"]
PLANNED = [
    ("onboarding", "completed"),  # no approval needed
    ("onboarding", "completed"),  # waits for signal 'approval'; the demo sends it
    ("fulfilment", "completed"),  # partial join; the demo approves 'review'
    ("checkout", "completed"),
    ("checkout", "failed"),  # card declined: the reservation is released
    ("checkout", "failed"),  # ... and the release fails: suspended, the demo skips it
    ("trip", "completed"),
    ("trip", "failed"),  # over budget: car, hotel, flight cancelled
]
"""The demo's runs in order: workflow and the status each must end in."""
ONBOARD_SIGNAL, FULFIL, DECLINED, SKIPPED, TRIP, TRIP_UNWOUND = 1, 2, 4, 5, 6, 7
"""Positions in the run table of the runs the tests look into."""
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
    rows = demo_rows(output)
    assert [(r[1], r[3]) for r in rows] == PLANNED, output
    assert [r[2] for r in rows] == ["1"] * len(PLANNED)
    explained = [r[4] for r in rows]
    assert explained[ONBOARD_SIGNAL] == explained[FULFIL] == "completed"
    assert explained[DECLINED] == (
        "failed: wfkit.examples.checkout.PaymentDeclined: card declined for order demo-o-3"
    )
    assert explained[SKIPPED].startswith("failed: ") and "demo-o-4" in explained[SKIPPED]
    assert explained[TRIP_UNWOUND].startswith("failed: RuntimeError: budget 50.0 too small")
    # (a) the signal: the wait is explained, then the demo sends it
    assert re.search(
        r"the run is waiting for signal 'approval' \(key demo-c-2\) since \d\d:\d\d; "
        r"times out in 3 days\n.*the demo sends signal 'approval' \(key demo-c-2\) "
        r"\{'approved': True\} as actor 'demo': it resumed the wait\n.*the run is completed",
        output,
    ), output
    # (b) the partial join approved by a person
    assert "'orders.ship-line' failed 3 times" in output
    assert "ShippingError: carrier refused BROKEN-7" in output
    assert "waiting for approval 'review'" in output
    assert "the demo approves 'review' as actor 'demo'" in output
    # (c) the saga unwinds: only the completed step is compensated
    assert (
        "'card.charge' failed 2 times (PaymentDeclined: card declined for order demo-o-3); the "
        "saga compensates its completed steps newest first: 'inventory.reserve'"
    ) in output
    assert "compensation 'inventory.release' undid 'inventory.reserve'" in output
    assert "'car.book', 'hotel.book', 'flight.book'" in output
    cancels = re.findall(r"compensation '(\w+)\.cancel' undid", output)
    assert cancels == ["car", "hotel", "flight"]
    # (d) a failed compensation suspends the run; the demo skips it
    for attempt in (1, 2, 3):
        assert (
            f"compensation 'inventory.release' of 'inventory.reserve' failed (attempt {attempt})"
            ": ConnectionError: inventory service unreachable"
        ) in output
    assert (
        "the run is suspended: compensation 'inventory.release' of 'inventory.reserve' failed 3 "
        "times: ConnectionError: inventory service unreachable: cannot release res-demo-o-4 "
        "(attempt 3); choose retry, skip or abandon (engine.recover_compensation)"
    ) in output
    assert "the demo decides 'skip' as actor 'demo' (engine.recover_compensation)" in output
    assert "compensation of 'inventory.reserve' skipped by demo: recorded as a decision" in output
    assert "wf.ManualClock" in output
    assert re.search(r"^all 8 runs reached their expected status in [\d.]+ s", output, re.M)
    # the retry delays: fulfilment 2 s + 4 s; declined charge 1 s; suspended checkout 1 s
    # (charge) + 1 s + 2 s (release); trip capture 1 s + 2 s
    assert "the manual clock moved 14 s" in output
    assert "8/8" in errors  # tqdm's progress bar, on stderr
    assert "Traceback" not in output + errors
    return rows


def saga_steps(engine: wf.Engine, run_id: str) -> list[tuple[str, str, int, str]]:
    """(node, compensation, position, status) of a run's saga steps, oldest first."""
    return engine.sql(
        "SELECT node_id, compensation, position, status FROM wf_saga_steps "
        f"WHERE run_id = '{run_id}' ORDER BY position"
    ).fetchall()


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
        stored = {r.run_id: r.status.value for r in engine.runs()}
        assert stored == {r[0]: r[3] for r in rows}

        # (a) an onboarding that waited for signal 'approval' and completed once the demo sent it
        onboarding = engine.run(rows[ONBOARD_SIGNAL][0])
        history = onboarding.history()
        kinds = [e.kind for e in history]
        assert kinds.index("signal.waiting") < kinds.index("signal.received")
        (received,) = [e for e in history if e.kind == "signal.received"]
        assert received.actor == "demo" and received.node_id == "approval"
        assert onboarding.status == wf.RunStatus.COMPLETED
        assert onboarding.data.is_approved is True and onboarding.data.welcomed is True

        # (b) the partial join approved by a person
        fulfilment = engine.run(rows[FULFIL][0])
        history = fulfilment.history()
        failed = [e for e in history if e.kind == "step.failed"]
        assert [e.attempt for e in failed] == [1, 2, 3]
        assert all("BROKEN-7" in (e.error or "") for e in failed)
        assert "join.partial" in [e.kind for e in history]
        (decision,) = [e for e in history if e.kind == "approval.approved"]
        assert decision.actor == "demo" and decision.node_id == "review"
        assert fulfilment.data.confirmed is True
        assert engine.run(rows[TRIP][0]).data.booked == ["flight", "hotel", "car"]

        # (c) failed sagas: compensation events in the reverse order of the saga's steps
        for index, compensated in ((DECLINED, 1), (TRIP_UNWOUND, 3)):
            run_id = rows[index][0]
            run = engine.run(run_id)
            assert run.status == wf.RunStatus.FAILED
            steps = saga_steps(engine, run_id)
            assert len(steps) == compensated
            assert {step[3] for step in steps} == {"compensated"}
            done = [e.node_id for e in run.history() if e.kind == "compensation.completed"]
            assert done == [step[0] for step in reversed(steps)]
            assert run.history()[-1].kind == "run.failed"
        assert saga_steps(engine, rows[DECLINED][0]) == [
            ("inventory.reserve", "inventory.release", 1, "compensated")
        ]
        assert [s[0] for s in saga_steps(engine, rows[TRIP_UNWOUND][0])] == [
            "flight.book",
            "hotel.book",
            "car.book",
        ]
        declined = engine.run(rows[DECLINED][0])
        assert declined.data.reservation is None and declined.data.charge is None
        assert engine.run(rows[TRIP_UNWOUND][0]).data.booked == []

        # (d) suspended on a failed compensation, then skipped by the demo: failed, step skipped
        skipped = engine.run(rows[SKIPPED][0])
        history = skipped.history()
        kinds = [e.kind for e in history]
        failures = [e for e in history if e.kind == "compensation.failed"]
        assert [e.attempt for e in failures] == [1, 2, 3]
        down = "ConnectionError: inventory service unreachable"
        assert all(down in (e.error or "") for e in failures)
        assert kinds.index("run.suspended") < kinds.index("compensation.skipped")
        (decision,) = [e for e in history if e.kind == "compensation.skipped"]
        assert decision.actor == "demo" and decision.node_id == "inventory.reserve"
        assert kinds[-1] == "run.failed" and "compensation.completed" not in kinds
        assert skipped.status == wf.RunStatus.FAILED
        assert saga_steps(engine, rows[SKIPPED][0]) == [
            ("inventory.reserve", "inventory.release", 1, "skipped")
        ]
        assert skipped.data.reservation == "res-demo-o-4"  # skipped: nothing undid it
        assert skipped.node_statuses()["inventory.reserve"] == "skipped"
        assert engine.waiting() == []


def test_demo_twice_on_one_file_adds_runs(tmp_path: Path) -> None:
    db, out = tmp_path / "demo.duckdb", tmp_path / "pics"
    first = invoke("demo", "--db", str(db), "--out", str(out))
    assert first.exit_code == 0, first.output
    second = invoke("demo", "--db", str(db), "--out", str(out))
    assert second.exit_code == 0, second.output
    assert f"{db} already holds 8 runs from before; this demo adds 8 more" in second.stdout
    old = [r[0] for r in check_demo_output(first.stdout, first.stderr)]
    new = [r[0] for r in check_demo_output(second.stdout, second.stderr)]
    assert not set(old) & set(new), "the second table must show only the second demo's runs"

    listed = invoke("runs", "--db", str(db))
    assert listed.exit_code == 0, listed.output
    rows = listed_rows(listed.stdout)
    assert len(rows) == 16 and {r[3] for r in rows} == {"completed", "failed"}
    assert {r[0] for r in rows[:8]} == set(new), "newest first: the second demo's runs lead"
    assert f"16 of 16 runs in {db}" in listed.stdout


def test_demo_fails_when_a_run_misses_its_expected_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    declined = DemoRun("checkout", {"order_id": "o-9", "amount": 5.0, "card_ok": False}, "declined")
    monkeypatch.setattr(demo, "DEMO_RUNS", (declined,))
    result = invoke("demo", "--db", str(tmp_path / "d.duckdb"), "--out", str(tmp_path / "p"))
    assert result.exit_code == 1, result.output
    (row,) = demo_rows(result.stdout)
    assert row[1:4] == ("checkout", "1", "failed")
    assert f"error: run {row[0]} of checkout is failed, expected completed" in result.stderr
    assert "card declined for order o-9" in result.stderr
    assert "reached their expected status" not in result.stdout


def test_demo_fails_when_a_run_lacks_an_expected_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    declined = DemoRun(
        "checkout",
        {"order_id": "o-8", "amount": 5.0, "card_ok": False},
        "declined, but said to suspend",
        expected="failed",
        must_see=("run.suspended", "compensation.skipped"),
    )
    monkeypatch.setattr(demo, "DEMO_RUNS", (declined,))
    result = invoke("demo", "--db", str(tmp_path / "d.duckdb"), "--out", str(tmp_path / "p"))
    assert result.exit_code == 1, result.output
    (row,) = demo_rows(result.stdout)
    assert row[3] == "failed"
    assert (
        f"error: run {row[0]} of checkout is failed as expected, but its history lacks "
        "compensation.skipped, run.suspended: declined, but said to suspend"
    ) in result.stderr


def test_demo_stops_at_a_suspended_run_it_has_no_decision_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stuck = DemoRun(
        "checkout",
        {"order_id": "o-7", "amount": 5.0, "card_ok": False, "inventory_down": True},
        "no decision",
        expected="failed",
    )
    monkeypatch.setattr(demo, "DEMO_RUNS", (stuck,))
    result = invoke("demo", "--db", str(tmp_path / "d.duckdb"), "--out", str(tmp_path / "p"))
    assert result.exit_code == 1, result.output
    (row,) = demo_rows(result.stdout)
    assert row[3] == "suspended"
    assert row[4].endswith("choose retry, skip or abandon (engine.recover_compensation)")
    assert f"error: run {row[0]} of checkout is suspended, expected failed" in result.stderr
    assert "gave up" not in result.stdout, "a suspended run is not driven by the clock"


# --- runs in process ------------------------------------------------------------------------


def test_runs_filters_by_status_workflow_and_limit(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    assert invoke("demo", "--db", str(db), "--out", str(tmp_path / "p")).exit_code == 0

    everything = invoke("runs", "--db", str(db))
    assert everything.exit_code == 0, everything.output
    rows = listed_rows(everything.stdout)
    assert sorted((r[1], r[3]) for r in rows) == sorted(PLANNED)
    assert all(r[5] == "completed" for r in rows if r[3] == "completed")
    assert all(r[5].startswith("failed: ") for r in rows if r[3] == "failed")
    assert everything.stdout.splitlines()[0].split() == [
        "RUN", "WORKFLOW", "VERSION", "STATUS", "STARTED", "(UTC)", "EXPLAIN"
    ]  # fmt: skip

    failed = invoke("runs", "--db", str(db), "--status", "failed")
    assert failed.exit_code == 0, failed.output
    assert sorted(r[1] for r in listed_rows(failed.stdout)) == ["checkout", "checkout", "trip"]
    assert f"3 of 8 runs in {db}" in failed.stdout

    none = invoke("runs", "--db", str(db), "--status", "suspended")
    assert none.exit_code == 0, none.output
    assert listed_rows(none.stdout) == []
    assert none.stdout.strip() == f"no runs with status suspended in {db} (8 runs in all)"

    one = invoke("runs", "--db", str(db), "--workflow", "fulfilment", "--status", "COMPLETED")
    assert [r[1] for r in listed_rows(one.stdout)] == ["fulfilment"]

    newest = invoke("runs", "--db", str(db), "--limit", "2")
    assert len(listed_rows(newest.stdout)) == 2
    assert "2 of 8 runs" in newest.stdout and "raise --limit" in newest.stdout


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
    assert result.stderr.startswith(f"error: the DuckDB file '{junk}' is")
    assert "restore junk.duckdb (and junk.duckdb.wal) from a backup" in result.stderr
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
    assert sorted((r[1], r[3]) for r in rows) == sorted(PLANNED)

    failed = run_wfkit("runs", "--db", str(db), "--status", "failed", cwd=tmp_path)
    assert failed.returncode == 0, failed.stderr
    assert sorted(r[1] for r in listed_rows(failed.stdout)) == ["checkout", "checkout", "trip"]

    cancelled = run_wfkit("runs", "--db", str(db), "--status", "cancelled", cwd=tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr
    assert listed_rows(cancelled.stdout) == []
    assert "no runs with status cancelled" in cancelled.stdout


@pytest.mark.slow
def test_program_demo_twice_uses_default_file_in_cwd(tmp_path: Path) -> None:
    for _ in range(2):
        done = run_wfkit("demo", "--out", "pics", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        check_demo_output(done.stdout, done.stderr)
    assert "demo.duckdb already holds 8 runs from before" in done.stdout
    listed = run_wfkit("runs", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert len(listed_rows(listed.stdout)) == 16
    assert "16 of 16 runs in demo.duckdb" in listed.stdout


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
    assert after.returncode == 0 and len(listed_rows(after.stdout)) == 8
