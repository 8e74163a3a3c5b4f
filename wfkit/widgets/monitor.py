"""``RunMonitor``: one run, live — status colours on the graph, for_each progress, the explain
line, a timeline of attempts, the data document, the event log and the activities' log lines;
a click on a node shows its attempts (input, output, error with traceback, log lines), and a
stepper goes back through the run's stored checkpoints to show the run as it was at each.

The picture is drawn once; live status is a dict of CSS classes on the :class:`GraphSurface`, so
updates never re-run the layout. A daemon thread polls the engine every ``interval`` seconds
(a busy notebook cell processes no widget messages, so a loop in a cell could not do this) and
touches a trait only when its value changed.

Stepping through history (``monitor.stepper``, a :class:`~wfkit.widgets.stepper.HistoryStepper`):
at a past checkpoint the graph shows the node statuses as they were then
(``run.node_statuses_at``), the data column the document rebuilt from the stored patches
(``run.data_at``), the timeline and the node details what had happened by then, and the event
log marks the checkpoint's events; ``live`` follows the run again.

CSS hooks: ``wfkit-monitor`` (the whole widget), ``wfkit-monitor-status`` (the status line:
``wfkit-monitor-header``, ``wfkit-monitor-explain`` and ``wfkit-monitor-workers``, the place
kept for a workers indicator, see :attr:`RunMonitor.worker_slot`), ``wfkit-monitor-graph`` (the
surface), ``wfkit-monitor-node`` (the selected node's details, see
:mod:`wfkit.widgets.node_details`), ``wfkit-stepper``, ``wfkit-monitor-progress``,
``wfkit-monitor-timeline``, ``wfkit-monitor-data`` (its ``pre.wfkit-data`` scrolls inside its
own box), ``wfkit-monitor-events`` (rows are ``tr.wfkit-event``, the current checkpoint's
``tr.wfkit-event-current``), ``wfkit-monitor-logs`` (the lines activities logged through
``ctx.logger``; rows are ``tr.wfkit-log``), ``wfkit-monitor-error``.
"""

from __future__ import annotations

import html
import json
import threading
from typing import Any

import ipywidgets as widgets

from wfkit.definition.rendering import RenderingUnavailable
from wfkit.definition.workflow import Workflow
from wfkit.engine import Engine, Event, LogLine, Run, RunStatus, StoredCheckpoint
from wfkit.engine.attempts import attempts_of
from wfkit.engine.records import RunView, TokenView
from wfkit.engine.replay import documents_at, statuses_at
from wfkit.engine.vocabulary import NodeStatus, TokenState
from wfkit.widgets.confirm import Message
from wfkit.widgets.event_log import events_html, logs_html
from wfkit.widgets.fallback import StaticPicture
from wfkit.widgets.live import Live, stop_live
from wfkit.widgets.node_details import node_details_html
from wfkit.widgets.progress import LoopProgress, loop_progress, progress_html
from wfkit.widgets.stepper import HistoryStepper
from wfkit.widgets.surface import GraphSurface
from wfkit.widgets.timeline import spans_of, timeline_svg
from wfkit.widgets.workers import WorkerStatus

__all__ = ["LoopProgress", "RunMonitor", "events_html", "logs_html", "loop_progress"]

_STATUS_COLOURS = {
    "completed": "var(--jp-success-color1, #2e7d32)",
    "failed": "var(--jp-error-color1, #c62828)",
    "cancelled": "var(--jp-ui-font-color2, #616161)",
    "suspended": "var(--jp-warn-color1, #ef6c00)",
    "compensating": "#8e24aa",
    "waiting": "var(--jp-warn-color1, #f9a825)",
}
_FIT = (  # an HTML widget's content shrinks to the widget, so wide content scrolls inside it
    "<style>.wfkit-monitor .widget-html-content{min-width:0;max-width:100%}</style>"
)
_BOX = (
    "font-size:12px;margin:0;line-height:1.35;white-space:pre;overflow:auto;max-height:32em;"
    "max-width:100%;box-sizing:border-box;padding:4px 6px;"
    "font-family:var(--jp-code-font-family,monospace);"
    "background:var(--jp-layout-color2,#f5f5f5);color:var(--jp-content-font-color1,#222);"
    "border:1px solid var(--jp-border-color2,#ddd);border-radius:3px"
)


