"""Validation: one test per rule, each naming the problem code and the node or edge it is about."""

from __future__ import annotations

import uuid
from typing import Any

import networkx as nx
import pytest
from pydantic import BaseModel

import wfkit as wf
from wfkit.examples import all_workflows


class Order(BaseModel):
    total: int = 0
    items: list[str] = []
    customer_id: str = ""
    approved: bool | None = None


def graph(
    nodes: dict[str, dict[str, Any]],
    edges: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    sagas: dict[str, Any] | None = None,
) -> nx.MultiDiGraph:
    G = nx.MultiDiGraph()
    for n, attrs in nodes.items():
        G.add_node(n, **attrs)
    for u, v, k in edges:
        G.add_edge(u, v, key=k)
    if sagas is not None:
        G.graph["sagas"] = sagas
    return G


START = {"kind": "start"}
END = {"kind": "end"}


def act(activity: str = "a", **more: Any) -> dict[str, Any]:
    return {"kind": "action", "activity": activity, **more}


def found(G: nx.MultiDiGraph, **kwargs: Any) -> list[tuple[str, str | None]]:
    kwargs.setdefault("registry", None)
    return [(p.code, p.node) for p in wf.validate(G, **kwargs)]


def problems_with(code: str, G: nx.MultiDiGraph, **kwargs: Any) -> list[wf.Problem]:
    kwargs.setdefault("registry", None)
    return [p for p in wf.validate(G, **kwargs) if p.code == code]


def test_a_straight_valid_graph_has_no_problems(registry: wf.ActivityRegistry) -> None:
    G = graph(
        {"start": START, "a": act(), "end": END}, [("start", "a", "next"), ("a", "end", "next")]
    )
    assert wf.validate(G, registry=registry) == []


# --- start ------------------------------------------------------------------------------------


def test_no_start_is_a_workflow_level_problem() -> None:
    G = graph({"a": act(), "end": END}, [("a", "end", "next")])
    [problem] = problems_with("no-start", G)
    assert problem.node is None
    assert problem.severity is wf.Severity.ERROR
    assert "start_with" in problem.message


def test_an_empty_graph_has_no_start() -> None:
    assert found(nx.MultiDiGraph()) == [("no-start", None)]


def test_several_starts_names_the_extra_one() -> None:
    G = graph({"start": START, "again": START, "a": act()}, [("start", "a", "next")])
    [problem] = problems_with("several-starts", G)
    assert problem.node == "again"
    assert "'start'" in problem.message


def test_an_edge_into_the_start_names_the_edge() -> None:
    G = graph(
        {"start": START, "a": act(policy={"max_visits": 2})},
        [("start", "a", "next"), ("a", "start", "next")],
    )
    [problem] = problems_with("edge-into-start", G)
    assert (problem.node, problem.edge) == ("a", ("a", "start", "next"))


# --- nodes ------------------------------------------------------------------------------------


def test_an_edge_to_an_unknown_node_reports_the_undefined_node() -> None:
    G = graph({"start": START, "a": act()}, [("start", "a", "next"), ("a", "ghost", "next")])
    assert "kind" not in G.nodes["ghost"]  # networkx created it, bare
    [problem] = problems_with("undefined-node", G)
    assert problem.node == "ghost"
    assert "'a'" in problem.message  # says which edge points at it
    assert found(G) == [("undefined-node", "ghost")]  # no follow-on noise


def test_an_unknown_kind_is_reported_with_the_kinds_that_exist() -> None:
    G = graph({"start": START, "t": {"kind": "teleport"}}, [("start", "t", "next")])
    [problem] = problems_with("unknown-kind", G)
    assert problem.node == "t"
    assert "teleport" in problem.message and "approval" in problem.message


@pytest.mark.parametrize(
    ("attrs", "needle"),
    [
        ({"kind": "delay"}, "duration"),
        ({"kind": "delay", "config": {"duration": "whenever"}}, "not a duration"),
        ({"kind": "action"}, "activity"),
        ({"kind": "wait", "config": {"timeout": "1h"}}, "signal"),
        ({"kind": "join", "config": {"fork": "p", "mode": "at_least"}}, "count"),
        ({"kind": "action", "activity": "a", "colour": "red"}, "colour"),
        ({"kind": "action", "activity": "a", "policy": {"max_visits": 0}}, "max_visits"),
        ({"kind": "end", "config": {"why": 1}}, "why"),
    ],
)
def test_config_that_does_not_fit_the_kind_is_bad_config(
    attrs: dict[str, Any], needle: str
) -> None:
    G = graph({"start": START, "x": attrs}, [("start", "x", "next")])
    [problem] = problems_with("bad-config", G)
    assert problem.node == "x"
    assert needle in problem.message


