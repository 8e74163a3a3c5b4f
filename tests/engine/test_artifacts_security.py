"""Artifact references are resolved through what the engine recorded when it stored them, never
through what they say of themselves: only an artifact the engine stored loads, in its own run
and that run's family; a reference naming anything else (another protocol, a path outside the
root, a link, a device, a FIFO, another run's artifact) is refused with a message about the
reference alone. Files are owner-only and appear whole or not at all. Every test runs on
DuckDB and PostgreSQL with a real file root."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import pickle
import resource
import signal
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import wfkit as wf
from tests.engine.conftest import Activities, OpenEngine
from tests.engine.helpers import rows, run_to_idle
from tests.engine.opens import watching
from wfkit.engine.artifacts import ARTIFACT_KEY, ArtifactStore
from wfkit.engine.executor import run_attempt


def _local(uri: str) -> Path:
    assert uri.startswith("file://"), uri
    return Path(uri.removeprefix("file://"))


def _error(run: wf.Run) -> str:
    return "\n".join(e.error or "" for e in run.history() if e.kind == "step.failed")


def _ref_to(path: Path, uri: str | None = None, **fields: Any) -> dict[str, Any]:
    """A reference with the right size and hash of ``path`` (what someone who knows the file
    would write), as plain JSON."""
    data = path.read_bytes() if path.is_file() else b""
    ref = {
        ARTIFACT_KEY: uri if uri is not None else path.as_uri(),
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "media_type": "application/octet-stream",
        "format": "bytes",
        "name": None,
    }
    return {**ref, **fields}


def _made(open_engine: OpenEngine, acts: Activities, root: Path, **kw: Any) -> Any:
    """An engine whose run 'keep' stored b"kept content" as an artifact; (engine, run, ref)."""
    acts.add("make", lambda ctx: wf.Artifact(b"kept content", name="kept"))
    engine = open_engine(artifacts=root, **kw)
    run = run_to_idle(engine, wf.Workflow("keep").start_with("make"))
    assert run.status is wf.RunStatus.COMPLETED, _error(run)
    return engine, run, run.outputs["make"]


def _finishes(call: Callable[[], Any], timeout: float = 10.0) -> BaseException | None:
    """Run ``call`` on a thread; the exception it raised (None when it returned). Fails the
    test when it has not finished within ``timeout`` seconds."""
    box: dict[str, BaseException] = {}

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the load did not finish"
    return box.get("error")


@contextmanager
def _listening() -> Iterator[tuple[int, Callable[[], bool]]]:
    """A TCP port on 127.0.0.1, and a check of whether anything connected to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)

    def connected() -> bool:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return False
        conn.close()
        return True

    try:
        yield server.getsockname()[1], connected
    finally:
        server.close()


# --- records ------------------------------------------------------------------------------------


