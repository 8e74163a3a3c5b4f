"""Clocks: the real one, and a manual one that tests and notebooks move forward by hand."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from wfkit.definition.durations import parse_duration

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """Tells the time (UTC, naive) and lets the scheduler know when time jumps."""

    def now(self) -> datetime:
        """The current time, UTC, without zone."""

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever the time moves by hand (never for the real clock)."""

    @property
    def manual(self) -> bool:
        """True for a clock that only moves when told to."""


class SystemClock:
    """The real clock."""

    manual = False

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC).replace(tzinfo=None)

    def subscribe(self, callback: Callable[[], None]) -> None:
        """The real clock never jumps; nothing to subscribe to."""


class ManualClock:
    """A clock that stands still until :meth:`advance` moves it.

    Timers and retry delays fire when the engine next runs after the clock passed their due time.

    Examples
    --------
    >>> clock = ManualClock(datetime(2026, 1, 1))
    >>> clock.advance("7d").isoformat()
    '2026-01-08T00:00:00'
    """

    manual = True

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1)
        self._now = start.astimezone(UTC).replace(tzinfo=None) if start.tzinfo else start
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def now(self) -> datetime:
        """The clock's current time."""
        with self._lock:
            return self._now

    def advance(self, by: timedelta | str | float) -> datetime:
        """Move the clock forward by ``by`` (``"7d"``, ``timedelta``, seconds); return the time."""
        step = parse_duration(by)
        with self._lock:
            self._now += step
            now = self._now
        for callback in list(self._listeners):
            callback()
        return now

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every :meth:`advance` (the scheduler's wake-up)."""
        self._listeners.append(callback)
