"""README.md, "Retention": `wfkit runs purge` and `wfkit runs archive` refuse while a real
`wfkit serve` holds the DuckDB file, and say to stop it first; once it has stopped they work
(tests/api/test_discovery.py checks that a server file planted by someone else does not stop
them). They work on a PostgreSQL URL too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.test_cli import old_runs, stored

WFKIT = Path(sys.executable).parent / "wfkit"


def wfkit(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "400"}
    return subprocess.run(
        [str(WFKIT), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_purge_and_archive_refuse_while_wfkit_serve_holds_the_file(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    runs = old_runs(db)
    sidecar = Path(f"{db}.server.json")
    log = tmp_path / "server.log"
    env = {**os.environ, "WFKIT_API_TOKEN": "claims-test-token-0123456789", "NO_COLOR": "1"}
    command = [str(WFKIT), "serve", "--db", str(db), "--port", "0", "--no-access-log"]
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 30
        while not sidecar.exists():
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "wfkit serve wrote no sidecar file"
            time.sleep(0.05)
        info = json.loads(sidecar.read_text())
        for args in (("purge",), ("archive", str(tmp_path / "a"))):
            result = wfkit("runs", *args, "--older-than", "1d", "--db", str(db))
            assert result.returncode == 1, result
            assert result.stderr.startswith(
                f"error: a wfkit server (process {server.pid}, {info['url']}) holds {db}"
            ), result.stderr
            assert "stop the server" in result.stderr
        assert not (tmp_path / "a").exists()
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0, log.read_text()

    assert stored(db) == {run_id: status for status, run_id in runs.items()}
    purged = wfkit("runs", "purge", "--older-than", "1d", "--db", str(db))
    assert purged.returncode == 0, purged
    assert stored(db) == {runs["waiting"]: "waiting"}


def pg_stored(url: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT run_id, status FROM wf_instances").fetchall())


def test_runs_purge_and_archive_work_on_postgresql(tmp_path: Path) -> None:
    import duckdb

    from tests.postgres import postgres_database
    from tests.test_cli import invoke

    with postgres_database() as url:
        runs = old_runs(url)  # type: ignore[arg-type]
        failed = invoke("runs", "purge", "--older-than", "30d", "--status", "failed", "--db", url)
        assert failed.exit_code == 0, failed.output
        assert failed.stdout.startswith("purged 1 failed run that ended more than 30d ago from ")
        assert pg_stored(url) == {runs["completed"]: "completed", runs["waiting"]: "waiting"}

        out = tmp_path / "archive"
        archived = invoke("runs", "archive", str(out), "--older-than", "30d", "--db", url)
        assert archived.exit_code == 0, archived.output
        assert archived.stdout.splitlines()[0] == f"wrote {out / 'wf_instances.parquet'} (1 row)"
        assert pg_stored(url) == {runs["waiting"]: "waiting"}
        with duckdb.connect() as conn:
            found = conn.execute(
                "SELECT run_id, status FROM read_parquet(?)", [str(out / "wf_instances.parquet")]
            ).fetchall()
        assert found == [(runs["completed"], "completed")]