def _column(title: str, body: widgets.Widget, basis: str = "480px") -> widgets.VBox:
    """A column of the data/events row that shrinks with the page (its content scrolls).

    ``basis`` is the width it asks for: the row wraps (each column then takes the full width)
    when the two do not fit side by side at those widths."""
    return widgets.VBox(
        [widgets.HTML(f"<b>{title}</b>"), body],
        layout=widgets.Layout(flex=f"1 1 {basis}", min_width="0", overflow="auto"),
    )


class RunMonitor(StaticPicture, widgets.VBox):
    """Watch one run live: graph colours, item progress, explain line, timeline, data, events;
    click a node for its attempts; step back through the run's checkpoints.

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

    Raises
    ------
    UsageError
        When ``interval`` is not a positive number of seconds.

    Attributes
    ----------
    worker_slot : ipywidgets.Box
        The end of the status line, kept for a small indicator of who drives the run (for
        example whether a worker runs in this kernel): ``monitor.worker_slot.children =
        (indicator,)``. Empty by default.
    stepper : HistoryStepper
        Chooses the checkpoint shown (``stepper.go(i)``; ``stepper.live_button.value = True``
        to follow the run again).

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
    >>> monitor.stepper.go(0)  # back to the run's first checkpoint
    >>> monitor.surface.status
    {'docs.step': 'running'}
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
        self._lock = threading.RLock()
        self._parts: list[Any] = []
        self.engine = engine
        self.run = run if isinstance(run, Run) else engine.run(run)
        # checked before anything is shown: a bad interval raises
        self.live = Live(
            self._tick,
            interval,
            f"monitor-{self.run.id}",
            self._stopped,
            hint="e.g. RunMonitor(engine, run, interval=0.5)",
        )
        self.interval = interval
        self.max_events = events
        self.until_terminal = until_terminal
        self.workflow: Workflow = self.run.workflow
        self.header_html = self._html("wfkit-monitor-header")
        self.explain_html = self._html("wfkit-monitor-explain")
        self.explain_html.layout = widgets.Layout(flex="1 1 auto", min_width="0")
        self.worker_slot = widgets.Box(layout=widgets.Layout(flex="0 0 auto"))
        self.worker_slot.add_class("wfkit-monitor-workers")
        self.workers = WorkerStatus(engine, self.run.id)  # "ready: no worker ..." [Start workers]
        self.worker_slot.children = (self.workers,)
        self.status_line = widgets.HBox(
            [self.header_html, self.explain_html, self.worker_slot],
            layout=widgets.Layout(align_items="center", flex_flow="row wrap"),
        )
        self.status_line.add_class("wfkit-monitor-status")
        self.surface = GraphSurface()
        self.surface.add_class("wfkit-monitor-graph")
        self.node_html = self._html("wfkit-monitor-node")
        self.node_html.layout = widgets.Layout(display="none")
        self.stepper = HistoryStepper()
        self.progress_html = self._html("wfkit-monitor-progress")
        self.timeline_html = self._html("wfkit-monitor-timeline")
        self.timeline_html.layout = widgets.Layout(overflow="auto")
        self.data_html = self._html("wfkit-monitor-data")
        self.events_html = self._html("wfkit-monitor-events")
        self.logs_html = self._html("wfkit-monitor-logs")
        for view in (self.data_html, self.events_html, self.logs_html):
            view.layout = widgets.Layout(overflow="auto")
        self.error = Message("wfkit-monitor-error")
        self._draw()
        super().__init__(
            [
                self.status_line,
                self.error,
                self.surface,
                self.node_html,
                widgets.HTML("<b>History</b>"),
                self.stepper,
                self.progress_html,
                widgets.HTML("<b>Timeline</b>"),
                self.timeline_html,
                widgets.HBox(
                    [
                        _column("Data", self.data_html),
                        # the events table is some 700 px wide before its detail column wraps:
                        # narrower, Data and Events stack (Notebook 7's wide column is ~1120 px)
                        _column("Events", self.events_html, basis="720px"),
                    ],
                    layout=widgets.Layout(flex_flow="row wrap"),
                ),
                widgets.HTML("<b>Logs</b>"),
                self.logs_html,
            ],
            layout=widgets.Layout(max_width="100%"),
        )
        self.add_class("wfkit-monitor")
        self._parts = [
            self.surface,
            self.error,
            self.header_html,
            self.explain_html,
            self.worker_slot,
            self.status_line,
            self.node_html,
            self.stepper,
            self.progress_html,
            self.timeline_html,
            self.data_html,
            self.events_html,
            self.logs_html,
        ]
        self.status: RunStatus = RunStatus.PENDING
        self.history: list[Event] = []
        self.logs: list[LogLine] = []
        self.points: list[StoredCheckpoint] = []
        self._state: RunView | None = None
        self._signature: tuple[int, str] | None = None
        self.surface.observe(self._on_select, names="selected")
        self.stepper.on_change(self._on_point)
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
        return self.live.running

    def start(self) -> None:
        """Start (or restart) the background thread; a no-op while it runs."""
        self.live.start()

    def stop(self) -> None:
        """Stop the background thread (the widget stays as it is)."""
        stop_live(self, "live")

    def close(self) -> None:
        """Stop polling and close the widget and its parts."""
        self.stop()
        for part in self._parts:
            part.close()
        super().close()

    def _tick(self) -> bool:
        """One poll of the background thread; False (the thread ends) once the run ended,
        with ``until_terminal``."""
        self.refresh()
        return not (self.until_terminal and self.status.terminal)

    def _stopped(self, exc: Exception) -> None:
        self.error.error(
            f"the monitor stopped: {type(exc).__name__}: {exc}; call monitor.start() to watch again"
        )

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
            self._state = state
            if signature != self._signature:
                self.status, self.history = status, self.run.history()
                self.logs = self.run.logs()
                self.points = self.run.checkpoints()
                self.stepper.set_points(self.points)
                self._signature = signature
                workflow = self.run.workflow
                if workflow is not self.workflow:  # the run grew (engine.append): its own graph
                    self.workflow = workflow
                    self._draw()
                    changed = True
                changed |= self._show_point()
            changed |= self._show_timeline()
            explain = self._explain(self.run.explain(), status)
            changed |= self._set(self.explain_html, "value", explain)
            self.workers.refresh()  # shown while the run has ready work and nothing drives it
            return changed

    def _at(self) -> tuple[StoredCheckpoint | None, list[Event], dict[str, TokenView]]:
        """The point shown (None: live), the events up to it and the tokens then."""
        point = self.stepper.point
        state = self._state
        if point is None:
            return None, self.history, state.tokens if state is not None else {}
        history = [e for e in self.history if e.seq <= point.seq]
        return point, history, self.run.tokens_at(point.seq)

    def _show_point(self) -> bool:
        """Update what follows from the history at the point shown: statuses, progress,
        header, data, events, node details."""
        point, history, tokens = self._at()
        statuses: dict[str, NodeStatus]
        if point is None:
            statuses = self.run.node_statuses()
            data: Any = self._state.data if self._state is not None else {}
            caption = "live"
        else:
            statuses = statuses_at(history, tokens)
            data = self.run.data_at(point.seq)
            caption = f"after {point.label} at {point.at:%H:%M:%S}"
        # the surface holds what the page draws: the statuses' plain values
        shown = {node: status.value for node, status in statuses.items()}
        changed = self._set(self.surface, "status", shown)
        changed |= self._set(self.header_html, "value", self._header(self.status))
        progress = loop_progress(self.workflow, history, tokens)
        changed |= self._set(self.progress_html, "value", progress_html(progress))
        tips = {p.node_id: f"for_each {p.node_id}: {p.text}" for p in progress}
        changed |= self._set(self.surface, "tooltips", tips)
        text = json.dumps(data, indent=2, default=str, ensure_ascii=False)
        changed |= self._set(
            self.data_html,
            "value",
            f'<div class="wfkit-data-caption" style="font-size:11px;'
            f'color:var(--jp-ui-font-color2,#555)">{html.escape(caption)}</div>'
            f'<pre class="wfkit-data" style="{_BOX}">{html.escape(text, quote=False)}</pre>',
        )
        return self._render_events() or changed

    def _show_timeline(self) -> bool:
        point, history, tokens = self._at()
        if point is None:
            now = self.engine.clock.now()
            in_flight = self._state.in_flight if self._state is not None else {}
        else:
            now = point.at
            in_flight = {
                t: (tok.node_id, tok.attempt)
                for t, tok in tokens.items()
                if tok.state == TokenState.READY
            }
        spans = spans_of(history, now, in_flight)
        svg = timeline_svg(spans, title=f"run {self.run.id}")
        return self._set(self.timeline_html, "value", svg)

    @staticmethod
    def _set(widget: Any, name: str, value: Any) -> bool:
        if getattr(widget, name) == value:
            return False
        setattr(widget, name, value)
        return True

    def _render_events(self) -> bool:
        selected = self.surface.selected or None
        node = selected if isinstance(selected, str) else None
        point = self.stepper.point or (self.points[-1] if self.points else None)
        current = (point.first_seq, point.seq) if point is not None else None
        text = events_html(self.history, self.max_events, node, current)
        changed = self._set(self.events_html, "value", text)
        upto = point.seq if self.stepper.point is not None and point is not None else None
        logs = [line for line in self.logs if upto is None or line.seq <= upto]
        lines = logs_html(logs, self.max_events, node)
        changed |= self._set(self.logs_html, "value", lines)
        return self._render_node(node) or changed

    def _render_node(self, node: str | None) -> bool:
        """The selected node's details (hidden when no node is selected)."""
        if node is None or node not in self.workflow.graph.nodes:
            changed = self._set(self.node_html.layout, "display", "none")
            return self._set(self.node_html, "value", "") or changed
        _point, history, tokens = self._at()
        attempts = attempts_of(history, self.points, node)
        seqs = {a.input_seq for a in attempts[-20:]}
        inputs = documents_at(self.engine.runtime, self.run.id, seqs)
        lines = [line for line in self.logs if line.node_id == node]
        running = [
            (tok.attempt, () if tok.loop_index is None else (tok.loop_index,))
            for tok in tokens.values()
            if tok.node_id == node and tok.state == TokenState.READY
        ]
        spec = self.workflow.node(node)
        title = spec.kind.value + (f" · activity {spec.activity}" if spec.activity else "")
        text = node_details_html(node, title, attempts, lines, inputs, running)
        changed = self._set(self.node_html, "value", text)
        return self._set(self.node_html.layout, "display", "") or changed

    def _on_select(self, change: dict[str, Any]) -> None:
        with self._lock:
            self._render_events()

    def _on_point(self, point: StoredCheckpoint | None) -> None:
        with self._lock:
            self._show_point()
            self._show_timeline()

    def _header(self, status: RunStatus) -> str:
        colour = _STATUS_COLOURS.get(status.value, "var(--jp-brand-color1, #1565c0)")
        return (
            f"{_FIT}<b>run {html.escape(self.run.id)}</b> · {html.escape(self.workflow.id)} "
            f"v{self.workflow.version} · "
            f'<span class="wfkit-status wfkit-status-{status.value}" '
            f'style="color:{colour};font-weight:bold">{status.value}</span>'
        )

    @staticmethod
    def _explain(text: str, status: RunStatus) -> str:
        """The explain line after the header, which already names the status: the sentence
        without the status word it starts with ("completed" alone adds nothing, after "failed"
        the sentence "failed: boom" reads "boom"), so the status line never says it twice."""
        word = status.value
        ended = status.terminal or status == RunStatus.SUSPENDED  # "waiting for ..." reads on
        if text == word or (ended and text.startswith((f"{word}:", f"{word} "))):
            text = text[len(word) :].lstrip(" :")
        if not text:
            return ""
        return f'<span class="wfkit-explain-text">{html.escape(text)}</span>'
