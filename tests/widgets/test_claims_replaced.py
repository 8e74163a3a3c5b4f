"""README.md, notebooks: a widget still holding an engine that a newer ``wf.Engine`` on the same
DuckDB file replaced says to use the newer one, and acts on nothing (docs/semantics.md §23.3:
writes raise ``UsageError``, reads ``StoreError``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import wfkit as wf
from wfkit.widgets import Inbox


def test_an_inbox_on_a_replaced_engine_says_so_and_approves_nothing(tmp_path: Path, acts) -> None:
    acts.noop("prep", "after")
    db = tmp_path / "runs.duckdb"
    older = wf.Engine(db, registry=acts.registry)
    older.register(wf.Workflow("rv").start_with("prep").approval("review").then("after"))
    run = older.start("rv", {})
    older.run_until_idle()
    inbox = Inbox(older, actor="ana", refresh_every=None)
    row = inbox.row(run.id, "review")

    newer = wf.Engine(db, registry=acts.registry)  # the cell that opens the engine ran again
    try:
        row.buttons["approve"].click()
        row.confirm.yes_button.click()

        assert "replaced this engine" in row.error.text
        assert "use the newer engine" in row.error.text
        assert "was not approved" in inbox.message.text
        with pytest.raises(wf.StoreError, match=r"replaced this engine.*use the newer engine"):
            inbox.refresh()
        assert newer.run(run.id).status == wf.RunStatus.WAITING
        assert "approval.approved" not in [e.kind for e in newer.run(run.id).history()]
        assert acts.calls == ["prep"]
    finally:
        newer.close()
