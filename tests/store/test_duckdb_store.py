"""The DuckDB store: migrations, named queries, batched writes and the wf_outputs view."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import pytest

import wfkit as wf
from tests.postgres import postgres_database
from wfkit.store import Statement, open_store
from wfkit.store.duckdb import DuckDBStore
from wfkit.store.postgres import PostgresStore
from wfkit.store.queries import migrations, query

WHEN = datetime(2026, 1, 1, 12, 0, 0)

_MIGRATIONS = resources.files("wfkit.store").joinpath("sql/migrations")
_QUERIES = resources.files("wfkit.store").joinpath("sql/queries.sql")


def migration_files() -> list[tuple[int, str]]:
    """Every migration file, read from the package folder, in number order."""
    found = [
        (int(item.name.split("_", 1)[0]), item.read_text())
        for item in _MIGRATIONS.iterdir()
        if item.name.endswith(".sql")
    ]
    return sorted(found)


def columns(conn: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT table_name, column_name, ordinal_position, data_type, is_nullable, "
        "column_default FROM information_schema.columns "
        "WHERE table_schema = 'main' AND table_name <> 'wf_schema_version' "
        "ORDER BY table_name, ordinal_position"
    ).fetchall()


def shape(conn: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Tables, views, constraints and indexes of the wf_ schema, as comparable data."""
    return {
        "columns": columns(conn),
        "tables": conn.execute(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_schema = 'main' AND table_name <> 'wf_schema_version' ORDER BY 1"
        ).fetchall(),
        "views": conn.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY 1"
        ).fetchall(),
        "constraints": conn.execute(
            "SELECT table_name, constraint_type, constraint_column_names "
            "FROM duckdb_constraints() WHERE table_name <> 'wf_schema_version' ORDER BY ALL"
        ).fetchall(),
        "indexes": conn.execute(
            "SELECT table_name, index_name, sql FROM duckdb_indexes() ORDER BY ALL"
        ).fetchall(),
    }


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = DuckDBStore(tmp_path / "store.duckdb")
    yield s
    s.close()


def event_row(run_id: str, seq: int, kind: str = "step.completed", **kw: Any) -> tuple[Any, ...]:
    return (
        run_id,
        seq,
        WHEN,
        kind,
        kw.get("node_id", "n"),
        kw.get("token", "t1"),
        kw.get("attempt", 1),
        None,
        None,
        kw.get("error"),
        kw.get("output"),
        None,
        None,
        kw.get("detail"),
    )


# --- schema -----------------------------------------------------------------------------------


def test_a_fresh_schema_equals_every_migration_applied_in_order(tmp_path: Path) -> None:
    DuckDBStore(tmp_path / "store.duckdb").close()
    by_hand = duckdb.connect(str(tmp_path / "by-hand.duckdb"))
    for _, sql in migration_files():
        by_hand.execute(sql)
    made = duckdb.connect(str(tmp_path / "store.duckdb"))
    try:
        assert columns(made), "the store created no tables"
        assert shape(made) == shape(by_hand)
        tables = {t for t, _ in shape(made)["tables"]}
        assert {
            "wf_definitions",
            "wf_instances",
            "wf_jobs",
            "wf_bookmarks",
            "wf_timers",
            "wf_events",
            "wf_outputs",
            "wf_saga_steps",
        } <= tables
        versions = made.execute("SELECT version FROM wf_schema_version ORDER BY 1").fetchall()
        assert versions == [(v,) for v, _ in migration_files()]
    finally:
        made.close()
        by_hand.close()


def test_migration_files_are_numbered_without_gaps_and_all_loaded() -> None:
    numbers = [v for v, _ in migration_files()]
    assert numbers == list(range(1, len(numbers) + 1))
    assert [v for v, _ in migrations()] == numbers


