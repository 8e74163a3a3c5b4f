"""``HistoryStepper``: a slider with previous/next buttons over a run's stored checkpoints, and a
"live" toggle that follows the newest one.

It only chooses a point; the :class:`~wfkit.widgets.RunMonitor` shows the run as it was there
(the data rebuilt from the stored patches by ``run.data_at``, node statuses by
``run.node_statuses_at``).

CSS hooks: ``wfkit-stepper`` (the bar), ``wfkit-stepper-prev``, ``wfkit-stepper-next``,
``wfkit-stepper-slider``, ``wfkit-stepper-live``, ``wfkit-stepper-label``.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as widgets

from wfkit.engine import StoredCheckpoint

__all__ = ["HistoryStepper"]

PointHandler = Callable[["StoredCheckpoint | None"], None]


class HistoryStepper(widgets.HBox):
    """Choose a checkpoint of a run: ◀ / slider / ▶ and a ``live`` toggle.

    ``point`` is the chosen checkpoint, or None while ``live`` (following the newest).
    Moving the slider, pressing ◀ or ▶, or :meth:`go` leave live mode; reaching the newest
    checkpoint or pressing ``live`` go back to it.

    Examples
    --------
    >>> stepper = HistoryStepper()
    >>> stepper.point is None, stepper.live
    (True, True)
    """

    def __init__(self) -> None:
        self.points: list[StoredCheckpoint] = []
        self._handlers: list[PointHandler] = []
        self._quiet = False
        self.prev_button = widgets.Button(
            description="◀", tooltip="previous checkpoint", layout=widgets.Layout(width="36px")
        )
        self.next_button = widgets.Button(
            description="▶", tooltip="next checkpoint", layout=widgets.Layout(width="36px")
        )
        self.slider = widgets.IntSlider(
            min=0,
            max=0,
            value=0,
            readout=False,
            continuous_update=False,
            layout=widgets.Layout(flex="1 1 auto", min_width="120px", width="auto"),
        )
        self.live_button = widgets.ToggleButton(
            value=True,
            description="live",
            tooltip="follow the run as it goes on",
            layout=widgets.Layout(width="64px"),
        )
        self.label = widgets.HTML(layout=widgets.Layout(flex="0 1 auto", min_width="0"))
        for part, css in (
            (self.prev_button, "wfkit-stepper-prev"),
            (self.next_button, "wfkit-stepper-next"),
            (self.slider, "wfkit-stepper-slider"),
            (self.live_button, "wfkit-stepper-live"),
            (self.label, "wfkit-stepper-label"),
        ):
            part.add_class(css)
        super().__init__(
            [self.prev_button, self.slider, self.next_button, self.live_button, self.label],
            layout=widgets.Layout(align_items="center", flex_flow="row wrap"),
        )
        self.add_class("wfkit-stepper")
        self.prev_button.on_click(lambda _b: self.go(self.slider.value - 1))
        self.next_button.on_click(lambda _b: self.go(self.slider.value + 1))
        self.slider.observe(self._on_slider, names="value")
        self.live_button.observe(self._on_live, names="value")
        self._show()

    @property
    def live(self) -> bool:
        """True while following the newest checkpoint."""
        return bool(self.live_button.value)

    @property
    def point(self) -> StoredCheckpoint | None:
        """The chosen checkpoint; None while live."""
        if self.live or not self.points:
            return None
        return self.points[self.slider.value]

    def on_change(self, handler: PointHandler) -> None:
        """Call ``handler(point)`` whenever the chosen point changes (None: live again)."""
        self._handlers.append(handler)

    def set_points(self, points: Sequence[StoredCheckpoint]) -> None:
        """The run's checkpoints now (the stepper stays where it is unless it is live)."""
        self.points = list(points)
        with self._silent():
            self.slider.max = max(len(self.points) - 1, 0)
            if self.live:
                self.slider.value = self.slider.max
        self._show()

    def go(self, index: int) -> None:
        """Choose the checkpoint at ``index`` (clamped to the range), leaving live mode unless
        it is the newest."""
        if not self.points:
            return
        index = min(max(index, 0), len(self.points) - 1)
        with self._silent():
            self.slider.value = index
            self.live_button.value = index == len(self.points) - 1
        self._show()
        self._notify()

    def _on_slider(self, change: dict[str, Any]) -> None:
        if not self._quiet:
            self.go(int(change["new"]))

    def _on_live(self, change: dict[str, Any]) -> None:
        if self._quiet:
            return
        if change["new"]:
            with self._silent():
                self.slider.value = self.slider.max
        self._show()
        self._notify()

    def _notify(self) -> None:
        for handler in list(self._handlers):
            handler(self.point)

    def _silent(self) -> _Quiet:
        return _Quiet(self)

    def _show(self) -> None:
        count = len(self.points)
        index = self.slider.value
        self.prev_button.disabled = count == 0 or index == 0
        self.next_button.disabled = count == 0 or index >= count - 1
        if not count:
            self.label.value = "no checkpoints yet"
            return
        point = self.points[min(index, count - 1)]
        where = (
            f"checkpoint {index + 1} of {count} · {html.escape(point.label)} · {point.at:%H:%M:%S}"
        )
        if self.live:
            self.label.value = f"<span>{where} · live</span>"
        else:
            self.label.value = f"<span><b>viewing the past</b>: {where}</span>"


class _Quiet:
    """Changes made inside do not call the stepper's observers back."""

    def __init__(self, stepper: HistoryStepper) -> None:
        self.stepper = stepper

    def __enter__(self) -> None:
        self.stepper._quiet = True

    def __exit__(self, *_exc: object) -> None:
        self.stepper._quiet = False
