"""Activity logs belong to the run: ``ctx.logger`` records carry the run, node and attempt as
attributes, and the lines at INFO and above are kept (bounded) in ``wf_logs`` with the attempt's
checkpoint, read back with ``run.logs()`` — through a reopen, on both stores."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import wfkit as wf
from tests.engine.helpers import charge_then_fail_each_line, run_to_idle
from wfkit.engine.logs import MAX_BYTES, MAX_LINES
from wfkit.store.copy import copy_store

NO_WAIT = {"retry_delay": timedelta(0), "jitter": 0}


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """What the ``wfkit.activity`` logger prints through a user's own formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        logging.Formatter(
            "%(run_id)s|%(workflow_id)s|%(node_id)s|%(attempt)s|%(loop_path)s|%(funcName)s"
            "|%(levelname)s|%(message)s"
        )
    )
    logger = logging.getLogger("wfkit.activity")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(level)


def messages(run: wf.Run, **kw: Any) -> list[tuple[str, str, int, str]]:
    return [(line.node_id, line.level, line.attempt, line.message) for line in run.logs(**kw)]


def test_records_carry_the_run_node_and_attempt_for_a_users_formatter(
    engine, acts, captured
) -> None:
    def charge(ctx: wf.ActivityContext[Any]) -> None:
        ctx.logger.info("charging %s", ctx.data["card"], extra={"tenant": "acme"})

    acts.add("card.charge", charge)
    run = run_to_idle(engine, wf.Workflow("pay").start_with("card.charge"), {"card": "visa"})

    assert captured.getvalue().splitlines() == [
        f"{run.id}|pay|card.charge|1||charge|INFO|charging visa"
    ]


def test_a_user_extra_is_kept_next_to_the_attempt_attributes(engine, acts) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.INFO)
    logger = logging.getLogger("wfkit.activity")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        acts.add("a", lambda ctx: ctx.logger.warning("w", extra={"tenant": "acme"}))
        run = run_to_idle(engine, wf.Workflow("w", version=3).start_with("a"), {})
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)

    (record,) = records
    assert (record.run_id, record.node_id, record.attempt, record.tenant) == (  # type: ignore[attr-defined]
        run.id,
        "a",
        1,
        "acme",
    )
    assert (record.workflow_id, record.workflow_version, record.activity) == ("w", 3, "a")  # type: ignore[attr-defined]


def test_lines_at_info_and_above_are_kept_whatever_the_logging_level(engine, acts, clock) -> None:
    logging.getLogger("wfkit.activity").setLevel(logging.CRITICAL)  # nothing is printed
    try:

        def step(ctx: wf.ActivityContext[Any]) -> None:
            ctx.logger.debug("not kept")
            ctx.logger.info("one")
            clock.advance("5s")
            ctx.logger.warning("two %d", 2)
            ctx.logger.error("three")
            ctx.logger.log(25, "custom level")

        acts.add("step", step)
        engine.register(wf.Workflow("w").start_with("step"))
        start = clock.now()
        run = engine.start("w", {})
        engine.run_until_idle()
    finally:
        logging.getLogger("wfkit.activity").setLevel(logging.NOTSET)

    assert messages(run) == [
        ("step", "INFO", 1, "one"),
        ("step", "WARNING", 1, "two 2"),
        ("step", "ERROR", 1, "three"),
        ("step", "Level 25", 1, "custom level"),
    ]
    lines = run.logs()
    assert lines[0].at == start and lines[1].at == start + timedelta(seconds=5)
    assert [line.line for line in lines] == [0, 1, 2, 3]
    assert {line.activity for line in lines} == {"step"}
    assert str(lines[1]).endswith("WARNING step#1: two 2")


