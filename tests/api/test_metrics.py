"""``GET /metrics`` of ``wfkit serve`` and ``wfkit worker --metrics-port``, and ``--log-format
json``, end to end against real processes over real HTTP.

The servers import ``metrics_flows.py``: ``m-wait`` runs one step (which logs through
``ctx.logger``) and waits for a signal, ``m-fail`` fails its only attempt. After a few runs the
scrape, parsed with prometheus_client's own text parser, must count them: runs by status, steps
completed and failed, attempt durations, commits, group-commit batches and open waits. Every
line the server logs with ``--log-format json`` must parse as JSON, and the activity's line
must name its run, node, attempt and workflow.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import wfkit as wf
from tests.api import metrics_flows
from tests.api.serving import server_env
from tests.polling import wait_until
from tests.postgres import postgres_database
from tests.prometheus import samples, value

FLOWS = Path(__file__).with_name("metrics_flows.py")
WFKIT = Path(sys.executable).parent / "wfkit"
TOKEN = "metrics-token-" + uuid.uuid4().hex

pytestmark = pytest.mark.slow


@dataclass
class Server:
    """A ``wfkit serve`` process under test."""

    url: str
    out: Path
    err: Path
    process: subprocess.Popen[bytes]

    def client(self, token: str | None = TOKEN) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, trust_env=False)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=20)
        assert code == 0, self.err.read_text()


def _serve(folder: Path, *flags: str) -> Server:
    folder.mkdir(parents=True, exist_ok=True)
    db, out, err = folder / "runs.duckdb", folder / "server.out", folder / "server.err"
    sidecar = Path(f"{db}.server.json")
    command = [str(WFKIT), "serve", "--db", str(db), "--port", "0", "--threads", "2"]
    command += ["--module", str(FLOWS), *flags]
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=server_env(TOKEN))

    def started() -> dict[str, Any] | None:
        assert process.poll() is None, f"wfkit serve exited:\n{err.read_text()}"
        return json.loads(sidecar.read_text()) if sidecar.exists() else None

    info = wait_until(started, "the sidecar file", timeout=30)
    server = Server(info["url"], out, err, process)
    with server.client(None) as anonymous:
        wait_until(
            lambda: anonymous.get("/api/v1/health").status_code == 200, "/health", timeout=30
        )
    return server


@pytest.fixture
def json_server(tmp_path: Path) -> Iterator[Server]:
    server = _serve(tmp_path, "--log-format", "json")
    try:
        yield server
    finally:
        server.stop()


def _start(api: httpx.Client, workflow: str) -> str:
    answer = api.post("/api/v1/runs", json={"workflow": workflow, "data": {}})
    assert answer.status_code == 201, answer.text
    run_id: str = answer.json()["run_id"]
    return run_id


def _status(api: httpx.Client, run_id: str) -> str:
    status: str = api.get(f"/api/v1/runs/{run_id}").json()["status"]
    return status


def test_a_scrape_counts_the_runs_steps_commits_and_waits(json_server: Server) -> None:
    with json_server.client() as api:
        waiting = [_start(api, "m-wait") for _ in range(3)]
        failing = [_start(api, "m-fail") for _ in range(2)]
        for run_id in waiting:
            wait_until(
                lambda r=run_id: _status(api, r) == "waiting", f"{run_id} to wait", timeout=30
            )
        for run_id in failing:
            wait_until(
                lambda r=run_id: _status(api, r) == "failed", f"{run_id} to fail", timeout=30
            )
        answer = api.get("/metrics")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    found = samples(answer.text)

    assert value(found, "wfkit_runs", workflow="m-wait", status="waiting") == 3
    assert value(found, "wfkit_runs", workflow="m-fail", status="failed") == 2
    work = {"workflow": "m-wait", "activity": "mtest.work"}
    boom = {"workflow": "m-fail", "activity": "mtest.boom"}
    assert value(found, "wfkit_steps_started_total", **work) == 3
    assert value(found, "wfkit_steps_completed_total", **work) == 3
    assert value(found, "wfkit_steps_failed_total", **work) == 0
    assert value(found, "wfkit_steps_started_total", **boom) == 2
    assert value(found, "wfkit_steps_failed_total", **boom) == 2
    assert value(found, "wfkit_steps_completed_total", **boom) == 0
    assert value(found, "wfkit_attempt_duration_seconds_count", activity="mtest.work") == 3
    assert value(found, "wfkit_attempt_duration_seconds_count", activity="mtest.boom") == 2
    infinite = value(
        found, "wfkit_attempt_duration_seconds_bucket", activity="mtest.work", le="+Inf"
    )
    assert infinite == 3
    commits = value(found, "wfkit_commit_duration_seconds_count")
    assert commits >= 5  # at least one transaction per run started
    assert value(found, "wfkit_commit_duration_seconds_sum") > 0
    # every attempt result reached the writer in some round: the batches hold them all
    assert value(found, "wfkit_commit_batch_size_sum") >= 5
    assert value(found, "wfkit_commit_batch_size_count") >= 1
    assert value(found, "wfkit_open_waits", kind="signal") == 3
    assert value(found, "wfkit_oldest_wait_age_seconds") >= 0
    assert ("wfkit_oldest_wait_age_seconds", frozenset()) in found
    assert value(found, "wfkit_ready_queue_depth") == 0
    assert value(found, "wfkit_steps_in_flight") == 0

    # a signal moves one run on (the waits share the name): the gauges follow at the next scrape
    with json_server.client() as api:
        sent = api.post("/api/v1/signals/go", json={"payload": {}})
        assert sent.status_code == 200 and sent.json()["delivered"], sent.text

        def moved() -> bool:
            return sorted(_status(api, r) for r in waiting) == ["completed", "waiting", "waiting"]

        wait_until(moved, "one run to complete", timeout=30)
        after = samples(api.get("/metrics").text)
    assert value(after, "wfkit_runs", workflow="m-wait", status="waiting") == 2
    assert value(after, "wfkit_runs", workflow="m-wait", status="completed") == 1
    assert value(after, "wfkit_open_waits", kind="signal") == 2

    # --log-format json: every line on stderr is one JSON object; the activity's names its run
    json_server.stop()
    lines = [line for line in json_server.err.read_text().splitlines() if line.strip()]
    assert lines
    records = [json.loads(line) for line in lines]
    for record in records:
        assert {"time", "level", "logger", "message"} <= record.keys(), record
    activity = [r for r in records if r["message"] == "working on it"]
    assert len(activity) == 3
    assert {r["run_id"] for r in activity} == set(waiting)
    for record in activity:
        assert record["logger"] == "wfkit.activity"
        assert record["level"] == "INFO"
        assert record["workflow"] == "m-wait"
        assert record["node_id"] and record["attempt"] == 1
        assert record["activity"] == "mtest.work"
    # uvicorn's own lines go through the same formatter
    assert any(r["logger"].startswith("uvicorn") for r in records)


def test_metrics_need_the_token_unless_public(tmp_path: Path) -> None:
    guarded = _serve(tmp_path / "guarded")
    try:
        with guarded.client(None) as anonymous:
            refused = anonymous.get("/metrics")
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith("Bearer")
        with guarded.client("not-the-token-" + "x" * 20) as wrong:
            assert wrong.get("/metrics").status_code == 401
        with guarded.client() as api:
            assert api.get("/metrics").status_code == 200
    finally:
        guarded.stop()
    # text logs by default: not JSON
    assert not guarded.err.read_text().lstrip().startswith("{")

    public = _serve(tmp_path / "public", "--metrics-public")
    try:
        with public.client(None) as anonymous:
            scraped = anonymous.get("/metrics")
            assert scraped.status_code == 200
            assert "wfkit_runs" in {f.name for f in text_string_to_metric_families(scraped.text)}
            # only the metrics are public: the API still needs the token
            assert anonymous.get("/api/v1/runs").status_code == 401
    finally:
        public.stop()


def test_worker_serves_metrics_on_its_port_and_logs_json(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    with postgres_database() as url:
        err = tmp_path / "worker.err"
        command = [str(WFKIT), "worker", "--db", url, "--module", str(FLOWS), "--threads", "2"]
        command += ["--metrics-port", "0", "--log-format", "json", "--lease", "3s"]
        with err.open("wb") as stderr:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        try:

            def started() -> str | None:
                assert process.poll() is None, f"wfkit worker exited:\n{err.read_text()}"
                for line in err.read_text().splitlines():
                    message = json.loads(line)["message"]
                    if "started on" in message:
                        where = re.search(r"metrics at (http://\S+/metrics)", message)
                        assert where, message
                        return where.group(1)
                return None

            endpoint: str = wait_until(started, "the worker's start line", timeout=30)
            assert endpoint.startswith("http://127.0.0.1:")
            with wf.Engine(url) as engine:  # starts runs; runs no workers of its own
                engine.register(metrics_flows.waiting)
                engine.register(metrics_flows.failing)
                runs = [engine.start("m-wait", {}) for _ in range(2)]
                runs.append(engine.start("m-fail", {}))
                for run in runs:
                    wait_until(
                        lambda r=run: r.status.value in ("waiting", "failed"),
                        f"{run.id} to settle",
                        timeout=30,
                    )
            with httpx.Client(trust_env=False) as client:

                def scraped() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
                    found = samples(client.get(endpoint).text)
                    done = value(
                        found,
                        "wfkit_steps_completed_total",
                        workflow="m-wait",
                        activity="mtest.work",
                    )
                    return found if done == 2 else None

                found = wait_until(scraped, "the worker's counters", timeout=30)
            assert (
                value(found, "wfkit_steps_failed_total", workflow="m-fail", activity="mtest.boom")
                == 1
            )
            assert value(found, "wfkit_runs", workflow="m-wait", status="waiting") == 2
            assert value(found, "wfkit_runs", workflow="m-fail", status="failed") == 1
            assert value(found, "wfkit_open_waits", kind="signal") == 2
            assert value(found, "wfkit_commit_duration_seconds_count") >= 1
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=30)
        text = err.read_text()
        assert code == 0, text
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        assert any("stopped" in r["message"] for r in records)
        activity = [r for r in records if r["message"] == "working on it"]
        assert len(activity) == 2
        assert {r["run_id"] for r in activity} == {run.id for run in runs[:2]}
        assert all(r["workflow"] == "m-wait" and r["attempt"] == 1 for r in activity)
