"""``WorkerStatus``: says when runs have work ready and no worker runs in this kernel, with a
Start workers button.

Without workers (``engine.start_workers()`` or ``wf.Engine(db, workers=2)``) a run moves on
only in ``engine.run_until_idle()``: after an approval in the inbox its next step is ready and
nothing runs it. The bar shows "ready: no worker is running in this kernel" and a button that
starts them; it hides itself while nothing is ready or something drives the engine. Embed it in
one line and call :meth:`WorkerStatus.refresh` on each update of the host widget.

CSS hooks: ``wfkit-workers`` (the bar; ``wfkit-stalled`` while shown), ``wfkit-workers-text``,
``wfkit-workers-start``, ``wfkit-workers-message``.
"""

from __future__ import annotations

import html
import threading

import ipywidgets as widgets

from wfkit.engine import Engine
from wfkit.errors import WfkitError
from wfkit.widgets.confirm import Message

__all__ = ["NO_WORKER", "WorkerStatus", "stalled"]

NO_WORKER = "ready: no worker is running in this kernel"
"""The words the operating widgets show for a run that has work ready and nobody to run it."""


def stalled(engine: Engine, run_id: str | None = None) -> bool:
    """True when run ``run_id`` (any run, when None) has work ready now and nothing in this
    process drives the engine (no workers, no ``run_until_idle()`` under way)."""
    if engine.driving:
        return False
    try:
        return engine.has_ready_work(run_id)
    except WfkitError:  # the run was purged, or the engine closed: nothing to say
        return False


class WorkerStatus(widgets.HBox):
    """The "ready: no worker is running in this kernel [Start workers]" bar (hidden otherwise).

    Parameters
    ----------
    engine : Engine
        The engine whose workers the button starts.
    run_id : str, optional
        Watch this run only; by default any run of the engine.
    threads : int
        Worker threads the button starts.

    Examples
    --------
    >>> import wfkit as wf
    >>> bar = WorkerStatus(wf.Engine(":memory:"))
    >>> bar.refresh(), bar.layout.display
    (False, 'none')
    """

    def __init__(self, engine: Engine, run_id: str | None = None, *, threads: int = 2) -> None:
        self.engine = engine
        self.run_id = run_id
        self.threads = threads
        self.shown = False
        self._lock = threading.Lock()
        what = f"run {html.escape(run_id)} waits" if run_id else "runs with work ready wait"
        self.text = widgets.HTML(
            value=(
                '<span style="color:var(--jp-warn-color0, #e65100);font-weight:bold">'
                f"{NO_WORKER}</span>"
                '<span style="color:var(--jp-ui-font-color1, #222)"> — '
                f"{what} until workers start (or <code>engine.run_until_idle()</code> runs "
                "in a cell)</span>"
            ),
            layout=widgets.Layout(flex="1 1 280px", min_width="0"),
        )
        self.text.add_class("wfkit-workers-text")
        self.start_button = widgets.Button(
            description="Start workers",
            icon="play",
            button_style="warning",
            tooltip=f"engine.start_workers(threads={threads}): runs move on by themselves",
            layout=widgets.Layout(width="auto", flex="0 0 auto"),
        )
        self.start_button.add_class("wfkit-workers-start")
        self.start_button.on_click(lambda _b: self.start_workers())
        self.message = Message("wfkit-workers-message")
        super().__init__(
            [self.text, self.start_button, self.message],
            layout=widgets.Layout(
                display="none",
                flex_flow="row wrap",
                align_items="center",
                padding="2px 6px",
                border_left="3px solid var(--jp-warn-color1, #ef6c00)",
            ),
        )
        self.add_class("wfkit-workers")

    def refresh(self, shown: bool | None = None) -> bool:
        """Show or hide the bar as the engine stands now; True when shown.

        ``shown`` is the answer when the caller already has it (the Dashboard asks the engine
        once per update for its three engine-wide bars); None asks the engine.
        """
        with self._lock:
            if shown is None:
                shown = stalled(self.engine, self.run_id)
            if shown != self.shown:
                self.shown = shown
                self.layout.display = "flex" if shown else "none"
                if shown:
                    self.add_class("wfkit-stalled")
                else:
                    self.remove_class("wfkit-stalled")
            return shown

    def start_workers(self) -> bool:
        """What the button does: start the engine's workers; True when they run."""
        try:
            self.engine.start_workers(threads=self.threads)
        except WfkitError as exc:
            self.message.error(f"workers not started: {exc}")
            return False
        self.message.clear()
        self.refresh()
        return True
