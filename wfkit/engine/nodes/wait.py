"""Wait: park on a named signal with a correlation key — one bookmark row, no job, no thread."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonpatch
from pydantic import ValidationError

from wfkit.definition.expressions import evaluate
from wfkit.definition.kinds import Node, NodeKind
from wfkit.definition.values import (
    MAX_DEPTH,
    TOO_DEEP,
    depth_problem,
    json_problem,
    text_problem,
)
from wfkit.definition.workflow import import_model
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Token
from wfkit.engine.loops import loop_path
from wfkit.engine.nodes.base import NodeHandler, handles
from wfkit.engine.nodes.decision import expression_scope
from wfkit.engine.outputs import record_output
from wfkit.engine.vocabulary import EventKind, TimerKind, TokenState, WaitKind
from wfkit.errors import DefinitionError, ExpressionError, SignalError

_WAITING = {
    WaitKind.SIGNAL: EventKind.SIGNAL_WAITING,
    WaitKind.APPROVAL: EventKind.APPROVAL_WAITING,
}


def fit_payload(node: Node, payload: Any) -> dict[str, Any]:
    """The payload as the wait's model reads it (plain JSON where it declares none).

    Raises ``ValidationError`` (or ``TypeError``/``ValueError`` for non-JSON) when it does not fit.
    """
    problem = depth_problem(payload, "payload")  # before json.dumps or pydantic recurse
    if problem is not None:
        raise ValueError(problem)
    model_path = getattr(node.config, "payload", None)
    if not model_path:
        return dict(json.loads(json.dumps(payload)))
    model = import_model(model_path, f"the payload model of wait {node.config.signal!r}")
    return model.model_validate(payload).model_dump(mode="json")


def park(
    cp: Checkpoint,
    token_id: str,
    node_id: str,
    kind: WaitKind,
    name: str,
    key: str | None,
    timeout: Any,
    timer_kind: TimerKind,
    detail: dict[str, Any] | None = None,
) -> None:
    """Park a token on a bookmark row, with an optional deadline timer. Inside a for_each the
    row's detail names the item (``loop_path``, outermost index first): one node's waits of
    several items are told apart by it (``engine.approve(..., loop_path=)``, the Inbox)."""
    path = loop_path(cp.flow, cp.run.tokens[token_id]["fr"])
    detail = {**(detail or {}), **({"loop_path": list(path)} if path else {})}
    cp.set_token(token_id, st=TokenState.WAIT)
    deadline = cp.start_timer(token_id, timer_kind, timeout) if timeout is not None else None
    cp.bookmarks_add.append(
        (token_id, node_id, kind, name, key, cp.now, deadline, json.dumps(detail))
    )
    info = {"name": name, "key": key, **({"deadline": deadline.isoformat()} if deadline else {})}
    cp.event(_WAITING[kind], node_id, token_id, detail=info)


def unpark(cp: Checkpoint, token_id: str) -> None:
    """The bookmark was consumed (or expired): the token stops waiting."""
    cp.clear_timer(token_id)
    cp.set_token(token_id, st=TokenState.MOVING)


@handles(NodeKind.WAIT)
class Wait(NodeHandler):
    """Parks until ``engine.signal(name, key, payload)`` or the timeout, whichever comes first."""

    def enter(self, cp: Checkpoint, token_id: str, token: Token, node_id: str, node: Node) -> None:
        config = node.config
        key = None
        if config.correlate:
            try:
                value = evaluate(config.correlate, cp.run.data, extra=expression_scope(cp, token))
            except ExpressionError as exc:
                cp.fail_step(token_id, str(exc))
                return
            problem = json_problem(value, "key")
            if problem is None and value is not None:
                key = str(value)
                problem = text_problem(key)
            if problem is not None:
                cp.fail_step(
                    token_id,
                    f"wait {node_id!r}: correlate expression {config.correlate!r} gave a key "
                    f"that cannot be stored: {problem}",
                )
                return
        posted = cp.take_posted(config.signal, key)
        while posted is not None:  # the signal came first and was kept for this wait
            raw, sender = posted
            try:
                payload = fit_payload(node, raw)
                ops = bound_patch(node, cp.run.data, payload, cp.binder)
                cp.set_token(token_id, st=TokenState.WAIT)
                self.on_signal(cp, token_id, node_id, node, payload, actor=sender, ops=ops)
                return
            except (ValidationError, DefinitionError, SignalError, TypeError, ValueError) as exc:
                cp.event(
                    EventKind.SIGNAL_REFUSED,
                    node_id,
                    token_id,
                    actor=sender,
                    error=str(exc),
                    detail={"posted": True},
                )
            posted = cp.take_posted(config.signal, key)
        signal, timeout = config.signal, config.timeout
        park(cp, token_id, node_id, WaitKind.SIGNAL, signal, key, timeout, TimerKind.TIMEOUT)

    def on_timer(
        self, cp: Checkpoint, token_id: str, node_id: str, node: Node, kind: TimerKind
    ) -> None:
        cp.drop_bookmark(token_id)
        unpark(cp, token_id)
        cp.event(EventKind.SIGNAL_ELAPSED, node_id, token_id)
        cp.leave(token_id, node_id, "elapsed")

    def on_signal(
        self,
        cp: Checkpoint,
        token_id: str,
        node_id: str,
        node: Node,
        payload: dict[str, Any],
        actor: str | None = None,
        ops: list[dict[str, Any]] | None = None,
    ) -> None:
        """Apply the payload as the node's ``bind`` says (``ops``, from :func:`bound_patch`,
        where the caller worked it out before changing anything), then continue through
        ``next``."""
        if ops is None:
            ops = bound_patch(node, cp.run.data, payload, cp.binder)
        unpark(cp, token_id)
        cp.run.apply_patch(ops)
        if payload:
            cell = loop_path(cp.flow, cp.run.tokens[token_id]["fr"])
            record_output(cp, node_id, cell, payload)
        cp.event(
            EventKind.SIGNAL_RECEIVED,
            node_id,
            token_id,
            output=payload or None,
            **({"actor": actor} if actor else {}),
        )
        cp.leave(token_id, node_id, "next")


def bound_patch(
    node: Node,
    data: dict[str, Any],
    payload: dict[str, Any],
    binder: Callable[[str], Callable[..., Any]] | None,
) -> list[dict[str, Any]]:
    """The JSON patch the wait ``node``'s ``bind`` makes of ``payload`` to ``data`` (a binder's
    changes, or the payload fields copied to data fields).

    Raises ``SignalError`` when the data it would make cannot be stored (a binder's value, a
    payload value placed so deep that the data nests too deep); nothing is changed.
    """
    bind = node.config.bind
    ops: list[dict[str, Any]] = []
    if isinstance(bind, str) and binder is not None:
        changed = json.loads(json.dumps(data))
        binder(bind)(changed, payload)
        _refuse_unstorable(node, f"the binder {bind!r} made data that", changed, "data")
        ops = jsonpatch.make_patch(data, changed).patch
    elif isinstance(bind, dict):
        created: set[tuple[str, ...]] = set()
        for field_name, target in bind.items():
            if field_name in payload:
                parts = target.split(".")
                value = payload[field_name]
                # the payload was checked; placed deeper in the data it may nest too deep
                where, depth = f"data.{target}", len(parts) + 1
                _refuse_unstorable(
                    node, f"binding {field_name!r} makes data that", value, where, depth
                )
                ops += _parents(node, data, parts, created)
                ops.append({"op": "add", "path": _pointer(parts), "value": value})
    return ops


def _pointer(parts: list[str]) -> str:
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def _parents(
    node: Node, data: dict[str, Any], parts: list[str], created: set[tuple[str, ...]]
) -> list[dict[str, Any]]:
    """The ops creating the missing objects a dotted bind target lies in (``shipping.city`` on
    data without ``shipping``); ``SignalError`` when one of them is there but no object."""
    ops: list[dict[str, Any]] = []
    here: Any = data
    for depth in range(1, len(parts)):
        prefix = tuple(parts[:depth])
        key = parts[depth - 1]
        if prefix in created or (isinstance(here, dict) and key not in here):
            if prefix not in created:
                created.add(prefix)
                ops.append({"op": "add", "path": _pointer(parts[:depth]), "value": {}})
            here = {}
            continue
        here = here.get(key) if isinstance(here, dict) else None
        if not isinstance(here, dict):
            raise SignalError(
                f"signal {node.config.signal!r} refused: its bind writes data."
                f"{'.'.join(parts)}, but data.{'.'.join(prefix)} holds "
                f"{type(here).__name__ if here is not None else 'null'}, not an object; the "
                "wait is left in place (fix the bind target, or the data)"
            )
    return ops


def _refuse_unstorable(node: Node, what: str, value: Any, where: str, depth: int = 1) -> None:
    """Raise ``SignalError`` (nothing changes, the wait stays) when what a signal's payload
    would put into the data cannot be stored; no value here is walked recursively."""
    problem = json_problem(value, where, depth)
    if problem is None and depth - 1 > MAX_DEPTH:  # the target's own dicts nest too deep
        problem = f"{where}: {TOO_DEEP}"
    if problem is not None:
        raise SignalError(
            f"signal {node.config.signal!r} refused: {what} cannot be stored ({problem}); "
            "the wait is left in place"
        )
