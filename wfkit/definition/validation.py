"""Validation: every rule a workflow graph must meet, each problem reported at once.

Run by ``Workflow.validate()``, at registration and at admission. Each rule is a small function
that yields :class:`Problem` objects; :func:`validate` runs them all and never raises on a broken
graph (a broken graph is what it is for). Every rule costs time linear in the size of the graph
(reachability from forks to joins is one pass in topological order), so a graph of 100,000 nodes
validates in seconds; ``benchmarks/definition_costs.py`` measures it.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator
from typing import Any

import networkx as nx
from pydantic import BaseModel, ValidationError

from wfkit.definition import keys
from wfkit.definition.activities import ActivityRegistry, default_registry
from wfkit.definition.expressions import check_names, parse_expression
from wfkit.definition.field_errors import field_errors
from wfkit.definition.graph import MAX_SAGA_DEPTH, SagaSpec, saga_nesting, saga_specs
from wfkit.definition.kind_spec import Unconnected
from wfkit.definition.kinds import Node, NodeKind
from wfkit.definition.problems import Problem, Severity
from wfkit.definition.rule_context import Registered, RuleContext, listed
from wfkit.definition.run_retry import run_retry_problem
from wfkit.definition.values import depth_problem, json_problem, text_problem
from wfkit.errors import ExpressionError

__all__ = ["DEFAULT_MAX_PAYLOAD", "Registered", "validate", "validate_data"]

DEFAULT_MAX_PAYLOAD = 256 * 1024
"""Default limit, in bytes of JSON, on a run's data document."""


def validate(
    G: nx.MultiDiGraph,
    *,
    registry: ActivityRegistry | None = default_registry,
    data_model: type[BaseModel] | None = None,
    workflows: Registered | None = None,
    workflow_id: str | None = None,
) -> list[Problem]:
    """Every problem of graph ``G``; an empty list means it is valid.

    Parameters
    ----------
    G : networkx.MultiDiGraph
        The workflow graph.
    registry : ActivityRegistry or None
        Where activity names must be registered; ``None`` skips that rule.
    data_model : pydantic model class or None
        The data document's model: expressions and bindings are checked against its fields.
    workflows : mapping or None
        The workflows a call node may start (id -> version -> data model), as an engine has
        them registered; ``None`` skips that rule (a call is then checked when registered).
    workflow_id : str or None
        The id of the workflow ``G`` belongs to: a call of it by itself is refused.

    Returns
    -------
    list of Problem
        Errors first, then warnings, each in graph order.
    """
    ctx = RuleContext(G, registry, data_model, workflows, workflow_id)
    problems: list[Problem] = []
    for rule in _RULES:
        problems.extend(rule(ctx))
    return sorted(problems, key=lambda p: p.severity != Severity.ERROR)


def validate_data(
    data: Any, data_model: type[BaseModel] | None, *, max_payload: int = DEFAULT_MAX_PAYLOAD
) -> list[Problem]:
    """Problems of a data document: not JSON, not fitting its model, or over the size limit."""
    problems: list[Problem] = []
    document = data
    if data_model is not None or isinstance(data, BaseModel):
        # before pydantic, which gives up on deep values with other words (json_problem below
        # sees plain data)
        problem = depth_problem(data, "data")
        if problem is not None:
            return [_not_storable(problem)]
    if data_model is not None:
        try:
            document = data_model.model_validate(
                data.model_dump() if isinstance(data, BaseModel) else data
            ).model_dump(mode="json")
        except ValidationError as exc:
            for err in exc.errors():
                where = ".".join(str(p) for p in err["loc"]) or "document"
                problems.append(
                    Problem(
                        code="bad-data",
                        message=f"data field {where!r}: {err['msg']}; "
                        f"give a document that fits {data_model.__name__}",
                    )
                )
            return problems
    elif isinstance(data, BaseModel):
        document = data.model_dump(mode="json")
    problem = json_problem(document, "data")
    if problem is not None:
        return [_not_storable(problem)]
    try:
        size = len(json.dumps(document, allow_nan=False).encode())
    except (TypeError, ValueError) as exc:
        return [
            Problem(
                code="bad-data",
                message=f"data is not JSON ({exc}); use dicts, lists, strings, numbers, "
                "booleans and null, or declare a pydantic model that converts it",
            )
        ]
    if size > max_payload:
        problems.append(
            Problem(
                code="payload-too-large",
                message=f"data is {size:,} bytes of JSON, over the {max_payload:,}-byte limit; "
                "store large content elsewhere and keep a reference in the document",
            )
        )
    return problems


