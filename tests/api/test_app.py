"""The app served by uvicorn in this process, for what a ``wfkit serve`` process cannot be made
to do from outside: its store stops answering. The store is real (a DuckDB file), closed under
the running server."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

import wfkit as wf
from tests.api import http_flows
from wfkit.api import create_app

TOKEN = "app-test-token-0123456789"


@contextmanager
def serving(app: FastAPI) -> Iterator[httpx.Client]:
    """uvicorn serving ``app`` on a free port from a thread; a client of its ``/api/v1``."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/api/v1"
        with httpx.Client(base_url=url, trust_env=False) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_health_is_503_with_a_problem_when_the_store_does_not_answer(tmp_path: Path) -> None:
    engine = wf.Engine(tmp_path / "runs.duckdb")
    try:
        engine.register(http_flows.flow)
        app = create_app(engine, TOKEN)
        with serving(app) as client:
            up = client.get("/health")
            assert up.status_code == 200, up.text
            assert up.json()["workflows"] == {"http-order": [1]}

            # the connection is gone, as with a database that went away
            engine.runtime.store.close()
            down = client.get("/health")
            assert down.status_code == 503, down.text
            assert down.headers["content-type"].startswith("application/problem+json")
            problem = down.json()
            assert problem["type"] == "urn:wfkit:problem:store-unavailable"
            assert "store is unavailable" in problem["detail"]
            assert str(tmp_path) not in problem["detail"]  # anyone may ask: no paths told
            runs = client.get("/runs", headers={"Authorization": f"Bearer {TOKEN}"})
            assert runs.status_code == 503, runs.text
    finally:
        engine.close()


MAKE_ONE = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


@pytest.mark.parametrize(
    ("token", "said"),
    [
        ("", "the API token given is empty"),
        ("a", "is 1 character long; it needs at least 16"),
        ("fifteen-chars15", "is 15 characters long; it needs at least 16"),
        ("x" * 64, "is one character repeated: anyone can guess it"),
        ("ab" * 20, "has only 2 different characters; it needs at least 8"),
        ("passwordpassword", "has only 7 different characters; it needs at least 8"),
        ("kK3p-9xQe Vt2LmZ0sWa", "contains whitespace (character 10 of 20)"),
        ("kK3p-9xQe_Vt2LmZ0sWa\n", "contains whitespace (character 21 of 21)"),
        ("kK3p-9xQe\tVt2LmZ0sWa", "contains whitespace (character 10 of 20)"),
        ("kK3p-9xQe\x00Vt2LmZ0sWa", "contains a control character (character 10 of 20)"),
        ("kK3p-9xQe\x1bVt2LmZ0sWa", "contains a control character (character 10 of 20)"),
        ("kK3p-9xQe\u200bVt2LmZ0sWa", "contains a control character (character 10 of 20)"),
        ("kK3p-9xQe_Vt2LmZ0sWä", "contains a character that is not ASCII (character 20 of 20)"),
    ],
)
def test_a_weak_or_malformed_token_is_refused_saying_how_to_make_a_good_one(
    token: str, said: str
) -> None:
    with wf.Engine(":memory:") as engine, pytest.raises(wf.UsageError) as refused:
        create_app(engine, token)
    message = str(refused.value)
    assert said in message
    assert MAKE_ONE in message
    if len(token) > 1:
        assert token not in message  # a refused token may still be someone's secret


def test_the_tokens_wfkit_makes_and_the_tests_use_are_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from wfkit.api.auth import TOKEN_ENV, check_token, new_token, resolve_token

    monkeypatch.delenv(TOKEN_ENV, raising=False)

    for _ in range(2000):
        check_token(new_token())
    made, generated = resolve_token()
    assert generated and len(made) == 43
    for used in (TOKEN, "test-token-" + "0" * 32, "claims-test-token-0123456789"):
        check_token(used)


def test_health_names_the_server_by_an_id_it_chose_or_was_given() -> None:
    with wf.Engine(":memory:") as engine:
        with serving(create_app(engine, TOKEN, server_id="given-id")) as client:
            assert client.get("/health").json()["server_id"] == "given-id"
        ids = set()
        for _ in range(2):
            with serving(create_app(engine, TOKEN)) as client:
                ids.add(client.get("/health").json()["server_id"])
    assert len(ids) == 2 and all(re.fullmatch("[0-9a-f]{32}", i) for i in ids)


def test_swagger_ui_when_asked_for_is_served_without_the_content_policy() -> None:
    with wf.Engine(":memory:") as engine, serving(create_app(engine, TOKEN, docs=True)) as client:
        page = client.get("/docs")
        assert page.status_code == 200 and "swagger-ui" in page.text
        assert page.headers["x-content-type-options"] == "nosniff"
        assert "content-security-policy" not in page.headers  # its scripts come from a CDN
        assert "default-src 'none'" in client.get("/health").headers["content-security-policy"]


def batch(registry: wf.ActivityRegistry, published: list[str]) -> wf.Workflow:
    """for_each item: approval 'review' -> publish (which notes its item)."""
    registry.register("prepare", lambda ctx: None)
    registry.register("publish", lambda ctx: published.append(ctx.item))
    return (
        wf.Workflow("batch")
        .start_with("prepare")
        .for_each("items", lambda b: b.approval("review").then("publish"))
    )