def test_the_engine_records_every_artifact_it_stores_when_the_attempt_commits(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    def make(ctx: Any) -> Any:
        if ctx.attempt == 1:  # stored, then the attempt fails: its output cannot be recorded
            return {"lost": wf.Artifact(b"first"), "bad": {1, 2}}
        ctx.data["notes"] = wf.Artifact("some notes", name="notes")
        return {"a": wf.Artifact(b"x" * 10, name="a"), "same": wf.Artifact(b"x" * 10, name="a")}

    acts.add("make", make)
    engine = open_engine(artifacts=tmp_path / "store")
    flow = wf.Workflow("rec").start_with("make", policy={"max_attempts": 2, "retry_delay": "0s"})
    run = run_to_idle(engine, flow)
    assert run.status is wf.RunStatus.COMPLETED, _error(run)
    refs = [run.outputs["make"]["a"], run.data["notes"]]
    assert run.outputs["make"]["same"] == refs[0]  # one file, one record
    expected = sorted(
        (r[ARTIFACT_KEY], run.id, "make", 2, r["size"], r["sha256"], r["format"], r["name"])
        for r in refs
    )
    found = rows(
        engine,
        "SELECT uri, run_id, node_id, attempt, size, sha256, format, name FROM wf_artifacts "
        "ORDER BY uri",
    )
    assert found == expected


# --- references the engine did not issue ------------------------------------------------------


def test_a_reference_the_engine_did_not_issue_is_refused_everywhere(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    # a file under the root where the engine would put one, with the right size and hash
    forged = root / "0123456789abcdef" / "make" / "1-0123456789abcdef-x.bin"
    forged.parent.mkdir(parents=True)
    forged.write_bytes(b"planted")
    ref = _ref_to(forged, name="x")
    acts.add("use", lambda ctx: {"got": ctx.load(ctx.data["ref"]).decode()})
    engine = open_engine(artifacts=root)
    flow = wf.Workflow("use").start_with("use", policy={"max_attempts": 1})
    run = run_to_idle(engine, flow, {"ref": ref})
    assert run.status is wf.RunStatus.FAILED
    assert "was refused: this engine did not store it" in _error(run)
    for load in (run.load, engine.load_artifact):
        with pytest.raises(wf.ArtifactError, match="did not store it") as caught:
            load(ref)
        assert str(forged) in str(caught.value)


def test_a_reference_whose_fields_differ_from_its_record_is_refused(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    engine, run, ref = _made(open_engine, acts, tmp_path / "store")
    assert run.load(ref) == b"kept content"
    changes: list[dict[str, Any]] = [
        {"size": ref["size"] + 1},
        {"size": str(ref["size"])},
        {"size": True},
        {"sha256": "0" * 64},
        {"format": "text"},
        {"format": "numpy"},
        {"media_type": "text/html"},
        {"name": "other"},
    ]
    for change in changes:
        for load in (run.load, engine.load_artifact):
            with pytest.raises(wf.ArtifactError, match="differ from what was recorded"):
                load({**ref, **change})


# --- lineage --------------------------------------------------------------------------------------


def _blob(ctx: Any) -> Any:
    return wf.Artifact(ctx.data.get("blob", "blob").encode())


def _use(ctx: Any) -> Any:
    """Load ``data.ref``; store what it held, prefixed, as ``data.out``."""
    value = ctx.load(ctx.data["ref"])
    ctx.data["out"] = wf.Artifact(b"child:" + value)
    return {"got": value.decode()}


def test_a_run_loads_its_own_artifacts_and_its_familys_and_no_others(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    acts.add("make", _blob)
    acts.add("use", _use)
    acts.add("put", lambda ctx: ctx.data.__setitem__("ref", wf.Artifact(b"parent")))
    acts.add("check", lambda ctx: {"got": ctx.load(ctx.data["out2"]).decode()})
    engine = open_engine(artifacts=tmp_path / "store")
    maker = run_to_idle(engine, wf.Workflow("maker").start_with("make"), {"blob": "a"})
    ref_a = maker.outputs["make"]

    # an unrelated run is refused, in its activity and through its handle
    other = run_to_idle(
        engine, wf.Workflow("user").start_with("use", policy={"max_attempts": 1}), {"ref": ref_a}
    )
    assert other.status is wf.RunStatus.FAILED
    assert "belongs to a run outside this run's family" in _error(other)
    assert "artifacts_shared=True" in _error(other)
    with pytest.raises(wf.ArtifactError, match="outside this run's family"):
        other.load(ref_a)
    assert engine.load_artifact(ref_a) == b"a"  # the engine's caller may load any of them
    assert maker.load(ref_a) == b"a"

    # a restart and the run it restarts are one family
    again = engine.restart_as_new(maker.id)
    engine.run_until_idle()
    assert again.load(ref_a) == b"a"
    assert maker.load(again.outputs["make"]) == b"a"

    # a caller, its children and their siblings are one family: the first child loads the
    # caller's artifact, the second the first's, the caller the second's
    engine.register(wf.Workflow("child").start_with("use"))
    parent = run_to_idle(
        engine,
        wf.Workflow("parent")
        .start_with("put")
        .call("child", input={"ref": "ref"}, bind={"out": "out"}, id="first")
        .call("child", input={"ref": "out"}, bind={"out": "out2"}, id="second")
        .then("check"),
        {},
    )
    assert parent.status is wf.RunStatus.COMPLETED, _error(parent)
    assert parent.outputs["check"] == {"got": "child:child:parent"}
    [first, second] = parent.children()
    assert first.load(parent.data["ref"]) == b"parent"
    assert second.load(parent.data["out"]) == b"child:parent"
    with pytest.raises(wf.ArtifactError, match="outside this run's family"):
        first.load(ref_a)


def test_artifacts_shared_lets_every_run_load_every_artifact(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    acts.add("make", _blob)
    acts.add("use", _use)
    engine = open_engine(artifacts=tmp_path / "store", artifacts_shared=True)
    maker = run_to_idle(engine, wf.Workflow("maker").start_with("make"), {"blob": "a"})
    ref = maker.outputs["make"]
    other = run_to_idle(engine, wf.Workflow("user").start_with("use"), {"ref": ref})
    assert other.status is wf.RunStatus.COMPLETED, _error(other)
    assert other.outputs["use"] == {"got": "a"}
    assert other.load(ref) == b"a"
    with pytest.raises(wf.ArtifactError, match="did not store it"):  # still only issued ones
        other.load({**ref, ARTIFACT_KEY: ref[ARTIFACT_KEY].replace("make", "mak3")})


# --- where a reference may point ---------------------------------------------------------------


def test_references_outside_the_root_are_refused_before_anything_is_opened(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    engine, run, ref = _made(open_engine, acts, root)
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_bytes(b"root:x:0:0:secret\n")
    inside = _local(ref[ARTIFACT_KEY])
    with _listening() as (port, connected):
        uris = [
            f"ftp://127.0.0.1:{port}/x",
            f"http://127.0.0.1:{port}/x",
            f"https://127.0.0.1:{port}/x",
            f"simplecache::ftp://127.0.0.1:{port}/x",
            secret.as_uri(),
            f"file://{inside.parent}/../../../outside/secret.txt",
            f"file://{root}/x/../../outside/secret.txt",
            f"file://{root}/../outside/secret.txt",
            f"file://{root}//{run.id}/make/{inside.name}",
            f"simplecache::{ref[ARTIFACT_KEY]}",
            f"local://{inside}",
            f"FILE://{inside}",
            f"file://localhost{inside}",
            "file:///dev/zero",
            "memory://x/y/z",
            "/etc/passwd",
        ]
        refs = [_ref_to(secret, uri) for uri in uris]
        with watching() as seen:
            for bad in refs:
                uri = bad[ARTIFACT_KEY]
                for load in (run.load, engine.load_artifact):
                    with pytest.raises(wf.ArtifactError, match="was refused") as caught:
                        load(bad)
                    message = str(caught.value)
                    assert str(bad["size"]) not in message.replace(uri, "")
                    assert bad["sha256"][:8] not in message
        assert not connected(), "a reference opened a network connection"
    assert seen.connected == []
    assert not [p for p in seen.opened if "secret" in p or p.startswith("/dev/")]


def test_the_refusal_of_a_path_outside_the_root_tells_nothing_of_what_is_there(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    _, run, _ = _made(open_engine, acts, tmp_path / "store")
    there = tmp_path / "outside" / "passwd"
    there.parent.mkdir()
    there.write_bytes(b"a line\n" * 223)
    refs = {
        "exists, right size and hash": _ref_to(there),
        "exists, wrong size": _ref_to(there, size=3),
        "exists, wrong hash": _ref_to(there, sha256="f" * 64),
        "does not exist": _ref_to(tmp_path / "outside" / "nothing", size=1561),
        "a folder": _ref_to(there.parent),
        "a device": _ref_to(Path("/dev/null")),
    }
    messages = {}
    for what, ref in refs.items():
        with pytest.raises(wf.ArtifactError) as caught:
            run.load(ref)
        messages[what] = str(caught.value).replace(repr(ref[ARTIFACT_KEY]), "<uri>")
    assert len(set(messages.values())) == 1, messages
    assert "1,561" not in messages["does not exist"] and "corrupted" not in messages["a folder"]


def test_links_under_the_root_are_never_followed(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    engine, run, ref = _made(open_engine, acts, root)
    stored = _local(ref[ARTIFACT_KEY])
    outside = tmp_path / "outside" / run.id / "make"
    outside.mkdir(parents=True)
    (outside / stored.name).write_bytes(b"kept content")  # the same content, out of the root
    assert run.load(ref) == b"kept content"

    stored.unlink()
    stored.symlink_to(outside / stored.name)  # the file is a link
    with pytest.raises(wf.ArtifactError, match="was changed since it was stored"):
        run.load(ref)
    stored.unlink()
    node = stored.parent
    node.rmdir()
    node.symlink_to(outside, target_is_directory=True)  # the node's folder is a link
    with pytest.raises(wf.ArtifactError, match="was changed since it was stored"):
        engine.load_artifact(ref)
    node.unlink()
    node.parent.rmdir()
    node.parent.symlink_to(outside.parent, target_is_directory=True)  # the run's folder
    with pytest.raises(wf.ArtifactError, match="was changed since it was stored"):
        run.load(ref)


def test_a_fifo_a_folder_a_device_or_a_bigger_file_in_place_of_an_artifact_is_refused_at_once(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    engine, run, ref = _made(open_engine, acts, tmp_path / "store")
    stored = _local(ref[ARTIFACT_KEY])
    stored.unlink()
    os.mkfifo(stored)  # a reader would wait for a writer for ever
    error = _finishes(lambda: run.load(ref))
    assert isinstance(error, wf.ArtifactError) and "no longer a regular file" in str(error)
    stored.unlink()
    stored.mkdir()
    error = _finishes(lambda: engine.load_artifact(ref))
    assert isinstance(error, wf.ArtifactError) and "no longer a regular file" in str(error)
    stored.rmdir()
    stored.symlink_to("/dev/zero")  # endless
    error = _finishes(lambda: run.load(ref))
    assert isinstance(error, wf.ArtifactError) and "changed since it was stored" in str(error)
    stored.unlink()
    with stored.open("wb") as handle:  # 2 GiB (sparse): never read
        handle.truncate(2 << 30)
    error = _finishes(lambda: run.load(ref), timeout=2.0)
    assert isinstance(error, wf.ArtifactError) and "changed since it was stored" in str(error)
    assert "2,147,483,648" not in str(error) and "bytes" not in str(error)


def test_a_changed_artifact_fails_the_step_that_loads_it_without_telling_its_content(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    acts.add("make", lambda ctx: wf.Artifact(b"original"))
    acts.add("swap", lambda ctx: _local(ctx.outputs["make"][ARTIFACT_KEY]).write_bytes(b"other"))
    acts.add("use", lambda ctx: ctx.load(ctx.outputs["make"]))
    flow = (
        wf.Workflow("swap").start_with("make").then("swap").then("use", policy={"max_attempts": 1})
    )
    engine = open_engine(artifacts=tmp_path / "store")
    run = run_to_idle(engine, flow)
    assert run.status is wf.RunStatus.FAILED
    error = _error(run)
    assert "was changed since it was stored" in error
    assert hashlib.sha256(b"other").hexdigest()[:8] not in error
    assert " 5 bytes" not in error and "corrupted" not in error


# --- how files are written -----------------------------------------------------------------------


def test_files_are_owner_only_whatever_the_umask(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    acts.add("make", lambda ctx: wf.Artifact(b"private"))
    engine = open_engine(artifacts=root)
    old = os.umask(0)
    try:
        run = run_to_idle(engine, wf.Workflow("perm").start_with("make"))
    finally:
        os.umask(old)
    stored = _local(run.outputs["make"][ARTIFACT_KEY])

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(stored) == 0o600
    assert mode(stored.parent) == 0o700 and mode(stored.parent.parent) == 0o700
    assert mode(root) == 0o700  # the engine made it


def test_a_write_that_fails_midway_leaves_nothing_behind(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    real_write = os.write
    written = [0]

    def write(fd: int, data: Any) -> int:  # a disk that fills up after 1 MiB
        if written[0] >= 1 << 20:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written[0] += len(data)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    acts.add("make", lambda ctx: wf.Artifact(b"x" * (3 << 20)))
    engine = open_engine(artifacts=root)
    run = run_to_idle(engine, wf.Workflow("full").start_with("make", policy={"max_attempts": 1}))
    assert run.status is wf.RunStatus.FAILED
    assert "No space left on device" in _error(run)
    assert [p for p in root.rglob("*")] == []  # no partial file, no folder made for it
    assert rows(engine, "SELECT count(*) FROM wf_artifacts") == [(0,)]


@pytest.mark.duckdb_only
def test_a_write_past_a_file_size_limit_leaves_nothing_behind(tmp_path: Path) -> None:
    store = ArtifactStore(f"file://{tmp_path / 'store'}")
    (tmp_path / "store").mkdir()
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, hard))
    try:
        with pytest.raises(wf.ArtifactError) as caught:
            store.save(wf.Artifact(b"y" * (1 << 20)), "run", "node", "1")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert [p for p in (tmp_path / "store").rglob("*")] == []
    assert "File too large" in str(caught.value)
    assert "nothing of this artifact was left" in str(caught.value)


# --- attempts on other processes ----------------------------------------------------------------


def test_an_attempt_on_another_process_loads_only_the_references_its_job_carries(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    engine, _, ref_a = _made(open_engine, acts, tmp_path / "store")
    hidden = run_to_idle(engine, wf.Workflow("keep").start_with("make")).outputs["make"]
    acts.add("make2", lambda ctx: wf.Artifact(b"mine"))
    acts.noop("use")
    flow = wf.Workflow("far").start_with("make2").wait_for_signal("go", correlate="key")
    engine.register(flow.then("use"))
    run = engine.start("far", {"key": "k", "other": ref_a, "text": json.dumps(hidden)})
    engine.run_until_idle()
    assert engine.signal("go", "k", {}) is True
    mine = run.outputs["make2"]
    # the job of 'use' as it travels to a Dask worker, run there by hand
    state = engine.runtime.state(run.id)
    [token] = [t for t, tok in state.tokens.items() if tok["node"] == "use"]
    job = engine.runtime.scheduler.make_job(state, token)
    assert job is not None
    shipped = pickle.loads(pickle.dumps(dataclasses.replace(job.travelling(), function=None)))
    assert set(shipped.records.records) == {mine[ARTIFACT_KEY]}  # the other run's is refused
    seen: dict[str, Any] = {}

    def use(ctx: Any) -> None:
        seen["mine"] = ctx.load(ctx.outputs["make2"])
        for key, ref in (("other", ctx.data["other"]), ("text", json.loads(ctx.data["text"]))):
            try:
                ctx.load(ref)
            except wf.ArtifactError as exc:
                seen[key] = str(exc)

    result = run_attempt(dataclasses.replace(shipped, function=use), lambda: datetime.now(UTC))
    assert result.ok, result.error
    assert seen["mine"] == b"mine"
    assert "outside this run's family" in seen["other"]
    assert "not among the references this attempt was given" in seen["text"]
    engine.run_until_idle()
    assert run.status is wf.RunStatus.COMPLETED


# --- durability="batched" ------------------------------------------------------------------------


def test_a_batched_run_records_its_artifacts_before_its_next_step_loads_them(
    open_engine: OpenEngine, acts: Activities, tmp_path: Path
) -> None:
    acts.add("make", lambda ctx: wf.Artifact(str(ctx.data["n"]).encode()))
    acts.add("use", lambda ctx: {"got": int(ctx.load(ctx.outputs["make"]))})
    engine = open_engine(artifacts=tmp_path / "store", durability="batched")
    engine.register(wf.Workflow("b").start_with("make").then("use"))
    engine.start_workers(threads=2)
    runs = [engine.start("b", {"n": n}) for n in range(20)]
    for n, run in enumerate(runs):
        run.result(timeout=60)
        assert run.status is wf.RunStatus.COMPLETED, _error(run)
        assert run.outputs["use"] == {"got": n}
    engine.stop()
