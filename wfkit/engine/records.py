"""Value objects the engine hands out: statuses, runs, events, waits."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

__all__ = ["Event", "RunInfo", "RunStatus", "RunView", "WaitInfo"]


class RunStatus(StrEnum):
    """Where a run stands."""

    PENDING = "pending"  # admitted, nothing advanced yet
    RUNNING = "running"  # has steps ready or in flight
    WAITING = "waiting"  # parked on signals, approvals or timers only
    SUSPENDED = "suspended"  # parked for an operator
    COMPENSATING = "compensating"  # unwinding a saga
    COMPLETED = "completed"  # finished; every path ended
    FAILED = "failed"  # ended by a failure
    CANCELLED = "cancelled"  # ended by an operator

    @property
    def terminal(self) -> bool:
        """True for completed, failed and cancelled."""
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


@dataclass(frozen=True)
class Event:
    """One row of a run's history (``wf_events``)."""

    run_id: str
    seq: int
    at: datetime
    kind: str
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
    kind: str
    name: str
    key: str | None
    since: datetime
    deadline: datetime | None
    detail: dict[str, Any] = field(default_factory=dict)
    loop_path: tuple[int, ...] = ()  # inside a for_each: the item's indexes, outermost first


@dataclass(frozen=True)
class RunView:
    """A consistent picture of one run, read at one moment (times are UTC).

    ``tokens`` maps each token to where it stands: ``node``, ``st`` (ready, retry, wait, timer,
    suspended, run_retry...), ``att`` (attempt) and ``li`` (item index inside a for_each).
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
    tokens: dict[str, dict[str, Any]]
    run_attempt: int = 1
    retryable: bool = False

    @property
    def in_flight(self) -> dict[str, tuple[str, int]]:
        """Steps ready or running: token -> (node, attempt)."""
        return {
            t: (tok["node"], int(tok.get("att") or 1))
            for t, tok in self.tokens.items()
            if tok.get("st") in ("ready", "running")
        }

    @property
    def suspended_on_compensation(self) -> bool:
        """True when the run waits for an operator to decide a failed compensation."""
        return any(t.get("comp") and t.get("st") == "suspended" for t in self.tokens.values())
