"""The HTTP API, end to end against a real ``wfkit serve`` process.

One server (module scope) serves a DuckDB file with the ``http-order`` workflow of
``http_flows.py``: a signal wait with a payload model, an approval, and a saga. Requests go over
real sockets with httpx; the ``wfkit`` command line talks to the same server; schemathesis
fuzzes every operation of the OpenAPI document the server publishes.
"""

from __future__ import annotations

import json
import re
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest

from tests.api import http_flows
from tests.api.serving import server_env
from tests.polling import wait_until

FLOWS = Path(__file__).with_name("http_flows.py")
BIN = Path(sys.executable).parent
WFKIT = BIN / "wfkit"
TOKEN = "test-token-" + uuid.uuid4().hex
PROBLEM_JSON = "application/problem+json"
COLOURS = {"succeeded": "#c8e6c9", "waiting": "#fff9c4"}
SVG = "{http://www.w3.org/2000/svg}"

pytestmark = pytest.mark.slow


@dataclass
class Server:
    """The server under test."""

    url: str
    db: Path
    log: Path
    process: subprocess.Popen[bytes]

    def client(self, token: str | None = TOKEN) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=f"{self.url}/api/v1", headers=headers, trust_env=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("http")
    db, log = folder / "runs.duckdb", folder / "server.log"
    sidecar = Path(f"{db}.server.json")
    command = [str(WFKIT), "serve", "--db", str(db), "--port", "0", "--threads", "2"]
    command += ["--module", str(FLOWS), "--no-access-log"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=server_env(TOKEN), umask=0o022
        )
    try:

        def started() -> dict[str, Any] | None:
            assert process.poll() is None, f"wfkit serve exited:\n{log.read_text()}"
            return json.loads(sidecar.read_text()) if sidecar.exists() else None

        info = wait_until(started, "the sidecar file", timeout=30)
        assert info["pid"] == process.pid and info["token"] == TOKEN
        assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600
        running = Server(info["url"], db, log, process)
        with running.client(None) as anonymous:
            wait_until(lambda: anonymous.get("/health").status_code == 200, "/health", timeout=30)
        yield running
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=20)
        text = log.read_text()
        assert code == 0, text
        assert "Traceback" not in text, text
        assert not sidecar.exists(), "the sidecar file outlived the server"


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    """The response's problem document, checked for its shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["title"] and body["detail"] and body["type"]
    return body


def _start(api: httpx.Client, **data: Any) -> str:
    answer = api.post("/runs", json={"workflow": "http-order", "data": data})
    assert answer.status_code == 201, answer.text
    run_id: str = answer.json()["run_id"]
    assert answer.headers["location"] == f"/api/v1/runs/{run_id}"
    return run_id


def _run_when(api: httpx.Client, run_id: str, ok: Callable[[dict[str, Any]], bool]) -> Any:
    def probe() -> dict[str, Any] | None:
        run: dict[str, Any] = api.get(f"/runs/{run_id}").json()
        return run if ok(run) else None

    return wait_until(probe, f"run {run_id} to move on", timeout=30)


def _waiting_on(api: httpx.Client, run_id: str, node: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        waits = api.get("/waiting").json()["waits"]
        return next((w for w in waits if w["run_id"] == run_id and w["node_id"] == node), None)

    return wait_until(probe, f"run {run_id} to wait at {node!r}", timeout=30)  # type: ignore[no-any-return]


def _order() -> str:
    return f"o-{uuid.uuid4().hex[:8]}"


# --- auth and limits -----------------------------------------------------------------------------


def test_health_needs_no_token_and_every_other_route_does(server: Server) -> None:
    with server.client(None) as anonymous, server.client("wrong") as wrong:
        health = anonymous.get("/health")
        assert health.status_code == 200
        assert health.json()["workflows"] == {"http-order": [1]}

        missing = anonymous.get("/runs")
        assert "bearer token" in _problem(missing, 401)["detail"]
        assert missing.headers["www-authenticate"].startswith("Bearer")

        bad = wrong.post("/signals/paid/o-1", json={"payload": {"amount": 1}})
        assert "not valid" in _problem(bad, 401)["detail"]
        assert 'error="invalid_token"' in bad.headers["www-authenticate"]

        # refused before the body is looked at: an unauthenticated caller learns nothing
        assert anonymous.post("/runs", content=b"{not json").status_code == 401


def test_an_oversize_body_is_refused_with_413(api: httpx.Client) -> None:
    big = {"payload": {"blob": "x" * (400 * 1024)}}
    declared = api.post("/signals/paid/o-big", json=big)
    assert "327,680 bytes" in _problem(declared, 413)["detail"]  # 256 KiB + 64 KiB

    def chunks() -> Iterator[bytes]:  # no Content-Length: the server must count as it reads
        yield b'{"payload": {"blob": "'
        for _ in range(400):
            yield b"x" * 1024
        yield b'"}}'

    streamed = api.post(
        "/signals/paid/o-big", content=chunks(), headers={"content-type": "application/json"}
    )
    assert _problem(streamed, 413)["type"] == "urn:wfkit:problem:body-too-large"


def _padded(document: dict[str, Any], field: str, size: int) -> dict[str, Any]:
    """``document`` with ``field`` filled so that its JSON is ``size`` bytes, as the engine
    measures it (``json.dumps`` with its default separators)."""
    bare = len(json.dumps({**document, field: ""}).encode())
    return {**document, field: "x" * (size - bare)}


LIMIT = 256 * 1024  # the engine's max_payload


def test_a_payload_at_the_limit_goes_through_and_one_over_it_is_413(
    api: httpx.Client,
) -> None:
    order = _order()
    # the data as the engine admits it: the model's defaults filled in
    data = http_flows.Order(order_id=order).model_dump(mode="json")
    started = api.post(
        "/runs", json={"workflow": "http-order", "data": _padded(data, "note", LIMIT)}
    )
    assert started.status_code == 201, started.text[:500]
    run_id = started.json()["run_id"]
    _waiting_on(api, run_id, "paid")

    payload = _padded({"amount": 5}, "note", LIMIT)
    sent = api.post(f"/signals/paid/{order}", json={"payload": payload, "actor": "bank"})
    assert sent.status_code == 200, sent.text[:500]
    assert sent.json()["delivered"] is True
    _waiting_on(api, run_id, "review")

    over = api.post("/signals/paid/o-over", json={"payload": _padded({}, "note", LIMIT + 1)})
    problem = _problem(over, 413)
    assert problem["type"] == "urn:wfkit:problem:payload-too-large"
    assert "262,145 bytes" in problem["detail"] and "262,144" in problem["detail"]
    data = _padded({"order_id": _order()}, "note", LIMIT + 1)
    refused = api.post("/runs", json={"workflow": "http-order", "data": data})
    assert _problem(refused, 413)["type"] == "urn:wfkit:problem:payload-too-large"


@pytest.mark.parametrize(
    ("token", "said"),
    [
        ("a", "WFKIT_API_TOKEN is 1 character long; it needs at least 16"),
        ("a" * 32, "WFKIT_API_TOKEN is one character repeated"),
        (TOKEN + "\n", f"WFKIT_API_TOKEN contains whitespace (character {len(TOKEN) + 1} of"),
    ],
    ids=["short", "one-character", "newline"],  # the same on every xdist worker
)
def test_a_weak_token_is_refused_at_start_up(tmp_path: Path, token: str, said: str) -> None:
    db = tmp_path / "short.duckdb"
    started = subprocess.run(
        [str(WFKIT), "serve", "--db", str(db), "--port", "0"],
        capture_output=True,
        text=True,
        env={**server_env(TOKEN), "WFKIT_API_TOKEN": token},
        timeout=20,
        check=False,
    )
    assert started.returncode == 1, started.stdout + started.stderr
    assert started.stderr.startswith("error: ") and started.stderr.count("\n") == 1
    assert said in started.stderr
    assert 'python -c "import secrets; print(secrets.token_urlsafe(32))"' in started.stderr
    assert not db.exists()  # refused before anything was opened


def test_swagger_ui_is_off_and_the_openapi_document_is_served(server: Server) -> None:
    with server.client(None) as anonymous:
        _problem(anonymous.get("/docs"), 404)
        document = anonymous.get("/openapi.json")
        assert document.status_code == 200
        assert document.json()["info"]["title"] == "wfkit"
    assert "OpenAPI at " in server.log.read_text()


def test_the_database_its_log_and_the_server_file_are_owner_only(
    server: Server, api: httpx.Client
) -> None:
    _start(api, order_id=_order())  # a write: the write-ahead log exists
    files = (server.db, Path(f"{server.db}.wal"), Path(f"{server.db}.server.json"))
    modes = {path.name: oct(stat.S_IMODE(path.stat().st_mode)) for path in files}
    assert modes == {path.name: "0o600" for path in files}  # under umask 022


# --- a run from start to end ---------------------------------------------------------------------


def test_a_run_goes_through_its_signal_approval_and_saga_over_http(api: httpx.Client) -> None:
    order = _order()
    run_id = _start(api, order_id=order)
    wait = _waiting_on(api, run_id, "paid")
    assert (wait["kind"], wait["name"], wait["key"]) == ("signal", "paid", order)

    first = api.post(f"/signals/paid/{order}", json={"payload": {"amount": 42}, "actor": "bank"})
    assert first.json() == {"delivered": True, "kept": False}
    second = api.post(f"/signals/paid/{order}", json={"payload": {"amount": 42}})
    assert second.json() == {"delivered": False, "kept": False}

    _waiting_on(api, run_id, "review")
    decided = api.post(
        f"/runs/{run_id}/approvals/review",
        json={"approved": True, "actor": "ana", "comment": "looks right"},
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["run_id"] == run_id

    run = _run_when(api, run_id, lambda r: r["status"] == "completed")
    assert (run["workflow"], run["version"], run["explain"]) == ("http-order", 1, "completed")
    assert run["data"] == {
        "order_id": order,
        "paid": 42.0,
        "fail_charge": False,
        "break_release": False,
        "reserved": True,
        "charged": True,
        "receipt": True,
        "note": "",
    }
    assert run["outputs"]["httptest.invoice"] == {"invoice": f"inv-{order}"}
    assert set(run["nodes"].values()) == {"succeeded"}
    events = {e["kind"]: e for e in run["history"]}
    assert events["signal.received"]["actor"] == "bank"
    assert events["approval.approved"]["actor"] == "ana"
    assert [e["seq"] for e in run["history"]] == sorted(e["seq"] for e in run["history"])

    listed = api.get("/runs", params={"workflow": "http-order", "status": "completed"}).json()
    assert run_id in [r["run_id"] for r in listed["runs"]]


def test_a_payload_that_does_not_fit_is_422_and_the_wait_stays(api: httpx.Client) -> None:
    order = _order()
    run_id = _start(api, order_id=order)
    _waiting_on(api, run_id, "paid")

    refused = api.post(f"/signals/paid/{order}", json={"payload": {"amount": "lots"}})
    detail = _problem(refused, 422)["detail"]
    assert "amount" in detail and "left in place" in detail
    assert _waiting_on(api, run_id, "paid")["key"] == order

    fits = api.post(f"/signals/paid/{order}", json={"payload": {"amount": 5}})
    assert fits.json()["delivered"] is True
    _waiting_on(api, run_id, "review")


def test_a_kept_signal_meets_its_wait_and_a_failed_saga_is_recovered(api: httpx.Client) -> None:
    order = _order()
    early = api.post(
        f"/signals/paid/{order}",
        json={"payload": {"amount": 7}, "post_if_absent": True, "expires": "1h"},
    )
    assert early.json() == {"delivered": False, "kept": True}

    run_id = _start(api, order_id=order, fail_charge=True, break_release=True)
    _waiting_on(api, run_id, "review")  # the kept signal passed the wait at once
    api.post(f"/runs/{run_id}/approvals/review", json={"approved": True, "actor": "ana"})
    run = _run_when(api, run_id, lambda r: r["status"] == "suspended")
    assert "warehouse is offline" in run["explain"]

    resumed = api.post(f"/runs/{run_id}/resume", json={"actor": "op"})
    assert "recover_compensation" in _problem(resumed, 409)["detail"]
    skipped = api.post(f"/runs/{run_id}/recover", json={"action": "skip", "actor": "op"})
    assert skipped.status_code == 200, skipped.text
    run = _run_when(api, run_id, lambda r: r["status"] == "failed")
    assert run["nodes"]["httptest.reserve"] == "skipped"
    assert run["data"]["paid"] == 7.0

    again = api.post(f"/runs/{run_id}/restart", json={"actor": "op"})
    assert again.status_code == 201, again.text
    assert again.json()["restart_of"] == run_id
    assert again.json()["run_id"] != run_id


def test_the_graph_picture_colours_nodes_by_their_status(api: httpx.Client) -> None:
    order = _order()
    run_id = _start(api, order_id=order)
    _waiting_on(api, run_id, "paid")

    picture = api.get(f"/runs/{run_id}/graph.svg")
    assert picture.status_code == 200
    assert picture.headers["content-type"].startswith("image/svg+xml")
    root = ElementTree.fromstring(picture.content)
    fills = {
        g.get("id"): {shape.get("fill") for shape in g.iter() if shape.get("fill")}
        for g in root.iter(f"{SVG}g")
        if (g.get("id") or "").startswith("node-")
    }
    assert set(fills) >= {f"node-{n}" for n in ("httptest.invoice", "paid", "review")}
    assert COLOURS["succeeded"] in fills["node-httptest.invoice"]
    assert COLOURS["waiting"] in fills["node-paid"]
    assert not fills["node-review"] & set(COLOURS.values())  # not reached yet
    assert run_id in picture.text  # the title names the run


def test_pictures_and_every_other_answer_carry_a_strict_content_policy(
    server: Server, api: httpx.Client
) -> None:
    run_id = _start(api, order_id=_order())
    policy = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    with server.client(None) as anonymous:
        answers = [
            api.get(f"/runs/{run_id}/graph.svg"),
            api.get(f"/runs/{run_id}"),
            api.get("/runs/nosuchrun/graph.svg"),
            anonymous.get("/runs"),  # refused before any route runs
            anonymous.get("/health"),
        ]
    assert answers[0].headers["content-type"].startswith("image/svg+xml")
    for answer in answers:
        assert answer.headers["x-content-type-options"] == "nosniff", answer.url
        assert answer.headers["content-security-policy"] == policy, answer.url


# --- errors --------------------------------------------------------------------------------------


def _nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def test_values_no_store_can_hold_are_refused_over_http_and_nothing_wedges(
    api: httpx.Client,
) -> None:
    """Deep nesting, NaN and lone surrogates in starts and signals get 4xx problem documents
    (never a 500), a refused start writes nothing and a refused signal leaves its wait."""
    before = len(api.get("/runs", params={"limit": 1000}).json()["runs"])
    starts = [
        '{"workflow": "http-order", "data": {"order_id": "\\ud800"}}',
        '{"workflow": "http-order", "data": {"order_id": "a\\u0000b"}}',
        '{"workflow": "http-order", "data": {"order_id": "o", "note": ' + _nested(900) + "}}",
        '{"workflow": "http-order", "data": {"order_id": "o", "paid": NaN}}',
    ]
    for body in starts:
        answer = api.post("/runs", content=body, headers={"content-type": "application/json"})
        assert 400 <= answer.status_code < 500, (body[:80], answer.status_code, answer.text[:300])
        assert answer.headers["content-type"].startswith(PROBLEM_JSON)
        assert len(answer.text) < 4_000  # a problem document, not a traceback
    assert len(api.get("/runs", params={"limit": 1000}).json()["runs"]) == before

    order = _order()
    run_id = _start(api, order_id=order)
    _waiting_on(api, run_id, "paid")
    signals = [
        '{"payload": {"amount": 5, "extra": ' + _nested(600) + "}}",
        '{"payload": {"amount": NaN}}',
        '{"payload": {"amount": 5, "memo": "\\udfff"}}',
        '{"payload": {"amount": 5}, "actor": "\\ud800"}',
    ]
    for body in signals:
        answer = api.post(
            f"/signals/paid/{order}", content=body, headers={"content-type": "application/json"}
        )
        assert 400 <= answer.status_code < 500, (body[:80], answer.status_code, answer.text[:300])
        assert answer.headers["content-type"].startswith(PROBLEM_JSON)
        assert len(answer.text) < 4_000
    assert _waiting_on(api, run_id, "paid")["key"] == order  # the wait is still there
    assert api.get(f"/runs/{run_id}").status_code == 200
    fits = api.post(f"/signals/paid/{order}", json={"payload": {"amount": 5}})
    assert fits.json()["delivered"] is True


def test_unknown_runs_are_404_state_conflicts_409_and_a_second_cancel_says_it_had_ended(
    api: httpx.Client,
) -> None:
    for answer in (
        api.get("/runs/nosuchrun"),
        api.get("/runs/nosuchrun/graph.svg"),
        api.post("/runs/nosuchrun/cancel", json={"actor": "op"}),
        api.post("/runs/nosuchrun/approvals/review", json={"approved": True, "actor": "op"}),
    ):
        assert "nosuchrun" in _problem(answer, 404)["detail"]

    run_id = _start(api, order_id=_order())
    _waiting_on(api, run_id, "paid")
    resumed = api.post(f"/runs/{run_id}/resume", json={"actor": "op"})
    assert "not suspended" in _problem(resumed, 409)["detail"]
    early = api.post(f"/runs/{run_id}/approvals/review", json={"approved": True, "actor": "op"})
    assert "no open approval" in _problem(early, 409)["detail"]
    restarted = api.post(f"/runs/{run_id}/restart", json={"actor": "op"})
    assert "cancel it first" in _problem(restarted, 409)["detail"]

    cancelled = api.post(f"/runs/{run_id}/cancel", json={"actor": "op", "reason": "test"})
    assert cancelled.json() == {
        "run_id": run_id,
        "status": "cancelled",
        "explain": "cancelled: test",
        "pending_cancelled": 1,
        "attempts_stopping": 0,
        "already_ended": False,
    }
    twice = api.post(f"/runs/{run_id}/cancel", json={"actor": "op"})
    assert twice.status_code == 200, twice.text
    assert twice.json()["already_ended"] is True
    assert twice.json()["status"] == "cancelled"
    assert twice.json()["pending_cancelled"] == 0
    assert run_id not in [w["run_id"] for w in api.get("/waiting").json()["waits"]]


def test_bad_requests_are_problem_documents(api: httpx.Client) -> None:
    missing = _problem(api.post("/runs", json={"data": {}}), 422)
    assert missing["errors"][0]["loc"] == ["body", "workflow"]
    assert "workflow" in missing["detail"]

    garbled = api.post("/runs", content=b"{not json", headers={"content-type": "application/json"})
    _problem(garbled, 422)
    _problem(api.get("/runs", params={"status": "sleeping"}), 422)
    _problem(api.post("/signals/paid/o-1", json={"payload": {}, "expires": "soon"}), 422)

    unknown = _problem(api.post("/runs", json={"workflow": "nope"}), 400)
    assert unknown["reasons"] == ["unknown workflow 'nope'"]
    refused = _problem(api.post("/runs", json={"workflow": "http-order", "data": {}}), 400)
    assert any("order_id" in reason for reason in refused["reasons"])

    _problem(api.get("/no/such/route"), 404)
    _problem(api.delete("/runs"), 405)


# --- the command line goes through the server ----------------------------------------------------


def _wfkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WFKIT), *args],
        capture_output=True,
        text=True,
        env=server_env(TOKEN),
        timeout=60,
        check=False,
    )


def test_the_cli_sends_signals_and_decisions_through_the_running_server(
    server: Server, api: httpx.Client
) -> None:
    order = _order()
    run_id = _start(api, order_id=order)
    _waiting_on(api, run_id, "paid")
    db = str(server.db)

    payload = '{"amount": 9}'
    sent = _wfkit("signal", "paid", order, "--payload", payload, "--db", db, "--actor", "cli")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == (
        f"signal 'paid' (key {order}) delivered: the waiting run resumed "
        f"(via the server at {server.url})"
    )
    _waiting_on(api, run_id, "review")
    run = api.get(f"/runs/{run_id}").json()
    received = [e for e in run["history"] if e["kind"] == "signal.received"]
    assert [(e["actor"], e["output"]) for e in received] == [("cli", {"amount": 9.0})]

    approved = _wfkit("approve", run_id, "review", "--reject", "--actor", "ana", "--db", db)
    assert approved.returncode == 0, approved.stderr
    assert f"run {run_id}: 'review' rejected by ana" in approved.stdout
    run = _run_when(api, run_id, lambda r: r["status"] in ("completed", "failed"))
    assert "approval.rejected" in [e["kind"] for e in run["history"]]

    other = _start(api, order_id=_order())
    cancelled = _wfkit("cancel", other, "--reason", "duplicate", "--actor", "op", "--db", db)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == (
        f"run {other}: cancelled by op (1 pending step(s) cancelled); the run is cancelled "
        f"(via the server at {server.url})"
    )
    again = _wfkit("cancel", other, "--actor", "op", "--db", db)
    assert again.stdout.strip() == (
        f"run {other} had already ended (cancelled); nothing to cancel "
        f"(via the server at {server.url})"
    )

    off = _wfkit("deactivate", "http-order", "1", "--db", db)
    assert off.returncode == 0, off.stderr
    assert off.stdout.strip() == (
        "workflow 'http-order' v1 takes no new runs (its runs in flight finish); active "
        f"versions: none (via the server at {server.url})"
    )
    try:
        assert api.get("/workflows/http-order").json() == {
            "workflow": "http-order",
            "versions": [{"version": 1, "active": False}],
        }
        refused = _problem(api.post("/runs", json={"workflow": "http-order", "data": {}}), 400)
        assert refused["reasons"] == ["every version of workflow 'http-order' is deactivated"]
        unknown = _wfkit("activate", "http-order", "9", "--db", db)
        assert unknown.returncode == 1
        assert "has no version 9" in unknown.stderr
        assert "nope" in _problem(api.post("/workflows/nope/1/deactivate"), 404)["detail"]
    finally:
        on = _wfkit("activate", "http-order", "1", "--db", db)
    assert on.returncode == 0, on.stderr
    assert "active versions: v1" in on.stdout
    assert api.get(f"/runs/{other}").json()["status"] == "cancelled"

    failed = _wfkit("recover", other, "--action", "skip", "--db", db)
    assert failed.returncode == 1
    assert failed.stderr.startswith("error: ") and len(failed.stderr.strip().splitlines()) == 1
    assert "no failed compensation" in failed.stderr


def test_a_failed_run_is_retried_over_http_and_by_the_cli(
    server: Server, api: httpx.Client
) -> None:
    run_id = _start(api, order_id=(order := _order()))
    _waiting_on(api, run_id, "paid")
    api.post(f"/signals/paid/{order}", json={"payload": {"amount": 5}})
    _waiting_on(api, run_id, "review")
    rejected = {"approved": False, "actor": "ana", "comment": "wrong address"}
    api.post(f"/runs/{run_id}/approvals/review", json=rejected)
    _run_when(api, run_id, lambda r: r["status"] == "failed")

    early = api.post(f"/runs/{run_id}/retry", json={})
    _problem(early, 422)  # the actor is required
    retried = api.post(f"/runs/{run_id}/retry", json={"actor": "op"})
    assert retried.status_code == 200, retried.text
    assert retried.json()["status"] in ("running", "waiting")
    _waiting_on(api, run_id, "review")  # the rejected approval is asked again
    run = api.get(f"/runs/{run_id}").json()
    (event,) = [e for e in run["history"] if e["kind"] == "run.retried"]
    assert (event["actor"], event["node_id"], event["detail"]["run_attempt"]) == ("op", "review", 2)
    assert [e["kind"] for e in run["history"]].count("signal.received") == 1  # not waited again
    again = api.post(f"/runs/{run_id}/retry", json={"actor": "op"})
    assert "is waiting, not failed" in _problem(again, 409)["detail"]
    assert (
        "nosuchrun"
        in _problem(api.post("/runs/nosuchrun/retry", json={"actor": "op"}), 404)["detail"]
    )

    api.post(f"/runs/{run_id}/approvals/review", json=rejected)
    _run_when(api, run_id, lambda r: r["status"] == "failed")
    db = str(server.db)
    by_cli = _wfkit("retry", run_id, "--actor", "cli", "--db", db)
    assert by_cli.returncode == 0, by_cli.stderr
    assert by_cli.stdout.startswith(f"run {run_id}: retried by cli; the run is ")
    _waiting_on(api, run_id, "review")
    refused = _wfkit("retry", run_id, "--db", db)
    assert refused.returncode == 1
    assert "not failed" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


# --- the OpenAPI document, fuzzed ---------------------------------------------------------------


def _fuzzing_config(api: httpx.Client) -> str:
    """A schemathesis.toml that makes fuzzed requests hit real runs, waits and workflows too."""
    waiting = _start(api, order_id=_order())
    _waiting_on(api, waiting, "paid")
    approving = _start(api, order_id=(order := _order()))
    # the run may not have reached its wait yet: keep the signal for it if so
    api.post(f"/signals/paid/{order}", json={"payload": {"amount": 1}, "post_if_absent": True})
    _waiting_on(api, approving, "review")
    stuck = _start(api, order_id=(order := _order()), fail_charge=True, break_release=True)
    # the run may not have reached its wait yet: keep the signal for it if so
    api.post(f"/signals/paid/{order}", json={"payload": {"amount": 1}, "post_if_absent": True})
    _waiting_on(api, stuck, "review")
    api.post(f"/runs/{stuck}/approvals/review", json={"approved": True, "actor": "ana"})
    _run_when(api, stuck, lambda r: r["status"] == "suspended")
    runs = json.dumps([waiting, approving, stuck])
    return f"""
