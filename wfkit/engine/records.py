"""Value objects the engine hands out: statuses, runs, events, waits, tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from wfkit.engine.vocabulary import EventKind, RunStatus, TokenState, WaitKind

__all__ = ["Event", "RunInfo", "RunStatus", "RunView", "TokenView", "WaitInfo"]


@dataclass(frozen=True)
class Event:
    """One row of a run's history (``wf_events``)."""

    run_id: str
    seq: int
    at: datetime
    kind: EventKind
    node_id: str | None = None
    token: str | None = None
    attempt: int | None = None
    started_at: datetime | None = None
    actor: str | None = None
    error: str | None = None
    output: Any = None
    detail: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        where = f" {self.node_id}" if self.node_id else ""
        attempt = f" (attempt {self.attempt})" if self.attempt else ""
        if not attempt and self.detail.get("run_attempt"):  # run.retrying, .retried, .failed
            attempt = f" (run attempt {self.detail['run_attempt']})"
        who = f" by {self.actor}" if self.actor else ""
        error = f": {self.error.strip().splitlines()[-1]}" if self.error else ""
        return f"{self.at:%H:%M:%S} {self.kind}{where}{attempt}{who}{error}"


@dataclass(frozen=True)
class RunInfo:
    """A run's summary row (``wf_instances``)."""

    run_id: str
    workflow_id: str
    version: int
    status: RunStatus
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None = None
    error: str | None = None
    parent_run_id: str | None = None


@dataclass(frozen=True)
class WaitInfo:
    """An open wait or approval (``wf_bookmarks``)."""

    run_id: str
    node_id: str
    kind: WaitKind
    name: str
    key: str | None
    since: datetime
    deadline: datetime | None
    detail: dict[str, Any] = field(default_factory=dict)
    loop_path: tuple[int, ...] = ()  # inside a for_each: the item's indexes, outermost first


@dataclass(frozen=True)
class TokenView:
    """Where one token of a run stands (``run.view().tokens``, ``run.tokens_at(seq)``).

    A token is one path through the run's graph: it stands at a node in a state, and carries the
    attempt of that node's step. A compensation's token stands at the step it undoes.
    """

    token_id: str
    node_id: str
    state: TokenState
    attempt: int  # of the node's step (or compensation); 1 for nodes that run no activity
    loop_path: tuple[int, ...] = ()  # inside a for_each: the item's indexes, outermost first
    compensation: bool = False  # it runs the compensation of its node (a saga unwinds)
    due: datetime | None = None  # when its timer fires: a retry, a delay, a deadline, a run retry
    child_run: str | None = None  # a call's token: the child run it waits for
    error: str | None = None  # a suspended token: why it waits for an operator

    @property
    def loop_index(self) -> int | None:
        """The innermost for_each index (``ctx.loop_index``); None outside any for_each."""
        return self.loop_path[-1] if self.loop_path else None


@dataclass(frozen=True)
class RunView:
    """A consistent picture of one run, read at one moment (times are UTC).

    ``tokens`` maps each token id to a :class:`TokenView`: its node, its state (ready, retry,
    wait, timer, suspended, run_retry...), its attempt and, inside a for_each, its loop path.
    ``run_attempt`` is the run attempt under way, or the last one that ended (1 for a run never
    tried again; see :class:`~wfkit.RunRetry` and ``engine.retry``); ``retryable`` is True for a
    failed run that ``engine.retry`` can take up from where it failed.
    """

    run_id: str
    workflow_id: str
    version: int
    status: RunStatus
    error: str | None
    data: dict[str, Any]
    outputs: dict[str, Any]
    seq: int
    tokens: dict[str, TokenView]
    run_attempt: int = 1
    retryable: bool = False

    @property
    def in_flight(self) -> dict[str, tuple[str, int]]:
        """Steps ready (queued, or their attempt running): token -> (node, attempt)."""
        return {
            t: (tok.node_id, tok.attempt)
            for t, tok in self.tokens.items()
            if tok.state == TokenState.READY
        }

    @property
    def suspended_on_compensation(self) -> bool:
        """True when the run waits for an operator to decide a failed compensation."""
        return any(t.compensation and t.state == TokenState.SUSPENDED for t in self.tokens.values())
