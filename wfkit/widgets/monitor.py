"""``RunMonitor``: one run, live — status colours on the graph, for_each progress, the explain
line, a timeline of attempts, the data document, the event log and the activities' log lines.

The picture is drawn once; live status is a dict of CSS classes on the :class:`GraphSurface`, so
updates never re-run the layout. A daemon thread polls the engine every ``interval`` seconds
(a busy notebook cell processes no widget messages, so a loop in a cell could not do this) and
touches a trait only when its value changed.

CSS hooks: ``wfkit-monitor`` (the whole widget), ``wfkit-monitor-header``,
``wfkit-monitor-explain``, ``wfkit-monitor-graph`` (the surface), ``wfkit-monitor-progress``,
``wfkit-monitor-timeline``, ``wfkit-monitor-data``, ``wfkit-monitor-events`` (rows are
``tr.wfkit-event``), ``wfkit-monitor-logs`` (the lines activities logged through ``ctx.logger``;
rows are ``tr.wfkit-log``), ``wfkit-monitor-error``.
"""

from __future__ import annotations

import html
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ipywidgets as widgets

from wfkit.definition.kinds import NodeKind
from wfkit.definition.rendering import RenderingUnavailable
from wfkit.definition.workflow import Workflow
from wfkit.engine import Engine, Event, LogLine, Run, RunStatus
from wfkit.engine.records import RunView
from wfkit.engine.vocabulary import EventKind
from wfkit.widgets.confirm import Message
from wfkit.widgets.fallback import StaticPicture
from wfkit.widgets.surface import GraphSurface
from wfkit.widgets.timeline import spans_of, timeline_svg

__all__ = ["LoopProgress", "RunMonitor", "logs_html", "loop_progress"]

_SUCCESS = (
    EventKind.STEP_COMPLETED,
    EventKind.DECISION_TAKEN,
    EventKind.SIGNAL_RECEIVED,
    EventKind.APPROVAL_APPROVED,
    EventKind.APPROVAL_REJECTED,
    EventKind.TIMER_FIRED,
    EventKind.JOIN_COMPLETED,
)
_STATUS_COLOURS = {
    "completed": "#2e7d32",
    "failed": "#c62828",
    "cancelled": "#616161",
    "suspended": "#ef6c00",
    "compensating": "#8e24aa",
    "waiting": "#f9a825",
}