def test_each_attempt_keeps_its_own_lines_and_they_can_be_narrowed_down(engine, acts) -> None:
    def flaky(ctx: wf.ActivityContext[Any]) -> None:
        ctx.logger.info("try %d", ctx.attempt)
        if ctx.attempt == 1:
            try:
                raise ConnectionError("gateway down")
            except ConnectionError:
                ctx.logger.exception("charge failed")
                raise

    acts.add("flaky", flaky)
    acts.add("quiet")
    acts.add("after", lambda ctx: ctx.logger.info("after"))
    run = run_to_idle(
        engine,
        wf.Workflow("w")
        .start_with()
        .then("flaky", max_attempts=2, **NO_WAIT)
        .then("quiet")
        .then("after"),
        {},
    )

    assert [(n, a, m.splitlines()[0]) for n, _, a, m in messages(run)] == [
        ("flaky", 1, "try 1"),
        ("flaky", 1, "charge failed"),
        ("flaky", 2, "try 2"),
        ("after", 1, "after"),
    ]
    failed = run.logs(node_id="flaky", attempt=1)
    assert [line.message.splitlines()[0] for line in failed] == ["try 1", "charge failed"]
    assert "Traceback" in failed[1].message
    assert failed[1].message.endswith("ConnectionError: gateway down")
    assert messages(run, attempt=2) == [("flaky", "INFO", 2, "try 2")]
    assert run.logs(node_id="quiet") == []
    # each line names the event that recorded its attempt
    kinds = {e.seq: (e.kind, e.node_id, e.attempt) for e in run.history()}
    assert {kinds[line.seq] for line in run.logs()} == {
        ("step.failed", "flaky", 1),
        ("step.completed", "flaky", 2),
        ("step.completed", "after", 1),
    }


def test_an_attempt_that_logs_nothing_writes_no_rows(engine, acts) -> None:
    acts.add("quiet", lambda ctx: ctx.logger.debug("below INFO"))
    acts.noop("quiet-2")
    run = run_to_idle(engine, wf.Workflow("w").start_with("quiet").then("quiet-2"), {})

    assert run.status == wf.RunStatus.COMPLETED
    assert engine.sql("SELECT count(*) FROM wf_logs").fetchall() == [(0,)]
    assert run.logs() == []


def test_lines_are_bounded_per_attempt_with_a_marker(engine, acts) -> None:
    def chatty(ctx: wf.ActivityContext[Any]) -> None:
        for i in range(MAX_LINES + 50):
            ctx.logger.info("line %d", i)

    def huge(ctx: wf.ActivityContext[Any]) -> None:
        ctx.logger.info("small")
        ctx.logger.info("é" * MAX_BYTES)  # two bytes a character: cut
        ctx.logger.info("dropped: no room left")

    acts.add("chatty", chatty)
    acts.add("huge", huge)
    run = run_to_idle(engine, wf.Workflow("w").start_with("chatty").then("huge"), {})

    chatty_lines = run.logs(node_id="chatty")
    assert len(chatty_lines) == MAX_LINES + 1
    assert chatty_lines[MAX_LINES - 1].message == f"line {MAX_LINES - 1}"
    assert chatty_lines[-1].level == "WARNING"
    assert chatty_lines[-1].message == (
        "50 more log lines of this attempt not kept: at most 200 lines and 64 KiB are kept per "
        "attempt"
    )
    huge_lines = run.logs(node_id="huge")
    assert [line.message[:5] for line in huge_lines] == ["small", "éééé" + "é"[:1], "1 mor"]
    assert huge_lines[1].message.endswith(f" … [cut: the line had {2 * MAX_BYTES:,} bytes]")
    assert sum(len(line.message.encode()) for line in huge_lines[:2]) <= MAX_BYTES


def test_text_the_store_cannot_hold_is_escaped(engine, acts) -> None:
    acts.add("odd", lambda ctx: ctx.logger.warning("nul \x00 and a lone \ud800 surrogate"))
    run = run_to_idle(engine, wf.Workflow("w").start_with("odd"), {})

    assert run.status == wf.RunStatus.COMPLETED
    assert messages(run) == [("odd", "WARNING", 1, "nul \\x00 and a lone \\ud800 surrogate")]


def test_a_bad_format_keeps_the_message_and_its_arguments(engine, acts) -> None:
    acts.add("bad", lambda ctx: ctx.logger.info("%d items", "many"))
    run = run_to_idle(engine, wf.Workflow("w").start_with("bad"), {})

    assert run.status == wf.RunStatus.COMPLETED
    assert messages(run) == [("bad", "INFO", 1, "%d items ('many',)")]