def _not_storable(problem: str) -> Problem:
    return Problem(
        code="bad-data",
        message=f"data is not JSON or cannot be stored ({problem}); use dicts, lists, "
        "strings, numbers, booleans and null, or declare a pydantic model that converts it",
    )


# --- rules ------------------------------------------------------------------------------------


def _rule_nodes(ctx: RuleContext) -> Iterator[Problem]:
    for n, attrs in ctx.G.nodes(data=True):
        if keys.KIND not in attrs:
            ctx.broken.add(n)
            sources = [u for u, _ in ctx.G.in_edges(n)]
            hint = f" (an edge from {sources[0]!r} points at it)" if sources else ""
            yield Problem(
                code="undefined-node",
                node=n,
                message=f"node {n!r} is not defined: it has no kind{hint}; add it with "
                f"G.add_node({n!r}, kind=...) or point the edge at an existing node",
            )
            continue
        try:
            ctx.nodes[n] = Node.model_validate(attrs)
        except ValidationError as exc:
            ctx.broken.add(n)
            kind = attrs.get(keys.KIND)
            unknown = not isinstance(kind, str) or kind not in {k.value for k in NodeKind}
            detail = "; ".join(field_errors(exc, Node))
            yield Problem(
                code="unknown-kind" if unknown else "bad-config",
                node=n,
                message=(
                    f"kind {reprlib.repr(kind)} is not a node kind; use one of "
                    f"{', '.join(k.value for k in NodeKind)}"
                    if unknown
                    else f"{detail}; fix the node's attributes"
                ),
            )


def _rule_start(ctx: RuleContext) -> Iterator[Problem]:
    starts = _starts(ctx)
    if not starts:
        yield Problem(
            code="no-start",
            message="the workflow has no start node; begin it with start_with(...) or add "
            "a node with kind='start'",
        )
    for extra in starts[1:]:
        yield Problem(
            code="several-starts",
            node=extra,
            message=f"a second start node (the first is {starts[0]!r}); keep exactly one",
        )
    for s in starts:
        for u, _, k in ctx.G.in_edges(s, keys=True):
            yield Problem(
                code="edge-into-start",
                node=u,
                edge=(u, s, k),
                message=f"an edge leads back into the start node {s!r}; loop to the first "
                "real step instead",
            )


def _rule_outlets(ctx: RuleContext) -> Iterator[Problem]:
    for u, v, k in ctx.G.edges(keys=True):
        node = ctx.nodes.get(u)
        if node is None:
            continue
        if k not in node.outlets:
            declared = ", ".join(node.outlets) or "none"
            yield Problem(
                code="unknown-outlet",
                node=u,
                edge=(u, v, k),
                message=f"a {node.kind.value} node has no outlet {k!r} (it declares: "
                f"{declared}); key the edge by one of those",
            )
    seen: dict[tuple[str, str], str] = {}
    for u, v, k in ctx.G.edges(keys=True):
        if (u, k) in seen and u in ctx.nodes:
            yield Problem(
                code="duplicate-outlet",
                node=u,
                edge=(u, v, k),
                message=f"outlet {k!r} already leads to {seen[(u, k)]!r}; an outlet leads to one "
                "node: use a parallel step to run several",
            )
        seen.setdefault((u, k), v)
    for n, node, outlet, rule in _open_outlets(ctx):
        if rule is Unconnected.REFUSED:
            yield Problem(
                code="dangling-branch",
                node=n,
                message=f"branch {outlet!r} of {node.kind.value} {n!r} leads nowhere; "
                "connect it to a step that reaches the join",
            )