def test_reopening_a_store_applies_no_migration_twice(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    DuckDBStore(path).close()
    again = DuckDBStore(path)
    try:
        assert again.schema_version() == migration_files()[-1][0]
        rows = again.query("schema_version")
        assert rows == [(migration_files()[-1][0],)]
        count = again.sql("SELECT count(*) FROM wf_schema_version").fetchall()
        assert count == [(len(migration_files()),)]
    finally:
        again.close()


def test_a_store_from_a_newer_wfkit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    DuckDBStore(path).close()
    with duckdb.connect(str(path)) as conn:
        conn.execute("INSERT INTO wf_schema_version VALUES (4242, TIMESTAMP '2030-01-01')")

    with pytest.raises(wf.StoreError, match="upgrade wfkit"):
        DuckDBStore(path)


# --- file permissions -------------------------------------------------------------------------


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask (files 0644 unless asked otherwise), whatever the test runner's is."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int | None:
    return stat.S_IMODE(path.stat().st_mode) if path.exists() else None


def _start_run(engine: wf.Engine) -> None:
    engine.start("perm", {"secret": "personal data"})


@pytest.mark.usefixtures("umask_022")
def test_a_new_database_and_its_write_ahead_log_are_owner_only(
    tmp_path: Path, registry: wf.ActivityRegistry
) -> None:
    path = tmp_path / "runs.duckdb"
    wal = Path(f"{path}.wal")
    with wf.Engine(path, registry=registry) as engine:
        assert _mode(path) == 0o600
        engine.register(wf.Workflow("perm", 1).start_with("a"))
        _start_run(engine)
        assert _mode(wal) == 0o600
        engine.sql("CHECKPOINT")  # DuckDB deletes the log, and creates it again at the next write
        assert not wal.exists()
        _start_run(engine)
        assert _mode(wal) == 0o600
    assert _mode(path) == 0o600
    assert os.umask(0o022) == 0o022  # the process's umask is as it was


@pytest.mark.usefixtures("umask_022")
def test_an_existing_database_keeps_its_permissions_and_its_log_gets_no_more(
    tmp_path: Path, registry: wf.ActivityRegistry
) -> None:
    path = tmp_path / "shared.duckdb"
    DuckDBStore(path).close()
    os.chmod(path, 0o640)  # shared with the group on purpose
    with wf.Engine(path, registry=registry) as engine:
        engine.register(wf.Workflow("perm", 1).start_with("a"))
        _start_run(engine)
        assert _mode(Path(f"{path}.wal")) == 0o640
    assert _mode(path) == 0o640


# --- named queries ----------------------------------------------------------------------------


def _query_names() -> list[str]:
    return re.findall(r"^--\s*name:\s*(\S+)\s*$", _QUERIES.read_text(), re.MULTILINE)


SHARED_ONLY = {"claim_runs", "claim_run", "notify_work"}  # PostgreSQL-only: SKIP LOCKED, pg_notify


def test_every_named_query_loads_and_prepares_against_the_schema(store) -> None:
    names = _query_names()
    assert len(names) == len(set(names)), "two blocks share a name"
    assert {"insert_event", "update_instance", "run_history", "list_runs"} <= set(names)
    for i, name in enumerate(names):
        sql = query(name)
        assert sql and not sql.rstrip().endswith(";"), name
        if name not in SHARED_ONLY:
            store.sql(f"PREPARE q{i} AS {sql}")  # binds every table and column it names


def test_named_queries_bind_parameters_instead_of_splicing_them(store) -> None:
    store.write([Statement("insert_event", [event_row("r1", 1)])])

    assert store.query("run_history", ["r1' OR '1'='1"]) == []
    assert len(store.query("run_history", ["r1"])) == 1


# --- writes -----------------------------------------------------------------------------------


def test_many_rows_go_in_one_write(store) -> None:
    rows = [event_row(f"r{i % 7}", i) for i in range(1, 501)]

    assert store.write([Statement("insert_event", rows)]) == [[]]

    assert store.sql("SELECT count(*), count(DISTINCT run_id) FROM wf_events").fetchall() == [
        (500, 7)
    ]
    seqs = [r[0] for r in store.sql("SELECT seq FROM wf_events ORDER BY seq").fetchall()]
    assert seqs == list(range(1, 501))


def test_a_write_of_several_statements_is_all_or_nothing(store) -> None:
    good = Statement("insert_event", [event_row("r1", 1), event_row("r1", 2)])
    bad = Statement("insert_timer", [("r1", "t1", "n", "delay", None)])  # due_at is NOT NULL

    with pytest.raises(wf.StoreError) as info:
        store.write([good, bad])

    assert isinstance(info.value.__cause__, duckdb.Error)
    assert store.sql("SELECT count(*) FROM wf_events").fetchall() == [(0,)]
    store.write([good])
    assert store.sql("SELECT count(*) FROM wf_events").fetchall() == [(2,)]


def test_statements_without_rows_are_skipped(store) -> None:
    assert store.write([Statement("insert_event"), Statement("delete_jobs")]) == []


def test_user_sql_errors_are_store_errors_with_the_driver_cause(store) -> None:
    with pytest.raises(wf.StoreError) as info:
        store.sql("SELECT * FROM no_such_table").fetchall()
    assert isinstance(info.value.__cause__, duckdb.Error)


def test_open_store_picks_the_backend_by_url(tmp_path: Path) -> None:
    s = open_store(tmp_path / "x.duckdb")
    try:
        assert isinstance(s, DuckDBStore)
    finally:
        s.close()
    with postgres_database() as url:
        pg = open_store(url)
        try:
            assert isinstance(pg, PostgresStore)
        finally:
            pg.close()


# --- the wf_outputs view ----------------------------------------------------------------------


def test_the_outputs_view_lists_completed_steps_with_an_output(store) -> None:
    store.write(
        [
            Statement(
                "insert_event",
                [
                    event_row("r1", 1, "run.started", node_id=None),
                    event_row("r1", 2, node_id="a", output='{"x": 1}'),
                    event_row("r1", 3, node_id="quiet"),
                    event_row("r1", 4, "step.failed", node_id="b", error="boom"),
                    event_row(
                        "r1",
                        5,
                        node_id="ship",
                        token="t7",
                        output='{"sku": "A"}',
                        detail='{"loop_index": 2}',
                    ),
                    event_row("r2", 1, node_id="a", attempt=3, output='{"x": 2}'),
                ],
            )
        ]
    )

    rows = store.sql(
        "SELECT run_id, node_id, token, attempt, loop_index, output FROM wf_outputs "
        "ORDER BY run_id, node_id"
    ).fetchall()

    assert rows == [
        ("r1", "a", "t1", 1, None, '{"x": 1}'),
        ("r1", "ship", "t7", 1, 2, '{"sku": "A"}'),
        ("r2", "a", "t1", 3, None, '{"x": 2}'),
    ]
    types = dict(
        store.sql(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'wf_outputs'"
        ).fetchall()
    )
    assert types["loop_index"] == "INTEGER"
