"""Durations stop at 36,500 days (about 100 years), wherever a duration is accepted.

The limit used to be 999,999,999 days, but ``datetime`` ends in year 9999: a wait with a
timeout of ``"3000000d"`` validated, then its timer could not be set and the run waited with
no timer; a signal kept for ``"2914000d"`` answered 500 over HTTP. Every duration goes through
``parse_duration``, so one check covers policies, delays, waits, approvals and signal expiry.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import networkx as nx
import pytest
from pydantic import ValidationError

import wfkit as wf
from wfkit.definition.durations import MAX_DURATION
from wfkit.definition.kinds import ApprovalConfig, DelayConfig, WaitConfig

TOO_LONG = ["3000000d", "2914000d", "36501d", timedelta(days=36_501), 36_501 * 86_400.0]
CAP = ["36500d", timedelta(days=36_500), 36_500 * 86_400]
LIMIT = "36,500 days"


def test_the_cap_is_100_years_and_leaves_room_on_the_calendar() -> None:
    assert timedelta(days=36_500) == MAX_DURATION
    # any "now" before year 9899 plus the longest duration is still a date
    assert datetime(9899, 1, 1, tzinfo=UTC) + MAX_DURATION < datetime.max.replace(tzinfo=UTC)


@pytest.mark.parametrize("value", TOO_LONG)
def test_parse_duration_refuses_more_than_the_cap_saying_the_limit(value: Any) -> None:
    with pytest.raises(ValueError, match=f"too long: the limit is {LIMIT}"):
        wf.parse_duration(value)


@pytest.mark.parametrize("value", CAP)
def test_parse_duration_accepts_the_cap(value: Any) -> None:
    assert wf.parse_duration(value) == MAX_DURATION


@pytest.mark.parametrize("field", ["retry_delay", "attempt_timeout", "max_delay"])
def test_policy_durations_are_capped(field: str) -> None:
    with pytest.raises(ValidationError, match=LIMIT):
        wf.Policy(**{field: "3000000d"})
    assert getattr(wf.Policy(**{field: "36500d"}), field) == MAX_DURATION


@pytest.mark.parametrize(
    ("model", "field", "extra"),
    [
        (DelayConfig, "duration", {}),
        (WaitConfig, "timeout", {"signal": "paid"}),
        (ApprovalConfig, "timeout", {}),
    ],
)
def test_node_durations_are_capped(model: Any, field: str, extra: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match=LIMIT):
        model(**extra, **{field: "3000000d"})
    assert getattr(model(**extra, **{field: "36500d"}), field) == MAX_DURATION


@pytest.mark.parametrize(
    "attrs",
    [
        {"kind": "delay", "config": {"duration": "3000000d"}},
        {"kind": "wait", "config": {"signal": "paid", "timeout": "3000000d"}},
        {"kind": "approval", "config": {"timeout": "3000000d"}},
        {"kind": "end", "policy": {"retry_delay": "3000000d"}},
    ],
)
def test_validation_reports_a_duration_past_the_cap_as_bad_config(attrs: dict[str, Any]) -> None:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node("x", **attrs)
    G.add_edge("start", "x", key="next")
    [problem] = wf.validate(G, registry=None)
    assert (problem.code, problem.node) == ("bad-config", "x")
    assert LIMIT in problem.message


def test_the_builder_refuses_a_duration_past_the_cap() -> None:
    with pytest.raises(wf.WfkitError, match=LIMIT):
        wf.Workflow("w").start_with().delay("3000000d")
    with pytest.raises(wf.WfkitError, match=LIMIT):
        wf.Workflow("w").start_with().wait_for_signal("paid", timeout="3000000d")


def test_signal_expiry_over_http_is_a_validation_error_not_a_crash() -> None:
    from wfkit.api.models import SignalRequest

    with pytest.raises(ValidationError, match=LIMIT):
        SignalRequest(payload={}, post_if_absent=True, expires="2914000d")
    assert SignalRequest(payload={}, post_if_absent=True, expires="36500d").expires == "36500d"


def test_posting_a_signal_kept_past_the_cap_is_refused_and_the_cap_is_kept() -> None:
    engine = wf.Engine(":memory:", clock=wf.ManualClock())
    with pytest.raises(ValueError, match=LIMIT):
        engine.post_signal("paid", "k1", {}, expires="3000000d")
    assert engine.post_signal("paid", "k2", {}, expires="36500d") is False
    kept = engine.sql("SELECT key FROM wf_signals").fetchall()
    assert kept == [("k2",)]


def test_a_wait_with_the_longest_timeout_gets_its_timer() -> None:
    registry = wf.ActivityRegistry()
    flow = wf.Workflow("long-wait").start_with().wait_for_signal("paid", timeout="36500d")
    engine = wf.Engine(":memory:", clock=wf.ManualClock(), registry=registry)
    engine.register(flow)
    run = engine.start("long-wait", {})
    engine.run_until_idle()
    assert run.status == "waiting"
    [(due_at,)] = engine.sql(f"SELECT due_at FROM wf_timers WHERE run_id = '{run.id}'").fetchall()
    assert due_at.year >= 2100


def test_the_retry_delay_of_the_last_attempt_is_the_cap_not_an_overflow() -> None:
    # 100.0 ** 998 is past any float: the delay is max_delay, as for any long backoff
    policy = wf.Policy(max_attempts=1000, backoff=100, max_delay="36500d")
    assert policy.delay_before(1000, jitter=False) == MAX_DURATION


@pytest.mark.parametrize("value", [-86_399_999_913_601, -1e300, "-3000000000d"])
def test_a_hugely_negative_duration_is_refused_as_negative_not_an_overflow(value: Any) -> None:
    # found by tests/definition/test_fuzz_definitions.py: OverflowError escaped validate()
    with pytest.raises(ValueError, match="negative"):
        wf.parse_duration(value)
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node("d", kind="delay", config={"duration": value})
    G.add_edge("start", "d", key="next")
    assert [p.code for p in wf.validate(G, registry=None)] == ["bad-config"]