def _open_outlets(ctx: RuleContext) -> Iterator[tuple[str, Node, str, Unconnected]]:
    """Every declared outlet of a valid node that has no edge, with what that means."""
    for n, node in ctx.nodes.items():
        used = {k for _, _, k in ctx.G.out_edges(n, keys=True)}
        for outlet in node.outlets:
            if outlet not in used:
                yield n, node, outlet, node.spec.unconnected(outlet)


def _rule_open_decisions(ctx: RuleContext) -> Iterator[Problem]:
    """A branch with no edge ends the run's path there (a decision's): allowed, but said out
    loud."""
    for n, node, outlet, rule in _open_outlets(ctx):
        if rule is Unconnected.END_RECORDED:
            yield Problem(
                code="open-decision-branch",
                node=n,
                severity=Severity.WARNING,
                message=f"branch {outlet!r} of {node.kind.value} {n!r} has no edge: a run that "
                "takes it ends this path there (recorded as path.ended); connect it to the step "
                "that should follow, or to an end node to end the path on purpose",
            )


def _rule_joins(ctx: RuleContext) -> Iterator[Problem]:
    gathered = {
        n: node.config.fork
        for n, node in ctx.nodes.items()
        if node.spec.gathers
        and (target := ctx.nodes.get(node.config.fork)) is not None
        and target.spec.opens_frame
    }
    reaches = _reachability(ctx.G, set(gathered.values()), gathered)
    joins: dict[str, list[str]] = {}
    for n, node in ctx.nodes.items():
        if not node.spec.gathers:
            continue
        fork = node.config.fork
        if n not in gathered:
            yield Problem(
                code="join-without-fork",
                node=n,
                message=f"join {n!r} gathers {fork!r}, which is not a parallel or for_each "
                "node; set config.fork to the node whose branches it gathers",
            )
            continue
        joins.setdefault(fork, []).append(n)
        if not reaches(fork, n):
            yield Problem(
                code="join-unreachable",
                node=n,
                message=f"join {n!r} cannot be reached from {fork!r}, the fork it gathers; "
                "connect the branches to it",
            )
    for n, node in ctx.nodes.items():
        if node.spec.opens_frame and len(joins.get(n, [])) != 1:
            found = joins.get(n, [])
            yield Problem(
                code="join-missing" if not found else "join-several",
                node=n,
                message=f"{node.kind.value} {n!r} needs exactly one join, found "
                f"{len(found)}{' (' + listed(found) + ')' if found else ''}; "
                "add one join node with config.fork set to it",
            )


def _reachability(
    G: nx.MultiDiGraph, sources: Collection[Hashable], targets: Collection[Hashable]
) -> Callable[[Hashable, Hashable], bool]:
    """``reaches(source, target)``: is there a path from ``source`` to ``target`` in ``G``?

    One pass over the graph's strongly connected components in topological order, each
    carrying the set of sources that reach it as the bits of an integer; a component's set is
    dropped once all its successors have read it, and kept only for the targets' components.
    Linear in nodes and edges (each bit operation costs ``len(sources) / 64`` machine words),
    instead of one search per target.
    """
    if not sources or not targets:
        return lambda source, target: False
    bit = {s: 1 << i for i, s in enumerate(sources)}
    dag = nx.condensation(G)
    component = dag.graph["mapping"]
    own = dict.fromkeys(dag, 0)
    for s, b in bit.items():
        own[component[s]] |= b
    wanted = {component[t] for t in targets}
    waiting = {c: dag.out_degree(c) for c in dag}
    live: dict[int, int] = {}
    reached: dict[int, int] = {}
    for c in nx.topological_sort(dag):
        acc = own[c]
        for p in dag.predecessors(c):
            acc |= live[p]
            waiting[p] -= 1
            if not waiting[p]:
                del live[p]
        if waiting[c]:
            live[c] = acc
        if c in wanted:
            reached[c] = acc
    return lambda source, target: bool(reached[component[target]] & bit[source])


