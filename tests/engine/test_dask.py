"""Attempts on a real Dask LocalCluster of two worker processes (wf.DaskExecutor)."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

import wfkit as wf
from tests.engine import dask_activities as da

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.slow


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def test_results_and_data_come_back_from_the_cluster(open_engine, acts, client) -> None:
    acts.registry.register("count", da.count)
    acts.registry.register("again", da.count)
    engine = open_engine(executor=wf.DaskExecutor(client))
    engine.register(wf.Workflow("w").start_with("count").then("again"))

    run = engine.start("w", {"n": 40})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"n": 42}
    assert run.outputs["count"]["pid"] != os.getpid()


def test_an_address_gets_a_client_of_its_own_closed_with_the_executor(
    open_engine, acts, client
) -> None:
    acts.registry.register("count", da.count)
    with wf.DaskExecutor(client.scheduler.address) as executor:
        assert executor.client is not client
        engine = open_engine(executor=executor)
        engine.register(wf.Workflow("w").start_with("count"))
        run = engine.start("w", {"n": 1})
        engine.run_until_idle()
        assert run.data == {"n": 2}
        assert run.outputs["count"]["pid"] != os.getpid()
        engine.close()
    assert executor.client.status == "closed"
    assert client.status == "running"  # a client given to an executor is left to its owner


def test_a_fan_out_runs_on_both_workers(open_engine, acts, client) -> None:
    acts.registry.register("who", da.whoami)
    executor = wf.DaskExecutor(client)
    engine = open_engine(executor=executor)
    engine.register(
        wf.Workflow("w").start_with().for_each("xs", lambda b: b.then("who"), max_parallelism=8)
    )

    run = engine.start("w", {"xs": list(range(8))})
    engine.start_workers(threads=1)  # one engine thread: the cluster still runs two at once
    run.result(timeout=60)
    engine.stop()

    assert run.status == wf.RunStatus.COMPLETED
    outs = run.outputs["who"]
    assert sorted(o["double"] for o in outs.values()) == [2 * i for i in range(8)]
    spans = sorted((o["began"], o["ended"]) for o in outs.values())
    assert any(b < a_end for (_a, a_end), (b, _b) in itertools.pairwise(spans))
    pids = {o["pid"] for o in outs.values()}
    assert len(pids) == 2 and os.getpid() not in pids
    workers = {where for where, _pid in executor.placed.values()}
    assert workers == set(client.scheduler_info()["workers"])


def test_parallel_branches_sent_to_dask_run_at_the_same_time(open_engine, acts, client) -> None:
    for name in ("a", "b"):
        acts.registry.register(name, da.whoami)
    engine = open_engine(executor=wf.DaskExecutor(client))
    engine.register(
        wf.Workflow("w").start_with().parallel(lambda b: b.then("a"), lambda b: b.then("b"))
    )

    run = engine.start("w", {})
    engine.run_until_idle()  # without workers: the branches still go to Dask, together

    assert run.status == wf.RunStatus.COMPLETED
    a, b = run.outputs["a"], run.outputs["b"]
    assert {a["pid"], b["pid"]} & {os.getpid()} == set()
    assert a["began"] < b["ended"] and b["began"] < a["ended"]


def test_a_worker_killed_mid_attempt_is_a_recorded_crash_and_the_step_re_runs(
    open_engine, acts, client, tmp_path
) -> None:
    acts.registry.register("die", da.die_first)
    engine = open_engine(executor=wf.DaskExecutor(client))
    engine.register(wf.Workflow("w").start_with("die", max_attempts=3, retry_delay="0s"))

    run = engine.start("w", {"marker": str(tmp_path / f"marker-{time.time_ns()}")})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    crashed = events(run, "step.crashed")
    assert [e.attempt for e in crashed] == [1]
    assert "Dask worker" in (crashed[0].error or "")
    assert run.outputs["die"]["attempt"] == 2
    client.wait_for_workers(2, timeout=30)  # the nanny restarts the killed one


def test_an_attempt_timeout_reaches_the_worker(open_engine, acts, client) -> None:
    acts.registry.register("sleepy", da.sleepy)
    engine = open_engine(executor=wf.DaskExecutor(client))
    engine.register(wf.Workflow("w").start_with("sleepy", attempt_timeout="0.5s", max_attempts=1))

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    failed = events(run, "step.failed")
    assert "timed out after 0.5s" in (failed[0].error or "")


def test_cancel_reaches_the_dask_future(open_engine, acts, client) -> None:
    acts.registry.register("sleepy", da.sleepy)
    executor = wf.DaskExecutor(client)
    engine = open_engine(executor=executor)
    engine.register(wf.Workflow("w").start_with("sleepy"))

    run = engine.start("w", {})
    engine.start_workers(threads=1)
    deadline = time.monotonic() + 30
    while not executor._pending and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    engine.cancel(run.id)
    assert executor.drain(30)
    engine.stop()

    assert run.status == wf.RunStatus.CANCELLED


def unimportable(ctx: wf.ActivityContext[Any]) -> None:
    """Stands for a function of a module the workers do not have."""


def test_an_activity_the_workers_cannot_import_fails_with_what_to_do(
    open_engine, acts, client
) -> None:
    fake = type(unimportable)(unimportable.__code__, {"__name__": "not_on_workers"}, "gone")
    fake.__module__ = "not_on_workers"
    fake.__qualname__ = "gone"
    import sys
    import types

    sys.modules["not_on_workers"] = types.ModuleType("not_on_workers")
    sys.modules["not_on_workers"].gone = fake  # type: ignore[attr-defined]
    try:
        acts.registry.register("gone", fake)
        engine = open_engine(executor=wf.DaskExecutor(client))
        engine.register(wf.Workflow("w").start_with("gone", max_attempts=1))
        run = engine.start("w", {})
        engine.run_until_idle()
    finally:
        del sys.modules["not_on_workers"]

    assert run.status == wf.RunStatus.FAILED
    error = events(run, "step.failed")[0].error or ""
    assert "cannot be loaded on the Dask worker" in error
    assert "install its module on the workers" in error


def test_placement_by_queue_keeps_light_steps_in_the_engine(open_engine, acts, client) -> None:
    acts.registry.register("light", da.count)
    acts.registry.register("heavy", da.count, queue="heavy")
    engine = open_engine(executor=wf.DaskExecutor(client, queues=["heavy"]))
    engine.register(wf.Workflow("w").start_with("light").then("heavy"))

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs["light"]["pid"] == os.getpid()
    assert run.outputs["heavy"]["pid"] != os.getpid()
    assert run.data == {"n": 2}


@pytest.fixture(scope="module")
def forgiving_client() -> Iterator[Any]:
    """A LocalCluster with Dask's default allowed-failures (3): Dask re-runs a task whose worker
    died on its own; the start marker must keep that from running the attempt again."""
    cluster = distributed.LocalCluster(
        # a free port for the dashboard: None means Dask's default 8787, which another test's
        # cluster (notebook 07's, on the other xdist worker) may hold, and the start then fails
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.mark.duckdb_only
def test_a_dask_re_run_after_a_lost_worker_is_reported_as_the_crash_not_run_again(
    open_engine, acts, forgiving_client, tmp_path
) -> None:
    acts.registry.register("die", da.die_on_first_call)
    engine = open_engine(executor=wf.DaskExecutor(forgiving_client))
    engine.register(wf.Workflow("w").start_with("die", max_attempts=3, retry_delay="0s"))
    calls = tmp_path / "calls"

    run = engine.start("w", {"calls": str(calls)})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert calls.read_text().split() == ["1", "2"]  # attempt 1 once (killed), then attempt 2
    assert [e.attempt for e in events(run, "step.crashed")] == [1]
    assert run.outputs["die"]["attempt"] == 2