# --- outlets ----------------------------------------------------------------------------------


def test_an_undeclared_outlet_names_the_edge_and_the_declared_ones() -> None:
    G = graph(
        {"start": START, "a": act(), "b": act("b")},
        [("start", "a", "next"), ("a", "b", "sideways")],
    )
    [problem] = problems_with("unknown-outlet", G)
    assert (problem.node, problem.edge) == ("a", ("a", "b", "sideways"))
    assert "next, failed, fallback" in problem.message


def test_a_decisions_outlets_are_its_branches() -> None:
    G = graph(
        {
            "start": START,
            "pick": {"kind": "decision", "activity": "pick", "config": {"branches": ["x"]}},
            "a": act(),
        },
        [("start", "pick", "next"), ("pick", "a", "x"), ("pick", "a", "true")],
    )
    assert [p.edge for p in problems_with("unknown-outlet", G)] == [("pick", "a", "true")]


def test_an_end_declares_no_outlets() -> None:
    G = graph(
        {"start": START, "end": END, "a": act()}, [("start", "end", "next"), ("end", "a", "next")]
    )
    [problem] = problems_with("unknown-outlet", G)
    assert problem.edge == ("end", "a", "next")
    assert "none" in problem.message


def test_a_parallel_branch_leading_nowhere_is_dangling() -> None:
    G = graph(
        {
            "start": START,
            "p": {"kind": "parallel", "config": {"branches": ["left", "right"]}},
            "a": act(),
            "j": {"kind": "join", "config": {"fork": "p"}},
        },
        [("start", "p", "next"), ("p", "a", "left"), ("a", "j", "next")],
    )
    [problem] = problems_with("dangling-branch", G)
    assert problem.node == "p"
    assert "'right'" in problem.message


def test_a_for_each_without_its_each_edge_is_dangling() -> None:
    G = graph(
        {
            "start": START,
            "loop": {"kind": "for_each", "config": {"items": "items"}},
            "j": {"kind": "join", "config": {"fork": "loop"}},
        },
        [("start", "loop", "next")],
    )
    assert ("dangling-branch", "loop") in found(G)


# --- joins ------------------------------------------------------------------------------------

FORK = {"kind": "parallel", "config": {"branches": ["x"]}}


def test_a_parallel_without_a_join_is_join_missing() -> None:
    G = graph({"start": START, "p": FORK, "a": act()}, [("start", "p", "next"), ("p", "a", "x")])
    [problem] = problems_with("join-missing", G)
    assert problem.node == "p"
    assert "exactly one join, found 0" in problem.message


def test_a_fork_with_two_joins_is_join_several_naming_both() -> None:
    G = graph(
        {
            "start": START,
            "p": FORK,
            "a": act(),
            "j1": {"kind": "join", "config": {"fork": "p"}},
            "j2": {"kind": "join", "config": {"fork": "p"}},
        },
        [("start", "p", "next"), ("p", "a", "x"), ("a", "j1", "next"), ("j1", "j2", "completed")],
    )
    [problem] = problems_with("join-several", G)
    assert problem.node == "p"
    assert "j1, j2" in problem.message


@pytest.mark.parametrize("fork", ["a", "nowhere"])
def test_a_join_whose_fork_is_not_a_fork_is_join_without_fork(fork: str) -> None:
    G = graph(
        {"start": START, "a": act(), "j": {"kind": "join", "config": {"fork": fork}}},
        [("start", "a", "next"), ("a", "j", "next")],
    )
    [problem] = problems_with("join-without-fork", G)
    assert problem.node == "j"
    assert repr(fork) in problem.message


def test_a_join_its_fork_cannot_reach_is_join_unreachable() -> None:
    G = graph(
        {
            "start": START,
            "p": FORK,
            "a": act(),
            "j": {"kind": "join", "config": {"fork": "p"}},
        },
        [("start", "p", "next"), ("p", "a", "x"), ("start", "j", "next")],
    )
    [problem] = problems_with("join-unreachable", G)
    assert problem.node == "j"


# --- cycles -----------------------------------------------------------------------------------


