"""for_each: one branch per item, outputs by index, bounded parallelism, joins over items."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import wfkit as wf
from wfkit.examples import fulfilment


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def ship(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
    return {"sku": ctx.item["sku"], "index": ctx.loop_index}


def test_each_item_runs_the_body_with_its_item_and_index(engine, acts) -> None:
    acts.add("ship", ship)
    acts.noop("after")
    flow = wf.Workflow("w").start_with().for_each("lines", lambda b: b.then("ship")).then("after")
    engine.register(flow)
    lines = [{"sku": "A"}, {"sku": "B"}, {"sku": "C"}]

    run = engine.start("w", {"lines": lines})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    seen = sorted((c.loop_index, c.item) for c in acts.of("ship"))
    assert seen == [(0, {"sku": "A"}), (1, {"sku": "B"}), (2, {"sku": "C"})]
    assert acts.names()[-1] == "after"
    assert acts.count("after") == 1
    assert run.outputs["ship"] == {
        "0": {"sku": "A", "index": 0},
        "1": {"sku": "B", "index": 1},
        "2": {"sku": "C", "index": 2},
    }
    rows = engine.sql(
        "SELECT loop_index, output FROM wf_outputs "
        f"WHERE run_id = '{run.id}' AND node_id = 'ship' ORDER BY loop_index"
    ).fetchall()
    assert [r[0] for r in rows] == [0, 1, 2]
    started = events(run, "for_each.started")
    assert started[0].detail == {"items": 3, "limit": 3}


def test_items_can_come_from_a_nested_field_and_steps_can_change_them_first(engine, acts) -> None:
    def load(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
        ctx.data["order"]["lines"] = [{"sku": "X"}, {"sku": "Y"}]

    acts.add("load", load)
    acts.add("ship", ship)
    flow = wf.Workflow("w").start_with("load").for_each("order.lines", lambda b: b.then("ship"))
    engine.register(flow)

    run = engine.start("w", {"order": {"lines": []}})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert sorted(c.item["sku"] for c in acts.of("ship")) == ["X", "Y"]


def test_max_parallelism_one_runs_the_items_in_order(engine, acts) -> None:
    acts.add("ship", ship)
    flow = (
        wf.Workflow("w").start_with().for_each("lines", lambda b: b.then("ship"), max_parallelism=1)
    )
    engine.register(flow)

    run = engine.start("w", {"lines": [{"sku": s} for s in "ABCDE"]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert [c.loop_index for c in acts.of("ship")] == [0, 1, 2, 3, 4]


def test_max_parallelism_bounds_concurrent_items_on_worker_threads(engine, acts) -> None:
    lock = threading.Lock()
    state = {"now": 0, "max": 0}

    def work(ctx: wf.ActivityContext[Any]) -> None:
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.03)
        with lock:
            state["now"] -= 1

    acts.add("work", work)
    acts.noop("after")
    flow = (
        wf.Workflow("w")
        .start_with()
        .for_each("items", lambda b: b.then("work"), max_parallelism=2)
        .then("after")
    )
    engine.register(flow)
    run = engine.start("w", {"items": list(range(8))})

    engine.start_workers(4)
    try:
        run.result(timeout=20)
    finally:
        engine.stop()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.count("work") == 8
    assert sorted(c.loop_index for c in acts.of("work")) == list(range(8))
    assert state["max"] <= 2, f"{state['max']} items ran at once; max_parallelism is 2"
    assert state["max"] == 2, "with 4 workers, two items should have run at once"
    assert acts.names()[-1] == "after"


def test_an_empty_list_completes_the_join_at_once(engine, acts) -> None:
    acts.noop("ship", "after")
    flow = wf.Workflow("w").start_with().for_each("lines", lambda b: b.then("ship")).then("after")
    engine.register(flow)

    run = engine.start("w", {"lines": []})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["after"]
    assert [e.detail for e in events(run, "join.completed")] == [
        {"completed": 0, "failed": 0, "expected": 0}
    ]


@pytest.mark.parametrize("items", [3, "abc", {"a": 1}, None])
def test_items_that_are_not_a_list_fail_the_run_clearly(engine, acts, items) -> None:
    acts.noop("ship", "after")
    flow = wf.Workflow("w").start_with().for_each("lines", lambda b: b.then("ship")).then("after")
    engine.register(flow)

    run = engine.start("w", {"lines": items})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert acts.names() == []
    with pytest.raises(wf.WorkflowFailed) as info:
        run.result(timeout=1)
    error = info.value.error or ""
    assert "not a list" in error
    assert "'lines'" in error
    assert type(items).__name__ in error


def test_join_any_over_items_runs_the_following_step_once(engine, acts, clock) -> None:
    acts.add("work", lambda ctx: {"item": ctx.item})
    acts.noop("after")
    flow = (
        wf.Workflow("w")
        .start_with()
        .for_each("items", lambda b: b.then("work"), join="any")
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {"items": [1, 2, 3]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.count("after") == 1
    assert len(events(run, "join.completed")) == 1


def test_join_any_with_bounded_parallelism_launches_no_more_items(engine, acts) -> None:
    acts.add("work", lambda ctx: {"item": ctx.item})
    acts.noop("after")
    flow = (
        wf.Workflow("w")
        .start_with()
        .for_each("items", lambda b: b.then("work"), join="any", max_parallelism=1)
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {"items": [1, 2, 3]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names() == ["work", "after"]


def _picky(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
    if ctx.item == "bad":
        raise ValueError(f"item {ctx.loop_index} is bad")
    return {"item": ctx.item}


def test_join_at_least_over_items_tolerates_a_failed_item(engine, acts) -> None:
    acts.add("work", _picky)
    acts.noop("after")
    flow = (
        wf.Workflow("w")
        .start_with()
        .for_each("items", lambda b: b.then("work", max_attempts=1), join=wf.at_least(2))
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {"items": ["ok", "bad", "ok"]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.count("after") == 1
    assert run.outputs["work"]["0"] == {"item": "ok"}


def test_join_all_over_items_with_a_failed_item_takes_on_partial(engine, acts) -> None:
    acts.add("work", _picky)
    acts.noop("review", "after")
    flow = (
        wf.Workflow("w")
        .start_with()
        .for_each(
            "items",
            lambda b: b.then("work", max_attempts=1),
            on_partial=lambda b: b.then("review"),
        )
        .then("after")
    )
    engine.register(flow)

    run = engine.start("w", {"items": ["ok", "bad", "ok"]})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.names()[-2:] == ["review", "after"]
    partial = events(run, "join.partial")
    assert partial[0].detail["errors"] == [{"i": 1, "error": "ValueError: item 1 is bad"}]


def test_a_typed_document_ships_every_line_and_parks_a_partial_shipment_for_review(
    engine, acts
) -> None:
    for name, function in (
        ("orders.load-lines", fulfilment.load_lines),
        ("orders.ship-line", fulfilment.ship_line),
        ("orders.confirm", fulfilment.confirm),
    ):
        acts.add(name, function)
    flow = fulfilment.flow.copy()
    flow.graph.nodes["orders.ship-line"]["policy"] = {"max_attempts": 1}
    engine.register(flow)

    good = engine.start("fulfilment", {"order_id": "o1", "lines": [{"sku": "A"}, {"sku": "B"}]})
    bad = engine.start(
        "fulfilment", {"order_id": "o2", "lines": [{"sku": "A"}, {"sku": "BROKEN-1"}]}
    )
    engine.run_until_idle()

    assert good.status == wf.RunStatus.COMPLETED
    assert isinstance(good.data, fulfilment.OrderData)
    assert good.data.confirmed is True
    assert good.outputs["orders.ship-line"] == {
        "0": {"sku": "A", "tracking": "trk-o1-0"},
        "1": {"sku": "B", "tracking": "trk-o1-1"},
    }
    assert bad.status == wf.RunStatus.WAITING
    assert [(w.run_id, w.node_id, w.kind) for w in engine.waiting()] == [
        (bad.id, "review", "approval")
    ]


def test_a_checkpoint_of_a_for_each_does_not_rewrite_its_items(engine, acts) -> None:
    """The item list is written once, when the for_each opens: every later checkpoint (an item
    started or done) stays small however many items there are."""
    acts.add("work", lambda ctx: None)
    engine.register(
        wf.Workflow("many")
        .start_with()
        .for_each("items", lambda b: b.then("work"), max_parallelism=4)
    )
    items = [{"sku": f"item-{i:05d}", "qty": i} for i in range(1_000)]
    run = engine.start("many", {"items": items})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert acts.count("work") == 1_000
    sizes = engine.sql(
        f"SELECT kind, length(delta) FROM wf_events WHERE run_id = '{run.id}' "
        "AND delta IS NOT NULL ORDER BY seq"
    ).fetchall()
    (_, opened), *later = sizes  # the first checkpoint opened the for_each
    assert opened > 25_000  # the items, once
    assert len(later) > 100 and max(size for _, size in later) < 2_000  # never again
