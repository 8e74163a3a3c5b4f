"""RunMonitor: node status classes on the surface, for_each progress, the attempt timeline, the
data document and the event log — and a background thread that follows the run."""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Callable
from datetime import timedelta
from html import unescape
from typing import Any

import pytest

import wfkit as wf
from tests.polling import eventually
from wfkit.widgets import RunMonitor
from wfkit.widgets.timeline import COLOURS

NO_WAIT = {"retry_delay": timedelta(0), "jitter": 0}


def bars(svg: str, outcome: str | None = None) -> list[str]:
    """The attempt ``<rect>`` tags of a timeline (of one outcome)."""
    wanted = f"wfkit-attempt-{outcome}" if outcome else "wfkit-attempt"
    tags = re.findall(r"<rect [^>]*>", svg)
    return [t for t in tags if wanted in re.search(r'class="([^"]*)"', t)[1].split()]


def event_rows(monitor: RunMonitor) -> list[str]:
    """The ``data-kind`` of each row of the event log, top to bottom."""
    return re.findall(
        r'<tr class="wfkit-event[^"]*"[^>]* data-kind="([^"]+)"', monitor.events_html.value
    )


def status_line_text(monitor: RunMonitor) -> str:
    """What the status line reads: the header and the explain line, tags and styles dropped."""
    parts = (monitor.header_html.value, monitor.explain_html.value)
    text = " ".join(re.sub(r"<style>.*?</style>|<[^>]+>", " ", unescape(p)) for p in parts)
    return " ".join(text.split())


@pytest.fixture
def monitors() -> Any:
    opened: list[RunMonitor] = []

    def open_(*args: Any, **kw: Any) -> RunMonitor:
        kw.setdefault("autostart", False)
        monitor = RunMonitor(*args, **kw)
        opened.append(monitor)
        return monitor

    yield open_
    for monitor in opened:
        monitor.close()


def test_a_completed_run_shows_every_reached_node_succeeded(engine, acts, monitors) -> None:
    acts.noop("reserve", "charge")
    engine.register(wf.Workflow("pay").start_with("reserve").then("charge"))
    run = engine.start("pay", {"order": "o-1"})
    monitor = monitors(engine, run)
    picture = monitor.surface.svg
    assert 'id="node&#45;reserve"' in picture  # dot writes the hyphen as an entity
    assert monitor.surface.status == {"reserve": "running"}  # its first step is ready

    engine.run_until_idle()
    assert monitor.refresh() is True

    assert monitor.surface.status == {"reserve": "succeeded", "charge": "succeeded"}
    assert monitor.surface.svg is picture  # restyled through classes, never redrawn
    assert "wfkit-status-completed" in monitor.header_html.value
    assert status_line_text(monitor).count("completed") == 1  # never "completed completed"
    assert '"order": "o-1"' in monitor.data_html.value
    assert monitor.refresh() is False  # nothing changed, nothing is touched


def test_statuses_follow_a_retrying_and_a_waiting_node(engine, acts, clock, monitors) -> None:
    acts.noop("prepare")
    acts.add("charge")
    acts.broken["charge"] = True
    flow = (
        wf.Workflow("pay")
        .start_with("prepare")
        .then("charge", max_attempts=2, retry_delay="1m", jitter=0)
        .approval("review")
    )
    engine.register(flow)
    run = engine.start("pay", {})
    engine.run_until_idle()
    monitor = monitors(engine, run)

    assert monitor.surface.status == {"prepare": "succeeded", "charge": "retrying"}
    assert "retrying 'charge' (attempt 2) in 1 minute" in unescape(monitor.explain_html.value)

    acts.broken["charge"] = False
    clock.advance("1m")
    engine.run_until_idle()
    monitor.refresh()

    assert monitor.surface.status["charge"] == "succeeded"
    assert monitor.surface.status["review"] == "waiting"
    assert "waiting for approval" in monitor.explain_html.value


