"""The PostgreSQL store: the same schema as DuckDB's, its own refusals, and the copy of the
engine suite that runs on it (tests/engine, parametrised by backend)."""

from __future__ import annotations

import psycopg
import pytest

import wfkit as wf
from tests.postgres import postgres_database
from wfkit.store.queries import migrations


def test_a_fresh_postgres_schema_has_every_wfkit_table() -> None:
    with postgres_database() as url:
        wf.Engine(url).close()
        with psycopg.connect(url) as conn:
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
                )
            }
            version = conn.execute("SELECT max(version) FROM wf_schema_version").fetchone()
    assert {
        "wf_definitions",
        "wf_instances",
        "wf_events",
        "wf_outputs",
        "wf_jobs",
        "wf_bookmarks",
        "wf_timers",
        "wf_saga_steps",
        "wf_signals",
        "wf_schema_version",
    } <= tables
    assert version == (migrations()[-1][0],)


def test_two_engines_share_a_database_and_each_run_is_advanced_by_one_of_them() -> None:
    registry = wf.ActivityRegistry()
    calls: list[str] = []
    registry.register("share.step", lambda ctx: calls.append(ctx.instance_id))
    flow = wf.Workflow("share", 1).start_with("share.step")
    with postgres_database() as url:
        first, second = wf.Engine(url, registry=registry), wf.Engine(url, registry=registry)
        try:
            first.register(flow)
            second.register(flow)
            runs = first.start_many("share", [{} for _ in range(20)])
            second.run_until_idle()  # the second engine claims the runs the first admitted
            first.run_until_idle()
            assert {r.status for r in runs} == {wf.RunStatus.COMPLETED}
            assert sorted(calls) == sorted(r.id for r in runs)  # each ran exactly once
            owners = first.sql("SELECT count(*) FROM wf_instances WHERE owner IS NOT NULL")
            assert owners.fetchall() == [(0,)]  # ended runs are given back
        finally:
            first.close()
            second.close()


def test_a_database_from_a_newer_wfkit_is_refused_with_a_hint_to_upgrade() -> None:
    with postgres_database() as url:
        wf.Engine(url).close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO wf_schema_version VALUES (999, now())")
        with pytest.raises(wf.StoreError, match=r"newer wfkit.*upgrade wfkit"):
            wf.Engine(url)


def test_an_unreachable_server_says_what_to_check() -> None:
    expected = r"(?s)cannot connect to PostgreSQL.*check that the server"
    with pytest.raises(wf.StoreError, match=expected):
        wf.Engine("postgresql://nobody@127.0.0.1:1/none")


def test_user_sql_returns_rows_and_passwords_never_show_in_messages() -> None:
    with postgres_database() as url:
        engine = wf.Engine(url)
        try:
            assert engine.sql("SELECT 1 + 1, 'a%b'").fetchall() == [(2, "a%b")]
            with pytest.raises(wf.StoreError, match="SQL failed"):
                engine.sql("SELECT * FROM no_such_table")
        finally:
            engine.close()
    with pytest.raises(wf.StoreError) as caught:
        wf.Engine("postgresql://user:s3cret@127.0.0.1:1/none")
    assert "s3cret" not in str(caught.value)
