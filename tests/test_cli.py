"""The ``wfkit`` command line: in-process through typer's CliRunner, and as the real program."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from wfkit.cli import app
from wfkit.examples import onboarding

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WFKIT = Path(sys.executable).parent / "wfkit"
WIDE = {"COLUMNS": "400", "NO_COLOR": "1"}  # keep rich's error boxes on one line each

BROKEN_FLOW = """\
from pydantic import BaseModel

import wfkit as wf


class Order(BaseModel):
    total: float
    email: str


@wf.activity("clitest.check")
def check(ctx):
    return None


flow = (
    wf.Workflow("broken", version=1, data=Order)
    .start_with("clitest.check")
    .if_("totl > 10", then=lambda b: b.then("clitest.not-registered"))
    .then("clitest.check", id="check-again")
)
"""

FACTORIES = """\
import wfkit as wf


@wf.activity("clitest.hello")
def hello(ctx):
    return None


def make_flow():
    return wf.Workflow("made", version=3).start_with("clitest.hello")


def needs_args(name):
    return wf.Workflow(name).start_with("clitest.hello")


not_a_flow = {"id": "dict"}
"""


@pytest.fixture(autouse=True)
def _restore_imports() -> Iterator[None]:
    """The CLI imports target files into this process; forget them after each test."""
    path, modules = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        if name.startswith(("_wfkit_target_", "broken", "factories")):
            del sys.modules[name]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env=WIDE, prog_name="wfkit")


def flat(text: str) -> str:
    """Output with rich's box drawing removed and whitespace collapsed."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


# --- validate -------------------------------------------------------------------------------


def test_validate_example_is_valid() -> None:
    result = invoke("validate", "wfkit.examples.onboarding:flow")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "onboarding v1: valid, no problems"
    assert result.stderr == ""


def test_validate_broken_file_lists_every_problem_with_its_node(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.py", BROKEN_FLOW)
    result = invoke("validate", f"{path}:flow")
    assert result.exit_code == 1, result.output
    errors = result.stderr.splitlines()
    assert len(errors) == 2, result.stderr
    unknown = next(line for line in errors if "[unknown-activity]" in line)
    typo = next(line for line in errors if "[unknown-name]" in line)
    assert unknown.startswith("error: node 'clitest.not-registered':")
    assert "'clitest.not-registered' is not registered" in unknown
    assert typo.startswith("error: node 'if-1':")
    assert "'totl'" in typo and "fields: email, total" in typo
    assert "broken v1: 2 errors, 0 warnings" in result.stdout


def test_validate_accepts_a_workflow_json_file(tmp_path: Path) -> None:
    path = tmp_path / "onboarding.json"
    path.write_text(onboarding.flow.to_json(indent=2))
    result = invoke("validate", str(path))
    assert result.exit_code == 0, result.output
    assert "onboarding v1: valid, no problems" in result.stdout


def test_validate_accepts_a_factory_function(tmp_path: Path) -> None:
    path = write(tmp_path, "factories.py", FACTORIES)
    result = invoke("validate", f"{path}:make_flow")
    assert result.exit_code == 0, result.output
    assert "made v3: valid, no problems" in result.stdout


# --- bad targets ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("wfkit.examples.onboarding", "does not name a workflow; write it as module:attr"),
        ("no_such_module_xyz:flow", "cannot import module 'no_such_module_xyz'"),
        ("wfkit.examples.onboarding:nope", "'wfkit.examples.onboarding' has no attribute 'nope'"),
        ("wfkit.examples.onboarding:uuid", "is a module, not a wfkit.Workflow"),
        (
            "wfkit.examples.onboarding:OnboardingData",
            "is the class OnboardingData, not a wfkit.Workflow",
        ),
        ("missing-flows.py:flow", "no such file: missing-flows.py"),
        ("missing-flow.json", "no such file: missing-flow.json"),
    ],
)
def test_bad_targets_give_a_clear_message(target: str, expected: str) -> None:
    result = invoke("validate", target)
    assert result.exit_code == 2, result.output
    message = flat(result.stderr)
    assert expected in message
    assert "Traceback" not in result.output


