"""Sagas: compensable steps pushed on a persisted stack, unwound in reverse order.

A completed step that has a compensation is pushed (``run.saga``, and a ``wf_saga_steps`` row).
A step that fails for good inside a saga unwinds it: every compensable step of that saga (and of
nested sagas with ``policy="unwind"``) is compensated, newest first, each compensation a durable
job with its own retry policy. When a nested saga with ``policy="keep"`` is left, its steps are
kept: an outer unwind no longer undoes them. An inner failure unwinds the inner saga completely
before it reports outward; once the outermost saga is unwound the run fails. A compensation that
fails for good suspends the run for an operator (``engine.recover_compensation``).
"""

from __future__ import annotations

from typing import Any

from wfkit.definition.policy import Policy, SagaPolicy
from wfkit.engine import run_retries
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Ending, FrameRef, SagaEntry, Unwind, UnwindThen
from wfkit.engine.executor import AttemptResult
from wfkit.engine.loops import entry_path, loop_detail, loop_item, loop_path
from wfkit.engine.merge import merge_result
from wfkit.engine.vocabulary import (
    EndKind,
    EventKind,
    Recovery,
    RunStatus,
    SagaEntryState,
    TimerKind,
    TokenState,
)
from wfkit.store.rows import SagaStepRow, SagaStepUpdate

__all__ = [
    "late_compensation",
    "on_compensation_result",
    "on_move",
    "push",
    "recover",
    "start_unwind",
    "unwind_for",
]

_DEFAULT = Policy()
_UNDOABLE = (SagaEntryState.DONE, SagaEntryState.COMPENSATING)  # an unwind compensates these


def push(cp: Checkpoint, token_id: str, node_id: str, output: Any = None) -> None:
    """A compensable step completed: remember how to undo it.

    The entry keeps what its compensation must see of this visit (a loop may visit the step
    many times): the output (``out``), and inside for_each loops the cell (``li``, ``lp``) and
    the item."""
    node = cp.flow.nodes[node_id]
    if not node.compensation or not node.saga:
        return
    position = len(cp.run.saga) + 1
    entry_id = cp.run.next_id("s")
    frames = cp.run.tokens[token_id]["fr"]
    path = loop_path(cp.flow, frames)
    entry: SagaEntry = {
        "saga": node.saga,
        "node": node_id,
        "comp": node.compensation,
        "pos": position,
        "state": SagaEntryState.DONE,
        "li": path[-1] if path else None,
        "out": output,
    }
    if frames:
        entry = {**entry, "fr": frames}
    if path:
        item = loop_item(cp.flow, cp.run.frames, frames, cp.run.items)
        entry = {**entry, "lp": list(path), "item": item}
    cp.run.put("saga", entry_id, entry)
    cp.saga_rows.append(
        (
            "add",
            SagaStepRow(
                cp.run.run_id,
                node.saga,
                node_id,
                token_id,
                node.compensation,
                position,
                SagaEntryState.DONE,
                cp.now,
            ),
        )
    )


def _set_entry(cp: Checkpoint, entry_id: str, status: SagaEntryState) -> None:
    entry: SagaEntry = {**cp.run.saga[entry_id], "state": status}
    cp.run.put("saga", entry_id, entry)
    cp.saga_rows.append(("set", SagaStepUpdate(status, cp.now, cp.run.run_id, entry["pos"])))


def _in_cell(entry: SagaEntry, frames: list[FrameRef]) -> bool:
    """True when the entry was made in the branch or loop cell ``frames`` (or deeper inside it).

    A saga inside a for_each body or a parallel branch is one saga per cell: a cell that leaves
    it commits, or a failure in it unwinds, only the steps done in that cell."""
    made_in = entry.get("fr") or []
    return bool(made_in[: len(frames)] == frames)


def on_move(
    cp: Checkpoint, from_node: str, to_node: str | None, frames: list[FrameRef] | None = None
) -> None:
    """A token moved between nodes (or its path ended): sagas it left are committed (the steps
    done in its branch or loop cell, ``frames``)."""
    flow = cp.flow
    if from_node not in flow.nodes:
        return
    target = flow.node_sagas(to_node) if to_node is not None else ()
    if to_node is not None and flow.nodes[from_node].saga == flow.nodes[to_node].saga:
        return
    left = [s for s in flow.node_sagas(from_node) if s not in target]
    for saga_id in left:  # innermost first
        spec = flow.sagas.get(saga_id)
        if spec is None:
            continue
        if spec.parent is None or spec.policy == SagaPolicy.KEEP:
            for entry_id, entry in list(cp.run.saga.items()):
                if (
                    entry["state"] == SagaEntryState.DONE
                    and saga_id in flow.saga_chain(entry["saga"])
                    and _in_cell(entry, frames or [])
                ):
                    kept = SagaEntryState.KEPT if spec.parent else SagaEntryState.COMMITTED
                    _set_entry(cp, entry_id, kept)
            cp.event(EventKind.SAGA_COMMITTED, to_node or from_node, detail={"saga": saga_id})


