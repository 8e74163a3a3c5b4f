"""RunMonitor: node status classes on the surface, for_each progress, the attempt timeline, the
data document and the event log — and a background thread that follows the run."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from html import unescape
from typing import Any

import pytest

import wfkit as wf
from wfkit.widgets import RunMonitor
from wfkit.widgets.timeline import COLOURS

NO_WAIT = {"retry_delay": timedelta(0), "jitter": 0}


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


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
    assert "completed" in monitor.explain_html.value
    assert "wfkit-status-completed" in monitor.header_html.value
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
    assert wait_until(lambda: monitor.surface.status.get("paid") == "waiting")
    assert monitor.surface.status["invoice"] == "succeeded"

    signaller = threading.Thread(target=lambda: engine.signal("paid", "o-1", {}, actor="bo"))
    signaller.start()
    signaller.join()
    engine.run_until_idle()
    assert wait_until(lambda: monitor.surface.status.get("ship") == "succeeded")
    assert wait_until(lambda: "completed" in monitor.explain_html.value)
    assert monitor.running  # until_terminal=False: it keeps watching

    thread = monitor._thread
    monitor.close()
    assert not monitor.running
    assert thread is not None and not thread.is_alive()


def test_the_thread_stops_by_itself_once_the_run_ended(engine, acts, monitors) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("one").start_with("a"))
    run = engine.start("one", {})
    monitor = monitors(engine, run, interval=0.02, autostart=True)
    engine.run_until_idle()

    assert wait_until(lambda: not monitor.running)
    assert monitor.surface.status == {"a": "succeeded"}
    assert monitor.status == wf.RunStatus.COMPLETED


def test_a_monitor_reports_a_failure_of_its_engine_and_stops(engine, acts, monitors) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("one").start_with("a").approval("ok"))
    run = engine.start("one", {})
    monitor = monitors(engine, run, interval=0.02, autostart=True)
    engine.close()

    assert wait_until(lambda: not monitor.running)
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