def test_a_message_that_cannot_be_printed_never_fails_the_attempt(engine, acts) -> None:
    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    def odd(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
        ctx.logger.info(Broken())
        ctx.logger.info("odd exc_info", exc_info=("not", "a traceback"))
        return {"ok": True}

    acts.add("odd", odd)
    run = run_to_idle(engine, wf.Workflow("w").start_with("odd"), {})

    assert run.status == wf.RunStatus.COMPLETED
    assert [line.message for line in run.logs()] == [
        "<unprintable Broken: RuntimeError> ()",
        "odd exc_info\n(the exception could not be formatted: ValueError)",
    ]


def test_loop_cells_and_compensations_are_named(engine, acts) -> None:
    def charge(ctx: wf.ActivityContext[Any]) -> None:
        ctx.logger.info("charge %s", ctx.item)

    def fail(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("no")

    acts.add("charge", charge)
    acts.add("refund", lambda ctx: ctx.logger.info("refund %s", ctx.item))
    acts.add("fail", fail)
    run = run_to_idle(engine, charge_then_fail_each_line(), {"lines": ["a", "b"]})

    seen = sorted((line.activity, line.loop_path, line.message) for line in run.logs())
    assert seen == [
        ("charge", (0,), "charge a"),
        ("charge", (1,), "charge b"),
        ("refund", (0,), "refund a"),
        ("refund", (1,), "refund b"),
    ]
    assert {line.node_id for line in run.logs()} == {"charge"}
    rows = engine.sql(
        "SELECT DISTINCT loop_path FROM wf_logs WHERE activity = 'charge' ORDER BY 1"
    ).fetchall()
    assert rows == [("[0]",), ("[1]",)]


def test_logs_survive_reopening_the_engine_and_runs_taken_up_again(
    open_engine, acts, clock
) -> None:
    acts.add("before", lambda ctx: ctx.logger.info("before %s", ctx.data["k"]))
    acts.add("after", lambda ctx: ctx.logger.info("after %s", ctx.data["k"]))
    first = open_engine()
    run = run_to_idle(
        first,
        wf.Workflow("w").start_with("before").wait_for_signal("go", correlate="k").then("after"),
        {"k": "r-1"},
    )
    first.close()

    second = open_engine()
    again = second.run(run.id)
    assert messages(again) == [("before", "INFO", 1, "before r-1")]
    assert second.signal("go", "r-1", {}) is True
    second.run_until_idle()
    second.close()

    third = open_engine()
    assert messages(third.run(run.id)) == [
        ("before", "INFO", 1, "before r-1"),
        ("after", "INFO", 1, "after r-1"),
    ]


def test_batched_durability_writes_the_lines_with_their_checkpoints(open_engine, acts) -> None:
    acts.add("a", lambda ctx: ctx.logger.info("a"))
    acts.add("b", lambda ctx: ctx.logger.info("b"))
    engine = open_engine(durability="batched")
    run = run_to_idle(engine, wf.Workflow("w").start_with("a").then("b"), {})
    engine.close()

    again = open_engine()
    assert messages(again.run(run.id)) == [("a", "INFO", 1, "a"), ("b", "INFO", 1, "b")]


def test_a_timed_out_attempt_keeps_only_what_it_logged_in_time(engine, acts) -> None:
    def slow(ctx: wf.ActivityContext[Any]) -> None:
        ctx.logger.info("started")
        time.sleep(0.6)
        ctx.logger.info("too late")

    acts.add("slow", slow)
    run = run_to_idle(
        engine,
        wf.Workflow("w").start_with().then("slow", attempt_timeout="0.2s", max_attempts=1),
        {},
    )
    time.sleep(0.6)  # the abandoned thread logs its last line

    assert run.status == wf.RunStatus.FAILED
    assert messages(run) == [("slow", "INFO", 1, "started")]


def test_logs_of_an_unknown_node_or_a_bad_attempt_are_refused(engine, acts) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("w").start_with("a"))
    run = engine.start("w", {})
    with pytest.raises(wf.UsageError, match="has no node 'nope'"):
        run.logs(node_id="nope")
    for bad in (0, -1, "1", True, 1.0):
        with pytest.raises(wf.UsageError, match="attempt must be a positive integer"):
            run.logs(attempt=bad)  # type: ignore[arg-type]


def test_store_copy_carries_the_log_lines(open_engine, acts, tmp_path: Path) -> None:
    acts.add("a", lambda ctx: ctx.logger.info("hello"))
    engine = open_engine()
    run = run_to_idle(engine, wf.Workflow("w").start_with("a"), {})
    source = engine.target
    engine.close()

    report = copy_store(source, tmp_path / "copy.duckdb")
    assert report.tables["wf_logs"].copied == 1
    copied = open_engine(path=tmp_path / "copy.duckdb")
    assert messages(copied.run(run.id)) == [("a", "INFO", 1, "hello")]
