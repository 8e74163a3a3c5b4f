"""``Editor``: the visual editor of a workflow graph.

The graph is drawn by Graphviz on a :class:`~wfkit.widgets.surface.GraphSurface` (the same
picture as ``flow.to_svg()``, problems included). Click a node to edit it in a form that shows
the fields of its kind (:class:`~wfkit.widgets.forms.NodeForm`); add a node from the add row or
by dropping a palette chip on the canvas (on a node: the new node follows it); connect by
dragging from one node onto another, from one of a node's outlet handles, or with the Connect
row; Delete, Ctrl/Cmd+Z and Ctrl/Cmd+Shift+Z on the canvas; undo and redo; export the picture;
register the edited graph with an engine as the next version; Run it with data from a form
generated from the workflow's data model (:class:`~wfkit.widgets.launcher.RunPanel`). Validation
runs after every change and its problems are listed under the graph and drawn on it, in words.

The editor edits the very graph it is given, in place: ``flow.graph`` shows every change. Every
change (form, add, drop, connect, delete) is one undoable step; a refused one changes nothing
and says why in the status line.

Canvas protocol (surface -> editor): ``connect`` (``source``, ``target`` and optionally
``outlet``), ``drop`` (``kind``, optionally ``after``) and ``key`` (``delete``/``undo``/``redo``)
messages, through :meth:`GraphSurface.on_connect`, ``on_drop`` and ``on_key``; the editor sets
the surface's ``palette`` (every node kind) and ``outlets`` (node id -> its declared outlets,
branch names for decisions and parallels).

CSS hooks for browser tests: ``wfkit-editor`` (the whole editor), ``wfkit-editor-surface``,
``wfkit-editor-main`` (the row holding graph and form), ``wfkit-editor-form`` (with
``wfkit-node-form``), ``wfkit-editor-apply``, ``wfkit-editor-add-kind``, ``wfkit-editor-add-id``,
``wfkit-editor-add``, ``wfkit-editor-delete``, ``wfkit-editor-undo``, ``wfkit-editor-redo``,
``wfkit-editor-refresh``, ``wfkit-editor-run`` (opens the Run panel; its hooks are in
:mod:`wfkit.widgets.launcher`), ``wfkit-editor-connect-source``, ``wfkit-editor-connect-outlet``,
``wfkit-editor-connect-target``, ``wfkit-editor-connect``, ``wfkit-editor-problems``,
``wfkit-editor-export-path``, ``wfkit-editor-export-svg``, ``wfkit-editor-export-png``,
``wfkit-editor-register``, ``wfkit-editor-status`` (with ``wfkit-ok`` / ``wfkit-error``),
``wfkit-editor-open-child`` (shown for a selected call node when the editor has an engine) and
``wfkit-editor-child`` (where the called workflow's editor opens).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ipywidgets as w
import networkx as nx

from wfkit.definition import keys, rendering
from wfkit.definition.activities import ActivityRegistry, default_registry
from wfkit.definition.graph import graph_to_data
from wfkit.definition.kinds import DEFAULT_KIND, NodeKind, outlets_of
from wfkit.definition.problems import Problem
from wfkit.definition.workflow import Workflow
from wfkit.errors import UsageError
from wfkit.widgets.confirm import Message
from wfkit.widgets.edits import (
    History,
    called_workflow,
    declared_outlets,
    default_node_id,
    find_edge,
    find_node,
    problems_html,
    restore_graph,
    used_outlets,
)
from wfkit.widgets.fallback import StaticPicture
from wfkit.widgets.forms import FormError, NodeForm, validate_node
from wfkit.widgets.launcher import NO_ENGINE, RunPanel
from wfkit.widgets.publish import PublishBar
from wfkit.widgets.surface import GraphSurface

if TYPE_CHECKING:
    from wfkit.engine import Engine, Run

__all__ = ["Editor"]


def _button(description: str, css: str, icon: str = "", **kwargs: Any) -> w.Button:
    kwargs.setdefault("layout", {"width": "auto"})  # a fixed width cuts labels ("Add n...")
    button = w.Button(description=description, icon=icon, **kwargs)
    button.add_class(css)
    return button


def _tagged(widget: Any, css: str) -> Any:
    widget.add_class(css)
    return widget


_VIEWBOX = re.compile(r'viewBox="\s*[-\d.]+[\s,]+[-\d.]+[\s,]+([\d.]+)')


def natural_width(svg: str, smallest: int = 360, largest: int = 1600) -> int:
    """The picture's width at 100 % in CSS pixels (Graphviz writes points), clamped.

    The editor makes it the graph's flex basis: the form sits beside the graph only while the
    row has room for both at that size, and wraps below it otherwise, so the form never
    shrinks the picture (and its labels) to make room for itself.

    Examples
    --------
    >>> natural_width('<svg width="600pt" viewBox="0.00 0.00 600.00 44.00">')
    800
    """
    found = _VIEWBOX.search(svg)
    width = float(found.group(1)) * 4 / 3 if found else smallest
    return int(min(max(width, smallest), largest))


class Editor(StaticPicture, w.VBox):
    """Visual editor of a workflow graph (an ipywidgets ``VBox``).

    Parameters
    ----------
    flow_or_graph : Workflow or networkx.MultiDiGraph
        What to edit. A bare graph is wrapped as workflow ``id`` version 1; either way the editor
        changes that graph object in place.
    engine : Engine, optional
        Enables "Register as version N+1", "Run…" (a run with data from a form), checks call
        nodes against the engine's workflows, and "Open called workflow" for a selected call
        node. Without one, "Run…" is disabled and its tooltip says why.
    registry : ActivityRegistry, optional
        Where activity names are looked up: the engine's registry, else the default one.
    id : str
        Workflow id used when a bare graph is given.

    Examples
    --------
    >>> import wfkit as wf
    >>> flow = wf.Workflow("hello")
    >>> editor = Editor(flow)
    >>> editor.add_kind.value = "start"
    >>> editor.add_button.click()
    >>> list(flow.graph.nodes), editor.surface.selected
    (['start'], 'start')
    >>> editor.add("delay", after="start")  # what dropping a chip on the start node does
    'delay-1'
    >>> list(flow.graph.edges(keys=True))
    [('start', 'delay-1', 'next')]
    >>> print(editor.status_line.text)  # doctest: +NORMALIZE_WHITESPACE
    Added delay node 'delay-1'. It still needs settings (duration: required — e.g. 90s, 7d or
    1h30m): fill them in and press Apply. Connected 'start' -[next]-> 'delay-1'.
    """

    def __init__(
        self,
        flow_or_graph: Workflow | nx.MultiDiGraph,
        engine: Engine | None = None,
        registry: ActivityRegistry | None = None,
        *,
        id: str = "workflow",
    ) -> None:
        if isinstance(flow_or_graph, Workflow):
            self.flow = flow_or_graph
        else:
            self.flow = Workflow.from_graph(id, 1, flow_or_graph)
        self.engine = engine
        self.registry = registry or (engine.registry if engine is not None else default_registry)
        self.problems: list[Problem] = []
        self.history = History()
        self._drawn: tuple[str, ...] | None = None
        self._build()
        super().__init__(self._layout())
        self.add_class("wfkit-editor")
        self._wire()
        self.refresh()
        if self.status_line.kind != "error":
            self.status_line.ok(
                f"Editing {self._title()}: click a node to edit it, drag from one node onto "
                "another to connect them."
            )

    # --- building -----------------------------------------------------------------------

    def _build(self) -> None:
        self.surface = _tagged(
            GraphSurface(palette=[k.value for k in NodeKind]), "wfkit-editor-surface"
        )
        self.form = _tagged(NodeForm(self.registry.names()), "wfkit-editor-form")
        self.form.apply_button.add_class("wfkit-editor-apply")
        kinds = [k.value for k in NodeKind]
        self.add_kind = _tagged(
            w.Dropdown(
                options=kinds,
                value=DEFAULT_KIND.value,
                description="add",
                style={"description_width": "auto"},
                layout={"width": "11em"},
            ),
            "wfkit-editor-add-kind",
        )
        self.add_id = _tagged(
            w.Text(placeholder="id (blank: generated)", layout={"width": "12em"}),
            "wfkit-editor-add-id",
        )
        self.add_button = _button("Add node", "wfkit-editor-add", "plus")
        self.delete_button = _button("Delete", "wfkit-editor-delete", "trash")
        self.undo_button = _button("Undo", "wfkit-editor-undo", "undo")
        self.redo_button = _button("Redo", "wfkit-editor-redo", "repeat")
        self.refresh_button = _button("Refresh", "wfkit-editor-refresh", "refresh")
        self.open_child_button = _button(
            "Open called workflow", "wfkit-editor-open-child", "external-link"
        )
        self.open_child_button.layout.display = "none"
        self.child_box = _tagged(w.VBox(), "wfkit-editor-child")
        self.child: Editor | None = None
        auto = {"description_width": "auto"}
        self.connect_source = _tagged(
            w.Dropdown(description="connect", style=auto, layout={"width": "16em"}),
            "wfkit-editor-connect-source",
        )
        self.connect_outlet = _tagged(
            w.Dropdown(description="outlet", style=auto, layout={"width": "11em"}),
            "wfkit-editor-connect-outlet",
        )
        self.connect_target = _tagged(
            w.Dropdown(description="to", style=auto, layout={"width": "14em"}),
            "wfkit-editor-connect-target",
        )
        self.connect_button = _button("Connect", "wfkit-editor-connect", "link")
        self.problems_view = _tagged(w.HTML(), "wfkit-editor-problems")
        self.status_line = Message("wfkit-editor-status")
        self.publish = PublishBar(
            self.flow,
            self.status_line,
            lambda: self.problems,
            engine=self.engine,
            on_registered=self.refresh,
        )
        self.export_path = self.publish.path
        self.export_svg_button = self.publish.svg_button
        self.export_png_button = self.publish.png_button
        self.register_button = self.publish.register_button
        self.run_panel = RunPanel(self.flow, self.publish, self.engine)
        self.run_button = _button(
            "Run…",
            "wfkit-editor-run",
            "play",
            tooltip=NO_ENGINE if self.engine is None else "start a run with data from a form",
            disabled=self.engine is None,
        )

    def _layout(self) -> list[Any]:
        """Rows that wrap instead of clipping; the graph takes the width, the form sits beside
        it while there is room for both and below it when there is not."""
        wrap = {"flex_flow": "row wrap", "align_items": "center", "width": "100%"}
        toolbar = w.HBox(
            [
                self.add_kind,
                self.add_id,
                self.add_button,
                self.delete_button,
                self.undo_button,
                self.redo_button,
                self.refresh_button,
                self.run_button,
                self.open_child_button,
            ],
            layout=wrap,
        )
        connect = w.HBox(
            [self.connect_source, self.connect_outlet, self.connect_target, self.connect_button],
            layout=wrap,
        )
        self.surface.layout = w.Layout(flex="1 1 560px", min_width="0", width="auto")
        self.form.layout = w.Layout(flex="1 1 22em", min_width="18em", max_width="34em")
        graph = w.HBox(
            [self.surface, self.form],
            layout={"flex_flow": "row wrap", "align_items": "flex-start", "width": "100%"},
        )
        graph.add_class("wfkit-editor-main")
        self.publish.layout = w.Layout(**wrap)
        problems = w.VBox([w.HTML("<b>Problems</b>"), self.problems_view])
        problems.layout = w.Layout(width="100%", overflow="auto")
        return [
            toolbar,
            self.status_line,
            graph,
            connect,
            problems,
            self.publish,
            self.run_panel,
            self.child_box,
        ]

    def _wire(self) -> None:
        self.surface.observe(self._on_selected, names="selected")
        self.surface.observe(self._on_selected_edge, names="selected_edge")
        self.surface.on_connect(self._on_drag)
        self.surface.on_drop(self._on_drop)
        self.surface.on_key(self._on_key)
        self.connect_source.observe(lambda _c: self._offer_outlets(), names="value")
        actions: list[tuple[w.Button, Callable[[], object]]] = [
            (self.form.apply_button, self.apply),
            (self.add_button, self.add_node),
            (self.delete_button, self.delete),
            (self.undo_button, self.undo),
            (self.redo_button, self.redo),
            (self.refresh_button, self._refresh_clicked),
            (self.connect_button, self._connect_clicked),
            (self.open_child_button, self.open_child),
            (self.run_button, self._run_clicked),
        ]
        for button, action in actions:
            button.on_click(lambda _b, action=action: action())

    # --- reading ------------------------------------------------------------------------

    @property
    def graph(self) -> nx.MultiDiGraph:
        """The graph being edited (the same object the editor was given)."""
        return self.flow.graph

    @property
    def workflow(self) -> Workflow:
        """The edited workflow (its graph is edited in place)."""
        return self.flow

    def _title(self) -> str:
        return f"{self.flow.id} v{self.flow.version}"

    # --- refreshing ---------------------------------------------------------------------

    def refresh(self) -> None:
        """Validate, redraw when the graph changed, and update lists, form and buttons.

        Call it after changing ``flow.graph`` from code or registering activities.
        """
        self.problems = self.flow.validate(registry=self.registry, workflows=self._workflows())
        self._redraw()
        outlets = {str(n): list(declared_outlets(self.graph, n)) for n in self.graph}
        if outlets != self.surface.outlets:
            self.surface.outlets = outlets
        self.problems_view.value = problems_html(self.problems)
        self.form.set_activities(self.registry.names())
        self._offer_nodes()
        self._sync_selection()
        self.publish.sync()
        self.undo_button.disabled = not self.history.undo_stack
        self.redo_button.disabled = not self.history.redo_stack

    def _redraw(self) -> None:
        drawn = (
            json.dumps(graph_to_data(self.graph), default=str),
            self._title(),
            *(p.model_dump_json() for p in self.problems),
        )
        if drawn == self._drawn:
            return  # selection, status and form changes never lay the graph out again
        try:
            self.surface.draw(self.graph, self.problems, title=self._title())
        except rendering.RenderingUnavailable as exc:
            self.surface.svg = ""
            self.status_line.error(str(exc))
        self._drawn = drawn
        self.surface.layout.flex = f"1 1 {natural_width(self.surface.svg)}px"

    def _workflows(self) -> dict[str, dict[int, Any]] | None:
        """The engine's workflows a call may start (id -> version -> data model)."""
        if self.engine is None:
            return None
        return {
            wid: {v: self.engine.definition(wid, v).data_model for v in versions}
            for wid, versions in self.engine.workflows().items()
        }

    def _called(self) -> tuple[str, int | None] | None:
        """The workflow (and pinned version) the selected node calls, if it is a call."""
        node = find_node(self.graph, self.surface.selected)
        return None if node is None else called_workflow(self.graph, node)

    def _offer_open_child(self) -> None:
        shown = self.engine is not None and self._called() is not None
        self.open_child_button.layout.display = None if shown else "none"

    def open_child(self) -> Editor | None:
        """Open the workflow the selected call node starts in an editor below this one.

        The child editor edits a copy of the registered definition (the version the call pins,
        else the latest); register it from there as a new version. Returns that editor, or
        None (and says why) when no call is selected or the workflow is not registered.
        """
        called = self._called()
        if called is None or self.engine is None:
            self.status_line.error(
                "Select a call node (with an engine given to the editor) to open the workflow "
                "it calls."
            )
            return None
        workflow_id, version = called
        try:
            definition = self.engine.definition(workflow_id, version).copy()
        except UsageError as exc:
            self.status_line.error(f"Cannot open the called workflow: {exc}")
            return None
        self.child = Editor(definition, self.engine, self.registry)
        title = f"<b>Called workflow {definition.id} v{definition.version}</b>"
        self.child_box.children = [w.HTML(title), self.child]
        self.status_line.ok(
            f"Opened {definition.id!r} v{definition.version} below (a copy: register it from "
            "there as a new version)."
        )
        return self.child

    def _offer_nodes(self) -> None:
        names = [str(n) for n in self.graph]
        for box in (self.connect_source, self.connect_target):
            keep = box.value if box.value in names else None
            if list(box.options) != names:
                box.options = names
            box.value = keep
        self._offer_outlets()

    def _offer_outlets(self, prefer: str | None = None) -> None:
        node = find_node(self.graph, self.connect_source.value or "")
        outlets = list(declared_outlets(self.graph, node)) if node is not None else []
        free = (
            [o for o in outlets if o not in used_outlets(self.graph, node)]
            if node is not None
            else []
        )
        keep = prefer if prefer in outlets else self.connect_outlet.value
        if list(self.connect_outlet.options) != outlets:
            self.connect_outlet.options = outlets
        if keep not in outlets:
            keep = free[0] if free else (outlets[0] if outlets else None)
        self.connect_outlet.value = keep

    def _sync_selection(self) -> None:
        selected = find_node(self.graph, self.surface.selected)
        if self.surface.selected and selected is None:
            self.surface.selected = ""
        if find_edge(self.graph, self.surface.selected_edge) is None:
            self.surface.selected_edge = []
        self._offer_open_child()
        if selected is None:
            self.form.clear()
        elif self.form.node_id != str(selected) or self.form.shown != self.graph.nodes[selected]:
            self.form.show(str(selected), self.graph.nodes[selected])

    # --- editing ------------------------------------------------------------------------

    def _edit(self, change: Callable[[], str]) -> bool:
        """Run ``change`` as one undoable step; a refusal (UsageError) leaves the graph as is."""
        before = graph_to_data(self.graph)
        try:
            message = change()
        except UsageError as exc:
            if graph_to_data(self.graph) != before:
                restore_graph(self.graph, before)
            self.status_line.error(str(exc))
            return False
        if graph_to_data(self.graph) != before:
            self.history.record(before)
        self.refresh()
        self.status_line.ok(message)
        return True

    def add_node(self) -> None:
        """Add a node of the kind in the "add" box, under the typed id or a generated one."""
        if self.add(self.add_kind.value, self.add_id.value.strip() or None) is not None:
            self.add_id.value = ""

    def add(self, kind: str, node_id: str | None = None, after: str | None = None) -> str | None:
        """Add a node of ``kind`` (under ``node_id``, else a generated id) and select it.

        With ``after``, the new node follows that node: through its first free outlet, or, when
        every outlet is taken, inserted on its first outlet's edge (``after -> new -> old
        target``). One undoable step; returns the new id, or None (and says why) when refused.
        """
        try:
            node_kind = NodeKind(kind)
        except ValueError:
            kinds = ", ".join(k.value for k in NodeKind)
            self.status_line.error(f"{kind!r} is not a node kind; add one of {kinds}.")
            return None
        new = node_id or default_node_id(self.graph, node_kind)

        def change() -> str:
            if find_node(self.graph, new) is not None:
                raise UsageError(
                    f"a node called {new!r} already exists; type another id, or leave the "
                    f"id box blank for {default_node_id(self.graph, node_kind)!r}"
                )
            link = self._link_after(after, new, node_kind) if after is not None else ""
            self.graph.add_node(new, **{keys.KIND: node_kind.value})
            if link:
                self._apply_link(after, new, node_kind)
            try:
                validate_node({keys.KIND: node_kind.value})
                todo = ""
            except FormError as exc:
                todo = f" It still needs settings ({exc}): fill them in and press Apply."
            how = link or (
                " Connect it by dragging from one node onto another, or with the connect row."
            )
            return f"Added {node_kind.value} node {new!r}.{todo}{how}"

        if not self._edit(change):
            return None
        message = self.status_line.text
        self.surface.selected = new
        self.status_line.ok(message)
        return new

    def _link_after(self, after: str, new: str, kind: NodeKind) -> str:
        """How the new node will follow ``after`` (refused with a UsageError when it cannot)."""
        u = find_node(self.graph, after)
        if u is None:
            raise UsageError(f"there is no node {after!r} to add after; drop it on another node")
        declared = declared_outlets(self.graph, u)
        if not declared:
            raise UsageError(
                f"node {after!r} has no outlets (a {self.graph.nodes[u].get(keys.KIND)} node "
                "ends its path): drop the new node on the background or on another node"
            )
        used = used_outlets(self.graph, u)
        free = [o for o in declared if o not in used]
        if free:
            return f" Connected {after!r} -[{free[0]}]-> {new!r}."
        mine = outlets_of(kind)
        if not mine:
            raise UsageError(
                f"every outlet of {after!r} ({', '.join(declared)}) is connected and a "
                f"{kind.value} node has no outlet to pass {used[declared[0]]!r} on; delete one "
                f"of {after!r}'s edges first"
            )
        return (
            f" Inserted it on {after!r} -[{declared[0]}]-> {used[declared[0]]!r} (now "
            f"{after!r} -[{declared[0]}]-> {new!r} -[{mine[0]}]-> {used[declared[0]]!r})."
        )

    def _apply_link(self, after: Any, new: str, kind: NodeKind) -> None:
        u = find_node(self.graph, after)
        declared = declared_outlets(self.graph, u)
        used = used_outlets(self.graph, u)
        free = [o for o in declared if o not in used]
        if free:
            self.graph.add_edge(u, new, key=free[0])
            return
        outlet, target = declared[0], used[declared[0]]
        self.graph.remove_edge(u, target, key=outlet)
        self.graph.add_edge(u, new, key=outlet)
        self.graph.add_edge(new, target, key=outlets_of(kind)[0])

    def apply(self) -> None:
        """Validate the form and write it into the selected node; an invalid one changes nothing."""
        node = find_node(self.graph, self.form.node_id or "")
        if node is None:
            self.status_line.error("Select a node on the graph, then edit it and press Apply.")
            return
        try:
            attrs = validate_node(self.form.read()).to_attrs()
        except FormError as exc:
            self.form.show_error(exc.lines)
            self.status_line.error(
                f"Node {node!r} not changed: {exc}. Correct the field and press Apply again."
            )
            return

        def change() -> str:
            data = self.graph.nodes[node]
            data.clear()
            data.update(attrs)
            return f"Applied the changes to node {node!r}."

        self.form.show_error("")
        self._edit(change)

    def connect(self, source: str, outlet: str, target: str) -> bool:
        """Add the edge ``source -[outlet]-> target``; refused (and said why) when it cannot be."""

        def change() -> str:
            u, v = find_node(self.graph, source), find_node(self.graph, target)
            for name, node in ((source, u), (target, v)):
                if node is None:
                    raise UsageError(f"there is no node {name!r}; pick one from the lists")
            declared = declared_outlets(self.graph, u)
            if outlet not in declared:
                kind = self.graph.nodes[u].get(keys.KIND)
                has = ", ".join(declared) or "none"
                raise UsageError(
                    f"a {kind} node has no outlet {outlet!r} (it declares: {has}); pick one of "
                    "those, or change the node's kind"
                )
            used = used_outlets(self.graph, u)
            if outlet in used:
                raise UsageError(
                    f"outlet {outlet!r} of {source!r} already leads to {used[outlet]!r}; select "
                    "that edge and press Delete first (an outlet leads to one node)"
                )
            self.graph.add_edge(u, v, key=outlet)
            return f"Connected {source!r} -[{outlet}]-> {target!r}."

        return self._edit(change)

    def _connect_clicked(self) -> None:
        source, target = self.connect_source.value, self.connect_target.value
        outlet = self.connect_outlet.value
        if not (source and outlet and target):
            self.status_line.error(
                "Pick a source node, one of its outlets and a target node, then press Connect."
            )
            return
        self.connect(source, outlet, target)

    def _on_drop(self, kind: str, after: str | None) -> None:
        """A palette chip dropped in the page: on the background, or onto node ``after``."""
        self.add(kind, after=after)

    def _on_key(self, action: str) -> None:
        """Delete, Ctrl/Cmd+Z or Ctrl/Cmd+Shift+Z pressed while the canvas has focus."""
        {"delete": self.delete, "undo": self.undo, "redo": self.redo}[action]()

    def _on_drag(self, source: str, target: str, outlet: str | None = None) -> None:
        """A drag in the page from ``source`` (or from its ``outlet`` handle) onto ``target``:
        connect that outlet, else the only free one (several free: the connect row asks)."""
        if outlet is not None:
            self.connect(source, outlet, target)
            return
        u = find_node(self.graph, source)
        if u is None or find_node(self.graph, target) is None:
            self.status_line.error(f"{source!r} or {target!r} is not in the graph; try again.")
            return
        declared = declared_outlets(self.graph, u)
        free = [o for o in declared if o not in used_outlets(self.graph, u)]
        if not declared:
            self.status_line.error(f"node {source!r} has no outlets to connect (check its kind).")
            return
        if not free:
            self.status_line.error(
                f"every outlet of {source!r} ({', '.join(declared)}) is already connected; "
                "delete one of its edges first"
            )
            return
        self.connect_source.value = source
        self.connect_target.value = target
        self._offer_outlets(prefer=free[0])
        if len(free) == 1:
            self.connect(source, free[0], target)
            return
        self.status_line.ok(
            f"{source!r} has several free outlets ({', '.join(free)}): pick one in the connect "
            f"row (it shows {free[0]!r}) and press Connect to link it to {target!r}."
        )

    def delete(self) -> None:
        """Delete the selected node (with its edges) or the selected edge."""
        node = find_node(self.graph, self.surface.selected)
        edge = find_edge(self.graph, self.surface.selected_edge)
        if node is None and edge is None:
            self.status_line.error("Select a node or an edge on the graph, then press Delete.")
            return

        def change() -> str:
            if node is not None:
                count = self.graph.degree(node)
                self.graph.remove_node(node)
                return f"Deleted node {node!r} and its {count} edge(s). Undo brings it back."
            assert edge is not None
            u, k, v = edge
            self.graph.remove_edge(u, v, key=k)
            return f"Deleted edge {u!r} -[{k}]-> {v!r}. Undo brings it back."

        self._edit(change)

    def undo(self) -> None:
        """Put the graph back as it was before the last change."""
        self._travel(self.history.undo, "Undid", "undo")

    def redo(self) -> None:
        """Make the last undone change again."""
        self._travel(self.history.redo, "Redid", "redo")

    def _travel(self, step: Callable[[nx.MultiDiGraph], bool], done: str, verb: str) -> None:
        if not step(self.graph):
            self.status_line.error(f"Nothing to {verb}.")
            return
        self.refresh()
        left = len(self.history.undo_stack if verb == "undo" else self.history.redo_stack)
        self.status_line.ok(f"{done} the last change ({left} more to {verb}).")

    def _on_selected(self, change: dict[str, Any]) -> None:
        name = change["new"]
        self._offer_open_child()
        if not name:
            if not self.surface.selected_edge:
                self.form.clear()
            return
        self.surface.selected_edge = []
        node = find_node(self.graph, name)
        if node is None:
            self.status_line.error(f"there is no node {name!r} any more; click another one")
            return
        self.form.show(str(node), self.graph.nodes[node])
        self.connect_source.value = str(node)
        kind = self.graph.nodes[node].get(keys.KIND, "undefined")
        self.status_line.ok(
            f"Selected {kind} node {name!r}: edit it and press Apply, or press Delete to remove it."
        )

    def _on_selected_edge(self, change: dict[str, Any]) -> None:
        ends = change["new"]
        if not ends:
            return
        self.surface.selected = ""
        self.form.clear()
        if find_edge(self.graph, ends) is None:
            self.status_line.error(f"edge {ends!r} is not in the graph; click another one")
            return
        self.status_line.ok(
            f"Selected edge {ends[0]!r} -[{ends[1]}]-> {ends[2]!r}: press Delete to remove it."
        )

    def _refresh_clicked(self) -> None:
        self.refresh()
        self.status_line.ok(f"Checked {self._title()} again: {len(self.problems)} problem(s).")

    # --- output -------------------------------------------------------------------------

    def export(self, fmt: str) -> Path | None:
        """Write the picture as ``fmt`` (svg, png or pdf) to the path in the file box."""
        return self.publish.export(fmt)

    def register(self) -> None:
        """Register a copy of the edited workflow with the engine as the next version."""
        self.publish.register()

    def _run_clicked(self) -> None:
        if self.run_panel.is_open:
            self.run_panel.hide()
            return
        self.run_panel.show()
        self.status_line.ok(
            f"Fill in the data of a run of {self.flow.id!r} below and press Start run (the "
            "graph is registered as a new version first when it changed)."
        )

    def start_run(self) -> Run | None:
        """Start a run of the edited workflow with the Run panel's data (see
        :class:`~wfkit.widgets.launcher.RunPanel`); None when refused (the reasons are shown)."""
        self.run_panel.show()
        return self.run_panel.start()

    def close(self) -> None:
        """Stop the monitor of the last run started here, then close the editor's widgets."""
        self.run_panel.close()
        if self.child is not None:
            self.child.close()
        super().close()
