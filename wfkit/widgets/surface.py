"""``GraphSurface``: a Graphviz picture of a workflow graph that can be clicked and dragged on.

Python draws the picture (the same SVG as ``flow.to_svg()``) and sends it with a map from each
edge's SVG element id to ``[source, outlet, target]``. The browser side (``surface.js``, shipped
in the package) finds the ``g.node``/``g.edge`` elements, reports a click as a change of
``selected`` or ``selected_edge``, a drag from one node (or from one of the selected node's
``outlets``) onto another as a ``connect`` message, a ``palette`` chip dropped on the graph as a
``drop`` message and Delete / Ctrl+Z / Ctrl+Shift+Z as ``key`` messages. Run status, tooltips and
the selection are applied as CSS classes, so changing them never lays the graph out again nor
resends the picture. Zoom, pan and fit happen in the page only.

The DOM contract the browser tests rely on is written at the top of ``surface.js``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import anywidget
import networkx as nx
import traitlets

from wfkit.definition import pictures, rendering
from wfkit.definition.problems import Problem
from wfkit.engine.vocabulary import NodeStatus
from wfkit.widgets.fallback import StaticPicture

__all__ = ["KEY_ACTIONS", "STATUS_CLASSES", "GraphSurface", "edge_element_id", "node_element_id"]

log = logging.getLogger(__name__)

STATUS_CLASSES = (*(status.value for status in NodeStatus), "problem")
"""Status values ``surface.css`` colours; any other class name is applied but left unstyled."""

ConnectHandler = Callable[..., None]
"""``handler(source, target)``, or ``handler(source, target, outlet)`` from an outlet handle."""
DropHandler = Callable[[str, str | None], None]
KeyHandler = Callable[[str], None]
KEY_ACTIONS = ("delete", "undo", "redo")
"""The ``action`` of a ``key`` message."""

_HERE = Path(__file__).parent


def node_element_id(node: object) -> str:
    """The SVG ``id`` of a node's group, as :func:`wfkit.definition.rendering.to_dot` writes it."""
    return f"node-{node}"


def edge_element_id(source: object, outlet: object, target: object) -> str:
    """The SVG ``id`` of an edge's group."""
    return f"edge-{source}-{outlet}-{target}"


class GraphSurface(StaticPicture, anywidget.AnyWidget):
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
    palette : list
        Node kinds offered as chips to drag onto the graph (``[]``: no palette).
    outlets : dict
        Node id -> outlet names; the selected node's are drawn as handles to drag from.

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
    _css = pictures.PICTURE_CSS + (_HERE / "surface.css").read_text("utf-8")

    svg = traitlets.Unicode("").tag(sync=True)
    edge_map = traitlets.Dict().tag(sync=True)
    status = traitlets.Dict().tag(sync=True)
    tooltips = traitlets.Dict().tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    selected_edge = traitlets.List(traitlets.Unicode()).tag(sync=True)
    palette = traitlets.List(traitlets.Unicode()).tag(sync=True)
    outlets = traitlets.Dict(value_trait=traitlets.List(traitlets.Unicode())).tag(sync=True)
    fallback_key = traitlets.Unicode("").tag(sync=True)
    """Marks the static pictures saved next to this view, which the live view hides."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("fallback_key", uuid.uuid4().hex)
        super().__init__(**kwargs)
        self._connect_handlers: list[ConnectHandler] = []
        self._drop_handlers: list[DropHandler] = []
        self._key_handlers: list[KeyHandler] = []
        self._displays: list[Any] = []  # display handles of the static pictures shown
        self.on_msg(self._on_front_end_message)
        self.observe(self._update_displays, names=["svg", "status"])

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
        ``handler(source, target, outlet)`` when the drag starts from one of its outlet handles."""
        self._connect_handlers.append(handler)

    def on_drop(self, handler: DropHandler) -> None:
        """Call ``handler(kind, after)`` when a palette chip is dropped: ``after`` is the node it
        was dropped onto (insert after it), ``None`` on the background (or a click on the chip)."""
        self._drop_handlers.append(handler)

    def on_key(self, handler: KeyHandler) -> None:
        """Call ``handler(action)`` (one of :data:`KEY_ACTIONS`) for Delete/Backspace, Ctrl+Z and
        Ctrl+Shift+Z (or Ctrl+Y) pressed while the graph has the focus."""
        self._key_handlers.append(handler)

    def static_html(self) -> str:
        """The picture as it stands (status classes included) as HTML for a saved notebook,
        marked as this view's stand-in; ``""`` before anything is drawn."""
        if not self.svg:
            return ""
        return pictures.static_picture(self.svg, self.status, fallback_for=self.fallback_key)

    def _keep_displayed(self, handle: Any) -> None:
        self._displays.append(handle)

    def _update_displays(self, _change: Any = None) -> None:
        if not self._displays:
            return
        picture = {"text/html": self.static_html()}
        for handle in self._displays:
            handle.update(picture, raw=True)

    def _on_front_end_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        kind = content.get("type") if isinstance(content, Mapping) else None
        handle = {"connect": self._connected, "drop": self._dropped, "key": self._keyed}.get(
            kind if isinstance(kind, str) else ""
        )
        if handle is None:
            log.warning("GraphSurface ignored a message it does not know: %r", content)
            return
        handle(content)

    def _connected(self, content: Mapping[str, Any]) -> None:
        source, target = content.get("source"), content.get("target")
        outlet = content.get("outlet")
        if not isinstance(source, str) or not isinstance(target, str):
            log.warning("GraphSurface ignored a connect message without ids: %r", content)
            return
        if outlet is not None and (not isinstance(outlet, str) or not outlet):
            log.warning("GraphSurface ignored a connect message with a bad outlet: %r", content)
            return
        for handler in list(self._connect_handlers):
            if outlet is None:
                handler(source, target)
            else:
                handler(source, target, outlet)

    def _dropped(self, content: Mapping[str, Any]) -> None:
        kind, after = content.get("kind"), content.get("after")
        if not isinstance(kind, str) or not kind or not (after is None or isinstance(after, str)):
            log.warning("GraphSurface ignored a malformed drop message: %r", content)
            return
        for handler in list(self._drop_handlers):
            handler(kind, after)

    def _keyed(self, content: Mapping[str, Any]) -> None:
        action = content.get("action")
        if action not in KEY_ACTIONS:
            log.warning("GraphSurface ignored a key message it does not know: %r", content)
            return
        for handler in list(self._key_handlers):
            handler(str(action))