def test_for_each_progress_counts_done_failed_and_open_items(engine, acts, clock, monitors) -> None:
    def ship(ctx: wf.ActivityContext[Any]) -> None:
        if ctx.item == "bad":
            raise ValueError("no such sku")
        if ctx.item == "slow" and ctx.attempt == 1:
            raise TimeoutError("courier busy")

    acts.add("ship", ship)
    acts.noop("review")
    flow = (
        wf.Workflow("ship")
        .start_with()
        .for_each(
            "lines",
            lambda b: b.then("ship", max_attempts=2, retry_delay="1m", jitter=0),
            on_partial=lambda b: b.then("review"),
        )
    )
    engine.register(flow)
    lines = ["a", "b", "bad", "slow", "c"]
    run = engine.start("ship", {"lines": lines})
    engine.run_until_idle()  # 'bad' and 'slow' failed once; both wait a minute for a retry
    monitor = monitors(engine, run)

    progress = monitor.progress_html.value
    assert "3/5, 2 in progress" in progress
    assert "ship: 3/5" in progress

    clock.advance("1m")
    engine.run_until_idle()  # 'slow' succeeds on its retry, 'bad' fails for good
    monitor.refresh()

    progress = monitor.progress_html.value
    assert "4/5, 1 failed" in progress
    assert "ship: 4/5, 1 failed" in progress
    assert "in progress" not in progress
    assert monitor.surface.tooltips == {"for_each-1": "for_each for_each-1: 4/5, 1 failed"}
    assert run.status == wf.RunStatus.COMPLETED  # the partial join went on to 'review'


def test_for_each_progress_counts_items_whose_last_step_is_a_call(engine, acts, monitors) -> None:
    acts.noop("pay.charge", "ship")
    engine.register(wf.Workflow("payment", 1).start_with("pay.charge"))
    flow = (
        wf.Workflow("batch", 1)
        .start_with()
        .for_each("amounts", lambda b: b.call("payment", input={"amount": "item"}))
        .then("ship")
    )
    engine.register(flow)
    run = engine.start("batch", {"amounts": [1, 2, 3]})
    engine.run_until_idle()
    monitor = monitors(engine, run)

    assert run.status == wf.RunStatus.COMPLETED
    assert "3/3" in monitor.progress_html.value  # each item ended with call.completed
    assert monitor.surface.tooltips == {"for_each-1": "for_each for_each-1: 3/3"}
    assert monitor.surface.status["call-payment"] == "succeeded"  # the same word, one source


def test_the_timeline_has_one_bar_per_attempt_coloured_by_outcome(
    engine, acts, clock, monitors
) -> None:
    def charge(ctx: wf.ActivityContext[Any]) -> None:
        clock.advance("2s")  # every attempt takes two seconds
        if ctx.attempt < 3:
            raise RuntimeError(f"card declined (attempt {ctx.attempt})")

    acts.noop("reserve")
    acts.add("charge", charge)
    engine.register(
        wf.Workflow("pay").start_with("reserve").then("charge", max_attempts=3, **NO_WAIT)
    )
    run = engine.start("pay", {})
    engine.run_until_idle()
    monitor = monitors(engine, run)

    svg = monitor.timeline_html.value
    assert len(bars(svg)) == 4  # reserve once, charge three times
    failed = bars(svg, "failed")
    assert len(failed) == 2
    assert all('data-node="charge"' in tag for tag in failed)
    assert all(f'fill="{COLOURS["failed"]}"' in tag for tag in failed)
    succeeded = bars(svg, "succeeded")
    assert [re.search(r'data-node="([^"]+)"', t)[1] for t in succeeded] == ["reserve", "charge"]
    widths = [float(re.search(r'width="([\d.]+)"', t)[1]) for t in bars(svg, "failed")]
    assert widths[0] > 50  # two seconds of a six-second run: a real bar, not a sliver
    assert "card declined (attempt 1)" in svg  # the error is the bar's tooltip


