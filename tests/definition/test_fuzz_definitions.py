"""Fuzzing the way in: any JSON document (or graph) is loaded, validated and drawn, or refused.

Random documents — shaped like workflows or not, with random unicode (lone surrogates and NUL
included), huge integers, NaN and infinities, and nesting deeper than Python's recursion limit
— go through ``Workflow.from_json``, ``Workflow.from_graph``, ``validate()``, ``to_dot()``,
``to_json()``, ``content_hash`` and, for those that validate, ``to_svg()`` through the real
``dot``. Each must succeed or raise one of wfkit's own errors with a message: never a
``TypeError``, ``ValueError``, ``RecursionError`` or ``UnicodeEncodeError``, and never hang
(the sizes are bounded so that an example takes milliseconds).
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from typing import Any

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wfkit as wf
from wfkit.definition.kinds import NodeKind
from wfkit.definition.values import text_problem
from wfkit.examples import all_workflows

pytestmark = pytest.mark.skipif(
    shutil.which("dot") is None, reason="the Graphviz 'dot' program is not installed"
)

FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- values -------------------------------------------------------------------------------------

RAW = {
    "@@BIGINT@@": "9" * 5000,  # past Python's 4,300-digit limit for int("...")
    "@@NEGBIG@@": "-" + "1" * 4400,
    "@@DEEP50@@": "[" * 50 + "]" * 50,
    "@@DEEP900@@": '{"a":' * 900 + "0" + "}" * 900,
    "@@DEEP5000@@": "[" * 5000 + "]" * 5000,  # past the recursion limit of json.loads
}
"""Placeholders replaced in the JSON text by what ``json.dumps`` cannot write itself."""

ODD_TEXT = [
    "\ud800",
    "a\udfffb",
    "\x00",
    "nul\x00in",
    "\x01\x1b\x7f",
    "\ufffe\uffff",
    '<<TABLE HREF="javascript:alert(1)"><TR><TD>x</TD></TR></TABLE>>',
    '<IMG SRC="/etc/hostname"/>',
    '"',
    "\\",
    "x\\",
    "]{}->;",
    "line\nbreak\r\n",
    "日本語 ✓ \U0001f600",
    "start",
    "a",
]


def rarely(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in ``one_in`` draws (False is the simple case hypothesis starts from)."""
    return draw(st.integers(1, one_in)) == one_in


@st.composite
def texts(draw: st.DrawFn, raw: bool = True) -> str:
    """Any unicode (lone surrogates included), often odd on purpose, rarely a RAW marker."""
    if raw and rarely(draw, 300):
        return draw(st.sampled_from(list(RAW)))
    if rarely(draw, 3):
        return draw(st.sampled_from(ODD_TEXT))
    return draw(st.text(st.characters(codec=None, categories=None), max_size=8))


numbers = (
    st.integers(-5, 5)
    | st.integers()
    | st.sampled_from([10**100, -(10**300), 2**63, 0, 1, -1])
    | st.floats(allow_nan=True, allow_infinity=True)
)
scalars = st.none() | st.booleans() | numbers | texts()
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(texts(raw=False), inner, max_size=3)
    ),
    max_leaves=8,
)

kinds = st.sampled_from([k.value for k in NodeKind]) | json_values


@st.composite
def ids(draw: st.DrawFn) -> Any:
    """Mostly names that connect to each other, now and then any scalar (None included)."""
    if rarely(draw, 5):
        return draw(scalars)
    return draw(st.sampled_from(["start", "a", "b", "p", "j", "end", "s1"]))


durations = st.sampled_from(["1s", "7d", "36500d", "3000000d", "soon", -1, 1e308]) | json_values
config_values = st.fixed_dictionaries(
    {},
    optional={
        "expression": st.sampled_from(["x > 1", "().__class__", "9**9**9", "x >"]) | json_values,
        "branches": st.lists(st.sampled_from(["true", "false", "x"]) | texts(), max_size=3),
        "fork": ids(),
        "mode": st.sampled_from(["all", "any", "at_least"]) | json_values,
        "count": numbers,
        "items": st.sampled_from(["items", "[1, 2]"]) | json_values,
        "duration": durations,
        "signal": texts(),
        "timeout": durations,
        "bind": json_values,
        "payload": st.sampled_from(["this:x", "os:system", "m:Model"]) | json_values,
    },
)
policies = st.fixed_dictionaries(
    {},
    optional={
        "max_attempts": numbers,
        "retry_delay": durations,
        "attempt_timeout": durations,
        "max_visits": numbers,
        "backoff": numbers,
        "on_failure": st.sampled_from(["retry", "compensate"]) | json_values,
    },
)


