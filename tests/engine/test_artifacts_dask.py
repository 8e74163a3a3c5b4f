"""Artifacts of attempts that run on a real Dask LocalCluster of two worker processes: stored
on the worker, loaded on another worker by a later step and in the engine's process."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import wfkit as wf
from tests.engine import artifact_child
from tests.engine.conftest import Activities, OpenEngine
from wfkit.engine.artifacts import ARTIFACT_KEY

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.slow


def test_an_artifact_stored_on_a_worker_loads_on_a_worker_and_here(
    open_engine: OpenEngine, acts: Activities, client: Any, tmp_path: Path
) -> None:
    acts.registry.register("make", artifact_child.make)
    acts.registry.register("check", artifact_child.check)
    engine = open_engine(executor=wf.DaskExecutor(client), artifacts=tmp_path / "shared")
    engine.register(wf.Workflow("far").start_with("make").then("check"))
    run = engine.start("far", {})
    engine.run_until_idle()
    assert run.status is wf.RunStatus.COMPLETED
    made, checked = run.outputs["make"], run.outputs["check"]
    assert made["pid"] != os.getpid() and checked["pid"] != os.getpid()
    assert checked["total"] == 4999950000
    assert made["grid"][ARTIFACT_KEY].startswith((tmp_path / "shared").as_uri())
    assert int(run.load(made["grid"]).sum()) == 4999950000
    assert engine.purge(older_than="0s") == 1
    assert not (tmp_path / "shared" / run.id).exists()


def test_a_worker_refuses_references_the_engine_did_not_issue_to_the_run(
    open_engine: OpenEngine, acts: Activities, client: Any, tmp_path: Path
) -> None:
    root = tmp_path / "shared"
    acts.registry.register("make", artifact_child.make)
    acts.registry.register("peek", artifact_child.peek)
    engine = open_engine(executor=wf.DaskExecutor(client), artifacts=root)
    engine.register(wf.Workflow("made").start_with("make"))
    engine.register(wf.Workflow("peeks").start_with("peek", max_attempts=1))
    made = engine.start("made", {})
    engine.run_until_idle()
    grid = made.outputs["make"]["grid"]
    forged = root / made.id / "make" / "2-0000000000000000.npy"  # written behind its back
    forged.write_bytes(b"planted")
    fake = {**grid, ARTIFACT_KEY: forged.as_uri(), "size": 7}
    another = engine.start("peeks", {"ref": grid})  # another run's artifact
    planted = engine.start("peeks", {"ref": fake})
    engine.run_until_idle()
    for run, why in ((another, "outside this run's family"), (planted, "did not store it")):
        assert run.status is wf.RunStatus.FAILED
        [failed] = [e for e in run.history() if e.kind == "step.failed"]
        assert why in (failed.error or ""), failed.error
