"""``RunPanel``: the editor's way to try the workflow: a form for the run's data, Start, a monitor.

Start reads the :class:`~wfkit.widgets.data_form.DataForm` (generated from the workflow's data
model), registers the edited graph as the next version when it differs from the latest one
registered (as "Register as version N+1" does), starts a run of that version with the form's data
and shows a :class:`~wfkit.widgets.monitor.RunMonitor` of it. A refusal (a field the model
rejects, a graph that cannot be registered, an admission policy's reasons) is shown in the panel
and starts nothing.

With "run its steps here now" ticked (the default) Start then calls ``engine.run_until_idle()``
in the kernel, so the run goes as far as it can before the button returns (to a wait, an
approval, a timer or its end); untick it when workers run (``engine.start_workers()``).

CSS hooks: ``wfkit-editor-run-panel``, ``wfkit-editor-run-start``, ``wfkit-editor-run-drive``,
``wfkit-editor-run-status`` (with ``wfkit-ok`` / ``wfkit-error``), ``wfkit-editor-run-monitor``;
the form's own hooks are in :mod:`wfkit.widgets.data_form`.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from wfkit.definition.workflow import Workflow
from wfkit.errors import AdmissionError, WfkitError
from wfkit.widgets.confirm import Message, default_actor
from wfkit.widgets.data_form import DataForm
from wfkit.widgets.forms import FormError
from wfkit.widgets.monitor import RunMonitor
from wfkit.widgets.publish import PublishBar, registered_version

if TYPE_CHECKING:
    from wfkit.engine import Engine, Run

__all__ = ["NO_ENGINE", "RunPanel"]

NO_ENGINE = "No engine: create the editor with Editor(flow, engine=engine) to run the workflow."


class RunPanel(w.VBox):
    """A hidden panel (:meth:`show` shows it) that starts runs of the edited workflow.

    Parameters
    ----------
    flow : Workflow
        The edited workflow (its graph and data model are read at each start).
    publish : PublishBar
        Registers the graph when it changed since the latest registered version.
    engine : Engine, optional
        Without one the panel only says that it needs one.
    """

    def __init__(self, flow: Workflow, publish: PublishBar, engine: Engine | None = None) -> None:
        self.flow, self.publish, self.engine = flow, publish, engine
        self.run: Run | None = None
        self.monitor: RunMonitor | None = None
        self.form = DataForm(flow.data_model)
        self.title = w.HTML()
        self.status = Message("wfkit-editor-run-status")
        self.start_button = w.Button(
            description="Start run", icon="play", button_style="success", layout={"width": "auto"}
        )
        self.start_button.add_class("wfkit-editor-run-start")
        self.drive = w.Checkbox(
            value=True,
            description="run its steps here now",
            indent=False,
            tooltip="call engine.run_until_idle() after starting; untick when workers run",
            layout={"width": "auto"},
        )
        self.drive.add_class("wfkit-editor-run-drive")
        self.form_box = w.VBox([self.form], layout={"width": "100%"})
        self.monitor_box = w.VBox(layout={"width": "100%"})
        self.monitor_box.add_class("wfkit-editor-run-monitor")
        self.start_button.on_click(lambda _b: self.start())
        buttons = w.HBox(
            [self.start_button, self.drive],
            layout={"flex_flow": "row wrap", "align_items": "center"},
        )
        super().__init__(
            [self.title, self.form_box, buttons, self.status, self.monitor_box],
            layout={"display": "none", "width": "100%"},
        )
        self.add_class("wfkit-editor-run-panel")

    @property
    def is_open(self) -> bool:
        """True while the panel is shown."""
        return self.layout.display != "none"

    def show(self) -> None:
        """Show the panel, with a form for the workflow's data model as it is now."""
        if self.form.model is not self.flow.data_model:
            self.form = DataForm(self.flow.data_model)
            self.form_box.children = [self.form]
        model = self.flow.data_model
        what = f"data fitting <code>{html.escape(model.__name__)}</code>" if model else "JSON data"
        self.title.value = f"<b>Run <code>{html.escape(self.flow.id)}</code></b> with {what}"
        self.layout.display = None
        if self.engine is None:
            self.start_button.disabled = True
            self.start_button.tooltip = NO_ENGINE
            self.status.error(NO_ENGINE)

    def hide(self) -> None:
        """Hide the panel (the monitor of the last run keeps its place when it opens again)."""
        self.layout.display = "none"

    def start(self) -> Run | None:
        """Start a run with the form's data; None (and the reasons shown) when refused."""
        if self.engine is None:
            self.status.error(NO_ENGINE)
            return None
        try:
            data = self.form.read()
        except FormError as exc:
            self.status.error(f"Not started: {exc}. Correct the form and press Start run again.")
            return None
        version = self._version()
        if version is None:
            return None
        try:
            run = self.engine.start(self.flow.id, data, version=version, actor=default_actor())
        except AdmissionError as exc:
            self.form.show_error(exc.reasons or [str(exc)])
            self.status.error(
                f"Not started ({self.flow.id!r} v{version} refused the run, nothing was "
                f"written): {'; '.join(exc.reasons) or exc}"
            )
            return None
        except WfkitError as exc:
            self.status.error(f"Not started: {exc}")
            return None
        self.run = run
        self._drive(run)
        self._show_monitor(run)
        return run

    def _version(self) -> int | None:
        """The registered version equal to the edited graph, registering it when none is."""
        assert self.engine is not None
        latest, digest = registered_version(self.engine, self.flow.id)
        if latest is not None and digest == self.flow.content_hash:
            return latest
        version = self.publish.register()
        if version is None:
            why = self.publish.status.text
            self.status.error(f"Not started: the edited graph could not be registered ({why})")
        return version

    def _drive(self, run: Run) -> None:
        assert self.engine is not None
        started = f"Started run {run.id} of {self.flow.id!r} v{run.workflow.version}"
        if not self.drive.value:
            self.status.ok(f"{started}; it advances as the engine's workers take its steps.")
            return
        try:
            self.engine.run_until_idle()
        except WfkitError as exc:
            self.status.error(f"{started}, but driving it here failed: {exc}")
            return
        self.status.ok(f"{started}: {run.explain()}")

    def _show_monitor(self, run: Run) -> None:
        assert self.engine is not None
        self.close_monitor()
        self.monitor = RunMonitor(self.engine, run)
        self.monitor_box.children = [self.monitor]

    def close_monitor(self) -> None:
        """Stop and remove the monitor of the last run."""
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None
        self.monitor_box.children = []

    def close(self) -> Any:
        """Close the panel's monitor and the panel."""
        self.close_monitor()
        return super().close()
