"""``engine.sql`` gives back one documented type on DuckDB and PostgreSQL: rows as tuples, the
column names, and pandas and polars DataFrames."""

from __future__ import annotations

import pandas as pd
import polars as pl

import wfkit as wf
from tests.engine.helpers import is_postgres, run_to_idle


def _two_runs(engine: wf.Engine, acts) -> None:
    acts.noop("a")
    flow = wf.Workflow("w").start_with("a")
    run_to_idle(engine, flow, {})
    run_to_idle(engine, flow, {})


def test_a_query_gives_rows_columns_and_dataframes(engine, acts) -> None:
    _two_runs(engine, acts)
    result = engine.sql("SELECT workflow_id, status, count(*) AS n FROM wf_instances GROUP BY 1, 2")

    assert isinstance(result, wf.StatementResult)
    assert result.columns == ["workflow_id", "status", "n"]
    assert result.fetchall() == [("w", "completed", 2)]
    assert result.fetchone() == ("w", "completed", 2)
    assert list(result) == [("w", "completed", 2)]
    frame = result.df()
    assert isinstance(frame, pd.DataFrame)
    assert frame.to_dict("records") == [{"workflow_id": "w", "status": "completed", "n": 2}]
    polars = result.pl()
    assert isinstance(polars, pl.DataFrame)
    assert polars.to_dicts() == [{"workflow_id": "w", "status": "completed", "n": 2}]


def test_values_are_bound_to_placeholders(engine, acts, db_path) -> None:
    _two_runs(engine, acts)
    mark = "%s" if is_postgres(db_path) else "?"
    result = engine.sql(f"SELECT count(*) AS n FROM wf_instances WHERE status = {mark}", ["failed"])

    assert isinstance(result, wf.StatementResult)
    assert result.columns == ["n"] and result.fetchall() == [(0,)]
    assert result.df()["n"].tolist() == [0]


def test_statements_that_return_no_rows_give_an_empty_result(engine) -> None:
    created = engine.sql("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
    engine.sql("INSERT INTO orders VALUES (1, 'short'), (2, 'long')")

    assert isinstance(created, wf.StatementResult)
    assert engine.sql("SELECT item FROM orders ORDER BY id").fetchall() == [("short",), ("long",)]
    assert engine.sql("SELECT item FROM orders WHERE id > 5").df().empty
