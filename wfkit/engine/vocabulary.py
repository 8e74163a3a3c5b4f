"""One vocabulary for the engine, the HTTP API and the widgets: run statuses, token states, event
kinds, node statuses, and the kinds of the rows a token parks on.

The values are the compact strings stored on disk (``wf_events.kind``, ``wf_timers.kind``, the
cursor JSON), so ``StrEnum`` members compare equal to them: code reads
``token["st"] == TokenState.READY`` or ``event.kind == EventKind.STEP_COMPLETED`` and never
spells the string out (``tests/engine/test_vocabulary.py`` keeps it so). docs/semantics.md says
what each one means.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ATTEMPT_OUTCOMES",
    "IN_FLIGHT",
    "EndKind",
    "EventKind",
    "JobStatus",
    "NodeStatus",
    "Recovery",
    "RunStatus",
    "SagaEntryState",
    "TimerKind",
    "TokenState",
    "WaitKind",
]


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


class TokenState(StrEnum):
    """Where a token stands at its node."""

    NEW = "new"  # arrived; its node's handler has not placed it yet
    READY = "ready"  # its step may run: queued, or an attempt is in flight
    RETRY = "retry"  # waits on a retry timer before its next attempt
    TIMER = "timer"  # waits on a delay's timer
    WAIT = "wait"  # parked on a bookmark (signal, approval or call), maybe with a deadline timer
    MOVING = "moving"  # left a wait and is being routed on within this checkpoint
    SUSPENDED = "suspended"  # parked for an operator (on_failure="suspend" or a compensation)
    UNWINDING = "unwinding"  # failed for good; waits while its saga is unwound
    CANCELLING = "cancelling"  # removed while its attempt was in flight; waits for its outcome
    FAILED = "failed"  # a synthetic token standing for a failed join while it is routed
    RUN_RETRY = "run_retry"  # its run failed; waits on the timer of the run's next attempt


#: token states whose step has an attempt queued or running (or one still to be accounted for)
IN_FLIGHT = frozenset({TokenState.READY, TokenState.CANCELLING})


class TimerKind(StrEnum):
    """What a token's timer row (``wf_timers.kind``, the token's ``timer``) waits for."""

    RETRY = "retry"  # the next attempt of a step or a compensation
    DELAY = "delay"  # a delay node's duration
    TIMEOUT = "timeout"  # a wait's deadline
    EXPIRY = "expiry"  # an approval's deadline
    DRAIN = "drain"  # how long a cancelling attempt may take to stop
    RUN_RETRY = "run_retry"  # the next attempt of a failed run
    CALL = "call"  # a child run ended in another engine process: wake its caller (no row until)


class WaitKind(StrEnum):
    """What a parked token's bookmark (``wf_bookmarks.kind``, ``WaitInfo.kind``) waits for."""

    SIGNAL = "signal"  # engine.signal(name, key) or a posted signal
    APPROVAL = "approval"  # engine.approve(run, node)
    CALL = "call"  # the end of the child run a call node started


class JobStatus(StrEnum):
    """What ``wf_jobs.status`` says of a step of a running run (not a token state)."""

    READY = "ready"  # queued, its attempt not started
    RUNNING = "running"  # its attempt is in flight
    RETRY = "retry"  # waits on its retry timer
    CANCELLING = "cancelling"  # its attempt was asked to stop and has not ended yet
    BLOCKED = "blocked"  # no process that advances the run has its activity (or serves its queue)


class EndKind(StrEnum):
    """How a run ends once its attempts in flight have stopped (``run.ending``)."""

    FAILED = "failed"  # it fails (or a run retry takes the failure)
    CANCELLED = "cancelled"  # an operator cancelled it
    UNWIND = "unwind"  # its top-level saga unwinds, then it fails


class Recovery(StrEnum):
    """An operator's decision on a compensation that failed for good."""

    RETRY = "retry"  # run it again, with a fresh set of attempts
    SKIP = "skip"  # record it as not undone (a decision, not a fact) and go on unwinding
    ABANDON = "abandon"  # give up the unwind: the run fails as it stands


class SagaEntryState(StrEnum):
    """Where a compensable step stands on its saga's stack."""

    DONE = "done"  # completed; would be undone by an unwind
    COMPENSATING = "compensating"  # its compensation is under way
    COMPENSATED = "compensated"  # its compensation completed
    SKIPPED = "skipped"  # an operator decided not to undo it (a decision, not a fact)
    ABANDONED = "abandoned"  # an operator gave up on its compensation
    COMMITTED = "committed"  # its outermost saga ended: it stands
    KEPT = "kept"  # its nested saga (policy="keep") ended: an outer unwind leaves it
    FAILED = "failed"  # the run failed while its compensation was under way
    CANCELLED = "cancelled"  # the run was cancelled while its compensation was under way


