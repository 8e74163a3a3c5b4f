"""``wfkit serve --db postgresql://...`` serves a shared PostgreSQL database (README, "HTTP API"):
the URL reaches the engine unmangled, no server file is written (any number of engines share
the database), and ``wfkit signal`` and ``wfkit approve`` on the same URL open the database
themselves while the server advances the run to its end."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.api import http_flows
from tests.api.serving import WFKIT, serving
from tests.polling import wait_until

TOKEN = "pg-serve-" + uuid.uuid4().hex
FLOWS = Path(http_flows.__file__)

pytestmark = pytest.mark.slow


def _wfkit(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "400"}
    env.pop("WFKIT_API_TOKEN", None)  # the command line needs no token for PostgreSQL
    return subprocess.run(
        [str(WFKIT), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_a_run_served_on_postgresql_is_signalled_and_approved_from_the_command_line(
    tmp_path: Path,
) -> None:
    pytest.importorskip("psycopg")
    import httpx

    from tests.postgres import postgres_database

    with postgres_database() as url:
        log = tmp_path / "server.log"
        with serving(url, log, TOKEN, "--module", str(FLOWS), "--threads", "2") as base:
            assert f" on {url}; workflows: http-order v1" in log.read_text()
            auth = {"Authorization": f"Bearer {TOKEN}"}
            with httpx.Client(base_url=f"{base}/api/v1", headers=auth, trust_env=False) as api:
                body = {"workflow": "http-order", "data": {"order_id": "o-pg"}}
                started = api.post("/runs", json=body)
                assert started.status_code == 201, started.text
                run_id = started.json()["run_id"]

                def waits_at(node: str) -> bool:
                    waits = api.get("/waiting").json()["waits"]
                    return any(w["run_id"] == run_id and w["node_id"] == node for w in waits)

                wait_until(lambda: waits_at("paid"), "the run to wait for its payment", timeout=30)
                here = FLOWS.parent  # where the payload model's module is found
                sent = _wfkit(
                    here, "signal", "paid", "o-pg", "--payload", '{"amount": 5}', "--db", url
                )
                assert sent.returncode == 0, sent.stdout + sent.stderr
                assert (
                    sent.stdout == "signal 'paid' (key o-pg) delivered: the waiting run resumed\n"
                )
                wait_until(lambda: waits_at("review"), "the run to wait for its review", timeout=30)

                approved = _wfkit(here, "approve", run_id, "review", "--actor", "ana", "--db", url)
                assert approved.returncode == 0, approved.stdout + approved.stderr
                assert approved.stdout.startswith(f"run {run_id}: 'review' approved by ana; ")

                def ended() -> dict[str, Any] | None:
                    run: dict[str, Any] = api.get(f"/runs/{run_id}").json()
                    return run if run["status"] in ("completed", "failed") else None

                run = wait_until(ended, "the run to end", timeout=30)
        assert run["status"] == "completed", run
        assert run["data"]["paid"] == 5.0 and run["data"]["receipt"] is True
        actors = {e["kind"]: e["actor"] for e in run["history"]}
        assert actors["approval.approved"] == "ana"
        assert "signal.received" in actors
        assert f"wfkit serve stopped; {url} is closed" in log.read_text()
    assert not list(tmp_path.glob("*.server.json"))
    assert not Path("postgresql:").exists()
