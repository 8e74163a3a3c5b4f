"""Activities receive copies: changing ``ctx.item`` or ``ctx.outputs`` changes nothing in the run.
The only ways an activity changes its run are ``ctx.data`` and its return value, both recorded."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

import wfkit as wf


def test_changing_ctx_item_changes_neither_the_data_nor_later_steps(engine, acts) -> None:
    def scribble(ctx: wf.ActivityContext[Any]) -> None:
        ctx.item["x"] = 1
        ctx.item["sku"] = "changed"

    acts.add("scribble", scribble)
    acts.add("read", lambda ctx: {"lines": ctx.data["lines"], "item": ctx.item})
    acts.add("after", lambda ctx: {"lines": ctx.data["lines"]})
    engine.register(
        wf.Workflow("w")
        .start_with()
        .for_each("lines", lambda b: b.then("scribble").then("read"))
        .then("after")
    )
    lines = [{"sku": "A"}, {"sku": "B"}]

    run = engine.start("w", {"lines": lines})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.data == {"lines": lines}
    assert run.outputs["read"] == {
        "0": {"lines": lines, "item": {"sku": "A"}},
        "1": {"lines": lines, "item": {"sku": "B"}},
    }
    assert run.outputs["after"] == {"lines": lines}
    patches = engine.sql(f"SELECT patch FROM wf_events WHERE run_id = '{run.id}'").fetchall()
    assert [p for (p,) in patches if p] == []  # no step changed the data


def test_a_retry_sees_the_item_as_it_was(engine, acts) -> None:
    def flaky(ctx: wf.ActivityContext[Any]) -> None:
        ctx.item["tries"] = ctx.item.get("tries", 0) + 1
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")

    acts.add("flaky", flaky)
    engine.register(
        wf.Workflow("w")
        .start_with()
        .for_each(
            "lines",
            lambda b: b.then("flaky", max_attempts=2, retry_delay=timedelta(0), jitter=0),
        )
    )
    run = engine.start("w", {"lines": [{"sku": "A"}]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert [c.item for c in acts.of("flaky")] == [
        {"sku": "A", "tries": 1},
        {"sku": "A", "tries": 1},
    ]


def test_changing_ctx_outputs_changes_neither_later_steps_nor_the_run(engine, acts) -> None:
    def meddle(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
        ctx.outputs["a"]["id"] = "t"
        return {"saw": ctx.outputs["a"]["id"]}

    acts.add("a", lambda ctx: {"id": "a-1"})
    acts.add("meddle", meddle)
    acts.add("c", lambda ctx: {"a": ctx.outputs["a"]})
    engine.register(wf.Workflow("w").start_with("a").then("meddle").then("c"))

    run = engine.start("w", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs["meddle"] == {"saw": "t"}  # its own copy, within its own attempt
    assert run.outputs["c"] == {"a": {"id": "a-1"}}
    assert run.outputs["a"] == {"id": "a-1"}
    rows = engine.sql(
        f"SELECT output FROM wf_outputs WHERE run_id = '{run.id}' AND node_id = 'a'"
    ).fetchall()
    assert [json.loads(r[0]) for r in rows] == [{"id": "a-1"}]


def test_ctx_outputs_is_read_only(engine, acts) -> None:
    def assign(ctx: wf.ActivityContext[Any]) -> None:
        ctx.outputs["a"] = "x"  # type: ignore[index]

    acts.add("a", lambda ctx: {"id": 1})
    acts.add("assign", assign)
    acts.add("c", lambda ctx: dict(ctx.outputs))
    engine.register(
        wf.Workflow("w")
        .start_with("a")
        .then("assign", max_attempts=1)
        .on_failed(lambda b: b.then("c"))
    )
    run = engine.start("w", {})
    engine.run_until_idle()

    failed = [e for e in run.history() if e.kind == "step.failed"]
    assert "does not support item assignment" in (failed[0].error or "")
    assert run.outputs["c"] == {"a": {"id": 1}}


@pytest.mark.parametrize(
    "expression",
    ['outputs["a"].update({"id": 2})', 'outputs.pop("a")', "item.append(9)"],
)
def test_an_expression_cannot_change_what_it_reads(expression: str) -> None:
    flow = wf.Workflow("w").start_with("a").if_(expression, then=lambda t: t.then("yes"))
    with pytest.raises(wf.DefinitionError, match="method calls are not allowed"):
        flow.check(registry=None)
