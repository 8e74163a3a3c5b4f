"""Stepping through a run's stored history: its checkpoints, the data document as it was after
each, and where its tokens stood then.

Nothing is re-run: every checkpoint row in ``wf_events`` carries the JSON Patch it applied to the
data document and the change it made to the engine's cursor (the first event of a checkpoint
carries both, the others neither). Folding the patches in order onto the run's input rebuilds the
document as the engine had it after any checkpoint; folding the cursor changes rebuilds its
tokens, hence the status of every node at that point.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import jsonpatch

from wfkit.engine.cursor import SagaEntry, Token, revive
from wfkit.engine.flows import CompiledFlow
from wfkit.engine.loops import entry_path, loop_path
from wfkit.engine.records import Event, TokenView
from wfkit.engine.vocabulary import EventKind, NodeStatus, TokenState
from wfkit.errors import UsageError

if TYPE_CHECKING:
    from wfkit.engine.runtime import Runtime

__all__ = [
    "SUCCEEDED",
    "StoredCheckpoint",
    "checkpoints",
    "data_at",
    "documents_at",
    "event_statuses",
    "statuses_at",
    "token_status",
    "token_views",
    "tokens_at",
]

SUCCEEDED = (
    EventKind.STEP_COMPLETED,
    EventKind.DECISION_TAKEN,
    EventKind.SIGNAL_RECEIVED,
    EventKind.APPROVAL_APPROVED,
    EventKind.APPROVAL_REJECTED,
    EventKind.TIMER_FIRED,
    EventKind.JOIN_COMPLETED,
    EventKind.PARALLEL_FORKED,
    EventKind.FOR_EACH_STARTED,
    EventKind.CALL_COMPLETED,
)
"""Event kinds that say their node succeeded (the monitor's statuses and the for_each progress
read the same words)."""
_FAILED = (
    EventKind.STEP_FAILED,
    EventKind.STEP_CRASHED,
    EventKind.BRANCH_FAILED,
    EventKind.JOIN_PARTIAL,
    EventKind.RUN_FAILED,
    EventKind.CALL_FAILED,
)
_STATES = {state.value: state for state in TokenState}  # stored value -> member, fast
_TOKEN_STATUS = {
    TokenState.READY: NodeStatus.RUNNING,
    TokenState.WAIT: NodeStatus.WAITING,
    TokenState.TIMER: NodeStatus.WAITING,
    TokenState.RETRY: NodeStatus.RETRYING,
    TokenState.RUN_RETRY: NodeStatus.RETRYING,
    TokenState.SUSPENDED: NodeStatus.FAILED,
    TokenState.CANCELLING: NodeStatus.CANCELLING,
}


@dataclass(frozen=True)
class StoredCheckpoint:
    """One stored checkpoint of a run: the events one store transaction recorded for it.

    ``seq`` is the number of its last event (pass it to ``run.data_at``), ``first_seq`` that of
    its first; ``kinds`` and ``nodes`` are its events' kinds and node ids, in order;
    ``changed_data`` is True when it changed the data document.
    """

    seq: int
    first_seq: int
    at: datetime
    kinds: tuple[EventKind, ...]
    nodes: tuple[str | None, ...]
    changed_data: bool

    @property
    def label(self) -> str:
        """``"#3 step.completed a.flaky"`` (and ``"+2 more"`` for the rest of its events)."""
        head = f"#{self.seq} {self.kinds[-1]}"
        if self.nodes[-1]:
            head += f" {self.nodes[-1]}"
        more = len(self.kinds) - 1
        return head + (f" (+{more} more)" if more else "")


def _rows(runtime: Runtime, run_id: str) -> list[tuple[Any, ...]]:
    rows = runtime.store.query("run_checkpoint_rows", [run_id])
    if not rows:  # every admitted run has its run.started event
        runtime.state(run_id)  # raises UsageError for a run that does not exist
    return list(rows)


def checkpoints(runtime: Runtime, run_id: str) -> list[StoredCheckpoint]:
    """The run's stored checkpoints, oldest first (the engine side of ``run.checkpoints()``)."""
    found: list[StoredCheckpoint] = []
    group: list[tuple[Any, ...]] = []
    for row in _rows(runtime, run_id):
        _seq, at, _kind, _node, patch, delta = row
        if group and (patch is not None or delta is not None or at != group[0][1]):
            found.append(_checkpoint(group))
            group = []
        group.append(row)
    if group:
        found.append(_checkpoint(group))
    return found


def _checkpoint(rows: Sequence[tuple[Any, ...]]) -> StoredCheckpoint:
    return StoredCheckpoint(
        int(rows[-1][0]),
        int(rows[0][0]),
        rows[0][1],
        tuple(EventKind(r[2]) for r in rows),
        tuple(r[3] for r in rows),
        any(r[4] for r in rows),
    )


def _check_seq(run_id: str, seq: object, last: int) -> int:
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= last:
        raise UsageError(
            f"run {run_id} has events 1 to {last}; pass a seq between 0 (its input) and {last} "
            f"(see run.checkpoints()), not {seq!r}"
        )
    return seq