def _rule_cycles(ctx: RuleContext) -> Iterator[Problem]:
    order: dict[Any, int] | None = None
    for component in nx.strongly_connected_components(ctx.G):
        if len(component) == 1:
            (only,) = component
            if not ctx.G.has_edge(only, only):
                continue
            members = [only]
        else:
            if order is None:
                order = {n: i for i, n in enumerate(ctx.G.nodes)}
            members = sorted(component, key=order.__getitem__)
        bounded = [n for n in members if n in ctx.nodes and ctx.nodes[n].policy.max_visits > 1]
        if not bounded:
            yield Problem(
                code="unbounded-cycle",
                node=members[0],
                message=f"the loop through {listed(members)} cannot go round: every node in "
                "it allows one visit; set policy max_visits on one of them to bound the loop",
            )


def _rule_activities(ctx: RuleContext) -> Iterator[Problem]:
    if ctx.registry is None:
        return
    for n, node in ctx.nodes.items():
        for role, name in (("activity", node.activity), ("compensation", node.compensation)):
            if name and name not in ctx.registry:
                yield Problem(
                    code="unknown-activity",
                    node=n,
                    message=f"{role} {name!r} is not registered; decorate a function with "
                    f"@wf.activity({name!r}) before validating",
                )


def _rule_sagas(ctx: RuleContext) -> Iterator[Problem]:
    try:
        sagas = saga_specs(ctx.G)
    except (ValidationError, ValueError) as exc:
        yield Problem(code="bad-saga", message=f"G.graph['sagas'] is malformed: {exc}")
        return
    nesting = saga_nesting(sagas)
    for sid, spec in sagas.items():
        if spec.parent is not None and spec.parent not in sagas:
            yield Problem(
                code="bad-saga",
                message=f"saga {sid!r} names an unknown parent saga {spec.parent!r}",
            )
        ring = nesting.cycle.get(sid)
        if ring is not None:
            yield Problem(
                code="bad-saga",
                message=f"saga {sid!r} is nested in itself through its parents "
                f"({listed([*ring, ring[0]], ' -> ')}); make the parents form a tree",
            )
    members: dict[str, str] = {}
    for n, node in ctx.nodes.items():
        if node.saga is None:
            continue
        members.setdefault(node.saga, n)
        if node.saga not in sagas:
            yield Problem(
                code="bad-saga",
                node=n,
                message=f"node is in saga {node.saga!r}, which G.graph['sagas'] does not "
                "declare; declare it or clear the node's saga",
            )
    for sid, spec in sagas.items():
        if spec.parent is not None and spec.policy is None:
            yield Problem(
                code="nested-saga-policy",
                node=members.get(sid),
                message=f"saga {sid!r} is nested in {spec.parent!r} but has no policy; say "
                "what an outer unwind does with it: policy='unwind' or policy='keep'",
            )
    for sid, depth in nesting.depth.items():
        if depth == MAX_SAGA_DEPTH + 1:  # once per saga that crosses the limit, not per level
            yield Problem(
                code="saga-too-deep",
                node=members.get(sid),
                message=f"saga {sid!r} is nested {depth} deep (in {sagas[sid].parent!r}); "
                f"sagas nest at most {MAX_SAGA_DEPTH} deep: merge the inner sagas into "
                "their parent",
            )


def _looks_like_html(text: object) -> bool:
    """True for text Graphviz would take as an HTML-like label: ``<...>``."""
    return isinstance(text, str) and text.strip().startswith("<") and text.strip().endswith(">")


def _html_label(text: str) -> str:
    shown = text if len(text) <= 60 else text[:59] + "…"
    return (
        f"label {shown!r} looks like a Graphviz HTML-like label; wfkit draws every label as "
        "plain text (never as HTML, links or images), so it shows literally, tags and all; "
        "write the label as plain text"
    )


