"""A full disk is said to be full, loses nothing acknowledged, and the engine goes on after.

The disk is a small tmpfs of the test's own (skipped where this process may not mount one), or a
file size limit (RLIMIT_FSIZE) in a child process for EFBIG; the real disk is never filled.
Before: a write-ahead log that could not grow was reported as "write conflict ... persisted
after 8 tries ... is another engine writing the same runs?", and a checkpoint that could not
write left DuckDB's database invalid until the process ended.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import wfkit as wf
from tests.store.test_duckdb_guard import acknowledged, run_ids, write_runs

pytestmark = pytest.mark.slow

FULL = "is full (No space left on device): this write was not made"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted for the test."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def resize(disk: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with a file; returns it."""
    filler = disk / "filler"
    with filler.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    return filler


@pytest.fixture
def engine(disk: Path) -> Iterator[wf.Engine]:
    registry = wf.ActivityRegistry()
    registry.register("guard.step", lambda ctx: None)
    engine = wf.Engine(disk / "runs.duckdb", registry=registry)
    engine.register(wf.Workflow("guard.flow").start_with("guard.step"))
    yield engine
    engine.close()


def test_a_log_that_cannot_grow_is_a_full_disk_and_the_engine_goes_on_after(
    disk: Path, engine: wf.Engine
) -> None:
    db = disk / "runs.duckdb"
    before = [engine.start("guard.flow", {"i": i}).id for i in range(5)]
    filler = fill(disk)

    with pytest.raises(wf.StoreError) as refused:
        engine.start("guard.flow", {"pad": os.urandom(4000).hex()})

    text = str(refused.value)
    assert f"the disk holding '{db}' {FULL}" in text
    assert "conflict" not in text and "another engine" not in text
    filler.unlink()  # space is back
    after = engine.start("guard.flow", {}).id
    engine.close()
    assert run_ids(db) == {*before, after}


def test_a_checkpoint_on_a_full_disk_loses_no_acknowledged_run(
    disk: Path, engine: wf.Engine
) -> None:
    db = disk / "runs.duckdb"
    started: list[str] = []
    with pytest.raises(wf.StoreError, match="is full") as refused:
        for _ in range(200):  # 100 KB of random data each: DuckDB checkpoints at 4 MB of log
            started.append(engine.start("guard.flow", {"pad": os.urandom(50_000).hex()}).id)
    assert "conflict" not in str(refused.value)
    resize(disk, "64m")  # space is back

    after = [engine.start("guard.flow", {}).id for _ in range(3)]
    engine.close()
    found = run_ids(db)
    assert set(started) | set(after) <= found
    assert len(found) <= len(started) + len(after) + 1  # at most the refused one stood


def test_a_file_size_limit_is_said_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    lines = write_runs(db, 200, "--payload", "50000", "--file-limit", str(2 * 1024 * 1024))

    errors = [line["error"] for line in lines if "error" in line]
    assert len(errors) == 1, lines
    assert f"the disk holding '{db}' is full (File too large" in errors[0]
    assert "conflict" not in errors[0]
    assert "run" in lines[-1]  # the run started once the limit was lifted
    assert set(acknowledged(lines)) <= run_ids(db)
