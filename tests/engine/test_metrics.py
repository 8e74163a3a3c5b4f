"""The engine's own metrics (``wfkit.engine.metrics``), on DuckDB and PostgreSQL, in process.

Counters follow the attempts and commits of the engine they were enabled on, and only that
engine: two engines in one process keep separate registries. The store gauges are read at
collection time. The JSON log formatter stamps an activity's ``ctx.logger`` lines with the run.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

import wfkit as wf
from tests.engine.conftest import Activities, OpenEngine
from tests.prometheus import Samples, samples
from tests.prometheus import value as at
from wfkit.engine.logformat import JsonFormatter, configure_logging
from wfkit.engine.metrics import enable_metrics
from wfkit.errors import UsageError


def scrape(engine: wf.Engine) -> Samples:
    return samples(generate_latest(enable_metrics(engine.runtime).registry).decode())


def _flows(acts: Activities) -> tuple[wf.Workflow, wf.Workflow]:
    acts.noop("m.work")

    def boom(ctx: Any) -> None:
        raise RuntimeError("boom")

    acts.add("m.boom", boom)
    waiting = wf.Workflow("mw", version=1).start_with("m.work").wait_for_signal("go")
    failing = wf.Workflow("mf", version=1).start_with("m.boom", max_attempts=2, retry_delay="1s")
    return waiting, failing


def test_counters_and_gauges_follow_the_runs(
    engine: wf.Engine, acts: Activities, clock: wf.ManualClock
) -> None:
    enable_metrics(engine.runtime)
    waiting, failing = _flows(acts)
    engine.register(waiting)
    engine.register(failing)
    runs = [engine.start("mw", {}) for _ in range(4)]
    failed = engine.start("mf", {})
    engine.run_until_idle()
    clock.advance(timedelta(seconds=2))  # the retry of m.boom comes due
    engine.run_until_idle()
    assert failed.status == wf.RunStatus.FAILED
    assert all(run.status == wf.RunStatus.WAITING for run in runs)

    found = scrape(engine)
    assert at(found, "wfkit_steps_started_total", workflow="mw", activity="m.work") == 4
    assert at(found, "wfkit_steps_completed_total", workflow="mw", activity="m.work") == 4
    assert at(found, "wfkit_steps_started_total", workflow="mf", activity="m.boom") == 2
    assert at(found, "wfkit_steps_failed_total", workflow="mf", activity="m.boom") == 2
    assert at(found, "wfkit_attempt_duration_seconds_count", activity="m.boom") == 2
    assert at(found, "wfkit_runs", workflow="mw", status="waiting") == 4
    assert at(found, "wfkit_runs", workflow="mf", status="failed") == 1
    assert at(found, "wfkit_open_waits", kind="signal") == 4
    # the manual clock moved 2 s since the waits opened
    assert at(found, "wfkit_oldest_wait_age_seconds") == pytest.approx(2.0, abs=0.01)
    assert at(found, "wfkit_commit_duration_seconds_count") >= 3
    assert at(found, "wfkit_commit_batch_size_sum") >= 6  # the 6 attempt results, at least
    assert at(found, "wfkit_ready_queue_depth") == 0

    engine.signal("go", None, {})
    engine.run_until_idle()
    after = scrape(engine)
    assert at(after, "wfkit_runs", workflow="mw", status="waiting") == 3
    assert at(after, "wfkit_runs", workflow="mw", status="completed") == 1
    assert at(after, "wfkit_open_waits", kind="signal") == 3


def test_two_engines_keep_their_own_registries(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    first = open_engine()
    acts.noop("m.one")
    first.register(wf.Workflow("one", version=1).start_with("m.one"))
    first_metrics = enable_metrics(first.runtime)
    assert enable_metrics(first.runtime) is first_metrics  # enabled once
    first.start("one", {})
    first.run_until_idle()
    with wf.Engine(tmp_path / "other.duckdb", registry=acts.registry) as second:
        second_metrics = enable_metrics(second.runtime)
        assert second_metrics.registry is not first_metrics.registry
        second.register(wf.Workflow("one", version=1).start_with("m.one"))
        for _ in range(3):
            second.start("one", {})
        second.run_until_idle()
        assert (
            at(scrape(second), "wfkit_steps_completed_total", workflow="one", activity="m.one") == 3
        )
    assert at(scrape(first), "wfkit_steps_completed_total", workflow="one", activity="m.one") == 1


def test_an_engine_without_metrics_counts_nothing(engine: wf.Engine, acts: Activities) -> None:
    acts.noop("m.one")
    engine.register(wf.Workflow("one", version=1).start_with("m.one"))
    engine.start("one", {})
    engine.run_until_idle()
    assert engine.runtime.scheduler.metrics is None and engine.runtime.writer.metrics is None
    # enabled later: counters start from there, the store gauges see every run
    found = scrape(engine)
    assert at(found, "wfkit_steps_completed_total", workflow="one", activity="m.one") == 0
    assert at(found, "wfkit_runs", workflow="one", status="completed") == 1


def test_json_lines_of_an_activity_name_its_run(engine: wf.Engine, acts: Activities) -> None:
    def talk(ctx: Any) -> None:
        ctx.logger.warning("careful with %s", "that")

    acts.add("m.talk", talk)
    engine.register(wf.Workflow("talky", version=1).start_with("m.talk", id="say"))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    activity = logging.getLogger("wfkit.activity")
    activity.addHandler(handler)
    try:
        run = engine.start("talky", {})
        engine.run_until_idle()
    finally:
        activity.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 1
    line = lines[0]
    assert line["message"] == "careful with that"
    assert line["level"] == "WARNING" and line["logger"] == "wfkit.activity"
    assert line["run_id"] == run.id and line["workflow"] == "talky" and line["version"] == 1
    assert line["node_id"] == "say" and line["attempt"] == 1 and line["activity"] == "m.talk"
    assert line["time"].endswith("+00:00")


def test_json_formatter_keeps_exceptions_and_odd_values() -> None:
    formatter = JsonFormatter()
    try:
        raise ValueError("bad")
    except ValueError:
        record = logging.getLogger("x").makeRecord(
            "x",
            logging.ERROR,
            __file__,
            1,
            "failed %s",
            (object,),
            sys.exc_info(),
            extra={"run_id": Path("r")},
        )
    line = json.loads(formatter.format(record))
    assert "ValueError: bad" in line["exception"]
    assert line["run_id"] == "r"  # not JSON by itself: written as its text


def test_a_log_format_other_than_text_or_json_is_refused() -> None:
    with pytest.raises(UsageError, match="--log-format must be 'text' or 'json'"):
        configure_logging("yaml")