def _loop(max_visits: int) -> nx.MultiDiGraph:
    return graph(
        {
            "start": START,
            "poll": act(policy={"max_visits": max_visits}),
            "check": {"kind": "decision", "config": {"expression": "total > 1"}},
            "done": act("b"),
        },
        [
            ("start", "poll", "next"),
            ("poll", "check", "next"),
            ("check", "poll", "true"),
            ("check", "done", "false"),
        ],
    )


def test_a_cycle_where_every_node_allows_one_visit_is_unbounded() -> None:
    [problem] = problems_with("unbounded-cycle", _loop(max_visits=1))
    assert problem.node in {"poll", "check"}
    assert "poll" in problem.message and "check" in problem.message
    assert "max_visits" in problem.message


def test_a_cycle_bounded_by_max_visits_on_one_node_is_fine() -> None:
    assert found(_loop(max_visits=3)) == []


def test_a_self_loop_is_a_cycle_too() -> None:
    G = graph({"start": START, "a": act()}, [("start", "a", "next"), ("a", "a", "failed")])
    assert found(G) == [("unbounded-cycle", "a")]


def test_a_bounded_self_loop_is_fine() -> None:
    G = graph(
        {"start": START, "a": act(policy={"max_visits": 3})},
        [("start", "a", "next"), ("a", "a", "failed")],
    )
    assert found(G) == []


# --- activities -------------------------------------------------------------------------------


def test_an_unregistered_activity_is_reported(registry: wf.ActivityRegistry) -> None:
    G = graph({"start": START, "x": act("nobody.home")}, [("start", "x", "next")])
    [problem] = problems_with("unknown-activity", G, registry=registry)
    assert problem.node == "x"
    assert "'nobody.home'" in problem.message and "@wf.activity" in problem.message


def test_an_unregistered_compensation_is_reported(registry: wf.ActivityRegistry) -> None:
    G = graph(
        {"start": START, "a": act(compensation="undo.nothing")},
        [("start", "a", "next")],
    )
    [problem] = problems_with("unknown-activity", G, registry=registry)
    assert problem.node == "a"
    assert "compensation 'undo.nothing'" in problem.message


def test_an_unregistered_decision_function_is_reported(registry: wf.ActivityRegistry) -> None:
    G = graph(
        {
            "start": START,
            "choose": {"kind": "decision", "activity": "choose", "config": {"branches": ["a"]}},
            "a": act(),
        },
        [("start", "choose", "next"), ("choose", "a", "a")],
    )
    assert found(G, registry=registry) == [("unknown-activity", "choose")]


def test_an_unregistered_binder_is_reported(registry: wf.ActivityRegistry) -> None:
    G = graph(
        {"start": START, "w": {"kind": "wait", "config": {"signal": "s", "bind": "nobinder"}}},
        [("start", "w", "next")],
    )
    assert found(G, registry=registry) == [("unknown-activity", "w")]


def test_registry_none_skips_the_activity_rule() -> None:
    G = graph(
        {"start": START, "x": act("nobody.home", compensation="undo.nothing")},
        [("start", "x", "next")],
    )
    assert found(G, registry=None) == []


def test_activities_are_checked_against_the_default_registry_by_default() -> None:
    name = f"tests.validation.{uuid.uuid4().hex}"  # fresh: the default registry is global

    G = graph({"start": START, "x": act(name)}, [("start", "x", "next")])
    assert [p.code for p in wf.validate(G)] == ["unknown-activity"]
    wf.activity(name)(lambda ctx: None)
    assert wf.validate(G) == []


# --- sagas ------------------------------------------------------------------------------------


def test_a_node_in_an_undeclared_saga_is_bad_saga() -> None:
    G = graph({"start": START, "a": act(saga="ghost")}, [("start", "a", "next")], sagas={})
    [problem] = problems_with("bad-saga", G)
    assert problem.node == "a"
    assert "'ghost'" in problem.message


def test_a_saga_with_an_unknown_parent_is_bad_saga() -> None:
    G = graph(
        {"start": START, "a": act(saga="inner")},
        [("start", "a", "next")],
        sagas={"inner": {"parent": "outer", "policy": "keep"}},
    )
    [problem] = problems_with("bad-saga", G)
    assert problem.node is None
    assert "'outer'" in problem.message


def test_malformed_saga_declarations_are_bad_saga() -> None:
    G = graph({"start": START}, sagas={"s": {"policy": "forget"}})
    assert found(G) == [("bad-saga", None)]


