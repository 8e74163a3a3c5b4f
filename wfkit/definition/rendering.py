"""Drawing workflow graphs with Graphviz, in shapes a BPMN reader recognises.

Start is a thin circle and end a thick one; actions are rounded boxes; decisions diamonds;
parallel, join and for_each are bars; a delay is a double circle with a clock, a wait a double
circle with an envelope, an approval a box with a person. Saga scopes are clusters, compensations
dashed boxes linked by dashed lines, and problems red outlines whose tooltip is the message.

Node names in the DOT source are generated (``n0``, ``n1``...), so any id renders; the real id is
the SVG element's ``id`` (``node-<id>``) and its tooltip. Output is deterministic.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import graphviz
import networkx as nx
from pydantic import ValidationError

from wfkit.definition import keys
from wfkit.definition.durations import format_duration
from wfkit.definition.graph import saga_specs
from wfkit.definition.kinds import Node, NodeKind
from wfkit.definition.problems import Problem, Severity
from wfkit.errors import WfkitError

__all__ = ["RenderingUnavailable", "render", "to_dot", "to_svg"]

FONT = "DejaVu Sans"
PROBLEM_COLOUR = "#cc0000"
WARNING_COLOUR = "#e08a00"
_BAR = {
    "shape": "box",
    "style": "filled",
    "fillcolor": "#37474f",
    "color": "#37474f",
    "label": "",
    "width": "0.12",
    "height": "0.7",
    "fixedsize": "true",
}
_EVENT = {
    "shape": "doublecircle",
    "width": "0.45",
    "fixedsize": "true",
    "fontsize": "12",
    "style": "filled",
    "fillcolor": "#fff8e1",
    "color": "#8d6e00",
}
_OUTLET_STYLE = {
    "failed": {"color": PROBLEM_COLOUR, "fontcolor": PROBLEM_COLOUR},
    "fallback": {"color": "#6a1b9a", "fontcolor": "#6a1b9a", "style": "dashed"},
    "partial": {"color": WARNING_COLOUR, "fontcolor": WARNING_COLOUR},
    "elapsed": {"color": WARNING_COLOUR, "fontcolor": WARNING_COLOUR, "style": "dashed"},
    "expired": {"color": WARNING_COLOUR, "fontcolor": WARNING_COLOUR, "style": "dashed"},
    "rejected": {"color": PROBLEM_COLOUR, "fontcolor": PROBLEM_COLOUR},
}


class RenderingUnavailable(WfkitError):
    """The Graphviz ``dot`` program is not installed, so no picture can be made."""


def _esc(text: object) -> str:
    """Text for a DOT string: backslashes and entities kept literally."""
    return str(text).replace("\\", "\\\\").replace("&", "&amp;")


_TEXT_ATTRS = ("label", "xlabel", "tooltip", "id")


def _escaped(attrs: Mapping[str, str]) -> dict[str, str]:
    out = {k: _esc(v) if k in _TEXT_ATTRS else v for k, v in attrs.items()}
    if "tooltip" in out:  # dot 2.43 expands escapes in tooltips twice
        out["tooltip"] = out["tooltip"].replace("\\", "\\\\")
    return out


def _short(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _node_style(n: str, node: Node) -> dict[str, str]:
    kind, cfg = node.kind, node.config
    title = node.label
    if kind == NodeKind.START:
        return {
            "shape": "circle",
            "label": "",
            "width": "0.35",
            "style": "filled",
            "fillcolor": "#e8f5e9",
            "color": "#2e7d32",
            "xlabel": title or "",
        }
    if kind == NodeKind.END:
        return {
            "shape": "circle",
            "label": "",
            "width": "0.35",
            "penwidth": "3",
            "style": "filled",
            "fillcolor": "#ffebee",
            "color": "#b71c1c",
        }
    if kind == NodeKind.ACTION:
        return {
            "shape": "box",
            "style": "rounded,filled",
            "fillcolor": "#e3f2fd",
            "color": "#1565c0",
            "label": title or node.activity or n,
        }
    if kind == NodeKind.DECISION:
        text = cfg.expression if cfg.expression else f"{node.activity}()"
        return {
            "shape": "diamond",
            "style": "filled",
            "fillcolor": "#fffde7",
            "color": "#f9a825",
            "label": title or _short(text, 24),
        }
    if kind in (NodeKind.PARALLEL, NodeKind.JOIN):
        extra = (
            ""
            if kind == NodeKind.PARALLEL or cfg.mode == "all"
            else ("any" if cfg.mode == "any" else f"≥{cfg.count}")
        )
        return {**_BAR, "xlabel": title or extra}
    if kind == NodeKind.FOR_EACH:
        limit = f" ×{cfg.max_parallelism}" if cfg.max_parallelism else ""
        return {**_BAR, "xlabel": title or f"for each {_short(cfg.items, 20)}{limit}"}
    if kind == NodeKind.DELAY:
        return {**_EVENT, "label": "◷", "xlabel": title or format_duration(cfg.duration)}
    if kind == NodeKind.WAIT:
        timeout = f" ({format_duration(cfg.timeout)})" if cfg.timeout else ""
        return {**_EVENT, "label": "✉", "xlabel": title or f"{cfg.signal}{timeout}"}
    # approval: a user task
    timeout = f"\n≤ {format_duration(cfg.timeout)}" if cfg.timeout else ""
    return {
        "shape": "box",
        "style": "rounded,filled",
        "fillcolor": "#f3e5f5",
        "color": "#6a1b9a",
        "label": f"♙ {title or n}{timeout}",
    }


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

    ``status`` optionally maps node ids to a fill colour (used by run monitors).
    """
    names = {n: f"n{i}" for i, n in enumerate(G.nodes)}
    by_node: dict[str, list[Problem]] = defaultdict(list)
    by_edge: dict[tuple[Any, Any, Any], list[Problem]] = defaultdict(list)
    for p in problems:
        if p.edge is not None:
            by_edge[p.edge].append(p)
        elif p.node is not None and p.node in names:
            by_node[p.node].append(p)
    dot = graphviz.Digraph(
        name="workflow",
        graph_attr={
            "rankdir": "LR",
            "fontname": FONT,
            "labelloc": "t",
            "label": _esc(title or ""),
            "nodesep": "0.35",
            "ranksep": "0.45",
            "forcelabels": "true",
            "bgcolor": "white",
        },
        node_attr={"fontname": FONT, "fontsize": "11"},
        edge_attr={"fontname": FONT, "fontsize": "9", "color": "#546e7a", "arrowsize": "0.7"},
    )
    clusters = _saga_clusters(G, dot)
    for n, attrs in G.nodes(data=True):
        style, tooltip = _style_for(n, attrs)
        if n in by_node:
            style = _problem_style(style, by_node[n])
            tooltip = "\n".join(str(p) for p in by_node[n])
        if status and n in status:
            style = {**style, "fillcolor": status[n], "style": _filled(style.get("style", ""))}
        target = clusters.get(attrs.get(keys.SAGA) or "", dot)
        target.node(names[n], **_escaped({"id": f"node-{n}", "tooltip": tooltip, **style}))
        if attrs.get(keys.COMPENSATION):
            comp = f"{names[n]}c"
            target.node(
                comp,
                **_escaped(
                    {
                        "id": f"compensation-{n}",
                        "label": f"⟲ {attrs[keys.COMPENSATION]}",
                        "shape": "box",
                        "style": "rounded,dashed",
                        "color": "#8e24aa",
                        "fontcolor": "#6a1b9a",
                        "fontsize": "10",
                        "tooltip": f"compensation of {n}: {attrs[keys.COMPENSATION]}",
                    }
                ),
            )
            # same rank: the undo box sits under its step instead of pushing the flow aside
            target.body.append(f"\t{{rank=same; {names[n]}; {comp}}}\n")
    _nest(G, clusters, dot)
    for n, comp_activity in G.nodes(data=keys.COMPENSATION):
        if comp_activity:
            dot.edge(
                names[n],
                f"{names[n]}c",
                style="dashed",
                color="#8e24aa",
                arrowhead="open",
                id=_esc(f"compensates-{n}"),
                tooltip=_escaped({"tooltip": f"undo: {comp_activity}"})["tooltip"],
            )
    for u, v, k, attrs in G.edges(keys=True, data=True):
        edge_style = dict(_OUTLET_STYLE.get(str(k), {}))
        tooltip = f"{u} -[{k}]-> {v}"
        found = by_edge.get((u, v, k))
        if found:
            edge_style.update(color=PROBLEM_COLOUR, fontcolor=PROBLEM_COLOUR, penwidth="2")
            tooltip = "\n".join(str(p) for p in found)
        dot.edge(
            names[u],
            names[v],
            **_escaped(
                {
                    "label": _edge_label(str(k), attrs.get(keys.EDGE_LABEL)),
                    "id": f"edge-{u}-{k}-{v}",
                    "tooltip": tooltip,
                    **edge_style,
                }
            ),
        )
    return dot.source


