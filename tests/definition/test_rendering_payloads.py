"""Text from a definition is data: it reaches the picture as plain text, never as markup.

A label such as ``<<TABLE HREF="javascript:...">...>>`` used to reach Graphviz as an HTML-like
label and came out as a clickable ``javascript:`` link; ``<IMG SRC=...>`` embedded a local file.
Every text below goes into every place a definition can put text (node ids, labels, activity
names, compensations, decisions, signal names, outlets, edge labels, saga ids and labels, the
workflow id in the title) and the picture is drawn by the real ``dot``.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET

import networkx as nx
import pytest

import wfkit as wf
from wfkit.definition import rendering
from wfkit.definition.values import text_problem

pytestmark = pytest.mark.skipif(
    shutil.which("dot") is None, reason="the Graphviz 'dot' program is not installed"
)

SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"

SCRIPT_TABLE = '<<TABLE HREF="javascript:alert(document.domain)"><TR><TD>x</TD></TR></TABLE>>'
IMAGE = '<IMG SRC="/abs/file.png"/>'
PAYLOADS = [
    SCRIPT_TABLE,
    IMAGE,
    '<<IMG SRC="/etc/hostname"/>>',
    '<<TABLE><TR><TD><IMG SRC="/etc/hostname"/></TD></TR></TABLE>>',
    '<<TABLE><TR><TD HREF="javascript:alert(1)" TARGET="_top">y</TD></TR></TABLE>>',
    'x" URL="javascript:alert(2)" target="_top',  # breaking out of a quoted string
    'x\\" href="javascript:alert(3)',  # ... after a backslash
    "x\\",  # a string ending in a backslash
    'quote " and backslash \\ and \\" together',
    "line one\nline two\r\nline three",
    "] [URL=javascript:alert(4)] {",
    '} n0 -> n1 [URL="javascript:alert(5)"] {',
    "a->b -- c; d=e",
    "\\N \\G \\L \\E \\T \\H \\l \\r \\n",
    "&lt;b&gt; &amp; &#106;avascript:",
    "ünïcødé ✓ 日本 \U0001f600 \u202etxt.exe",
    "controls \x01\x02\x07\x08\x0b\x0c\x1b\x7f\x85\x9f tab\tend",
    "noncharacters \ufffe \uffff and a lone surrogate \ud800",
]

INERT_ATTRIBUTES = {"id", "class", f"{XLINK}title"}
"""Attributes Graphviz fills with a definition's text that no browser follows or runs."""


def every_place(payload: str) -> wf.Workflow:
    """A workflow carrying ``payload`` in every place a definition can hold text."""
    G = nx.MultiDiGraph()
    G.graph["sagas"] = {
        payload: {"label": payload},
        "inner": {"parent": payload, "policy": "unwind", "label": payload},
    }
    G.add_node("start", kind="start", label=payload)
    G.add_node(payload, kind="action", activity=payload, compensation=payload, saga=payload)
    G.add_node("labelled", kind="action", activity="a", label=payload, saga="inner")
    G.add_node("decide", kind="decision", config={"expression": payload, "branches": [payload]})
    G.add_node("wait", kind="wait", config={"signal": payload, "timeout": "1d"})
    G.add_node("approve", kind="approval", label=payload)
    G.add_node("each", kind="for_each", config={"items": payload})
    G.add_node("broken", kind=payload)  # drawn as an undefined kind, with its problem
    G.add_edge("start", payload, key="next", label=payload)
    G.add_edge(payload, "labelled", key="next")
    G.add_edge("labelled", "decide", key="next", label=payload)
    G.add_edge("decide", "wait", key=payload, label=payload)
    G.add_edge("wait", "approve", key=payload)  # an unknown outlet: a problem on the edge
    G.add_edge("approve", "each", key="approved")
    G.add_edge("each", "broken", key="each")
    # a workflow id must be storable text; the picture still draws any other text
    return wf.Workflow.from_graph(payload if not text_problem(payload) else "w", 1, G)


def attribute_names(source: str) -> set[str]:
    """Names of the attributes a DOT source sets, quoted strings left out."""
    unquoted = re.sub(r'"(?:[^"\\]|\\.)*"', '""', source, flags=re.DOTALL)
    assert "<" not in unquoted, "an HTML-like value reached the DOT source"
    return set(re.findall(r"([A-Za-z_]+)\s*=", unquoted))


