"""Call: start another registered workflow as a child run, park until it ends.

A waiting call is one bookmark row (kind ``call``, name = the child's workflow id, key = the
child's run id): no job, no thread. The child is started in the checkpoint that parks the
caller; its end resumes the caller (see :mod:`wfkit.engine.subruns`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

import jsonpatch

from wfkit.definition.expressions import evaluate
from wfkit.definition.kinds import Node, NodeKind
from wfkit.definition.values import MAX_DEPTH, TOO_DEEP, json_problem
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Token
from wfkit.engine.nodes.base import NodeHandler, handles
from wfkit.engine.nodes.decision import expression_scope
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import EventKind, RunStatus, TimerKind, TokenState, WaitKind
from wfkit.errors import AdmissionError, ExpressionError

__all__ = ["MAX_CALL_DEPTH", "Call", "ChildOutcome", "call_lineage"]

MAX_CALL_DEPTH = 32
"""Child runs nest at most this deep: a deeper call fails, saying whether the workflows call
each other in a cycle (a workflow reaching itself again in its call lineage) or not."""


def call_lineage(run: RunState) -> list[str]:
    """The workflow ids from the outermost caller down to ``run``'s own.

    A child run keeps its callers' ids in its caller record (``lineage``); a run started
    before that was recorded knows only its own id and those of the callers that did.
    """
    calling = run.caller.get("run")
    before = calling.get("lineage", []) if calling is not None else []
    return [*before, run.flow.id]


def _too_deep(node_id: str, depth: int, lineage: list[str], config: Any) -> str:
    target = config.workflow_id
    head = f"call {node_id!r} would nest child runs {depth} deep"
    if target in lineage:
        last = len(lineage) - 1 - lineage[::-1].index(target)
        ring = [*lineage[last:], target]
        return (
            f"{head}: the workflows call each other without end ({' -> '.join(ring)}); "
            "break the cycle, or give the recursion a condition that ends it sooner"
        )
    chain = lineage if len(lineage) <= 6 else [*lineage[:3], "...", *lineage[-2:]]
    return (
        f"{head}: calls nest deeper than the limit of {MAX_CALL_DEPTH} "
        f"({' -> '.join([*chain, target])}, no workflow calling itself); flatten the chain, "
        "e.g. splice() a called workflow into its caller instead of calling it"
    )


@dataclass(frozen=True)
class ChildOutcome:
    """How a child run ended, as its caller reads it."""

    run_id: str
    status: str
    data: dict[str, Any]
    error: str | None


def _pointer(path: str) -> list[str]:
    return path.split(".")


def _set_path(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set the dotted ``path`` of ``doc``, making the dicts on the way (a non-dict on the way
    raises ``ValueError``)."""
    *parents, last = _pointer(path)
    target: Any = doc
    for part in parents:
        target = target.setdefault(part, {}) if isinstance(target, dict) else None
        if not isinstance(target, dict):
            raise ValueError(f"{path!r} runs through {part!r}, which is not an object")
    if not isinstance(target, dict):
        raise ValueError(f"{path!r} runs through a value that is not an object")
    target[last] = value


def _check_depth(value: Any, path: str, root: str) -> None:
    """Raise ``ValueError`` when ``value`` set at the dotted ``path`` of the document ``root``
    nests it deeper than the limit (a value that was within it may not be, placed deeper)."""
    levels = len(_pointer(path))  # the document and the dicts on the way
    problem = json_problem(value, f"{root}.{path}", depth=levels + 1)
    if problem is None and levels > MAX_DEPTH:
        problem = f"{root}.{path}: {TOO_DEEP}"
    if problem is not None:
        raise ValueError(problem)


def _get_path(doc: Any, path: str) -> tuple[bool, Any]:
    for part in _pointer(path):
        if not isinstance(doc, dict) or part not in doc:
            return False, None
        doc = doc[part]
    return True, doc