@st.composite
def nodes(draw: st.DrawFn) -> Any:
    if rarely(draw, 16):
        return draw(json_values)  # not even a mapping
    node: dict[str, Any] = {"id": draw(ids()), "kind": draw(kinds)}
    if rarely(draw, 10):
        del node["kind"]
    optional = {
        "activity": st.sampled_from(["a", "b"]) | texts(),
        "config": config_values | json_values,
        "policy": policies | json_values,
        "label": texts() | json_values,
        "saga": st.sampled_from(["s1", "s2"]) | json_values,
        "compensation": texts() | json_values,
        "extra": json_values,
    }
    for key, values in optional.items():
        if rarely(draw, 3):
            node[key] = draw(values)
    return node


@st.composite
def edges(draw: st.DrawFn) -> Any:
    if rarely(draw, 16):
        return draw(json_values)
    edge = {
        "source": draw(ids()),
        "target": draw(ids()),
        "outlet": draw(st.sampled_from(["next", "true", "x", "each", "completed"]) | scalars),
    }
    if rarely(draw, 2):
        edge["label"] = draw(texts() | json_values)
    if rarely(draw, 6):
        del edge[draw(st.sampled_from(["source", "target", "outlet"]))]
    return edge


saga_declarations = st.dictionaries(
    st.sampled_from(["s1", "s2", "s3"]) | texts(raw=False),
    st.fixed_dictionaries(
        {},
        optional={
            "parent": st.sampled_from(["s1", "s2", "s3", "ghost"]) | json_values,
            "policy": st.sampled_from(["unwind", "keep", "forget"]),
            "label": texts() | json_values,
        },
    )
    | json_values,
    max_size=3,
)


def maybe(draw: st.DrawFn, value: Any) -> Any:
    """``value``, or now and then a random JSON value in its place."""
    return draw(json_values) if rarely(draw, 13) else value


@st.composite
def documents(draw: st.DrawFn) -> str:
    """JSON text, usually shaped like a workflow, sometimes anything at all."""
    if rarely(draw, 11):
        data: Any = draw(json_values)
    else:
        graph = {
            "format": maybe(draw, "wfkit.graph/1"),
            "graph": maybe(draw, {"sagas": draw(saga_declarations)} if rarely(draw, 2) else {}),
            "nodes": maybe(draw, draw(st.lists(nodes(), max_size=7))),
            "edges": maybe(draw, draw(st.lists(edges(), max_size=8))),
        }
        data = {
            "format": maybe(draw, "wfkit.workflow/1"),
            "id": maybe(draw, draw(st.sampled_from(["w", "flow"]) | texts())),
            "version": maybe(draw, draw(st.integers(1, 3))),
            "data_model": draw(
                st.none() | st.sampled_from(["this:x", "wfkit.examples.fulfilment:OrderData"])
            )
            if not rarely(draw, 4)
            else draw(json_values),
            "graph": maybe(draw, graph),
        }
        for key in ("format", "id", "version", "graph"):
            if rarely(draw, 30):
                data.pop(key)
    text = json.dumps(data)  # NaN and Infinity are written as JSON's extensions
    for marker, raw in RAW.items():
        text = text.replace(json.dumps(marker), raw)
    return text


# --- properties ---------------------------------------------------------------------------------


def exercise(flow: wf.Workflow) -> None:
    """Everything a loaded workflow offers: each succeeds or raises a WfkitError."""
    problems = flow.validate(registry=None)
    assert all(isinstance(p, wf.Problem) and p.message for p in problems)
    source = flow.to_dot()
    assert source.startswith("digraph workflow {")
    flow.content_hash  # noqa: B018 - the hash must be computable
    flow.to_json()
    if not [p for p in problems if p.severity is wf.Severity.ERROR]:
        ET.fromstring(flow.to_svg())  # well-formed XML