def _rule_labels(ctx: RuleContext) -> Iterator[Problem]:
    for n, node in ctx.nodes.items():
        if node.label is not None and _looks_like_html(node.label):
            yield Problem(
                code="html-label",
                node=n,
                severity=Severity.WARNING,
                message=_html_label(node.label),
            )
    for u, v, k, label in ctx.G.edges(keys=True, data=keys.EDGE_LABEL):
        if _looks_like_html(label):
            yield Problem(
                code="html-label",
                node=u,
                edge=(u, v, k),
                severity=Severity.WARNING,
                message=_html_label(label),
            )
    try:
        sagas: dict[str, SagaSpec] = saga_specs(ctx.G)
    except (ValidationError, ValueError):
        return  # reported by _rule_sagas
    for sid, spec in sagas.items():
        if spec.label is not None and _looks_like_html(spec.label):
            yield Problem(
                code="html-label",
                severity=Severity.WARNING,
                message=f"saga {sid!r}: {_html_label(spec.label)}",
            )


def _rule_expressions(ctx: RuleContext) -> Iterator[Problem]:
    for n, node in ctx.nodes.items():
        for source in node.spec.expressions_of(node.config):
            try:
                parsed = parse_expression(source)
            except ExpressionError as exc:
                yield Problem(code=exc.code, node=n, message=str(exc))
                continue
            unknown = check_names(parsed, ctx.fields)
            if unknown:
                known = ", ".join(sorted(ctx.fields or ())) or "none"
                yield Problem(
                    code="unknown-name",
                    node=n,
                    message=f"expression {source!r} reads {', '.join(map(repr, unknown))}, "
                    f"which the data model does not have (fields: {known}); fix the name or "
                    "add the field to the model",
                )


def _rule_kinds(ctx: RuleContext) -> Iterator[Problem]:
    """The rules of each valid node's own kind (a wait's binding, a call's target)."""
    for n, node in ctx.nodes.items():
        if node.spec.rules is not None:
            yield from node.spec.rules(ctx, n, node)


def _starts(ctx: RuleContext) -> list[str]:
    return [n for n, node in ctx.nodes.items() if node.spec.entry]


def _rule_reachable(ctx: RuleContext) -> Iterator[Problem]:
    starts = _starts(ctx)
    if not starts:
        return
    seen: set[str] = set()
    for s in starts:
        seen |= nx.descendants(ctx.G, s) | {s}
    for n in ctx.G.nodes:
        if n not in seen and n not in ctx.broken:
            yield Problem(
                code="unreachable",
                node=n,
                severity=Severity.WARNING,
                message="no path from the start reaches this node; connect it or remove it",
            )


def _bad_text(value: Any) -> str | None:
    """The first text (key or value, at any depth) that no store can hold, and why."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return f"{reprlib.repr(item)} {problem}"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
    return None


def _rule_text(ctx: RuleContext) -> Iterator[Problem]:
    """Definitions are stored as JSON text: a NUL or a lone surrogate anywhere cannot be."""
    hint = "; remove the character (definitions are stored as text)"
    bad = _bad_text(ctx.G.graph)
    if bad is not None:
        yield Problem(code="bad-text", message=f"the workflow's attributes: {bad}{hint}")
    for n, attrs in ctx.G.nodes(data=True):
        bad = _bad_text([n, attrs])
        if bad is not None:
            yield Problem(code="bad-text", node=n, message=f"node {reprlib.repr(n)}: {bad}{hint}")
    for u, v, k, attrs in ctx.G.edges(keys=True, data=True):
        bad = _bad_text([k, attrs])
        if bad is not None:
            yield Problem(
                code="bad-text", node=u, edge=(u, v, k), message=f"edge {u!r} -> {v!r}: {bad}{hint}"
            )


def _rule_run_retry(ctx: RuleContext) -> Iterator[Problem]:
    problem = run_retry_problem(ctx.G)
    if problem is not None:
        yield Problem(code="bad-run-retry", message=problem)


_RULES: tuple[Callable[[RuleContext], Iterable[Problem]], ...] = (
    _rule_text,
    _rule_run_retry,
    _rule_nodes,
    _rule_start,
    _rule_outlets,
    _rule_open_decisions,
    _rule_joins,
    _rule_cycles,
    _rule_activities,
    _rule_sagas,
    _rule_expressions,
    _rule_kinds,
    _rule_reachable,
    _rule_labels,
)
