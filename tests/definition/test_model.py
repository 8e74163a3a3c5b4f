"""The definition's value models: durations, policies, nodes, per-kind configs and outlets."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

import wfkit as wf
from wfkit.definition.kinds import JoinConfig

# --- durations --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("7d", timedelta(days=7)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2 days", timedelta(days=2)),
        ("1:30:00", timedelta(hours=1, minutes=30)),
        ("0.5s", timedelta(milliseconds=500)),
        (" 3d ", timedelta(days=3)),
        ("0s", timedelta(0)),
    ],
)
def test_parse_duration_reads_text(text: str, expected: timedelta) -> None:
    assert wf.parse_duration(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(minutes=2), timedelta(minutes=2)),
        (5, timedelta(seconds=5)),
        (0.25, timedelta(milliseconds=250)),
        (0, timedelta(0)),
    ],
)
def test_parse_duration_takes_timedelta_and_seconds(value: object, expected: timedelta) -> None:
    assert wf.parse_duration(value) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["soon", "", "1x", "5"])
def test_parse_duration_refuses_text_that_is_no_duration_and_shows_the_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a duration.*'90s'"):
        wf.parse_duration(text)


@pytest.mark.parametrize("value", [-1, -0.5, "-5s", timedelta(seconds=-3)])
def test_parse_duration_refuses_negative_durations(value: object) -> None:
    with pytest.raises(ValueError, match="negative"):
        wf.parse_duration(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [True, None, [1], {"s": 1}])
def test_parse_duration_refuses_other_types(value: object) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        wf.parse_duration(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["99999999999d", 1e20, float("inf")])
def test_parse_duration_refuses_absurdly_long_durations_with_a_value_error(value: object) -> None:
    # A ValueError is what pydantic turns into a validation problem; anything else escapes
    # Node validation and crashes validate() (see test_validation).
    with pytest.raises(ValueError, match="duration"):
        wf.parse_duration(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(days=7), "7d"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(milliseconds=500), "0.5s"),
        (timedelta(minutes=1, seconds=1.5), "1m1.5s"),
        (timedelta(days=1, seconds=1), "1d1s"),
    ],
)
def test_format_duration_writes_the_compact_form(value: timedelta, text: str) -> None:
    assert wf.format_duration(value) == text


@given(st.integers(min_value=0, max_value=10 * 365 * 86_400_000))
def test_format_duration_round_trips_whole_milliseconds(milliseconds: int) -> None:
    value = timedelta(milliseconds=milliseconds)
    assert wf.parse_duration(wf.format_duration(value)) == value


@pytest.mark.parametrize(
    "value",
    [
        timedelta(microseconds=1),
        timedelta(microseconds=20),
        timedelta(seconds=59, microseconds=999_999),
        timedelta(seconds=1, microseconds=234_567),
    ],
)
def test_format_duration_round_trips_sub_millisecond_values(value: timedelta) -> None:
    # a timedelta is whole microseconds; the text stored in a graph must give it back exactly
    assert wf.parse_duration(wf.format_duration(value)) == value


# --- policy -----------------------------------------------------------------------------------


def test_policy_defaults_match_the_design() -> None:
    policy = wf.Policy()
    assert policy.max_attempts == 3
    assert policy.retry_delay == timedelta(seconds=1)
    assert policy.backoff == 2.0
    assert policy.max_delay == timedelta(minutes=5)
    assert policy.attempt_timeout is None
    assert policy.max_visits == 1
    assert policy.on_failure is wf.OnFailure.RETRY
    assert policy.jitter > 0


def test_policy_accepts_duration_text_and_serialises_it_compactly() -> None:
    policy = wf.Policy(retry_delay="90s", attempt_timeout="1h30m")
    assert policy.retry_delay == timedelta(seconds=90)
    dumped = policy.model_dump(mode="json", exclude_defaults=True)
    assert dumped == {"retry_delay": "1m30s", "attempt_timeout": "1h30m"}


@pytest.mark.parametrize(
    "fields",
    [{"max_attempts": 0}, {"max_visits": 0}, {"on_failure": "explode"}, {"retry": 3}],
)
def test_policy_refuses_bad_fields(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        wf.Policy.model_validate(fields)


def test_policy_is_frozen() -> None:
    with pytest.raises(ValidationError):
        wf.Policy().max_attempts = 9  # type: ignore[misc]


@pytest.mark.parametrize(
    ("attempt", "seconds"), [(2, 1), (3, 2), (4, 4), (5, 8), (10, 256), (11, 300), (50, 300)]
)
def test_delay_before_doubles_from_one_second_and_caps_at_five_minutes(
    attempt: int, seconds: float
) -> None:
    assert wf.Policy().delay_before(attempt, jitter=False) == timedelta(seconds=seconds)


def test_delay_before_follows_retry_delay_backoff_and_max_delay() -> None:
    policy = wf.Policy(retry_delay="3s", backoff=3, max_delay="1m")
    delays = [policy.delay_before(a, jitter=False).total_seconds() for a in range(2, 7)]
    assert delays == [3, 9, 27, 60, 60]


def test_delay_before_with_jitter_stays_within_the_jitter_fraction_below_the_delay() -> None:
    policy = wf.Policy(retry_delay="10s", jitter=0.2)
    rng = random.Random(7)
    delays = {policy.delay_before(2, rng=rng).total_seconds() for _ in range(200)}
    assert all(8.0 <= d <= 10.0 for d in delays)
    assert len(delays) > 100  # actually randomised


def test_delay_before_jitter_never_exceeds_the_cap() -> None:
    policy = wf.Policy(max_delay="5s")
    rng = random.Random(1)
    assert all(policy.delay_before(30, rng=rng) <= timedelta(seconds=5) for _ in range(100))


def test_delay_before_with_zero_jitter_is_exact_even_when_jitter_is_asked() -> None:
    assert wf.Policy(jitter=0).delay_before(3) == timedelta(seconds=2)


# --- nodes and their configs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attrs", "outlets"),
    [
        ({"kind": "start"}, ("next",)),
        ({"kind": "action", "activity": "a"}, ("next", "failed", "fallback")),
        ({"kind": "decision", "config": {"expression": "x > 1"}}, ("true", "false")),
        (
            {"kind": "decision", "activity": "pick", "config": {"branches": ["small", "big"]}},
            ("small", "big"),
        ),
        ({"kind": "parallel", "config": {"branches": ["left", "right"]}}, ("left", "right")),
        ({"kind": "join", "config": {"fork": "p"}}, ("completed", "partial")),
        ({"kind": "for_each", "config": {"items": "lines"}}, ("each",)),
        ({"kind": "delay", "config": {"duration": "1h"}}, ("next",)),
        ({"kind": "wait", "config": {"signal": "paid"}}, ("next", "elapsed")),
        ({"kind": "approval"}, ("approved", "rejected", "expired")),
        ({"kind": "end"}, ()),
    ],
)
def test_each_kind_declares_the_outlets_of_the_design_table(
    attrs: dict[str, object], outlets: tuple[str, ...]
) -> None:
    node = wf.Node.model_validate(attrs)
    assert node.outlets == outlets
    assert wf.outlets_of(node.kind, node.config) == outlets


def test_outlets_of_reads_plain_config_dicts_and_defaults_decisions_to_true_false() -> None:
    assert wf.outlets_of("parallel", {"branches": ["x", "y"]}) == ("x", "y")
    assert wf.outlets_of("decision") == ("true", "false")
    assert wf.outlets_of(wf.NodeKind.WAIT) == ("next", "elapsed")


def test_outlets_of_refuses_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="teleport"):
        wf.outlets_of("teleport")


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"kind": "action"}, "needs an activity"),
        ({"kind": "start", "activity": "a"}, "takes no activity"),
        ({"kind": "delay"}, "duration"),
        ({"kind": "delay", "config": {"duration": "whenever"}}, "not a duration"),
        ({"kind": "wait"}, "signal"),
        ({"kind": "wait", "config": {"signal": ""}}, "signal"),
        ({"kind": "for_each"}, "items"),
        ({"kind": "parallel", "config": {"branches": []}}, "branches"),
        ({"kind": "join"}, "fork"),
        ({"kind": "decision"}, "exactly one of an expression or an activity"),
        (
            {"kind": "decision", "activity": "pick", "config": {"expression": "x"}},
            "exactly one of an expression or an activity",
        ),
        ({"kind": "delay", "config": {"duration": "1s"}, "compensation": "undo"}, "compensation"),
        ({"kind": "teleport"}, "kind"),
    ],
)
def test_node_refuses_attributes_that_do_not_fit_the_kind(
    attrs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        wf.Node.model_validate(attrs)


@pytest.mark.parametrize(
    "attrs",
    [
        {"kind": "action", "activity": "a", "colour": "red"},
        {"kind": "end", "config": {"reason": "done"}},
        {"kind": "delay", "config": {"duration": "1s", "jitter": True}},
        {"kind": "action", "activity": "a", "policy": {"attempts": 3}},
    ],
)
def test_node_forbids_extra_fields(attrs: dict[str, object]) -> None:
    # pydantic's own words for the node's fields, wfkit's for a config's (shown in the editor)
    with pytest.raises(
        ValidationError, match=r"Extra inputs are not permitted|is not a setting here; remove it"
    ):
        wf.Node.model_validate(attrs)


def test_node_turns_config_into_the_kinds_model() -> None:
    node = wf.Node.model_validate(
        {"kind": "wait", "config": {"signal": "paid", "timeout": "3d", "bind": {"ok": "paid"}}}
    )
    assert node.config.signal == "paid"
    assert node.config.timeout == timedelta(days=3)
    assert node.config.bind == {"ok": "paid"}


def test_node_to_attrs_keeps_only_what_differs_from_defaults_in_json_form() -> None:
    node = wf.Node.model_validate(
        {
            "kind": "action",
            "activity": "a",
            "policy": {"max_attempts": 3, "retry_delay": "90s"},
        }
    )
    assert node.to_attrs() == {
        "kind": "action",
        "activity": "a",
        "policy": {"retry_delay": "1m30s"},
    }
    assert wf.Node.model_validate({"kind": "start"}).to_attrs() == {"kind": "start"}


def test_node_to_attrs_round_trips_through_validation() -> None:
    attrs = {
        "kind": "approval",
        "config": {"timeout": "2d", "assignees": ["warehouse"]},
        "label": "Review",
        "saga": "saga-1",
    }
    assert wf.Node.model_validate(wf.Node.model_validate(attrs).to_attrs()).to_attrs() == attrs


def test_join_at_least_needs_a_count() -> None:
    with pytest.raises(ValidationError, match="needs a count"):
        JoinConfig(fork="p", mode="at_least")
    assert JoinConfig(fork="p", mode="at_least", count=2).count == 2


def test_join_count_is_refused_with_other_modes() -> None:
    with pytest.raises(ValidationError, match="only meaningful"):
        JoinConfig(fork="p", mode="all", count=2)


@pytest.mark.parametrize("n", [0, -1, 1.5, "2"])
def test_at_least_refuses_anything_but_a_positive_whole_number(n: object) -> None:
    with pytest.raises(wf.UsageError, match="at_least"):
        wf.at_least(n)  # type: ignore[arg-type]


def test_problem_str_names_where_and_code() -> None:
    on_node = wf.Problem(code="bad-config", message="broken", node="n1")
    on_edge = wf.Problem(code="unknown-outlet", message="nope", node="a", edge=("a", "b", "x"))
    overall = wf.Problem(code="no-start", message="none", severity=wf.Severity.WARNING)
    assert str(on_node) == "error: node 'n1': broken [bad-config]"
    assert str(on_edge) == "error: edge a -[x]-> b: nope [unknown-outlet]"
    assert str(overall) == "warning: workflow: none [no-start]"
