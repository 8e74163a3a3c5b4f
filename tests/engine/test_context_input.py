"""``ctx.input`` and ``run.input``: the data document a run was admitted with, whatever the
document became; each attempt gets its own copy, and it survives reopening the engine and
``restart_as_new``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

import wfkit as wf
from tests.engine.helpers import run_to_idle

NO_WAIT = {"retry_delay": timedelta(0), "jitter": 0}


class Order(BaseModel):
    order_id: str
    total: float
    lines: list[str] = []
    status: str = "new"


def _seen(acts: Any) -> list[Any]:
    """Where activities built by :func:`_record` put what they saw."""
    if not hasattr(acts, "seen"):
        acts.seen = []
    return acts.seen  # type: ignore[no-any-return]


def _record(acts: Any, name: str, change: dict[str, Any] | None = None) -> None:
    """``name`` records (node, attempt, ctx.input, ctx.data) and then changes the data."""

    def body(ctx: wf.ActivityContext[Any]) -> None:
        data = ctx.data.model_dump() if isinstance(ctx.data, BaseModel) else dict(ctx.data)
        _seen(acts).append((ctx.node_id, ctx.attempt, ctx.input, data))
        for key, value in (change or {}).items():
            if isinstance(ctx.data, BaseModel):
                setattr(ctx.data, key, value)
            else:
                ctx.data[key] = value

    acts.add(name, body)


def test_every_step_sees_the_admitted_document_whatever_the_data_became(engine, acts) -> None:
    _record(acts, "a", {"n": 2, "added": True})
    _record(acts, "b", {"n": 3})
    _record(acts, "c")
    run = run_to_idle(
        engine,
        wf.Workflow("w").start_with("a").then("b").then("c"),
        {"n": 1, "nested": {"k": [1, 2]}},
    )

    assert run.status == wf.RunStatus.COMPLETED
    admitted = {"n": 1, "nested": {"k": [1, 2]}}
    assert [(node, seen_input) for node, _, seen_input, _ in _seen(acts)] == [
        ("a", admitted),
        ("b", admitted),
        ("c", admitted),
    ]
    assert [data["n"] for *_, data in _seen(acts)] == [1, 2, 3]  # the data did change
    assert run.input == admitted
    assert run.data == {"n": 3, "nested": {"k": [1, 2]}, "added": True}


def test_changing_ctx_input_changes_nothing_in_the_run(engine, acts) -> None:
    def scribble(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
        before = ctx.input
        ctx.input["n"] = 99
        ctx.input["nested"]["k"].append(3)
        assert ctx.input is before  # one copy per attempt, decoded once
        return {"saw": ctx.input["n"]}

    acts.add("scribble", scribble)
    acts.add("after", lambda ctx: {"input": ctx.input, "data": ctx.data})
    run = run_to_idle(
        engine,
        wf.Workflow("w").start_with("scribble").then("after"),
        {"n": 1, "nested": {"k": [1, 2]}},
    )

    assert run.outputs["scribble"] == {"saw": 99}  # the attempt's own copy changed
    original = {"n": 1, "nested": {"k": [1, 2]}}
    assert run.outputs["after"] == {"input": original, "data": original}
    assert run.data == original
    assert run.input == original
    patches = engine.sql(f"SELECT patch FROM wf_events WHERE run_id = '{run.id}'").fetchall()
    assert [p for (p,) in patches if p] == []
    stored = engine.sql(f"SELECT input FROM wf_instances WHERE run_id = '{run.id}'").fetchall()
    assert stored == [('{"n":1,"nested":{"k":[1,2]}}',)]


def test_a_retry_sees_the_input_as_admitted_not_as_the_failed_attempt_left_it(engine, acts) -> None:
    def flaky(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
        seen = dict(ctx.input)
        ctx.input["tries"] = 1
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        return {"seen": seen}

    acts.add("flaky", flaky)
    run = run_to_idle(
        engine, wf.Workflow("w").start_with().then("flaky", max_attempts=2, **NO_WAIT), {"n": 1}
    )

    assert run.status == wf.RunStatus.COMPLETED
    assert run.outputs["flaky"] == {"seen": {"n": 1}}


def test_run_input_is_a_fresh_copy_on_every_read(engine, acts) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("w").start_with("a"))
    run = engine.start("w", {"tags": ["x"]})
    first = run.input
    first["tags"].append("y")
    assert run.input == {"tags": ["x"]}
    engine.run_until_idle()
    assert run.input == {"tags": ["x"]}  # an ended run, read from its row


def test_with_a_data_model_input_is_a_model_instance_with_its_defaults(engine, acts) -> None:
    def close(ctx: wf.ActivityContext[Order]) -> dict[str, Any]:
        ctx.data.status = "closed"
        ctx.data.lines.append("extra")
        assert isinstance(ctx.input, Order)
        return {"input": ctx.input.model_dump(), "data": ctx.data.model_dump()}

    acts.add("close", close)
    acts.add("after", lambda ctx: {"status": ctx.input.status, "type": type(ctx.input).__name__})
    run = run_to_idle(
        engine,
        wf.Workflow("orders", data=Order).start_with("close").then("after"),
        {"order_id": "o-1", "total": "12.5"},
    )

    admitted = {"order_id": "o-1", "total": 12.5, "lines": [], "status": "new"}
    assert run.outputs["close"]["input"] == admitted
    assert run.outputs["close"]["data"]["status"] == "closed"
    assert run.outputs["after"] == {"status": "new", "type": "Order"}
    assert isinstance(run.input, Order)
    assert run.input.model_dump() == admitted
    assert run.data.status == "closed"


def test_inside_for_each_and_in_a_compensation_ctx_input_is_the_admitted_document(
    engine, acts
) -> None:
    def ship(ctx: wf.ActivityContext[Any]) -> None:
        _seen(acts).append(("ship", ctx.item, ctx.input))
        ctx.data["shipped"] = ctx.data.get("shipped", 0) + 1

    def fail(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("card declined")

    def refund(ctx: wf.ActivityContext[Any]) -> None:
        _seen(acts).append(("refund", ctx.data.get("charged"), ctx.input))

    acts.add("ship", ship)
    acts.add("charge", lambda ctx: ctx.data.update(charged=True))
    acts.add("refund", refund)
    acts.add("fail", fail)
    run = run_to_idle(
        engine,
        wf.Workflow("w")
        .start_with()
        .for_each("lines", lambda b: b.then("ship"))
        .saga(
            lambda s: (
                s.then("charge")
                .compensate_with("refund")
                .then("fail", max_attempts=1)
                .on_failure("compensate")
            )
        ),
        {"lines": ["a", "b"]},
    )

    assert run.status == wf.RunStatus.FAILED
    admitted = {"lines": ["a", "b"]}
    assert sorted(_seen(acts), key=str) == sorted(
        [("ship", "a", admitted), ("ship", "b", admitted), ("refund", True, admitted)], key=str
    )


def test_ctx_input_survives_reopening_the_engine(open_engine, acts, clock) -> None:
    _record(acts, "before", {"total": 0.0, "status": "paid"})
    _record(acts, "after")
    first = open_engine()
    first.register(
        wf.Workflow("w", data=Order)
        .start_with("before")
        .wait_for_signal("paid", correlate="order_id")
        .then("after")
    )
    parked = [first.start("w", {"order_id": f"o-{i}", "total": i}) for i in (1, 2)]
    first.run_until_idle()
    # a third run's first step is ready, not run: it is taken up from the store after reopen
    ready = first.start("w", {"order_id": "o-3", "total": 3})
    first.close()

    second = open_engine()
    assert [second.signal("paid", f"o-{i}", {}) for i in (1, 2)] == [True, True]
    second.run_until_idle()
    assert second.signal("paid", "o-3", {}) is True
    second.run_until_idle()

    for i, run in enumerate([*parked, ready], start=1):
        again = second.run(run.id)
        assert again.status == wf.RunStatus.COMPLETED
        assert again.input == Order(order_id=f"o-{i}", total=i)
        assert again.data.status == "paid"
    after = sorted(
        (seen_input for node, _, seen_input, _ in _seen(acts) if node == "after"),
        key=lambda o: o.order_id,
    )
    assert after == [Order(order_id=f"o-{i}", total=i) for i in (1, 2, 3)]


def test_restart_as_new_hands_the_new_run_the_original_input(engine, acts) -> None:
    def break_(ctx: wf.ActivityContext[Any]) -> None:
        ctx.data["n"] = 100
        if not ctx.data.get("fixed"):
            raise RuntimeError("down")

    acts.add("change", lambda ctx: ctx.data.update(n=50))
    acts.add("break", break_)
    _record(acts, "last")
    old = run_to_idle(
        engine,
        wf.Workflow("w").start_with("change").then("break", max_attempts=1).then("last"),
        {"n": 1, "fixed": False},
    )
    assert old.status == wf.RunStatus.FAILED

    acts.registry.register("break", lambda ctx: None)  # repaired
    new = engine.restart_as_new(old.id, actor="ops")
    engine.run_until_idle()

    assert new.status == wf.RunStatus.COMPLETED
    assert new.input == {"n": 1, "fixed": False} == old.input
    assert new.data == {"n": 50, "fixed": False}
    assert [seen_input for node, _, seen_input, _ in _seen(acts)] == [{"n": 1, "fixed": False}]


def test_a_context_built_by_hand_without_an_input_says_so() -> None:
    ctx: wf.ActivityContext[Any] = wf.ActivityContext({}, "r-1", "a", "w", 1)
    with pytest.raises(wf.UsageError, match="has no run input"):
        _ = ctx.input
    typed = wf.ActivityContext({}, "r-1", "a", "w", 1, input_json='{"n": 1}')
    assert typed.input == {"n": 1}
