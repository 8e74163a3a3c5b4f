"""``Inbox``: the open waits and approvals of an engine, with the buttons that close them.

Per approval: a comment field, Approve and Reject. Per signal wait: a JSON payload and Send; the
payload is parsed and checked against the wait's model *before* anything is sent, so a bad one
shows its error and leaves the wait as it is. Every button asks first ("Really approve review of
run 3f2a...? [Yes] [No]", in the row) and only Yes acts, recording the actor field's value and
what the question showed (comment, payload). The list updates by itself from a background
thread (new waits appear, closed ones go; what was typed into a row that stays is kept).
A decided wait moves its run on at once under ``engine.start_workers()``; without workers the
inbox says "ready: no worker is running in this kernel" and offers Start workers.

CSS hooks: ``wfkit-inbox`` (the widget), ``wfkit-actor``, ``wfkit-inbox-refresh``,
``wfkit-inbox-message`` (+ ``wfkit-ok`` / ``wfkit-error``), ``wfkit-inbox-summary``,
``wfkit-inbox-list``; per open wait a row ``wfkit-inbox-item`` plus ``wfkit-inbox-approval``
or ``wfkit-inbox-signal``, ``wfkit-run-<run id>`` and ``wfkit-node-<node id>`` (see
:func:`~wfkit.widgets.confirm.css_token`), holding ``wfkit-inbox-comment``,
``wfkit-inbox-approve``, ``wfkit-inbox-reject`` (approvals) or ``wfkit-inbox-payload``,
``wfkit-inbox-send`` (signals), ``wfkit-inbox-error`` and the row's confirmation bar
(``wfkit-confirm``, ``wfkit-confirm-question``, ``wfkit-confirm-yes``, ``wfkit-confirm-no``);
the workers bar ``wfkit-workers`` (see :mod:`wfkit.widgets.workers`).
"""

from __future__ import annotations

import html
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as widgets
from pydantic import ValidationError

from wfkit.definition.kinds import Node
from wfkit.definition.values import TOO_DEEP
from wfkit.definition.workflow import import_model
from wfkit.engine import Engine, WaitInfo
from wfkit.engine.nodes.wait import fit_payload
from wfkit.errors import DefinitionError, WfkitError
from wfkit.widgets.confirm import BORDER, Confirm, Message, actor_field, css_token, fit
from wfkit.widgets.live import Live, stop_live
from wfkit.widgets.workers import NO_WORKER, WorkerStatus, stalled

__all__ = ["Inbox", "check_payload", "parse_payload"]


