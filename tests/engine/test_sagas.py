"""Sagas: completed compensable steps are undone newest first once a step fails for good;
nested sagas unwind with their parent or stand (``keep``); failed compensations wait for an
operator's retry, skip or abandon."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import wfkit as wf


def events(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def kinds(run: wf.Run) -> list[str]:
    return [e.kind for e in run.history()]


def saga_rows(engine: wf.Engine, run: wf.Run) -> list[tuple[Any, ...]]:
    """(saga, node, compensation, position, status) of the run's saga steps, oldest first."""
    return engine.sql(
        "SELECT saga_id, node_id, compensation, position, status FROM wf_saga_steps "
        f"WHERE run_id = '{run.id}' ORDER BY position"
    ).fetchall()


def statuses(engine: wf.Engine, run: wf.Run) -> dict[str, str]:
    return {row[1]: row[4] for row in saga_rows(engine, run)}


NO_WAIT = {"retry_delay": timedelta(0), "jitter": 0}
"""Retry at once: a step's whole attempt budget is spent in one ``run_until_idle``."""


# --- checkout: reserve/release, charge/refund, book/cancel ------------------------------------


class Switches(dict[str, bool]):
    """Which activities are broken right now (tests flip them to 'fix the cause')."""


@pytest.fixture
def broken() -> Switches:
    return Switches()


