"""Values nested past the depth limit, wherever they enter, are refused as nested too deep.

Every path a nested value takes into a run — start data (plain, through a data model, in a
transaction), signal payloads (plain, through a payload model, a binder or a bind into the
data), approval comments, activity return values (plain and typed) and ctx.data writes (plain
and through a model), a call's bind back — refuses one nested deeper than 64 levels with the
same words, whether it is 65 levels deep or 100,000: never with Python's RecursionError (which
json.dumps, ``==``, JSON patches and pydantic raise on values about 1,000 levels deep). Nothing
is written, a wait stays in place, an attempt fails on its own, and the runs sharing its group
commit go on.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import wfkit as wf
from tests.engine.test_hostile_values import _poisoned_rows, count_runs
from wfkit.definition.values import MAX_DEPTH

SAID = f"nested deeper than {MAX_DEPTH} levels"
DEPTHS = [MAX_DEPTH + 1, 1_000, 100_000]


def deep(levels: int) -> Any:
    """A value of ``levels`` levels, dicts and lists in turn, built without recursion."""
    value: Any = 1
    for i in range(levels):
        value = {"a": value} if i % 2 else [value]
    return value


class Doc(BaseModel):
    x: Any = None


class Box(BaseModel):
    v: Any = None


def test_deep_builds_what_it_says() -> None:
    value, levels = deep(MAX_DEPTH + 1), 0
    while isinstance(value, dict | list):
        value, levels = value["a"] if isinstance(value, dict) else value[0], levels + 1
    assert levels == MAX_DEPTH + 1


@pytest.mark.parametrize("levels", DEPTHS)
def test_start_data_nested_too_deep_is_refused_and_nothing_is_written(
    engine, acts, levels: int
) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("plain").start_with("a"))
    engine.register(wf.Workflow("typed", data=Doc).start_with("a"))
    value = deep(levels)
    starts = {
        "start": lambda: engine.start("plain", {"x": value}),
        "start_many": lambda: engine.start_many("plain", [{"x": 1}, {"x": value}]),
        "model, a dict": lambda: engine.start("typed", {"x": value}),
        "model, an instance": lambda: engine.start("typed", Doc(x=value)),
    }
    for what, start in starts.items():
        with pytest.raises(wf.AdmissionError, match=SAID) as refused:
            start()
        assert "Recursion" not in str(refused.value), what
    with pytest.raises(wf.AdmissionError, match=SAID), engine.transaction() as tx:
        tx.start("plain", {"x": value})
    assert count_runs(engine) == 0


def _gate(engine: wf.Engine, acts: Any) -> wf.Run:
    def binder(data: dict[str, Any], payload: dict[str, Any]) -> None:
        data["grown"] = deep(payload["levels"])

    acts.noop("after")
    acts.registry.register("grow.binder", binder)
    engine.register(
        wf.Workflow("gate")
        .start_with()
        .wait_for_signal("go", correlate="key", bind={"v": "got"}, id="go")
        .wait_for_signal("typed", correlate="key", payload=Box, id="typed")
        .wait_for_signal("grow", correlate="key", bind="grow.binder", id="grow")
        .approval("ok")
        .then("after")
    )
    run = engine.start("gate", {"key": "k"})
    engine.run_until_idle()
    return run


def _open(engine: wf.Engine) -> list[str]:
    return [w.node_id for w in engine.waiting()]


@pytest.mark.parametrize("levels", DEPTHS)
def test_signal_payloads_nested_too_deep_are_refused_and_the_waits_stay(
    engine, acts, levels: int
) -> None:
    run = _gate(engine, acts)
    value = deep(levels)
    for send in (
        lambda: engine.signal("go", "k", {"v": value}),
        lambda: engine.post_signal("go", "k", {"v": value}),
        lambda: engine.post_signal("go", "nobody-waits", {"v": value}),
        lambda: engine.check_payload(run.id, "go", {"v": value}),
        lambda: engine.signal("go", "k", {"v": 1}, actor=value),  # type: ignore[arg-type]
    ):
        with pytest.raises(wf.SignalError, match=SAID) as refused:
            send()
        assert "Recursion" not in str(refused.value)
    assert _open(engine) == ["go"]
    assert engine.sql("SELECT count(*) FROM wf_signals").fetchall() == [(0,)]

    assert engine.signal("go", "k", {"v": 1})
    engine.run_until_idle()
    for send in (
        lambda: engine.signal("typed", "k", {"v": value}),
        lambda: engine.check_payload(run.id, "typed", {"v": value}),
    ):
        with pytest.raises(wf.SignalError, match=SAID):
            send()
    assert _open(engine) == ["typed"]
    assert engine.signal("typed", "k", {"v": [1]})
    engine.run_until_idle()

    # the binder puts the payload's wish into the data: the data would nest too deep
    with pytest.raises(wf.SignalError, match=rf"binder 'grow.binder' made data .*{SAID}"):
        engine.signal("grow", "k", {"levels": levels})
    assert _open(engine) == ["grow"]
    assert "grown" not in run.data
    assert engine.signal("grow", "k", {"levels": 3})
    engine.run_until_idle()

    with pytest.raises(wf.SignalError, match=SAID):
        engine.approve(run.id, "ok", comment=value)  # type: ignore[arg-type]
    assert _open(engine) == ["ok"]
    engine.approve(run.id, "ok", comment="fine")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED
    assert run.data["got"] == 1 and run.data["grown"] == deep(3)


def test_a_kept_signal_whose_binder_makes_data_too_deep_is_refused_when_the_wait_opens(
    engine, acts
) -> None:
    acts.noop("first")
    acts.registry.register("deep.binder", lambda data, payload: data.update(v=deep(1_000)))
    engine.register(
        wf.Workflow("late")
        .start_with("first")
        .wait_for_signal("go", correlate="key", bind="deep.binder", id="go")
    )
    assert engine.post_signal("go", "k", {"x": 1}) is False  # kept: nothing waits yet
    run = engine.start("late", {"key": "k"})
    engine.run_until_idle()

    (refused,) = [e for e in run.history() if e.kind == "signal.refused"]
    assert refused.error is not None and SAID in refused.error
    assert _open(engine) == ["go"]  # the wait opened all the same
    assert run.status == wf.RunStatus.WAITING


def test_a_binder_that_raises_leaves_the_wait_in_place(engine, acts) -> None:
    """The binder runs before the signal changes anything (it dropped the wait before)."""

    def picky(data: dict[str, Any], payload: dict[str, Any]) -> None:
        data["n"] = payload["n"]  # KeyError without "n"

    acts.noop("after")
    acts.registry.register("picky.binder", picky)
    engine.register(
        wf.Workflow("w")
        .start_with()
        .wait_for_signal("go", correlate="key", bind="picky.binder", id="go")
        .then("after")
    )
    run = engine.start("w", {"key": "k"})
    engine.run_until_idle()
    with pytest.raises(KeyError):
        engine.signal("go", "k", {"other": 1})
    engine.run_until_idle()
    assert _open(engine) == ["go"] and run.status == wf.RunStatus.WAITING
    assert engine.signal("go", "k", {"n": 2})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED and run.data["n"] == 2


def test_a_bind_that_places_the_payload_too_deep_in_the_data_is_refused(engine, acts) -> None:
    acts.noop("after")
    target = ".".join(["p"] * 10)  # a payload value 60 levels deep lands 70 levels down
    engine.register(
        wf.Workflow("w")
        .start_with()
        .wait_for_signal("go", correlate="key", bind={"v": target}, id="go")
        .then("after")
    )
    run = engine.start("w", {"key": "k"})
    engine.run_until_idle()
    with pytest.raises(wf.SignalError, match=rf"binding 'v' makes data .*{SAID}"):
        engine.signal("go", "k", {"v": deep(60)})
    assert _open(engine) == ["go"]
    assert run.data == {"key": "k"}


def _activities(acts: Any, levels: int) -> None:
    value = deep(levels)

    def give_box(ctx: Any) -> Box:  # a typed output: the engine fits it to Box
        return Box(v=value)

    def write(ctx: Any) -> None:
        ctx.data["x"] = value

    def write_model(ctx: wf.ActivityContext[Doc]) -> None:
        ctx.data.x = value

    acts.add("give", lambda ctx: {"v": value})
    acts.add("give.raw", lambda ctx: value)
    acts.add("give.box", give_box)
    acts.add("write", write)
    acts.add("write.model", write_model)
    acts.noop("fine")


@pytest.mark.parametrize("levels", DEPTHS)
def test_activities_returning_or_writing_values_too_deep_fail_alone(
    engine, acts, levels: int
) -> None:
    _activities(acts, levels)
    said = {
        "give": "returned a value that is not JSON or cannot be stored (return value.v",
        "give.raw": "returned a value that is not JSON or cannot be stored (return value",
        "give.box": "returned a value that is not JSON or cannot be stored (return value",
        "write": "wrote a value into ctx.data that cannot be stored: ctx.data.x",
        "write.model": "wrote a value into ctx.data that cannot be stored: ctx.data.x",
    }
    for name in said:
        data = Doc if name == "write.model" else None
        engine.register(
            wf.Workflow(name, data=data).start_with(name, max_attempts=2, retry_delay="0s")
        )
    engine.register(wf.Workflow("fine").start_with("fine"))
    runs = {name: engine.start(name, {}) for name in said}
    fine = engine.start_many("fine", [{} for _ in range(3)])  # in the same group commits
    engine.run_until_idle()

    assert [engine.run(r.id).status for r in fine] == [wf.RunStatus.COMPLETED] * 3
    for name, run in runs.items():
        assert run.status == wf.RunStatus.FAILED, name
        failures = [e.error or "" for e in run.history() if e.kind == "step.failed"]
        assert len(failures) == 2, name  # retried as usual: each attempt failed cleanly
        for error in failures:
            assert said[name] in error and SAID in error, (name, error[:300])
            assert "Recursion" not in error and "Traceback" not in error, name
        assert run.data == (Doc() if name == "write.model" else {}), name  # nothing recorded
        assert run.outputs == {}, name
    assert acts.count("give") == 2 and acts.count("write.model") == 2


def test_a_call_binding_the_childs_data_too_deep_into_this_run_fails_the_call(engine, acts) -> None:
    acts.add("child.fill", lambda ctx: ctx.data.update(tree=deep(60)))
    acts.noop("after")
    engine.register(wf.Workflow("child").start_with("child.fill"))
    target = ".".join(["t"] * 10)
    flow = wf.Workflow("parent").start_with().call("child", bind={"tree": target}).then("after")
    engine.register(flow)
    run = engine.start("parent", {})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    (failed,) = [e for e in run.history() if e.kind == "call.failed"]
    assert failed.error is not None
    assert failed.error.startswith("call 'call-child': cannot bind the child's data: data.t.t")
    assert failed.error.endswith(SAID)
    assert run.data == {} and acts.count("after") == 0


def test_a_call_whose_input_places_a_value_too_deep_fails_and_starts_no_child(engine, acts) -> None:
    acts.noop("child.step")
    engine.register(wf.Workflow("child").start_with("child.step"))
    field = ".".join(["i"] * 10)
    engine.register(wf.Workflow("parent").start_with().call("child", input={field: "tree"}))
    run = engine.start("parent", {"tree": deep(60)})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    error = run.view().error or ""
    assert "call 'call-child': the input is not a JSON document (input.i.i.i" in error
    assert SAID in error
    assert run.children() == [] and acts.count("child.step") == 0


def test_a_checkpoint_holding_a_value_too_deep_to_write_fails_its_run_alone(engine, acts) -> None:
    """A value the checks missed: the run fails saying it is nested too deep, the others go on."""
    acts.noop("a", "b")
    engine.register(wf.Workflow("w").start_with("a").then("b"))
    runs = engine.start_many("w", [{"i": i} for i in range(3)])
    poison = runs[1].id
    value = deep(100_000)

    def poisoned(cp: Any) -> None:
        if cp.run.run_id == poison and cp.events:
            cp.events[0].detail = {"v": value}
        return None

    with _poisoned_rows(engine, poisoned):
        engine.run_until_idle()

    for run in runs:
        run = engine.run(run.id)
        if run.id != poison:
            assert run.status == wf.RunStatus.COMPLETED
            continue
        assert run.status == wf.RunStatus.FAILED
        error = run.view().error or ""
        assert "could not write this run's checkpoint, so it failed as it last stood: " in error
        assert error.endswith(f"a value in its state is {SAID}")
