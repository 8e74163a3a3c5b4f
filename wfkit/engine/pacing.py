"""When the writer thread wakes: an attempt's result or a wake in its inbox, the next timer, a
chore, staged checkpoints, the ownership's beat; and how long a round waits for callers' commands
still on their way (group commit)."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from wfkit.engine.clock import Clock
from wfkit.engine.executor import AttemptResult

__all__ = ["COMMIT_DELAY", "SUMMARY_DELAY", "Chore", "Inbox", "gather_callers", "sleep_for"]

SUMMARY_DELAY = 0.2  # seconds of quiet before the writer thread writes running runs' summaries
COMMIT_DELAY = 0.001  # longest wait for more callers' commands before a round commits


class Chore(Protocol):
    """Housekeeping the writer does between its transactions (e.g. retention)."""

    next_at: datetime | None  # when it is next due, on the engine's clock

    def tick(self) -> bool:
        """Do it if due (under the writer lock); True when more waits for the next round."""


def sleep_for(
    staged: float | None,
    due: datetime | None,
    chore: datetime | None,
    beat: float | None,
    clock: Clock,
) -> float | None:
    """How long the writer thread may sleep (None: until woken): until ``staged`` checkpoints
    are due, else the next timer or ``chore`` (a manual clock wakes it when moved) or the
    ownership's ``beat``, whichever comes first."""
    if staged is not None:
        return staged  # staged checkpoints are written once their window is over
    if chore is not None and (due is None or chore < due):
        due = chore
    until_due: float | None = None
    if due is not None:
        now = clock.now()
        if due <= now:
            return 0.0
        until_due = None if clock.manual else (due - now).total_seconds()
    if until_due is None or beat is None:
        return until_due if beat is None else beat
    return min(until_due, beat)


def gather_callers(queued: Callable[[], int], last: int) -> None:
    """Group commit across callers: when the last round carried ``last`` callers' commands and
    fewer are ``queued`` now, wait up to COMMIT_DELAY for the others (they are between their
    last answer and their next command) so that one transaction carries them all with the
    attempt results at hand, rather than a round of results, then one of commands."""
    if queued() >= last:  # all there (or no callers lately)
        return
    deadline = time.monotonic() + COMMIT_DELAY
    while queued() < last and time.monotonic() < deadline:
        time.sleep(0.0001)


_WAKE = object()
_STOP = object()


class Inbox:
    """What the writer thread waits for: attempts' results, wakes, and the stop."""

    def __init__(self) -> None:
        self._items: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def put(self, result: AttemptResult) -> None:
        """Hand over an attempt's result."""
        self._items.put(result)

    def wake(self) -> None:
        """Ask for a round now."""
        self._items.put(_WAKE)

    def stop(self) -> None:
        """Ask for a last round, after which the writer thread returns."""
        self._items.put(_STOP)

    def empty(self) -> bool:
        """True when nothing waits."""
        return self._items.empty()

    def collect(self, timeout: float | None, limit: int) -> tuple[list[AttemptResult], bool]:
        """Wait up to ``timeout`` seconds (None: until something comes) and take what waits, up
        to ``limit`` items: the results, and True when the stop was among them."""
        try:
            items = [self._items.get(timeout=timeout)]
        except queue.Empty:
            items = [_WAKE]
        while len(items) < limit:
            try:
                items.append(self._items.get_nowait())
            except queue.Empty:
                break
        stop = any(i is _STOP for i in items)
        return [i for i in items if isinstance(i, AttemptResult)], stop