def parse_payload(text: str) -> dict[str, Any]:
    """The payload typed in a text box: a JSON object (empty text is ``{}``).

    Raises
    ------
    ValueError
        Saying what is wrong with the text.

    Examples
    --------
    >>> parse_payload('{"is_approved": true}')
    {'is_approved': True}
    >>> parse_payload("")
    {}
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"the payload is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            'write an object such as {"field": "value"}'
        ) from None
    except RecursionError:  # the parser gives up at about 1,000 levels
        raise ValueError(f"the payload is {TOO_DEEP}; flatten it") from None
    if not isinstance(value, dict):
        raise ValueError(
            f"the payload must be a JSON object ({{...}}), not a {type(value).__name__}; "
            'wrap it, e.g. {"value": ...}'
        )
    return value


def check_payload(node: Node, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` as the wait ``node``'s model reads it.

    Raises
    ------
    ValueError
        Naming every field that does not fit (or why the model cannot be loaded).
    """
    try:
        return fit_payload(node, payload)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'payload'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"the payload does not fit {exc.title}: {problems}") from None
    except DefinitionError as exc:
        raise ValueError(str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the payload is not plain JSON: {exc}") from None


def _model_hint(node: Node) -> tuple[str, str]:
    """(description, placeholder) of a wait's payload model."""
    path = getattr(node.config, "payload", None)
    if not path:
        return "any JSON object", '{"field": "value"}'
    try:
        model = import_model(path, f"the payload model of wait {node.config.signal!r}")
    except DefinitionError as exc:
        return f"{path} (cannot be loaded: {exc})", "{}"
    props = model.model_json_schema().get("properties", {})
    fields = ", ".join(f'"{n}": <{p.get("type", "value")}>' for n, p in props.items())
    return f"{model.__name__} ({path})", "{" + fields + "}"


class _Row(widgets.HBox):
    """One open wait: what it is on the left, its controls (and its confirmation) on the
    right; the two wrap under each other in a narrow column."""

    def __init__(
        self,
        wait: WaitInfo,
        workflow: str,
        controls: list[widgets.Widget],
        *,
        buttons: dict[str, Any],
        comment: Any = None,
        payload: Any = None,
    ) -> None:
        self.wait = wait
        self.buttons = buttons  # "approve"/"reject", or "send"
        self.comment: Any = comment  # the approval's comment field
        self.payload: Any = payload  # the signal's payload text area
        self.error = Message("wfkit-inbox-error")
        self.confirm = Confirm()
        describe = widgets.HTML(
            value=_describe(wait, workflow), layout=widgets.Layout(flex="1 1 300px", min_width="0")
        )
        describe.add_class("wfkit-inbox-description")
        column = widgets.VBox(
            [*controls, self.confirm, self.error],
            layout=widgets.Layout(flex="1 1 320px", min_width="0"),
        )
        super().__init__(
            [describe, column],
            layout=widgets.Layout(border_bottom=BORDER, padding="4px 0", flex_flow="row wrap"),
        )
        self.add_class("wfkit-inbox-item")
        self.add_class(f"wfkit-inbox-{wait.kind}")
        self.add_class(f"wfkit-run-{css_token(wait.run_id)}")
        self.add_class(f"wfkit-node-{css_token(wait.node_id)}")
        if wait.loop_path:
            self.add_class(f"wfkit-item-{'-'.join(map(str, wait.loop_path))}")


def _which(w: WaitInfo) -> str:
    """The wait's node, and inside a for_each its item: ``review (item 2)``."""
    item = f" (item {','.join(map(str, w.loop_path))})" if w.loop_path else ""
    return f"{w.node_id}{item}"


def _describe(w: WaitInfo, workflow: str) -> str:
    if w.kind == "approval":
        who = ", ".join(w.detail.get("assignees") or []) or "anyone"
        what = f"<b>approval {html.escape(_which(w))}</b> (for {html.escape(who)})"
    else:
        key = f" key <code>{html.escape(w.key)}</code>" if w.key else ""
        what = f"<b>signal {html.escape(w.name)}</b>{key} at {html.escape(_which(w))}"
    due = f"; due {w.deadline:%Y-%m-%d %H:%M}" if w.deadline else ""
    return (
        '<div style="line-height:1.4;overflow-wrap:break-word;'
        f'color:var(--jp-ui-font-color1, #222)">{what}<br><small>run '
        f"<code>{html.escape(w.run_id)}</code> of {html.escape(workflow)} · since "
        f"{w.since:%Y-%m-%d %H:%M}{due}</small></div>"
    )


def _quoted(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Inbox(widgets.VBox):
    """Open signal waits and approvals, with approve/reject and send-signal buttons that ask
    first; the list keeps itself up to date.

    Parameters
    ----------
    engine : Engine
        Where the waits are.
    actor : str, optional
        Who acts; the OS user by default (editable in the widget).
    refresh_every : float, optional
        Seconds between updates from a background thread (1 by default); None updates only on
        Refresh (and after each action). :meth:`close` stops the thread.

    Examples
    --------
    >>> import wfkit as wf
    >>> from wfkit.widgets import Inbox
    >>> inbox = Inbox(wf.Engine(":memory:"), actor="ana", refresh_every=None)
    >>> inbox.summary.value
    'nothing is waiting'
    >>> inbox.close()
    """

    def __init__(
        self, engine: Engine, actor: str | None = None, *, refresh_every: float | None = 1.0
    ) -> None:
        # checked first: a bad interval raises before anything is shown
        self.live = Live.every(refresh_every, self.refresh, "inbox", self._stopped)
        self.engine = engine
        self._lock = threading.RLock()  # the update thread and button clicks take turns
        self.actor = actor_field(actor)
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh", layout=fit())
        self.refresh_button.add_class("wfkit-inbox-refresh")
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.message = Message("wfkit-inbox-message")
        self.workers = WorkerStatus(engine)
        self.summary = widgets.HTML(value="")
        self.summary.add_class("wfkit-inbox-summary")
        self.list = widgets.VBox([])
        self.list.add_class("wfkit-inbox-list")
        self.rows: dict[tuple[str, str, str, tuple[int, ...]], _Row] = {}
        self.count = 0
        self._on_count: list[Callable[[int], Any]] = []
        super().__init__(
            [
                widgets.HBox(
                    [self.actor, self.refresh_button],
                    layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
                ),
                self.workers,
                self.message,
                self.summary,
                self.list,
            ]
        )
        self.add_class("wfkit-inbox")
        self.refresh()
        if self.live is not None:
            self.live.start()

    # --- listing ----------------------------------------------------------------------------

    def refresh(self, *, stalled_now: bool | None = None) -> None:
        """Read the open waits again; rows still open keep what was typed into them.

        ``stalled_now`` is the workers bar's answer when the caller already has it (the
        Dashboard asks once per update); None asks the engine.
        """
        with self._lock:
            # a call waits for its child run, not for a person or a sender: not listed here
            waits = [w for w in self.engine.waiting() if w.kind != "call"]
            rows: dict[tuple[str, str, str, tuple[int, ...]], _Row] = {}
            for w in waits:  # inside a for_each, one row per item
                ident = (w.run_id, w.node_id, w.kind, w.loop_path)
                kept = self.rows.pop(ident, None)
                rows[ident] = kept if kept is not None else self._row(w)
            for gone in self.rows.values():
                if gone.confirm.pending:  # asked, then decided elsewhere before Yes
                    self.message.error(
                        f"{_which(gone.wait)} of run {gone.wait.run_id} is no longer waiting "
                        "(closed elsewhere); nothing was done"
                    )
                gone.close()
            self.rows = rows
            children = tuple(rows.values())
            if self.list.children != children:
                self.list.children = children
            approvals = sum(1 for w in waits if w.kind == "approval")
            signals = len(waits) - approvals
            summary = (
                f"{len(waits)} open: {approvals} approval{'s' * (approvals != 1)}, "
                f"{signals} signal wait{'s' * (signals != 1)}"
                if waits
                else "nothing is waiting"
            )
            if self.summary.value != summary:
                self.summary.value = summary
            self.workers.refresh(stalled_now)
            counted, self.count = self.count, len(waits)
        if counted != len(waits):
            for handler in list(self._on_count):
                handler(len(waits))

    def on_count(self, handler: Callable[[int], Any]) -> None:
        """Call ``handler(n)`` whenever the number of open waits changes (the Dashboard's tab
        title follows it)."""
        self._on_count.append(handler)

    def row(self, run_id: str, node_id: str, loop_path: Sequence[int] | None = None) -> _Row:
        """The row of the open wait ``node_id`` of run ``run_id`` (inside a for_each, of the
        item ``loop_path``; without it the oldest item's)."""
        for (run, node, _kind, path), row in self.rows.items():
            if (run, node) == (run_id, node_id) and (loop_path is None or tuple(loop_path) == path):
                return row
        item = f" for item {list(loop_path)}" if loop_path is not None else ""
        raise KeyError(f"no open wait {node_id!r}{item} of run {run_id} in the inbox")

    @property
    def pending(self) -> str | None:
        """The question a row asks now ("Really approve ...?"), or None."""
        return next((r.confirm.pending for r in self.rows.values() if r.confirm.pending), None)

    def _row(self, w: WaitInfo) -> _Row:
        workflow = self.engine.run(w.run_id).workflow_id
        if w.kind == "approval":
            comment = widgets.Text(
                placeholder="comment (recorded with the decision)",
                layout=widgets.Layout(width="auto", max_width="100%"),
            )
            comment.add_class("wfkit-inbox-comment")
            approve = widgets.Button(description="Approve", button_style="success", layout=fit())
            approve.add_class("wfkit-inbox-approve")
            reject = widgets.Button(description="Reject", button_style="danger", layout=fit())
            reject.add_class("wfkit-inbox-reject")
            row = _Row(
                w,
                workflow,
                [
                    comment,
                    widgets.HBox([approve, reject], layout=widgets.Layout(flex_flow="row wrap")),
                ],
                buttons={"approve": approve, "reject": reject},
                comment=comment,
            )
            approve.on_click(lambda _b: self.ask(row, "approve"))
            reject.on_click(lambda _b: self.ask(row, "reject"))
            return row
        description, placeholder = _model_hint(self._node(w))
        payload = widgets.Textarea(
            placeholder=placeholder, rows=3, layout=widgets.Layout(width="auto", max_width="100%")
        )
        payload.add_class("wfkit-inbox-payload")
        send = widgets.Button(
            description="Send", button_style="primary", icon="paper-plane", layout=fit()
        )
        send.add_class("wfkit-inbox-send")
        model = widgets.HTML(
            value=(
                '<small style="overflow-wrap:break-word;color:var(--jp-ui-font-color2, #555)">'
                f"payload: {html.escape(description)}</small>"
            )
        )
        row = _Row(w, workflow, [model, payload, send], buttons={"send": send}, payload=payload)
        send.on_click(lambda _b: self.ask(row, "send"))
        return row

    def _node(self, w: WaitInfo) -> Node:
        return self.engine.run(w.run_id).node(w.node_id)

    def _actor(self, row: _Row) -> str | None:
        actor = self.actor.value.strip()
        if not actor:
            row.error.error("enter who you are in the 'actor' field first; nothing was sent")
            self.message.error("no actor: nothing was sent")
        return actor or None

    def _stopped(self, exc: Exception) -> None:
        self.message.error(
            f"the inbox stopped updating: {type(exc).__name__}: {exc}; press Refresh to read it "
            "again"
        )

    # --- asking -------------------------------------------------------------------------------

    def ask(self, row: _Row, action: str) -> None:
        """What a button does: show ``row``'s question ("Really approve ...?"); only its Yes
        acts, with the actor, comment and payload the question showed. ``action`` is
        ``"approve"``, ``"reject"`` or ``"send"``."""
        if action not in ("approve", "reject", "send"):
            raise ValueError(f"unknown inbox action {action!r}; use approve, reject or send")
        with self._lock:
            actor = self._actor(row)
            if actor is None:
                return
            row.error.clear()
            for other in self.rows.values():  # one question at a time
                if other is not row:
                    other.confirm.no()
            w = row.wait
            if action == "send":
                self._ask_send(row, actor)
                return
            comment = row.comment.value.strip() or None
            said = f'Comment: "{_quoted(comment)}".' if comment else "No comment."
            verb = "approved" if action == "approve" else "rejected"
            row.confirm.ask(
                f"Really {action} {_which(w)} of run {w.run_id}?",
                lambda: self.decide(
                    row, approved=action == "approve", actor=actor, comment=comment
                ),
                f"{said} Recorded as {verb} by {actor}.",
            )

    def _ask_send(self, row: _Row, actor: str) -> None:
        w = row.wait
        try:
            payload = parse_payload(row.payload.value)
            check_payload(self._node(w), payload)
        except ValueError as exc:
            row.error.error(f"{exc}; nothing was sent")
            self.message.error(f"signal {w.name!r} was not sent: the payload is refused")
            return
        key = f" (key {w.key})" if w.key else ""
        text = json.dumps(payload, ensure_ascii=False, default=str)
        row.confirm.ask(
            f"Really send signal {w.name!r}{key} to run {w.run_id}?",
            lambda: self.send_signal(row, payload=payload, actor=actor),
            f"Payload: {_quoted(text)}. Recorded as sent by {actor}.{self._shared(w)}",
        )

    def _shared(self, w: WaitInfo) -> str:
        """A warning when other waits listen for the same signal name and key: a signal goes
        to the oldest of them, which may not be this row's."""
        same = [
            r.wait
            for r in self.rows.values()
            if r.wait.kind != "approval" and (r.wait.name, r.wait.key) == (w.name, w.key)
        ]
        if len(same) < 2 or same[0] is w:
            return ""
        first = same[0]
        return (
            f" {len(same)} waits listen for this signal and key: it goes to the oldest, "
            f"{_which(first)} of run {first.run_id}, not necessarily this one."
        )

    # --- actions ----------------------------------------------------------------------------

    def decide(
        self,
        row: _Row,
        *,
        approved: bool,
        actor: str | None = None,
        comment: str | None = None,
    ) -> bool:
        """Approve or reject the approval of ``row`` now (what Yes does); True when recorded.

        ``actor`` and ``comment`` default to what the row's fields hold.
        """
        with self._lock:
            actor = actor or self._actor(row)
            if actor is None:
                return False
            w = row.wait
            if comment is None:
                comment = row.comment.value.strip() or None
            verb = "approved" if approved else "rejected"
            try:
                self.engine.approve(
                    w.run_id,
                    w.node_id,
                    approved,
                    actor=actor,
                    comment=comment,
                    loop_path=w.loop_path or None,
                )
            except WfkitError as exc:
                row.error.error(str(exc))
                self.message.error(f"{_which(w)} of run {w.run_id} was not {verb}: {exc}")
                self.refresh()
                return False
            self.message.ok(f"{verb} {_which(w)} of run {w.run_id} as {actor}{self._then(w)}")
            self.refresh()
            return True

    def send_signal(
        self, row: _Row, *, payload: dict[str, Any] | None = None, actor: str | None = None
    ) -> bool:
        """Check the payload of ``row`` against its wait's model, then send it now (what Yes
        does); True if taken. ``payload`` and ``actor`` default to what the row's fields hold."""
        with self._lock:
            actor = actor or self._actor(row)
            if actor is None:
                return False
            w = row.wait
            try:
                if payload is None:
                    payload = parse_payload(row.payload.value)
                check_payload(self._node(w), payload)
            except ValueError as exc:
                row.error.error(f"{exc}; nothing was sent")
                self.message.error(f"signal {w.name!r} was not sent: the payload is refused")
                return False
            try:
                taken = self.engine.signal(w.name, w.key, payload, actor=actor)
            except WfkitError as exc:
                row.error.error(str(exc))
                self.message.error(f"signal {w.name!r} was not sent: {exc}")
                return False
            if taken:
                key = f" (key {w.key})" if w.key else ""
                self.message.ok(
                    f"sent signal {w.name!r}{key} to run {w.run_id} as {actor}{self._then(w)}"
                )
            else:
                self.message.error(
                    f"nothing waits for signal {w.name!r} (key {w.key}) any more; nothing was sent"
                )
            self.refresh()
            return taken

    def _then(self, w: WaitInfo) -> str:
        """What happens next to the run, when nothing will move it."""
        if stalled(self.engine, w.run_id):
            return f"; {NO_WORKER}: press Start workers (or run engine.run_until_idle())"
        return ""

    def close(self) -> None:
        """Stop the update thread and close the widget and its rows."""
        if stop_live(self, "rows"):  # else refused in __init__: nothing else was built
            with self._lock:
                for row in self.rows.values():
                    row.close()
                self.rows = {}
            for part in (self.workers, self.message, self.summary, self.list, self.actor):
                part.close()
        super().close()
