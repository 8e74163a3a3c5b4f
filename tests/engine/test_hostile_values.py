"""Values a store cannot hold never get as far as a group commit.

Text with a lone surrogate or a NUL, NaN, nesting beyond the depth limit, and Python objects JSON
has no form for are refused where they enter — admission, signals, approvals, operator commands —
with a message naming where the value is and what it is, and nothing is written; an activity
that returns or writes one fails its attempt (then retries or fails as usual); an expression
that yields one fails its step. A run whose checkpoint the store still refuses is failed on its
own, and the runs that shared its batch go on.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import wfkit as wf
from wfkit.definition.values import MAX_DEPTH
from wfkit.engine import SystemClock


def nested(depth: int) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for _ in range(depth - 1):
        doc = {"a": doc}
    return doc


def count_runs(engine: wf.Engine) -> int:
    return int(engine.sql("SELECT count(*) FROM wf_instances").fetchall()[0][0])


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"key": "\ud800"}, "lone surrogate"),
        ({"key": "a\x00b"}, "NUL"),
        ({"x": float("nan")}, "not a finite number"),
        ({"x": float("inf")}, "not a finite number"),
        ({"when": dt.datetime(2026, 1, 1)}, "datetime is not a JSON value"),
        ({"tags": {"a", "b"}}, "set is not a JSON value"),
        ({"n": decimal.Decimal("1.5")}, "Decimal is not a JSON value"),
        ({"b": b"bytes"}, "bytes is not a JSON value"),
        ({"m": {(1, 2): "x"}}, "JSON keys are strings"),
        ({"n": 10**4001}, "more than 4,000 digits"),
        (nested(MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
    ],
    ids=[
        "surrogate",
        "nul",
        "nan",
        "inf",
        "datetime",
        "set",
        "decimal",
        "bytes",
        "tuple-key",
        "huge-int",
        "deep",
    ],
)
def test_admission_refuses_values_no_store_can_hold_and_writes_nothing(
    engine, acts, data, said
) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("w").start_with("a"))
    with pytest.raises(wf.AdmissionError, match=said):
        engine.start("w", data)
    assert count_runs(engine) == 0


def test_admission_accepts_the_deepest_document_allowed(engine, acts) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("w").start_with("a"))
    run = engine.start("w", nested(MAX_DEPTH))
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED


def test_an_unstorable_actor_is_refused_at_start(engine, acts) -> None:
    acts.noop("a")
    engine.register(wf.Workflow("w").start_with("a"))
    with pytest.raises(wf.AdmissionError, match="actor contains a lone surrogate"):
        engine.start("w", {}, actor="\udfff")
    assert count_runs(engine) == 0


def _parked(engine: wf.Engine, acts: Any) -> wf.Run:
    acts.noop("after")
    engine.register(
        wf.Workflow("gate")
        .start_with()
        .wait_for_signal("go", correlate="key", bind={"v": "got"}, id="go")
        .approval("ok")
        .then("after")
    )
    run = engine.start("gate", {"key": "k"})
    engine.run_until_idle()
    return run


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"key": "k\ud800"}, "key contains a lone surrogate"),
        ({"key": "k\x00"}, "key contains a NUL"),
        ({"payload": {"v": float("nan")}}, r"payload\.v: nan is not a finite number"),
        ({"payload": {"v": nested(MAX_DEPTH + 5)}}, "nested deeper than"),
        ({"payload": {"v": dt.date(2026, 1, 1)}}, "date is not a JSON value"),
        ({"actor": "ops\x00"}, "actor contains a NUL"),
    ],
    ids=["key-surrogate", "key-nul", "nan", "deep", "date", "actor-nul"],
)
def test_a_refused_signal_leaves_the_wait_in_place(engine, acts, kwargs, said) -> None:
    run = _parked(engine, acts)
    call = {"key": "k", "payload": {"v": 1}, **kwargs}
    with pytest.raises(wf.SignalError, match=said):
        engine.signal("go", call.pop("key"), call.pop("payload"), **call)
    with pytest.raises(wf.SignalError, match=said):
        engine.post_signal("go", "k" if "key" not in kwargs else kwargs["key"], **_post(kwargs))
    assert [w.node_id for w in engine.waiting()] == ["go"]
    assert engine.signal("go", "k", {"v": 1}) is True  # a good one still resumes it
    engine.run_until_idle()
    assert run.data["got"] == 1


def _post(kwargs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"payload": kwargs.get("payload", {"v": 1})}
    if "actor" in kwargs:
        out["actor"] = kwargs["actor"]
    return out


def test_a_refused_approval_leaves_the_approval_open(engine, acts) -> None:
    run = _parked(engine, acts)
    engine.signal("go", "k", {"v": 1})
    engine.run_until_idle()
    with pytest.raises(wf.SignalError, match="comment contains a lone surrogate"):
        engine.approve(run.id, "ok", True, actor="ana", comment="fine \ud83d")
    assert [w.node_id for w in engine.waiting()] == ["ok"]
    engine.approve(run.id, "ok", True, actor="ana", comment="fine 😀")
    engine.run_until_idle()
    assert run.status == wf.RunStatus.COMPLETED


def test_operator_commands_refuse_unstorable_text(engine, acts) -> None:
    run = _parked(engine, acts)
    with pytest.raises(wf.UsageError, match="reason contains a NUL"):
        engine.cancel(run.id, actor="ops", reason="bad\x00")
    assert run.status == wf.RunStatus.WAITING


@pytest.mark.parametrize(
    ("written", "said"),
    [
        (dt.datetime(2026, 1, 1), r"ctx\.data\.when: a datetime is not a JSON value"),
        ({1, 2}, r"ctx\.data\.when: a set is not a JSON value"),
        (decimal.Decimal("2.5"), r"ctx\.data\.when: a Decimal"),
        (b"raw", r"ctx\.data\.when: a bytes"),
        ({(1, 2): 3}, r"ctx\.data\.when: the key \(1, 2\) is a tuple"),
        (10**5000, r"ctx\.data\.when: an integer of more than"),
        ("\ud800", r"ctx\.data\.when: the text contains a lone surrogate"),
    ],
    ids=["datetime", "set", "decimal", "bytes", "tuple-key", "huge-int", "surrogate"],
)
def test_an_activity_writing_what_json_cannot_hold_fails_its_attempt(
    engine, acts, written, said
) -> None:
    def write(ctx: wf.ActivityContext[Any]) -> None:
        ctx.data["when"] = written

    acts.add("write", write)
    acts.noop("ok")
    engine.register(wf.Workflow("w").start_with("write", max_attempts=2, retry_delay="0s"))
    engine.register(wf.Workflow("fine").start_with("ok"))
    bad = engine.start("w", {})
    good = engine.start("fine", {})
    engine.run_until_idle()

    assert good.status == wf.RunStatus.COMPLETED  # it shared the batches of the bad one
    assert bad.status == wf.RunStatus.FAILED
    assert acts.count("write") == 2  # retried as usual, then failed for good
    failures = [e.error for e in bad.history() if e.kind == "step.failed"]
    assert len(failures) == 2
    assert all(f is not None and "cannot be stored" in f for f in failures)
    assert failures[0] is not None
    assert re.search(said, failures[0]), failures[0]
    assert "when" not in bad.data  # the change was not recorded


def test_an_activity_returning_what_json_cannot_hold_fails_its_attempt(engine, acts) -> None:
    acts.add("give", lambda ctx: {"at": dt.time(12, 0)})
    engine.register(wf.Workflow("w").start_with("give", max_attempts=1))
    run = engine.start("w", {})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.FAILED
    assert "return value.at: a time is not a JSON value" in (run.view().error or "")


def test_an_activity_whose_exception_text_is_unstorable_fails_normally(engine, acts) -> None:
    def boom(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("bad \ud800 and \x00 text")

    acts.add("boom", boom)
    acts.noop("ok")
    engine.register(wf.Workflow("w").start_with("boom", max_attempts=1))
    engine.register(wf.Workflow("fine").start_with("ok"))
    bad, good = engine.start("w", {}), engine.start("fine", {})
    engine.run_until_idle()
    assert good.status == wf.RunStatus.COMPLETED
    assert bad.status == wf.RunStatus.FAILED
    assert "bad \\ud800 and \\x00 text" in (bad.view().error or "")


def test_a_data_document_that_outgrows_the_limit_fails_the_step_that_grew_it(
    open_engine, acts
) -> None:
    engine = open_engine(max_payload=2_000)

    def grow(ctx: wf.ActivityContext[Any]) -> None:
        ctx.data["blob"] = "x" * 3_000

    acts.add("grow", grow)
    acts.noop("next")
    engine.register(wf.Workflow("w").start_with("grow", max_attempts=1).then("next"))
    run = engine.start("w", {"a": 1})
    engine.run_until_idle()
    assert run.status == wf.RunStatus.FAILED
    assert "over the 2,000-byte limit" in (run.view().error or "")
    assert acts.count("next") == 0
    assert run.data == {"a": 1}


def test_expressions_whose_value_cannot_be_stored_fail_their_step(engine, acts) -> None:
    acts.noop("each", "after")
    engine.register(wf.Workflow("sets").start_with().for_each("[{1, 2}]", lambda b: b.then("each")))
    engine.register(
        wf.Workflow("huge")
        .start_with()
        .wait_for_signal("go", correlate="int(n, 16)", id="go")
        .then("after")
    )
    sets = engine.start("sets", {})
    huge = engine.start("huge", {"n": "f" * 4_000})
    engine.run_until_idle()

    assert sets.status == wf.RunStatus.FAILED
    assert "items[0]: a set is not a JSON value" in (sets.view().error or "")
    assert huge.status == wf.RunStatus.FAILED
    assert "gave a key that cannot be stored" in (huge.view().error or "")
    assert acts.count("each") == 0 and acts.count("after") == 0


@contextlib.contextmanager
def _poisoned_rows(engine: wf.Engine, error_of: Callable[[Any], str | None]) -> Iterator[None]:
    """While inside, a checkpoint for which ``error_of(cp)`` gives a text carries it as its first
    event's error (text the store refuses), the way a value the checks missed would."""
    writer = engine.runtime.writer
    original = writer._rows

    def rows(cp: Any, new_runs: Any) -> Any:
        error = error_of(cp)
        if error is not None:
            cp.events[0].error = error
        return original(cp, new_runs)

    writer._rows = rows  # type: ignore[method-assign]
    try:
        yield
    finally:
        writer._rows = original  # type: ignore[method-assign]


