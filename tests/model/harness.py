"""Drive one generated case on a real engine and on the reference model, side by side.

The engine runs inline (``run_until_idle``) on a :class:`wfkit.ManualClock`; external events of
the schedule are resolved against the model's state (which waits and approvals are open, whether
the run is suspended) and applied to both. :func:`check` returns the differences, empty when the
engine and the model agree.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import wfkit as wf
from tests.model.model import Model
from tests.model.plan import Call, compensation_result, step_result
from tests.model.strategies import Case

START = wf.ManualClock().now()
_TABLES = (
    "wf_definitions",
    "wf_events",
    "wf_jobs",
    "wf_bookmarks",
    "wf_timers",
    "wf_saga_steps",
    "wf_signals",
    "wf_instances",
)


def loop_path(ctx: wf.ActivityContext[Any]) -> tuple[int, ...]:
    """``ctx.loop_path``; on an engine without it, the one level ``loop_index`` gives."""
    path = getattr(ctx, "loop_path", None)
    if path is not None:
        return tuple(path)
    return () if ctx.loop_index is None else (ctx.loop_index,)


def registry_for(case: Case, calls: list[Call]) -> wf.ActivityRegistry:
    """Activities that behave as the case's plan says and record every call."""
    registry = wf.ActivityRegistry()
    plan = case.plan

    def step(ctx: wf.ActivityContext[Any]) -> Any:
        path = loop_path(ctx)
        calls.append(("step", ctx.node_id, ctx.attempt, path, None))
        result = step_result(plan, ctx.node_id, ctx.attempt, path, ctx.data)
        if result.kind == "fallback":
            raise wf.Fallback(f"{ctx.node_id} falls back")
        if result.kind == "fail":
            raise RuntimeError(f"{ctx.node_id} fails (attempt {ctx.attempt})")
        for top, key, value in result.writes:
            ctx.data.setdefault(top, {})[key] = value
        return result.output

    def undo(ctx: wf.ActivityContext[Any]) -> None:
        path = loop_path(ctx)
        seen = ctx.outputs.get(ctx.node_id)
        calls.append(("comp", ctx.node_id, ctx.attempt, path, json.dumps(seen, sort_keys=True)))
        result = compensation_result(plan, ctx.node_id, ctx.attempt, path, seen)
        if result.kind != "ok":
            raise RuntimeError(f"undo {ctx.node_id} fails (attempt {ctx.attempt})")
        for top, key, value in result.writes:
            ctx.data.setdefault(top, {})[key] = value

    registry.register("unused", lambda ctx: None)  # an empty registry is falsy
    for name in case.activities:
        registry.register(name, step)
    for name in case.compensations:
        registry.register("undo." + name, undo)
    return registry


@contextmanager
def database(backend: str) -> Iterator[Callable[[], Any]]:
    """Yield a function giving a clean database for the next case (a path or a URL)."""
    if backend == "duckdb":
        root = Path(tempfile.mkdtemp(prefix="wfkit-model-"))
        count = iter(range(10**9))
        try:
            yield lambda: root / f"case-{next(count)}.duckdb"
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    import psycopg

    from tests.postgres import postgres_database

    with postgres_database() as url:

        def clean() -> str:
            with psycopg.connect(url, autocommit=True) as conn:
                try:
                    conn.execute("TRUNCATE " + ", ".join(_TABLES))
                except psycopg.errors.UndefinedTable:
                    pass  # no engine has made the schema yet
            return url

        yield clean


def _differences(
    case: Case, engine: wf.Engine, run: wf.Run, model: Model, calls: list[Call]
) -> list[str]:
    diffs = []
    history = run.history()  # the engine's compensation order is in its events
    order = [e.node_id for e in history if e.kind == "compensation.completed"]
    observed: dict[str, tuple[Any, Any]] = {
        "status": (run.status.value, model.status),
        "data": (run.data, model.data),
        "outputs": (run.outputs, model.outputs),
        "compensations": (order, model.compensated),
        "calls": (Counter(calls), Counter(model.calls)),
    }
    if model.status in ("completed", "failed", "cancelled"):  # an ended run holds no rows
        for table in ("wf_timers", "wf_bookmarks", "wf_jobs"):
            left = engine.sql(f"SELECT count(*) FROM {table} WHERE run_id = '{run.id}'")
            observed[f"{table} rows left"] = (left.fetchall()[0][0], 0)
    for what, (got, want) in observed.items():
        if got != want:
            if isinstance(got, Counter):
                got, want = dict(got - want), dict(want - got)
                what += " (engine only / model only)"
            diffs.append(f"{what}: engine {got!r}\n{' ' * len(what)}   model  {want!r}")
    return diffs


