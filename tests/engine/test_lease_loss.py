"""A run that changes hands while its attempt runs (this process stalled beyond its lease and
another engine took the run over) costs only that run's checkpoint: the rest of the batch is
written, so none of the other runs' steps run twice."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import wfkit as wf


def test_a_run_taken_over_mid_batch_does_not_fail_the_other_runs(
    open_engine, acts, db_path, caplog
) -> None:
    if not str(db_path).startswith("postgresql"):
        pytest.skip("leases exist on shared (PostgreSQL) databases only")
    import psycopg

    def reserve(ctx: wf.ActivityContext[Any]) -> None:
        if ctx.data["stolen"]:  # another engine takes the run over while this attempt runs
            with psycopg.connect(str(db_path), autocommit=True) as conn:
                conn.execute(
                    "UPDATE wf_instances SET owner = 'elsewhere', "
                    "lease_until = TIMESTAMP '2999-01-01' WHERE run_id = %s",
                    [ctx.instance_id],
                )

    acts.add("reserve", reserve)
    acts.noop("ship")
    engine = open_engine(lease="30s")
    engine.register(wf.Workflow("order").start_with("reserve").then("ship"))
    runs = engine.start_many("order", [{"stolen": i == 0} for i in range(5)])

    with caplog.at_level(logging.WARNING, logger="wfkit"):
        engine.run_until_idle()

    stolen, *others = runs
    assert all(engine.run(r.id).status == wf.RunStatus.COMPLETED for r in others)
    assert acts.count("reserve") == 5  # each ran once: the batch was not run again
    assert acts.count("ship") == 4  # the stolen run's next step is the new holder's to run
    kinds = [e.kind for e in engine.run(stolen.id).history()]
    assert "step.completed" not in kinds  # its checkpoint was not written here
    owner = engine.sql(f"SELECT owner FROM wf_instances WHERE run_id = '{stolen.id}'")
    assert owner.fetchall() == [("elsewhere",)]
    assert "taken over by another engine process" in caplog.text
    assert stolen.id in caplog.text