def test_the_event_log_shows_the_last_events_and_the_selected_node(engine, acts, monitors) -> None:
    acts.noop("a", "b", "c")
    engine.register(wf.Workflow("abc").start_with("a").then("b").then("c"))
    run = engine.start("abc", {})
    engine.run_until_idle()
    monitor = monitors(engine, run, events=3)

    history = [e.kind for e in run.history()]
    assert len(history) > 3
    assert event_rows(monitor) == history[-3:]
    assert event_rows(monitor)[-1] == "run.completed"

    monitor.surface.selected = "b"  # a click on node b in the page
    assert event_rows(monitor) == ["step.completed"]
    assert 'data-kind="step.completed"' in monitor.events_html.value
    assert "<td>b</td>" in monitor.events_html.value
    monitor.surface.selected = ""
    assert event_rows(monitor) == history[-3:]


def log_rows(monitor: RunMonitor) -> list[tuple[str, str]]:
    """(level, message) of each row of the log panel, top to bottom."""
    found = re.findall(
        r'<tr class="wfkit-log" data-level="([^"]+)".*?<td title="[^"]*" [^>]*>(.*?)</td></tr>',
        monitor.logs_html.value,
        flags=re.S,
    )
    return [(level, unescape(text)) for level, text in found]


def test_the_log_panel_shows_the_lines_activities_logged_and_those_of_the_selected_node(
    engine, acts, monitors
) -> None:
    def charge(ctx: wf.ActivityContext[Any]) -> None:
        ctx.logger.info("charging <card> %s", ctx.data["card"])
        if ctx.attempt == 1:
            ctx.logger.error("gateway said no")
            raise RuntimeError("declined")

    acts.add("charge", charge)
    acts.add("mail", lambda ctx: ctx.logger.warning("mail queued"))
    engine.register(wf.Workflow("pay").start_with("charge", max_attempts=2, **NO_WAIT).then("mail"))
    run = engine.start("pay", {"card": "visa"})
    monitor = monitors(engine, run)
    assert log_rows(monitor) == []
    assert "last 0 log lines" in monitor.logs_html.value

    engine.run_until_idle()
    monitor.refresh()

    assert log_rows(monitor) == [
        ("INFO", "charging <card> visa"),
        ("ERROR", "gateway said no"),
        ("INFO", "charging <card> visa"),
        ("WARNING", "mail queued"),
    ]
    assert "charging &lt;card&gt; visa" in monitor.logs_html.value  # text, never markup
    assert "<td>charge</td><td>1</td>" in monitor.logs_html.value  # node and attempt
    assert "<td>charge</td><td>2</td>" in monitor.logs_html.value

    monitor.surface.selected = "mail"  # a click on node mail in the page
    assert log_rows(monitor) == [("WARNING", "mail queued")]
    assert "log lines of mail" in monitor.logs_html.value
    monitor.surface.selected = ""
    assert len(log_rows(monitor)) == 4


def test_the_background_thread_follows_a_run_driven_elsewhere_and_stops_on_close(
    engine, acts, monitors
) -> None:
    acts.noop("invoice", "ship")
    engine.register(
        wf.Workflow("pay")
        .start_with("invoice")
        .wait_for_signal("paid", correlate="order")
        .then("ship")
    )
    run = engine.start("pay", {"order": "o-1"})
    monitor = monitors(engine, run, interval=0.02, autostart=True, until_terminal=False)
    assert monitor.running
    assert monitor.surface.status == {"invoice": "running"}

    engine.run_until_idle()  # the test's thread moves the run; the monitor only watches
    assert eventually(lambda: monitor.surface.status.get("paid") == "waiting")
    assert monitor.surface.status["invoice"] == "succeeded"

    signaller = threading.Thread(target=lambda: engine.signal("paid", "o-1", {}, actor="bo"))
    signaller.start()
    signaller.join()
    engine.run_until_idle()
    assert eventually(lambda: monitor.surface.status.get("ship") == "succeeded")
    assert eventually(lambda: "wfkit-status-completed" in monitor.header_html.value)
    assert monitor.running  # until_terminal=False: it keeps watching

    thread = monitor.live._thread
    monitor.close()
    assert not monitor.running
    assert thread is not None and not thread.is_alive()


