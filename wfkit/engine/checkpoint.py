"""One checkpoint of one run: what changed, and the rows that record it.

Node handlers move tokens through a :class:`Checkpoint`; it records events, timer and bookmark
rows and the steps to dispatch once the checkpoint is durable. The writer turns every
checkpoint of a batch into one transaction.

A checkpoint records changes; it does not decide what a failure, a saga or a join means. Where
moving a token calls for that, it asks the :class:`Rules` it was handed (built in
:mod:`wfkit.engine.failures`, which imports the modules that decide), so this module imports
none of them and no engine module needs an import inside a function.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, Unpack, cast

from wfkit.definition.kinds import Node
from wfkit.engine.cursor import Ending, FrameRef, ResumePoint, Token, TokenChanges
from wfkit.engine.flows import CompiledFlow
from wfkit.engine.loops import loop_path
from wfkit.engine.outlets import Unconnected, unconnected
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import (
    IN_FLIGHT,
    EndKind,
    EventKind,
    RunStatus,
    SagaEntryState,
    TimerKind,
    TokenState,
)
from wfkit.store.rows import SagaStepRow, SagaStepUpdate

if TYPE_CHECKING:
    from wfkit.engine.artifact_records import ArtifactRecord
    from wfkit.engine.nodes.base import NodeHandler
    from wfkit.engine.subruns import Subruns

__all__ = ["Checkpoint", "EventRow", "Rules"]


class Rules(Protocol):
    """What a checkpoint asks when a token's move has consequences beyond the token."""

    def moved(
        self, cp: Checkpoint, from_node: str, to_node: str | None, frames: list[FrameRef]
    ) -> None:
        """A token moved between nodes, or its path ended (``to_node`` None): sagas it left
        are committed."""
        ...

    def branch_completed(self, cp: Checkpoint, frame_id: str) -> None:
        """A branch of the frame completed (its path ended inside the branch)."""
        ...

    def fail(self, cp: Checkpoint, token_id: str, error: str, bypass_failed_outlet: bool) -> None:
        """The token's step failed for good: route it (failed outlet, suspend, saga, join, run)."""
        ...

    def branch_failed(self, cp: Checkpoint, token_id: str, error: str) -> None:
        """A branch failed for good (its saga, if any, already unwound): its join hears of it."""
        ...

    def end(self, cp: Checkpoint, end: Ending, keep: str | None = None) -> bool:
        """Take every token but ``keep`` away to end the run (or unwind it); True when the end
        waits for attempts in flight (the drain then finishes it)."""
        ...

    def close_sagas(self, cp: Checkpoint, status: SagaEntryState) -> None:
        """The run ends while compensations are under way: record how they were left."""
        ...

    def retry_run(
        self, cp: Checkpoint, error: str, node_id: str | None, resume: ResumePoint | None
    ) -> dict[str, Any] | None:
        """The run is to fail for good (``resume``: where it could go on): None when a run
        retry takes the failure, else the detail of its ``run.failed`` event."""
        ...


@dataclass
class EventRow:
    """An event before it gets its sequence number."""

    kind: EventKind
    node_id: str | None = None
    token: str | None = None
    attempt: int | None = None
    started_at: datetime | None = None
    actor: str | None = None
    error: str | None = None
    output: Any = None
    detail: dict[str, Any] | None = None


