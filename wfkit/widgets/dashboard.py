"""``Dashboard``: tabs over a filterable run table, the selected run's monitor, the inbox and
recovery.

The tab titles carry counts ("Inbox (2)", "Recovery (1)") and, with the table, keep themselves
up to date from one background thread; a run with work ready and no worker in this kernel reads
"ready: no worker is running in this kernel" in the table, above which a bar offers Start
workers. :meth:`Dashboard.show_in_sidebar` opens the dashboard in a JupyterLab side panel.

CSS hooks: ``wfkit-dashboard`` (the tabs), ``wfkit-dashboard-runs`` (the runs tab),
``wfkit-dashboard-status`` and ``wfkit-dashboard-workflow`` (dropdowns),
``wfkit-dashboard-since`` (text), ``wfkit-dashboard-refresh``, ``wfkit-dashboard-message``,
``wfkit-dashboard-table`` (rows are ``tr.wfkit-run-row``, plus ``wfkit-stalled`` for a run
with work ready and no worker), ``wfkit-dashboard-select`` (the list to pick a run from),
``wfkit-dashboard-monitor`` (the monitor tab), ``wfkit-workers`` (the workers bar); the inbox
and recovery keep their own hooks (``wfkit-inbox...``, ``wfkit-recovery...``).
"""

from __future__ import annotations

import html
import threading
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

import ipywidgets as widgets
from IPython.display import display

from wfkit.definition.durations import parse_duration
from wfkit.engine import Engine, RunInfo, RunStatus
from wfkit.errors import UsageError
from wfkit.widgets.confirm import Message, fit
from wfkit.widgets.fallback import StaticPicture
from wfkit.widgets.inbox import Inbox
from wfkit.widgets.live import Live, stop_live
from wfkit.widgets.monitor import RunMonitor
from wfkit.widgets.recovery import Recovery
from wfkit.widgets.workers import NO_WORKER, WorkerStatus, stalled

__all__ = ["TABS", "Dashboard", "parse_since", "runs_html"]

TABS = ("Runs", "Monitor", "Inbox", "Recovery")
"""The tabs, in order (``dashboard.selected_index`` counts from 0; the shown titles of Inbox and
Recovery carry counts: ``dashboard.titles``)."""

_MOVING = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.COMPENSATING)

TAB_CSS = (
    "<style>"
    # the tabs take the width of their titles ("Recovery (12)") and wrap to a second line in a
    # narrow column or side panel, instead of being shrunk into "Recov..."
    ".wfkit-dashboard > .lm-TabBar{min-height:fit-content;height:auto}"
    ".wfkit-dashboard > .lm-TabBar > .lm-TabBar-content{flex-wrap:wrap}"
    ".wfkit-dashboard > .lm-TabBar .lm-TabBar-tab{flex:0 0 auto;min-width:fit-content}"
    # the run table is as wide as the tab, its cells wrapping (not the content's own width)
    ".wfkit-dashboard-table > .widget-html-content{flex:1 1 auto;min-width:0;max-width:100%}"
    "</style>"
)

ALL = ""
"""The dropdown value meaning "any"."""


def parse_since(text: str, now: datetime) -> datetime | None:
    """The start of the "since" filter: a date, a date and time, or a duration back from ``now``.

    Raises
    ------
    ValueError
        When the text is none of those.

    Examples
    --------
    >>> now = datetime(2026, 1, 8, 12, 0)
    >>> parse_since("2026-01-02", now), parse_since("2d", now), parse_since("", now)
    (datetime.datetime(2026, 1, 2, 0, 0), datetime.datetime(2026, 1, 6, 12, 0), None)
    """
    text = text.strip()
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        pass
    else:
        return at if at.tzinfo is None else _utc(at)
    try:
        return now - parse_duration(text)
    except ValueError:
        raise ValueError(
            f"'since' {text!r} is neither a date (2026-01-31), a time (2026-01-31T08:00) nor a "
            "duration back from now (2h, 7d)"
        ) from None


