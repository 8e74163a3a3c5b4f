"""Dashboard: a run table filtered by status, workflow and "since"; picking a run opens its
monitor; the inbox and recovery tabs read the engine again when opened."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

import wfkit as wf
from wfkit.widgets import Dashboard, Inbox, Recovery, RunMonitor


def listed(board: Dashboard) -> list[str]:
    """Run ids of the table's rows, top to bottom."""
    return re.findall(r'<tr class="wfkit-run-row[^"]*" data-run="([^"]+)"', board.table.value)


@pytest.fixture
def runs(engine: wf.Engine, acts: Any, clock: wf.ManualClock) -> dict[str, wf.Run]:
    """Runs of two workflows, a day apart: completed, waiting, failed (Jan 1), completed (Jan 2)."""
    acts.noop("a", "b")
    acts.add("boom")
    acts.broken["boom"] = True
    engine.register(wf.Workflow("easy").start_with("a"))
    engine.register(wf.Workflow("hard").start_with("b").approval("ok").then("boom", max_attempts=1))
    done = engine.start("easy", {})
    waiting = engine.start("hard", {})
    failing = engine.start("hard", {})
    engine.run_until_idle()
    engine.approve(failing.id, "ok", actor="ana")
    engine.run_until_idle()
    clock.advance("1d")
    later = engine.start("easy", {"n": 2})
    engine.run_until_idle()
    return {"done": done, "waiting": waiting, "failed": failing, "later": later}


@pytest.fixture
def board(engine: wf.Engine, runs: dict[str, wf.Run]) -> Iterator[Dashboard]:
    board = Dashboard(engine, actor="ana", interval=0.05)
    yield board
    board.close()


def test_the_table_lists_every_run_newest_first(board, runs) -> None:
    assert set(listed(board)) == {r.id for r in runs.values()}
    assert listed(board)[0] == runs["later"].id
    assert board.message.text == "4 runs"
    assert board.titles == ("Runs", "Monitor", "Inbox (1)", "Recovery (1)")
    assert [o for _label, o in board.workflow.options] == ["", "easy", "hard"]
    assert isinstance(board.children[2], Inbox) and isinstance(board.children[3], Recovery)


def test_the_status_workflow_and_since_filters_narrow_the_table(board, runs) -> None:
    board.status.value = "completed"
    assert set(listed(board)) == {runs["done"].id, runs["later"].id}

    board.workflow.value = "hard"
    assert listed(board) == []
    assert board.message.text == "no run matches the filters"

    board.status.value = ""
    assert set(listed(board)) == {runs["waiting"].id, runs["failed"].id}

    board.workflow.value = ""
    board.since.value = "2026-01-02"
    assert listed(board) == [runs["later"].id]
    board.since.value = "2h"  # back from the engine's clock (Jan 2, 00:00)
    assert listed(board) == [runs["later"].id]
    board.since.value = "30h"
    assert len(listed(board)) == 4


def test_a_since_that_is_no_date_says_so_and_keeps_the_table(board, runs) -> None:
    board.status.value = "failed"
    board.since.value = "last tuesday"

    assert board.message.kind == "error"
    assert "'last tuesday'" in board.message.text
    assert listed(board) == [runs["failed"].id]


def test_picking_a_run_opens_its_monitor(board, runs) -> None:
    board.select.value = runs["failed"].id

    assert board.selected_index == 1
    monitor = board.monitor
    assert isinstance(monitor, RunMonitor)
    assert board.monitor_tab.children == (monitor,)
    assert monitor.run.id == runs["failed"].id
    assert monitor.surface.status == {"b": "succeeded", "ok": "succeeded", "boom": "failed"}

    board.select.value = runs["done"].id

    assert board.monitor is not monitor
    assert not monitor.running  # the old monitor's thread stopped
    assert board.monitor is not None and board.monitor.surface.status == {"a": "succeeded"}


def test_the_picked_run_stays_picked_while_it_is_listed(board, runs) -> None:
    board.select.value = runs["done"].id
    board.status.value = "completed"
    assert board.select.value == runs["done"].id
    board.status.value = "failed"
    assert board.select.value is None
    assert [value for _label, value in board.select.options] == [runs["failed"].id]


def test_opening_the_inbox_and_recovery_tabs_reads_the_engine_again(engine, board, runs) -> None:
    assert board.inbox.summary.value == "1 open: 1 approval, 0 signal waits"
    fresh = engine.start("hard", {})
    engine.run_until_idle()

    board.selected_index = 2
    assert board.inbox.row(fresh.id, "ok").wait.kind == "approval"

    board.inbox.row(fresh.id, "ok").buttons["approve"].click()
    board.inbox.row(fresh.id, "ok").confirm.yes_button.click()
    engine.run_until_idle()
    board.selected_index = 3
    assert set(board.recovery.rows) == {runs["failed"].id, fresh.id}
    assert [e.actor for e in fresh.history() if e.kind == "approval.approved"] == ["ana"]


def test_closing_the_dashboard_stops_the_monitor(engine, runs) -> None:
    board = Dashboard(engine, actor="ana", interval=0.05)
    board.select.value = runs["waiting"].id
    monitor = board.monitor
    assert monitor is not None and monitor.running

    board.close()

    assert not monitor.running
    assert board.monitor is None
