"""``Recovery``: failed and suspended runs, and what an operator can do about each.

A run suspended on a failed compensation offers Retry, Skip and Abandon; a run suspended on a
step offers Resume; both offer Cancel; a failed run offers Retry run (``engine.retry``: it goes
on from where it failed; only where it can) and Restart as new. Every button first
asks "Really ... run X? [Yes] [No]" and only Yes calls the engine, with the actor field's value
recorded on the event. As in the inbox, the run moves on under ``engine.start_workers()`` (or
at the next ``engine.run_until_idle()``; without either the panel says "ready: no worker is
running in this kernel" and offers Start workers). The list updates by itself from a background
thread; a row whose run did not change is kept as it is.

CSS hooks: ``wfkit-recovery`` (the widget), ``wfkit-actor``, ``wfkit-recovery-refresh``,
``wfkit-recovery-message`` (+ ``wfkit-ok`` / ``wfkit-error``), ``wfkit-recovery-summary``,
``wfkit-recovery-list``; per run a row ``wfkit-recovery-item`` plus ``wfkit-run-<run id>`` and
``wfkit-recovery-<kind>`` (``compensation``, ``step`` or ``failed``), holding the buttons
``wfkit-recovery-retry``, ``-skip``, ``-abandon``, ``-resume``, ``-cancel``, ``-retry-run``,
``-restart``;
the confirmation bar: ``wfkit-confirm``, ``wfkit-confirm-question``, ``wfkit-confirm-yes``,
``wfkit-confirm-no``; the workers bar ``wfkit-workers``.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from wfkit.engine import Engine, RunInfo, RunStatus
from wfkit.errors import UsageError, WfkitError
from wfkit.widgets.confirm import BORDER, Confirm, Message, actor_field, css_token, fit
from wfkit.widgets.live import Live, stop_live
from wfkit.widgets.workers import WorkerStatus

__all__ = ["ACTIONS", "Recovery"]

ACTIONS: dict[str, tuple[str, str, str]] = {
    "retry": (
        "Retry",
        "Really retry the failed compensation of run {run}?",
        "The compensation runs again with a fresh set of attempts.",
    ),
    "skip": (
        "Skip",
        "Really skip the failed compensation of run {run}?",
        "Recorded as a decision: the engine does not undo that step; the unwind goes on.",
    ),
    "abandon": (
        "Abandon",
        "Really abandon the unwind of run {run}?",
        "The remaining compensations are not run; the run fails as it stands.",
    ),
    "resume": (
        "Resume",
        "Really resume run {run}?",
        "The suspended step gets a fresh set of attempts.",
    ),
    "cancel": (
        "Cancel",
        "Really cancel run {run}?",
        "Its steps stop and its waits and timers go; the run ends as cancelled.",
    ),
    "retry-run": (
        "Retry run",
        "Really retry failed run {run} from where it failed?",
        "Steps that completed are not run again; the failed step gets a fresh set of attempts.",
    ),
    "restart": (
        "Restart as new",
        "Really restart run {run} as new?",
        "A fresh run of the same definition starts with the original input.",
    ),
}
"""action -> (button label, confirmation question, what it does)."""

_BY_KIND = {
    "compensation": ("retry", "skip", "abandon", "cancel"),
    "step": ("resume", "cancel"),
    "failed": ("retry-run", "restart"),
}


class _Row(widgets.HBox):
    """One run: its summary and reason on the left, its action buttons on the right."""

    def __init__(self, info: RunInfo, kind: str, reason: str, buttons: list[widgets.Button]):
        self.info = info
        self.kind = kind
        self.buttons = {b.action: b for b in buttons}
        describe = widgets.HTML(
            layout=widgets.Layout(flex="1 1 320px", min_width="0"),
            value=(
                '<div style="line-height:1.4;overflow-wrap:break-word;'
                'color:var(--jp-ui-font-color1, #222)">'
                f"<b>run <code>{html.escape(info.run_id)}</code></b>"
                f" · {html.escape(info.workflow_id)} v{info.version} · "
                f'<span class="wfkit-status wfkit-status-{info.status.value}">'
                f"{info.status.value}</span><br>"
                f'<small class="wfkit-recovery-reason">{html.escape(reason)}</small></div>'
            ),
        )
        actions = widgets.HBox(
            buttons, layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start")
        )
        super().__init__(
            [describe, actions],
            layout=widgets.Layout(border_bottom=BORDER, padding="4px 0", flex_flow="row wrap"),
        )
        self.add_class("wfkit-recovery-item")
        self.add_class(f"wfkit-recovery-{kind}")
        self.add_class(f"wfkit-run-{css_token(info.run_id)}")


class Recovery(widgets.VBox):
    """Failed and suspended runs with retry/skip/abandon, resume, cancel and restart-as-new.

    Parameters
    ----------
    engine : Engine
        Where the runs are.
    actor : str, optional
        Who acts; the OS user by default (editable in the widget).
    limit : int
        At most this many runs of each status are listed (newest first).
    refresh_every : float, optional
        Seconds between updates from a background thread (1 by default); None updates only on
        Refresh (and after each action). :meth:`close` stops the thread.

    Examples
    --------
    >>> import wfkit as wf
    >>> from wfkit.widgets import Recovery
    >>> panel = Recovery(wf.Engine(":memory:"), actor="ana", refresh_every=None)
    >>> panel.summary.value
    'no failed or suspended runs'
    >>> panel.close()
    """

    def __init__(
        self,
        engine: Engine,
        actor: str | None = None,
        *,
        limit: int = 200,
        refresh_every: float | None = 1.0,
    ) -> None:
        # checked first: a bad interval raises before anything is shown
        self.live = Live.every(refresh_every, self.refresh, "recovery", self._stopped)
        self.engine = engine
        self.limit = limit
        self._lock = threading.RLock()  # the update thread and button clicks take turns
        self.actor = actor_field(actor)
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh", layout=fit())
        self.refresh_button.add_class("wfkit-recovery-refresh")
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.confirm = Confirm()
        self.message = Message("wfkit-recovery-message")
        self.summary = widgets.HTML(value="")
        self.summary.add_class("wfkit-recovery-summary")
        self.list = widgets.VBox([])
        self.list.add_class("wfkit-recovery-list")
        self.rows: dict[str, _Row] = {}
        self.workers = WorkerStatus(engine)
        self.count = 0
        self._on_count: list[Callable[[int], Any]] = []
        super().__init__(
            [
                widgets.HBox(
                    [self.actor, self.refresh_button],
                    layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
                ),
                self.confirm,
                self.workers,
                self.message,
                self.summary,
                self.list,
            ]
        )
        self.add_class("wfkit-recovery")
        self.refresh()
        if self.live is not None:
            self.live.start()

    def refresh(self, *, stalled_now: bool | None = None) -> None:
        """List the suspended and failed runs again (a run that did not change keeps its row).

        ``stalled_now`` is the workers bar's answer when the caller already has it (the
        Dashboard asks once per update); None asks the engine.
        """
        with self._lock:
            infos = [
                *self.engine.runs(status=RunStatus.SUSPENDED, limit=self.limit),
                *self.engine.runs(status=RunStatus.FAILED, limit=self.limit),
            ]
            rows: dict[str, _Row] = {}
            for info in infos:
                kept = self.rows.pop(info.run_id, None)
                if kept is not None and (kept.info.status, kept.info.updated_at) != (
                    info.status,
                    info.updated_at,
                ):
                    kept.close()
                    kept = None
                rows[info.run_id] = kept if kept is not None else self._row(info)
            for old in self.rows.values():
                old.close()
            self.rows = rows
            children = tuple(rows.values())
            if self.list.children != children:
                self.list.children = children
            suspended = sum(1 for i in infos if i.status == RunStatus.SUSPENDED)
            failed = len(infos) - suspended
            summary = (
                f"{suspended} suspended, {failed} failed"
                if infos
                else "no failed or suspended runs"
            )
            if self.summary.value != summary:
                self.summary.value = summary
            self.workers.refresh(stalled_now)
            counted, self.count = self.count, len(infos)
        if counted != len(infos):
            for handler in list(self._on_count):
                handler(len(infos))

    def on_count(self, handler: Callable[[int], Any]) -> None:
        """Call ``handler(n)`` whenever the number of listed runs changes."""
        self._on_count.append(handler)

    def _stopped(self, exc: Exception) -> None:
        self.message.error(
            f"the panel stopped updating: {type(exc).__name__}: {exc}; press Refresh to read it "
            "again"
        )

    def close(self) -> None:
        """Stop the update thread and close the widget and its rows."""
        if stop_live(self, "rows"):  # else refused in __init__: nothing else was built
            with self._lock:
                for row in self.rows.values():
                    row.close()
                self.rows = {}
            for part in (self.workers, self.confirm, self.message, self.summary, self.list):
                part.close()
        super().close()

    def row(self, run_id: str) -> _Row:
        """The row of run ``run_id``."""
        try:
            return self.rows[run_id]
        except KeyError:
            raise KeyError(f"run {run_id} is not listed (not failed or suspended)") from None

    def _row(self, info: RunInfo) -> _Row:
        kind = self._kind(info)
        buttons = []
        actions = _BY_KIND[kind]
        if kind == "failed" and not self.engine.run(info.run_id).view().retryable:
            actions = ("restart",)  # it failed where it cannot go on (engine.retry refuses)
        for action in actions:
            label = ACTIONS[action][0]
            style = "danger" if action in ("abandon", "cancel") else ""
            button = widgets.Button(description=label, button_style=style, layout=fit())
            button.add_class(f"wfkit-recovery-{action}")
            button.action = action
            button.on_click(self._asker(info.run_id, action))
            buttons.append(button)
        return _Row(info, kind, self.engine.run(info.run_id).explain(), buttons)

    def _kind(self, info: RunInfo) -> str:
        if info.status != RunStatus.SUSPENDED:
            return "failed"
        on_compensation = self.engine.run(info.run_id).view().suspended_on_compensation
        return "compensation" if on_compensation else "step"

    def _asker(self, run_id: str, action: str) -> Callable[[object], None]:
        return lambda _b: self.ask(run_id, action)

    # --- actions ----------------------------------------------------------------------------

    def ask(self, run_id: str, action: str) -> None:
        """Show the confirmation of ``action`` on run ``run_id`` (what a button click does)."""
        actor = self.actor.value.strip()
        if not actor:
            self.message.error("enter who you are in the 'actor' field first; nothing was done")
            return
        _label, question, detail = ACTIONS[action]
        self.message.clear()
        self.confirm.ask(
            question.format(run=run_id),
            lambda: self.act(run_id, action),
            f"{detail} Recorded as done by {actor}.",
        )

    def act(self, run_id: str, action: str) -> bool:
        """Do ``action`` on run ``run_id`` now, as the actor field says; True when done."""
        actor = self.actor.value.strip()
        if not actor:
            self.message.error("enter who you are in the 'actor' field first; nothing was done")
            return False
        with self._lock:
            try:
                done = self._do(run_id, action, actor)
            except WfkitError as exc:
                self.message.error(f"{ACTIONS[action][0]} of run {run_id} failed: {exc}")
                self.refresh()
                return False
            self.message.ok(done)
            self.refresh()
            return True

    def _do(self, run_id: str, action: str, actor: str) -> str:
        engine = self.engine
        if action in ("retry", "skip", "abandon"):
            engine.recover_compensation(run_id, action=action, actor=actor)
            past = {"retry": "retried", "skip": "skipped", "abandon": "abandoned"}[action]
            what = "the unwind" if action == "abandon" else "the failed compensation"
            return f"{past} {what} of run {run_id} as {actor}"
        if action == "resume":
            engine.resume(run_id, actor=actor)
            return f"resumed run {run_id} as {actor}"
        if action == "cancel":
            done = engine.cancel(
                run_id, actor=actor, reason=f"cancelled by {actor} (Recovery widget)"
            )
            if done.already_ended:  # it ended between the listing and the click: say so
                raise UsageError(
                    f"run {run_id} had already ended ({done.status.value}); nothing was cancelled"
                )
            stopping = (
                f"; {done.attempts_stopping} attempt(s) in flight asked to stop"
                if done.attempts_stopping
                else ""
            )
            return f"cancelled run {run_id} as {actor}{stopping}"
        if action == "retry-run":
            engine.retry(run_id, actor=actor)
            return f"retried run {run_id} from where it failed as {actor}"
        if action == "restart":
            new = engine.restart_as_new(run_id, actor=actor)
            return f"restarted run {run_id} as new run {new.id} as {actor}"
        raise ValueError(f"unknown recovery action {action!r}; use one of {', '.join(ACTIONS)}")
