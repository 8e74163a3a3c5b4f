"""Property tests: validation copes with any graph, and accepts every flow the builder makes."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import wfkit as wf
from wfkit.definition import rendering
from wfkit.definition.kinds import NodeKind

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WORKFLOW_LEVEL_CODES = {
    "no-start",
    "bad-saga",
    "nested-saga-policy",
    "saga-too-deep",
    "html-label",
    "bad-text",
}
"""Codes that may be about the whole workflow (``node`` None)."""


def _noop(ctx: Any) -> None:
    return None


REGISTRY = wf.ActivityRegistry()
for _name in ("a", "b", "c", "pick", "undo", "binder"):
    REGISTRY.register(_name, _noop)


class Doc(BaseModel):
    total: int = 0
    items: list[str] = []
    customer_id: str = ""
    approved: bool | None = None


# --- random graphs ----------------------------------------------------------------------------

node_ids = st.sampled_from(
    ["start", "a", "b", "if-1", "p", "j", "x y", "ü", "a->b", 'q"t', "end"]
) | st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=6)

json_scalars = st.none() | st.booleans() | st.integers(-5, 10) | st.text(max_size=5)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)

kinds = (
    st.sampled_from([k.value for k in NodeKind])
    | st.sampled_from(["teleport", "", "START", "Action"])
    | json_values
)

expressions = st.sampled_from(
    ["total > 1", "approved", "totl", "len(items)", "().__class__", "9**9**9", "x >", "items", ""]
)
durations = st.sampled_from(["90s", "7d", "1h30m", 5, 0, "soon", -1, None, "1:00"])
branch_names = st.lists(st.sampled_from(["x", "y", "true", "false", "next"]), max_size=3)

valid_configs: dict[str, st.SearchStrategy[Any]] = {
    "start": st.just({}),
    "end": st.just({}),
    "action": st.just({}),
    "decision": st.fixed_dictionaries(
        {}, optional={"expression": expressions, "branches": branch_names}
    ),
    "parallel": st.fixed_dictionaries({"branches": branch_names}),
    "join": st.fixed_dictionaries(
        {"fork": node_ids},
        optional={
            "mode": st.sampled_from(["all", "any", "at_least", "most"]),
            "count": st.integers(0, 3),
        },
    ),
    "for_each": st.fixed_dictionaries(
        {"items": expressions}, optional={"max_parallelism": st.integers(0, 4)}
    ),
    "delay": st.fixed_dictionaries({}, optional={"duration": durations}),
    "wait": st.fixed_dictionaries(
        {"signal": st.sampled_from(["paid", ""])},
        optional={
            "correlate": expressions,
            "bind": st.sampled_from([{"ok": "approved"}, {"ok": "nope"}, "binder", "nobinder"]),
            "timeout": durations,
        },
    ),
    "approval": st.fixed_dictionaries(
        {}, optional={"timeout": durations, "assignees": st.lists(st.text(max_size=3))}
    ),
}

policies = st.fixed_dictionaries(
    {},
    optional={
        "max_visits": st.integers(0, 3),
        "max_attempts": st.integers(0, 4),
        "on_failure": st.sampled_from(["retry", "compensate", "suspend", "explode"]),
    },
)
activities = st.sampled_from(["a", "b", "pick", "nobody"])
saga_ids = st.sampled_from(["s1", "s2", "s3"])


@st.composite
def node_attrs(draw: st.DrawFn) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if draw(st.integers(0, 9)):  # now and then a node with no kind at all
        kind = draw(kinds)
        attrs["kind"] = kind
        if isinstance(kind, str) and kind in valid_configs and draw(st.booleans()):
            attrs["config"] = draw(valid_configs[kind])
        elif draw(st.integers(0, 3)) == 0:
            attrs["config"] = draw(json_values)
    optional = {
        "activity": activities,
        "policy": policies | json_values,
        "saga": saga_ids,
        "compensation": activities,
        "label": st.text(max_size=5),
        "colour": st.just("red"),
    }
    for key, values in optional.items():
        if draw(st.integers(0, 4)) == 0:
            attrs[key] = draw(values)
    return attrs


saga_specs = st.fixed_dictionaries(
    {},
    optional={
        "parent": saga_ids | st.just("ghost"),
        "policy": st.sampled_from(["unwind", "keep", "forget"]),
        "label": st.text(max_size=4),
    },
)


@st.composite
def random_graphs(draw: st.DrawFn) -> nx.MultiDiGraph:
    G = nx.MultiDiGraph()
    for n in draw(st.lists(node_ids, max_size=8, unique=True)):
        G.add_node(n, **draw(node_attrs()))
    ids = list(G.nodes)
    targets = st.sampled_from(ids) | node_ids if ids else node_ids
    outlets = st.sampled_from(
        [
            "next",
            "failed",
            "fallback",
            "true",
            "false",
            "x",
            "y",
            "completed",
            "partial",
            "each",
            "elapsed",
            "approved",
            "rejected",
            "expired",
            "branch-1",
            "sideways",
        ]
    )
    for _ in range(draw(st.integers(0, 12))):
        u = draw(targets)
        v = draw(targets)
        G.add_edge(u, v, key=draw(outlets))
    if draw(st.booleans()):
        G.graph["sagas"] = draw(
            st.dictionaries(saga_ids, saga_specs | json_values, max_size=3) | json_values
        )
    return G


def _check_problems(G: nx.MultiDiGraph, problems: list[wf.Problem]) -> None:
    assert isinstance(problems, list)
    edges = set(G.edges(keys=True))
    for p in problems:
        assert isinstance(p, wf.Problem)
        assert p.message
        if p.node is not None:
            assert p.node in G, p
        else:
            assert p.code in WORKFLOW_LEVEL_CODES, p
        if p.edge is not None:
            assert p.edge in edges, p
            assert p.node == p.edge[0], p
        warnings = ("unreachable", "open-decision-branch", "html-label")
        assert (p.severity is wf.Severity.WARNING) == (p.code in warnings), p


@FUZZ
@given(random_graphs(), st.sampled_from([REGISTRY, None]), st.sampled_from([Doc, None]))
def test_validate_never_raises_and_every_problem_points_into_the_graph(
    G: nx.MultiDiGraph, registry: wf.ActivityRegistry | None, model: type[BaseModel] | None
) -> None:
    problems = wf.validate(G, registry=registry, data_model=model)
    _check_problems(G, problems)
    errors = [p for p in problems if p.severity is wf.Severity.ERROR]
    assert problems[: len(errors)] == errors  # errors first


@settings(max_examples=100, deadline=None)
@given(random_graphs(), st.data())
def test_to_dot_draws_every_node_of_any_graph(G: nx.MultiDiGraph, data: st.DataObject) -> None:
    # the editor draws graphs while they are broken, problems and all
    marked = data.draw(st.lists(st.sampled_from(list(G)), unique=True) if len(G) else st.just([]))
    problems = [wf.Problem(code="x", node=n, message=f"bad {n}") for n in marked]
    source = rendering.to_dot(G, problems, title="fuzz")
    assert source.startswith("digraph workflow {")
    for i in range(G.number_of_nodes()):
        # nodes in saga clusters are indented deeper: match the statement at any indent
        assert re.search(rf"^\s*n{i} \[", source, re.MULTILINE), f"n{i} missing"


# --- valid flows from random verb sequences ---------------------------------------------------

Step = tuple[str, Any]

conditions = st.sampled_from(["total > 10", "approved", "len(items) > 2", "customer_id == ''"])
join_modes = st.sampled_from(["all", "any", "at_least"])


def sequences(depth: int) -> st.SearchStrategy[list[Step]]:
    leaves: list[st.SearchStrategy[Step]] = [
        st.tuples(
            st.just("then"),
            st.fixed_dictionaries(
                {"activity": st.sampled_from(["a", "b", "c"])},
                optional={
                    "max_attempts": st.integers(1, 5),
                    "compensation": st.just("undo"),
                    "on_failure": st.sampled_from(["retry", "compensate", "suspend"]),
                },
            ),
        ),
        st.tuples(st.just("delay"), st.sampled_from(["90s", "7d", "1h30m"])),
        st.tuples(
            st.just("wait"),
            st.fixed_dictionaries(
                {},
                optional={
                    "correlate": st.just("customer_id"),
                    "bind": st.sampled_from([{"ok": "approved"}, "binder"]),
                    "timeout": st.just("3d"),
                },
            ),
        ),
        st.tuples(st.just("approval"), st.sampled_from([None, "2d"])),
        st.tuples(st.just("loop"), st.integers(2, 5)),
    ]
    if depth == 0:
        return st.lists(st.one_of(leaves), max_size=4)
    inner = sequences(depth - 1)
    maybe = st.none() | inner
    branches: list[st.SearchStrategy[Step]] = [
        st.tuples(st.just("if"), st.tuples(conditions, maybe, maybe)),
        st.tuples(
            st.just("decide"),
            st.dictionaries(st.sampled_from(["small", "big", "odd"]), maybe, min_size=1),
        ),
        st.tuples(
            st.just("parallel"),
            st.tuples(st.lists(inner, min_size=1, max_size=3), join_modes, maybe),
        ),
        st.tuples(
            st.just("for_each"),
            st.tuples(inner, st.none() | st.integers(1, 4), join_modes, maybe),
        ),
        st.tuples(st.just("saga"), st.tuples(inner, st.sampled_from([None, "unwind", "keep"]))),
        st.tuples(st.just("then-on-failed"), st.tuples(st.sampled_from(["a", "b"]), inner)),
    ]
    return st.lists(st.one_of(*leaves, *branches), max_size=4)


class _Names:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, base: str) -> str:
        self.count += 1
        return f"{base}-{self.count}"


def apply(b: wf.Steps, steps: list[Step], names: _Names, in_saga: bool) -> None:
    for verb, arg in steps:
        if verb == "then":
            b.then(arg["activity"], **{k: arg[k] for k in ("max_attempts",) if k in arg})
            if "compensation" in arg:
                b.compensate_with(arg["compensation"])
            if "on_failure" in arg:
                b.on_failure(arg["on_failure"])
        elif verb == "delay":
            b.delay(arg)
        elif verb == "wait":
            b.wait_for_signal(names("signal"), **arg)
        elif verb == "approval":
            b.approval(names("review"), timeout=arg)
        elif verb == "loop":
            node = names("poll")
            b.then("a", id=node, max_visits=arg)
            b.if_("total > 1", then=lambda s, node=node: s.goto(node))
        elif verb == "if":
            cond, then, otherwise = arg
            b.if_(
                cond, then=_body(then, names, in_saga), otherwise=_body(otherwise, names, in_saga)
            )
        elif verb == "decide":
            b.decide("pick", {k: _body(v, names, in_saga) for k, v in arg.items()})
        elif verb == "parallel":
            bodies, mode, partial = arg
            b.parallel(
                *[_body(body, names, in_saga) for body in bodies],
                join=_join(mode),
                on_partial=_body(partial, names, in_saga),
            )
        elif verb == "for_each":
            body, limit, mode, partial = arg
            b.for_each(
                "items",
                _body(body, names, in_saga) or (lambda s: s),
                max_parallelism=limit,
                join=_join(mode),
                on_partial=_body(partial, names, in_saga),
            )
        elif verb == "saga":
            body, policy = arg
            b.saga(
                _body(body, names, True) or (lambda s: s),
                policy=policy or ("unwind" if in_saga else None),
            )
        elif verb == "then-on-failed":
            activity, body = arg
            b.then(activity).on_failed(_body(body, names, in_saga) or (lambda s: s))


def _join(mode: str) -> Any:
    return wf.at_least(1) if mode == "at_least" else mode


def _body(
    steps: list[Step] | None, names: _Names, in_saga: bool
) -> Callable[[wf.Steps], None] | None:
    if steps is None:
        return None
    return lambda b: apply(b, steps, names, in_saga)


def build(steps: list[Step], end: bool) -> wf.Workflow:
    flow = wf.Workflow("fuzz", version=1, data=Doc).start_with("a")
    apply(flow, steps, _Names(), in_saga=False)
    if end:
        flow.end()
    return flow


@FUZZ
@given(sequences(depth=2), st.booleans())
def test_every_flow_the_builder_makes_is_valid(steps: list[Step], end: bool) -> None:
    flow = build(steps, end)
    # the only thing to say about a built flow: an if_ whose open branch is where the run ends
    problems = flow.validate(registry=REGISTRY)
    assert [p for p in problems if p.code != "open-decision-branch"] == []
    assert all(p.severity is wf.Severity.WARNING for p in problems)
    again = build(steps, end)
    assert list(again.graph.nodes) == list(flow.graph.nodes)
    assert again.content_hash == flow.content_hash
    back = wf.Workflow.from_json(flow.to_json())
    assert back.to_json() == flow.to_json()
    assert back.validate(registry=REGISTRY) == problems