DOT_ATTRIBUTES = {
    *("label", "xlabel", "tooltip", "id", "class", "shape", "style", "fillcolor", "color"),
    *("fontcolor", "fontname", "fontsize", "width", "height", "fixedsize", "penwidth"),
    *("arrowhead", "arrowsize", "rankdir", "labelloc", "nodesep", "ranksep", "forcelabels"),
    *("bgcolor", "rank"),
}


def executable_parts(root: ET.Element) -> str:
    """The SVG without its text and inert attributes: what a browser could follow or run."""
    parts = []
    for element in root.iter():
        parts.append(element.tag)
        for name, value in element.attrib.items():
            if name not in INERT_ATTRIBUTES:
                parts.append(f"{name}={value}")
    return "\n".join(parts)


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_definition_text_reaches_the_picture_as_plain_text_only(payload: str) -> None:
    flow = every_place(payload)
    source = flow.to_dot()
    assert attribute_names(source) <= DOT_ATTRIBUTES
    svg = flow.to_svg()
    root = ET.fromstring(svg)  # well-formed XML, control characters and all
    assert "<image" not in svg and not list(root.iter(f"{SVG}image"))
    for element in root.iter():
        for name in element.attrib:
            assert name.rpartition("}")[2] not in {"href", "src", "target"}, (element, name)
    assert not [a for a in root.iter(f"{SVG}a") if a.get(f"{XLINK}href") or a.get("href")]
    assert "javascript:" not in executable_parts(root).lower()


@pytest.mark.parametrize("payload", [SCRIPT_TABLE, IMAGE, 'say "hi" \\ ] { } -> done'])
def test_a_label_is_shown_as_the_characters_it_holds(payload: str) -> None:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node("step", kind="action", activity="a", label=payload)
    G.add_edge("start", "step", key="next")
    root = ET.fromstring(wf.Workflow.from_graph("w", 1, G).to_svg(problems=False))
    [node] = [g for g in root.iter(f"{SVG}g") if g.get("id") == "node-step"]
    assert "".join(t.text or "" for t in node.iter(f"{SVG}text")) == payload


def test_controls_and_lone_surrogates_become_replacement_characters() -> None:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node("step", kind="action", activity="a", label="a\x01b\ud800c")
    G.add_edge("start", "step", key="next")
    root = ET.fromstring(wf.Workflow.from_graph("w", 1, G).to_svg(problems=False))
    [node] = [g for g in root.iter(f"{SVG}g") if g.get("id") == "node-step"]
    assert [t.text for t in node.iter(f"{SVG}text")] == ["a\ufffdb\ufffdc"]


@pytest.mark.parametrize(
    ("where", "code_node"),
    [("node", "step"), ("edge", "start"), ("saga", None)],
)
def test_validation_warns_about_labels_that_look_like_html(
    where: str, code_node: str | None
) -> None:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node("step", kind="action", activity="a", label=SCRIPT_TABLE if where == "node" else "")
    G.add_edge("start", "step", key="next", **({"label": IMAGE} if where == "edge" else {}))
    if where == "saga":
        G.graph["sagas"] = {"s": {"label": " <b>bold</b> "}}
        G.nodes["step"]["saga"] = "s"
    [problem] = [p for p in wf.validate(G, registry=None) if p.code == "html-label"]
    assert problem.severity is wf.Severity.WARNING
    assert problem.node == code_node
    assert "plain text" in problem.message
    if where == "edge":
        assert problem.edge == ("start", "step", "next")


def test_labels_that_merely_contain_angle_brackets_are_fine() -> None:
    G = nx.MultiDiGraph()
    G.add_node("start", kind="start")
    G.add_node("step", kind="action", activity="a", label="total < 10 and n > 2")
    G.add_edge("start", "step", key="next")
    assert wf.validate(G, registry=None) == []


def test_dot_source_quotes_every_value_it_does_not_know_to_be_a_word() -> None:
    assert rendering._quote("LR") == "LR"
    assert rendering._quote("graph") == '"graph"'
    assert rendering._quote("<b>x</b>") == '"<b>x</b>"'
    assert rendering._quote('a"b\\') == '"a\\"b\\\\"'
    assert rendering._quote("R&D") == '"R&amp;D"'