def close_open(cp: Checkpoint, status: SagaEntryState) -> None:
    """The run ends while compensations are under way: record how they were left."""
    for entry_id, entry in list(cp.run.saga.items()):
        if entry["state"] == SagaEntryState.COMPENSATING:
            _set_entry(cp, entry_id, status)


def _chain(cp: Checkpoint, token_id: str) -> tuple[str, ...]:
    """The sagas a failure at this token unwinds, innermost first (inside its branch)."""
    flow = cp.flow
    token = cp.run.tokens[token_id]
    chain = flow.node_sagas(token["node"])
    if token["fr"]:
        outside = set(flow.node_sagas(token["fr"][-1].fork))
        chain = tuple(s for s in chain if s not in outside)
    return tuple(chain)


def unwind_for(cp: Checkpoint, token_id: str, error: str) -> bool:
    """Start the unwind a failure at this token calls for; False when no saga is involved.

    A top-level unwind first takes the run's other tokens away and waits for their attempts in
    flight (a sibling that completes a compensable step meanwhile is pushed, and undone too).
    """
    if not _chain(cp, token_id):
        return False
    run = cp.run
    cp.set_token(token_id, st=TokenState.UNWINDING)
    if not run.tokens[token_id]["fr"]:
        run.set_status(RunStatus.COMPENSATING.value, error)
        node_id = run.tokens[token_id]["node"]
        end: Ending = {"end": EndKind.UNWIND, "token": token_id, "error": error, "node": node_id}
        if cp.rules.end(cp, end, keep=token_id):
            return True
    start_unwind(cp, token_id, error)
    return True


def start_unwind(cp: Checkpoint, token_id: str, error: str) -> None:
    """Compensate the steps of the failing token's sagas, newest first."""
    run, flow = cp.run, cp.flow
    token = run.tokens[token_id]
    chain = _chain(cp, token_id)
    scope = set(chain)
    steps = sorted(
        (
            e
            for e in run.saga.items()
            if e[1]["state"] == SagaEntryState.DONE
            and scope & set(flow.saga_chain(e[1]["saga"]))
            and _in_cell(e[1], token["fr"])
        ),
        key=lambda item: -item[1]["pos"],
    )
    unwind_id = run.next_id("u")
    then: UnwindThen = {"kind": "branch" if token["fr"] else "fail_run", "token": token_id}
    unwind: Unwind = {"steps": [e for e, _ in steps], "pos": 0, "then": then, "error": error}
    run.put("unwinds", unwind_id, unwind)
    cp.event(
        EventKind.SAGA_UNWINDING,
        token["node"],
        token_id,
        error=error,
        detail={"sagas": list(chain), "steps": [entry["node"] for _, entry in steps]},
    )
    _next(cp, unwind_id)


def _next(cp: Checkpoint, unwind_id: str) -> None:
    run = cp.run
    unwind = run.unwinds[unwind_id]
    while unwind["pos"] < len(unwind["steps"]):
        entry_id = unwind["steps"][unwind["pos"]]
        entry = run.saga.get(entry_id)
        if entry is not None and entry["state"] in _UNDOABLE:
            _set_entry(cp, entry_id, SagaEntryState.COMPENSATING)
            token_id = run.next_id()
            run.put(
                "tokens",
                token_id,
                {
                    "node": entry["node"],
                    "st": TokenState.READY,
                    "att": 1,
                    "fr": [],
                    "li": entry["li"],
                    "comp": unwind_id,
                    "entry": entry_id,
                },
            )
            cp.dispatch.append(token_id)
            return
        unwind = {**unwind, "pos": unwind["pos"] + 1}
        run.put("unwinds", unwind_id, unwind)
    _finish(cp, unwind_id)


def _finish(cp: Checkpoint, unwind_id: str) -> None:
    run = cp.run
    unwind = run.unwinds[unwind_id]
    run.drop("unwinds", unwind_id)
    cp.event(EventKind.SAGA_COMPENSATED, detail={"steps": len(unwind["steps"])})
    failing = unwind["then"]["token"]
    if unwind["then"]["kind"] == "branch" and failing in run.tokens:
        cp.rules.branch_failed(cp, failing, unwind["error"])
        return
    token = run.tokens.get(failing)
    cp.fail_run(
        unwind["error"],
        node_id=token["node"] if token is not None else None,
        resume=run_retries.after_unwind(cp, unwind),
    )


def compensation_policy(cp: Checkpoint, node_id: str) -> Policy:
    """The retry policy of a node's compensation."""
    return cp.flow.nodes[node_id].compensation_policy or _DEFAULT