# --- for_each progress ------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopProgress:
    """How far the items of one for_each node got: ``37/50, 2 failed``."""

    node_id: str
    total: int
    done: int
    failed: int
    in_progress: int = 0
    steps: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per body node: (items that completed it, items that failed it for good)."""

    @property
    def text(self) -> str:
        """``"37/50, 2 failed"`` (and ``", 3 in progress"`` while items are under way)."""
        return _count_text(self.done, self.total, self.failed, self.in_progress)


def _count_text(done: int, total: int, failed: int, in_progress: int = 0) -> str:
    text = f"{done}/{total}"
    if failed:
        text += f", {failed} failed"
    if in_progress:
        text += f", {in_progress} in progress"
    return text


def _body(workflow: Workflow, fork: str, join: str | None) -> tuple[set[str], set[str]]:
    """The nodes of a for_each body, and those of them that lead into its join."""
    G = workflow.graph
    stack = [v for _, v, k in G.out_edges(fork, keys=True) if k == "each"]
    body: set[str] = set()
    while stack:
        n = stack.pop()
        if n in body or n in (fork, join):
            continue
        body.add(n)
        stack += list(G.successors(n))
    lasts = {n for n in body if join is not None and G.has_edge(n, join)}
    return body, lasts


def _joins(workflow: Workflow) -> dict[str, str]:
    joins: dict[str, str] = {}
    for n in workflow.graph.nodes:
        node = workflow.node(n)
        if node.kind == NodeKind.JOIN:
            joins[node.config.fork] = n
    return joins


def loop_progress(
    workflow: Workflow,
    history: Sequence[Event],
    tokens: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[LoopProgress]:
    """Item progress of every for_each node the run has started, from its history.

    The total is the ``items`` of the node's ``for_each.started`` events; an item is done when
    its branch completed a step that leads into the join, failed when the join recorded its
    ``branch.failed``; per body node, ``step.completed`` and final ``step.failed`` events (those
    that schedule no retry) count items. ``tokens`` (node and status per token) adds the items
    in flight.
    """
    joins = _joins(workflow)
    result = []
    for fork in [n for n in workflow.graph.nodes if workflow.node(n).kind == NodeKind.FOR_EACH]:
        starts = [e for e in history if e.kind == EventKind.FOR_EACH_STARTED and e.node_id == fork]
        if not starts:
            continue
        join = joins.get(fork)
        body, lasts = _body(workflow, fork, join)
        total = sum(int((e.detail or {}).get("items", 0)) for e in starts)
        done: set[str | None] = set()
        failed = 0
        completed: dict[str, set[str | None]] = {n: set() for n in body}
        failures: dict[str, set[str | None]] = {n: set() for n in body}
        for e in history:
            if e.node_id in body:
                if e.kind == EventKind.STEP_COMPLETED:
                    completed[e.node_id].add(e.token)
                elif e.kind == EventKind.STEP_FAILED and "retry_in_s" not in (e.detail or {}):
                    failures[e.node_id].add(e.token)
                if e.kind in _SUCCESS and e.node_id in lasts:
                    done.add(e.token)
            elif e.kind == EventKind.BRANCH_FAILED and e.node_id == join and join is not None:
                failed += 1
        in_progress = sum(
            1 for t in (tokens or {}).values() if t.get("node") in body and not t.get("comp")
        )
        steps = {n: (len(completed[n]), len(failures[n])) for n in sorted(body)}
        result.append(LoopProgress(fork, total, len(done), failed, in_progress, steps))
    return result


def progress_html(progress: Sequence[LoopProgress]) -> str:
    """The progress lines as HTML (empty when the run has no for_each)."""
    lines = []
    for p in progress:
        steps = "".join(
            f'<li class="wfkit-progress-step" data-node="{html.escape(n)}">'
            f"{html.escape(n)}: {_count_text(c, p.total, f)}</li>"
            for n, (c, f) in p.steps.items()
        )
        lines.append(
            f'<div class="wfkit-progress" data-node="{html.escape(p.node_id)}">'
            f"<b>for_each {html.escape(p.node_id)}</b>: "
            f'<span class="wfkit-progress-text">{html.escape(p.text)}</span>'
            f'<ul style="margin:0">{steps}</ul></div>'
        )
    return "".join(lines)


# --- event log ----------------------------------------------------------------------------------


def events_html(history: Sequence[Event], limit: int = 50, node: str | None = None) -> str:
    """The last ``limit`` events (of ``node`` only, when given) as an HTML table, newest last."""
    chosen = [e for e in history if node is None or e.node_id == node][-limit:]
    head = "".join(
        f"<th>{h}</th>" for h in ("#", "at", "event", "node", "attempt", "actor", "error / detail")
    )
    rows = []
    for e in chosen:
        error = (e.error or "").strip()
        last = error.splitlines()[-1] if error else ""
        detail = last or (json.dumps(e.detail, default=str) if e.detail else "")
        cells = (
            str(e.seq),
            f"{e.at:%H:%M:%S}",
            e.kind,
            e.node_id or "",
            "" if e.attempt is None else str(e.attempt),
            e.actor or "",
        )
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        rows.append(
            f'<tr class="wfkit-event" data-kind="{html.escape(e.kind)}">{tds}'
            f'<td title="{html.escape(error)}">{html.escape(_clip(detail, 120))}</td></tr>'
        )
    scope = f" of {html.escape(node)}" if node else ""
    caption = f"<caption style='text-align:left'>last {len(chosen)} events{scope}</caption>"
    return (
        "<style>.wfkit-events td,.wfkit-events th{padding:1px 6px;text-align:left;line-height:1.35}"
        "</style>"
        '<table class="wfkit-events" style="font-size:12px;border-collapse:collapse">'
        f"{caption}<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def logs_html(lines: Sequence[LogLine], limit: int = 50, node: str | None = None) -> str:
    """The last ``limit`` log lines (of ``node`` only, when given) as an HTML table, newest
    last; a long message is clipped, its whole text in the row's tooltip."""
    chosen = [line for line in lines if node is None or line.node_id == node][-limit:]
    head = "".join(f"<th>{h}</th>" for h in ("at", "level", "node", "attempt", "message"))
    rows = []
    for line in chosen:
        cell = ".".join(str(i) for i in line.loop_path)
        where = line.node_id + (f" [{cell}]" if cell else "")
        if line.activity and line.activity != line.node_id:
            where += f" ({line.activity})"
        cells = (f"{line.at:%H:%M:%S}", line.level, where, str(line.attempt))
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        rows.append(
            f'<tr class="wfkit-log" data-level="{html.escape(line.level)}" '
            f'data-node="{html.escape(line.node_id)}">{tds}'
            f'<td title="{html.escape(line.message)}" style="white-space:pre-wrap">'
            f"{html.escape(_clip(line.message, 300))}</td></tr>"
        )
    scope = f" of {html.escape(node)}" if node else ""
    caption = f"<caption style='text-align:left'>last {len(chosen)} log lines{scope}</caption>"
    return (
        "<style>.wfkit-logs td,.wfkit-logs th{padding:1px 6px;text-align:left;line-height:1.35;"
        "vertical-align:top}</style>"
        '<table class="wfkit-logs" style="font-size:12px;border-collapse:collapse">'
        f"{caption}<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- the widget ---------------------------------------------------------------------------------


class RunMonitor(StaticPicture, widgets.VBox):
    """Watch one run live: graph colours, item progress, explain line, timeline, data, events.

    Parameters
    ----------
    engine : Engine
        The engine the run lives in.
    run : Run or str
        The run, or its id.
    interval : float
        Seconds between polls of the background thread.
    events : int
        How many of the latest events the log shows (and of the latest lines the activities
        logged: those of the selected node, or of every node).
    autostart : bool
        Start the background thread at once (else call :meth:`start`, or :meth:`refresh`).
    until_terminal : bool
        Stop polling once the run completed, failed or was cancelled (after a last update);
        ``False`` polls until :meth:`close`.

    Examples
    --------
    >>> import wfkit as wf
    >>> from wfkit.widgets import RunMonitor
    >>> reg = wf.ActivityRegistry()
    >>> reg.register("docs.step", lambda ctx: None)
    >>> engine = wf.Engine(":memory:", registry=reg)
    >>> _ = engine.register(wf.Workflow("one", 1).start_with("docs.step"))
    >>> run = engine.start("one", {})
    >>> engine.run_until_idle()
    >>> monitor = RunMonitor(engine, run, autostart=False)
    >>> monitor.surface.status
    {'docs.step': 'succeeded'}
    >>> monitor.close(); engine.close()
    """

    def __init__(
        self,
        engine: Engine,
        run: Run | str,
        interval: float = 0.5,
        *,
        events: int = 50,
        autostart: bool = True,
        until_terminal: bool = True,
    ) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._parts: list[Any] = []
        self.engine = engine
        self.run = run if isinstance(run, Run) else engine.run(run)
        self.interval = interval
        self.max_events = events
        self.until_terminal = until_terminal
        self.workflow: Workflow = self.run.workflow
        self.header_html = self._html("wfkit-monitor-header")
        self.explain_html = self._html("wfkit-monitor-explain")
        self.surface = GraphSurface()
        self.surface.add_class("wfkit-monitor-graph")
        self.progress_html = self._html("wfkit-monitor-progress")
        self.timeline_html = self._html("wfkit-monitor-timeline")
        self.data_html = self._html("wfkit-monitor-data")
        self.events_html = self._html("wfkit-monitor-events")
        self.logs_html = self._html("wfkit-monitor-logs")
        self.error = Message("wfkit-monitor-error")
        self._draw()
        super().__init__(
            [
                self.header_html,
                self.explain_html,
                self.error,
                self.surface,
                self.progress_html,
                widgets.HTML("<b>Timeline</b>"),
                self.timeline_html,
                widgets.HBox(
                    [
                        widgets.VBox([widgets.HTML("<b>Data</b>"), self.data_html]),
                        widgets.VBox([widgets.HTML("<b>Events</b>"), self.events_html]),
                    ]
                ),
                widgets.HTML("<b>Logs</b>"),
                self.logs_html,
            ]
        )
        self.add_class("wfkit-monitor")
        self._parts = [
            self.surface,
            self.error,
            self.header_html,
            self.explain_html,
            self.progress_html,
            self.timeline_html,
            self.data_html,
            self.events_html,
            self.logs_html,
        ]
        self.status: RunStatus = RunStatus.PENDING
        self.history: list[Event] = []
        self.logs: list[LogLine] = []
        self._signature: tuple[int, str] | None = None
        self.surface.observe(self._on_select, names="selected")
        self.refresh()
        if autostart:
            self.start()

    def _draw(self) -> None:
        try:
            self.surface.draw(
                self.workflow.graph, title=f"{self.workflow.id} v{self.workflow.version}"
            )
        except RenderingUnavailable as exc:
            self.error.error(str(exc))

    @staticmethod
    def _html(css_class: str) -> widgets.HTML:
        view = widgets.HTML(value="")
        view.add_class(css_class)
        return view

    # --- polling ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the background thread polls."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start (or restart) the background thread; a no-op while it runs."""
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._poll, name=f"wfkit-monitor-{self.run.id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the background thread (the widget stays as it is)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(2 * self.interval, 1.0) + 5)

    def close(self) -> None:
        """Stop polling and close the widget and its parts."""
        self.stop()
        for part in self._parts:
            part.close()
        super().close()

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except Exception as exc:  # the engine closed, or a read failed: say so, stop
                self.error.error(
                    f"the monitor stopped: {type(exc).__name__}: {exc}; "
                    "call monitor.start() to watch again"
                )
                return
            if self.until_terminal and self.status.terminal:
                return

    # --- one update ---------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Read the run once and update what changed; True when anything did.

        The history is read only when the run's last event moved on; the explain line and the
        timeline (whose open bars run to "now") are recomputed on every call.
        """
        with self._lock:
            state = self.run.view()
            status = state.status
            signature = (state.seq, status.value)
            changed = False
            if signature != self._signature:
                self.status, self.history = status, self.run.history()
                self.logs = self.run.logs()
                self._signature = signature
                workflow = self.run.workflow
                if workflow is not self.workflow:  # the run grew (engine.append): its own graph
                    self.workflow = workflow
                    self._draw()
                    changed = True
                changed |= self._show_progress(state)
            in_flight = state.in_flight
            spans = spans_of(self.history, self.engine.clock.now(), in_flight)
            svg = timeline_svg(spans, title=f"run {self.run.id}")
            changed |= self._set(self.timeline_html, "value", svg)
            changed |= self._set(self.explain_html, "value", self._explain(self.run.explain()))
            return changed

    def _show_progress(self, state: RunView) -> bool:
        """Update what follows from the history: statuses, progress, header, data, events."""
        changed = self._set(self.surface, "status", self.run.node_statuses())
        changed |= self._set(self.header_html, "value", self._header(self.status))
        progress = loop_progress(self.workflow, self.history, state.tokens)
        changed |= self._set(self.progress_html, "value", progress_html(progress))
        tips = {p.node_id: f"for_each {p.node_id}: {p.text}" for p in progress}
        changed |= self._set(self.surface, "tooltips", tips)
        data = json.dumps(state.data, indent=2, default=str, ensure_ascii=False)
        changed |= self._set(
            self.data_html,
            "value",
            '<pre class="wfkit-data" style="font-size:12px;margin:0;line-height:1.35">'
            f"{html.escape(data, quote=False)}</pre>",
        )
        return self._render_events() or changed

    @staticmethod
    def _set(widget: Any, name: str, value: Any) -> bool:
        if getattr(widget, name) == value:
            return False
        setattr(widget, name, value)
        return True

    def _render_events(self) -> bool:
        selected = self.surface.selected or None
        node = selected if isinstance(selected, str) else None
        text = events_html(self.history, self.max_events, node)
        changed = self._set(self.events_html, "value", text)
        lines = logs_html(self.logs, self.max_events, node)
        return self._set(self.logs_html, "value", lines) or changed

    def _on_select(self, change: dict[str, Any]) -> None:
        with self._lock:
            self._render_events()

    def _header(self, status: RunStatus) -> str:
        colour = _STATUS_COLOURS.get(status.value, "#1565c0")
        return (
            f"<b>run {html.escape(self.run.id)}</b> · {html.escape(self.workflow.id)} "
            f"v{self.workflow.version} · "
            f'<span class="wfkit-status wfkit-status-{status.value}" '
            f'style="color:{colour};font-weight:bold">{status.value}</span>'
        )

    @staticmethod
    def _explain(text: str) -> str:
        return f'<span class="wfkit-explain-text">{html.escape(text)}</span>'
