"""What ``engine.cancel`` did: the record it returns."""

from __future__ import annotations

from dataclasses import dataclass

from wfkit.engine.records import RunStatus

__all__ = ["CancelResult"]


@dataclass(frozen=True)
class CancelResult:
    """What cancelling a run did.

    ``pending_cancelled`` counts what was pending and is now gone: steps ready or waiting to
    retry, waits, approvals, delays and suspended steps. ``attempts_stopping`` counts attempts
    in flight that were asked to stop: the run is cancelled once they have (``status`` is then
    still ``running``; see docs/semantics.md §7.1). ``already_ended`` is True when the run had
    ended before the call: nothing was written and ``status`` is the status it ended with.

    Examples
    --------
    >>> import wfkit as wf
    >>> engine = wf.Engine(":memory:")
    >>> _ = engine.register(wf.Workflow("docs.cancel", 1).start_with().approval("ok"))
    >>> run = engine.start("docs.cancel")
    >>> engine.run_until_idle()
    >>> done = engine.cancel(run.id, actor="ana")
    >>> done.pending_cancelled, done.attempts_stopping, done.already_ended, done.status.value
    (1, 0, False, 'cancelled')
    >>> engine.cancel(run.id).already_ended
    True
    """

    run_id: str
    pending_cancelled: int
    attempts_stopping: int
    already_ended: bool
    status: RunStatus

    def __str__(self) -> str:
        if self.already_ended:
            return f"run {self.run_id} had already ended ({self.status.value}); nothing to cancel"
        stopping = (
            f", {self.attempts_stopping} attempt{'s' if self.attempts_stopping != 1 else ''} "
            "in flight asked to stop"
            if self.attempts_stopping
            else ""
        )
        return (
            f"run {self.run_id}: {self.pending_cancelled} pending "
            f"step{'s' if self.pending_cancelled != 1 else ''} cancelled{stopping}; "
            f"the run is {self.status.value}"
        )
