"""``wfkit worker --queue`` and ``wfkit serve --queue``: the flag parses, repeats, is checked."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner, Result

import wfkit.api.server
import wfkit.worker
from wfkit.cli import app

WIDE = {"COLUMNS": "400", "NO_COLOR": "1"}
PG = "postgresql://postgres@127.0.0.1:5432/none"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env=WIDE, prog_name="wfkit")


@pytest.fixture
def worker_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Record what ``wfkit worker`` hands to :func:`wfkit.worker.run_worker` (not run)."""
    calls: list[dict[str, Any]] = []

    def record(db: str, modules: Any, threads: int, lease: str, **kw: Any) -> str:
        calls.append({"db": db, "modules": list(modules), "threads": threads, **kw})
        return "owner"

    monkeypatch.setattr(wfkit.worker, "run_worker", record)
    return calls


def test_worker_queue_repeats(worker_calls: list[dict[str, Any]]) -> None:
    result = invoke("worker", "--db", PG, "--module", "m", "--queue", "gpu", "--queue", "cpu")
    assert result.exit_code == 0, result.output
    assert worker_calls[0]["queues"] == ["gpu", "cpu"]
    assert worker_calls[0]["modules"] == ["m"]


def test_worker_serves_every_queue_without_the_flag(worker_calls: list[dict[str, Any]]) -> None:
    result = invoke("worker", "--db", PG, "--module", "m")
    assert result.exit_code == 0, result.output
    assert not worker_calls[0]["queues"]  # None or []: run_worker serves every queue


def test_serve_queue_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(wfkit.api.server, "serve", lambda *a, **kw: calls.append(kw))
    result = invoke("serve", "--db", "x.duckdb", "--queue", "gpu", "--queue", "default")
    assert result.exit_code == 0, result.output
    assert calls[0]["queues"] == ["gpu", "default"]


@pytest.mark.parametrize("queue", ["", " gpu"])
def test_a_bad_worker_queue_is_refused_before_anything_starts(queue: str) -> None:
    result = invoke("worker", "--db", PG, "--module", "no.such.module", "--queue", queue)
    assert result.exit_code == 1, result.output
    assert "the queue of a worker pool must be a non-empty name" in result.stderr
    assert "no.such.module" not in result.stderr  # refused before importing anything


def test_worker_and_serve_help_name_the_flag() -> None:
    for command in ("worker", "serve"):
        result = invoke(command, "--help")
        assert result.exit_code == 0
        assert "--queue" in result.stdout
        assert "activity queue" in result.stdout