def test_the_thread_stops_by_itself_once_the_run_ended(engine, acts, monitors) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("one").start_with("a"))
    run = engine.start("one", {})
    monitor = monitors(engine, run, interval=0.02, autostart=True)
    engine.run_until_idle()

    assert eventually(lambda: not monitor.running)
    assert monitor.surface.status == {"a": "succeeded"}
    assert monitor.status == wf.RunStatus.COMPLETED


def test_a_monitor_reports_a_failure_of_its_engine_and_stops(engine, acts, monitors) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("one").start_with("a").approval("ok"))
    run = engine.start("one", {})
    monitor = monitors(engine, run, interval=0.02, autostart=True)
    engine.close()

    assert eventually(lambda: not monitor.running)
    assert monitor.error.kind == "error"
    assert "monitor.start()" in monitor.error.text


def test_a_monitor_opens_on_a_run_id(engine, acts, monitors) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("one").start_with("a"))
    run = engine.start("one", {})
    engine.run_until_idle()

    monitor = monitors(engine, run.id)

    assert monitor.run.id == run.id
    assert monitor.surface.status == {"a": "succeeded"}
    with pytest.raises(wf.UsageError, match="no run"):
        monitors(engine, "nope")


def test_a_timeline_bar_in_a_nested_for_each_names_its_whole_cell(engine, acts, clock) -> None:
    from wfkit.widgets.timeline import spans_of, timeline_svg

    acts.noop("inner")
    engine.register(
        wf.Workflow("nest")
        .start_with()
        .for_each("groups", lambda b: b.for_each("item", lambda c: c.then("inner")))
    )
    run = engine.start("nest", {"groups": [[1, 2], [3]]})
    engine.run_until_idle()

    spans = spans_of(run.history(), clock.now())
    assert sorted(s.loop_path for s in spans) == [(0, 0), (0, 1), (1, 0)]
    svg = unescape(timeline_svg(spans))
    assert "inner attempt 1 (item 0.1)" in svg and "inner attempt 1 (item 1.0)" in svg


# --- node details and time travel ----------------------------------------------------------


def shown_data(monitor: RunMonitor) -> Any:
    """The data document the data column shows, parsed."""
    text = re.search(r'<pre class="wfkit-data"[^>]*>(.*?)</pre>', monitor.data_html.value, re.S)
    assert text is not None
    return json.loads(unescape(text[1]))


def attempt_sections(monitor: RunMonitor) -> list[dict[str, str]]:
    """Each attempt of the node details panel: attempt, status, cell and its inner HTML."""
    found = re.findall(
        r'<details class="wfkit-attempt-details" data-attempt="(\d+)" data-status="([^"]+)" '
        r'data-cell="([^"]*)"[^>]*>(.*?)</details>',
        monitor.node_html.value,
        flags=re.S,
    )
    return [{"attempt": a, "status": s, "cell": c, "html": h} for a, s, c, h in found]


def pre(section: str, css: str) -> str | None:
    found = re.search(rf'<pre class="{css}">(.*?)</pre>', section, re.S)
    return unescape(found[1]) if found else None


