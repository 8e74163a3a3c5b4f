"""Drawing workflow graphs with Graphviz, in shapes a BPMN reader recognises.

Each kind's entry in :data:`~wfkit.definition.kinds.KINDS` says how its nodes look: start is a
thin circle and end a thick one; actions are rounded boxes; decisions diamonds; parallel, join
and for_each are bars; a delay is a double circle with a clock, a wait a double circle with an
envelope, an approval a box with a person, a call (BPMN call activity) a thick-bordered rounded
box marked ⊞. Saga scopes are clusters, compensations dashed boxes linked by dashed lines, and
problems red outlines whose tooltip is the message.

Node names in the DOT source are generated (``n0``, ``n1``...), so any id renders; the real id is
the SVG element's ``id`` (``node-<id>``) and its tooltip. Output is deterministic.

Everything a definition says is data, drawn as plain text: the DOT source is written here (not
by the graphviz package), every value is a double-quoted DOT string with backslashes, quotes and
``&`` escaped and characters XML cannot hold replaced by U+FFFD, and attribute names are fixed
by this module. So a label such as ``<<TABLE HREF="javascript:...">...>`` is shown as those
characters: no HTML-like label, link (URL, href, target) or image ever reaches Graphviz from a
definition. Validation warns about such labels (``html-label``). Writing the source is linear
in the size of the graph; sagas nested deeper than ``MAX_SAGA_DEPTH`` are drawn inside their
deepest allowed ancestor. :func:`to_svg` and :func:`render` refuse graphs of more than
:data:`MAX_DRAWN_ELEMENTS` nodes and edges and stop ``dot`` after :data:`DOT_TIMEOUT` seconds.
"""

from __future__ import annotations

import re
import reprlib
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import networkx as nx
from pydantic import ValidationError

from wfkit.definition import keys
from wfkit.definition.graph import MAX_SAGA_DEPTH, SagaSpec, saga_nesting, saga_specs
from wfkit.definition.kind_spec import clip
from wfkit.definition.kinds import Node
from wfkit.definition.problems import Problem, Severity
from wfkit.errors import WfkitError

__all__ = [
    "DOT_TIMEOUT",
    "MAX_DRAWN_ELEMENTS",
    "RenderingUnavailable",
    "render",
    "to_dot",
    "to_svg",
]

FONT = "DejaVu Sans"
PROBLEM_COLOUR = "#cc0000"
WARNING_COLOUR = "#e08a00"
_OUTLET_STYLE = {
    "failed": {"color": PROBLEM_COLOUR, "fontcolor": PROBLEM_COLOUR},
    "fallback": {"color": "#6a1b9a", "fontcolor": "#6a1b9a", "style": "dashed"},
    "partial": {"color": WARNING_COLOUR, "fontcolor": WARNING_COLOUR},
    "elapsed": {"color": WARNING_COLOUR, "fontcolor": WARNING_COLOUR, "style": "dashed"},
    "expired": {"color": WARNING_COLOUR, "fontcolor": WARNING_COLOUR, "style": "dashed"},
    "rejected": {"color": PROBLEM_COLOUR, "fontcolor": PROBLEM_COLOUR},
}


MAX_DRAWN_ELEMENTS = 10_000
"""Most nodes plus edges :func:`to_svg` and :func:`render` hand to Graphviz."""
DOT_TIMEOUT = 60.0
"""Seconds ``dot`` may take to lay a picture out before it is stopped (a tangle of edges can
take it minutes and gigabytes even under ``MAX_DRAWN_ELEMENTS``)."""


class RenderingUnavailable(WfkitError):
    """No picture can be made: ``dot`` is not installed, failed, or the graph is too large."""


# --- DOT text -----------------------------------------------------------------------------------

_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|-?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)")
_KEYWORDS = frozenset({"node", "edge", "graph", "digraph", "subgraph", "strict"})
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
"""Characters an SVG (XML 1.0) cannot hold, or should not: controls, lone surrogates."""


def _plain(value: object) -> str:
    """``value`` as text Graphviz and XML take literally; unusable characters become U+FFFD."""
    text = value if isinstance(value, str) else str(value)
    return _NOT_XML.sub("\ufffd", text.replace("\r\n", "\n").replace("\r", "\n"))


