"""Crash loops under the servers: an activity that kills its process on every attempt fails its
step for good under ``wfkit serve`` (DuckDB file) and ``wfkit worker`` (PostgreSQL) too.

The test plays the supervisor (systemd, a container runtime): each time the process dies it is
launched again on the same database, until the run has failed; then it is stopped with SIGTERM.
As in ``tests/engine/test_crash_loop.py``, the first death hits an unmarked attempt (not counted),
and every later one a marked attempt, so three deaths spend ``max_attempts=3``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

import wfkit as wf
from tests.api import crash_flows

FLOWS = Path(crash_flows.__file__)
WFKIT = Path(sys.executable).parent / "wfkit"
TOKEN = "crash-token-" + uuid.uuid4().hex
LAUNCHES = 8  # more than needed: a crash loop that is never counted fails the test
DEATHS = 4  # the unmarked first attempt, then attempts 1, 2 and 3 with their start marker

pytestmark = pytest.mark.slow


def crash_error(attempt: int, node_id: str) -> str:
    """The error docs/semantics.md gives an attempt its engine process did not survive."""
    return (
        f"the engine process died during attempt {attempt} of {node_id!r} (killed, out of "
        "memory, os._exit or a crash in native code)"
    )


def supervise(
    command: list[str], env: dict[str, str], out: Path, failed: Callable[[int], bool]
) -> list[int]:
    """Launch ``command`` again each time it dies, until ``failed(pid)`` says the run has failed;
    then stop it with SIGTERM. Every launch's exit code."""
    codes: list[int] = []
    for _ in range(LAUNCHES):
        with out.open("ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 60
            while process.poll() is None and time.monotonic() < deadline:
                if failed(process.pid):
                    process.send_signal(signal.SIGTERM)
                    process.wait(timeout=30)
                    break
                time.sleep(0.1)
            else:
                if process.poll() is None:
                    pytest.fail(f"launch {len(codes) + 1} neither died nor failed the run")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        codes.append(process.returncode)
        if process.returncode == 0:
            return codes
        assert process.returncode == 1, out.read_text()
    pytest.fail(f"the run did not fail in {LAUNCHES} launches: {codes}\n{out.read_text()}")


def check(codes: list[int], log: Path, run: wf.Run) -> None:
    """The run failed for good with the crash error after ``DEATHS`` deaths."""
    assert codes == [1] * DEATHS + [0]
    lines = [line.split() for line in log.read_text().splitlines()]
    assert [(node, int(attempt)) for node, attempt, _pid in lines] == [
        ("crashtest.boom", n) for n in (1, 1, 2, 3)
    ]
    assert run.status == wf.RunStatus.FAILED
    assert run.view().error == crash_error(3, "crashtest.boom")
    events = run.history()
    crashed = [(e.node_id, e.attempt, e.error) for e in events if e.kind == "step.crashed"]
    assert crashed == [("crashtest.boom", n, crash_error(n, "crashtest.boom")) for n in (1, 2, 3)]
    assert [e.kind for e in events if e.kind.startswith("run.")][-1] == "run.failed"


def test_wfkit_serve_fails_a_crash_loop_for_good(tmp_path: Path) -> None:
    db, log, out = tmp_path / "crash.duckdb", tmp_path / "activities.log", tmp_path / "serve.out"
    sidecar = Path(f"{db}.server.json")
    env = {**os.environ, "WFKIT_API_TOKEN": TOKEN, crash_flows.LOG_ENV: str(log)}
    command = [str(WFKIT), "serve", "--db", str(db), "--port", "0", "--threads", "2"]
    command += ["--module", str(FLOWS), "--no-access-log"]
    started: list[str] = []

    def failed(pid: int) -> bool:
        try:
            info = json.loads(sidecar.read_text())
        except (OSError, ValueError):
            return False
        if info["pid"] != pid:  # the file a dead launch left behind
            return False
        headers = {"Authorization": f"Bearer {TOKEN}"}
        try:
            with httpx.Client(base_url=f"{info['url']}/api/v1", headers=headers) as api:
                if not started:  # the first launch starts the run
                    answer = api.post("/runs", json={"workflow": "crash-loop"})
                    assert answer.status_code == 201, answer.text
                    started.append(answer.json()["run_id"])
                return bool(api.get(f"/runs/{started[0]}").json()["status"] == "failed")
        except httpx.TransportError:  # it is dying
            return False

    codes = supervise(command, env, out, failed)
    with wf.Engine(db) as engine:
        check(codes, log, engine.run(started[0]))


def test_wfkit_worker_fails_a_crash_loop_for_good(tmp_path: Path) -> None:
    import psycopg

    from tests.postgres import postgres_database

    log, out = tmp_path / "activities.log", tmp_path / "worker.out"
    env = {**os.environ, crash_flows.LOG_ENV: str(log)}
    with postgres_database() as url:
        with wf.Engine(url) as engine:  # starts the run; it runs no workers
            engine.register(crash_flows.flow)
            run_id = engine.start("crash-loop").id
        command = [str(WFKIT), "worker", "--db", url, "--module", str(FLOWS)]
        command += ["--threads", "2", "--lease", "1s"]

        def failed(pid: int) -> bool:
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM wf_events WHERE run_id = %s AND kind = 'run.failed'",
                    [run_id],
                ).fetchone()
            return bool(row and row[0])

        codes = supervise(command, env, out, failed)
        with wf.Engine(url) as engine:
            check(codes, log, engine.run(run_id))