[dictionaries.runs]
values = {runs}
[dictionaries.nodes]
values = ["review", "paid"]
[dictionaries.signals]
values = ["paid"]
[dictionaries.workflows]
values = ["http-order"]
[parameters]
"path.run_id" = {{ dictionary = "runs", probability = 0.5 }}
"path.node" = {{ dictionary = "nodes", probability = 0.5 }}
"path.name" = {{ dictionary = "signals", probability = 0.5 }}
"body.workflow" = {{ dictionary = "workflows", probability = 0.5 }}
"""


def test_schemathesis_finds_no_server_error_and_no_off_schema_answer(
    server: Server, api: httpx.Client, tmp_path: Path
) -> None:
    (tmp_path / "schemathesis.toml").write_text(_fuzzing_config(api))
    command = [
        str(BIN / "schemathesis"),
        "run",
        f"{server.url}/api/v1/openapi.json",
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--checks",
        "not_a_server_error,response_schema_conformance,status_code_conformance",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        "25",
        "--seed",
        "1",
        # one worker: with several, hypothesis parses lambdas' source on many threads at once
        # and CPython 3.11's ast.parse fails ("AST constructor recursion depth mismatch")
        "--workers",
        "1",
        "--request-timeout",
        "20",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    began = time.monotonic()
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
        cwd=tmp_path,  # where it finds schemathesis.toml
        env={**server_env(TOKEN), "SCHEMATHESIS_TELEMETRY": "false"},
    )
    took = time.monotonic() - began
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-4000:]
    assert re.search(r"\b(\d+) generated, \1 passed", result.stdout), result.stdout[-3000:]
    assert took < 90, f"schemathesis took {took:.0f}s"
    assert "Traceback" not in server.log.read_text()