def _quote(value: object, *, tooltip: bool = False) -> str:
    """One DOT attribute value: a plain word, or a double-quoted string escaped for DOT.

    Never an HTML-like ``<...>`` value. Backslashes are doubled so that Graphviz's escapes
    (``\\N``, ``\\G``, ``\\l``...) cannot be written by a definition, ``&`` is written as
    ``&amp;`` so that entities stay literal, and quotes are escaped so that a value cannot end
    its string early.
    """
    text = _plain(value)
    if _BARE.fullmatch(text) and text.lower() not in _KEYWORDS:
        return text
    text = text.replace("\\", "\\\\")
    if tooltip:  # dot 2.43 expands escapes in tooltips twice
        text = text.replace("\\", "\\\\")
    return '"' + text.replace("&", "&amp;").replace('"', '\\"') + '"'


def _attrs(attrs: Mapping[str, object], *, label_first: bool = True) -> str:
    """``[label=... a=... b=...]``: the label first, then the rest by name (names are ours)."""
    items = sorted(attrs.items(), key=lambda kv: (label_first and kv[0] != "label", kv[0]))
    return "[" + " ".join(f"{k}={_quote(v, tooltip=k == 'tooltip')}" for k, v in items) + "]"


def _show(value: object) -> str:
    """A graph value as text: strings as they are, anything else as a short repr."""
    return value if isinstance(value, str) else reprlib.repr(value)


def _short(value: object, limit: int = 28) -> str:
    return clip(_show(value), limit)


def _node_style(n: str, node: Node) -> dict[str, str]:
    drawing = node.spec.drawing
    return {**drawing.attrs, **drawing.text(n, node)}


def _edge_label(outlet: str, label: str | None) -> str:
    if label and label != outlet:
        return f"{outlet}: {_short(label)}"
    return "" if outlet == "next" else outlet


def to_dot(
    G: nx.MultiDiGraph,
    problems: Iterable[Problem] = (),
    *,
    title: str | None = None,
    status: Mapping[str, str] | None = None,
) -> str:
    """DOT source for ``G`` with ``problems`` drawn on their nodes and edges.

    ``status`` optionally maps node ids to a fill colour (used by run monitors). Every text
    from the graph is written as a plain, escaped DOT string (see the module's notes).
    """
    names = {n: f"n{i}" for i, n in enumerate(G.nodes)}
    by_node: dict[Any, list[Problem]] = defaultdict(list)
    by_edge: dict[tuple[Any, Any, Any], list[Problem]] = defaultdict(list)
    for p in problems:
        if p.edge is not None:
            by_edge[p.edge].append(p)
        elif p.node is not None and p.node in names:
            by_node[p.node].append(p)
    clusters = _Clusters(G)
    for n, attrs in G.nodes(data=True):
        style, tooltip = _style_for(n, attrs)
        if n in by_node:
            style = _problem_style(style, by_node[n])
            tooltip = "\n".join(str(p) for p in by_node[n])
        if status and n in status:
            style = {**style, "fillcolor": status[n], "style": _filled(style.get("style", ""))}
        body = clusters.body_for(attrs.get(keys.SAGA))
        body.append(f"{names[n]} {_attrs({'id': f'node-{n}', 'tooltip': tooltip, **style})}")
        if attrs.get(keys.COMPENSATION):
            comp = f"{names[n]}c"
            undo = {
                "id": f"compensation-{n}",
                "label": f"⟲ {_show(attrs[keys.COMPENSATION])}",
                "shape": "box",
                "style": "rounded,dashed",
                "color": "#8e24aa",
                "fontcolor": "#6a1b9a",
                "fontsize": "10",
                "tooltip": f"compensation of {n}: {_show(attrs[keys.COMPENSATION])}",
            }
            body.append(f"{comp} {_attrs(undo)}")
            # same rank: the undo box sits under its step instead of pushing the flow aside
            body.append(f"{{rank=same; {names[n]}; {comp}}}")
    lines = [
        "digraph workflow {",
        "\tgraph "
        + _attrs(
            {
                "rankdir": "LR",
                "fontname": FONT,
                "labelloc": "t",
                "label": title or "",
                "nodesep": "0.35",
                "ranksep": "0.45",
                "forcelabels": "true",
                "bgcolor": "white",
            },
            label_first=False,
        ),
        f"\tnode {_attrs({'fontname': FONT, 'fontsize': '11'})}",
        "\tedge "
        + _attrs({"fontname": FONT, "fontsize": "9", "color": "#546e7a", "arrowsize": "0.7"}),
    ]
    lines.extend(clusters.lines())
    for n, comp_activity in G.nodes(data=keys.COMPENSATION):
        if comp_activity:
            link = {
                "style": "dashed",
                "color": "#8e24aa",
                "arrowhead": "open",
                "id": f"compensates-{n}",
                "tooltip": f"undo: {_show(comp_activity)}",
            }
            lines.append(f"\t{names[n]} -> {names[n]}c {_attrs(link)}")
    for u, v, k, attrs in G.edges(keys=True, data=True):
        edge_style: dict[str, str] = dict(_OUTLET_STYLE.get(str(k), {}))
        tooltip = f"{u} -[{k}]-> {v}"
        found = by_edge.get((u, v, k))
        if found:
            edge_style.update(color=PROBLEM_COLOUR, fontcolor=PROBLEM_COLOUR, penwidth="2")
            tooltip = "\n".join(str(p) for p in found)
        edge = {
            "label": _edge_label(str(k), attrs.get(keys.EDGE_LABEL)),
            "id": f"edge-{u}-{k}-{v}",
            "tooltip": tooltip,
            **edge_style,
        }
        lines.append(f"\t{names[u]} -> {names[v]} {_attrs(edge)}")
    lines.append("}")
    return "\n".join(lines) + "\n"