def test_a_run_whose_checkpoint_the_store_refuses_fails_alone(engine, acts) -> None:
    """A value the policy does not know, refused by the store itself, in one run of a batch:
    that run fails as it last stood, with the store's reason; the others are written."""
    acts.noop("a", "b")
    engine.register(wf.Workflow("w").start_with("a").then("b"))
    runs = engine.start_many("w", [{"i": i} for i in range(4)])
    poison = runs[2].id

    def poisoned(cp: Any) -> str | None:  # an event text no store can encode
        return "poison \ud800" if cp.run.run_id == poison and cp.events else None

    with _poisoned_rows(engine, poisoned):
        engine.run_until_idle()

    for run in runs:
        run = engine.run(run.id)
        if run.id == poison:
            assert run.status == wf.RunStatus.FAILED
            assert "could not write this run's checkpoint" in (run.view().error or "")
            assert [e.kind for e in run.history()][-1] == "run.failed"
        else:
            assert run.status == wf.RunStatus.COMPLETED
    assert acts.count("a") == 4  # nothing ran twice
    assert acts.count("b") == 3


def test_hung_attempts_do_not_turn_other_timeouts_into_failures(open_engine, acts) -> None:
    """Attempts that never return are abandoned at their timeout and hold no slot: an
    activity with an attempt_timeout still runs after many of them hung."""
    release = threading.Event()

    def hang(ctx: wf.ActivityContext[Any]) -> None:
        release.wait(60)

    acts.add("hang", hang)
    acts.add("quick", lambda ctx: {"ran": True})
    engine = open_engine(clock=SystemClock())
    engine.register(wf.Workflow("hang").start_with("hang", attempt_timeout="0.2s", max_attempts=1))
    engine.register(wf.Workflow("quick").start_with("quick", attempt_timeout="5s"))
    try:
        hung = engine.start_many("hang", [{} for _ in range(12)])  # twice the old pool size
        engine.run_until_idle()
        assert all(engine.run(r.id).status == wf.RunStatus.FAILED for r in hung)
        began = time.monotonic()
        quick = engine.start("quick", {})
        engine.run_until_idle()
        assert quick.status == wf.RunStatus.COMPLETED
        assert quick.outputs["quick"] == {"ran": True}
        assert time.monotonic() - began < 5  # it ran: it did not wait for a free slot
        assert engine.runtime.scheduler.threads.hung == 12
    finally:
        release.set()