@pytest.fixture
def checkout_acts(acts, broken: Switches) -> Any:
    """Checkout activities: each step writes the data, each compensation takes it back."""

    def step(name: str, field: str) -> Callable[[Any], Any]:
        def body(ctx: wf.ActivityContext[dict[str, Any]]) -> dict[str, str]:
            if broken.get(name):
                raise RuntimeError(f"{name} backend down (attempt {ctx.attempt})")
            ctx.data[field] = f"{field}-{ctx.data['order']}"
            return {field: ctx.data[field]}

        return body

    def undo(name: str, field: str) -> Callable[[Any], Any]:
        def body(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
            if broken.get(name):
                raise RuntimeError(f"{name} backend down (attempt {ctx.attempt})")
            ctx.data[field] = None

        return body

    for name, field in (("reserve", "reservation"), ("charge", "payment"), ("book", "courier")):
        acts.add(name, step(name, field))
    for name, field in (("release", "reservation"), ("refund", "payment"), ("cancel", "courier")):
        acts.add(name, undo(name, field))
    acts.noop("receipt")
    return acts


def checkout(
    *,
    book: dict[str, Any] | None = None,
    refund: dict[str, Any] | None = None,
    on_failure: str | None = None,
    tail: bool = True,
) -> wf.Workflow:
    """start -> saga[reserve, charge, book] -> receipt (``tail=False``: the saga ends it)."""

    def body(s: wf.Steps) -> None:
        s.then("reserve").compensate_with("release")
        s.then("charge").compensate_with("refund", policy=refund)
        s.then("book", **(book or {})).compensate_with("cancel")
        if on_failure:
            s.on_failure(on_failure)

    flow = wf.Workflow("checkout").start_with().saga(body, id="checkout")
    return flow.then("receipt") if tail else flow


def test_a_step_failing_for_good_unwinds_the_completed_steps_in_reverse(
    engine, checkout_acts, broken, clock
) -> None:
    broken["book"] = True
    engine.register(checkout(book={"max_attempts": 3, "retry_delay": "10s", "jitter": 0}))
    run = engine.start("checkout", {"order": "o-1"})
    engine.run_until_idle()
    clock.advance("10s")
    engine.run_until_idle()
    clock.advance("20s")
    engine.run_until_idle()

    acts = checkout_acts
    assert acts.names() == ["reserve", "charge", "book", "book", "book", "refund", "release"]
    assert acts.count("cancel") == 0  # book never completed: nothing to cancel
    assert [c.node_id for c in acts.of("refund")] == ["charge"]
    assert [c.node_id for c in acts.of("release")] == ["reserve"]
    assert run.status == wf.RunStatus.FAILED
    assert run.data == {"order": "o-1", "reservation": None, "payment": None}
    assert saga_rows(engine, run) == [
        ("checkout", "reserve", "release", 1, "compensated"),
        ("checkout", "charge", "refund", 2, "compensated"),
    ]
    unwinding = events(run, "saga.unwinding")
    assert [(e.node_id, e.detail["steps"]) for e in unwinding] == [("book", ["charge", "reserve"])]
    assert "book backend down (attempt 3)" in unwinding[0].error
    completed = events(run, "compensation.completed")
    assert [(e.node_id, e.detail["activity"]) for e in completed] == [
        ("charge", "refund"),
        ("reserve", "release"),
    ]
    tail = kinds(run)[kinds(run).index("saga.unwinding") :]
    assert tail == [
        "saga.unwinding",
        "compensation.completed",
        "compensation.completed",
        "saga.compensated",
        "run.failed",
    ]
    assert "book backend down" in engine.runs(status="failed")[0].error
    node_status = run.node_statuses()
    assert (node_status["reserve"], node_status["charge"], node_status["book"]) == (
        "compensated",
        "compensated",
        "failed",
    )
    assert engine.sql(f"SELECT status FROM wf_instances WHERE run_id = '{run.id}'").fetchall() == [
        ("failed",)
    ]


def test_a_first_exception_does_not_unwind_only_exhausted_retries_do(
    engine, checkout_acts, broken, clock
) -> None:
    broken["book"] = True
    engine.register(checkout(book={"max_attempts": 3, "retry_delay": "10s", "jitter": 0}))
    run = engine.start("checkout", {"order": "o-1"})
    acts = checkout_acts

    engine.run_until_idle()  # attempt 1 fails
    for attempt in (1, 2):
        assert [c.attempt for c in acts.of("book")] == list(range(1, attempt + 1))
        assert acts.count("refund") == acts.count("release") == 0
        assert run.status not in (wf.RunStatus.COMPENSATING, wf.RunStatus.FAILED)
        assert events(run, "saga.unwinding") == []
        assert set(statuses(engine, run).values()) == {"done"}
        assert f"retrying 'book' (attempt {attempt + 1})" in run.explain()
        clock.advance(timedelta(seconds=10 * 2 ** (attempt - 1)))
        engine.run_until_idle()

    assert [c.attempt for c in acts.of("book")] == [1, 2, 3]
    assert acts.names()[-2:] == ["refund", "release"]
    assert run.status == wf.RunStatus.FAILED
    failed = [e.attempt for e in events(run, "step.failed") if e.node_id == "book"]
    assert failed == [1, 2, 3]
    history = run.history()
    last_failure = max(i for i, e in enumerate(history) if e.kind == "step.failed")
    assert history[last_failure + 1].kind == "saga.unwinding"


def test_on_failure_compensate_unwinds_like_the_default(engine, checkout_acts, broken) -> None:
    broken["book"] = True
    engine.register(checkout(book={"max_attempts": 1}, on_failure="compensate"))
    run = engine.start("checkout", {"order": "o-1"})
    engine.run_until_idle()

    assert checkout_acts.names() == ["reserve", "charge", "book", "refund", "release"]
    assert run.status == wf.RunStatus.FAILED
    assert set(statuses(engine, run).values()) == {"compensated"}


def test_the_happy_path_compensates_nothing_and_commits_the_steps(engine, checkout_acts) -> None:
    engine.register(checkout())
    run = engine.start("checkout", {"order": "o-1"})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert checkout_acts.names() == ["reserve", "charge", "book", "receipt"]
    assert saga_rows(engine, run) == [
        ("checkout", "reserve", "release", 1, "committed"),
        ("checkout", "charge", "refund", 2, "committed"),
        ("checkout", "book", "cancel", 3, "committed"),
    ]
    assert [e.detail["saga"] for e in events(run, "saga.committed")] == ["checkout"]
    assert events(run, "saga.unwinding") == []
    assert run.data == {
        "order": "o-1",
        "reservation": "reservation-o-1",
        "payment": "payment-o-1",
        "courier": "courier-o-1",
    }


def test_a_saga_that_ends_the_workflow_is_committed_too(engine, checkout_acts) -> None:
    engine.register(checkout(tail=False))
    run = engine.start("checkout", {"order": "o-1"})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.COMPLETED
    assert checkout_acts.names() == ["reserve", "charge", "book"]
    assert set(statuses(engine, run).values()) == {"committed"}
    assert [e.detail["saga"] for e in events(run, "saga.committed")] == ["checkout"]


def test_on_failure_terminate_fails_the_run_and_undoes_nothing(
    engine, checkout_acts, broken
) -> None:
    broken["book"] = True
    engine.register(checkout(book={"max_attempts": 2, **NO_WAIT}, on_failure="terminate"))
    run = engine.start("checkout", {"order": "o-1"})
    engine.run_until_idle()

    acts = checkout_acts
    assert acts.names() == ["reserve", "charge", "book", "book"]
    assert run.status == wf.RunStatus.FAILED
    assert "book backend down (attempt 2)" in (events(run, "run.failed")[0].error or "")
    assert events(run, "saga.unwinding") == []
    assert not any(k.startswith("compensation.") for k in kinds(run))
    assert "compensated" not in statuses(engine, run).values()
    assert run.data["reservation"] == "reservation-o-1"  # nothing was taken back
    assert run.data["payment"] == "payment-o-1"


def test_on_failure_suspend_parks_the_run_and_resume_gives_fresh_attempts(
    engine, checkout_acts, broken
) -> None:
    def book(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
        if broken.get("book") or ctx.attempt == 1:
            raise RuntimeError(f"courier api down (attempt {ctx.attempt})")
        ctx.data["courier"] = "booked"

    acts = checkout_acts
    acts.add("book", book)
    broken["book"] = True
    engine.register(checkout(book={"max_attempts": 2, **NO_WAIT}, on_failure="suspend"))
    run = engine.start("checkout", {"order": "o-1"})
    engine.run_until_idle()

    assert run.status == wf.RunStatus.SUSPENDED
    assert acts.names() == ["reserve", "charge", "book", "book"]
    assert set(statuses(engine, run).values()) == {"done"}  # nothing undone
    assert not any(k.startswith(("saga.", "compensation.")) for k in kinds(run))
    assert [e.node_id for e in events(run, "run.suspended")] == ["book"]
    explained = run.explain()
    assert "suspended at 'book'" in explained
    assert "courier api down (attempt 2)" in explained
    assert "engine.resume" in explained
    with pytest.raises(wf.UsageError, match="no failed compensation"):
        engine.recover_compensation(run.id, action="retry", actor="ops")

    broken["book"] = False
    engine.resume(run.id, actor="ops")
    engine.run_until_idle()

    assert [c.attempt for c in acts.of("book")] == [1, 2, 1, 2]  # a fresh budget of two
    assert acts.names()[-1] == "receipt"
    assert run.status == wf.RunStatus.COMPLETED
    assert run.data["courier"] == "booked"
    assert [(e.actor, e.detail["steps"]) for e in events(run, "run.resumed")] == [("ops", ["book"])]
    assert set(statuses(engine, run).values()) == {"committed"}
    with pytest.raises(wf.UsageError, match="not suspended"):
        engine.resume(run.id, actor="ops")


# --- nested sagas -----------------------------------------------------------------------------


@pytest.fixture
def trip_acts(acts, broken: Switches) -> Any:
    """Steps append their name to data['done']; compensations remove it."""

    def step(name: str) -> Callable[[Any], Any]:
        def body(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
            if broken.get(name):
                raise RuntimeError(f"{name} failed")
            ctx.data["done"].append(name)

        return body

    def undo(name: str) -> Callable[[Any], Any]:
        def body(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
            ctx.data["done"].remove(name)

        return body

    for name in ("outer1", "inner1", "inner2", "inner3", "outer2", "outer3"):
        acts.add(name, step(name))
        acts.add(f"{name}.undo", undo(name))
    return acts


def nested(policy: str, inner: tuple[str, ...], after: tuple[str, ...]) -> wf.Workflow:
    """saga 'outer'[outer1, saga 'inner'(policy)[*inner], *after], each step compensable."""

    def inner_body(s: wf.Steps) -> None:
        for name in inner:
            s.then(name, max_attempts=1).compensate_with(f"{name}.undo")

    def outer_body(s: wf.Steps) -> None:
        s.then("outer1", max_attempts=1).compensate_with("outer1.undo")
        s.saga(inner_body, policy=policy, id="inner")
        for name in after:
            s.then(name, max_attempts=1).compensate_with(f"{name}.undo")

    return wf.Workflow("trip").start_with().saga(outer_body, id="outer")


def undo_calls(acts: Any) -> list[str]:
    return [n for n in acts.names() if n.endswith(".undo")]


def test_a_nested_unwind_saga_is_undone_by_an_outer_failure_innermost_first(
    engine, trip_acts, broken
) -> None:
    broken["outer2"] = True
    engine.register(nested("unwind", ("inner1", "inner2"), ("outer2",)))
    run = engine.start("trip", {"done": []})
    engine.run_until_idle()

    assert undo_calls(trip_acts) == ["inner2.undo", "inner1.undo", "outer1.undo"]
    assert run.status == wf.RunStatus.FAILED
    assert run.data == {"done": []}
    assert saga_rows(engine, run) == [
        ("outer", "outer1", "outer1.undo", 1, "compensated"),
        ("inner", "inner1", "inner1.undo", 2, "compensated"),
        ("inner", "inner2", "inner2.undo", 3, "compensated"),
    ]


def test_a_nested_keep_saga_that_committed_stands_when_the_outer_one_unwinds(
    engine, trip_acts, broken
) -> None:
    broken["outer2"] = True
    engine.register(nested("keep", ("inner1", "inner2"), ("outer2",)))
    run = engine.start("trip", {"done": []})
    engine.run_until_idle()

    assert undo_calls(trip_acts) == ["outer1.undo"]
    assert run.status == wf.RunStatus.FAILED
    assert run.data == {"done": ["inner1", "inner2"]}
    assert saga_rows(engine, run) == [
        ("outer", "outer1", "outer1.undo", 1, "compensated"),
        ("inner", "inner1", "inner1.undo", 2, "kept"),
        ("inner", "inner2", "inner2.undo", 3, "kept"),
    ]
    assert [e.detail["saga"] for e in events(run, "saga.committed")] == ["inner"]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("unwind", ["outer2.undo", "inner2.undo", "inner1.undo", "outer1.undo"]),
        ("keep", ["outer2.undo", "outer1.undo"]),
    ],
)
def test_an_inner_saga_between_outer_steps_unwinds_in_reverse_position(
    engine, trip_acts, broken, policy, expected
) -> None:
    broken["outer3"] = True
    engine.register(nested(policy, ("inner1", "inner2"), ("outer2", "outer3")))
    run = engine.start("trip", {"done": []})
    engine.run_until_idle()

    assert undo_calls(trip_acts) == expected
    assert run.status == wf.RunStatus.FAILED


@pytest.mark.parametrize("policy", ["unwind", "keep"])
def test_an_inner_failure_unwinds_the_inner_saga_completely_before_the_outer_one(
    engine, trip_acts, broken, policy
) -> None:
    broken["inner3"] = True
    engine.register(nested(policy, ("inner1", "inner2", "inner3"), ("outer2",)))
    run = engine.start("trip", {"done": []})
    engine.run_until_idle()

    acts = trip_acts
    assert acts.names() == [
        "outer1",
        "inner1",
        "inner2",
        "inner3",
        "inner2.undo",
        "inner1.undo",
        "outer1.undo",
    ]
    assert acts.count("outer2") == 0
    assert run.status == wf.RunStatus.FAILED
    assert run.data == {"done": []}
    assert set(statuses(engine, run).values()) == {"compensated"}
    assert events(run, "saga.committed") == []  # the inner saga never committed


# --- compensations that fail ------------------------------------------------------------------


def suspended_on_refund(engine: wf.Engine, broken: Switches) -> wf.Run:
    """book fails for good; refund fails both of its attempts: the run waits for an operator."""
    broken["book"] = broken["refund"] = True
    engine.register(
        checkout(book={"max_attempts": 1}, refund={"max_attempts": 2, "retry_delay": "5s"})
    )
    run = engine.start("checkout", {"order": "o-1"})
    engine.run_until_idle()
    engine.clock.advance("5s")  # type: ignore[attr-defined]
    engine.run_until_idle()
    return run


def test_a_compensation_retries_on_its_own_policy(engine, checkout_acts, broken, clock) -> None:
    def flaky_refund(ctx: wf.ActivityContext[dict[str, Any]]) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("refund timed out")
        ctx.data["payment"] = None

    acts = checkout_acts
    acts.add("refund", flaky_refund)
    broken["book"] = True
    engine.register(
        checkout(
            book={"max_attempts": 1},
            refund={"max_attempts": 3, "retry_delay": "5s", "jitter": 0},
        )
    )
    run = engine.start("checkout", {"order": "o-1"})
    engine.run_until_idle()
    assert [c.attempt for c in acts.of("refund")] == [1]
    assert acts.count("release") == 0
    assert run.status == wf.RunStatus.COMPENSATING

    clock.advance("5s")
    engine.run_until_idle()

    assert [c.attempt for c in acts.of("refund")] == [1, 2]
    assert acts.names()[-1] == "release"
    assert run.status == wf.RunStatus.FAILED
    assert set(statuses(engine, run).values()) == {"compensated"}
    failed = events(run, "compensation.failed")
    assert [(e.node_id, e.attempt, e.detail["activity"]) for e in failed] == [
        ("charge", 1, "refund")
    ]


def test_a_compensation_failing_for_good_suspends_the_run_for_an_operator(
    engine, checkout_acts, broken
) -> None:
    run = suspended_on_refund(engine, broken)

    acts = checkout_acts
    assert acts.names() == ["reserve", "charge", "book", "refund", "refund"]
    assert acts.count("release") == 0  # the unwind stopped at the failed compensation
    assert run.status == wf.RunStatus.SUSPENDED
    explained = run.explain()
    assert "refund" in explained
    assert "refund backend down (attempt 2)" in explained
    assert "retry, skip or abandon" in explained
    failed = events(run, "compensation.failed")
    assert [(e.node_id, e.attempt) for e in failed] == [("charge", 1), ("charge", 2)]
    assert "refund backend down" in failed[-1].error
    assert statuses(engine, run)["reserve"] == "done"
    assert statuses(engine, run)["charge"] != "compensated"
    assert run.node_statuses()["charge"] == "compensating"  # its undo is stuck, not the step
    with pytest.raises(wf.UsageError, match="recover_compensation"):
        engine.resume(run.id, actor="ops")
    with pytest.raises(wf.UsageError, match="'retry', 'skip' or 'abandon'"):
        engine.recover_compensation(run.id, action="ignore", actor="ops")
    assert run.status == wf.RunStatus.SUSPENDED


def test_retrying_a_fixed_compensation_finishes_the_unwind(engine, checkout_acts, broken) -> None:
    run = suspended_on_refund(engine, broken)

    broken["refund"] = False
    engine.recover_compensation(run.id, action="retry", actor="ops")
    engine.run_until_idle()

    acts = checkout_acts
    assert acts.names()[-2:] == ["refund", "release"]
    assert acts.of("refund")[-1].attempt == 1  # a fresh budget
    assert run.status == wf.RunStatus.FAILED
    assert "book backend down" in (events(run, "run.failed")[0].error or "")
    assert set(statuses(engine, run).values()) == {"compensated"}
    assert run.data == {"order": "o-1", "reservation": None, "payment": None}
    retried = events(run, "compensation.retried")
    assert [(e.node_id, e.actor) for e in retried] == [("charge", "ops")]
    assert run.node_statuses()["charge"] == "compensated"


def test_skipping_a_compensation_records_the_decision_and_unwinds_the_rest(
    engine, checkout_acts, broken
) -> None:
    run = suspended_on_refund(engine, broken)

    engine.recover_compensation(run.id, action="skip", actor="ops")
    engine.run_until_idle()

    acts = checkout_acts
    assert acts.count("refund") == 2  # not run again
    assert acts.names()[-1] == "release"
    assert run.status == wf.RunStatus.FAILED
    assert statuses(engine, run) == {"reserve": "compensated", "charge": "skipped"}
    skipped = events(run, "compensation.skipped")
    assert [(e.node_id, e.actor) for e in skipped] == [("charge", "ops")]
    assert "decision" in skipped[0].detail["note"]
    assert run.data["payment"] == "payment-o-1"  # skipping undoes nothing
    assert run.data["reservation"] is None
    assert run.node_statuses()["charge"] == "skipped"


def test_abandoning_the_unwind_fails_the_run_at_once(engine, checkout_acts, broken) -> None:
    run = suspended_on_refund(engine, broken)

    engine.recover_compensation(run.id, action="abandon", actor="ops")
    engine.run_until_idle()

    acts = checkout_acts
    assert acts.count("release") == 0  # the remaining compensation is not called
    assert acts.count("refund") == 2
    assert run.status == wf.RunStatus.FAILED
    abandoned = events(run, "compensation.abandoned")
    assert [(e.node_id, e.actor) for e in abandoned] == [("charge", "ops")]
    failed = events(run, "run.failed")
    assert len(failed) == 1 and "abandoned by ops" in (failed[0].error or "")
    assert statuses(engine, run)["reserve"] == "done"  # never undone
    with pytest.raises(wf.UsageError):
        engine.recover_compensation(run.id, action="retry", actor="ops")


def test_a_terminal_run_has_no_saga_step_left_compensating(engine, checkout_acts, broken) -> None:
    """After abandon the run is over: the step whose compensation failed is no longer being
    compensated (the schema's word for it is 'failed')."""
    run = suspended_on_refund(engine, broken)

    engine.recover_compensation(run.id, action="abandon", actor="ops")
    engine.run_until_idle()

    assert run.status == wf.RunStatus.FAILED
    assert "compensating" not in statuses(engine, run).values()


def test_each_recovery_action_is_an_event_with_its_actor(engine, checkout_acts, broken) -> None:
    """retry (still broken) -> suspended again -> skip: two decisions, two actors."""
    run = suspended_on_refund(engine, broken)

    engine.recover_compensation(run.id, action="retry", actor="ana")
    engine.run_until_idle()
    engine.clock.advance("5s")  # type: ignore[attr-defined]
    engine.run_until_idle()
    assert run.status == wf.RunStatus.SUSPENDED
    assert [c.attempt for c in checkout_acts.of("refund")] == [1, 2, 1, 2]

    engine.recover_compensation(run.id, action="skip", actor="bo")
    engine.run_until_idle()

    decisions = [
        (e.kind, e.actor)
        for e in run.history()
        if e.kind in ("compensation.retried", "compensation.skipped", "compensation.abandoned")
    ]
    assert decisions == [("compensation.retried", "ana"), ("compensation.skipped", "bo")]
    assert run.status == wf.RunStatus.FAILED
    assert len(events(run, "run.suspended")) == 2