class Captured:
    """The data each attempt found as it started and left as it ended (``ctx.data`` copies)."""

    def __init__(self) -> None:
        self.started: dict[tuple[str, int, str], Any] = {}
        self.ended: dict[tuple[str, int, str], Any] = {}

    def wrap(self, body: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def run(ctx: wf.ActivityContext[Any]) -> Any:
            key = (ctx.node_id, ctx.attempt, ".".join(map(str, ctx.loop_path)))
            self.started[key] = copy.deepcopy(ctx.data)
            result = body(ctx)
            self.ended[key] = copy.deepcopy(ctx.data)
            return result

        return run


def flaky_charge(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
    ctx.logger.info("charging %s", ctx.data["card"])
    ctx.data["charged"] = ctx.attempt
    if ctx.attempt == 1:
        ctx.logger.error("gateway said no")
        raise RuntimeError("card declined by the gateway")
    return {"receipt": "r-2"}


def test_a_click_on_a_node_shows_its_attempts_input_output_traceback_and_logs(
    engine, acts, monitors
) -> None:
    seen = Captured()
    acts.add("charge", seen.wrap(flaky_charge))
    acts.add("mail", seen.wrap(lambda ctx: ctx.data.update(mailed=True)))
    engine.register(wf.Workflow("pay").start_with("charge", max_attempts=2, **NO_WAIT).then("mail"))
    run = engine.start("pay", {"card": "visa"})
    engine.run_until_idle()
    monitor = monitors(engine, run)
    assert monitor.node_html.value == "" and monitor.node_html.layout.display == "none"

    monitor.surface.selected = "charge"  # a click on the node in the page

    assert monitor.node_html.layout.display == ""
    assert 'data-node="charge"' in monitor.node_html.value
    assert "action · activity charge" in monitor.node_html.value
    first, second = attempt_sections(monitor)
    assert (first["attempt"], first["status"]) == ("1", "failed")
    assert (second["attempt"], second["status"]) == ("2", "succeeded")
    assert "failed, retried" in first["html"]
    error = pre(first["html"], "wfkit-node-error")
    assert error is not None and error.startswith("Traceback (most recent call last)")
    assert "flaky_charge" in error  # the whole traceback, not its last line
    assert error.rstrip().endswith("RuntimeError: card declined by the gateway")
    assert pre(second["html"], "wfkit-node-error") is None
    assert json.loads(pre(second["html"], "wfkit-node-output") or "") == {"receipt": "r-2"}
    for section in (first, second):  # the data each attempt started from, as it saw it
        key = ("charge", int(section["attempt"]), "")
        assert json.loads(pre(section["html"], "wfkit-node-input") or "") == seen.started[key]
    assert "gateway said no" in first["html"] and "gateway said no" not in second["html"]
    assert "charging visa" in first["html"] and "charging visa" in second["html"]
    times = re.findall(
        r"(\d\d:\d\d:\d\d\.\d{3}) → (\d\d:\d\d:\d\d\.\d{3}) \(([^)]+)\)", first["html"]
    )
    assert len(times) == 1  # start → end (duration)

    monitor.surface.selected = "mail"
    (only,) = attempt_sections(monitor)
    assert only["status"] == "succeeded" and "Error" not in only["html"]
    assert json.loads(pre(only["html"], "wfkit-node-input") or "") == seen.started[("mail", 1, "")]
    monitor.surface.selected = ""
    assert monitor.node_html.layout.display == "none"


def test_node_details_of_a_for_each_body_are_grouped_per_cell(engine, acts, monitors) -> None:
    def ship(ctx: wf.ActivityContext[Any]) -> None:
        ctx.logger.info("shipping %s", ctx.item)
        if ctx.item == "slow" and ctx.attempt == 1:
            raise TimeoutError("courier busy")
        ctx.data["shipped"][ctx.loop_index] = ctx.item

    acts.add("ship", ship)
    flow = (
        wf.Workflow("lines")
        .start_with()
        .for_each("lines", lambda b: b.then("ship", max_attempts=2, **NO_WAIT))
    )
    engine.register(flow)
    run = engine.start("lines", {"lines": ["a", "slow", "c"], "shipped": [None] * 3})
    engine.run_until_idle()
    monitor = monitors(engine, run)

    monitor.surface.selected = "ship"

    cells = re.findall(r'<div class="wfkit-node-cell" data-cell="(\d+)">', monitor.node_html.value)
    assert sorted(cells) == ["0", "1", "2"]
    sections = attempt_sections(monitor)
    by_cell = {}
    for s in sections:
        by_cell.setdefault(s["cell"], []).append((s["attempt"], s["status"]))
    assert by_cell == {
        "0": [("1", "succeeded")],
        "1": [("1", "failed"), ("2", "succeeded")],
        "2": [("1", "succeeded")],
    }
    slow = [s for s in sections if s["cell"] == "1"]
    assert "TimeoutError: courier busy" in (pre(slow[0]["html"], "wfkit-node-error") or "")
    assert "shipping slow" in slow[0]["html"] and "shipping slow" in slow[1]["html"]
    assert "shipping a" not in slow[1]["html"]  # each attempt has its own lines


def test_stepping_through_history_shows_the_data_and_statuses_of_each_checkpoint(
    engine, acts, monitors
) -> None:
    seen = Captured()
    acts.add("charge", seen.wrap(flaky_charge))
    acts.add("ship", seen.wrap(lambda ctx: ctx.data.update(shipped=True, card=None)))
    engine.register(wf.Workflow("pay").start_with("charge", max_attempts=2, **NO_WAIT).then("ship"))
    run = engine.start("pay", {"card": "visa"})
    engine.run_until_idle()
    monitor = monitors(engine, run)
    stepper = monitor.stepper
    points = run.checkpoints()
    assert stepper.live and stepper.slider.max == len(points) - 1
    assert shown_data(monitor) == run.data  # live

    expected_data = [  # what the activities saw: the data after each checkpoint
        seen.started[("charge", 1, "")],  # run.started
        seen.started[("charge", 2, "")],  # step.failed (attempt 1's writes are not kept)
        seen.ended[("charge", 2, "")],  # step.completed charge
        seen.ended[("ship", 1, "")],  # step.completed ship, run.completed
    ]
    assert [p.kinds[0] for p in points] == [
        "run.started",
        "step.failed",
        "step.completed",
        "step.completed",
    ]
    expected_statuses = [
        {"charge": "running"},
        {"charge": "running"},  # attempt 1 failed; attempt 2 (no retry delay) is ready
        {"charge": "succeeded", "ship": "running"},
        {"charge": "succeeded", "ship": "succeeded"},
    ]
    stepper.go(0)
    assert not stepper.live and "viewing the past" in stepper.label.value
    for i, point in enumerate(points):
        if i:
            stepper.next_button.click()
        assert stepper.point == point if i < len(points) - 1 else stepper.point is None
        assert shown_data(monitor) == expected_data[i]
        assert shown_data(monitor) == run.data_at(point.seq)
        assert monitor.surface.status == expected_statuses[i], point
        current = re.findall(
            r'<tr class="wfkit-event wfkit-event-current"[^>]* data-seq="(\d+)"',
            monitor.events_html.value,
        )
        assert [int(s) for s in current] == list(range(point.first_seq, point.seq + 1))
    assert stepper.live  # the newest checkpoint is live again
    assert stepper.next_button.disabled

    stepper.prev_button.click()
    stepper.prev_button.click()
    assert stepper.point == points[1]
    assert monitor.surface.status == {"charge": "running"}
    svg = monitor.timeline_html.value  # attempt 1 had failed then, attempt 2 was ready
    assert (len(bars(svg, "failed")), len(bars(svg, "running")), bars(svg, "succeeded")) == (
        1,
        1,
        [],
    )
    monitor.surface.selected = "charge"
    assert [s["status"] for s in attempt_sections(monitor)] == ["failed"]
    stepper.live_button.value = True
    assert stepper.point is None and shown_data(monitor) == run.data
    assert [s["status"] for s in attempt_sections(monitor)] == ["failed", "succeeded"]


def test_a_past_point_stays_while_the_run_goes_on(engine, acts, monitors) -> None:
    acts.add("prepare", lambda ctx: ctx.data.update(prepared=True))
    acts.add("finish", lambda ctx: ctx.data.update(finished=True))
    engine.register(
        wf.Workflow("gate")
        .start_with("prepare")
        .wait_for_signal("go", correlate="k")
        .then("finish")
    )
    run = engine.start("gate", {"k": "1"})
    engine.run_until_idle()
    monitor = monitors(engine, run)
    assert monitor.surface.status["go"] == "waiting"
    monitor.stepper.go(0)
    engine.signal("go", "1", {})
    engine.run_until_idle()
    monitor.refresh()

    assert monitor.stepper.slider.max == len(run.checkpoints()) - 1
    assert monitor.stepper.point == run.checkpoints()[0]
    assert shown_data(monitor) == {"k": "1"}
    assert monitor.surface.status == {"prepare": "running"}
    assert "completed" in monitor.header_html.value  # the status line stays live
    monitor.stepper.live_button.value = True
    assert shown_data(monitor) == {"k": "1", "prepared": True, "finished": True}


def test_the_status_line_holds_the_workers_bar(engine, acts, monitors) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("one").start_with("a"))
    monitor = monitors(engine, engine.start("one", {}))
    line = monitor.status_line
    assert line.children == (monitor.header_html, monitor.explain_html, monitor.worker_slot)
    assert monitor.worker_slot.children == (monitor.workers,)
    assert "wfkit-monitor-workers" in monitor.worker_slot._dom_classes
    assert "wfkit-workers" in monitor.workers._dom_classes


def test_the_timeline_text_follows_the_front_ends_theme(engine, acts, monitors) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("one").start_with("a"))
    run = engine.start("one", {})
    engine.run_until_idle()
    svg = monitors(engine, run).timeline_html.value
    row = re.search(r'<text class="wfkit-timeline-row"[^>]*>', svg)
    title = re.search(r'<text class="wfkit-timeline-title"[^>]*>', svg)
    assert row is not None and title is not None
    for tag in (row[0], title[0]):
        assert 'fill="#222222"' in tag  # for renderers without CSS variables
        assert 'style="fill:var(--jp-ui-font-color1,#222222)"' in tag
    assert "var(--jp-ui-font-color2,#555555)" in svg  # tick labels
    assert "#444" not in svg and 'fill="#666"' not in svg


