"""One checkpoint of one run: what changed, and the rows that record it.

Node handlers move tokens through a :class:`Checkpoint`; it records events, timer and bookmark
rows and the steps to dispatch once the checkpoint is durable. The writer turns every
checkpoint of a batch into one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from wfkit.definition.kinds import Node
from wfkit.definition.policy import OnFailure
from wfkit.engine.records import RunStatus
from wfkit.engine.state import RunState

if TYPE_CHECKING:
    from wfkit.engine.nodes import NodeHandler

__all__ = ["Checkpoint", "EventRow"]

Token = dict[str, Any]


@dataclass
class EventRow:
    """An event before it gets its sequence number."""

    kind: str
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
    actor: str | None = None
    events: list[EventRow] = field(default_factory=list)
    dispatch: list[str] = field(default_factory=list)  # tokens whose step is ready
    cancel: list[str] = field(default_factory=list)  # tokens whose attempt must stop
    timers_add: list[tuple[str, str, str, datetime]] = field(default_factory=list)
    timers_del: list[tuple[str, str]] = field(default_factory=list)
    bookmarks_add: list[tuple[Any, ...]] = field(default_factory=list)
    bookmarks_del: list[str] = field(default_factory=list)
    saga_rows: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    posted_taken: list[str] = field(default_factory=list)
    strict_conflict: str | None = None
    take_posted: Callable[[str, str | None], tuple[dict[str, Any], str | None] | None] | None = None
    binder: Callable[[str], Callable[..., Any]] | None = None
    start_status: str = ""

    def __post_init__(self) -> None:
        self.start_status = self.run.status

    # --- events ---------------------------------------------------------------------------------

    def event(
        self, kind: str, node_id: str | None = None, token: str | None = None, **kw: Any
    ) -> None:
        """Append an event row."""
        self.events.append(EventRow(kind, node_id, token, actor=kw.pop("actor", self.actor), **kw))

    # --- tokens ---------------------------------------------------------------------------------

    @property
    def flow(self) -> Any:
        """The run's compiled workflow."""
        return self.run.flow

    def spawn(self, node_id: str, frames: list[list[Any]], loop_index: int | None = None) -> None:
        """A new token arrives at ``node_id``."""
        token_id = self.run.next_id()
        token: Token = {"node": node_id, "st": "new", "att": 1, "fr": frames, "li": loop_index}
        self.arrive(token_id, token, node_id)

    def arrive(self, token_id: str, token: Token, node_id: str) -> None:
        """Move a token onto ``node_id`` and let the node's handler take it."""
        node: Node = self.flow.nodes[node_id]
        if self.flow.sagas and token["node"] != node_id:
            from wfkit.engine import sagas

            sagas.on_move(self, token["node"], node_id)
        token = {**token, "node": node_id, "st": "new", "att": 1}
        token.pop("started", None)  # a crash marker belongs to the step it was written for
        scope = f"{node_id}|{token['fr'][-1][1]}:{token['fr'][-1][2]}" if token["fr"] else node_id
        visits = self.run.visits.get(scope, 0) + 1
        if node.kind.value != "join":
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

    def set_token(self, token_id: str, **changes: Any) -> Token:
        """Change fields of a token (recorded); returns the new token."""
        token = {**self.run.tokens[token_id], **changes}
        self.run.put("tokens", token_id, token)
        return token

    def ready(self, token_id: str, attempt: int | None = None) -> None:
        """Mark a token's step ready: it is dispatched once this checkpoint is durable."""
        changes: dict[str, Any] = {"st": "ready"}
        if attempt is not None:
            changes["att"] = attempt
        self.set_token(token_id, **changes)
        self.dispatch.append(token_id)

    def leave(self, token_id: str, node_id: str, outlet: str) -> None:
        """The token leaves ``node_id`` through ``outlet``: on to the target, or its path ends."""
        token = self.run.tokens[token_id]
        target = self.flow.target(node_id, outlet)
        if target is None:
            self.end_path(token_id)
            return
        self.arrive(token_id, token, target)

    def end_path(self, token_id: str) -> None:
        """The token's path ends here (sagas it was in are committed)."""
        token = self.run.tokens.get(token_id)
        if token is not None and self.flow.sagas and token["st"] not in ("unwinding",):
            from wfkit.engine import sagas

            if self.flow.nodes[token["node"]].saga and not token.get("comp"):
                sagas.on_move(self, token["node"], None)
        self.run.drop("tokens", token_id)

    def remove(self, token_id: str) -> None:
        """Take a token away with whatever it holds: timer, bookmark or attempt in flight."""
        token = self.run.tokens.get(token_id)
        if token is None:
            return
        if token.get("timer"):
            self.timers_del.append((token_id, token["timer"]))
        if token["st"] == "wait":
            self.bookmarks_del.append(token_id)
        if token["st"] in ("ready", "running"):
            self.cancel.append(token_id)
        self.run.drop("tokens", token_id)

    # --- timers ---------------------------------------------------------------------------------

    def start_timer(self, token_id: str, kind: str, delay: timedelta) -> datetime:
        """Park the token on a durable timer row; returns the due time."""
        due = self.now + delay
        token = self.run.tokens[token_id]
        self.set_token(token_id, timer=kind, due=due.isoformat())
        self.timers_add.append((token_id, token["node"], kind, due))
        return due

    def clear_timer(self, token_id: str) -> None:
        """Forget the token's timer (it fired, or the token moved on)."""
        token = self.run.tokens[token_id]
        if token.get("timer"):
            self.timers_del.append((token_id, token["timer"]))
            self.set_token(token_id, timer=None, due=None)

    # --- failure --------------------------------------------------------------------------------

    def fail(self, token_id: str, error: str, *, bypass_failed_outlet: bool = False) -> None:
        """The token's step failed for good: route the failure as the node's policy says.

        In order: the ``failed`` outlet where connected; ``suspend`` parks the run; ``terminate``
        fails it; a branch of a parallel or for_each reports to its join; otherwise the run fails.
        """
        token = self.run.tokens[token_id]
        node_id = token["node"]
        node: Node = self.flow.nodes[node_id]
        if not bypass_failed_outlet and self.flow.target(node_id, "failed") is not None:
            self.event("step.routed", node_id, token_id, detail={"outlet": "failed"}, error=error)
            self.leave(token_id, node_id, "failed")
            return
        policy = node.policy.on_failure
        if policy == OnFailure.SUSPEND:
            self.set_token(token_id, st="suspended", error=error)
            self.run.set_status(RunStatus.SUSPENDED.value, error)
            self.event("run.suspended", node_id, token_id, error=error)
            return
        if policy != OnFailure.TERMINATE and self.flow.sagas:
            from wfkit.engine import sagas

            if sagas.unwind_for(self, token_id, error):
                return
        if policy != OnFailure.TERMINATE and token["fr"]:
            from wfkit.engine.nodes.join import branch_failed

            branch_failed(self, token_id, error)
            return
        self.fail_run(error, node_id=node_id)

    def fail_step(self, token_id: str, error: str, *, attempt: int | None = None) -> None:
        """A step that runs no activity (an expression, a decision) failed: record and route it."""
        node_id = self.run.tokens[token_id]["node"]
        self.event("step.failed", node_id, token_id, attempt=attempt, error=error)
        self.fail(token_id, error)

    def fail_run(self, error: str, *, node_id: str | None = None) -> None:
        """End the run as failed: every token is removed, every attempt cancelled."""
        for other in list(self.run.tokens):
            self.remove(other)
        self._close_sagas("failed")
        self.run.set_status(RunStatus.FAILED.value, error)
        self.event("run.failed", node_id, error=error)

    def cancel_run(self, reason: str) -> None:
        """End the run as cancelled by an operator."""
        for other in list(self.run.tokens):
            self.remove(other)
        self._close_sagas("cancelled")
        self.run.set_status(RunStatus.CANCELLED.value, reason)
        self.event("run.cancelled", detail={"reason": reason} if reason else None)

    def _close_sagas(self, status: str) -> None:
        if self.run.saga:
            from wfkit.engine import sagas

            sagas.close_open(self, status)

    # --- end of the checkpoint -----------------------------------------------------------------

    def settle_status(self) -> None:
        """Derive the run's status from its tokens once the handlers are done."""
        run = self.run
        if run.status in (
            RunStatus.PENDING.value,
            RunStatus.RUNNING.value,
            RunStatus.WAITING.value,
        ):
            if not run.tokens:
                run.set_status(RunStatus.COMPLETED.value)
                self.event("run.completed")
            elif any(t["st"] in ("ready", "running") for t in run.tokens.values()):
                if run.status != RunStatus.RUNNING.value:
                    run.set_status(RunStatus.RUNNING.value)
            elif run.status != RunStatus.WAITING.value:
                run.set_status(RunStatus.WAITING.value)

    @property
    def status_changed(self) -> bool:
        """True when the run's status differs from the one it had before this checkpoint."""
        return self.run.status != self.start_status


def dumps(value: Any) -> str | None:
    """JSON text of ``value`` (None stays None)."""
    return None if value is None else json.dumps(value, separators=(",", ":"), default=str)
