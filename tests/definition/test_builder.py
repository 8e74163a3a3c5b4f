"""The builder verbs: which nodes, attributes and outlet-keyed edges each one appends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import networkx as nx
import pytest

import wfkit as wf
from wfkit.examples import all_workflows


def edges(flow: wf.Workflow) -> set[tuple[str, str, str]]:
    return set(flow.graph.edges(keys=True))


def attrs(flow: wf.Workflow, node: str) -> dict[str, Any]:
    return dict(flow.graph.nodes[node])


# --- start_with / then ------------------------------------------------------------------------


def test_start_with_adds_a_start_node_and_the_first_action() -> None:
    flow = wf.Workflow("w").start_with("a")
    assert list(flow.graph.nodes) == ["start", "a"]
    assert attrs(flow, "start") == {"kind": "start"}
    assert attrs(flow, "a") == {"kind": "action", "activity": "a"}
    assert edges(flow) == {("start", "a", "next")}


def test_start_with_without_activity_adds_only_the_start() -> None:
    flow = wf.Workflow("w").start_with()
    assert list(flow.graph.nodes) == ["start"]
    flow.then("a")
    assert edges(flow) == {("start", "a", "next")}


def test_start_with_twice_is_refused() -> None:
    flow = wf.Workflow("w").start_with("a")
    with pytest.raises(wf.UsageError, match="already has a start node"):
        flow.start_with("b")


def test_then_chains_actions_through_next() -> None:
    flow = wf.Workflow("w").start_with("a").then("b").then("c")
    assert list(flow.graph.nodes) == ["start", "a", "b", "c"]
    assert edges(flow) == {("start", "a", "next"), ("a", "b", "next"), ("b", "c", "next")}


def test_then_derives_ids_from_the_activity_and_numbers_repeats() -> None:
    flow = wf.Workflow("w").start_with("card.charge").then("card.charge").then("card.charge")
    assert list(flow.graph.nodes) == ["start", "card.charge", "card.charge-2", "card.charge-3"]
    assert {attrs(flow, n)["activity"] for n in list(flow.graph.nodes)[1:]} == {"card.charge"}


def test_then_takes_an_explicit_id_and_label() -> None:
    flow = wf.Workflow("w").start_with().then("a", id="first", label="First step")
    assert attrs(flow, "first") == {"kind": "action", "activity": "a", "label": "First step"}


def test_then_refuses_an_id_that_exists() -> None:
    flow = wf.Workflow("w").start_with("a")
    with pytest.raises(wf.UsageError, match="'a' already exists"):
        flow.then("b", id="a")


def test_then_stores_policy_keywords_leaving_out_defaults() -> None:
    flow = wf.Workflow("w").start_with().then("a", max_attempts=5, retry_delay="90s", backoff=2)
    assert attrs(flow, "a")["policy"] == {"max_attempts": 5, "retry_delay": "1m30s"}
    assert flow.node("a").policy.max_attempts == 5


def test_then_merges_a_policy_object_with_keywords() -> None:
    policy = wf.Policy(max_attempts=7, attempt_timeout="30s")
    flow = wf.Workflow("w").start_with().then("a", policy=policy, max_visits=2)
    assert attrs(flow, "a")["policy"] == {
        "max_attempts": 7,
        "attempt_timeout": "30s",
        "max_visits": 2,
    }


def test_then_with_only_default_policy_fields_stores_no_policy() -> None:
    flow = wf.Workflow("w").start_with().then("a", max_attempts=3)
    assert "policy" not in attrs(flow, "a")


def test_then_refuses_a_misspelt_policy_field() -> None:
    with pytest.raises(wf.UsageError, match="bad policy"):
        wf.Workflow("w").start_with().then("a", max_atempts=5)


# --- if_ --------------------------------------------------------------------------------------


def test_if_adds_a_numbered_decision_with_true_and_false_outlets() -> None:
    flow = (
        wf.Workflow("w")
        .start_with("a")
        .if_("total > 10", then=lambda b: b.then("big"), otherwise=lambda b: b.then("small"))
        .then("done")
    )
    assert attrs(flow, "if-1") == {"kind": "decision", "config": {"expression": "total > 10"}}
    assert flow.node("if-1").outlets == ("true", "false")
    assert edges(flow) == {
        ("start", "a", "next"),
        ("a", "if-1", "next"),
        ("if-1", "big", "true"),
        ("if-1", "small", "false"),
        ("big", "done", "next"),
        ("small", "done", "next"),
    }


def test_if_labels_the_true_edge_with_the_expression_and_not_the_false_edge() -> None:
    flow = (
        wf.Workflow("w")
        .start_with("a")
        .if_("total > 10", then=lambda b: b.then("big"), otherwise=lambda b: b.then("small"))
    )
    assert flow.graph.edges["if-1", "big", "true"] == {"label": "total > 10"}
    assert flow.graph.edges["if-1", "small", "false"] == {}


def test_if_with_empty_otherwise_falls_through_to_the_next_step() -> None:
    flow = wf.Workflow("w").start_with("a").if_("vip", then=lambda b: b.then("gift")).then("done")
    assert ("if-1", "done", "false") in edges(flow)
    assert ("gift", "done", "next") in edges(flow)


def test_if_with_empty_then_falls_through_and_keeps_the_label() -> None:
    flow = (
        wf.Workflow("w").start_with("a").if_("vip", otherwise=lambda b: b.then("ask")).then("done")
    )
    assert flow.graph.edges["if-1", "done", "true"] == {"label": "vip"}
    assert ("if-1", "ask", "false") in edges(flow)


def test_if_with_both_branches_empty_sends_both_outlets_to_the_next_step() -> None:
    flow = wf.Workflow("w").start_with("a").if_("vip").then("done")
    assert {(u, v, k) for u, v, k in edges(flow) if u == "if-1"} == {
        ("if-1", "done", "true"),
        ("if-1", "done", "false"),
    }


def test_if_ids_count_up() -> None:
    flow = wf.Workflow("w").start_with("a").if_("x").if_("y").if_("z", id="third")
    assert [n for n in flow.graph if attrs(flow, n)["kind"] == "decision"] == [
        "if-1",
        "if-2",
        "third",
    ]


# --- decide -----------------------------------------------------------------------------------


def test_decide_adds_an_activity_decision_with_one_outlet_per_named_branch() -> None:
    flow = (
        wf.Workflow("w")
        .start_with("a")
        .decide(
            "pick",
            {"small": lambda b: b.then("s"), "big": lambda b: b.then("l"), "none": None},
        )
        .then("done")
    )
    assert attrs(flow, "pick") == {
        "kind": "decision",
        "activity": "pick",
        "config": {"branches": ["small", "big", "none"]},
    }
    assert flow.node("pick").outlets == ("small", "big", "none")
    assert {("pick", "s", "small"), ("pick", "l", "big"), ("pick", "done", "none")} <= edges(flow)
    assert {("s", "done", "next"), ("l", "done", "next")} <= edges(flow)


def test_decide_needs_a_branch() -> None:
    with pytest.raises(wf.UsageError, match="at least one"):
        wf.Workflow("w").start_with("a").decide("pick", {})


# --- parallel ---------------------------------------------------------------------------------


def test_parallel_names_positional_branches_and_keeps_named_ones() -> None:
    flow = (
        wf.Workflow("w")
        .start_with("a")
        .parallel(lambda b: b.then("b"), lambda b: b.then("c"), audit=lambda b: b.then("d"))
        .then("e")
    )
    assert attrs(flow, "parallel-1") == {
        "kind": "parallel",
        "config": {"branches": ["branch-1", "branch-2", "audit"]},
    }
    assert {
        ("parallel-1", "b", "branch-1"),
        ("parallel-1", "c", "branch-2"),
        ("parallel-1", "d", "audit"),
        ("b", "join-1", "next"),
        ("c", "join-1", "next"),
        ("d", "join-1", "next"),
        ("join-1", "e", "completed"),
    } <= edges(flow)


def test_parallel_adds_a_join_that_names_its_fork() -> None:
    flow = wf.Workflow("w").start_with("a").parallel(lambda b: b.then("b"))
    assert attrs(flow, "join-1") == {"kind": "join", "config": {"fork": "parallel-1"}}
    assert flow.node("join-1").config.mode == "all"


@pytest.mark.parametrize(
    ("join", "config"),
    [
        ("all", {"fork": "parallel-1"}),
        ("any", {"fork": "parallel-1", "mode": "any"}),
        (wf.at_least(2), {"fork": "parallel-1", "mode": "at_least", "count": 2}),
    ],
)
def test_parallel_join_modes(join: Any, config: dict[str, Any]) -> None:
    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(lambda b: b.then("a"), lambda b: b.then("b"), lambda b: b.then("c"), join=join)
    )
    assert attrs(flow, "join-1")["config"] == config


def test_parallel_refuses_an_unknown_join_mode() -> None:
    with pytest.raises(wf.UsageError, match="join must be"):
        wf.Workflow("w").start_with().parallel(lambda b: b.then("a"), join="most")


def test_parallel_on_partial_leaves_the_join_through_partial() -> None:
    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(lambda b: b.then("a"), lambda b: b.then("b"), on_partial=lambda b: b.then("fix"))
        .then("done")
    )
    assert {("join-1", "fix", "partial"), ("join-1", "done", "completed")} <= edges(flow)
    assert ("fix", "done", "next") in edges(flow)


def test_parallel_with_an_empty_branch_goes_straight_to_the_join() -> None:
    flow = wf.Workflow("w").start_with().parallel(lambda b: b.then("a"), lambda b: b)
    assert ("parallel-1", "join-1", "branch-2") in edges(flow)


def test_parallel_needs_a_branch() -> None:
    with pytest.raises(wf.UsageError, match="at least one branch"):
        wf.Workflow("w").start_with().parallel()


def test_parallel_whose_every_branch_ends_is_refused() -> None:
    with pytest.raises(wf.UsageError, match="nothing is left to join"):
        wf.Workflow("w").start_with().parallel(lambda b: b.end(), lambda b: b.then("a").end())


def test_two_parallels_get_their_own_fork_and_join() -> None:
    flow = (
        wf.Workflow("w")
        .start_with()
        .parallel(lambda b: b.then("a"))
        .parallel(lambda b: b.then("b"))
    )
    assert attrs(flow, "join-2")["config"] == {"fork": "parallel-2"}
    assert ("join-1", "parallel-2", "completed") in edges(flow)


# --- for_each ---------------------------------------------------------------------------------


def test_for_each_stores_items_and_max_parallelism_and_wires_each_into_the_body() -> None:
    flow = (
        wf.Workflow("w")
        .start_with("load")
        .for_each("lines", lambda b: b.then("ship"), max_parallelism=4)
        .then("confirm")
    )
    assert attrs(flow, "for_each-1") == {
        "kind": "for_each",
        "config": {"items": "lines", "max_parallelism": 4},
    }
    assert attrs(flow, "join-1") == {"kind": "join", "config": {"fork": "for_each-1"}}
    assert {
        ("load", "for_each-1", "next"),
        ("for_each-1", "ship", "each"),
        ("ship", "join-1", "next"),
        ("join-1", "confirm", "completed"),
    } == edges(flow) - {("start", "load", "next")}


def test_for_each_join_mode_and_on_partial_from_the_joins_partial_outlet() -> None:
    flow = (
        wf.Workflow("w")
        .start_with()
        .for_each(
            "lines",
            lambda b: b.then("ship"),
            join=wf.at_least(1),
            on_partial=lambda b: b.approval("review"),
        )
        .then("confirm")
    )
    assert attrs(flow, "join-1")["config"] == {
        "fork": "for_each-1",
        "mode": "at_least",
        "count": 1,
    }
    assert {
        ("join-1", "review", "partial"),
        ("review", "confirm", "approved"),
        ("join-1", "confirm", "completed"),
    } <= edges(flow)


def test_for_each_without_on_partial_leaves_partial_unconnected() -> None:
    flow = wf.Workflow("w").start_with().for_each("lines", lambda b: b.then("ship")).then("x")
    assert [k for _, _, k in flow.graph.out_edges("join-1", keys=True)] == ["completed"]


# --- delay ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("duration", "stored"),
    [("90s", "1m30s"), ("7d", "7d"), ("1h30m", "1h30m"), ("2 days", "2d")],
)
def test_delay_stores_the_duration_in_compact_form(duration: str, stored: str) -> None:
    flow = wf.Workflow("w").start_with("a").delay(duration).then("b")
    assert attrs(flow, "delay-1") == {"kind": "delay", "config": {"duration": stored}}
    assert {("a", "delay-1", "next"), ("delay-1", "b", "next")} <= edges(flow)


def test_delay_accepts_a_timedelta() -> None:
    from datetime import timedelta

    flow = wf.Workflow("w").start_with().delay(timedelta(hours=2)).delay("1s")
    assert attrs(flow, "delay-1")["config"] == {"duration": "2h"}
    assert attrs(flow, "delay-2")["config"] == {"duration": "1s"}


def test_delay_refuses_text_that_is_no_duration() -> None:
    with pytest.raises(wf.UsageError, match="delay-1"):
        wf.Workflow("w").start_with().delay("eventually")


# --- wait_for_signal --------------------------------------------------------------------------


def test_wait_for_signal_uses_the_name_as_node_id_and_stores_its_config() -> None:
    flow = (
        wf.Workflow("w")
        .start_with("a")
        .wait_for_signal("payment", correlate="order_id", bind={"paid": "is_paid"}, timeout="3d")
        .then("b")
    )
    assert attrs(flow, "payment") == {
        "kind": "wait",
        "config": {
            "signal": "payment",
            "correlate": "order_id",
            "bind": {"paid": "is_paid"},
            "timeout": "3d",
        },
    }
    assert {("a", "payment", "next"), ("payment", "b", "next")} <= edges(flow)


def test_wait_for_signal_can_name_a_registered_binder() -> None:
    flow = wf.Workflow("w").start_with().wait_for_signal("payment", bind="binder")
    assert attrs(flow, "payment")["config"]["bind"] == "binder"


def test_wait_for_signal_on_timeout_leaves_through_elapsed() -> None:
    flow = (
        wf.Workflow("w")
        .start_with()
        .wait_for_signal("payment", timeout="1h", on_timeout=lambda b: b.then("remind"))
        .then("ship")
    )
    assert {
        ("payment", "remind", "elapsed"),
        ("payment", "ship", "next"),
        ("remind", "ship", "next"),
    } <= edges(flow)


def test_wait_for_signal_with_a_separate_id() -> None:
    flow = wf.Workflow("w").start_with().wait_for_signal("payment", id="wait-pay")
    assert attrs(flow, "wait-pay")["config"]["signal"] == "payment"


def test_duplicate_wait_names_are_refused() -> None:
    flow = wf.Workflow("w").start_with().wait_for_signal("payment")
    with pytest.raises(wf.UsageError, match="'payment' already exists"):
        flow.wait_for_signal("payment")


def test_an_approval_cannot_reuse_a_wait_name() -> None:
    flow = wf.Workflow("w").start_with().wait_for_signal("review")
    with pytest.raises(wf.UsageError, match="'review' already exists"):
        flow.approval("review")


# --- approval ---------------------------------------------------------------------------------


def test_approval_uses_the_name_as_node_id_and_continues_through_approved() -> None:
    flow = (
        wf.Workflow("w")
        .start_with("a")
        .approval("review", timeout="2d", assignees=["ops", "finance"])
        .then("b")
    )
    assert attrs(flow, "review") == {
        "kind": "approval",
        "config": {"timeout": "2d", "assignees": ["ops", "finance"]},
    }
    assert {("a", "review", "next"), ("review", "b", "approved")} <= edges(flow)


def test_approval_on_reject_and_on_expire_branches() -> None:
    flow = (
        wf.Workflow("w")
        .start_with()
        .approval(
            "review",
            timeout="1d",
            on_reject=lambda b: b.then("apologise").end(),
            on_expire=lambda b: b.then("escalate"),
        )
        .then("ship")
    )
    assert {
        ("review", "apologise", "rejected"),
        ("apologise", "end", "next"),
        ("review", "escalate", "expired"),
        ("escalate", "ship", "next"),
        ("review", "ship", "approved"),
    } == edges(flow) - {("start", "review", "next")}


def test_approval_without_branches_leaves_rejected_and_expired_unconnected() -> None:
    flow = wf.Workflow("w").start_with().approval("review").then("ship")
    assert [k for _, _, k in flow.graph.out_edges("review", keys=True)] == ["approved"]


# --- saga, compensation, failure handling -----------------------------------------------------


def test_saga_declares_a_scope_and_marks_its_members() -> None:
    flow = (
        wf.Workflow("w").start_with().saga(lambda s: s.then("a").then("b"), label="order").then("c")
    )
    assert flow.graph.graph["sagas"] == {"saga-1": {"label": "order"}}
    assert attrs(flow, "a")["saga"] == "saga-1"
    assert attrs(flow, "b")["saga"] == "saga-1"
    assert "saga" not in attrs(flow, "c")
    assert {("start", "a", "next"), ("a", "b", "next"), ("b", "c", "next")} == edges(flow)


def test_nested_saga_names_its_parent_and_policy() -> None:
    flow = (
        wf.Workflow("w")
        .start_with()
        .saga(
            lambda s: s.then("a").saga(lambda t: t.then("b"), policy="keep").then("c"),
            id="outer",
        )
    )
    assert flow.graph.graph["sagas"] == {
        "outer": {},
        "saga-1": {"parent": "outer", "policy": "keep"},
    }
    assert [attrs(flow, n).get("saga") for n in ("a", "b", "c")] == ["outer", "saga-1", "outer"]


def test_nested_saga_without_policy_is_refused_at_build_time() -> None:
    with pytest.raises(wf.UsageError, match=r"nested in 'saga-1'.*policy='unwind'"):
        wf.Workflow("w").start_with().saga(lambda s: s.then("a").saga(lambda t: t.then("b")))


def test_saga_refuses_a_taken_id() -> None:
    flow = wf.Workflow("w").start_with().saga(lambda s: s.then("a"), id="pay")
    with pytest.raises(wf.UsageError, match="'pay' already exists"):
        flow.saga(lambda s: s.then("b"), id="pay")


def test_steps_after_a_saga_can_be_annotated() -> None:
    flow = wf.Workflow("w").start_with().saga(lambda s: s.then("a")).compensate_with("undo.a")
    assert attrs(flow, "a")["compensation"] == "undo.a"


def test_compensate_with_sets_the_compensation_and_its_policy() -> None:
    flow = (
        wf.Workflow("w")
        .start_with()
        .then("a")
        .compensate_with("undo.a", policy={"max_attempts": 10})
        .then("b")
        .compensate_with("undo.b")
    )
    assert attrs(flow, "a")["compensation"] == "undo.a"
    assert attrs(flow, "a")["compensation_policy"] == {"max_attempts": 10}
    assert flow.node("a").compensation_policy == wf.Policy(max_attempts=10)
    assert attrs(flow, "b")["compensation"] == "undo.b"
    assert "compensation_policy" not in attrs(flow, "b")


def test_compensate_with_refuses_a_step_that_is_not_an_action() -> None:
    flow = wf.Workflow("w").start_with("a").delay("1s")
    with pytest.raises(wf.UsageError, match="'delay-1' is a delay"):
        flow.compensate_with("undo.a")
    assert "compensation" not in attrs(flow, "delay-1")


@pytest.mark.parametrize("policy", ["compensate", wf.OnFailure.SUSPEND, "terminate", "retry"])
def test_on_failure_sets_the_last_steps_policy(policy: Any) -> None:
    flow = wf.Workflow("w").start_with().then("a", max_attempts=2).on_failure(policy)
    assert flow.node("a").policy.on_failure == wf.OnFailure(policy)
    assert flow.node("a").policy.max_attempts == 2


def test_on_failure_refuses_an_unknown_policy_with_a_usage_error() -> None:
    with pytest.raises(wf.UsageError, match="explode"):
        wf.Workflow("w").start_with().then("a").on_failure("explode")


def test_with_policy_merges_into_the_last_step() -> None:
    flow = (
        wf.Workflow("w")
        .start_with()
        .then("a", retry_delay="2s")
        .with_policy(max_attempts=9, attempt_timeout="1m")
    )
    assert attrs(flow, "a")["policy"] == {
        "retry_delay": "2s",
        "max_attempts": 9,
        "attempt_timeout": "1m",
    }


def test_with_policy_back_to_defaults_removes_the_policy() -> None:
    flow = wf.Workflow("w").start_with().then("a", max_attempts=5).with_policy(max_attempts=3)
    assert "policy" not in attrs(flow, "a")


def test_with_policy_refuses_bad_values() -> None:
    with pytest.raises(wf.UsageError, match="bad policy"):
        wf.Workflow("w").start_with().then("a").with_policy(max_visits=0)


def test_on_failed_and_on_fallback_route_the_actions_outlets() -> None:
    flow = (
        wf.Workflow("w")
        .start_with("a")
        .on_failed(lambda b: b.then("alert").end())
        .on_fallback(lambda b: b.then("manual"))
        .then("b")
    )
    assert {
        ("a", "alert", "failed"),
        ("alert", "end", "next"),
        ("a", "manual", "fallback"),
        ("manual", "b", "next"),
        ("a", "b", "next"),
    } <= edges(flow)


def test_on_failed_refuses_a_step_that_is_not_an_action() -> None:
    with pytest.raises(wf.UsageError, match="follows an action"):
        wf.Workflow("w").start_with("a").delay("1s").on_failed(lambda b: b.then("x"))


# --- goto / end -------------------------------------------------------------------------------


def test_goto_closes_a_loop_back_to_an_existing_node() -> None:
    flow = (
        wf.Workflow("w")
        .start_with("poll", max_visits=3)
        .if_("not ready", then=lambda b: b.delay("1m").goto("poll"))
        .then("done")
    )
    assert {("delay-1", "poll", "next"), ("if-1", "done", "false")} <= edges(flow)
    assert flow.node("poll").policy.max_visits == 3
    assert [p.code for p in flow.validate(registry=None)] == []


def test_goto_from_an_empty_if_branch_labels_the_loop_edge() -> None:
    flow = (
        wf.Workflow("w")
        .start_with("poll", max_visits=5)
        .if_("again", then=lambda b: b.goto("poll"))
    )
    assert flow.graph.edges["if-1", "poll", "true"] == {"label": "again"}


def test_goto_an_unknown_node_is_refused() -> None:
    with pytest.raises(wf.UsageError, match="no such node"):
        wf.Workflow("w").start_with("a").goto("nowhere")


def test_end_closes_every_open_path_and_nothing_can_follow() -> None:
    flow = wf.Workflow("w").start_with("a").if_("x", then=lambda b: b.then("b")).end()
    assert attrs(flow, "end") == {"kind": "end"}
    assert {("b", "end", "next"), ("if-1", "end", "false")} <= edges(flow)
    with pytest.raises(wf.UsageError, match="ended every path"):
        flow.then("c")


def test_several_ends_get_numbered_ids() -> None:
    flow = wf.Workflow("w").start_with("a").on_failed(lambda b: b.end()).end()
    assert [n for n in flow.graph if attrs(flow, n)["kind"] == "end"] == ["end", "end-2"]


# --- misuse -----------------------------------------------------------------------------------

VERBS_BEFORE_START: dict[str, Callable[[wf.Workflow], Any]] = {
    "then": lambda f: f.then("a"),
    "if_": lambda f: f.if_("x"),
    "decide": lambda f: f.decide("pick", {"a": None}),
    "parallel": lambda f: f.parallel(lambda b: b.then("a")),
    "for_each": lambda f: f.for_each("items", lambda b: b.then("a")),
    "delay": lambda f: f.delay("1s"),
    "wait_for_signal": lambda f: f.wait_for_signal("s"),
    "approval": lambda f: f.approval("r"),
    "saga": lambda f: f.saga(lambda s: s.then("a")),
    "goto": lambda f: f.goto("a"),
    "end": lambda f: f.end(),
    "compensate_with": lambda f: f.compensate_with("undo.a"),
    "on_failure": lambda f: f.on_failure("compensate"),
    "with_policy": lambda f: f.with_policy(max_attempts=2),
    "on_failed": lambda f: f.on_failed(lambda b: b.then("a")),
    "on_fallback": lambda f: f.on_fallback(lambda b: b.then("a")),
}


@pytest.mark.parametrize("verb", sorted(VERBS_BEFORE_START))
def test_verbs_before_start_with_are_refused(verb: str) -> None:
    flow = wf.Workflow("w")
    with pytest.raises(wf.UsageError, match=r"start_with|none yet"):
        VERBS_BEFORE_START[verb](flow)
    assert flow.graph.number_of_nodes() == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("",), "non-empty string"),
        (("w", 0), "version"),
        (("w", True), "version"),
        (("w", 1, dict), "pydantic model class"),
    ],
)
def test_workflow_refuses_bad_identity(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(wf.UsageError, match=message):
        wf.Workflow(*args)


def test_workflow_refuses_a_graph_that_is_not_a_multidigraph() -> None:
    with pytest.raises(wf.UsageError, match="MultiDiGraph"):
        wf.Workflow.from_graph("w", 1, nx.DiGraph())


# --- stable ids -------------------------------------------------------------------------------


def _rich_flow() -> wf.Workflow:
    return (
        wf.Workflow("rich", version=2)
        .start_with("a", max_attempts=4)
        .if_("total > 10", then=lambda b: b.then("b").compensate_with("undo.b"))
        .parallel(lambda b: b.then("c"), lambda b: b.delay("1h"), join="any")
        .for_each("items", lambda b: b.then("d"), max_parallelism=2)
        .saga(lambda s: s.then("a").then("b"))
        .wait_for_signal("paid", timeout="2d", on_timeout=lambda b: b.then("e"))
        .approval("ok")
        .end()
    )


def test_building_the_same_flow_twice_gives_the_same_ids_and_hash() -> None:
    first, second = _rich_flow(), _rich_flow()
    assert list(first.graph.nodes(data=True)) == list(second.graph.nodes(data=True))
    assert list(first.graph.edges(keys=True, data=True)) == list(
        second.graph.edges(keys=True, data=True)
    )
    assert first.content_hash == second.content_hash
    assert list(first.graph.nodes) == [
        "start",
        "a",
        "if-1",
        "b",
        "parallel-1",
        "c",
        "delay-1",
        "join-1",
        "for_each-1",
        "d",
        "join-2",
        "a-2",
        "b-2",
        "paid",
        "e",
        "ok",
        "end",
    ]


# --- the examples -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def examples() -> dict[str, wf.Workflow]:
    return all_workflows()


def test_examples_are_the_four_documented_ones(examples: dict[str, wf.Workflow]) -> None:
    assert list(examples) == ["onboarding", "fulfilment", "checkout", "trip"]


def test_onboarding_waits_for_approval_only_when_needed(examples: dict[str, wf.Workflow]) -> None:
    flow = examples["onboarding"]
    assert list(flow.graph.nodes) == [
        "start",
        "accounts.create",
        "if-1",
        "approval",
        "mail.welcome",
    ]
    assert edges(flow) == {
        ("start", "accounts.create", "next"),
        ("accounts.create", "if-1", "next"),
        ("if-1", "approval", "true"),
        ("if-1", "mail.welcome", "false"),
        ("approval", "mail.welcome", "next"),
    }
    assert flow.node("if-1").config.expression == "needs_approval"
    wait = flow.node("approval")
    assert wait.kind is wf.NodeKind.WAIT
    assert wait.config.correlate == "customer_id"
    assert wait.config.bind == {"approved": "is_approved"}
    assert wf.format_duration(wait.config.timeout) == "3d"


def test_fulfilment_ships_lines_four_at_a_time_with_review_on_partial(
    examples: dict[str, wf.Workflow],
) -> None:
    flow = examples["fulfilment"]
    assert edges(flow) == {
        ("start", "orders.load-lines", "next"),
        ("orders.load-lines", "for_each-1", "next"),
        ("for_each-1", "orders.ship-line", "each"),
        ("orders.ship-line", "join-1", "next"),
        ("join-1", "orders.confirm", "completed"),
        ("join-1", "review", "partial"),
        ("review", "orders.confirm", "approved"),
    }
    loop = flow.node("for_each-1").config
    assert (loop.items, loop.max_parallelism) == ("lines", 4)
    assert flow.node("join-1").config.mode == "all"
    ship = flow.node("orders.ship-line").policy
    assert (ship.max_attempts, ship.retry_delay.total_seconds()) == (3, 2)
    review = flow.node("review")
    assert review.kind is wf.NodeKind.APPROVAL
    assert review.config.assignees == ("warehouse",)
    assert wf.format_duration(review.config.timeout) == "2d"


def test_checkout_is_a_saga_undone_in_reverse(examples: dict[str, wf.Workflow]) -> None:
    flow = examples["checkout"]
    assert flow.graph.graph["sagas"] == {"saga-1": {"label": "checkout"}}
    steps = ["inventory.reserve", "card.charge", "courier.book"]
    assert [flow.node(n).compensation for n in steps] == [
        "inventory.release",
        "card.refund",
        "courier.cancel",
    ]
    assert {flow.node(n).saga for n in steps} == {"saga-1"}
    assert flow.node("mail.receipt").saga is None
    charge = flow.node("card.charge").policy
    assert (charge.max_attempts, charge.on_failure) == (2, wf.OnFailure.COMPENSATE)
    assert list(nx.topological_sort(flow.graph)) == ["start", *steps, "mail.receipt"]


def test_trip_nests_a_stay_saga_that_unwinds_with_the_flight(
    examples: dict[str, wf.Workflow],
) -> None:
    flow = examples["trip"]
    assert flow.graph.graph["sagas"] == {
        "saga-1": {"label": "trip"},
        "saga-2": {"parent": "saga-1", "policy": "unwind", "label": "stay"},
    }
    assert {n: flow.node(n).saga for n in list(flow.graph)[1:]} == {
        "flight.book": "saga-1",
        "hotel.book": "saga-2",
        "car.book": "saga-2",
        "payment.capture": "saga-1",
    }
    assert flow.node("payment.capture").policy.on_failure == wf.OnFailure.COMPENSATE
    assert list(nx.topological_sort(flow.graph)) == [
        "start",
        "flight.book",
        "hotel.book",
        "car.book",
        "payment.capture",
    ]


# --- cost: every verb names its node in amortised O(1) -----------------------------------------


class _CountingDict(dict[str, Any]):
    """A dict that counts the membership tests made on it (a name search is a run of them)."""

    lookups = 0

    def __contains__(self, key: object) -> bool:
        self.lookups += 1
        return super().__contains__(key)


class _CountingGraph(nx.MultiDiGraph):  # type: ignore[misc]
    node_dict_factory = _CountingDict


def _lookups_per_node(n: int) -> float:
    """Build n rounds of every naming verb on one graph; membership tests per node added."""
    G = _CountingGraph()
    G.graph["sagas"] = sagas = _CountingDict()
    flow = wf.Workflow.from_graph("long", 1, G).start_with("card.charge")
    pay = wf.Workflow("pay").start_with("card.charge").then("mail.receipt")
    for _ in range(n):
        flow.then("card.charge").if_("total > 1").delay("1s").call("payment")
        flow.parallel(lambda b: b.then("c")).for_each("items", lambda b: b.then("d"))
        flow.saga(lambda s: s.then("e")).splice(pay)
    flow.end()
    assert len(sagas) == n
    return (G._node.lookups + sagas.lookups) / len(G)


def test_a_long_build_costs_the_same_per_node_as_a_short_one() -> None:
    # searching each name from "-1" again cost the n-th round about n lookups per verb: over
    # 200 per node for 400 rounds, twice that for 800; resuming the search costs about 3.4
    short, long = _lookups_per_node(400), _lookups_per_node(800)
    assert short < 5
    assert long < 5


@pytest.mark.slow
@pytest.mark.timeout(120)  # a few seconds; it did not finish in 250 s when naming was quadratic
def test_a_100_000_step_chain_gets_the_numbered_ids() -> None:
    flow = wf.Workflow("long").start_with("card.charge")
    for _ in range(99_999):
        flow.then("card.charge")
    nodes = list(flow.graph)
    assert len(nodes) == 100_001
    assert nodes[-3:] == ["card.charge-99998", "card.charge-99999", "card.charge-100000"]


def test_an_id_freed_by_editing_the_graph_is_given_again() -> None:
    flow = wf.Workflow("w").start_with("a").then("a").then("a").then("a")
    flow.graph.remove_node("a-2")
    flow.then("b")  # the builder adds a node of its own after the edit
    flow.then("a")
    flow.graph.remove_node("a-3")
    flow.graph.add_node("x", kind="end")  # as many nodes as before, the last one new
    flow.if_("x > 1").then("a")
    flow.graph.remove_node("if-1")
    flow.if_("x > 2")
    assert list(flow.graph) == ["start", "a", "a-4", "b", "a-2", "x", "a-3", "if-1"]


def test_a_saga_id_freed_by_editing_the_graph_is_given_again() -> None:
    flow = wf.Workflow("w").start_with()
    flow.saga(lambda s: s.then("a")).saga(lambda s: s.then("b")).saga(lambda s: s.then("c"))
    del flow.graph.graph["sagas"]["saga-1"]
    flow.saga(lambda s: s.then("d"))
    assert list(flow.graph.graph["sagas"]) == ["saga-2", "saga-3", "saga-1"]