def refused_properly(exc: wf.WfkitError) -> None:
    assert str(exc).strip(), f"{type(exc).__name__} without a message"


@FUZZ
@given(documents())
def test_any_json_document_loads_validates_and_draws_or_is_refused(text: str) -> None:
    try:
        flow = wf.Workflow.from_json(text)
    except wf.WfkitError as exc:
        refused_properly(exc)
        return
    exercise(flow)


@FUZZ
@given(st.lists(nodes(), max_size=7), st.lists(edges(), max_size=8), saga_declarations, ids())
def test_any_graph_built_by_hand_validates_and_draws(
    node_list: list[Any], edge_list: list[Any], sagas: dict[str, Any], workflow_id: Any
) -> None:
    # the same data put into a networkx graph directly, never through JSON
    G = nx.MultiDiGraph()
    G.graph["sagas"] = sagas
    for node in node_list:
        if isinstance(node, dict) and "id" in node:
            attrs = {k: v for k, v in node.items() if k != "id"}
            try:
                G.add_node(node["id"], **attrs)
            except (TypeError, ValueError):  # networkx itself refuses None and unhashable ids
                continue
    for edge in edge_list:
        if isinstance(edge, dict) and {"source", "target", "outlet"} <= edge.keys():
            try:
                G.add_edge(edge["source"], edge["target"], key=edge["outlet"])
            except (TypeError, ValueError):
                continue
    try:
        flow = wf.Workflow.from_graph(workflow_id, 1, G)
    except wf.WfkitError as exc:
        refused_properly(exc)
        return
    exercise(flow)


@pytest.mark.parametrize("raw", list(RAW.values()), ids=list(RAW))
def test_each_raw_value_in_each_place_is_refused_or_loaded(raw: str) -> None:
    base = wf.Workflow("w").start_with("a").to_data()
    places = ["id", "version", "data_model", "graph"]
    for place in places:
        text = json.dumps(base | {place: "@@RAW@@"}).replace('"@@RAW@@"', raw)
        try:
            exercise(wf.Workflow.from_json(text))
        except wf.WfkitError as exc:
            refused_properly(exc)
    for attr in ("kind", "label", "config", "saga", "compensation"):
        data = json.loads(json.dumps(base))
        data["graph"]["nodes"][1][attr] = "@@RAW@@"
        data["graph"]["edges"][0]["label"] = "@@RAW@@"
        text = json.dumps(data).replace('"@@RAW@@"', raw)
        try:
            exercise(wf.Workflow.from_json(text))
        except wf.WfkitError as exc:
            refused_properly(exc)


EXAMPLES = all_workflows()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(EXAMPLES)), st.data())
def test_valid_workflows_carrying_odd_text_still_validate_and_draw(
    name: str, data: st.DataObject
) -> None:
    # the examples are valid: odd ids, labels and names change what is drawn, not validity
    base = EXAMPLES[name]
    G = base.copy().graph
    fresh = data.draw(st.lists(texts(raw=False), min_size=len(G), max_size=len(G), unique=True))
    mapping = dict(zip(G.nodes, fresh, strict=True))
    G = nx.relabel_nodes(G, mapping)
    for _, attrs in G.nodes(data=True):
        if attrs.get("kind") == "join":
            attrs["config"] = {**attrs["config"], "fork": mapping[attrs["config"]["fork"]]}
        if data.draw(st.booleans()):
            attrs["label"] = data.draw(texts(raw=False))
    for _, _, attrs in G.edges(data=True):
        if data.draw(st.booleans()):
            attrs["label"] = data.draw(texts(raw=False))
    for spec in (G.graph.get("sagas") or {}).values():
        spec["label"] = data.draw(texts(raw=False))
    # a workflow id must be storable text (the constructor says so); odd text elsewhere is
    # reported as `bad-text` when no store can hold it, and changes nothing else
    workflow_id = data.draw(texts(raw=False).filter(lambda t: t.strip() and not text_problem(t)))
    flow = wf.Workflow.from_graph(workflow_id, 1, G, data=base.data_model)
    back = wf.Workflow.from_json(flow.to_json())
    errors = [p for p in back.validate(registry=None) if p.severity is wf.Severity.ERROR]
    assert [p for p in errors if p.code != "bad-text"] == []
    exercise(back)