def data_at(runtime: Runtime, run_id: str, seq: int) -> dict[str, Any]:
    """The data document after the checkpoint that recorded event ``seq`` (the engine side of
    ``run.data_at``): the run's input with every stored patch up to it applied in order."""
    return documents_at(runtime, run_id, [seq])[seq]


def documents_at(runtime: Runtime, run_id: str, seqs: Iterable[int]) -> dict[int, dict[str, Any]]:
    """:func:`data_at` for several points in one pass over the stored patches."""
    rows = _rows(runtime, run_id)
    last = int(rows[-1][0])
    wanted = sorted({_check_seq(run_id, seq, last) for seq in seqs})
    state = runtime.state(run_id)
    if state.input_json is None:  # not reachable for runs the engine admitted
        raise UsageError(f"run {run_id} has no recorded input to replay its patches onto")
    data: dict[str, Any] = json.loads(state.input_json)
    found: dict[int, dict[str, Any]] = {}
    rows_left = iter(rows)
    pending: tuple[Any, ...] | None = next(rows_left, None)
    for seq in wanted:
        while pending is not None and pending[0] <= seq:
            if pending[4]:
                data = jsonpatch.apply_patch(data, json.loads(pending[4]), in_place=True)
            pending = next(rows_left, None)
        found[seq] = copy.deepcopy(data)
    return found


def tokens_at(runtime: Runtime, run_id: str, seq: int) -> dict[str, TokenView]:
    """Where each token of the run stood after the checkpoint that recorded event ``seq``."""
    rows = _rows(runtime, run_id)
    _check_seq(run_id, seq, int(rows[-1][0]))
    tokens: dict[str, Token] = {}
    saga: dict[str, SagaEntry] = {}  # a compensation's loop cell is its entry's
    for row_seq, _at, _kind, _node, _patch, delta in rows:
        if row_seq > seq:
            break
        if not delta:
            continue
        changes = json.loads(delta)
        for path, value in changes.get("s", {}).items():
            kind, _, key = path.partition(":")
            if kind == "tokens":
                tokens[key] = revive(kind, value)
            elif kind == "saga":
                saga[key] = revive(kind, value)
        for path in changes.get("d", ()):
            kind, _, key = path.partition(":")
            if kind == "tokens":
                tokens.pop(key, None)
            elif kind == "saga":
                saga.pop(key, None)
    return token_views(runtime.state(run_id).flow, tokens, saga)


def token_views(
    flow: CompiledFlow, tokens: Mapping[str, Token], saga: Mapping[str, SagaEntry]
) -> dict[str, TokenView]:
    """What users see of a run's tokens (``saga``: the run's entries, where a compensation's
    token finds the loop cell of the visit it undoes)."""
    views: dict[str, TokenView] = {}
    for token_id, token in tokens.items():
        compensation = "comp" in token
        if compensation:
            entry = saga.get(token.get("entry") or "")
            li = token["li"]
            path = entry_path(entry) if entry is not None else (() if li is None else (li,))
        else:
            path = loop_path(flow, token["fr"]) if token["fr"] else ()
        due = token.get("due")
        views[token_id] = TokenView(
            token_id,
            token["node"],
            _STATES[token["st"]],
            int(token["att"]),
            path,
            compensation,
            datetime.fromisoformat(due) if due else None,
            token.get("child"),
            token.get("error"),
        )
    return views


def event_statuses(history: Iterable[Event]) -> tuple[dict[str, NodeStatus], set[str]]:
    """Node statuses that events alone tell (the last word per node wins), and every node an
    event names."""
    statuses: dict[str, NodeStatus] = {}
    named: set[str] = set()
    for event in history:
        node = event.node_id
        if node is None:
            continue
        named.add(node)
        if event.kind in SUCCEEDED:
            statuses[node] = NodeStatus.SUCCEEDED
        elif event.kind in _FAILED:
            statuses[node] = NodeStatus.FAILED
        elif event.kind == EventKind.COMPENSATION_COMPLETED:
            statuses[node] = NodeStatus.COMPENSATED
        elif event.kind == EventKind.COMPENSATION_SKIPPED:
            statuses[node] = NodeStatus.SKIPPED
    return statuses, named


def token_status(state: TokenState, compensation: bool, before: NodeStatus | None) -> NodeStatus:
    """The status a token in ``state`` gives its node (``compensation``: the token runs its
    node's compensation; ``before``: what the node's events said)."""
    if compensation:
        return NodeStatus.COMPENSATING
    return _TOKEN_STATUS.get(state, before or NodeStatus.RUNNING)


def statuses_at(history: Sequence[Event], tokens: Mapping[str, TokenView]) -> dict[str, NodeStatus]:
    """Node statuses as they were at a point: from the events up to it (``history``, cut there)
    and the tokens then (:func:`tokens_at`). Unlike ``run.node_statuses()`` it never says
    ``blocked`` (that depends on the processes running now) nor ``skipped`` for unreached nodes.
    """
    statuses, _named = event_statuses(history)
    for token in tokens.values():
        before = statuses.get(token.node_id)
        statuses[token.node_id] = token_status(token.state, token.compensation, before)
    return statuses
