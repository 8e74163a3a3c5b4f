"""``Dashboard``: tabs over a filterable run table, the selected run's monitor, the inbox and
recovery.

CSS hooks: ``wfkit-dashboard`` (the tabs), ``wfkit-dashboard-runs`` (the runs tab),
``wfkit-dashboard-status`` and ``wfkit-dashboard-workflow`` (dropdowns),
``wfkit-dashboard-since`` (text), ``wfkit-dashboard-refresh``, ``wfkit-dashboard-message``,
``wfkit-dashboard-table`` (rows are ``tr.wfkit-run-row``), ``wfkit-dashboard-select`` (the list
to pick a run from), ``wfkit-dashboard-monitor`` (the monitor tab); the inbox and recovery keep
their own hooks (``wfkit-inbox...``, ``wfkit-recovery...``).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import ipywidgets as widgets

from wfkit.definition.durations import parse_duration
from wfkit.engine import Engine, RunInfo, RunStatus
from wfkit.widgets.confirm import Message
from wfkit.widgets.fallback import StaticPicture
from wfkit.widgets.inbox import Inbox
from wfkit.widgets.monitor import RunMonitor
from wfkit.widgets.recovery import Recovery

__all__ = ["TABS", "Dashboard", "parse_since"]

TABS = ("Runs", "Monitor", "Inbox", "Recovery")
"""Tab titles, in order (``dashboard.selected_index`` counts from 0)."""

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


def runs_html(infos: Sequence[RunInfo]) -> str:
    """The run table as HTML."""
    head = "".join(
        f"<th>{h}</th>"
        for h in ("run", "workflow", "version", "status", "created", "ended", "error")
    )
    rows = []
    for r in infos:
        error = (r.error or "").strip()
        cells = (
            r.run_id,
            r.workflow_id,
            str(r.version),
            r.status.value,
            f"{r.created_at:%Y-%m-%d %H:%M:%S}",
            f"{r.ended_at:%Y-%m-%d %H:%M:%S}" if r.ended_at else "",
            error.splitlines()[-1][:100] if error else "",
        )
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        rows.append(
            f'<tr class="wfkit-run-row wfkit-status-{r.status.value}" '
            f'data-run="{html.escape(r.run_id)}">{tds}</tr>'
        )
    return (
        "<style>.wfkit-runs td,.wfkit-runs th{padding:1px 6px;text-align:left;line-height:1.35}"
        "</style>"
        '<table class="wfkit-runs" style="font-size:12px;border-collapse:collapse">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
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

    Examples
    --------
    >>> import wfkit as wf
    >>> from wfkit.widgets import Dashboard
    >>> board = Dashboard(wf.Engine(":memory:"), actor="ana")
    >>> board.titles
    ('Runs', 'Monitor', 'Inbox', 'Recovery')
    >>> board.close()
    """

    def __init__(
        self,
        engine: Engine,
        actor: str | None = None,
        *,
        interval: float = 0.5,
        limit: int = 500,
    ) -> None:
        self.engine = engine
        self.interval = interval
        self.limit = limit
        self.status = self._control(
            widgets.Dropdown(
                options=[("any status", ALL), *[(s.value, s.value) for s in RunStatus]],
                value=ALL,
                description="status",
            ),
            "wfkit-dashboard-status",
        )
        self.workflow = self._control(
            widgets.Dropdown(options=[("any workflow", ALL)], value=ALL, description="workflow"),
            "wfkit-dashboard-workflow",
        )
        self.since = self._control(
            widgets.Text(value="", description="since", placeholder="2026-01-31, or 2h, 7d"),
            "wfkit-dashboard-since",
        )
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.refresh_button.add_class("wfkit-dashboard-refresh")
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.message = Message("wfkit-dashboard-message")
        self.table = widgets.HTML(value="")
        self.table.add_class("wfkit-dashboard-table")
        self.select = widgets.Select(options=[], value=None, rows=8, description="open")
        self.select.add_class("wfkit-dashboard-select")
        self.runs_tab = widgets.VBox(
            [
                widgets.HBox([self.status, self.workflow, self.since, self.refresh_button]),
                self.message,
                self.select,
                self.table,
            ]
        )
        self.runs_tab.add_class("wfkit-dashboard-runs")
        self.monitor_tab = widgets.VBox([widgets.HTML("Pick a run in the Runs tab.")])
        self.monitor_tab.add_class("wfkit-dashboard-monitor")
        self.monitor: RunMonitor | None = None
        self.inbox = Inbox(engine, actor)
        self.recovery = Recovery(engine, actor)
        self.infos: list[RunInfo] = []
        self._relisting = False
        super().__init__(children=[self.runs_tab, self.monitor_tab, self.inbox, self.recovery])
        self.titles = TABS
        self.add_class("wfkit-dashboard")
        self.refresh()
        for control in (self.status, self.workflow, self.since):
            control.observe(lambda _c: self.refresh_runs(), names="value")
        self.select.observe(self._on_pick, names="value")
        self.observe(self._on_tab, names="selected_index")

    @staticmethod
    def _control(widget: Any, css_class: str) -> Any:
        widget.add_class(css_class)
        return widget

    # --- the run table ------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read everything again: workflows, runs, inbox and recovery."""
        known = [(wid, wid) for wid in self.engine.workflows()]
        options = [("any workflow", ALL), *known]
        if list(self.workflow.options) != options:
            current = self.workflow.value
            self.workflow.options = options
            self.workflow.value = current if (current, current) in known else ALL
        self.refresh_runs()
        self.inbox.refresh()
        self.recovery.refresh()
        if self.monitor is not None:
            self.monitor.refresh()

    def refresh_runs(self) -> None:
        """Apply the filters and list the runs again (the picked run stays picked if listed)."""
        try:
            since = parse_since(self.since.value, self.engine.clock.now())
        except ValueError as exc:
            self.message.error(str(exc))
            return
        infos = self.engine.runs(
            status=self.status.value or None,
            workflow=self.workflow.value or None,
            limit=self.limit,
        )
        if since is not None:
            infos = [r for r in infos if r.created_at >= since]
        self.infos = infos
        count = f"{len(infos)} run{'s' * (len(infos) != 1)}"
        self.message.ok(count if infos else "no run matches the filters")
        self.table.value = runs_html(infos)
        picked = self.select.value
        options = [
            (f"{r.run_id} · {r.workflow_id} v{r.version} · {r.status.value}", r.run_id)
            for r in infos
        ]
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

    def close(self) -> None:
        """Stop the monitor's thread and close every part."""
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None
        for part in (self.inbox, self.recovery, self.select, self.table, self.message):
            part.close()
        super().close()