def test_sagas_that_are_not_a_mapping_are_bad_saga_not_a_crash() -> None:
    G = graph({"start": START}, sagas=["saga-1"])  # type: ignore[arg-type]
    assert found(G) == [("bad-saga", None)]


def test_saga_parents_that_form_a_cycle_are_bad_saga() -> None:
    G = graph(
        {"start": START, "a": act(saga="x")},
        [("start", "a", "next")],
        sagas={"x": {"parent": "y", "policy": "keep"}, "y": {"parent": "x", "policy": "keep"}},
    )
    # an unwind walking up the parents would never reach the outermost saga
    assert "bad-saga" in [code for code, _ in found(G)]


def test_a_nested_saga_without_policy_names_a_member() -> None:
    G = graph(
        {"start": START, "a": act(saga="outer"), "b": act("b", saga="inner")},
        [("start", "a", "next"), ("a", "b", "next")],
        sagas={"outer": {}, "inner": {"parent": "outer"}},
    )
    [problem] = problems_with("nested-saga-policy", G)
    assert problem.node == "b"
    assert "'inner'" in problem.message and "policy='unwind'" in problem.message


# --- expressions ------------------------------------------------------------------------------


def _decision(expression: str) -> nx.MultiDiGraph:
    return graph(
        {
            "start": START,
            "if-1": {"kind": "decision", "config": {"expression": expression}},
            "a": act(),
        },
        [("start", "if-1", "next"), ("if-1", "a", "true"), ("if-1", "a", "false")],
    )


@pytest.mark.parametrize(
    ("expression", "code"),
    [
        ("total >", "syntax"),
        ("total = 3", "syntax"),
        ("().__class__", "unsafe-expression"),
        ("total.__class__", "unsafe-expression"),
        ("9**9**9", "unsafe-expression"),
        ("open('/etc/passwd')", "unsafe-expression"),
        ("__import__('os')", "unsafe-expression"),
        ("", "empty"),
    ],
)
def test_bad_expressions_are_reported_on_their_node(expression: str, code: str) -> None:
    [problem] = [p for p in wf.validate(_decision(expression), registry=None) if p.code == code]
    assert problem.node == "if-1"
    assert problem.severity is wf.Severity.ERROR


def test_a_misspelt_name_is_unknown_name_against_the_data_model() -> None:
    flow = wf.Workflow("w", data=Order).start_with().if_("totl > 10").then("a")
    [problem] = flow.validate(registry=None)
    assert (problem.code, problem.node) == ("unknown-name", "if-1")
    assert "'totl'" in problem.message and "total" in problem.message


def test_names_are_not_checked_without_a_data_model() -> None:
    flow = wf.Workflow("w").start_with().if_("totl > 10").then("a")
    assert flow.validate(registry=None) == []


def test_allowed_functions_and_engine_names_are_not_unknown() -> None:
    flow = (
        wf.Workflow("w", data=Order)
        .start_with()
        .if_("len(items) > 2 and total > 1")
        .for_each("items", lambda b: b.if_("item != '' and loop_index >= 0").then("a"))
    )
    assert flow.validate(registry=None) == []


def test_for_each_items_and_wait_correlate_are_checked_too() -> None:
    flow = (
        wf.Workflow("w", data=Order)
        .start_with()
        .for_each("lines", lambda b: b.then("a"))
        .wait_for_signal("paid", correlate="customer")
    )
    assert [(p.code, p.node) for p in flow.validate(registry=None)] == [
        ("unknown-name", "for_each-1"),
        ("unknown-name", "paid"),
    ]


def test_bind_to_an_unknown_field_is_unknown_name() -> None:
    flow = (
        wf.Workflow("w", data=Order)
        .start_with()
        .wait_for_signal("paid", correlate="customer_id", bind={"ok": "aproved", "n": "total"})
    )
    [problem] = flow.validate(registry=None)
    assert (problem.code, problem.node) == ("unknown-name", "paid")
    assert "'aproved'" in problem.message


# --- reachability -----------------------------------------------------------------------------


def test_an_unreachable_node_is_a_warning_not_an_error() -> None:
    G = graph(
        {"start": START, "a": act(), "island": act("b")},
        [("start", "a", "next")],
    )
    [problem] = wf.validate(G, registry=None)
    assert (problem.code, problem.node, problem.severity) == (
        "unreachable",
        "island",
        wf.Severity.WARNING,
    )


