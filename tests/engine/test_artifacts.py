"""Artifacts: a step returns ``wf.Artifact(value)``, the engine stores it through fsspec and
records a reference; a later step (and a notebook, through the run handle) loads it back.
Every test runs on DuckDB and PostgreSQL with a real file root (or a real memory:// root)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os
import pickle
import sys
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest

import wfkit as wf
from tests.engine import artifact_child
from tests.engine.conftest import Activities, OpenEngine
from tests.engine.helpers import rows, run_to_idle
from wfkit.engine.artifact_records import ArtifactRecord, CarriedRecords
from wfkit.engine.artifacts import ARTIFACT_KEY, ArtifactStore, default_root, load_artifact


def _local(uri: str) -> Path:
    assert uri.startswith("file://"), uri
    return Path(uri.removeprefix("file://"))


def _error(run: wf.Run) -> str:
    return "\n".join(e.error or "" for e in run.history() if e.kind == "step.failed")


def _two_steps(acts: Activities, make: Any, check: Any) -> wf.Workflow:
    acts.add("make", make)
    acts.add("check", check)
    return wf.Workflow("art").start_with("make").then("check")


def _round_trip(open_engine: OpenEngine, acts: Activities, tmp_path: Path, value: Any) -> Any:
    """Run make -> check where make returns ``value`` as an artifact; what check loaded."""
    seen: dict[str, Any] = {}

    def check(ctx: Any) -> dict[str, Any]:
        seen["value"] = ctx.load(ctx.outputs["make"])
        return {"ok": True}

    flow = _two_steps(acts, lambda ctx: wf.Artifact(value), check)
    engine = open_engine(artifacts=tmp_path / "store")
    run = run_to_idle(engine, flow)
    assert run.status is wf.RunStatus.COMPLETED, _error(run)
    ref = run.outputs["make"]
    assert ref[ARTIFACT_KEY].startswith((tmp_path / "store").as_uri())
    assert _local(ref[ARTIFACT_KEY]).is_file()
    return seen["value"]


def test_a_pandas_frame_goes_through_parquet(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    frame = pd.DataFrame({"x": range(1000), "name": [f"n{i}" for i in range(1000)]})
    loaded = _round_trip(open_engine, acts, tmp_path, frame)
    assert isinstance(loaded, pd.DataFrame)
    pd.testing.assert_frame_equal(loaded, frame)


def test_a_polars_frame_comes_back_as_polars(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    frame = pl.DataFrame({"x": list(range(500)), "y": [i / 3 for i in range(500)]})
    loaded = _round_trip(open_engine, acts, tmp_path, frame)
    assert isinstance(loaded, pl.DataFrame)
    assert loaded.equals(frame)


def test_a_numpy_array_keeps_dtype_and_shape(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    array = np.arange(120, dtype=np.float32).reshape(4, 5, 6)
    loaded = _round_trip(open_engine, acts, tmp_path, array)
    assert loaded.dtype == np.float32 and loaded.shape == (4, 5, 6)
    assert np.array_equal(loaded, array)


def test_bytes_and_text_round_trip(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    blob = bytes(range(256)) * 2000  # 512 KB: over the data document's limit
    assert _round_trip(open_engine, acts, tmp_path, blob) == blob


def test_a_file_is_copied_in_and_loads_as_a_local_path(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    model = tmp_path / "modèle.bin"
    model.write_bytes(b"weights" * 1000)
    loaded = _round_trip(open_engine, acts, tmp_path, model)
    assert isinstance(loaded, Path) and loaded.read_bytes() == b"weights" * 1000
    model.unlink()  # the stored copy does not depend on the original
    assert loaded.read_bytes() == b"weights" * 1000


def test_the_reference_is_in_outputs_and_data_with_size_hash_and_media_type(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    blob = b"\x01\x02" * 300_000

    def make(ctx: Any) -> dict[str, Any]:
        ctx.data["raw"] = wf.Artifact(blob, media_type="application/x-demo", name="raw")
        return {"rows": 3, "table": wf.Artifact(pd.DataFrame({"a": [1, 2, 3]}))}

    def check(ctx: Any) -> None:
        assert ctx.load(ctx.data["raw"]) == blob
        assert ctx.load(ctx.outputs["make"]["table"])["a"].tolist() == [1, 2, 3]

    flow = _two_steps(acts, make, check)
    engine = open_engine(artifacts=tmp_path / "store")
    run = run_to_idle(engine, flow, {"n": 1})
    assert run.status is wf.RunStatus.COMPLETED, _error(run)
    raw = run.data["raw"]
    assert raw["size"] == len(blob)
    assert raw["sha256"] == hashlib.sha256(blob).hexdigest()
    assert raw["media_type"] == "application/x-demo"
    assert raw["format"] == "bytes" and raw["name"] == "raw"
    assert _local(raw[ARTIFACT_KEY]).read_bytes() == blob
    table = run.outputs["make"]["table"]
    assert table["media_type"] == "application/vnd.apache.parquet"
    assert table["format"] == "pandas"
    # what wf_outputs holds is the small reference, not the content
    [(stored,)] = rows(engine, "SELECT output FROM wf_outputs WHERE node_id = 'make'")
    decoded = json.loads(stored) if isinstance(stored, str) else stored
    assert decoded == {"rows": 3, "table": table}
    assert len(json.dumps(run.data)) < 1000
    # a notebook reads them through the run handle or the engine
    assert run.load(raw) == blob
    assert engine.load_artifact(table)["a"].tolist() == [1, 2, 3]


def test_a_memory_root(open_engine: OpenEngine, acts: Activities) -> None:
    root = f"memory://wfkit-test-{uuid.uuid4().hex[:8]}"
    array = np.ones((300, 300))
    flow = _two_steps(
        acts,
        lambda ctx: wf.Artifact(array),
        lambda ctx: {"total": float(ctx.load(ctx.outputs["make"]).sum())},
    )
    engine = open_engine(artifacts=root)
    run = run_to_idle(engine, flow)
    assert run.status is wf.RunStatus.COMPLETED, _error(run)
    assert run.outputs["check"] == {"total": 90000.0}
    assert run.outputs["make"][ARTIFACT_KEY].startswith("memory://")
    assert engine.artifacts == root


def test_a_chained_root_keeps_its_chain_in_the_references(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    root = f"simplecache::file://{tmp_path / 'chained'}"
    flow = _two_steps(
        acts,
        lambda ctx: wf.Artifact(b"through a cache"),
        lambda ctx: {"got": ctx.load(ctx.outputs["make"]).decode()},
    )
    engine = open_engine(artifacts=root)
    run = run_to_idle(engine, flow)
    assert run.status is wf.RunStatus.COMPLETED, _error(run)
    assert run.outputs["check"] == {"got": "through a cache"}
    assert run.outputs["make"][ARTIFACT_KEY].startswith(f"{root}/{run.id}/make/")
    plain = {**run.outputs["make"], ARTIFACT_KEY: run.outputs["make"][ARTIFACT_KEY][13:]}
    with pytest.raises(wf.ArtifactError, match="does not lie under"):
        run.load(plain)  # the same file without the root's chain is not the engine's URI


def test_the_default_root_is_next_to_the_duckdb_file(tmp_path: Path) -> None:
    assert (
        default_root(str(tmp_path / "runs.duckdb")) == (tmp_path / "runs.duckdb.artifacts").as_uri()
    )
    assert default_root(":memory:") != default_root(":memory:")  # one folder per engine
    assert "/127.0.0.1-5432-wf/" in default_root("postgresql://127.0.0.1:5432/wf") + "/"


def test_a_document_over_max_payload_without_artifact_is_refused_naming_artifact(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    def make(ctx: Any) -> None:
        ctx.data["raw"] = "x" * 300_000

    acts.add("make", make)
    engine = open_engine(artifacts=tmp_path / "store")
    run = run_to_idle(engine, wf.Workflow("big").start_with("make", policy={"max_attempts": 1}))
    assert run.status is wf.RunStatus.FAILED
    assert "wf.Artifact" in _error(run)


def test_a_failed_attempt_leaves_no_file_and_its_retry_a_working_reference(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    def make(ctx: Any) -> Any:
        if ctx.attempt == 1:  # stored, then the attempt fails: its output cannot be recorded
            return {"table": wf.Artifact(b"first" * 100), "bad": {1, 2}}
        return {"table": wf.Artifact(b"second" * 100)}

    acts.add("make", make)
    acts.add("check", lambda ctx: {"got": ctx.load(ctx.outputs["make"]["table"]).decode()[:6]})
    flow = (
        wf.Workflow("retry")
        .start_with("make", policy={"max_attempts": 2, "retry_delay": "0s"})
        .then("check")
    )
    engine = open_engine(artifacts=tmp_path / "store")
    run = run_to_idle(engine, flow)
    assert run.status is wf.RunStatus.COMPLETED, _error(run)
    assert run.outputs["check"] == {"got": "second"}
    files = sorted(p.name for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert len(files) == 1 and files[0].startswith("2-")


def test_an_unsupported_value_fails_the_attempt_with_a_clear_error(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    acts.add("make", lambda ctx: wf.Artifact(object()))
    engine = open_engine(artifacts=tmp_path / "store")
    run = run_to_idle(engine, wf.Workflow("bad").start_with("make", policy={"max_attempts": 1}))
    assert run.status is wf.RunStatus.FAILED
    assert "cannot store" in _error(run) and "numpy array" in _error(run)


def test_purge_deletes_the_artifacts_of_purged_runs_and_archive_keeps_them(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path, clock: wf.ManualClock
) -> None:
    acts.add("make", lambda ctx: wf.Artifact(ctx.data["blob"].encode()))
    engine = open_engine(artifacts=tmp_path / "store")
    flow = wf.Workflow("p").start_with("make")
    first = run_to_idle(engine, flow, {"blob": "one"})
    second = engine.start("p", {"blob": "two"})
    engine.run_until_idle()
    first_ref = first.outputs["make"]
    first_file = _local(first_ref[ARTIFACT_KEY])
    second_file = _local(second.outputs["make"][ARTIFACT_KEY])
    assert first_file.is_file() and second_file.is_file()
    clock.advance("2d")
    report = engine.archive(tmp_path / "archive", older_than="1d")
    assert report.runs == 2
    assert report.rows["wf_artifacts"] == 2  # the records go into the archive with the runs
    assert first_file.is_file()  # the archived records still vouch for the files kept
    assert engine.load_artifact(json.loads(json.dumps(first_ref)), archive=tmp_path / "archive")
    with pytest.raises(wf.ArtifactError, match="did not store it"):
        engine.load_artifact(first_ref)  # the store no longer knows the archived run
    third = engine.start("p", {"blob": "three"})
    engine.run_until_idle()
    third_ref = third.outputs["make"]
    third_file = _local(third_ref[ARTIFACT_KEY])
    clock.advance("2d")
    assert engine.purge(older_than="1d") == 1
    assert not third_file.exists()
    assert not (tmp_path / "store" / third.id).exists()
    assert rows(engine, "SELECT count(*) FROM wf_artifacts") == [(0,)]


def test_a_changed_or_missing_artifact_raises_an_error_naming_it(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    acts.add("make", lambda ctx: wf.Artifact(b"precious" * 10))
    engine = open_engine(artifacts=tmp_path / "store")
    run = run_to_idle(engine, wf.Workflow("c").start_with("make"))
    ref = run.outputs["make"]
    path = _local(ref[ARTIFACT_KEY])
    path.write_bytes(b"tampered" * 10)
    with pytest.raises(wf.ArtifactError, match="was changed since it was stored") as caught:
        run.load(ref)
    assert ref[ARTIFACT_KEY] in str(caught.value)
    tampered = hashlib.sha256(b"tampered" * 10).hexdigest()
    assert tampered[:12] not in str(caught.value) and "bytes" not in str(caught.value)
    path.unlink()
    with pytest.raises(wf.ArtifactError, match="missing") as caught:
        run.load(ref)
    assert ref[ARTIFACT_KEY] in str(caught.value)
    with pytest.raises(wf.UsageError, match="artifact reference"):
        run.load({"rows": 3})


def test_a_later_step_sees_a_changed_artifact_as_a_failed_attempt(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    def tamper(ctx: Any) -> None:
        _local(ctx.outputs["make"][ARTIFACT_KEY]).write_bytes(b"xyz")

    acts.add("make", lambda ctx: wf.Artifact(b"abc"))
    acts.add("tamper", tamper)
    acts.add("check", lambda ctx: ctx.load(ctx.outputs["make"]))
    flow = (
        wf.Workflow("c2")
        .start_with("make")
        .then("tamper")
        .then("check", policy={"max_attempts": 1})
    )
    engine = open_engine(artifacts=tmp_path / "store")
    run = run_to_idle(engine, flow)
    assert run.status is wf.RunStatus.FAILED
    assert "was changed since it was stored" in _error(run)
    assert run.outputs["make"][ARTIFACT_KEY] in _error(run)


def test_a_reference_a_step_made_up_is_refused_in_a_later_step(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    def make(ctx: Any) -> Any:  # a file under the root, written behind the engine's back
        return ArtifactStore((tmp_path / "store").as_uri()).save(
            wf.Artifact(b"abc"), ctx.instance_id, "elsewhere", "1"
        )

    acts.add("make", make)
    acts.add("check", lambda ctx: ctx.load(ctx.outputs["make"]))
    flow = wf.Workflow("c3").start_with("make").then("check", policy={"max_attempts": 1})
    engine = open_engine(artifacts=tmp_path / "store")
    run = run_to_idle(engine, flow)
    assert run.status is wf.RunStatus.FAILED
    assert "was refused: this engine did not store it" in _error(run)
    assert "elsewhere" in _error(run)


def test_unicode_node_ids_and_names(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    acts.add("données", lambda ctx: wf.Artifact("résumé ✓ 数据", name="résumé/第一"))
    acts.add("lire", lambda ctx: {"text": ctx.load(ctx.outputs["étape"])})
    flow = wf.Workflow("uni").start_with("données", id="étape").then("lire")
    engine = open_engine(artifacts=tmp_path / "störe")
    run = run_to_idle(engine, flow)
    assert run.status is wf.RunStatus.COMPLETED, _error(run)
    assert run.outputs["lire"] == {"text": "résumé ✓ 数据"}
    ref = run.outputs["étape"]
    assert ref["name"] == "résumé/第一" and ref["media_type"].startswith("text/plain")
    assert _local(ref[ARTIFACT_KEY]).parent.name == "étape"


def test_for_each_items_store_one_artifact_each(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    acts.add("make", lambda ctx: wf.Artifact(np.full(10, ctx.item)))
    acts.add("sum", lambda ctx: {"total": sum(int(ctx.load(r).sum()) for r in _refs(ctx))})
    flow = wf.Workflow("fe").start_with().for_each("items", lambda b: b.then("make")).then("sum")
    engine = open_engine(artifacts=tmp_path / "store")
    run = run_to_idle(engine, flow, {"items": [1, 2, 3, 4]})
    assert run.status is wf.RunStatus.COMPLETED, _error(run)
    assert run.outputs["sum"] == {"total": 100}
    assert len({r["$artifact"] for r in run.outputs["make"].values()}) == 4


def _refs(ctx: Any) -> list[Any]:
    return list(ctx.outputs["make"].values())


def test_a_job_with_its_artifact_root_pickles(open_engine: OpenEngine, acts: Activities) -> None:
    root = "memory://wfkit-pickle"
    acts.add("make", lambda ctx: None)
    engine = open_engine(artifacts=root)
    engine.register(wf.Workflow("j").start_with("make"))
    run = engine.start("j", {"n": 1})
    state = engine.runtime.state(run.id)
    [token] = list(state.tokens)
    job = engine.runtime.scheduler.make_job(state, token)
    assert job is not None and job.artifacts == root
    shipped = dataclasses.replace(job.travelling(), function=None)  # type: ignore[arg-type]
    back = pickle.loads(pickle.dumps(shipped))
    assert back.artifacts == root and back.run_id == run.id
    assert back.records is None  # no reference in its data: it carries no record
    engine.run_until_idle()


def test_without_fsspec_an_artifact_fails_the_attempt_naming_the_extra(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)  # what an install without the extra has
    acts.add("make", lambda ctx: wf.Artifact(b"data"))
    engine = open_engine(artifacts=tmp_path / "store")
    run = run_to_idle(engine, wf.Workflow("nofs").start_with("make", policy={"max_attempts": 1}))
    assert run.status is wf.RunStatus.FAILED
    assert "wfkit[artifacts]" in _error(run)
    assert not (tmp_path / "store").exists()


def test_the_periodic_retention_deletes_artifacts_too(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path, clock: wf.ManualClock
) -> None:
    acts.add("make", lambda ctx: wf.Artifact(b"old"))
    engine = open_engine(artifacts=tmp_path / "store")
    run = run_to_idle(engine, wf.Workflow("r").start_with("make"))
    stored = _local(run.outputs["make"][ARTIFACT_KEY])
    assert stored.is_file()
    engine.close()
    clock.advance("3d")
    reopened = open_engine(artifacts=tmp_path / "store", retention="1d")
    assert reopened.runs() == [] or all(r.id != run.id for r in reopened.runs())
    assert not stored.exists()


@pytest.mark.slow
def test_an_attempt_on_another_process_stores_and_loads_through_the_root(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    root = tmp_path / "shared"
    engine = open_engine(artifacts=root)
    acts.noop("make", "check")
    engine.register(wf.Workflow("far").start_with("make").then("check"))
    run = engine.start("far", {})
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        made = _attempt_elsewhere(pool, engine, run, "make")
        assert made.ok, made.error
        assert made.output["pid"] != os.getpid()
        grid = engine.load_artifact(made.output["grid"])  # stored there, recorded, read here
        assert grid.shape == (100, 1000) and int(grid.sum()) == 4999950000
        checked = _attempt_elsewhere(pool, engine, run, "check")  # carries the grid's record
    assert checked.ok, checked.error
    assert checked.output["total"] == 4999950000
    engine.run_until_idle()
    assert run.status is wf.RunStatus.COMPLETED


def _attempt_elsewhere(pool: Any, engine: wf.Engine, run: wf.Run, node: str) -> Any:
    """Run the ready step ``node`` of ``run`` on the pool's process, as an executor on other
    processes does (the job travels pickled), and hand its result to the engine."""
    # held by this engine (on PostgreSQL a new run waits for a claim)
    with engine.runtime.writer.lock:
        engine.runtime.writer.take(run.id)
    state = engine.runtime.state(run.id)
    token = next(t for t, tok in state.tokens.items() if tok["node"] == node)
    job = engine.runtime.scheduler.make_job(state, token)
    assert job is not None
    shipped = pickle.dumps(dataclasses.replace(job.travelling(), function=None))  # type: ignore[arg-type]
    result = pool.submit(artifact_child.attempt, shipped, node).result(120)
    engine.runtime.scheduler.process([result])
    return result


def test_a_truncated_leftover_file_is_written_again(tmp_path: Path) -> None:
    store = ArtifactStore((tmp_path / "store").as_uri())
    ref = store.save(wf.Artifact(b"whole content"), "run", "node", "1")
    path = _local(ref[ARTIFACT_KEY])
    path.write_bytes(b"whole")  # what an earlier wfkit killed while writing left
    created: list[str] = []
    assert store.save(wf.Artifact(b"whole content"), "run", "node", "1", created=created) == ref
    assert created == [ref[ARTIFACT_KEY]]
    record = ArtifactRecord.of(ref, "run", "node", 1)
    issued = CarriedRecords({record.uri: record})
    assert load_artifact(ref, store.root, issued) == b"whole content"