def on_compensation_result(cp: Checkpoint, token_id: str, result: AttemptResult) -> None:
    """A compensation attempt finished: next one, retry, or suspend for an operator."""
    run = cp.run
    token = run.tokens[token_id]
    node_id, entry_id, unwind_id = token["node"], token["entry"], token["comp"]
    entry = run.saga[entry_id]
    activity = entry["comp"]
    detail = {"activity": activity, **(loop_detail(entry_path(entry)) or {})}
    if result.ok:
        merge_result(cp, token_id, result)
        _set_entry(cp, entry_id, SagaEntryState.COMPENSATED)
        cp.event(
            EventKind.COMPENSATION_COMPLETED,
            node_id,
            token_id,
            attempt=result.attempt,
            started_at=result.started_at,
            output=result.output,
            detail=detail,
        )
        run.drop("tokens", token_id)
        _advance(cp, unwind_id)
        return
    policy = compensation_policy(cp, node_id)
    cp.event(
        EventKind.COMPENSATION_FAILED,
        node_id,
        token_id,
        attempt=result.attempt,
        started_at=result.started_at,
        error=result.error,
        detail=detail,
    )
    if result.attempt < policy.max_attempts:
        cp.set_token(token_id, st=TokenState.RETRY, att=result.attempt + 1)
        cp.start_timer(token_id, TimerKind.RETRY, policy.delay_before(result.attempt + 1))
        return
    last = (result.error or "").strip().splitlines()[-1] if result.error else "failed"
    message = (
        f"compensation {activity!r} of {node_id!r} failed {result.attempt} times: {last}; "
        "choose retry, skip or abandon (engine.recover_compensation)"
    )
    cp.set_token(token_id, st=TokenState.SUSPENDED, error=message)
    run.set_status(RunStatus.SUSPENDED.value, message)
    cp.event(EventKind.RUN_SUSPENDED, node_id, token_id, error=message)


def late_compensation(
    cp: Checkpoint, token_id: str, result: AttemptResult, detail: dict[str, Any]
) -> None:
    """A compensation attempt asked to stop (the run is ending) came back: record it."""
    token = cp.run.tokens[token_id]
    entry_id = token["entry"]
    info = {**detail, "activity": cp.run.saga[entry_id]["comp"]}
    timing = {"attempt": result.attempt, "started_at": result.started_at}
    node_id = token["node"]
    if result.ok:
        merge_result(cp, token_id, result)
        _set_entry(cp, entry_id, SagaEntryState.COMPENSATED)
        cp.event(EventKind.COMPENSATION_COMPLETED, node_id, token_id, detail=info, **timing)
    else:
        failed = EventKind.COMPENSATION_FAILED
        cp.event(failed, node_id, token_id, error=result.error, detail=info, **timing)


def _advance(cp: Checkpoint, unwind_id: str) -> None:
    unwind = cp.run.unwinds[unwind_id]
    cp.run.put("unwinds", unwind_id, {**unwind, "pos": unwind["pos"] + 1})
    _next(cp, unwind_id)


def recover(cp: Checkpoint, action: Recovery) -> None:
    """An operator's decision on a suspended compensation: retry, skip or abandon."""
    run = cp.run
    stuck = [
        (t, tok)
        for t, tok in run.tokens.items()
        if tok.get("comp") and tok["st"] == TokenState.SUSPENDED
    ]
    token_id, token = stuck[0]
    # a branch's unwind runs while the run goes on (§6.3): it was running before it suspended
    branch = run.unwinds[token["comp"]]["then"]["kind"] == "branch"
    if branch:
        run.set_status(RunStatus.RUNNING.value)
    else:
        run.set_status(RunStatus.COMPENSATING.value, run.error)
    if action == Recovery.RETRY:
        cp.event(EventKind.COMPENSATION_RETRIED, token["node"], token_id)
        cp.ready(token_id, attempt=1)
    elif action == Recovery.SKIP:
        _set_entry(cp, token["entry"], SagaEntryState.SKIPPED)
        cp.event(
            EventKind.COMPENSATION_SKIPPED,
            token["node"],
            token_id,
            detail={"note": "recorded as a decision: the step was not undone by the engine"},
        )
        cp.actor = None  # what follows (the unwind going on, the run failing) is the engine's
        run.drop("tokens", token_id)
        _advance(cp, token["comp"])
    else:  # Recovery.ABANDON
        cp.event(EventKind.COMPENSATION_ABANDONED, token["node"], token_id)
        _set_entry(cp, token["entry"], SagaEntryState.ABANDONED)
        cp.fail_run(
            f"compensation abandoned by {cp.actor or 'an operator'}: {run.error}",
            node_id=token["node"],
        )