def test_the_data_column_scrolls_inside_its_own_box(engine, acts, monitors) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("one").start_with("a"))
    run = engine.start("one", {"amount": 12345678901234567890, "note": "x" * 300})
    monitor = monitors(engine, run)
    tag = re.search(r'<pre class="wfkit-data" style="([^"]*)"', monitor.data_html.value)
    assert tag is not None
    assert "white-space:pre;" in tag[1] and "overflow:auto" in tag[1]  # never wraps mid-number
    assert shown_data(monitor)["amount"] == 12345678901234567890


def test_a_run_with_ready_work_and_no_worker_says_so_and_starts_them(
    engine, acts, monitors
) -> None:
    acts.noop("expense.submit", "expense.pay")
    engine.register(
        wf.Workflow("expense").start_with("expense.submit").approval("ok").then("expense.pay")
    )
    run = engine.start("expense", {})
    engine.run_until_idle()
    monitor = monitors(engine, run)
    monitor.refresh()
    assert monitor.workers.layout.display == "none"  # waits for a person: nothing to drive

    engine.approve(run.id, "ok", actor="ana")  # no worker runs in this process
    monitor.refresh()

    assert monitor.worker_slot.children == (monitor.workers,)
    assert monitor.workers.layout.display == "flex"
    assert "no worker is running in this process" in monitor.explain_html.value
    monitor.workers.start_button.click()
    assert run.result(timeout=30) == {}
    monitor.refresh()
    assert monitor.workers.layout.display == "none"
    assert acts.calls == ["expense.submit", "expense.pay"]


