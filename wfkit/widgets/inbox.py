"""``Inbox``: the open waits and approvals of an engine, with the buttons that close them.

Per approval: a comment field, Approve and Reject. Per signal wait: a JSON payload and Send; the
payload is parsed and checked against the wait's model *before* anything is sent, so a bad one
shows its error and leaves the wait as it is. Every action records the actor field's value.
A decided wait moves its run on at once under ``engine.start_workers()``; without workers, the
next ``engine.run_until_idle()`` does.

CSS hooks: ``wfkit-inbox`` (the widget), ``wfkit-actor``, ``wfkit-inbox-refresh``,
``wfkit-inbox-message`` (+ ``wfkit-ok`` / ``wfkit-error``), ``wfkit-inbox-summary``,
``wfkit-inbox-list``; per open wait a row ``wfkit-inbox-item`` plus ``wfkit-inbox-approval``
or ``wfkit-inbox-signal``, ``wfkit-run-<run id>`` and ``wfkit-node-<node id>`` (see
:func:`~wfkit.widgets.confirm.css_token`), holding ``wfkit-inbox-comment``,
``wfkit-inbox-approve``, ``wfkit-inbox-reject`` (approvals) or ``wfkit-inbox-payload``,
``wfkit-inbox-send`` (signals), and ``wfkit-inbox-error``.
"""

from __future__ import annotations

import html
import json
from typing import Any

import ipywidgets as widgets
from pydantic import ValidationError

from wfkit.definition.kinds import Node
from wfkit.definition.workflow import import_model
from wfkit.engine import Engine, WaitInfo
from wfkit.engine.nodes.wait import fit_payload
from wfkit.errors import DefinitionError, WfkitError
from wfkit.widgets.confirm import Message, actor_field, css_token

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
    """One open wait: what it is on the left, its controls on the right."""

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
        describe = widgets.HTML(value=_describe(wait, workflow))
        describe.add_class("wfkit-inbox-description")
        super().__init__(
            [describe, widgets.VBox([*controls, self.error])],
            layout=widgets.Layout(border_bottom="1px solid #dddddd", padding="4px 0"),
        )
        self.add_class("wfkit-inbox-item")
        self.add_class(f"wfkit-inbox-{wait.kind}")
        self.add_class(f"wfkit-run-{css_token(wait.run_id)}")
        self.add_class(f"wfkit-node-{css_token(wait.node_id)}")


def _describe(w: WaitInfo, workflow: str) -> str:
    if w.kind == "approval":
        who = ", ".join(w.detail.get("assignees") or []) or "anyone"
        what = f"<b>approval {html.escape(w.node_id)}</b> (for {html.escape(who)})"
    else:
        key = f" key <code>{html.escape(w.key)}</code>" if w.key else ""
        what = f"<b>signal {html.escape(w.name)}</b>{key} at {html.escape(w.node_id)}"
    due = f"; due {w.deadline:%Y-%m-%d %H:%M}" if w.deadline else ""
    return (
        f'<div style="min-width:320px;line-height:1.4">{what}<br><small>run '
        f"<code>{html.escape(w.run_id)}</code> of {html.escape(workflow)} · since "
        f"{w.since:%Y-%m-%d %H:%M}{due}</small></div>"
    )