def _filled(style: str) -> str:
    return style if "filled" in style else ",".join(s for s in (style, "filled") if s)


def _style_for(n: str, attrs: Mapping[str, Any]) -> tuple[dict[str, str], str]:
    try:
        node = Node.model_validate(attrs)
    except ValidationError:
        kind = attrs.get(keys.KIND, "undefined")
        return ({"shape": "box", "style": "dashed", "label": f"{n}\n({kind})"}, n)
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


def _saga_clusters(G: nx.MultiDiGraph, dot: graphviz.Digraph) -> dict[str, graphviz.Digraph]:
    try:
        sagas = saga_specs(G)
    except (ValidationError, ValueError):
        return {}
    clusters: dict[str, graphviz.Digraph] = {}
    for sid, spec in sagas.items():
        policy = f" ({spec.policy.value})" if spec.policy else ""
        clusters[sid] = graphviz.Digraph(
            name=f"cluster_{len(clusters)}",
            graph_attr={
                "label": _esc(f"saga {spec.label or sid}{policy}"),
                "style": "rounded,dashed",
                "color": "#8e24aa",
                "fontcolor": "#6a1b9a",
                "fontsize": "10",
                "id": _esc(f"saga-{sid}"),
            },
        )
    return clusters


def _nest(G: nx.MultiDiGraph, clusters: dict[str, graphviz.Digraph], dot: graphviz.Digraph) -> None:
    """Attach each saga cluster to its parent, innermost first (subgraph() copies the body)."""
    sagas = saga_specs(G) if clusters else {}
    depth = {sid: _depth(sid, sagas) for sid in clusters}
    for sid in sorted(clusters, key=lambda s: (-depth[s], list(clusters).index(s))):
        parent = sagas[sid].parent
        (clusters[parent] if parent in clusters else dot).subgraph(clusters[sid])