def _utc(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(tzinfo=None)


def runs_html(infos: Sequence[RunInfo], stalled: Collection[str] = ()) -> str:
    """The run table as HTML; runs in ``stalled`` read "ready: no worker is running in this
    kernel" by their status. The table wraps its cells (an error is shown whole, its last line
    first) and scrolls sideways rather than clipping."""
    head = "".join(
        f'<th class="wfkit-col-{h}">{h}</th>'
        for h in ("run", "workflow", "version", "status", "created", "ended", "error")
    )
    rows = []
    for r in infos:
        error = (r.error or "").strip()
        last = error.splitlines()[-1] if error else ""
        status = html.escape(r.status.value)
        extra = ""
        if r.run_id in stalled:
            status += f'<br><small class="wfkit-no-worker">{html.escape(NO_WORKER)}</small>'
            extra = " wfkit-stalled"
        cells = (
            ("run", html.escape(r.run_id)),
            ("workflow", html.escape(r.workflow_id)),
            ("version", str(r.version)),
            ("status", status),
            ("created", f"{r.created_at:%Y-%m-%d %H:%M:%S}"),
            ("ended", f"{r.ended_at:%Y-%m-%d %H:%M:%S}" if r.ended_at else ""),
        )
        tds = "".join(f'<td class="wfkit-col-{name}">{c}</td>' for name, c in cells)
        # a dotted name (a module path, an exception class) may wrap after its dots
        shown = html.escape(last).replace(".", ".<wbr>")
        tds += f'<td class="wfkit-run-error" title="{html.escape(error)}">{shown}</td>'
        rows.append(
            f'<tr class="wfkit-run-row wfkit-status-{r.status.value}{extra}" '
            f'data-run="{html.escape(r.run_id)}">{tds}</tr>'
        )
    return (
        "<style>.wfkit-runs td,.wfkit-runs th{padding:1px 6px;text-align:left;line-height:1.35;"
        "vertical-align:top;border-bottom:1px solid var(--jp-border-color2, #dddddd)}"
        ".wfkit-runs td:first-child{white-space:nowrap}"
        ".wfkit-runs td.wfkit-run-error{min-width:10em}"
        ".wfkit-runs .wfkit-no-worker{color:var(--jp-warn-color0, #e65100);white-space:normal}"
        ".wfkit-runs td.wfkit-run-error{color:var(--jp-error-color1, #c62828)}"
        # in a narrow place (a side panel) the table drops its version and created columns
        # (the run's detail has them) rather than scrolling sideways
        "@container wfkit-runs (max-width: 620px){.wfkit-runs .wfkit-col-version,"
        ".wfkit-runs .wfkit-col-created{display:none}.wfkit-runs td.wfkit-run-error"
        "{min-width:6em}}</style>"
        '<div style="max-width:100%;overflow-x:auto;container:wfkit-runs / inline-size">'
        '<table class="wfkit-runs" style="font-size:12px;border-collapse:collapse;'
        'color:var(--jp-ui-font-color1, #222)">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


class Dashboard(StaticPicture, widgets.Tab):
    """Runs (filter by status, workflow and since; pick one), its monitor, inbox, recovery.

    Parameters
    ----------
    engine : Engine
        The engine to operate.
    actor : str, optional
        Who acts in the inbox and recovery tabs; the OS user by default.
    interval : float
        Poll interval of the monitor of the selected run, in seconds.
    limit : int
        At most this many runs are listed.
    refresh_every : float, optional
        Seconds between updates of the table, the tab counts, the inbox and recovery from one
        background thread (1 by default); None updates them only on Refresh (and when a tab
        opens). :meth:`close` stops it.

    Examples
    --------
    >>> import wfkit as wf
    >>> from wfkit.widgets import Dashboard
    >>> board = Dashboard(wf.Engine(":memory:"), actor="ana", refresh_every=None)
    >>> board.titles
    ('Runs', 'Monitor', 'Inbox (0)', 'Recovery (0)')
    >>> board.close()
    """

    def __init__(
        self,
        engine: Engine,
        actor: str | None = None,
        *,
        interval: float = 0.5,
        limit: int = 500,
        refresh_every: float | None = 1.0,
    ) -> None:
        # checked first: a bad interval raises before anything is shown
        self.live = Live.every(refresh_every, self._tick, "dashboard", self._stopped)
        self.engine = engine
        self.interval = interval
        self.limit = limit
        self._lock = threading.RLock()  # the update thread and the user's changes take turns
        wide = {"description_width": "initial"}  # labels are never cut to "work..."
        self.status = self._control(
            widgets.Dropdown(
                options=[("any status", ALL), *[(s.value, s.value) for s in RunStatus]],
                value=ALL,
                description="status",
                style=wide,
                layout=widgets.Layout(width="auto"),
            ),
            "wfkit-dashboard-status",
        )
        self.workflow = self._control(
            widgets.Dropdown(
                options=[("any workflow", ALL)],
                value=ALL,
                description="workflow",
                style=wide,
                layout=widgets.Layout(width="auto"),
            ),
            "wfkit-dashboard-workflow",
        )
        self.since = self._control(
            widgets.Text(
                value="",
                description="since",
                placeholder="2026-01-31, or 2h, 7d",
                style=wide,
                layout=widgets.Layout(width="auto"),
            ),
            "wfkit-dashboard-since",
        )
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh", layout=fit())
        self.refresh_button.add_class("wfkit-dashboard-refresh")
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.message = Message("wfkit-dashboard-message")
        self.workers = WorkerStatus(engine)
        self.table = widgets.HTML(value="", layout=widgets.Layout(min_width="0"))
        self.table.add_class("wfkit-dashboard-table")
        self.select = widgets.Select(
            options=[],
            value=None,
            rows=8,
            description="open",
            style=wide,
            layout=widgets.Layout(width="auto", max_width="100%"),
        )
        self.select.add_class("wfkit-dashboard-select")
        self.runs_tab = widgets.VBox(
            [
                widgets.HTML(TAB_CSS, layout=widgets.Layout(height="0px", margin="0")),
                widgets.HBox(
                    [self.status, self.workflow, self.since, self.refresh_button],
                    layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
                ),
                self.workers,
                self.message,
                self.select,
                self.table,
            ]
        )
        self.runs_tab.add_class("wfkit-dashboard-runs")
        self.monitor_tab = widgets.VBox([widgets.HTML("Pick a run in the Runs tab.")])
        self.monitor_tab.add_class("wfkit-dashboard-monitor")
        self.monitor: RunMonitor | None = None
        self.inbox = Inbox(engine, actor, refresh_every=None)  # updated by this thread
        self.recovery = Recovery(engine, actor, refresh_every=None)
        self.infos: list[RunInfo] = []
        self.stalled: set[str] = set()
        self._relisting = False
        self.sidecar: Any = None
        super().__init__(children=[self.runs_tab, self.monitor_tab, self.inbox, self.recovery])
        self.add_class("wfkit-dashboard")
        self.inbox.on_count(lambda _n: self._retitle())
        self.recovery.on_count(lambda _n: self._retitle())
        self.refresh()
        for control in (self.status, self.workflow, self.since):
            control.observe(lambda _c: self.refresh_runs(), names="value")
        self.select.observe(self._on_pick, names="value")
        self.observe(self._on_tab, names="selected_index")
        if self.live is not None:
            self.live.start()

    @staticmethod
    def _control(widget: Any, css_class: str) -> Any:
        widget.add_class(css_class)
        return widget

    def _retitle(self) -> None:
        titles = (
            "Runs",
            "Monitor",
            f"Inbox ({self.inbox.count})",
            f"Recovery ({self.recovery.count})",
        )
        if tuple(self.titles) != titles:  # type: ignore[has-type]
            self.titles = titles

    def select_tab(self, name: str) -> None:
        """Switch to the tab ``name`` (one of :data:`TABS`, without its count)."""
        if name not in TABS:
            raise ValueError(f"there is no tab {name!r}; the tabs are {', '.join(TABS)}")
        self.selected_index = TABS.index(name)

    # --- keeping up to date ---------------------------------------------------------------------

    def _tick(self) -> None:
        """One update of the background thread: the table (only when what it shows changed),
        the inbox, recovery and the tab counts."""
        self.refresh_runs(quiet=True)
        # the three workers bars watch the whole engine: one answer serves them all
        self.inbox.refresh(stalled_now=self.workers.shown)
        self.recovery.refresh(stalled_now=self.workers.shown)

    def _stopped(self, exc: Exception) -> None:
        self.message.error(
            f"the dashboard stopped updating: {type(exc).__name__}: {exc}; press Refresh to "
            "read it again"
        )

    # --- the run table ------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read everything again: workflows, runs, inbox and recovery."""
        with self._lock:
            known = [(wid, wid) for wid in self.engine.workflows()]
            options = [("any workflow", ALL), *known]
            if list(self.workflow.options) != options:
                current = self.workflow.value
                self.workflow.options = options
                self.workflow.value = current if (current, current) in known else ALL
            self.refresh_runs()
            self.inbox.refresh(stalled_now=self.workers.shown)
            self.recovery.refresh(stalled_now=self.workers.shown)
            self._retitle()
            if self.monitor is not None:
                self.monitor.refresh()

    def refresh_runs(self, *, quiet: bool = False) -> None:
        """Apply the filters and list the runs again (the picked run stays picked if listed).

        ``quiet`` (the background thread) leaves the table, the list and the message alone
        when the runs shown did not change.
        """
        with self._lock:
            self.workers.refresh()  # the inbox and recovery bars reuse its answer
            try:
                since = parse_since(self.since.value, self.engine.clock.now())
            except ValueError as exc:
                if not quiet:
                    self.message.error(str(exc))
                return
            infos = self.engine.runs(
                status=self.status.value or None,
                workflow=self.workflow.value or None,
                limit=self.limit,
            )
            if since is not None:
                infos = [r for r in infos if r.created_at >= since]
            stuck = {
                r.run_id for r in infos if r.status in _MOVING and stalled(self.engine, r.run_id)
            }
            if quiet and (infos, stuck) == (self.infos, self.stalled):
                return
            self.infos, self.stalled = infos, stuck
            count = f"{len(infos)} run{'s' * (len(infos) != 1)}"
            self.message.ok(count if infos else "no run matches the filters")
            self.table.value = runs_html(infos, stuck)
            self._relist(infos)

    def _relist(self, infos: Sequence[RunInfo]) -> None:
        picked = self.select.value
        options = [
            (f"{r.run_id} · {r.workflow_id} v{r.version} · {r.status.value}", r.run_id)
            for r in infos
        ]
        if list(self.select.options) == options:
            return
        ids = [run_id for _label, run_id in options]
        self._relisting = True  # a new list is not a pick: no monitor opens meanwhile
        try:
            self.select.index = None  # else new options select their first entry
            self.select.options = options
            self.select.value = picked if picked in ids else None
        finally:
            self._relisting = False

    # --- picking a run -----------------------------------------------------------------------

    def show_run(self, run_id: str) -> RunMonitor:
        """Show the monitor of run ``run_id`` in the Monitor tab and switch to it."""
        if self.monitor is not None:
            if self.monitor.run.id == run_id:
                self.selected_index = TABS.index("Monitor")
                return self.monitor
            self.monitor.close()
        self.monitor = RunMonitor(self.engine, run_id, self.interval)
        self.monitor_tab.children = [self.monitor]
        self.selected_index = TABS.index("Monitor")
        return self.monitor

    def _on_pick(self, change: dict[str, Any]) -> None:
        if change["new"] and not self._relisting:
            self.show_run(change["new"])

    def _on_tab(self, change: dict[str, Any]) -> None:
        tab = TABS[change["new"]] if isinstance(change["new"], int) else None
        if tab == "Inbox":
            self.inbox.refresh()
        elif tab == "Recovery":
            self.recovery.refresh()
        elif tab == "Runs":
            self.refresh_runs()

    # --- a side panel ---------------------------------------------------------------------------

    def show_in_sidebar(self, title: str = "wfkit dashboard", anchor: str = "split-right") -> Any:
        """Open the dashboard in a JupyterLab side panel (a ``sidecar.Sidecar``) and return it.

        ``anchor`` is sidecar's: ``"split-right"`` (the default), ``"split-left"``,
        ``"split-bottom"``, ``"tab-after"``, ``"right"`` (the right sidebar)... The panel
        shows this same dashboard: it stays in step with any other view of it, and
        :meth:`close` closes the panel too. Calling it again closes the panel it opened
        before and opens a new one (with the new ``title`` and ``anchor``): there is never
        more than one. The returned panel, left as a cell's value, shows as one line of text
        in the notebook (not as a second, hidden copy of the dashboard).

        Raises
        ------
        UsageError
            When the ``sidecar`` package is not installed.
        """
        try:
            from sidecar import Sidecar  # type: ignore[import-untyped]
        except ImportError:
            raise UsageError(
                "show_in_sidebar() needs the sidecar package, which is not installed: "
                "pip install 'wfkit[notebook]' (or pip install sidecar), restart the kernel "
                "and call it again; the dashboard itself works without it"
            ) from None
        if self.sidecar is not None:  # one panel at a time: calling again replaces it
            self.sidecar.close()
        self.sidecar = _side_panel(Sidecar, title, anchor)
        with self.sidecar:
            display(self)
        return self.sidecar

    def close(self) -> None:
        """Stop the update thread and the monitor's, and close every part (and the side
        panel)."""
        if stop_live(self, "inbox"):  # else refused in __init__: nothing else was built
            if self.monitor is not None:
                self.monitor.close()
                self.monitor = None
            for part in (self.inbox, self.recovery, self.select, self.table, self.message):
                part.close()
            self.workers.close()
            if self.sidecar is not None:
                self.sidecar.close()
                self.sidecar = None
        super().close()


def _side_panel(sidecar: type[Any], title: str, anchor: str) -> Any:
    """A ``sidecar.Sidecar`` that, displayed in the notebook (the value of a cell ending in
    ``board.show_in_sidebar()``), is one line of text: a second view of a sidecar renders its
    contents in the output area too, a hidden copy of the dashboard that does nothing useful."""

    class SidePanel(sidecar):
        def _repr_mimebundle_(self, **_kwargs: Any) -> dict[str, str]:
            return {"text/plain": f"the dashboard is open in the side panel {self.title!r}"}

    return SidePanel(title=title, anchor=anchor)