class Inbox(widgets.VBox):
    """Open signal waits and approvals, with approve/reject and send-signal buttons.

    Parameters
    ----------
    engine : Engine
        Where the waits are.
    actor : str, optional
        Who acts; the OS user by default (editable in the widget).

    Examples
    --------
    >>> import wfkit as wf
    >>> from wfkit.widgets import Inbox
    >>> inbox = Inbox(wf.Engine(":memory:"), actor="ana")
    >>> inbox.summary.value
    'nothing is waiting'
    """

    def __init__(self, engine: Engine, actor: str | None = None) -> None:
        self.engine = engine
        self.actor = actor_field(actor)
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.refresh_button.add_class("wfkit-inbox-refresh")
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.message = Message("wfkit-inbox-message")
        self.summary = widgets.HTML(value="")
        self.summary.add_class("wfkit-inbox-summary")
        self.list = widgets.VBox([])
        self.list.add_class("wfkit-inbox-list")
        self.rows: dict[tuple[str, str, str], _Row] = {}
        super().__init__(
            [
                widgets.HBox([self.actor, self.refresh_button]),
                self.message,
                self.summary,
                self.list,
            ]
        )
        self.add_class("wfkit-inbox")
        self.refresh()

    # --- listing ----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read the open waits again; rows still open keep what was typed into them."""
        # a call waits for its child run, not for a person or a sender: not listed here
        waits = [w for w in self.engine.waiting() if w.kind != "call"]
        rows: dict[tuple[str, str, str], _Row] = {}
        for w in waits:
            ident = (w.run_id, w.node_id, w.kind)
            kept = self.rows.pop(ident, None)
            rows[ident] = kept if kept is not None else self._row(w)
        for gone in self.rows.values():
            gone.close()
        self.rows = rows
        self.list.children = list(rows.values())
        approvals = sum(1 for w in waits if w.kind == "approval")
        signals = len(waits) - approvals
        self.summary.value = (
            f"{len(waits)} open: {approvals} approval{'s' * (approvals != 1)}, "
            f"{signals} signal wait{'s' * (signals != 1)}"
            if waits
            else "nothing is waiting"
        )

    def row(self, run_id: str, node_id: str) -> _Row:
        """The row of the open wait ``node_id`` of run ``run_id``."""
        for (run, node, _kind), row in self.rows.items():
            if (run, node) == (run_id, node_id):
                return row
        raise KeyError(f"no open wait {node_id!r} of run {run_id} in the inbox")

    def _row(self, w: WaitInfo) -> _Row:
        workflow = self.engine.run(w.run_id).workflow_id
        if w.kind == "approval":
            comment = widgets.Text(placeholder="comment (recorded with the decision)")
            comment.add_class("wfkit-inbox-comment")
            approve = widgets.Button(description="Approve", button_style="success")
            approve.add_class("wfkit-inbox-approve")
            reject = widgets.Button(description="Reject", button_style="danger")
            reject.add_class("wfkit-inbox-reject")
            row = _Row(
                w,
                workflow,
                [comment, widgets.HBox([approve, reject])],
                buttons={"approve": approve, "reject": reject},
                comment=comment,
            )
            approve.on_click(lambda _b: self.decide(row, approved=True))
            reject.on_click(lambda _b: self.decide(row, approved=False))
            return row
        description, placeholder = _model_hint(self._node(w))
        payload = widgets.Textarea(placeholder=placeholder, rows=3)
        payload.add_class("wfkit-inbox-payload")
        send = widgets.Button(description="Send", button_style="primary", icon="paper-plane")
        send.add_class("wfkit-inbox-send")
        model = widgets.HTML(value=f"<small>payload: {html.escape(description)}</small>")
        row = _Row(w, workflow, [model, payload, send], buttons={"send": send}, payload=payload)
        send.on_click(lambda _b: self.send_signal(row))
        return row

    def _node(self, w: WaitInfo) -> Node:
        return self.engine.run(w.run_id).node(w.node_id)

    def _actor(self, row: _Row) -> str | None:
        actor = self.actor.value.strip()
        if not actor:
            row.error.error("enter who you are in the 'actor' field first; nothing was sent")
            self.message.error("no actor: nothing was sent")
        return actor or None

    # --- actions ----------------------------------------------------------------------------

    def decide(self, row: _Row, *, approved: bool) -> bool:
        """Approve or reject the approval of ``row`` with its comment; True when recorded."""
        actor = self._actor(row)
        if actor is None:
            return False
        w = row.wait
        comment = row.comment.value.strip() or None
        verb = "approved" if approved else "rejected"
        try:
            self.engine.approve(w.run_id, w.node_id, approved, actor=actor, comment=comment)
        except WfkitError as exc:
            row.error.error(str(exc))
            self.message.error(f"{w.node_id} of run {w.run_id} was not {verb}: {exc}")
            self.refresh()
            return False
        self.message.ok(f"{verb} {w.node_id} of run {w.run_id} as {actor}")
        self.refresh()
        return True

    def send_signal(self, row: _Row) -> bool:
        """Check the payload of ``row`` against its wait's model, then send it; True if taken."""
        actor = self._actor(row)
        if actor is None:
            return False
        w = row.wait
        try:
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
            self.message.ok(f"sent signal {w.name!r}{key} to run {w.run_id} as {actor}")
        else:
            self.message.error(
                f"nothing waits for signal {w.name!r} (key {w.key}) any more; nothing was sent"
            )
        self.refresh()
        return taken
