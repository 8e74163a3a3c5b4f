"""The workers bar: "ready: no worker is running in this kernel" while a run has work ready and
nothing drives the engine, and a Start workers button that starts them."""

from __future__ import annotations

from typing import Any

import pytest

import wfkit as wf
from wfkit.widgets.workers import NO_WORKER, WorkerStatus, stalled


@pytest.fixture
def expense(engine: wf.Engine, acts: Any) -> wf.Run:
    """A run parked on approval 'ok', then 'expense.pay'."""
    acts.noop("expense.submit", "expense.pay")
    engine.register(
        wf.Workflow("expense").start_with("expense.submit").approval("ok").then("expense.pay")
    )
    run = engine.start("expense", {})
    engine.run_until_idle()
    return run


def test_the_bar_shows_only_while_a_run_has_work_and_no_worker(engine, acts, expense) -> None:
    bar = WorkerStatus(engine, expense.id, threads=1)
    assert bar.refresh() is False and bar.layout.display == "none"

    engine.approve(expense.id, "ok", actor="ana")

    assert bar.refresh() is True
    assert bar.layout.display == "flex" and "wfkit-stalled" in bar._dom_classes
    assert NO_WORKER in bar.text.value and expense.id in bar.text.value
    assert stalled(engine) and stalled(engine, expense.id)
    assert acts.calls == ["expense.submit"]

    bar.start_button.click()

    assert engine.workers_running
    assert expense.result(timeout=30) == {}
    assert acts.calls == ["expense.submit", "expense.pay"]
    assert bar.refresh() is False and "wfkit-stalled" not in bar._dom_classes


def test_a_start_that_the_engine_refuses_is_shown(engine, expense) -> None:
    bar = WorkerStatus(engine)
    engine.start_workers(threads=1)

    assert bar.start_workers() is False

    assert bar.message.kind == "error"
    assert "workers not started: workers are already running" in bar.message.text


def test_a_purged_or_unknown_run_is_not_stalled(engine) -> None:
    bar = WorkerStatus(engine, "no-such-run")
    assert bar.refresh() is False
    assert stalled(engine, "no-such-run") is False


def test_the_dashboard_asks_once_per_update_for_its_three_bars(
    engine, expense, monkeypatch
) -> None:
    from wfkit.widgets import Dashboard
    from wfkit.widgets import workers as workers_module

    board = Dashboard(engine, actor="ana", refresh_every=None)
    try:
        bars = (board.workers, board.inbox.workers, board.recovery.workers)
        assert [bar.layout.display for bar in bars] == ["none"] * 3
        engine.approve(expense.id, "ok", actor="ana")  # work ready, nothing drives the engine
        asked: list[str | None] = []
        real = workers_module.stalled

        def counted(engine: wf.Engine, run_id: str | None = None) -> bool:
            asked.append(run_id)
            return real(engine, run_id)

        monkeypatch.setattr(workers_module, "stalled", counted)

        board._tick()

        assert [bar.layout.display for bar in bars] == ["flex"] * 3
        assert asked.count(None) == 1  # one engine-wide answer for the three bars
        assert NO_WORKER in board.table.value  # the run's own row says so too
    finally:
        board.close()