def _depth(sid: str, sagas: Mapping[str, Any]) -> int:
    d, seen = 0, {sid}
    while (parent := sagas[sid].parent) is not None and parent in sagas and parent not in seen:
        d, sid = d + 1, parent
        seen.add(sid)
    return d


def _pipe(source: str, fmt: str) -> bytes:
    try:
        return graphviz.Source(source).pipe(format=fmt, engine="dot")
    except graphviz.ExecutableNotFound as exc:
        raise RenderingUnavailable(
            "the Graphviz 'dot' program is not installed, so the workflow cannot be drawn; "
            "install it with 'sudo apt-get install graphviz' (Debian/Ubuntu), "
            "'brew install graphviz' (macOS) or 'conda install -c conda-forge graphviz'"
        ) from exc
    except (graphviz.CalledProcessError, subprocess.CalledProcessError) as exc:
        raise RenderingUnavailable(f"Graphviz failed to draw the workflow: {exc}") from exc


def to_svg(
    G: nx.MultiDiGraph,
    problems: Iterable[Problem] = (),
    *,
    title: str | None = None,
    status: Mapping[str, str] | None = None,
) -> str:
    """The picture of ``G`` as SVG text."""
    return _pipe(to_dot(G, problems, title=title, status=status), "svg").decode()


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
    data = _pipe(to_dot(G, problems, title=title), fmt)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target
