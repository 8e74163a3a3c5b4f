"""Readiness: whether a run has work to do now, and whether anything in this process does it.

A run whose step is ready moves on only while something drives the engine: its background
workers (``engine.start_workers()``) or a ``run_until_idle()`` call. In a notebook without
workers, an approval or a signal leaves the next step ready with nobody to run it; these
answers let ``run.explain()`` and the widgets say so instead of "running" forever.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from wfkit.engine.cursor import Token
from wfkit.engine.handles import engine_unserved, unregistered_activity
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import RunStatus, TokenState
from wfkit.errors import UsageError

if TYPE_CHECKING:
    from wfkit.engine.runtime import Runtime

__all__ = ["check_workers", "has_ready_work"]

_TIMED = (TokenState.RETRY, TokenState.TIMER, TokenState.RUN_RETRY)


def has_ready_work(runtime: Runtime, run_id: str | None = None) -> bool:
    """True when run ``run_id`` (any run of the engine, when None) has a step ready to run
    here (queued, or its attempt in flight) or a timer that is due now."""
    now = runtime.clock.now()
    if run_id is None:
        due = runtime.writer.owner.next_due()
        if due is not None and due <= now:
            return True
        return any(_ready(runtime, runtime.state(r), now) for r in _moving(runtime))
    state = runtime.state(run_id)
    if _ready(runtime, state, now):
        return True
    if RunStatus(state.status).terminal:
        return False
    return any(row[4] <= now for row in runtime.store.query("run_timers", [run_id]))


def _moving(runtime: Runtime) -> list[str]:
    """Runs that may have steps ready: those held in memory and those whose summary says they
    run or unwind (on a shared store a run may sit in the database between engines)."""
    ids = dict.fromkeys(list(runtime.writer.runs))
    for status in (RunStatus.RUNNING, RunStatus.COMPENSATING, RunStatus.PENDING):
        ids.update(dict.fromkeys(info.run_id for info in runtime.runs(status=status)))
    return list(ids)


def _ready(runtime: Runtime, state: RunState, now: datetime) -> bool:
    if RunStatus(state.status).terminal:
        return False
    return any(_token_ready(runtime, state, token, now) for token in state.tokens.values())


def _token_ready(runtime: Runtime, state: RunState, token: Token, now: datetime) -> bool:
    if token["st"] == TokenState.READY:
        # a step whose activity is missing here, or whose queue the workers do not serve, is
        # blocked: no worker of this process would run it (explain() says why)
        return unregistered_activity(runtime, state, token) is None and (
            engine_unserved(runtime, state, token) is None
        )
    due = token.get("due")
    if token["st"] in _TIMED and due:
        return datetime.fromisoformat(due) <= now
    return False


def check_workers(workers: object) -> None:
    """Refuse an ``Engine(workers=)`` that is not None or a whole number of threads (1 or
    more), before anything is opened or written."""
    if workers is None:
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(
            f"workers must be a number of worker threads (1 or more) or None, not {workers!r}: "
            "wf.Engine(db, workers=2) starts two background workers once the engine is open; "
            "leave it out to drive runs yourself with run_until_idle()"
        )
