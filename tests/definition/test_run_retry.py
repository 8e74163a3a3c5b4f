"""wf.RunRetry: validated, kept in the workflow's graph, JSON and hash, drawn in the title."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from pydantic import ValidationError

import wfkit as wf


def flow(retry: wf.RunRetry | None = None) -> wf.Workflow:
    return wf.Workflow("order", 1, retry=retry).start_with("docs.pay")


def test_defaults_and_parsed_durations() -> None:
    retry = wf.RunRetry()
    assert (retry.max_attempts, retry.delay, retry.backoff) == (3, timedelta(minutes=1), 2.0)
    assert wf.RunRetry(delay="1h30m").delay == timedelta(minutes=90)
    assert wf.RunRetry(delay=90).delay == timedelta(seconds=90)
    assert wf.RunRetry(delay=timedelta(days=36_500)).delay == timedelta(days=36_500)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_attempts": 0}, "greater than or equal to 1"),
        ({"max_attempts": 1001}, "less than or equal to 1000"),
        ({"backoff": 0.5}, "greater than or equal to 1"),
        ({"delay": "36501d"}, "too long: the limit is 36,500 days"),
        ({"delay": "-1s"}, "negative"),
        ({"delay": "soon"}, "is not a duration"),
        ({"attempts": 3}, "Extra inputs are not permitted"),
    ],
)
def test_bad_budgets_are_refused_with_the_reason(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        wf.RunRetry(**fields)  # type: ignore[arg-type]


def test_it_is_frozen() -> None:
    retry = wf.RunRetry()
    with pytest.raises(ValidationError):
        retry.max_attempts = 5  # type: ignore[misc]


def test_the_delay_grows_by_the_backoff_and_stays_within_the_cap() -> None:
    retry = wf.RunRetry(max_attempts=1000, delay="10s", backoff=3)
    assert [retry.delay_before(a).total_seconds() for a in (2, 3, 4)] == [10, 30, 90]
    assert retry.delay_before(1000) == timedelta(days=36_500)
    assert wf.RunRetry(delay="1m", backoff=1).delay_before(50) == timedelta(minutes=1)


def test_a_workflow_takes_only_a_run_retry() -> None:
    with pytest.raises(wf.UsageError, match=r"retry must be a wf\.RunRetry"):
        wf.Workflow("order", retry={"max_attempts": 3})  # type: ignore[arg-type]
    assert flow().retry is None
    assert flow(wf.RunRetry(max_attempts=5)).retry == wf.RunRetry(max_attempts=5)


def test_the_budget_round_trips_through_json() -> None:
    original = flow(wf.RunRetry(max_attempts=4, delay="90s", backoff=1.5))
    document = json.loads(original.to_json())
    assert document["graph"]["graph"]["run_retry"] == {
        "max_attempts": 4,
        "delay": "1m30s",
        "backoff": 1.5,
    }
    loaded = wf.Workflow.from_json(original.to_json())
    assert loaded.retry == wf.RunRetry(max_attempts=4, delay="90s", backoff=1.5)
    assert loaded.content_hash == original.content_hash
    assert loaded.copy(version=2).retry == loaded.retry


def test_the_budget_is_part_of_the_hash() -> None:
    plain = flow().content_hash
    three = flow(wf.RunRetry(max_attempts=3)).content_hash
    assert len({plain, three, flow(wf.RunRetry(max_attempts=4)).content_hash}) == 3
    # the same budget typed two ways hashes the same
    assert flow(wf.RunRetry(delay="60s")).content_hash == flow(wf.RunRetry(delay="1m")).content_hash


def test_a_hand_edited_budget_is_a_validation_problem() -> None:
    broken = flow()
    broken.graph.graph["run_retry"] = {"max_attempts": 0, "delay": "1m"}
    problems = [p for p in broken.validate(registry=None) if p.code == "bad-run-retry"]
    assert len(problems) == 1
    assert "max_attempts" in problems[0].message
    assert "wf.RunRetry" in problems[0].message
    with pytest.raises(wf.DefinitionError, match="run_retry"):
        broken.retry  # noqa: B018
    broken.graph.graph["run_retry"] = "3 times"
    assert "must be a mapping" in broken.validate(registry=None)[0].message
    registry = wf.ActivityRegistry()
    registry.register("docs.pay", lambda ctx: None)
    engine = wf.Engine(":memory:", registry=registry)
    try:
        with pytest.raises(wf.DefinitionError, match=r"run_retry"):
            engine.register(broken)
    finally:
        engine.close()


def test_the_picture_title_shows_the_budget() -> None:
    assert 'label="order v1 (run retry: 3 attempts, 1m apart, backoff x2)"' in flow(
        wf.RunRetry()
    ).to_dot(problems=False)
    assert "run retry" not in flow().to_dot(problems=False)
    assert "backoff" not in flow(wf.RunRetry(backoff=1)).to_dot(problems=False)
