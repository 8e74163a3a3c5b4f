"""The run monitor in a real browser: a click on a node opens its attempts with the whole
traceback, and the history stepper's buttons take the page (and the kernel) back to an earlier
checkpoint, whose data document the data column shows.

Kernel-side facts are read from the JSON file the notebook writes (see conftest.py).
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MONITOR = """
import wfkit as wf
from pathlib import Path
from wfkit.widgets import RunMonitor

registry = wf.ActivityRegistry()


def charge(ctx):
    ctx.logger.info("charging %s", ctx.data["card"])
    ctx.data["charged"] = 12345678901234567890
    if ctx.attempt == 1:
        raise RuntimeError("card declined by the gateway")


registry.register("card.charge", charge)
registry.register("mail.send", lambda ctx: ctx.data.update(mailed=True, note="x" * 400))
engine = wf.Engine(str(Path(TMP) / "runs.duckdb"), registry=registry)
engine.register(
    wf.Workflow("pay", 1)
    .start_with("card.charge", max_attempts=2, retry_delay="0s", jitter=0)
    .then("mail.send")
)
run = engine.start("pay", {"card": "visa"})
engine.run_until_idle()
monitor = RunMonitor(engine, run, interval=0.2)


def show(_change=None):
    point = monitor.stepper.point
    record(
        selected=monitor.surface.selected,
        point=None if point is None else point.seq,
        data_at={str(p.seq): run.data_at(p.seq) for p in run.checkpoints()},
    )


monitor.surface.observe(show, names="selected")
monitor.stepper.on_change(show)
show()
monitor
"""


def test_a_click_shows_a_nodes_attempts_and_the_stepper_goes_back_in_time(
    voila, page, notebook
) -> None:
    notebook.write(MONITOR)
    voila.open(page, notebook, ".wfkit-monitor .wfkit-surface[data-ready='true']")
    monitor = page.locator(".wfkit-monitor")

    page.locator(".wfkit-monitor-graph g.node[data-node-id='card.charge']").click()
    notebook.wait_for(lambda s: s["selected"] == "card.charge", "the kernel saw the click")
    failed = page.locator(".wfkit-monitor-node details.wfkit-attempt-details[data-status='failed']")
    expect(failed).to_have_count(1)
    error = failed.locator("pre.wfkit-node-error")
    expect(error).to_contain_text("Traceback (most recent call last)")
    expect(error).to_contain_text("RuntimeError: card declined by the gateway")
    expect(
        page.locator(".wfkit-monitor-node details.wfkit-attempt-details[data-status='succeeded']")
    ).to_have_count(1)

    box = monitor.bounding_box()
    assert box is not None
    for selector in ("pre.wfkit-data", ".wfkit-monitor-node pre.wfkit-node-input"):
        shown = page.locator(selector).first.bounding_box()
        assert shown is not None and shown["x"] + shown["width"] <= box["x"] + box["width"] + 1

    for _ in range(2):
        page.locator(".wfkit-stepper-prev").click()
    state = notebook.wait_for(lambda s: s["point"] is not None, "the kernel went back")
    state = notebook.wait_for(
        lambda s: s["point"] == sorted(int(k) for k in s["data_at"])[-3], "two checkpoints back"
    )
    seq = state["point"]
    expect(page.locator(".wfkit-stepper-label")).to_contain_text("viewing the past")
    current = page.locator(".wfkit-monitor-events tr.wfkit-event-current")
    expect(current.first).to_have_attribute("data-seq", re.compile(r"\d+"))
    expect(current.last).to_have_attribute("data-seq", str(seq))  # the page caught up with it
    seqs = [int(s) for s in current.evaluate_all("rows => rows.map(r => r.dataset.seq)")]
    assert seqs and seqs[-1] == seq
    shown = json.loads(page.locator("pre.wfkit-data").inner_text())
    assert shown == state["data_at"][str(seq)]
    assert "mailed" not in shown  # mail.send had not run yet at that point

    page.locator(".wfkit-stepper-live").click()
    notebook.wait_for(lambda s: s["point"] is None, "live again")
    expect(page.locator("pre.wfkit-data")).to_contain_text('"mailed": true')
