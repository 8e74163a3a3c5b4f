"""Activity queues: ``@wf.activity(name, queue="gpu")`` and ``start_workers(queues=[...])``.

A pool that does not serve a step's queue leaves the step ready, blocked and explained;
``run_until_idle()`` runs every queue; on PostgreSQL a run waiting for a queue is handed over to
an engine whose workers serve it, and only such an engine claims it.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import wfkit as wf
from tests.engine.conftest import Activities, OpenEngine
from tests.engine.helpers import events, is_postgres, run_to_idle
from tests.polling import eventually
from wfkit.engine.vocabulary import NodeStatus

GPU_WAITS = (
    "step 'render' is ready: waits for queue 'gpu', which no worker of this engine serves; "
    "start_workers(queues=['gpu']) or run `wfkit worker --queue gpu`"
)


def jobs(engine: wf.Engine, run_id: str) -> list[tuple[str, str]]:
    rows = engine.sql(f"SELECT node_id, status FROM wf_jobs WHERE run_id = '{run_id}'").fetchall()
    return sorted((str(n), str(s)) for n, s in rows)


def instance(engine: wf.Engine, run_id: str) -> tuple[Any, Any]:
    """The run's (owner, wants_queue) on a shared store."""
    sql = f"SELECT owner, wants_queue FROM wf_instances WHERE run_id = '{run_id}'"
    row = engine.sql(sql).fetchall()[0]
    return row[0], row[1]


def gpu_acts(acts: Activities, *default: str, gpu: tuple[str, ...] = ("render",)) -> None:
    """Recording activities: ``default`` on the default queue, ``gpu`` on queue 'gpu'."""
    acts.noop(*default)
    for name in gpu:
        acts.registry.register(name, lambda ctx, n=name: acts.record(n, ctx), queue="gpu")


# --- the registry ---------------------------------------------------------------------------------


def test_an_activity_belongs_to_the_default_queue_unless_it_names_one() -> None:
    registry = wf.ActivityRegistry()
    registry.register("a", lambda ctx: None)

    @registry.activity("render", queue="gpu")
    def render(ctx: Any) -> None:
        return None

    assert registry.queue_of("a") == "default"
    assert registry.queue_of("render") == "gpu"
    assert registry.queue_of("unknown") == "default"
    assert registry.queues() == ["default", "gpu"]
    registry.register("render", render)  # registered again without a queue: default
    assert registry.queue_of("render") == "default"
    assert registry.queues() == ["default"]


@pytest.mark.parametrize("queue", ["", "  ", " gpu", None, 7])
def test_a_bad_queue_name_is_refused_and_registers_nothing(queue: Any) -> None:
    registry = wf.ActivityRegistry()
    with pytest.raises(wf.UsageError, match=r"queue of activity 'render' must be a non-empty"):
        registry.register("render", lambda ctx: None, queue=queue)
    assert "render" not in registry


# --- one engine -----------------------------------------------------------------------------------


def test_steps_of_an_unserved_queue_stay_ready_and_are_explained(
    open_engine: OpenEngine, acts: Activities
) -> None:
    gpu_acts(acts, "prepare")
    engine = open_engine()
    engine.register(wf.Workflow("w").start_with("prepare").then("render"))
    engine.start_workers(2, queues=["default"])
    run = engine.start("w", {})

    assert eventually(lambda: jobs(engine, run.id) == [("render", "blocked")]), jobs(engine, run.id)
    assert acts.names() == ["prepare"]
    assert run.status == wf.RunStatus.RUNNING
    assert run.explain() == GPU_WAITS
    assert run.node_statuses()["render"] == NodeStatus.BLOCKED
    if is_postgres(engine.target):  # handed over: only an engine serving 'gpu' claims it
        assert eventually(lambda: instance(engine, run.id) == (None, "gpu"))
    time.sleep(0.2)
    assert acts.names() == ["prepare"]  # nothing ran it meanwhile

    engine.stop()
    engine.run_until_idle()  # inline driving runs every queue
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["prepare", "render"]
    assert jobs(engine, run.id) == []


def test_run_until_idle_runs_every_queue(open_engine: OpenEngine, acts: Activities) -> None:
    gpu_acts(acts, "prepare", gpu=("render", "encode"))
    engine = open_engine()
    run = run_to_idle(
        engine, wf.Workflow("w").start_with("prepare").then("render").then("encode"), {}
    )
    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["prepare", "render", "encode"]