def test_a_lone_run_whose_checkpoint_the_store_refuses_fails_instead_of_looping(
    engine, acts
) -> None:
    acts.noop("a", "b")
    engine.register(wf.Workflow("w").start_with("a").then("b"))
    run = engine.start("w", {})

    def poisoned(cp: Any) -> str | None:  # no store can take this text
        completed = cp.events and cp.events[0].kind == "step.completed"
        return "poison \x00 \ud800" if completed else None

    with _poisoned_rows(engine, poisoned):
        engine.run_until_idle()

    run = engine.run(run.id)
    assert run.status == wf.RunStatus.FAILED
    assert "could not write this run's checkpoint" in (run.view().error or "")
    assert acts.count("a") == 1  # not run again and again
    assert acts.count("b") == 0


@pytest.mark.parametrize(
    ("where", "text"),
    [("id", "w\x00"), ("label", "lab\x00el"), ("label", "sur\ud800"), ("edge", "o\udfff")],
    ids=["id-nul", "label-nul", "label-surrogate", "outlet-surrogate"],
)
def test_a_definition_holding_unstorable_text_is_refused_at_registration(
    engine, acts, where, text
) -> None:
    acts.noop("a", "b")
    if where == "id":
        with pytest.raises(wf.UsageError, match="NUL character"):
            wf.Workflow(text)
        return
    flow = wf.Workflow("w").start_with("a", id="n1").then("b", id="n2")
    if where == "label":
        flow.graph.nodes["n1"]["label"] = text
    if where == "edge":
        flow.graph.add_edge("n1", "n2", key=text)
    problems = [p for p in wf.validate(flow.graph, registry=acts.registry) if p.code == "bad-text"]
    assert problems and "remove the character" in problems[0].message
    with pytest.raises(wf.WfkitError, match=r"bad-text|remove the character"):
        engine.register(flow)
    assert engine.sql("SELECT count(*) FROM wf_definitions").fetchall() == [(0,)]
