"""``Recovery``: failed and suspended runs, and what an operator can do about each.

A run suspended on a failed compensation offers Retry, Skip and Abandon; a run suspended on a
step offers Resume; both offer Cancel; a failed run offers Retry run (``engine.retry``: it goes
on from where it failed; only where it can) and Restart as new. Every button first
asks "Really ... run X? [Yes] [No]" and only Yes calls the engine, with the actor field's value
recorded on the event. As in the inbox, the run moves on under ``engine.start_workers()`` (or
at the next ``engine.run_until_idle()``).

CSS hooks: ``wfkit-recovery`` (the widget), ``wfkit-actor``, ``wfkit-recovery-refresh``,
``wfkit-recovery-message`` (+ ``wfkit-ok`` / ``wfkit-error``), ``wfkit-recovery-summary``,
``wfkit-recovery-list``; per run a row ``wfkit-recovery-item`` plus ``wfkit-run-<run id>`` and
``wfkit-recovery-<kind>`` (``compensation``, ``step`` or ``failed``), holding the buttons
``wfkit-recovery-retry``, ``-skip``, ``-abandon``, ``-resume``, ``-cancel``, ``-retry-run``,
``-restart``;
the confirmation bar: ``wfkit-confirm``, ``wfkit-confirm-question``, ``wfkit-confirm-yes``,
``wfkit-confirm-no``.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import ipywidgets as widgets

from wfkit.engine import Engine, RunInfo, RunStatus
from wfkit.errors import UsageError, WfkitError
from wfkit.widgets.confirm import Confirm, Message, actor_field, css_token

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
            value=(
                '<div style="min-width:360px;line-height:1.4">'
                f"<b>run <code>{html.escape(info.run_id)}</code></b>"
                f" · {html.escape(info.workflow_id)} v{info.version} · "
                f'<span class="wfkit-status wfkit-status-{info.status.value}">'
                f"{info.status.value}</span><br>"
                f'<small class="wfkit-recovery-reason">{html.escape(reason)}</small></div>'
            )
        )
        super().__init__(
            [describe, widgets.HBox(buttons)],
            layout=widgets.Layout(border_bottom="1px solid #dddddd", padding="4px 0"),
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

    Examples
    --------
    >>> import wfkit as wf
    >>> from wfkit.widgets import Recovery
    >>> Recovery(wf.Engine(":memory:"), actor="ana").summary.value
    'no failed or suspended runs'
    """

    def __init__(self, engine: Engine, actor: str | None = None, *, limit: int = 200) -> None:
        self.engine = engine
        self.limit = limit
        self.actor = actor_field(actor)
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.refresh_button.add_class("wfkit-recovery-refresh")
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.confirm = Confirm()
        self.message = Message("wfkit-recovery-message")
        self.summary = widgets.HTML(value="")
        self.summary.add_class("wfkit-recovery-summary")
        self.list = widgets.VBox([])
        self.list.add_class("wfkit-recovery-list")
        self.rows: dict[str, _Row] = {}
        super().__init__(
            [
                widgets.HBox([self.actor, self.refresh_button]),
                self.confirm,
                self.message,
                self.summary,
                self.list,
            ]
        )
        self.add_class("wfkit-recovery")
        self.refresh()

    def refresh(self) -> None:
        """List the suspended and failed runs again."""
        infos = [
            *self.engine.runs(status=RunStatus.SUSPENDED, limit=self.limit),
            *self.engine.runs(status=RunStatus.FAILED, limit=self.limit),
        ]
        for old in self.rows.values():
            old.close()
        self.rows = {info.run_id: self._row(info) for info in infos}
        self.list.children = list(self.rows.values())
        suspended = sum(1 for i in infos if i.status == RunStatus.SUSPENDED)
        failed = len(infos) - suspended
        self.summary.value = (
            f"{suspended} suspended, {failed} failed" if infos else "no failed or suspended runs"
        )

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
            button = widgets.Button(description=label, button_style=style)
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
