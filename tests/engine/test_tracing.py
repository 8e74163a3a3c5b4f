"""OpenTelemetry traces: a span per attempt, wait, compensation and run, all in one trace per run
that survives an engine restart and a hand-over between PostgreSQL engines (real SDK, in-memory
exporter)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import wfkit as wf
from tests.engine import tracing_activities as ta

NO_WAIT = {"retry_delay": timedelta(0), "jitter": 0}


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp
    tp.shutdown()


@pytest.fixture
def traced(provider: TracerProvider, open_engine: Any) -> Any:
    """Open engines that send their spans to the test's exporter."""

    def open_(**kw: Any) -> wf.Engine:
        kw.setdefault("tracer_provider", provider)
        return open_engine(**kw)  # type: ignore[no-any-return]

    return open_


def spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return list(exporter.get_finished_spans())


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans(exporter) if s.name == name]


def run_span(exporter: InMemorySpanExporter, workflow: str) -> ReadableSpan:
    (found,) = named(exporter, f"run {workflow}")
    return found


def trace_ids(exporter: InMemorySpanExporter) -> set[int]:
    return {s.context.trace_id for s in spans(exporter) if s.context is not None}


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_every_attempt_is_a_span_named_after_its_activity_under_the_run_span(
    traced, acts, exporter
) -> None:
    acts.noop("fetch", "store")
    engine = traced()
    engine.register(wf.Workflow("etl", 2).start_with("fetch").then("store"))
    run = engine.start("etl", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    root = run_span(exporter, "etl")
    assert root.context is not None
    fetch, store = named(exporter, "fetch")[0], named(exporter, "store")[0]
    assert dict(fetch.attributes or {}) | {"wfkit.queue": "default"} == {
        "wfkit.run_id": run.id,
        "wfkit.workflow_id": "etl",
        "wfkit.version": 2,
        "wfkit.node_id": "fetch",
        "wfkit.attempt": 1,
        "wfkit.activity": "fetch",
        "wfkit.outcome": "succeeded",
        "wfkit.queue": "default",
    }
    assert parent_id(fetch) == parent_id(store) == root.context.span_id
    assert trace_ids(exporter) == {root.context.trace_id}
    assert root.parent is None  # no caller span
    assert root.attributes is not None and root.attributes["wfkit.status"] == "completed"
    assert fetch.status.status_code == StatusCode.UNSET
    assert root.start_time is not None and fetch.start_time is not None
    assert root.start_time <= fetch.start_time
    stored = engine.sql(f"SELECT trace_context FROM wf_instances WHERE run_id = '{run.id}'")
    ((text,),) = stored.fetchall()  # W3C traceparent: version, trace id, span id, flags
    assert text.startswith(f"00-{root.context.trace_id:032x}-{root.context.span_id:016x}-")


def test_a_failed_attempt_has_error_status_and_the_exception_recorded(
    traced, acts, exporter
) -> None:
    tries = {"n": 0}

    def flaky(ctx: Any) -> None:
        tries["n"] += 1
        if tries["n"] == 1:
            raise RuntimeError("upstream said 503")

    acts.add("pull", flaky)
    engine = traced()
    engine.register(wf.Workflow("flaky").start_with("pull", max_attempts=2, **NO_WAIT))
    run = engine.start("flaky", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    first, second = sorted(named(exporter, "pull"), key=lambda s: s.attributes["wfkit.attempt"])  # type: ignore[index]
    assert first.status.status_code == StatusCode.ERROR
    assert "RuntimeError: upstream said 503" in (first.status.description or "")
    (event,) = first.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "RuntimeError"
    assert event.attributes["exception.message"] == "upstream said 503"
    assert "Traceback" in str(event.attributes["exception.stacktrace"])
    assert first.attributes is not None and first.attributes["wfkit.retried"] is True
    assert second.status.status_code == StatusCode.UNSET
    assert second.attributes is not None and second.attributes["wfkit.attempt"] == 2


def test_a_run_failing_for_good_ends_its_run_span_with_error(traced, acts, exporter) -> None:
    def broken(ctx: Any) -> None:
        raise ValueError("bad row 7")

    acts.add("parse", broken)
    engine = traced()
    engine.register(wf.Workflow("bad").start_with("parse", max_attempts=1))
    run = engine.start("bad", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    root = run_span(exporter, "bad")
    assert root.status.status_code == StatusCode.ERROR
    assert root.attributes is not None and root.attributes["wfkit.status"] == "failed"


def test_the_callers_current_span_is_the_run_spans_parent(traced, acts, exporter, provider) -> None:
    acts.noop("work")
    engine = traced()
    engine.register(wf.Workflow("child").start_with("work"))
    with provider.get_tracer("caller").start_as_current_span("handle request") as outer:
        run = engine.start("child", {})
    engine.run_until_idle()

    root = run_span(exporter, "child")
    assert run.status == wf.RunStatus.COMPLETED
    assert parent_id(root) == outer.get_span_context().span_id
    assert trace_ids(exporter) == {outer.get_span_context().trace_id}


def test_spans_an_activity_makes_belong_to_the_runs_trace(traced, acts, exporter, provider) -> None:
    def work(ctx: Any) -> None:
        with provider.get_tracer("mine").start_as_current_span("query db"):
            pass

    acts.add("work", work)
    engine = traced()
    engine.register(wf.Workflow("inner").start_with("work"))
    engine.start("inner", {})
    engine.run_until_idle()

    root = run_span(exporter, "inner")
    (own,) = named(exporter, "query db")
    assert root.context is not None and own.context is not None
    assert own.context.trace_id == root.context.trace_id
    assert parent_id(own) == root.context.span_id


def test_compensations_are_spans_of_their_own_marked_as_such(traced, acts, exporter) -> None:
    acts.noop("reserve", "release")

    def charge(ctx: Any) -> None:
        raise RuntimeError("card declined")

    acts.add("charge", charge)

    def body(s: wf.Steps) -> None:
        s.then("reserve").compensate_with("release")
        s.then("charge", max_attempts=1)

    engine = traced()
    engine.register(wf.Workflow("checkout").start_with().saga(body, id="checkout"))
    run = engine.start("checkout", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    (undo,) = named(exporter, "compensate release")
    assert undo.attributes is not None
    assert undo.attributes["wfkit.compensation"] is True
    assert undo.attributes["wfkit.node_id"] == "reserve"
    assert undo.attributes["wfkit.outcome"] == "compensated"
    assert len(trace_ids(exporter)) == 1


def test_a_wait_is_a_span_from_park_to_resume(traced, acts, exporter, clock) -> None:
    acts.noop("prepare", "publish", "notify")
    engine = traced()
    engine.register(
        wf.Workflow("review")
        .start_with("prepare")
        .approval("ok", on_reject=lambda b: b.then("notify").end())
        .then("publish")
    )
    run = engine.start("review", {})
    engine.run_until_idle()
    clock.advance("90s")
    engine.approve(run.id, "ok", actor="ana")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    (wait,) = named(exporter, "wait approval ok")
    assert wait.attributes is not None
    assert wait.attributes["wfkit.wait"] == "approval"
    assert wait.attributes["wfkit.outcome"] == "approval.approved"
    assert wait.end_time is not None and wait.start_time is not None
    assert wait.end_time - wait.start_time == 90 * 10**9
    root = run_span(exporter, "review")
    assert root.context is not None and parent_id(wait) == root.context.span_id


def test_a_timer_is_a_wait_span(traced, acts, exporter, clock) -> None:
    acts.noop("before", "after")
    engine = traced()
    engine.register(wf.Workflow("cool").start_with("before").delay("7d", id="cool-off"))
    run = engine.start("cool", {})
    engine.run_until_idle()
    clock.advance("7d")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    (wait,) = named(exporter, "wait timer cool-off")
    assert wait.end_time is not None and wait.start_time is not None
    assert wait.end_time - wait.start_time == 7 * 86400 * 10**9


def test_a_called_runs_span_is_a_child_of_its_callers(traced, acts, exporter) -> None:
    acts.noop("charge", "reserve", "ship")
    engine = traced()
    engine.register(wf.Workflow("payment", 1).start_with("charge"))
    engine.register(wf.Workflow("shop", 1).start_with("reserve").call("payment").then("ship"))
    run = engine.start("shop", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    shop, payment = run_span(exporter, "shop"), run_span(exporter, "payment")
    assert shop.context is not None and payment.context is not None
    assert parent_id(payment) == shop.context.span_id
    assert trace_ids(exporter) == {shop.context.trace_id}
    (charge,) = named(exporter, "charge")
    assert parent_id(charge) == payment.context.span_id
    (wait,) = [s for s in spans(exporter) if s.name.startswith("wait call")]
    assert wait.attributes is not None and wait.attributes["wfkit.outcome"] == "call.completed"


def pay_flow() -> wf.Workflow:
    return (
        wf.Workflow("pay")
        .start_with("invoice")
        .wait_for_signal("paid", correlate="order_id")
        .then("ship")
    )


def test_one_trace_across_an_engine_restart(traced, acts, exporter, clock) -> None:
    acts.noop("invoice", "ship")
    first = traced()
    first.register(pay_flow())
    run_id = first.start("pay", {"order_id": "o-1"}).id
    first.run_until_idle()
    first.close()  # the run waits for its signal; its run span ends with the engine

    (opened,) = spans(exporter)[-1:]
    assert opened.name == "run pay"
    assert opened.attributes is not None and opened.attributes["wfkit.run.open"] is True
    clock.advance("1h")
    second = traced()
    assert second.signal("paid", "o-1", {}) is True
    second.run_until_idle()

    assert second.run(run_id).status == wf.RunStatus.COMPLETED
    assert opened.context is not None
    assert trace_ids(exporter) == {opened.context.trace_id}
    (end,) = named(exporter, "run pay (end)")
    assert parent_id(end) == opened.context.span_id
    assert end.attributes is not None and end.attributes["wfkit.status"] == "completed"
    assert end.start_time == opened.start_time  # from the run's creation to its end
    (wait,) = named(exporter, "wait signal paid")  # parked by the first engine
    assert wait.end_time is not None and wait.start_time is not None
    assert wait.end_time - wait.start_time == 3600 * 10**9
    assert {s.name for s in spans(exporter)} == {
        "run pay",
        "invoice",
        "wait signal paid",
        "ship",
        "run pay (end)",
    }
    for span in spans(exporter):
        if span.name != "run pay":
            assert parent_id(span) == opened.context.span_id


def test_two_postgresql_engines_add_to_one_trace(traced, acts, exporter, db_path) -> None:
    if not str(db_path).startswith("postgresql"):
        pytest.skip("two engines at once on one database: PostgreSQL")
    acts.noop("invoice", "ship")
    starter, worker = traced(), traced()
    starter.register(pay_flow())
    run = starter.start("pay", {"order_id": "o-2"})
    starter.run_until_idle()
    assert worker.signal("paid", "o-2", {}) is True
    worker.run_until_idle()
    starter.run_until_idle()

    assert worker.run(run.id).status == wf.RunStatus.COMPLETED
    assert len(trace_ids(exporter)) == 1
    assert {"invoice", "ship", "wait signal paid"} <= {s.name for s in spans(exporter)}


def test_no_tracing_without_opentelemetry(tmp_path: Path) -> None:
    """wfkit imports and runs when opentelemetry cannot be imported; asking for tracing says
    which extra to install."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["opentelemetry"] = None
        import wfkit as wf
        reg = wf.ActivityRegistry()
        reg.register("a", lambda ctx: ctx.data.update(done=True))
        engine = wf.Engine({str(tmp_path / "runs.duckdb")!r}, registry=reg)
        engine.register(wf.Workflow("w").start_with("a"))
        run = engine.start("w", {{}})
        engine.run_until_idle()
        print(run.status.value, run.data, engine.runtime.writer.tracing)
        try:
            wf.Engine(":memory:", tracer_provider=object())
        except wf.UsageError as exc:
            print("refused:", exc)
        print(any(m.startswith("opentelemetry") and sys.modules[m] is not None
                  for m in sys.modules))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    ).stdout.splitlines()
    assert out[0] == "completed {'done': True} None"
    assert out[1].startswith("refused:") and "wfkit[otel]" in out[1]
    assert out[2] == "False"


def test_the_global_tracer_provider_is_used_by_default(db_path, acts, clock) -> None:
    """With no tracer_provider, the engine asks OpenTelemetry's global provider (a no-op one
    until the application sets one): runs work and store no trace."""
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    acts.noop("a")
    with wf.Engine(db_path, clock=clock, registry=acts.registry) as engine:
        engine.register(wf.Workflow("w").start_with("a"))
        run = engine.start("w", {})
        engine.run_until_idle()
        assert run.status == wf.RunStatus.COMPLETED
        rows = engine.sql(f"SELECT trace_context FROM wf_instances WHERE run_id = '{run.id}'")
        assert rows.fetchall() == [(None,)]


@pytest.mark.slow
def test_an_attempt_on_a_dask_worker_process_runs_in_the_runs_trace(
    traced, acts, exporter, client
) -> None:
    acts.registry.register("seen", ta.seen_trace)
    engine = traced(executor=wf.DaskExecutor(client))  # the engine tests' LocalCluster
    engine.register(wf.Workflow("remote").start_with("seen"))
    run = engine.start("remote", {})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    output = run.outputs["seen"]
    root_span = run_span(exporter, "remote")
    assert root_span.context is not None
    assert output["pid"] != os.getpid()
    assert output["trace_id"] == f"{root_span.context.trace_id:032x}"
    assert output["span_id"] == f"{root_span.context.span_id:016x}"
    (attempt,) = named(exporter, "seen")
    assert parent_id(attempt) == root_span.context.span_id


def test_a_provider_that_records_nothing_keeps_nothing_of_ended_runs(open_engine, acts) -> None:
    """opentelemetry-api without an SDK (a no-op provider): runs have no trace, and what the
    engine notes of their attempts goes when they end (no memory per run left behind)."""
    from opentelemetry import trace

    acts.noop("a", "b")
    engine = open_engine(tracer_provider=trace.NoOpTracerProvider())
    engine.register(wf.Workflow("quiet").start_with("a").then("b"))
    runs = [engine.start("quiet", {}) for _ in range(20)]
    engine.run_until_idle()
    assert {run.status for run in runs} == {wf.RunStatus.COMPLETED}
    tracing = engine.runtime.writer.tracing
    assert tracing is not None
    assert (tracing._ended, tracing._created, tracing._live, tracing._new) == ({}, {}, {}, {})
    assert not any(tracing._parents.get(run.id) for run in runs)
    assert [r for r in tracing._parents if r in {run.id for run in runs}] == []
