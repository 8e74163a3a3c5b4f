"""``POST /api/v1/runs`` asks the engine's admission policies and refuses deactivated versions
with the usual problem document; ``POST /runs/{id}/cancel`` says what it did. The app is served
by uvicorn in this process, since a policy is a function added to the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import wfkit as wf
from tests.api import http_flows
from tests.api.test_app import TOKEN, serving
from wfkit.api import create_app

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def no_big_orders(workflow: wf.Workflow, data: Any, actor: str | None) -> list[str]:
    return (
        ["order ids starting with 'big-' need a manager"]
        if str(data.get("order_id", "")).startswith("big-")
        else []
    )


def only_named(workflow: wf.Workflow, data: Any, actor: str | None) -> list[str]:
    return [] if actor else ["say who starts the run (actor)"]


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    engine = wf.Engine(tmp_path / "runs.duckdb")
    engine.register(http_flows.flow)
    engine.add_admission_policy(no_big_orders)
    engine.add_admission_policy(only_named)
    yield engine
    engine.close()


def runs(engine: wf.Engine) -> int:
    return int(engine.sql("SELECT count(*) FROM wf_instances").fetchall()[0][0])


def test_a_refused_start_is_a_problem_with_the_model_and_policy_reasons(engine) -> None:
    with serving(create_app(engine, TOKEN)) as client:
        refused = client.post(
            "/runs", json={"workflow": "http-order", "data": {"paid": "lots"}}, headers=AUTH
        )
        policy_only = client.post(
            "/runs",
            json={"workflow": "http-order", "data": {"order_id": "big-1"}, "actor": "ana"},
            headers=AUTH,
        )
        admitted = client.post(
            "/runs",
            json={"workflow": "http-order", "data": {"order_id": "o-1"}, "actor": "ana"},
            headers=AUTH,
        )

    assert refused.status_code == 400, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    problem = refused.json()
    assert problem["type"] == "urn:wfkit:problem:run-refused"
    model, policy = problem["reasons"][:-1], problem["reasons"][-1]
    assert any("order_id" in r for r in model) and any("paid" in r for r in model)
    assert policy == "say who starts the run (actor)"
    assert "nothing was written" in problem["detail"]
    assert policy_only.status_code == 400, policy_only.text
    assert policy_only.json()["reasons"] == ["order ids starting with 'big-' need a manager"]
    assert admitted.status_code == 201, admitted.text
    assert runs(engine) == 1


def test_a_deactivated_version_is_refused_over_http(engine) -> None:
    engine.deactivate("http-order", 1)
    with serving(create_app(engine, TOKEN)) as client:
        refused = client.post(
            "/runs",
            json={"workflow": "http-order", "data": {"order_id": "o-1"}, "actor": "ana"},
            headers=AUTH,
        )
        engine.activate("http-order", 1)
        admitted = client.post(
            "/runs",
            json={"workflow": "http-order", "data": {"order_id": "o-1"}, "actor": "ana"},
            headers=AUTH,
        )

    assert refused.status_code == 400, refused.text
    problem = refused.json()
    assert problem["reasons"] == ["every version of workflow 'http-order' is deactivated"]
    assert "engine.activate('http-order', 1)" in problem["detail"]
    assert admitted.status_code == 201, admitted.text
    assert runs(engine) == 1


def test_cancel_answers_what_it_did_and_an_ended_run_is_left_alone(engine) -> None:
    run = engine.start("http-order", {"order_id": "o-1"}, actor="ana")
    engine.run_until_idle()
    with serving(create_app(engine, TOKEN)) as client:
        first = client.post(f"/runs/{run.id}/cancel", json={"actor": "op"}, headers=AUTH)
        second = client.post(f"/runs/{run.id}/cancel", json={"actor": "op"}, headers=AUTH)
        unknown = client.post("/runs/nosuchrun/cancel", json={"actor": "op"}, headers=AUTH)

    assert first.status_code == 200, first.text
    assert first.json() == {
        "run_id": run.id,
        "status": "cancelled",
        "explain": "cancelled",
        "pending_cancelled": 1,
        "attempts_stopping": 0,
        "already_ended": False,
    }
    assert second.status_code == 200, second.text
    assert second.json()["already_ended"] is True
    assert (second.json()["pending_cancelled"], second.json()["status"]) == (0, "cancelled")
    assert [e.kind for e in run.history()].count("run.cancelled") == 1
    assert unknown.status_code == 404, unknown.text


def test_the_run_picture_draws_the_nodes_an_ended_run_never_reached_grey(engine) -> None:
    from xml.etree import ElementTree

    from wfkit.api.routes import NODE_COLOURS

    engine.register(
        wf.Workflow("branch").start_with().if_("x > 1", then=lambda b: b.end(), id="big")
    )
    run = engine.start("branch", {"x": 0}, actor="ana")
    engine.run_until_idle()
    with serving(create_app(engine, TOKEN)) as client:
        picture = client.get(f"/runs/{run.id}/graph.svg", headers=AUTH)
        detail = client.get(f"/runs/{run.id}", headers=AUTH).json()

    assert picture.status_code == 200, picture.text
    svg = "{http://www.w3.org/2000/svg}"
    fills = {
        g.get("id"): {shape.get("fill") for shape in g.iter() if shape.get("fill")}
        for g in ElementTree.fromstring(picture.content).iter(f"{svg}g")
        if (g.get("id") or "").startswith("node-")
    }
    (end,) = [n for n, s in detail["nodes"].items() if s == "skipped"]
    assert NODE_COLOURS["skipped"] in fills[f"node-{end}"]
    assert detail["nodes"]["big"] == "succeeded"