class _Clusters:
    """Saga scopes as nested DOT clusters, written in one pass however deep they nest.

    A saga nested deeper than ``MAX_SAGA_DEPTH`` is drawn inside its deepest allowed ancestor;
    a saga whose parent is unknown, or which is one of a cycle of parents, is drawn at the top.
    """

    def __init__(self, G: nx.MultiDiGraph) -> None:
        try:
            sagas: dict[str, SagaSpec] = saga_specs(G)
        except (ValidationError, ValueError):
            sagas = {}
        nesting = saga_nesting(sagas)
        self.top: list[str] = []
        self.bodies: dict[str, list[str]] = {}
        self.children: dict[str | None, list[str]] = defaultdict(list)
        self.home: dict[str, str] = {}  # saga -> the cluster its nodes are drawn in
        self.specs = sagas
        for sid, spec in sagas.items():  # parents may come after their children
            if nesting.depth[sid] > MAX_SAGA_DEPTH:
                continue
            self.bodies[sid] = []
            on_cycle = sid in nesting.cycle.get(sid, ())
            nested = spec.parent is not None and spec.parent in sagas and not on_cycle
            self.children[spec.parent if nested else None].append(sid)
        for sid in sorted(sagas, key=nesting.depth.__getitem__):  # ancestors first
            parent = sagas[sid].parent
            if sid in self.bodies or parent is None:  # (too deep means a known parent)
                self.home[sid] = sid
            else:
                self.home[sid] = self.home[parent]
        self.index = {sid: i for i, sid in enumerate(self.bodies)}

    def body_for(self, saga: object) -> list[str]:
        home = self.home.get(saga) if isinstance(saga, str) else None
        return self.top if home is None else self.bodies[home]

    def lines(self) -> Iterator[str]:
        """The top-level statements, then each cluster with its nodes and nested clusters."""
        yield from (f"\t{line}" for line in self.top)
        stack: list[tuple[int, Iterator[str]]] = [(1, iter(self.children[None]))]
        while stack:
            depth, pending = stack[-1]
            sid = next(pending, None)
            if sid is None:
                stack.pop()
                if stack:
                    yield "\t" * (depth - 1) + "}"
                continue
            indent, spec = "\t" * (depth + 1), self.specs[sid]
            policy = f" ({spec.policy.value})" if spec.policy else ""
            cluster = {
                "label": f"saga {spec.label or sid}{policy}",
                "style": "rounded,dashed",
                "color": "#8e24aa",
                "fontcolor": "#6a1b9a",
                "fontsize": "10",
                "id": f"saga-{sid}",
            }
            yield "\t" * depth + f"subgraph cluster_{self.index[sid]} {{"
            yield f"{indent}graph {_attrs(cluster, label_first=False)}"
            yield from (indent + line for line in self.bodies[sid])
            stack.append((depth + 1, iter(self.children[sid])))


