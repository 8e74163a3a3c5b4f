"""What a commit made ready, for the scheduler to hand out."""

from __future__ import annotations

from dataclasses import dataclass, field

from wfkit.engine.state import RunState

__all__ = ["Released"]


@dataclass
class Released:
    """What a commit made ready: steps to dispatch and attempts to cancel."""

    dispatch: list[tuple[RunState, str]] = field(default_factory=list)
    cancel: list[tuple[str, str]] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)
    timers: bool = False  # new timers: a sleeping writer thread must look at its clock again
    handed: int = 0  # new or woken runs left in a shared store for whichever engine claims them

    def merge(self, other: Released) -> None:
        """Add what another commit released."""
        self.dispatch += other.dispatch
        self.cancel += other.cancel
        self.changed |= other.changed
        self.timers = self.timers or other.timers
        self.handed += other.handed