def test_the_approvals_of_a_for_each_are_listed_and_decided_per_item(tmp_path: Path) -> None:
    from wfkit.api.client import ApiClient

    published: list[str] = []
    registry = wf.ActivityRegistry()
    with wf.Engine(tmp_path / "runs.duckdb", registry=registry) as engine:
        engine.register(batch(registry, published))
        run = engine.start("batch", {"items": ["a", "b", "c"]})
        engine.run_until_idle()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with serving(create_app(engine, TOKEN)) as client:
            waits = client.get("/waiting", headers=auth).json()["waits"]
            assert sorted(w["loop_path"] for w in waits) == [[0], [1], [2]]

            review = f"/runs/{run.id}/approvals/review"
            decided = client.post(
                review, headers=auth, json={"approved": True, "actor": "ana", "loop_path": [1]}
            )
            assert decided.status_code == 200, decided.text
            engine.run_until_idle()
            assert published == ["b"]

            again = client.post(
                review, headers=auth, json={"approved": True, "actor": "ana", "loop_path": [1]}
            )
            assert again.status_code == 409, again.text
            assert "open for items: [0], [2]" in again.json()["detail"]
            negative = client.post(
                review, headers=auth, json={"approved": True, "actor": "ana", "loop_path": [-1]}
            )
            assert negative.status_code == 422, negative.text

            remote = ApiClient(str(client.base_url).rstrip("/").removesuffix("/api/v1"), TOKEN)
            remote.approve(run.id, "review", actor="bo", loop_path=[2])
            engine.run_until_idle()
            assert published == ["b", "c"]
            assert [w.loop_path for w in engine.waiting()] == [(0,)]


def test_a_loop_path_is_whole_numbers_never_true_or_text(tmp_path: Path) -> None:
    """JSON true and "0" were read as 1 and 0: they decided another item's approval."""
    published: list[str] = []
    registry = wf.ActivityRegistry()
    with wf.Engine(tmp_path / "runs.duckdb", registry=registry) as engine:
        engine.register(batch(registry, published))
        run = engine.start("batch", {"items": ["a", "b", "c"]})
        engine.run_until_idle()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        review = f"/runs/{run.id}/approvals/review"
        with serving(create_app(engine, TOKEN)) as client:
            for bad in ([True], [False], ["0"], ["1"], [1.0], [0.5], [None], [[0]], True, "0", 0):
                body = {"approved": True, "actor": "ana", "loop_path": bad}
                refused = client.post(review, headers=auth, json=body)
                assert refused.status_code == 422, (bad, refused.text)
                assert refused.json()["errors"][0]["loc"][:2] == ["body", "loop_path"]
            engine.run_until_idle()
            assert published == []
            assert sorted(w.loop_path for w in engine.waiting()) == [(0,), (1,), (2,)]
            assert [e.kind for e in run.history() if e.kind.startswith("approval.")] == [
                "approval.waiting"
            ] * 3  # none decided

            decided = client.post(
                review, headers=auth, json={"approved": True, "actor": "ana", "loop_path": [0]}
            )
            assert decided.status_code == 200, decided.text
            engine.run_until_idle()
            assert published == ["a"]


def _deep_text(levels: int) -> str:
    """JSON text nesting ``levels`` levels, lists and objects in turn."""
    opened = "".join("[" if i % 2 else '{"a":' for i in range(levels))
    return opened + "1" + "".join("]" if i % 2 else "}" for i in reversed(range(levels)))


@pytest.mark.parametrize("levels", [65, 1_000, 100_000])
def test_bodies_nested_too_deep_are_refused_saying_so_and_nothing_changes(
    tmp_path: Path, levels: int
) -> None:
    registry = wf.ActivityRegistry()
    registry.register("after", lambda ctx: None)
    flow = wf.Workflow("gate").start_with().wait_for_signal("go", correlate="key", id="go")
    with wf.Engine(tmp_path / "runs.duckdb", registry=registry) as engine:
        engine.register(flow.then("after"))
        run = engine.start("gate", {"key": "k"})
        engine.run_until_idle()
        auth = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
        value = _deep_text(levels - 1)  # inside the document, or the payload: levels deep
        bodies = {
            "/runs": '{"workflow": "gate", "data": {"v": ' + value + "}}",
            "/signals/go/k": '{"payload": {"v": ' + value + "}}",
            "/signals/go/k2": '{"post_if_absent": true, "payload": {"v": ' + value + "}}",
        }
        # large enough for 100,000 levels: the parser, not the size limit, meets them
        with serving(create_app(engine, TOKEN, max_body=2_000_000)) as client:
            for path, body in bodies.items():
                refused = client.post(path, headers=auth, content=body)
                assert refused.status_code in (400, 422), (path, refused.text[:300])
                problem = refused.json()
                assert "nested deeper than 64 levels" in problem["detail"], (path, problem)
                assert "Recursion" not in refused.text, path
                if levels > 1_000:
                    assert problem["type"] == "urn:wfkit:problem:too-deep", path
        assert [r.run_id for r in engine.runs()] == [run.id]
        assert [w.node_id for w in engine.waiting()] == ["go"]
        assert engine.sql("SELECT count(*) FROM wf_signals").fetchall() == [(0,)]