@handles(NodeKind.CALL)
class Call(NodeHandler):
    """Leaves through ``next`` when the child completes (its bound fields copied back) and
    through ``failed`` when it fails or is cancelled (unconnected: the failure rules)."""

    def enter(self, cp: Checkpoint, token_id: str, token: Token, node_id: str, node: Node) -> None:
        config = node.config
        caller = cp.run.caller.get("run")
        depth = (caller["depth"] if caller is not None else 0) + 1
        if depth > MAX_CALL_DEPTH:
            cp.fail_step(token_id, _too_deep(node_id, depth, call_lineage(cp.run), config))
            return
        if cp.calls is None:
            cp.fail_step(token_id, f"call {node_id!r}: this checkpoint cannot start child runs")
            return
        try:
            flow = cp.calls.resolve(config.workflow_id, config.version)
        except AdmissionError as exc:
            cp.fail_step(token_id, f"call {node_id!r} could not start a child run: {exc}")
            return
        try:
            document = self._input(cp, token, node)
            document = cp.calls.admit(flow, document)
        except ExpressionError as exc:
            cp.fail_step(token_id, f"call {node_id!r}: input expression failed: {exc}")
            return
        except (TypeError, ValueError) as exc:
            cp.fail_step(token_id, f"call {node_id!r}: the input is not a JSON document ({exc})")
            return
        except AdmissionError as exc:
            reasons = "; ".join(exc.reasons) or str(exc)
            cp.fail_step(
                token_id,
                f"call {node_id!r}: the data model of {flow.id!r} v{flow.version} refused the "
                f"input, so no child run was started: {reasons}; fix the call's input mapping",
            )
            return
        child_id = cp.calls.start(cp, token_id, node_id, flow, document)
        # timer "call" with no row: a child that ends in another engine process wakes this
        # token with a due row of that kind (see subruns.py)
        cp.set_token(token_id, st=TokenState.WAIT, child=child_id, timer=TimerKind.CALL, due=None)
        info = {"workflow": flow.id, "version": flow.version}
        cp.bookmarks_add.append(
            (token_id, node_id, WaitKind.CALL, flow.id, child_id, cp.now, None, json.dumps(info))
        )
        cp.event(EventKind.CALL_STARTED, node_id, token_id, detail={"child_run": child_id, **info})

    @staticmethod
    def _input(cp: Checkpoint, token: Token, node: Node) -> dict[str, Any]:
        mapping = node.config.input
        if mapping is None:
            return dict(json.loads(cp.run.data_json()))
        scope = expression_scope(cp, token)
        document: dict[str, Any] = {}
        for field_name, expression in mapping.items():
            value = evaluate(expression, cp.run.data, extra=scope)
            _check_depth(value, field_name, "input")
            _set_path(document, field_name, value)
        return dict(json.loads(json.dumps(document, allow_nan=False)))

    def on_timer(
        self, cp: Checkpoint, token_id: str, node_id: str, node: Node, kind: TimerKind
    ) -> None:
        token = cp.run.tokens[token_id]
        outcome = cp.calls.outcome(token.get("child")) if cp.calls is not None else None
        if outcome is None or not RunStatus(outcome.status).terminal:
            cp.timers_del.append((token_id, kind))  # woken early: the child has not ended
            return
        self.child_ended(cp, token_id, node_id, node, outcome)

    def child_ended(
        self, cp: Checkpoint, token_id: str, node_id: str, node: Node, child: ChildOutcome
    ) -> None:
        """The child run ended: copy back what ``bind`` names and go on, or fail the call."""
        token = cast(Token, {k: v for k, v in cp.run.tokens[token_id].items() if k != "child"})
        cp.run.put("tokens", token_id, {**token, "st": TokenState.MOVING})
        cp.drop_bookmark(token_id)
        cp.clear_timer(token_id)
        config = node.config
        detail = {"child_run": child.run_id, "workflow": config.workflow_id}
        if child.status != RunStatus.COMPLETED.value:
            what = "was cancelled" if child.status == RunStatus.CANCELLED.value else "failed"
            error = (
                f"call {node_id!r}: child run {child.run_id} of {config.workflow_id!r} {what}: "
                f"{child.error or child.status}"
            )
            cp.event(EventKind.CALL_FAILED, node_id, token_id, error=error, detail=detail)
            cp.fail(token_id, error)
            return
        changed = json.loads(cp.run.data_json())
        try:
            for source, target in (config.bind or {}).items():
                found, value = _get_path(child.data, source)
                if found:
                    _check_depth(value, target, "data")
                    _set_path(changed, target, value)
        except ValueError as exc:
            error = f"call {node_id!r}: cannot bind the child's data: {exc}"
            cp.event(EventKind.CALL_FAILED, node_id, token_id, error=error, detail=detail)
            cp.fail(token_id, error)
            return
        cp.run.apply_patch(jsonpatch.make_patch(cp.run.data, changed).patch)
        cp.event(EventKind.CALL_COMPLETED, node_id, token_id, detail=detail)
        cp.leave(token_id, node_id, "next")