def test_workers_of_a_queue_take_its_steps_and_leave_the_others(
    open_engine: OpenEngine, acts: Activities
) -> None:
    gpu_acts(acts, "publish")
    engine = open_engine()
    engine.register(wf.Workflow("w").start_with("render").then("publish"))
    engine.start_workers(2, queues=["gpu"])
    run = engine.start("w", {})

    assert eventually(lambda: jobs(engine, run.id) == [("publish", "blocked")])
    assert acts.names() == ["render"]
    assert run.explain() == (
        "step 'publish' is ready: waits for queue 'default', which no worker of this engine "
        "serves; start_workers(queues=['default']) or run `wfkit worker --queue default`"
    )
    engine.stop()
    engine.start_workers(2)  # every queue
    assert run.result(timeout=15) == {}
    assert acts.names() == ["render", "publish"]


def test_workers_started_without_queues_serve_every_queue(
    open_engine: OpenEngine, acts: Activities
) -> None:
    gpu_acts(acts, "prepare")
    engine = open_engine()
    engine.register(wf.Workflow("w").start_with("prepare").then("render"))
    engine.start_workers(2)
    runs = [engine.start("w", {}) for _ in range(5)]
    for run in runs:
        assert run.result(timeout=15) == {}
    assert acts.count("render") == 5


def test_a_pool_of_two_queues_completes_a_run_alternating_them(
    open_engine: OpenEngine, acts: Activities
) -> None:
    gpu_acts(acts, "a", "b", "c", gpu=("render", "encode"))
    engine = open_engine()
    flow = wf.Workflow("w").start_with("a").then("render").then("b").then("encode").then("c")
    engine.register(flow)
    engine.start_workers(2, queues=["gpu", "default"])
    run = engine.start("w", {})
    assert run.result(timeout=15) == {}
    assert acts.names() == ["a", "render", "b", "encode", "c"]


def test_steps_queued_inline_before_the_workers_start_wait_for_their_queue(
    open_engine: OpenEngine, acts: Activities
) -> None:
    gpu_acts(acts)
    engine = open_engine()
    engine.register(wf.Workflow("w").start_with("render"))
    run = engine.start("w", {})  # its step is ready in memory before any pool exists
    engine.start_workers(1, queues=["default"])
    assert eventually(lambda: jobs(engine, run.id) == [("render", "blocked")])
    assert acts.names() == []
    assert run.explain() == GPU_WAITS


def test_a_compensation_runs_on_the_queue_of_its_activity(
    open_engine: OpenEngine, acts: Activities
) -> None:
    acts.noop("book")
    acts.add("charge", lambda ctx: 1 / 0)
    acts.registry.register("unbook", lambda ctx: acts.record("unbook", ctx), queue="gpu")
    engine = open_engine()
    flow = (
        wf.Workflow("w")
        .start_with()
        .saga(lambda s: s.then("book").compensate_with("unbook").then("charge", max_attempts=1))
    )
    engine.register(flow)
    engine.start_workers(2, queues=["default"])
    run = engine.start("w", {})

    waits = (
        "compensation 'unbook' of 'book' is ready: waits for queue 'gpu', which no worker of "
        "this engine serves; start_workers(queues=['gpu']) or run `wfkit worker --queue gpu`"
    )
    assert eventually(lambda: run.explain() == waits), run.explain()
    assert run.status == wf.RunStatus.COMPENSATING
    assert run.node_statuses()["book"] == NodeStatus.BLOCKED
    time.sleep(0.2)
    assert acts.names() == ["book", "charge"]
    engine.stop()
    engine.start_workers(1, queues=["gpu"])
    with pytest.raises(wf.WorkflowFailed):
        run.result(timeout=15)
    assert acts.names() == ["book", "charge", "unbook"]


# --- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ("gpu", r"got the string 'gpu'; write queues=\['gpu'\]"),
        ([], r"queues=\[\] would serve no queue"),
        (["gpu", ""], r"queue of a worker pool must be a non-empty name"),
        ([None], r"queue of a worker pool must be a non-empty name"),
        (5, r"queues must be a list of queue names, got 5"),
    ],
)
def test_bad_queues_are_refused_and_start_no_worker(
    open_engine: OpenEngine, queues: Any, message: str
) -> None:
    engine = open_engine()
    with pytest.raises(wf.UsageError, match=message):
        engine.start_workers(2, queues=queues)
    assert not engine.runtime.scheduler.running
    engine.start_workers(1, queues=["gpu"])  # a good call afterwards works
    assert engine.runtime.scheduler.queues == {"gpu"}


