"""Nested for_each: every cell's output is kept under its index path, ``ctx.loop_index`` is the
innermost index and ``ctx.loop_path`` the whole path, events and ``wf_outputs`` carry the path."""

from __future__ import annotations

import json
from typing import Any

import wfkit as wf


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def _nested(inner: Any = None) -> wf.Workflow:
    body = inner or (lambda c: c.then("inner"))
    return (
        wf.Workflow("nest")
        .start_with()
        .for_each("groups", lambda b: b.for_each("item", body))
        .then("after")
    )


def test_a_nested_for_each_keeps_every_cell_and_its_index_path(engine, acts) -> None:
    seen: list[tuple[Any, ...]] = []

    def inner(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
        seen.append((ctx.loop_path, ctx.loop_index, ctx.item))
        return {"value": ctx.item}

    acts.add("inner", inner)
    acts.add("after", lambda ctx: {"inner": ctx.outputs["inner"]})
    engine.register(_nested())

    run = engine.start("nest", {"groups": [[1, 2], [3]]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert sorted(seen) == [((0, 0), 0, 1), ((0, 1), 1, 2), ((1, 0), 0, 3)]
    cells = {"0.0": {"value": 1}, "0.1": {"value": 2}, "1.0": {"value": 3}}
    assert run.outputs["inner"] == cells
    assert run.outputs["after"] == {"inner": cells}
    completed = [e for e in events(run, "step.completed") if e.node_id == "inner"]
    assert sorted((e.detail["loop_index"], e.detail["loop_path"]) for e in completed) == [
        (0, [0, 0]),
        (0, [1, 0]),
        (1, [0, 1]),
    ]
    rows = engine.sql(
        "SELECT loop_index, loop_path, output FROM wf_outputs "
        f"WHERE run_id = '{run.id}' AND node_id = 'inner' ORDER BY loop_path"
    ).fetchall()
    assert [(i, json.loads(p), json.loads(o)) for i, p, o in rows] == [
        (0, [0, 0], {"value": 1}),
        (1, [0, 1], {"value": 2}),
        (0, [1, 0], {"value": 3}),
    ]


def test_one_level_keeps_its_keys_and_loop_path_has_one_index(engine, acts) -> None:
    acts.add("ship", lambda ctx: {"path": list(ctx.loop_path), "index": ctx.loop_index})
    acts.add("outside", lambda ctx: {"path": list(ctx.loop_path), "index": ctx.loop_index})
    engine.register(
        wf.Workflow("w").start_with().for_each("lines", lambda b: b.then("ship")).then("outside")
    )
    run = engine.start("w", {"lines": ["a", "b"]})
    engine.run_until_idle()

    assert run.outputs["ship"] == {"0": {"path": [0], "index": 0}, "1": {"path": [1], "index": 1}}
    assert run.outputs["outside"] == {"path": [], "index": None}
    rows = engine.sql(
        f"SELECT node_id, loop_path FROM wf_outputs WHERE run_id = '{run.id}'"
    ).fetchall()
    assert sorted(rows) == [("outside", None), ("ship", "[0]"), ("ship", "[1]")]


def test_expressions_in_a_nested_body_read_the_innermost_item(engine, acts) -> None:
    acts.add("big", lambda ctx: {"item": ctx.item})
    acts.noop("after")
    engine.register(
        _nested(lambda c: c.if_("item > 1 and loop_index == 0", then=lambda t: t.then("big")))
    )
    run = engine.start("nest", {"groups": [[1, 2], [3]]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs["big"] == {"1.0": {"item": 3}}


def test_a_parallel_inside_a_for_each_keeps_the_loop_cell(engine, acts) -> None:
    acts.add("left", lambda ctx: {"item": ctx.item, "path": list(ctx.loop_path)})
    acts.noop("right")
    engine.register(
        wf.Workflow("w")
        .start_with()
        .for_each(
            "lines", lambda b: b.parallel(lambda p: p.then("left"), lambda p: p.then("right"))
        )
    )
    run = engine.start("w", {"lines": ["a", "b"]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs["left"] == {"0": {"item": "a", "path": [0]}, "1": {"item": "b", "path": [1]}}


def test_a_for_each_inside_a_parallel_is_not_indexed_by_the_branch(engine, acts) -> None:
    acts.add("each", lambda ctx: {"path": list(ctx.loop_path)})
    acts.noop("other", "after")
    engine.register(
        wf.Workflow("w")
        .start_with()
        .parallel(
            lambda p: p.then("other"),
            lambda p: p.for_each("lines", lambda b: b.then("each")).then("after"),
        )
    )
    run = engine.start("w", {"lines": ["a"]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs["each"] == {"0": {"path": [0]}}
    after = [e for e in events(run, "step.completed") if e.node_id == "after"]
    assert not after[0].detail  # after the join the token is in no loop


def test_compensations_inside_nested_loops_keep_their_cell(engine, acts) -> None:
    refunds: list[tuple[Any, ...]] = []

    def refund(ctx: wf.ActivityContext[Any]) -> None:
        refunds.append((ctx.loop_path, ctx.loop_index, ctx.item, ctx.outputs[ctx.node_id]))

    def check(ctx: wf.ActivityContext[Any]) -> None:
        if ctx.item == 3:
            raise RuntimeError("item 3 is refused")

    acts.add("charge", lambda ctx: {"charged": ctx.item})
    acts.add("refund", refund)
    acts.add("check", check)
    acts.noop("after")
    engine.register(
        _nested(
            lambda c: c.saga(
                lambda s: s.then("charge").compensate_with("refund").then("check", max_attempts=1)
            )
        )
    )
    run = engine.start("nest", {"groups": [[1, 2], [3]]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED  # the join of the groups is partial
    assert refunds == [((1, 0), 0, 3, {"charged": 3})]
    done = events(run, "compensation.completed")
    assert [(e.detail["loop_index"], e.detail["loop_path"]) for e in done] == [(0, [1, 0])]
