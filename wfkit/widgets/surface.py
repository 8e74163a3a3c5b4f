"""``GraphSurface``: a Graphviz picture of a workflow graph that can be clicked and dragged on.

Python draws the picture (the same SVG as ``flow.to_svg()``) and sends it with a map from each
edge's SVG element id to ``[source, outlet, target]``. The browser side (``surface.js``, shipped
in the package) finds the ``g.node``/``g.edge`` elements, reports a click as a change of
``selected`` or ``selected_edge`` and a drag from one node onto another as a ``connect`` message.
Run status, tooltips and the selection are applied as CSS classes, so changing them never lays
the graph out again nor resends the picture.

The DOM contract the browser tests rely on is written at the top of ``surface.js``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import anywidget
import networkx as nx
import traitlets

from wfkit.definition import rendering
from wfkit.definition.problems import Problem
from wfkit.engine.vocabulary import NodeStatus

__all__ = ["STATUS_CLASSES", "GraphSurface", "edge_element_id", "node_element_id"]

log = logging.getLogger(__name__)

STATUS_CLASSES = (*(status.value for status in NodeStatus), "problem")
"""Status values ``surface.css`` colours; any other class name is applied but left unstyled."""

ConnectHandler = Callable[..., None]
"""``handler(source, target)``, or ``handler(source, target, outlet)`` when the page names one."""
DropHandler = Callable[[str, str | None], None]
KeyHandler = Callable[[str], None]
KEY_ACTIONS = ("delete", "undo", "redo")

_HERE = Path(__file__).parent


def node_element_id(node: object) -> str:
    """The SVG ``id`` of a node's group, as :func:`wfkit.definition.rendering.to_dot` writes it."""
    return f"node-{node}"


def edge_element_id(source: object, outlet: object, target: object) -> str:
    """The SVG ``id`` of an edge's group."""
    return f"edge-{source}-{outlet}-{target}"


class GraphSurface(anywidget.AnyWidget):
    """An interactive Graphviz picture: click to select, drag from node to node to connect.

    Attributes
    ----------
    svg : str
        The picture; set it with :meth:`draw` so ``edge_map`` matches.
    edge_map : dict
        SVG element id of each edge -> ``[source, outlet, target]``.
    status : dict
        Node id -> CSS class (``"succeeded"``, ``"failed"``, ``"running"``...; see
        :data:`STATUS_CLASSES`); changing it restyles nodes without redrawing.
    tooltips : dict
        Node id -> tooltip text replacing the picture's own.
    selected : str
        Id of the selected node, ``""`` when none.
    selected_edge : list
        ``[source, outlet, target]`` of the selected edge, ``[]`` when none.

    Examples
    --------
    >>> import wfkit as wf
    >>> surface = GraphSurface()
    >>> surface.draw(wf.Workflow("hello").start_with("docs.greet").graph)
    >>> surface.edge_map
    {'edge-start-next-docs.greet': ['start', 'next', 'docs.greet']}
    >>> surface.status = {"start": "succeeded", "docs.greet": "running"}  # no redraw
    """

    _esm = _HERE / "surface.js"
    _css = _HERE / "surface.css"

    svg = traitlets.Unicode("").tag(sync=True)
    edge_map = traitlets.Dict().tag(sync=True)
    status = traitlets.Dict().tag(sync=True)
    tooltips = traitlets.Dict().tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    selected_edge = traitlets.List(traitlets.Unicode()).tag(sync=True)
    palette = traitlets.List(traitlets.Unicode()).tag(sync=True)
    outlets = traitlets.Dict().tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._connect_handlers: list[ConnectHandler] = []
        self._drop_handlers: list[DropHandler] = []
        self._key_handlers: list[KeyHandler] = []
        self.on_msg(self._on_front_end_message)

    def draw(
        self,
        G: nx.MultiDiGraph,
        problems: Iterable[Problem] = (),
        *,
        title: str | None = None,
    ) -> None:
        """Draw ``G`` with ``problems`` marked (raises ``RenderingUnavailable`` without dot)."""
        svg = rendering.to_svg(G, problems, title=title)
        edge_map = {
            edge_element_id(u, k, v): [str(u), str(k), str(v)] for u, v, k in G.edges(keys=True)
        }
        with self.hold_sync():
            self.edge_map = edge_map
            self.svg = svg

    def on_connect(self, handler: ConnectHandler) -> None:
        """Call ``handler(source, target)`` when a node is dragged onto another in the page, and
        ``handler(source, target, outlet)`` when the drag started on one of its outlets."""
        self._connect_handlers.append(handler)

    def on_drop(self, handler: DropHandler) -> None:
        """Call ``handler(kind, after)`` when a palette chip is dropped (``after``: the node it
        was dropped onto, or None for the background)."""
        self._drop_handlers.append(handler)

    def on_key(self, handler: KeyHandler) -> None:
        """Call ``handler(action)`` (one of :data:`KEY_ACTIONS`) for a key pressed on the canvas."""
        self._key_handlers.append(handler)

    def _on_front_end_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        kind = content.get("type") if isinstance(content, Mapping) else None
        handle = {"connect": self._connect, "drop": self._drop, "key": self._key}.get(str(kind))
        if handle is None:
            log.warning("GraphSurface ignored a message it does not know: %r", content)
            return
        handle(content)

    def _connect(self, content: Mapping[str, Any]) -> None:
        source, target = content.get("source"), content.get("target")
        outlet = content.get("outlet")
        if not isinstance(source, str) or not isinstance(target, str):
            log.warning("GraphSurface ignored a connect message without ids: %r", content)
            return
        if outlet is not None and not isinstance(outlet, str):
            log.warning("GraphSurface ignored a connect message with a bad outlet: %r", content)
            return
        for handler in list(self._connect_handlers):
            if outlet is None:
                handler(source, target)
            else:
                handler(source, target, outlet)

    def _drop(self, content: Mapping[str, Any]) -> None:
        kind, after = content.get("kind"), content.get("after")
        if not isinstance(kind, str) or not (after is None or isinstance(after, str)):
            log.warning("GraphSurface ignored a drop message without a kind: %r", content)
            return
        for handler in list(self._drop_handlers):
            handler(kind, after)

    def _key(self, content: Mapping[str, Any]) -> None:
        action = content.get("action")
        if action not in KEY_ACTIONS:
            log.warning("GraphSurface ignored a key message it does not know: %r", content)
            return
        for handler in list(self._key_handlers):
            handler(str(action))