def test_an_engine_has_one_pool_a_second_start_is_refused(
    open_engine: OpenEngine, acts: Activities
) -> None:
    gpu_acts(acts, "prepare")
    engine = open_engine()
    engine.register(wf.Workflow("w").start_with("prepare").then("render"))
    engine.start_workers(1, queues=["default"])
    with pytest.raises(wf.UsageError, match=r"already running \(serving \['default'\]\)"):
        engine.start_workers(1, queues=["gpu"])
    assert engine.runtime.scheduler.queues == {"default"}  # the pool it had is unchanged
    engine.stop()
    engine.start_workers(1, queues=["default", "gpu"])
    assert engine.start("w", {}).result(timeout=15) == {}


# --- many engines on PostgreSQL -------------------------------------------------------------------


@pytest.mark.parametrize("db_path", ["postgres"], indirect=True)
def test_two_engines_hand_a_run_alternating_queues_to_each_other(
    open_engine: OpenEngine, acts: Activities
) -> None:
    gpu_acts(acts, "a", "b", "c", gpu=("render", "encode"))
    flow = wf.Workflow("w").start_with("a").then("render").then("b").then("encode").then("c")
    cpu = open_engine(clock=None)
    gpu = open_engine(clock=None)
    cpu.register(flow)
    gpu.register(flow)
    cpu.start_workers(2, queues=["default"])
    gpu.start_workers(2, queues=["gpu"])
    runs = [cpu.start("w", {}) for _ in range(3)]
    for run in runs:
        assert run.result(timeout=30) == {}
    assert acts.names().count("render") == 3
    for run in runs:
        steps = events(run, "step.completed")
        assert [e.node_id for e in steps] == ["a", "render", "b", "encode", "c"]
    assert all(instance(cpu, run.id) == (None, None) for run in runs)


@pytest.mark.parametrize("db_path", ["postgres"], indirect=True)
def test_an_engine_not_serving_the_queue_never_claims_a_run_handed_over_for_it(
    open_engine: OpenEngine, acts: Activities
) -> None:
    gpu_acts(acts, "prepare")
    flow = wf.Workflow("w").start_with("prepare").then("render")
    first = open_engine(clock=None)
    other = open_engine(clock=None)
    first.register(flow)
    first.start_workers(1, queues=["default"])
    run = first.start("w", {})
    assert eventually(lambda: instance(first, run.id) == (None, "gpu"))
    other.start_workers(1, queues=["default", "cpu"])
    time.sleep(0.5)
    assert instance(other, run.id) == (None, "gpu")  # neither engine took it back
    assert acts.names() == ["prepare"]
    notebook = open_engine(clock=None)  # runs no workers: says where the run went
    assert notebook.run(run.id).explain() == (
        "step 'render' is ready: waits for queue 'gpu'; the run was handed over to the engines "
        "whose workers serve it, and none has taken it yet (start_workers(queues=['gpu']) or "
        "run `wfkit worker --queue gpu`)"
    )

    gpu = open_engine(clock=None)
    gpu.start_workers(1, queues=["gpu"])
    assert gpu.run(run.id).result(timeout=15) == {}
    assert acts.names() == ["prepare", "render"]


@pytest.mark.parametrize("db_path", ["postgres"], indirect=True)
def test_engines_whose_registries_disagree_on_a_queue_do_not_pass_a_run_back_and_forth(
    open_engine: OpenEngine, acts: Activities, caplog: pytest.LogCaptureFixture
) -> None:
    """Here 'render' is on queue 'gpu'; in the other process it is on 'default', and that
    process serves only 'gpu'. The run handed over for 'gpu' runs there, once."""
    gpu_acts(acts, "prepare")
    flow = wf.Workflow("w").start_with("prepare").then("render")
    elsewhere = wf.ActivityRegistry()
    elsewhere.register("render", lambda ctx: acts.record("render", ctx))  # default queue
    here = open_engine(clock=None)
    there = open_engine(clock=None, registry=elsewhere)
    here.register(flow)
    here.start_workers(1, queues=["default"])
    with caplog.at_level(logging.WARNING, logger="wfkit.engine"):
        there.start_workers(1, queues=["gpu"])
        run = here.start("w", {})
        assert run.result(timeout=15) == {}
    assert acts.names() == ["prepare", "render"]
    assert "the engines' registries disagree on the queue of an activity" in caplog.text