class EventKind(StrEnum):
    """What a row of ``wf_events`` records."""

    CHECKPOINT = "checkpoint"  # state changed with no other event to carry it
    RUN_STARTED = "run.started"
    RUN_COMPLETED = "run.completed"
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"
    RUN_SUSPENDED = "run.suspended"
    RUN_RESUMED = "run.resumed"
    RUN_RESTARTED = "run.restarted"
    RUN_RETRYING = "run.retrying"  # failed; tried again when its run_retry timer fires
    RUN_RETRIED = "run.retried"  # the next run attempt started (timer or engine.retry)
    RUN_DRAINING = "run.draining"  # the run will end once its attempts in flight have ended
    RUN_APPENDED = "run.appended"  # engine.append grew the run's own graph (detail: hash, nodes)
    STEP_COMPLETED = "step.completed"
    STEP_FAILED = "step.failed"
    STEP_RETRYING = "step.retrying"
    STEP_ROUTED = "step.routed"  # a failure left through the node's `failed` outlet
    STEP_CRASHED = "step.crashed"  # the engine process died during the attempt
    STEP_CANCELLED = "step.cancelled"  # an attempt stopped because its token was removed
    STEP_ABANDONED = "step.abandoned"  # an attempt did not stop in time; its outcome is unknown
    PATH_ENDED = "path.ended"  # a token left through an outlet with no edge and its path ended
    DECISION_TAKEN = "decision.taken"
    PARALLEL_FORKED = "parallel.forked"
    FOR_EACH_STARTED = "for_each.started"
    JOIN_COMPLETED = "join.completed"
    JOIN_PARTIAL = "join.partial"
    BRANCH_FAILED = "branch.failed"
    DELAY_STARTED = "delay.started"
    TIMER_FIRED = "timer.fired"
    SIGNAL_WAITING = "signal.waiting"
    SIGNAL_RECEIVED = "signal.received"
    SIGNAL_ELAPSED = "signal.elapsed"
    SIGNAL_REFUSED = "signal.refused"
    APPROVAL_WAITING = "approval.waiting"
    APPROVAL_APPROVED = "approval.approved"
    APPROVAL_REJECTED = "approval.rejected"
    APPROVAL_EXPIRED = "approval.expired"
    CALL_STARTED = "call.started"  # a call node started its child run and waits for it
    CALL_COMPLETED = "call.completed"  # the child completed; its bound fields were copied back
    CALL_FAILED = "call.failed"  # the child failed or was cancelled, or could not start
    MERGE_CONFLICT = "merge.conflict"
    SAGA_UNWINDING = "saga.unwinding"
    SAGA_COMPENSATED = "saga.compensated"
    SAGA_COMMITTED = "saga.committed"
    COMPENSATION_COMPLETED = "compensation.completed"
    COMPENSATION_FAILED = "compensation.failed"
    COMPENSATION_RETRYING = "compensation.retrying"
    COMPENSATION_RETRIED = "compensation.retried"
    COMPENSATION_SKIPPED = "compensation.skipped"
    COMPENSATION_ABANDONED = "compensation.abandoned"


class NodeStatus(StrEnum):
    """What a run's picture shows on a node (computed by the engine, drawn by API and widgets)."""

    SUCCEEDED = "succeeded"  # its step (or its last visit) completed
    FAILED = "failed"  # its step failed for good, or a join was partial
    RUNNING = "running"  # an attempt is queued or running
    WAITING = "waiting"  # parked on a signal, approval or timer
    RETRYING = "retrying"  # waits before its next attempt
    BLOCKED = "blocked"  # ready, but no process that advances the run has its activity
    CANCELLING = "cancelling"  # its attempt was asked to stop; the run ends once it has
    COMPENSATING = "compensating"  # its compensation is under way
    COMPENSATED = "compensated"  # its compensation completed
    SKIPPED = "skipped"  # never reached by a run that ended, or its compensation was skipped
    SUSPENDED = "suspended"  # parked for an operator


ATTEMPT_OUTCOMES: dict[str, str] = {
    EventKind.STEP_COMPLETED: "succeeded",
    EventKind.STEP_FAILED: "failed",
    EventKind.STEP_CRASHED: "crashed",
    EventKind.STEP_CANCELLED: "cancelled",
    EventKind.STEP_ABANDONED: "abandoned",
    EventKind.COMPENSATION_COMPLETED: "compensated",
    EventKind.COMPENSATION_FAILED: "compensation-failed",
}
"""The events that end an attempt, and what each says of it (``run.attempts()``, trace spans)."""