def _filled(style: str) -> str:
    return style if "filled" in style else ",".join(s for s in (style, "filled") if s)


def _style_for(n: str, attrs: Mapping[str, Any]) -> tuple[dict[str, str], str]:
    try:
        node = Node.model_validate(attrs)
    except ValidationError:
        kind = attrs.get(keys.KIND, "undefined")
        label = f"{n}\n({_show(kind)})"
        return ({"shape": "box", "style": "dashed", "label": label}, n)
    style = _node_style(n, node)
    return style, f"{n} ({node.kind.value})"


def _problem_style(style: dict[str, str], found: list[Problem]) -> dict[str, str]:
    severe = any(p.severity == Severity.ERROR for p in found)
    colour = PROBLEM_COLOUR if severe else WARNING_COLOUR
    label = style.get("label", "")
    marked = f"⚠ {label}" if label else "⚠"
    out = {**style, "color": colour, "penwidth": "2.5", "fontcolor": colour}
    out["class"] = "problem error" if severe else "problem warning"
    if style.get("shape") in ("doublecircle", "circle") or not label:
        out["xlabel"] = f"⚠ {style.get('xlabel', '')}".strip()
    else:
        out["label"] = marked
    return out


def _pipe(source: str, fmt: str) -> bytes:
    """Run ``dot`` on ``source``; it is stopped after ``DOT_TIMEOUT`` seconds."""
    try:
        done = subprocess.run(
            ["dot", "-Kdot", f"-T{fmt}"],
            input=source.encode("utf-8"),
            capture_output=True,
            timeout=DOT_TIMEOUT,
            check=False,
        )
    except FileNotFoundError as exc:
        raise RenderingUnavailable(
            "the Graphviz 'dot' program is not installed, so the workflow cannot be drawn; "
            "install it with 'sudo apt-get install graphviz' (Debian/Ubuntu), "
            "'brew install graphviz' (macOS) or 'conda install -c conda-forge graphviz'"
        ) from exc
    except subprocess.TimeoutExpired:
        raise RenderingUnavailable(
            f"Graphviz took more than {DOT_TIMEOUT:g} s to lay the workflow out and was "
            "stopped; draw a smaller part of it (G.subgraph(...)), or run dot on to_dot()"
        ) from None
    if done.returncode != 0:
        error = done.stderr.decode("utf-8", "replace").strip()[:500]
        raise RenderingUnavailable(
            f"Graphviz failed to draw the workflow (exit {done.returncode}): {error}"
        )
    return done.stdout


def to_svg(
    G: nx.MultiDiGraph,
    problems: Iterable[Problem] = (),
    *,
    title: str | None = None,
    status: Mapping[str, str] | None = None,
) -> str:
    """The picture of ``G`` as SVG text."""
    _check_drawable(G)
    return _pipe(to_dot(G, problems, title=title, status=status), "svg").decode()


def _check_drawable(G: nx.MultiDiGraph) -> None:
    size = G.number_of_nodes() + G.number_of_edges()
    if size > MAX_DRAWN_ELEMENTS:
        raise RenderingUnavailable(
            f"the workflow has {G.number_of_nodes():,} nodes and {G.number_of_edges():,} edges, "
            f"more than the {MAX_DRAWN_ELEMENTS:,} Graphviz is given to draw at once; draw a "
            "part of it (G.subgraph(...)) or use to_dot() and run dot yourself"
        )


def render(
    G: nx.MultiDiGraph,
    path: str | Path,
    *,
    format: str | None = None,
    problems: Iterable[Problem] = (),
    title: str | None = None,
) -> Path:
    """Write the picture of ``G`` to ``path`` as svg, png or pdf (from the suffix by default)."""
    target = Path(path)
    fmt = (format or target.suffix.lstrip(".")).lower()
    if fmt not in ("svg", "png", "pdf"):
        raise RenderingUnavailable(
            f"cannot draw to {str(target)!r}: use a .svg, .png or .pdf name, or pass format="
        )
    _check_drawable(G)
    data = _pipe(to_dot(G, problems, title=title), fmt)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target