@pytest.mark.parametrize("db_path", ["postgres"], indirect=True)
def test_a_run_handed_over_reaches_an_engine_that_backed_off_from_it_before(
    open_engine: OpenEngine, acts: Activities
) -> None:
    """The gpu engine takes the new run first and gives it back ('prepare' is not registered
    there), so it backs off from it for a lease period. Once the other engine has run 'prepare'
    and handed the run over for 'gpu', the run has moved on: the gpu engine takes it at once,
    not after its back-off."""
    gpu_acts(acts, "prepare")
    flow = wf.Workflow("w").start_with("prepare").then("render")
    elsewhere = wf.ActivityRegistry()
    elsewhere.register("render", lambda ctx: acts.record("render", ctx), queue="gpu")
    here = open_engine(clock=None)
    there = open_engine(clock=None, registry=elsewhere, lease="60s")
    here.register(flow)
    there.start_workers(1, queues=["gpu"])
    run = here.start("w", {})
    leases = there.runtime.writer.owner.leases  # type: ignore[attr-defined]
    assert eventually(lambda: run.id in leases.backoff and instance(here, run.id)[0] is None)

    here.start_workers(1, queues=["default"])
    assert run.result(timeout=15) == {}  # well within the 60 s back-off
    assert acts.names() == ["prepare", "render"]


@pytest.mark.parametrize("db_path", ["postgres"], indirect=True)
def test_a_run_no_engine_can_advance_stays_with_the_engines_of_its_queue(
    open_engine: OpenEngine, acts: Activities
) -> None:
    """'x' (default queue) is registered only in an engine serving 'gpu'; the engine serving
    'default' lacks it. The run settles on the 'default' side, given back and looked at again
    after each back-off there, and never goes back to the 'gpu' engine."""
    acts.noop("x")
    flow = wf.Workflow("w").start_with("x")
    full = open_engine(clock=None)
    full.register(flow)
    lacking = open_engine(clock=None, lease="1s", registry=wf.ActivityRegistry())
    lacking.registry.register("other", lambda ctx: None)
    gpu = open_engine(clock=None, lease="1s")
    lacking.start_workers(1, queues=["default"])
    gpu.start_workers(1, queues=["gpu"])
    run = full.start("w", {})

    assert eventually(lambda: instance(full, run.id)[1] == "default"), instance(full, run.id)
    owners = set()
    deadline = time.monotonic() + 2.5  # more than two back-off periods
    while time.monotonic() < deadline:
        owners.add(instance(full, run.id)[0])
        time.sleep(0.01)
    assert gpu.runtime.writer.owner.name not in owners
    assert acts.names() == []

    served = open_engine(clock=None)
    served.start_workers(1, queues=["default"])
    assert served.run(run.id).result(timeout=15) == {}
    assert acts.names() == ["x"]


QUEUE_MODULE = """\
import wfkit as wf


@wf.activity("qtest.prepare")
def prepare(ctx):
    return None


@wf.activity("qtest.render", queue="gpu")
def render(ctx):
    return None


flow = wf.Workflow("qtest").start_with("qtest.prepare").then("qtest.render")
"""


@pytest.mark.parametrize("db_path", ["postgres"], indirect=True)
def test_wfkit_worker_processes_of_two_queues_complete_a_run_together(
    db_path: str, tmp_path: Path, open_engine: OpenEngine
) -> None:
    from wfkit.worker import run_worker

    module = tmp_path / "queue_module.py"
    module.write_text(QUEUE_MODULE)
    workers: list[tuple[threading.Thread, threading.Event, list[str]]] = []

    def worker(*queues: str) -> list[str]:
        stop, lines = threading.Event(), []
        kwargs = {"queues": list(queues), "stop": stop, "echo": lines.append}
        thread = threading.Thread(target=run_worker, args=(db_path, [str(module)]), kwargs=kwargs)
        thread.start()
        workers.append((thread, stop, lines))
        assert eventually(lambda: lines), "the worker did not start"
        return lines

    try:
        lines = worker("gpu")
        assert "(queues gpu)" in lines[0]
        engine = open_engine(clock=None, registry=wf.default_registry)
        run = engine.start("qtest", {})
        # its first step is on the default queue: the gpu worker hands the run over
        assert eventually(lambda: instance(engine, run.id) == (None, "default"))
        assert run.status == wf.RunStatus.RUNNING

        worker("default")
        # (run.result() here would drive the run inline: this engine runs no workers)
        assert eventually(lambda: run.status == wf.RunStatus.COMPLETED, 20), run.explain()
        done = [e.node_id for e in run.history() if e.kind == "step.completed"]
        assert done == ["qtest.prepare", "qtest.render"]
    finally:
        for thread, stop, _ in workers:
            stop.set()
            thread.join(20)
