"""Dashboard: a run table filtered by status, workflow and "since"; picking a run opens its
monitor; the inbox and recovery tabs read the engine again when opened."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import wfkit as wf
from tests.polling import wait_until
from wfkit.widgets import Dashboard, Inbox, Recovery, RunMonitor
from wfkit.widgets.dashboard import runs_html
from wfkit.widgets.workers import NO_WORKER


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


# --- live counts, the no-worker mark, the side panel ----------------------------------------


def test_the_tab_titles_count_open_waits_and_runs_to_recover_live(engine, runs) -> None:
    board = Dashboard(engine, actor="ana", refresh_every=0.05)
    assert board.titles == ("Runs", "Monitor", "Inbox (1)", "Recovery (1)")
    engine.start_workers(threads=1)

    fresh = engine.start("hard", {})  # parks on its approval

    wait_until(lambda: board.titles[2] == "Inbox (2)", "the inbox count to reach 2")
    assert fresh.id in listed(board)  # the table followed too, without Refresh

    engine.approve(fresh.id, "ok", actor="api")  # 'boom' fails: one more run to recover

    wait_until(lambda: board.titles[3] == "Recovery (2)", "the recovery count to reach 2")
    assert board.titles[2] == "Inbox (1)"
    assert fresh.id in board.recovery.rows
    board.close()
    assert board.live is not None and not board.live.running
    assert [t for t in threading.enumerate() if t.name.startswith("wfkit-dash")] == []


def test_select_tab_takes_the_name_without_its_count(board) -> None:
    board.select_tab("Recovery")
    assert board.selected_index == 3
    with pytest.raises(ValueError, match="there is no tab 'Inbox \\(1\\)'"):
        board.select_tab("Inbox (1)")


def test_a_run_with_work_ready_and_no_worker_is_marked_and_start_workers_drives_it(
    engine, runs
) -> None:
    board = Dashboard(engine, actor="ana", refresh_every=0.05)
    assert board.workers.layout.display == "none"
    assert board.stalled == set()
    row = board.inbox.row(runs["waiting"].id, "ok")
    row.buttons["approve"].click()
    row.confirm.yes_button.click()  # no worker: 'boom' is ready and nobody runs it

    wait_until(lambda: runs["waiting"].id in board.stalled, "the run marked as stalled")
    assert re.search(
        rf'<tr class="wfkit-run-row wfkit-status-running wfkit-stalled" '
        rf'data-run="{runs["waiting"].id}">.*?{NO_WORKER}',
        board.table.value,
    )
    assert board.workers.layout.display == "flex"

    board.workers.start_button.click()

    assert engine.workers_running
    wait_until(lambda: board.stalled == set(), "the mark gone once workers run")
    wait_until(lambda: board.titles[3] == "Recovery (2)", "the failed run listed to recover")
    assert runs["waiting"].status == wf.RunStatus.FAILED  # 'boom' ran, and failed
    assert board.workers.layout.display == "none"
    board.close()


def test_the_error_column_shows_the_whole_last_line(engine, acts) -> None:
    reason = "the payment provider refused the card " + "because " * 20 + "of its limit"
    acts.add("charge", lambda ctx: (_ for _ in ()).throw(RuntimeError(reason)))
    engine.register(wf.Workflow("pay").start_with("charge", max_attempts=1))
    engine.start("pay", {})
    engine.run_until_idle()

    html_table = runs_html(engine.runs())

    assert f"RuntimeError: {reason}</td>" in html_table  # not cut mid-word at 100 characters
    assert "overflow-x:auto" in html_table


def test_show_in_sidebar_opens_a_sidecar_with_the_dashboard(board) -> None:
    from sidecar import Sidecar

    panel = board.show_in_sidebar(title="ops")

    assert isinstance(panel, Sidecar) and panel.title == "ops" and panel.anchor == "split-right"
    assert board.sidecar is panel
    board.close()
    assert board.sidecar is None


def test_show_in_sidebar_without_sidecar_says_how_to_install_it(board, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "sidecar", None)  # import sidecar raises ImportError

    with pytest.raises(wf.UsageError, match=r"pip install 'wfkit\[notebook\]'"):
        board.show_in_sidebar()
    assert board.sidecar is None


def test_a_bad_update_interval_is_refused(engine) -> None:
    with pytest.raises(wf.UsageError, match="dashboard update interval must be a positive"):
        Dashboard(engine, actor="ana", refresh_every=-1)
    with pytest.raises(wf.UsageError, match="recovery update interval must be a positive"):
        Recovery(engine, actor="ana", refresh_every=0)
