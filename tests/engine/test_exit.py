"""A process that ends while workers run exits cleanly with its own exit code.

A script that starts workers and falls off its end, raises or calls ``sys.exit`` used to die with
"terminate called after throwing an instance of ''" (exit code 134) and a ``StoreError ...
INTERRUPT Error`` traceback: the interpreter tore down while the writer thread was inside DuckDB.
Each engine not closed is now closed by an interpreter exit hook: its workers stop after their
current attempts, the writer commits their results, and the store is closed. Here a child process
(``exit_child.py``) does that on a DuckDB file and on PostgreSQL; the test checks its exit code and
stderr, then reopens the store and finishes every run: each step completed exactly once.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

import wfkit as wf
from tests.scale import count

CHILD = Path(__file__).with_name("exit_child.py")
ROOT = Path(__file__).resolve().parents[2]


def _load_child() -> ModuleType:
    spec = importlib.util.spec_from_file_location("exit_child_for_test", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


child = _load_child()


LAUNCHES = count(4, 1)  # per case on DuckDB: the old abort hit about 40% of launches


@pytest.fixture(params=["duckdb", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def launch(target: str, how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), target, how],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )


@pytest.mark.parametrize(("how", "code"), [("end", 0), ("raise", 1), ("exit", 7)])
def test_a_script_that_ends_while_workers_run_exits_with_its_own_code(
    backend: str, how: str, code: int, tmp_path: Path
) -> None:
    if backend == "duckdb":
        for n in range(LAUNCHES):
            target = str(tmp_path / f"exit-{n}.duckdb")
            check_exit(launch(target, how), how, code)
        check_runs(target)
        return
    from tests.postgres import postgres_database

    with postgres_database() as url:
        check_exit(launch(url, how), how, code)
        import psycopg

        with psycopg.connect(url) as conn:
            held = conn.execute("SELECT count(*) FROM wf_instances WHERE owner IS NOT NULL")
            assert held.fetchone() == (0,), "the exiting engine gives its runs back"
        check_runs(url)


def check_exit(done: subprocess.CompletedProcess[str], how: str, code: int) -> None:
    """The script's own exit code, and no traceback but its own."""
    assert done.returncode == code, done.stderr
    assert "ending" in done.stdout
    assert "terminate called" not in done.stderr
    assert "StoreError" not in done.stderr and "INTERRUPT" not in done.stderr, done.stderr
    if how == "raise":
        assert done.stderr.count("Traceback") == 1, done.stderr
        assert done.stderr.rstrip().endswith("RuntimeError: boom"), done.stderr
    else:
        assert "Traceback" not in done.stderr, done.stderr


def check_runs(target: str) -> None:
    """Reopened, the store finishes every run, and each step completed exactly once."""
    engine = wf.Engine(target, registry=child.make_registry(), lease="1s")
    try:
        engine.register(child.make_flow())
        engine.start_workers(4)
        runs = engine.runs()
        assert len(runs) == child.RUNS
        for info in runs:
            engine.run(info.run_id).result(timeout=60)
        engine.stop()
        for info in engine.runs():
            history = engine.run(info.run_id).history()
            completed = Counter(e.node_id for e in history if e.kind == "step.completed")
            assert completed == Counter(child.STEPS), (info.run_id, history)
    finally:
        engine.close()