@dataclass
class Checkpoint:
    """Changes to one run, made by node handlers, written atomically by the writer."""

    run: RunState
    now: datetime
    handlers: dict[str, NodeHandler]
    rules: Rules
    actor: str | None = None
    events: list[EventRow] = field(default_factory=list)
    dispatch: list[str] = field(default_factory=list)  # tokens whose step is ready
    cancel: list[str] = field(default_factory=list)  # tokens whose attempt must stop
    timers_add: list[tuple[str, str, TimerKind, datetime]] = field(default_factory=list)
    timers_del: list[tuple[str, str]] = field(default_factory=list)
    bookmarks_add: list[tuple[Any, ...]] = field(default_factory=list)
    bookmarks_del: list[str] = field(default_factory=list)
    saga_rows: list[tuple[str, SagaStepRow | SagaStepUpdate]] = field(default_factory=list)
    posted_taken: list[str] = field(default_factory=list)
    # attempts whose log lines this checkpoint writes: (index of the event recording it, result)
    logs: list[tuple[int, Any]] = field(default_factory=list)
    # artifacts stored by the attempts this checkpoint records (their wf_artifacts rows)
    artifacts: list[ArtifactRecord] = field(default_factory=list)
    strict_conflict: str | None = None
    # the run's own grown graph (engine.append): its wf_definitions row, written with this
    # checkpoint, and the run repinned to its hash
    graph: tuple[Any, ...] | None = None
    # the writer's reader of posted signals, handed this checkpoint (a bound partial of the
    # checkpoint would make every checkpoint a reference cycle, left to the garbage collector)
    posted_source: (
        Callable[[Checkpoint, str, str | None], tuple[dict[str, Any], str | None] | None] | None
    ) = None
    binder: Callable[[str], Callable[..., Any]] | None = None
    # whether a token's step has an attempt queued or running (set by the writer)
    in_flight: Callable[[str], bool] | None = None
    drain_timeout: timedelta = timedelta(seconds=60)
    start_status: str = ""
    # child runs: the port that starts them (engine/subruns.py), children whose calling token
    # was removed (to be cancelled), and calling tokens of other runs to wake by a timer row
    calls: Subruns | None = None
    orphans: list[str] = field(default_factory=list)
    wakes: list[tuple[str, str, str, datetime]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.start_status = self.run.status

    # --- events ---------------------------------------------------------------------------------

    def event(
        self, kind: EventKind, node_id: str | None = None, token: str | None = None, **kw: Any
    ) -> None:
        """Append an event row."""
        self.events.append(EventRow(kind, node_id, token, actor=kw.pop("actor", self.actor), **kw))

    # --- tokens ---------------------------------------------------------------------------------

    @property
    def flow(self) -> CompiledFlow:
        """The run's compiled workflow."""
        return self.run.flow

    def spawn(self, node_id: str, frames: list[FrameRef], origin: str | None = None) -> None:
        """A new token arrives at ``node_id`` inside ``frames`` (``li``: innermost loop index),
        coming from ``origin`` (a join: sagas the move leaves are committed) or from nowhere."""
        token_id = self.run.next_id()
        path = loop_path(self.flow, frames)
        li = path[-1] if path else None
        token: Token = {
            "node": origin or node_id,
            "st": TokenState.NEW,
            "att": 1,
            "fr": frames,
            "li": li,
        }
        self.arrive(token_id, token, node_id)

    def arrive(self, token_id: str, token: Token, node_id: str) -> None:
        """Move a token onto ``node_id`` and let the node's handler take it."""
        node: Node = self.flow.nodes[node_id]
        if self.flow.sagas and token["node"] != node_id:
            self.rules.moved(self, token["node"], node_id, token["fr"])
        token = {**token, "node": node_id, "st": TokenState.NEW, "att": 1}
        if "started" in token:  # a crash marker belongs to the step it was written for
            token = _unmarked(token)
        if token["fr"]:
            inner = token["fr"][-1]
            scope = f"{node_id}|{inner.frame}:{inner.index}"
        else:
            scope = node_id
        visits = self.run.visits.get(scope, 0) + 1
        if node.spec.counts_visits:
            self.run.put("visits", scope, visits)
            limit = self.flow.visit_limit[node_id]
            if visits > limit:
                self.run.put("tokens", token_id, token)
                self.fail(
                    token_id,
                    f"VisitLimitExceeded: {node_id!r} was reached {visits} times; its policy "
                    f"allows max_visits={limit}. Raise max_visits to let the loop go round "
                    "more often.",
                    bypass_failed_outlet=False,
                )
                return
        self.run.put("tokens", token_id, token)
        self.handlers[node.kind.value].enter(self, token_id, token, node_id, node)

    def take_posted(self, name: str, key: str | None) -> tuple[dict[str, Any], str | None] | None:
        """The oldest kept signal for (name, key) and its sender, taken in this checkpoint."""
        if self.posted_source is None:
            return None
        return self.posted_source(self, name, key)

    def set_token(self, token_id: str, **changes: Unpack[TokenChanges]) -> Token:
        """Change fields of a token (recorded); returns the new token."""
        token: Token = {**self.run.tokens[token_id], **changes}
        self.run.put("tokens", token_id, token)
        return token

    def ready(self, token_id: str, attempt: int | None = None) -> None:
        """Mark a token's step ready: it is dispatched once this checkpoint is durable."""
        if attempt is None:
            self.set_token(token_id, st=TokenState.READY)
        else:
            self.set_token(token_id, st=TokenState.READY, att=attempt)
        self.dispatch.append(token_id)

    def leave(self, token_id: str, node_id: str, outlet: str, *, error: str | None = None) -> None:
        """The token leaves ``node_id`` through ``outlet``: on to its target, or where the outlet
        has no edge, what :func:`~wfkit.engine.outlets.unconnected` says (``error`` is the step's
        failure when that is to fail it)."""
        token = self.run.tokens[token_id]
        target = self.flow.target(node_id, outlet)
        if target is not None:
            self.arrive(token_id, token, target)
            return
        rule = unconnected(self.flow.nodes[node_id].kind, outlet)
        if rule is Unconnected.NEXT:
            self.leave(token_id, node_id, "next")
        elif rule is Unconnected.FAIL:
            self.fail_step(
                token_id,
                error
                or f"{node_id!r} left through its {outlet!r} outlet, which leads nowhere; "
                f"connect it to the step that handles this",
            )
        else:
            if rule is Unconnected.END_RECORDED:
                self.event(EventKind.PATH_ENDED, node_id, token_id, detail={"outlet": outlet})
            self.end_path(token_id)

    def end_path(self, token_id: str, *, commit: bool = True) -> None:
        """The token's path ends here (sagas it was in are committed). ``commit=False`` where
        the run goes on inside them in other tokens (a fork's branches, a join's continuation)
        or the path failed (a failed branch: an enclosing saga decides about its steps)."""
        token = self.run.tokens.get(token_id)
        if token is not None and commit and self.flow.sagas and token["st"] != TokenState.UNWINDING:
            if self.flow.nodes[token["node"]].saga and not token.get("comp"):
                self.rules.moved(self, token["node"], None, token["fr"])
        self.run.drop("tokens", token_id)
        if token is not None and commit and token["fr"] and not token.get("comp"):
            # a path that ends inside a branch completes that branch: its join must hear of it
            self.rules.branch_completed(self, token["fr"][-1].frame)

    def remove(self, token_id: str) -> None:
        """Take a token away with whatever it holds: timer, bookmark or attempt in flight."""
        token = self.run.tokens.get(token_id)
        if token is None:
            return
        timer = token.get("timer")
        if timer:
            self.drop_timer(token_id, timer)
        if token["st"] == TokenState.WAIT:
            self.drop_bookmark(token_id)
        if token["st"] in IN_FLIGHT:
            self.cancel.append(token_id)
        if token.get("child"):  # a call's child run goes with the token that waits for it
            self.orphans.append(token["child"])
        self.run.drop("tokens", token_id)

    # --- timers ---------------------------------------------------------------------------------

    def start_timer(self, token_id: str, kind: TimerKind, delay: timedelta) -> datetime:
        """Park the token on a durable timer row; returns the due time."""
        due = self.now + delay
        token = self.run.tokens[token_id]
        self.set_token(token_id, timer=kind, due=due.isoformat())
        self.timers_add.append((token_id, token["node"], kind, due))
        return due

    def clear_timer(self, token_id: str) -> None:
        """Forget the token's timer (it fired, or the token moved on)."""
        timer = self.run.tokens[token_id].get("timer")
        if timer:
            self.drop_timer(token_id, timer)
            self.set_token(token_id, timer=None, due=None)

    def drop_timer(self, token_id: str, kind: TimerKind) -> None:
        """Delete the token's timer row, and forget one this checkpoint was to add (the
        writer deletes before it inserts, so a timer added and removed in one checkpoint
        would otherwise be written)."""
        self.timers_del.append((token_id, kind))
        self.timers_add = [t for t in self.timers_add if (t[0], t[2]) != (token_id, kind)]

    def drop_bookmark(self, token_id: str) -> None:
        """Delete the token's bookmark row, and forget one this checkpoint was to add."""
        self.bookmarks_del.append(token_id)
        self.bookmarks_add = [b for b in self.bookmarks_add if b[0] != token_id]

    # --- failure --------------------------------------------------------------------------------

    def fail(self, token_id: str, error: str, *, bypass_failed_outlet: bool = False) -> None:
        """The token's step failed for good: route the failure as the failure rules say
        (:func:`wfkit.engine.failures.route`)."""
        self.rules.fail(self, token_id, error, bypass_failed_outlet)

    def fail_step(self, token_id: str, error: str, *, attempt: int | None = None) -> None:
        """A step that runs no activity (an expression, a decision) failed: record and route it."""
        node_id = self.run.tokens[token_id]["node"]
        self.event(EventKind.STEP_FAILED, node_id, token_id, attempt=attempt, error=error)
        self.fail(token_id, error)

    def fail_run(
        self, error: str, *, node_id: str | None = None, resume: ResumePoint | None = None
    ) -> None:
        """End the run as failed: every token is removed, every attempt cancelled; the run fails
        once the attempts in flight have ended (see :mod:`wfkit.engine.drains`). ``resume``:
        where a run retry would go on (:mod:`wfkit.engine.run_retries`); None where none can."""
        end: Ending = {"end": EndKind.FAILED, "error": error, "node": node_id, "resume": resume}
        if not self.rules.end(self, end):
            self.end_failed(error, node_id=node_id, resume=resume)

    def cancel_run(self, reason: str) -> None:
        """End the run as cancelled by an operator, once its attempts in flight have ended."""
        end: Ending = {"end": EndKind.CANCELLED, "reason": reason, "actor": self.actor}
        if not self.rules.end(self, end):
            self.end_cancelled(reason)

    def end_failed(
        self, error: str, *, node_id: str | None = None, resume: ResumePoint | None = None
    ) -> None:
        """Record the run failed (no token or attempt is left), unless a run retry parks it
        for its next attempt."""
        self._close_sagas(SagaEntryState.FAILED)
        detail = self.rules.retry_run(self, error, node_id, resume)
        if detail is None:
            return
        self.run.set_status(RunStatus.FAILED.value, error)
        self.event(EventKind.RUN_FAILED, node_id, error=error, detail=detail or None)

    def end_cancelled(self, reason: str, actor: str | None = None) -> None:
        """Record the run cancelled (no token or attempt is left) by ``actor`` (this
        checkpoint's actor by default)."""
        self._close_sagas(SagaEntryState.CANCELLED)
        self.run.set_status(RunStatus.CANCELLED.value, reason)
        detail = {"reason": reason} if reason else None
        self.event(EventKind.RUN_CANCELLED, detail=detail, actor=actor or self.actor)

    def _close_sagas(self, status: SagaEntryState) -> None:
        if self.run.saga:
            self.rules.close_sagas(self, status)

    # --- end of the checkpoint -----------------------------------------------------------------

    def settle_status(self) -> None:
        """Derive the run's status from its tokens once the handlers are done."""
        run = self.run
        if run.ending:
            return  # the run ends once its attempts in flight have ended; it runs until then
        if run.status in (
            RunStatus.PENDING.value,
            RunStatus.RUNNING.value,
            RunStatus.WAITING.value,
        ):
            if not run.tokens:
                run.set_status(RunStatus.COMPLETED.value)
                self.event(EventKind.RUN_COMPLETED)
            elif any(t["st"] in IN_FLIGHT for t in run.tokens.values()):
                if run.status != RunStatus.RUNNING.value:
                    run.set_status(RunStatus.RUNNING.value)
            elif run.status != RunStatus.WAITING.value:
                run.set_status(RunStatus.WAITING.value)

    @property
    def woke(self) -> bool:
        """True when the checkpoint woke its run: from waiting, suspended or failed to running."""
        asleep = self.start_status in (
            RunStatus.WAITING.value,
            RunStatus.SUSPENDED.value,
            RunStatus.FAILED.value,  # tried again by hand (engine.retry)
        )
        # not to end: a run that drains keeps the attempts it waits for
        return asleep and self.run.status == RunStatus.RUNNING.value and not self.run.ending

    @property
    def status_changed(self) -> bool:
        """True when the run's status differs from the one it had before this checkpoint."""
        return self.run.status != self.start_status


def _unmarked(token: Token) -> Token:
    """The token without its crash marker (``started``)."""
    return cast(Token, {k: v for k, v in token.items() if k != "started"})


def dumps(value: Any) -> str | None:
    """JSON text of ``value`` (None stays None)."""
    return None if value is None else json.dumps(value, separators=(",", ":"), default=str)