@pytest.mark.parametrize("interval", [0, -1, True, "1s"])
def test_a_bad_interval_is_refused_before_anything_is_shown(engine, acts, interval) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("one").start_with("a"))
    run = engine.start("one", {})
    before = [t.name for t in threading.enumerate()]
    events = len(run.history())

    with pytest.raises(wf.UsageError, match="must be a positive number of seconds") as refused:
        RunMonitor(engine, run, interval)

    assert "RunMonitor(engine, run, interval=0.5)" in str(refused.value)
    assert [t.name for t in threading.enumerate()] == before  # no thread was started
    assert len(run.history()) == events  # nothing was written to the run


def test_the_status_line_names_the_status_once_and_keeps_what_the_explanation_adds(
    engine, acts, monitors
) -> None:
    acts.add("charge")
    acts.broken["charge"] = True
    engine.register(wf.Workflow("pay").start_with("charge", max_attempts=1))
    run = engine.start("pay", {})
    engine.run_until_idle()
    monitor = monitors(engine, run)

    assert run.status == wf.RunStatus.FAILED
    assert run.explain().startswith("failed: ")
    line = status_line_text(monitor)
    assert line.count("failed") == 1, line
    assert "charge backend down (attempt 1)" in line  # the reason stays, after the status
    assert line.index("failed") < line.index("charge backend down")
