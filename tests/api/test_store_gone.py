"""``wfkit serve`` whose DuckDB file is deleted under it acknowledges nothing more.

Before: after ``rm runs.duckdb runs.duckdb.wal`` the server kept answering ``/health`` 200 and
``POST /runs`` 201, and every run was gone once it stopped. Now the first write after the
deletion is refused with a problem document that says what happened, ``/health`` answers 503,
the server stops cleanly, and a server started again on the path refuses to start with an empty
store in its place.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.serving import server_env
from tests.polling import wait_until

FLOWS = Path(__file__).with_name("http_flows.py")
WFKIT = Path(sys.executable).parent / "wfkit"
TOKEN = "test-token-" + uuid.uuid4().hex

pytestmark = pytest.mark.slow


def _serve(db: Path, log: Path) -> subprocess.Popen[bytes]:
    command = [str(WFKIT), "serve", "--db", str(db), "--port", "0", "--threads", "2"]
    command += ["--module", str(FLOWS), "--no-access-log"]
    with log.open("wb") as out:
        env = server_env(TOKEN)
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, Path, subprocess.Popen[bytes], str]]:
    db, log = tmp_path / "runs.duckdb", tmp_path / "server.log"
    process = _serve(db, log)
    sidecar = Path(f"{db}.server.json")

    def started() -> dict[str, Any] | None:
        assert process.poll() is None, f"wfkit serve exited:\n{log.read_text()}"
        return json.loads(sidecar.read_text()) if sidecar.exists() else None

    try:
        url = wait_until(started, "the sidecar file", timeout=30)["url"]
        yield db, log, process, url
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=20)


def _start(api: httpx.Client) -> httpx.Response:
    return api.post("/runs", json={"workflow": "http-order", "data": {"order_id": "o-1"}})


def test_a_deleted_database_refuses_new_runs_and_fails_the_health_check(
    served: tuple[Path, Path, subprocess.Popen[bytes], str],
) -> None:
    db, log, process, url = served
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=f"{url}/api/v1", headers=auth, trust_env=False) as api:
        assert _start(api).status_code == 201
        assert api.get("/health").status_code == 200
        db.unlink()
        Path(f"{db}.wal").unlink(missing_ok=True)

        refused = _start(api)
        health = api.get("/health")
        again = _start(api)

    assert refused.status_code == 503, refused.text
    problem = refused.json()
    assert problem["type"] == "urn:wfkit:problem:store-unavailable"
    assert "runs.duckdb' was deleted while this engine had it open" in problem["detail"]
    assert "restore runs.duckdb from a backup" in problem["detail"]
    assert health.status_code == 503
    assert "deleted or replaced while it ran" in health.json()["detail"]
    assert again.status_code == 503

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0, log.read_text()
    assert not db.exists() and not Path(f"{db}.wal").exists()

    restarted = subprocess.run(
        [str(WFKIT), "serve", "--db", str(db), "--port", "0", "--module", str(FLOWS)],
        capture_output=True,
        text=True,
        env=server_env(TOKEN),
        timeout=60,
        check=False,
    )
    assert restarted.returncode == 1, restarted.stdout + restarted.stderr
    assert "does not exist, but" in restarted.stderr and "accept-loss" in restarted.stderr
    assert not db.exists()  # no empty store was made in its place
