"""The in-memory timer heap: due times of timer rows, so the scheduler sleeps until the next."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["TimerHeap"]


@dataclass(order=True)
class _Entry:
    due: datetime
    order: int
    run_id: str = field(compare=False)
    token_id: str = field(compare=False)
    kind: str = field(compare=False)


class TimerHeap:
    """Due timers, earliest first. Entries for timers that were cancelled are dropped on pop.

    Examples
    --------
    >>> h = TimerHeap(); h.push(datetime(2026, 1, 2), "r1", "t1", "delay")
    >>> h.pop_due(datetime(2026, 1, 1)), h.next_due()
    ([], datetime.datetime(2026, 1, 2, 0, 0))
    """

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._counter = itertools.count()

    def push(self, due: datetime, run_id: str, token_id: str, kind: str) -> None:
        """Add a timer."""
        heapq.heappush(self._heap, _Entry(due, next(self._counter), run_id, token_id, kind))

    def pop_due(self, now: datetime, limit: int = 1000) -> list[tuple[datetime, str, str, str]]:
        """Remove and return timers due at ``now`` (at most ``limit``)."""
        due: list[tuple[datetime, str, str, str]] = []
        while self._heap and self._heap[0].due <= now and len(due) < limit:
            e = heapq.heappop(self._heap)
            due.append((e.due, e.run_id, e.token_id, e.kind))
        return due

    def next_due(self) -> datetime | None:
        """When the earliest timer is due, or None."""
        return self._heap[0].due if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
