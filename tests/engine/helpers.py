"""Helpers the engine tests share: run a workflow inline, read a run's history and the store,
wait for a worker thread or another engine."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import wfkit as wf


def run_to_idle(engine: wf.Engine, workflow: wf.Workflow, data: Any = None) -> wf.Run:
    """Register ``workflow``, start a run of its id with ``data``, drive it until idle."""
    engine.register(workflow)
    run = engine.start(workflow.id, data)
    engine.run_until_idle()
    return run


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    """The run's events of ``kind``, in order."""
    return [e for e in run.history() if e.kind == kind]


def kinds(run: wf.Run) -> list[str]:
    """The kinds of the run's events, in order."""
    return [e.kind for e in run.history()]


def rows(engine: wf.Engine, sql: str) -> list[tuple[Any, ...]]:
    """Every row ``sql`` selects from the engine's store, as tuples."""
    return [tuple(r) for r in engine.sql(sql).fetchall()]


def is_postgres(target: Any) -> bool:
    """Whether ``target`` (the ``db_path`` fixture, ``engine.target``) is a PostgreSQL URL."""
    return str(target).startswith("postgresql://")


def charge_then_fail_each_line() -> wf.Workflow:
    """'w': for each of ``data.lines``, one at a time, a saga of 'charge' (undone by 'refund')
    then 'fail' (one attempt, compensating the line's saga on failure)."""
    return (
        wf.Workflow("w")
        .start_with()
        .for_each(
            "lines",
            lambda b: b.saga(
                lambda s: (
                    s.then("charge")
                    .compensate_with("refund")
                    .then("fail", max_attempts=1)
                    .on_failure("compensate")
                )
            ),
            max_parallelism=1,
        )
    )


class Seen:
    """What each attempt found in ``ctx.data`` as it started and left there as it ended, keyed
    by (node, attempt, loop cell as "0.1"): ``acts.add(name, seen.wrap(body))``."""

    def __init__(self) -> None:
        self.started: dict[tuple[str, int, str], Any] = {}
        self.ended: dict[tuple[str, int, str], Any] = {}

    def wrap(self, body: Callable[[Any], Any]) -> Callable[[wf.ActivityContext[Any]], Any]:
        def run(ctx: wf.ActivityContext[Any]) -> Any:
            key = (ctx.node_id, ctx.attempt, ".".join(map(str, ctx.loop_path)))
            self.started[key] = copy.deepcopy(ctx.data)
            result = body(ctx)
            self.ended[key] = copy.deepcopy(ctx.data)
            return result

        return run
