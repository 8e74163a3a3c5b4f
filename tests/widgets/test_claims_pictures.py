"""README.md, "Watching a run": displaying a widget saves a static picture of its graph next to
it, with the run's statuses, for a notebook reopened without its kernel. Checked with a
RunMonitor and a Dashboard on a real run: the saved picture is the one the kernel would write."""

from __future__ import annotations

import re
from typing import Any

import wfkit as wf
from wfkit.widgets import Dashboard, RunMonitor


def node_classes(html: str) -> dict[str, str]:
    """node id -> status class of every node drawn in a static picture."""
    found = re.findall(
        r'<g class="node ([a-z]+)"[^>]*>\s*<title>[^<]*</title>\s*<g><a xlink:title="([^" ]+) ',
        html,
    )
    return {node: status for status, node in found}


def test_a_monitors_static_picture_shows_the_runs_statuses_and_follows_them(engine, acts) -> None:
    acts.noop("reserve", "charge", "ship", "notify")
    acts.broken["charge"] = True
    engine.register(
        wf.Workflow("order")
        .start_with("reserve")
        .then("charge", max_attempts=1)
        .on_failed(lambda b: b.then("notify").end())
        .then("ship")
    )
    run = engine.start("order", {})
    monitor = RunMonitor(engine, run, autostart=False)
    updates: list[str] = []

    class Handle:  # what IPython's display(..., display_id=True) hands back
        def update(self, bundle: dict[str, str], raw: bool) -> None:
            updates.append(bundle["text/html"])

    try:
        view, picture = monitor.display_bundles()
        assert "application/vnd.jupyter.widget-view+json" in view
        assert node_classes(picture["text/html"]) == {"reserve": "running"}
        monitor.surface._keep_displayed(Handle())

        engine.run_until_idle()
        monitor.refresh()

        assert run.status == wf.RunStatus.COMPLETED
        want = {
            "reserve": "succeeded",
            "charge": "failed",
            "notify": "succeeded",
            "ship": "skipped",
        }
        assert node_classes(monitor.display_bundles()[1]["text/html"]) == want
        assert updates and node_classes(updates[-1]) == want  # the saved copy followed
    finally:
        monitor.close()


def test_a_dashboards_static_picture_is_its_monitors(engine, acts) -> None:
    acts.noop("reserve")
    engine.register(wf.Workflow("order").start_with("reserve"))
    run = engine.start("order", {})
    engine.run_until_idle()
    board = Dashboard(engine, actor="ana", refresh_every=None)
    try:
        board.show_run(run.id)
        bundles: list[dict[str, Any]] = board.display_bundles()
        assert len(bundles) == 2
        assert node_classes(bundles[1]["text/html"]) == {"reserve": "succeeded"}
    finally:
        board.close()