def test_attributes_that_are_not_workflows(tmp_path: Path) -> None:
    path = write(tmp_path, "factories.py", FACTORIES)
    result = invoke("validate", f"{path}:not_a_flow")
    assert result.exit_code == 2
    assert "is a dict, not a wfkit.Workflow" in flat(result.stderr)
    result = invoke("validate", f"{path}:needs_args")
    assert result.exit_code == 2
    assert "is a function that needs arguments" in flat(result.stderr)


def test_a_file_that_is_not_a_workflow_json(tmp_path: Path) -> None:
    (tmp_path / "junk.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"format": "something/1"}')
    for name, expected in [
        ("junk.json", "is not a readable wfkit workflow"),
        ("other.json", "not a wfkit workflow (format 'something/1'"),
    ]:
        result = invoke("render", str(tmp_path / name), "-o", str(tmp_path / "x.svg"))
        assert result.exit_code == 2, result.output
        assert expected in flat(result.stderr)
    assert not (tmp_path / "x.svg").exists()


def test_a_workflow_json_naming_a_model_not_loaded_is_reported_not_imported(
    tmp_path: Path,
) -> None:
    # loading a file imports no code: the model it names is an error to fix, not an import
    data = onboarding.flow.to_data() | {"data_model": "no_such_pkg_xyz:Model"}
    (tmp_path / "lost-model.json").write_text(json.dumps(data))
    result = invoke("validate", str(tmp_path / "lost-model.json"))
    assert result.exit_code == 1, result.output
    assert "data model 'no_such_pkg_xyz:Model' was not loaded" in flat(result.output)


# --- render ---------------------------------------------------------------------------------


def test_render_svg_has_the_node_ids(tmp_path: Path) -> None:
    out = tmp_path / "x.svg"
    result = invoke("render", "wfkit.examples.onboarding:flow", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote {out}"
    svg = html.unescape(out.read_text())  # Graphviz writes '-' as &#45;
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    for node in onboarding.flow.graph.nodes:
        assert f'id="node-{node}"' in svg


def test_render_png(tmp_path: Path) -> None:
    out = tmp_path / "x.png"
    result = invoke("render", "wfkit.examples.onboarding:flow", "--output", str(out))
    assert result.exit_code == 0, result.output
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000


def test_render_draws_problems_unless_told_not_to(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.py", BROKEN_FLOW)
    with_problems, without = tmp_path / "a.svg", tmp_path / "b.svg"
    assert invoke("render", f"{path}:flow", "-o", str(with_problems)).exit_code == 0
    assert invoke("render", f"{path}:flow", "-o", str(without), "--no-problems").exit_code == 0
    drawn = html.unescape(with_problems.read_text())
    assert 'class="node problem error"' in drawn
    assert "reads 'totl'" in drawn
    assert "problem" not in html.unescape(without.read_text())


def test_render_json_target(tmp_path: Path) -> None:
    src = tmp_path / "onboarding.json"
    src.write_text(onboarding.flow.to_json())
    out = tmp_path / "from-json.svg"
    result = invoke("render", str(src), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert 'id="node-accounts.create"' in html.unescape(out.read_text())


def test_render_refuses_unknown_formats(tmp_path: Path) -> None:
    out = tmp_path / "x.gif"
    result = invoke("render", "wfkit.examples.onboarding:flow", "-o", str(out))
    assert result.exit_code == 2
    assert "use a .svg, .png or .pdf name" in flat(result.stderr)
    assert not out.exists()


# --- demo -----------------------------------------------------------------------------------


def test_demo_writes_every_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the runs go to demo.duckdb in the current folder
    out = tmp_path / "pictures"
    result = invoke("demo", "--out", str(out))
    assert result.exit_code == 0, result.output
    names = ("onboarding", "fulfilment", "checkout", "trip")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{n}.{ext}" for n in names for ext in ("svg", "png")
    )
    for name in names:
        assert (out / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
        assert "<svg" in (out / f"{name}.svg").read_text()
        assert re.search(rf"^{name}\s+v1\s+\d+ nodes\s+valid\b", result.stdout, re.M)
    assert f"pictures are in {out.resolve()}" in result.stdout.splitlines()
    assert (tmp_path / "demo.duckdb").is_file()
    assert "list them with: wfkit runs --db demo.duckdb" in result.stdout.splitlines()[-1]


# --- the installed program ------------------------------------------------------------------


def run_wfkit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **WIDE}
    return subprocess.run(
        [str(WFKIT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_console_script_is_installed() -> None:
    assert WFKIT.is_file() and os.access(WFKIT, os.X_OK), f"{WFKIT} missing: pip install -e ."
    (script,) = entry_points(group="console_scripts", name="wfkit")
    assert script.value == "wfkit.cli:main", "stale install: run pip install -e . again"


@pytest.mark.slow
def test_program_validates_example(tmp_path: Path) -> None:
    done = run_wfkit("validate", "wfkit.examples.onboarding:flow", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "onboarding v1: valid, no problems"


@pytest.mark.slow
def test_program_validates_broken_file_relative_to_cwd(tmp_path: Path) -> None:
    (tmp_path / "flows").mkdir()
    write(tmp_path / "flows", "broken.py", BROKEN_FLOW)
    done = run_wfkit("validate", "flows/broken.py:flow", cwd=tmp_path)
    assert done.returncode == 1
    assert "error: node 'clitest.not-registered':" in done.stderr
    assert "error: node 'if-1': expression 'totl > 10' reads 'totl'" in done.stderr
    assert "broken v1: 2 errors, 0 warnings" in done.stdout


@pytest.mark.slow
def test_program_renders_png_and_module_in_cwd(tmp_path: Path) -> None:
    write(tmp_path, "myflows.py", FACTORIES)  # importable as a module from the current folder
    done = run_wfkit("render", "myflows:make_flow", "-o", "out/made.png", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "made.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_program_reports_wfkit_errors_in_one_line(tmp_path: Path) -> None:
    write(tmp_path, "bad_id.py", "import wfkit as wf\nflow = wf.Workflow('  ')\n")
    done = run_wfkit("validate", "bad_id.py:flow", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == ("error: a workflow id must be a non-empty string, got '  '")


@pytest.mark.slow
def test_program_rejects_bad_target(tmp_path: Path) -> None:
    done = run_wfkit("validate", "nocolon", cwd=tmp_path)
    assert done.returncode == 2
    assert "does not name a workflow" in flat(done.stderr)
    assert "Traceback" not in done.stderr


# --- runs purge / runs archive --------------------------------------------------------------


def old_runs(db: Path) -> dict[str, str]:
    """A DuckDB file with runs that ended in 2020 (a manual clock), and one still waiting."""
    import wfkit as wf

    registry = wf.ActivityRegistry()
    registry.register("clitest.ok", lambda ctx: None)
    registry.register("clitest.boom", lambda ctx: 1 / 0)
    clock = wf.ManualClock(datetime(2020, 1, 1))
    with wf.Engine(db, clock=clock, registry=registry) as engine:
        engine.register(wf.Workflow("ok").start_with("clitest.ok"))
        engine.register(wf.Workflow("boom").start_with("clitest.boom", max_attempts=1))
        engine.register(wf.Workflow("waits").start_with().wait_for_signal("go"))
        runs = {
            "completed": engine.start("ok", {}).id,
            "failed": engine.start("boom", {}).id,
            "waiting": engine.start("waits", {}).id,
        }
        engine.run_until_idle()
    return runs


def stored(db: Path) -> dict[str, str]:
    import duckdb

    with duckdb.connect(str(db)) as conn:
        return dict(conn.execute("SELECT run_id, status FROM wf_instances").fetchall())


def test_runs_purge_deletes_ended_runs_older_than_the_duration(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    runs = old_runs(db)
    failed = invoke("runs", "purge", "--older-than", "30d", "--status", "failed", "--db", str(db))
    assert failed.exit_code == 0, failed.output
    assert failed.stdout == f"purged 1 failed run that ended more than 30d ago from {db}\n"
    assert stored(db) == {runs["completed"]: "completed", runs["waiting"]: "waiting"}

    rest = invoke("runs", "purge", "--older-than", "30d", "--db", str(db))
    assert rest.stdout == f"purged 1 run that ended more than 30d ago from {db}\n"
    assert stored(db) == {runs["waiting"]: "waiting"}
    listed = invoke("runs", "--db", str(db))  # the listing works as before
    assert listed.exit_code == 0, listed.output
    assert f"1 of 1 runs in {db}" in listed.stdout and runs["waiting"] in listed.stdout


def test_runs_purge_deletes_the_artifacts_of_purged_runs(tmp_path: Path) -> None:
    import wfkit as wf

    db, root = tmp_path / "runs.duckdb", tmp_path / "artifacts"
    registry = wf.ActivityRegistry()
    registry.register("clitest.blob", lambda ctx: wf.Artifact(b"blob" * 100))
    clock = wf.ManualClock(datetime(2020, 1, 1))
    with wf.Engine(db, clock=clock, registry=registry, artifacts=root) as engine:
        engine.register(wf.Workflow("blob").start_with("clitest.blob"))
        run = engine.start("blob", {})
        engine.run_until_idle()
    assert (root / run.id).is_dir()
    args = ("runs", "purge", "--older-than", "30d", "--db", str(db))
    purged = invoke(*args, "--artifacts", str(root))
    assert purged.exit_code == 0, purged.output
    assert not (root / run.id).exists()


def test_runs_purge_refuses_bad_input_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    old_runs(db)
    before = stored(db)
    waiting = invoke("runs", "purge", "--older-than", "1d", "--status", "waiting", "--db", str(db))
    assert waiting.exit_code == 1
    assert waiting.stderr.startswith("error: runs that are waiting have not ended")
    assert len(waiting.stderr.splitlines()) == 1
    soon = invoke("runs", "purge", "--older-than", "soon", "--db", str(db))
    assert soon.exit_code == 1 and "'soon' is not a duration" in soon.stderr
    missing = invoke("runs", "purge", "--db", str(db))
    assert missing.exit_code == 2 and "--older-than" in missing.stderr
    assert stored(db) == before
    nowhere = invoke("runs", "purge", "--older-than", "1d", "--db", str(tmp_path / "no.duckdb"))
    assert nowhere.exit_code == 1 and "no such file" in nowhere.stderr
    assert not (tmp_path / "no.duckdb").exists()


def test_runs_archive_writes_parquet_then_purges(tmp_path: Path) -> None:
    import duckdb

    db = tmp_path / "runs.duckdb"
    runs = old_runs(db)
    out = tmp_path / "archive"
    result = invoke("runs", "archive", str(out), "--older-than", "30d", "--db", str(db))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"wrote {out / 'wf_instances.parquet'} (2 rows)"
    assert lines[-1] == f"archived 2 runs into {out} and purged them from {db}"
    assert stored(db) == {runs["waiting"]: "waiting"}
    with duckdb.connect() as conn:
        found = conn.execute(
            "SELECT run_id, status FROM read_parquet(?)", [str(out / "wf_instances.parquet")]
        ).fetchall()
    assert dict(found) == {runs["completed"]: "completed", runs["failed"]: "failed"}

    again = invoke("runs", "archive", str(out), "--older-than", "30d", "--db", str(db))
    assert again.stdout == f"no ended runs older than 30d in {db}: nothing was archived\n"


def test_runs_archive_counts_one_row_as_one_row(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    old_runs(db)
    out = tmp_path / "archive"
    args = ("runs", "archive", str(out), "--older-than", "30d", "--status", "failed")
    result = invoke(*args, "--db", str(db))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"wrote {out / 'wf_instances.parquet'} (1 row)"
    assert lines[-1] == f"archived 1 run into {out} and purged it from {db}"