def test_errors_come_before_warnings() -> None:
    G = graph({"start": START, "island": act()}, [("start", "ghost", "next")])
    severities = [p.severity for p in wf.validate(G, registry=None)]
    assert severities == sorted(severities, key=lambda s: s is wf.Severity.WARNING)
    assert wf.Severity.WARNING in severities and wf.Severity.ERROR in severities


# --- data documents ---------------------------------------------------------------------------


def test_validate_data_accepts_a_fitting_document() -> None:
    assert wf.validate_data({"total": 3, "items": ["x"]}, Order) == []
    assert wf.validate_data(Order(total=3), Order) == []


def test_validate_data_reports_each_field_that_does_not_fit() -> None:
    problems = wf.validate_data({"total": "lots", "items": 5}, Order)
    assert [p.code for p in problems] == ["bad-data", "bad-data"]
    assert "'total'" in problems[0].message and "Order" in problems[0].message
    assert "'items'" in problems[1].message


def test_validate_data_without_a_model_refuses_non_json() -> None:
    [problem] = wf.validate_data({"when": object()}, None)
    assert problem.code == "bad-data"
    assert "not JSON" in problem.message
    [problem] = wf.validate_data({"x": float("nan")}, None)
    assert problem.code == "bad-data"


def test_validate_data_refuses_a_payload_over_the_limit() -> None:
    document = {"items": ["x" * 50] * 10}
    [problem] = wf.validate_data(document, Order, max_payload=100)
    assert problem.code == "payload-too-large"
    assert "100-byte limit" in problem.message
    assert wf.validate_data(document, Order, max_payload=10_000) == []


def test_the_default_payload_limit_is_256_kib() -> None:
    assert wf.DEFAULT_MAX_PAYLOAD == 256 * 1024
    assert [p.code for p in wf.validate_data({"blob": "x" * 300_000}, None)] == [
        "payload-too-large"
    ]


# --- check ------------------------------------------------------------------------------------


def test_check_raises_every_error_at_once_naming_the_workflow() -> None:
    G = graph(
        {"start": START, "x": act("nobody.home"), "d": {"kind": "delay"}},
        [("start", "x", "sideways"), ("x", "d", "next")],
    )
    flow = wf.Workflow.from_graph("orders", 3, G)
    with pytest.raises(wf.DefinitionError) as info:
        flow.check(registry=wf.ActivityRegistry())
    error = info.value
    assert {(p.code, p.node) for p in error.problems} == {
        ("unknown-outlet", "start"),
        ("unknown-activity", "x"),
        ("bad-config", "d"),
    }
    text = str(error)
    assert "Workflow 'orders' v3 has 3 problems" in text
    assert all(str(p) in text for p in error.problems)


def test_check_returns_the_workflow_when_only_warnings_remain() -> None:
    G = graph({"start": START, "a": act(), "island": act("b")}, [("start", "a", "next")])
    flow = wf.Workflow.from_graph("w", 1, G)
    assert flow.check(registry=None) is flow
    assert [p.severity for p in flow.validate(registry=None)] == [wf.Severity.WARNING]


def test_examples_validate_without_problems() -> None:
    for flow in all_workflows().values():
        assert flow.validate() == [], flow.id
        assert flow.check() is flow


@pytest.mark.parametrize("kind", [["action"], {"k": 1}])
def test_an_unhashable_kind_is_reported_not_a_crash(kind: Any) -> None:
    G = graph({"start": START, "x": {"kind": kind}}, [("start", "x", "next")])
    assert found(G) == [("unknown-kind", "x")]


@pytest.mark.parametrize("duration", ["99999999999d", 1e20, float("inf")])
def test_an_absurd_duration_is_bad_config_not_a_crash(duration: Any) -> None:
    G = graph(
        {"start": START, "d": {"kind": "delay", "config": {"duration": duration}}},
        [("start", "d", "next")],
    )
    assert found(G) == [("bad-config", "d")]


def test_integer_node_ids_are_reported_not_a_crash() -> None:
    G = nx.MultiDiGraph()
    G.add_node(1, kind="start")
    G.add_node(2, kind="end")
    G.add_edge(1, 2, key="bogus")
    problems = wf.validate(G, registry=None)
    assert problems, "a graph with a wrong outlet must report a problem"
    assert all(isinstance(p, wf.Problem) for p in problems)