def check(
    case: Case, target: Any, stats: Counter[str] | None = None, durability: str = "step"
) -> list[str]:
    """Run ``case`` on an engine over ``target`` (path or URL) and on the model; diff them."""
    calls: list[Call] = []
    clock = wf.ManualClock(START)
    registry = registry_for(case, calls)
    engine = wf.Engine(target, clock=clock, registry=registry, durability=durability)
    try:
        engine.register(case.workflow)
        run = engine.start(case.workflow.id, case.data)
        engine.run_until_idle()
        model = Model(case.workflow, _copy(case.data), case.plan, now=START)
        model.run_until_idle()
        diffs: list[str] = []
        for step, event in enumerate(case.schedule):
            try:
                engine, note = _apply(event, engine, run, model, clock, target, registry)
            except wf.WfkitError as exc:
                note = f"the engine refused it: {exc}"
            run = engine.run(run.id)
            engine.run_until_idle()
            model.run_until_idle()
            if note:
                diffs.append(f"after event {step} {event}: {note}")
            if run.status.value != model.status:
                diffs.append(
                    f"after event {step} {event}: status engine {run.status.value!r}, "
                    f"model {model.status!r}"
                )
                break
        if stats is not None:
            stats[model.status] += 1
            stats["with compensations"] += bool(model.compensated)
            stats["with for_each cells"] += any(c[3] for c in model.calls)
        return diffs + _differences(case, engine, run, model, calls)
    finally:
        engine.close()


def _copy(data: dict[str, Any]) -> dict[str, Any]:
    import copy

    return copy.deepcopy(data)


def _apply(
    event: tuple[Any, ...],
    engine: wf.Engine,
    run: wf.Run,
    model: Model,
    clock: wf.ManualClock,
    target: Any,
    registry: wf.ActivityRegistry,
) -> tuple[wf.Engine, str | None]:
    """Apply one schedule event to both; returns the (maybe new) engine and a mismatch note."""
    kind = event[0]
    key = model.data.get("key")
    if kind == "advance":
        clock.advance(event[1])
        model.advance_clock(event[1])
    elif kind == "restart":
        engine.close()
        engine = wf.Engine(target, clock=clock, registry=registry, durability=engine.durability)
    elif kind in ("signal", "approve"):
        want = "wait" if kind == "signal" else "approval"
        open_ = [(t, n) for t, n in model.open_waits() if model.nodes[n].kind == want]
        if not open_:
            return engine, None
        tid, node = open_[event[1] % len(open_)]
        path = model.path(model.tokens[tid].cell)  # inside a for_each: the item's approval
        if kind == "signal":
            payload = {"v": f"p{event[1]}"}
            got = engine.signal(node, key, payload)
            if got != model.signal(node, key, payload):
                return engine, f"signal returned {got}, model {not got}"
        else:
            comment = f"c{event[1]}"
            item = list(path) if path else None
            try:
                engine.approve(run.id, node, event[2], actor="ana", comment=comment, loop_path=item)
            except wf.WfkitError as exc:
                model.approve(node, event[2], "ana", comment, path)
                return engine, f"approve raised {exc}"
            model.approve(node, event[2], "ana", comment, path)
    elif kind == "post":
        waits = [n for n, node in model.nodes.items() if node.kind == "wait"]
        if waits:
            node = waits[event[1] % len(waits)]
            payload = {"v": f"q{event[1]}"}
            got = engine.post_signal(node, key, payload, expires=None)
            if got != model.post_signal(node, key, payload):
                return engine, f"post_signal returned {got}, model {not got}"
    elif kind == "resume" and model.suspended_on == "step":
        engine.resume(run.id, actor="ana")
        model.resume()
    elif kind == "recover" and model.suspended_on == "compensation":
        engine.recover_compensation(run.id, event[1], actor="ana")
        model.recover(event[1])
    return engine, None
