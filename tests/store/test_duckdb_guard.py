"""A DuckDB store never loses acknowledged work in silence (``wfkit/store/guard.py``).

- A file that holds less than its engine committed (its write-ahead log cut short, deleted or
  replaced by an older copy, the file deleted) is refused with the count missing, and nothing
  is changed; the loss can be accepted explicitly, and is recorded.
- A file deleted or replaced under a running engine refuses the next write before anyone is
  told it was made; a write-ahead log deleted under it loses nothing.
- A damaged file is a ``wf.StoreError``, and the file can be opened again once restored.

Runs are written by a child process that dies without closing its engine (``guard_child.py``),
so that the commits are still in the write-ahead log, as after a crash or a power cut.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

import wfkit as wf
from wfkit.cli import app
from wfkit.store.base import LostCommits, StoreBroken

CHILD = Path(__file__).with_name("guard_child.py")
ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.slow


def write_runs(db: Path, runs: int, *options: str) -> list[dict[str, Any]]:
    """Start ``runs`` runs on ``db`` in a child process that then dies; what it printed."""
    done = subprocess.run(
        [sys.executable, str(CHILD), str(db), str(runs), *options],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def acknowledged(lines: list[dict[str, Any]]) -> list[str]:
    return [line["run"] for line in lines if "run" in line]


def run_ids(db: Path) -> set[str]:
    """The runs an engine finds in ``db``."""
    with wf.Engine(db) as engine:
        return {row[0] for row in engine.sql("SELECT run_id FROM wf_instances").fetchall()}


def files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.duckdb"


# --- a file that holds less than its engine committed ----------------------------------------


def test_a_log_cut_to_half_is_refused_with_the_count_missing_and_left_as_it_was(db: Path) -> None:
    write_runs(db, 80)
    wal = Path(f"{db}.wal")
    os.truncate(wal, wal.stat().st_size // 2)
    before = files(db.parent)

    with pytest.raises(wf.StoreError) as refused:
        wf.Engine(db)

    assert isinstance(refused.value, LostCommits)
    lost = refused.value
    assert lost.expected == 81  # 80 runs started (one event each), one workflow registered
    assert 0 < lost.held < 81
    text = str(lost)
    assert f"holds {lost.held} of the 81 changes" in text
    assert f"{lost.missing} are missing" in text
    assert "restore runs.duckdb and runs.duckdb.wal from a backup" in text.lower()
    assert f"wfkit store accept-loss --db {db}" in text
    assert "accept_lost_commits=True" in text
    assert files(db.parent) == before  # refused: not written to, not checkpointed
    with pytest.raises(LostCommits):  # and refused again: the file was let go
        wf.Engine(db)


def test_a_missing_log_is_refused_rather_than_opened_as_an_empty_store(db: Path) -> None:
    write_runs(db, 20)
    Path(f"{db}.wal").unlink()

    with pytest.raises(LostCommits, match="holds 0 of the 21 changes") as refused:
        wf.Engine(db)

    assert refused.value.missing == 21


def test_an_older_copy_of_the_log_put_back_is_refused(db: Path) -> None:
    write_runs(db, 80, "--copy-wal-at", "40")
    shutil.copyfile(f"{db}.wal.at-40", f"{db}.wal")  # the log as it was after 40 runs

    with pytest.raises(LostCommits) as refused:
        wf.Engine(db)

    assert (refused.value.expected, refused.value.held) == (81, 41)


def test_a_deleted_database_is_refused_and_no_empty_one_is_made(db: Path) -> None:
    with wf.Engine(db) as engine:
        engine.sql("CREATE TABLE mine (x INTEGER)")  # user SQL is not counted: no change
    write_runs(db, 5)
    for path in (db, Path(f"{db}.wal")):
        path.unlink(missing_ok=True)

    with pytest.raises(LostCommits, match=r"does not exist, but .*runs\.duckdb\.commits says"):
        wf.Engine(db)

    assert not db.exists()


def test_accepting_the_loss_records_it_and_the_engine_goes_on(db: Path) -> None:
    first = acknowledged(write_runs(db, 80))
    wal = Path(f"{db}.wal")
    os.truncate(wal, wal.stat().st_size // 2)

    with wf.Engine(db, accept_lost_commits=True) as engine:
        kept = {row[0] for row in engine.sql("SELECT run_id FROM wf_instances").fetchall()}
        recorded = engine.sql("SELECT kind, actor, detail FROM wf_store_events").fetchall()
    assert kept < set(first) and kept
    [(kind, actor, detail)] = recorded
    assert kind == "commits.lost" and actor
    counts = json.loads(detail)
    assert counts["expected"] == 81 and counts["missing"] == 81 - counts["held"]

    later = acknowledged(write_runs(db, 10))  # and dies again: nothing of it is lost
    assert run_ids(db) == kept | set(later)


def test_the_command_line_accepts_a_loss_once(db: Path) -> None:
    write_runs(db, 20)
    Path(f"{db}.wal").unlink()
    runner = CliRunner()

    accepted = runner.invoke(app, ["store", "accept-loss", "--db", str(db), "--actor", "ops"])
    again = runner.invoke(app, ["store", "accept-loss", "--db", str(db)])

    assert accepted.exit_code == 0, accepted.output
    assert "the loss of 21 of 21 changes is recorded in wf_store_events" in accepted.output
    assert again.exit_code == 0, again.output
    assert "there is no loss to accept" in again.output
    with wf.Engine(db) as engine:
        assert engine.sql("SELECT kind, actor FROM wf_store_events").fetchall() == [
            ("commits.lost", "ops")
        ]


def test_accepting_a_loss_is_refused_for_postgresql_before_connecting() -> None:
    with pytest.raises(wf.UsageError, match="accept_lost_commits is for DuckDB files"):
        wf.Engine("postgresql://nobody@127.0.0.1:1/none", accept_lost_commits=True)


def test_purges_and_commits_without_events_never_look_like_a_loss(db: Path, tmp_path: Path) -> None:
    registry = wf.ActivityRegistry()
    registry.register("guard.step", lambda ctx: None)
    with wf.Engine(db, registry=registry) as engine:
        engine.register(wf.Workflow("guard.flow").start_with("guard.step"))
        engine.start_many("guard.flow", [{}] * 30)
        engine.run_until_idle()
        marks = [_mark_and_count(engine)]
        assert engine.purge(older_than="0s") == 30  # 90 events go; the count goes on
        marks.append(_mark_and_count(engine))
        engine.archive(tmp_path / "archive", older_than="0s")  # nothing to archive: one commit
        engine.deactivate("guard.flow", 1)  # a commit without events
        engine.activate("guard.flow", 1)
        marks.append(_mark_and_count(engine))
    assert [mark == count for mark, count in marks] == [True, True, True]
    assert marks[0][1] < marks[1][1] < marks[2][1]

    later = acknowledged(write_runs(db, 5))  # opened as usual, and dies
    assert run_ids(db) == set(later)


def _mark_and_count(engine: wf.Engine) -> tuple[int, int]:
    """The count the commit mark holds, and the count the file holds."""
    engine.sql("SELECT 1")  # summaries written first (a commit of their own)
    mark = Path(f"{engine.target}.commits").read_bytes().split()[1]
    held = engine.runtime.store.sql(  # (engine.sql would write summaries again)
        "SELECT (SELECT count(*) FROM wf_events) + (SELECT tally FROM wf_store_tally)"
    ).fetchall()[0][0]
    return int(mark), held


def test_every_kind_of_write_keeps_the_mark_at_what_the_file_holds(db: Path) -> None:
    from tests.api import http_flows  # activities of the default registry, a saga, waits

    seen: list[tuple[int, int]] = []
    with wf.Engine(db) as engine:
        engine.register(http_flows.flow)
        seen.append(_mark_and_count(engine))
        ids = [engine.start("http-order", {"order_id": f"o-{i}"}).id for i in range(4)]
        engine.post_signal("paid", "o-9", {"amount": 9})  # kept for a wait to come
        engine.run_until_idle()
        seen.append(_mark_and_count(engine))
        engine.signal("paid", "o-0", {"amount": 1})
        engine.signal("paid", "o-1", {"amount": 1})
        engine.run_until_idle()
        engine.approve(ids[0], "review", True, actor="ann")
        engine.approve(ids[1], "review", False, actor="bob")
        engine.cancel(ids[2])
        engine.run_until_idle()
        seen.append(_mark_and_count(engine))
        with engine.transaction() as tx:
            tx.execute("CREATE TABLE orders (id VARCHAR)")
            tx.execute("INSERT INTO orders VALUES (?)", ["o-9"])
            tx.start("http-order", {"order_id": "o-9"})  # takes the posted signal
        with engine.transaction() as tx:
            tx.execute("INSERT INTO orders VALUES (?)", ["mine only"])
        engine.run_until_idle()
        seen.append(_mark_and_count(engine))
        engine.purge(older_than="0s")
        seen.append(_mark_and_count(engine))

    assert all(mark == count for mark, count in seen), seen
    assert [count for _, count in seen] == sorted({count for _, count in seen}), seen
    assert len(run_ids(db)) == 2  # o-3 and o-9 wait; the three that ended were purged


def test_a_mark_that_is_not_one_is_ignored_with_a_warning(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_runs(db, 3)
    mark = Path(f"{db}.commits")
    mark.write_bytes(b"wfkit-commits 99999999999999999999 00000000\n")  # a bad checksum

    with caplog.at_level(logging.WARNING, "wfkit.store"):
        assert len(run_ids(db)) == 3

    assert "is not a commit mark wfkit wrote" in caplog.text
    assert mark.read_bytes().startswith(b"wfkit-commits 0000")  # written again


def test_the_mark_is_owner_only_and_never_written_through_a_symbolic_link(db: Path) -> None:
    elsewhere = db.parent / "elsewhere.txt"
    elsewhere.write_text("not wfkit's\n")
    mark = Path(f"{db}.commits")
    mark.symlink_to(elsewhere)

    write_runs(db, 2)

    assert elsewhere.read_text() == "not wfkit's\n"
    mark.unlink()
    write_runs(db, 2)
    assert stat.S_IMODE(mark.stat().st_mode) == 0o600
    assert len(run_ids(db)) == 4


# --- a file deleted or replaced under a running engine ---------------------------------------


@pytest.fixture
def engine(db: Path) -> Any:
    registry = wf.ActivityRegistry()
    registry.register("guard.step", lambda ctx: None)
    engine = wf.Engine(db, registry=registry)
    engine.register(wf.Workflow("guard.flow").start_with("guard.step"))
    yield engine
    engine.close()


def test_a_deleted_database_refuses_every_later_write(db: Path, engine: wf.Engine) -> None:
    engine.start("guard.flow", {})
    db.unlink()
    Path(f"{db}.wal").unlink()

    for _ in range(2):
        with pytest.raises(wf.StoreError, match="was deleted while this engine had it open"):
            engine.start("guard.flow", {})
    with pytest.raises(StoreBroken, match=r"restore runs\.duckdb from a backup"):
        engine.runtime.store.check()

    engine.close()  # closes without a word: there is nothing to write to
    assert sorted(p.name for p in db.parent.iterdir()) == ["runs.duckdb.commits"]


def test_a_database_deleted_after_its_log_refuses_the_commit_it_took(
    db: Path, engine: wf.Engine
) -> None:
    engine.start("guard.flow", {})  # the log exists: the next commit goes to it
    db.unlink()

    with pytest.raises(StoreBroken, match="1 commit made since then went to that file"):
        engine.start("guard.flow", {})


def test_a_replaced_database_is_noticed_and_the_new_file_is_left_alone(
    db: Path, engine: wf.Engine, tmp_path: Path
) -> None:
    engine.start("guard.flow", {})
    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as conn:
        conn.execute("CREATE TABLE kept AS SELECT 42 AS answer")
    os.replace(other, db)
    Path(f"{db}.wal").unlink(missing_ok=True)

    with pytest.raises(wf.StoreError, match="was replaced by another file"):
        engine.start("guard.flow", {})
    engine.close()

    with duckdb.connect(str(db)) as conn:  # no checkpoint of the old database went into it
        assert conn.execute("SELECT answer FROM kept").fetchall() == [(42,)]
        assert not conn.execute(
            "SELECT * FROM information_schema.tables WHERE table_name = 'wf_instances'"
        ).fetchall()


def test_a_log_deleted_under_a_running_engine_loses_nothing(db: Path) -> None:
    lines = write_runs(db, 40, "--delete-wal-at", "20")

    assert run_ids(db) == set(acknowledged(lines))
    assert len(acknowledged(lines)) == 40


def test_a_log_deleted_under_an_idle_engine_is_saved_by_the_health_check(db: Path) -> None:
    lines = write_runs(db, 10, "--then-delete-wal-and-check")

    assert run_ids(db) == set(acknowledged(lines))
    assert len(acknowledged(lines)) == 10


# --- damaged files ---------------------------------------------------------------------------


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(100_000))


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _cut(fraction: float) -> Any:
    def cut(path: Path) -> None:
        os.truncate(path, int(path.stat().st_size * fraction))

    return cut


def _scribble(where: float) -> Any:
    def scribble(path: Path) -> None:
        with path.open("r+b") as fh:
            fh.seek(int(path.stat().st_size * where))
            fh.write(os.urandom(5000))

    return scribble


@pytest.mark.parametrize(
    "damage",
    [_garbage, _empty, _cut(0.01), _cut(0.1), _cut(0.5), _cut(0.9), _scribble(0.001)],
    ids=["garbage", "empty", "cut-1%", "cut-10%", "cut-50%", "cut-90%", "overwritten-header"],
)
def test_a_damaged_file_is_a_store_error_every_time_it_is_opened(db: Path, damage: Any) -> None:
    registry = wf.ActivityRegistry()
    registry.register("guard.step", lambda ctx: None)
    with wf.Engine(db, registry=registry) as engine:
        engine.register(wf.Workflow("guard.flow").start_with("guard.step"))
        engine.start_many("guard.flow", [{"pad": os.urandom(3000).hex()} for _ in range(300)])
    Path(f"{db}.commits").unlink(missing_ok=True)  # what is left to see is the damage itself
    damage(db)

    for _ in range(2):  # a failed open lets the file go: the second says the same
        with pytest.raises(wf.StoreError) as refused:
            wf.Engine(db, registry=registry)
        text = str(refused.value)
        assert "already open" not in text
        assert "is damaged" in text or "not a valid DuckDB database file" in text, text
