"""Each run's state as its last commit left it: frozen copies that readers take without a lock.

The runs in memory are published at each commit that changes them; a run that leaves memory stays
published only when it ended and the engine is the only one of its database (RECENT_VIEWS of
them): a parked run's row answers, and on a shared store another engine may move it on.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from wfkit.engine.records import RunStatus
from wfkit.engine.state import RunState

__all__ = ["RECENT_VIEWS", "Published"]

RECENT_VIEWS = 256  # ended runs whose last committed state readers get without a query


class Published:
    """The published views: run id -> (the run in memory, its frozen copy)."""

    def __init__(self, runs: Mapping[str, RunState], shared: bool) -> None:
        self._runs = runs  # the writer's runs in memory (read only)
        self._shared = shared
        self._views: OrderedDict[str, tuple[RunState, RunState]] = OrderedDict()

    def view(self, run_id: str) -> RunState | None:
        """The run as its last commit left it; None when not published."""
        entry = self._views.get(run_id)
        if entry is None:
            return None
        live, frozen = entry
        if self._shared and self._runs.get(run_id) is not live:
            return None  # another engine may have moved it on since
        return frozen

    def publish(self, run: RunState, in_memory: bool) -> None:
        """Publish the run's state after a commit that changed it."""
        views = self._views
        if not in_memory and (self._shared or not RunStatus(run.status).terminal):
            # parked: its row answers (a parked run costs its rows and no memory); on a shared
            # store another engine may move it on
            views.pop(run.run_id, None)
            return
        views[run.run_id] = (run, run.freeze())
        views.move_to_end(run.run_id)
        spare = len(views) - len(self._runs) - RECENT_VIEWS
        while spare > 0 and views:
            oldest = next(iter(views))
            if oldest in self._runs:
                views.move_to_end(oldest)
            else:
                views.popitem(last=False)
            spare -= 1

    def pop(self, run_id: str, default: None = None) -> None:
        """Withdraw the run's view (it left memory, or its state is not to be trusted)."""
        self._views.pop(run_id, default)
