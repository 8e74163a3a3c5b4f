"""Checkpoints staged by durability="batched": written together at most BATCH_WINDOW later.

A running run's checkpoint that changes nothing another run or caller could see may wait for the
next write while the steps it made ready already run; a crash re-runs the steps of at most this
window (each at most once per crash).
"""

from __future__ import annotations

import time

from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.rows import RunRows

__all__ = ["BATCH_WINDOW", "Staging"]

# durability="batched": checkpoints of running runs wait at most this long before they are written
# (their next steps start at once); a crash re-runs the steps of at most this window
BATCH_WINDOW = 0.005


class Staging:
    """The staged checkpoints and their rows, one entry per run (later ones folded in)."""

    def __init__(self) -> None:
        self._checkpoints: dict[str, Checkpoint] = {}
        self._rows: dict[str, RunRows] = {}
        self._at = 0.0  # when the first of them was staged (time.monotonic)

    def __bool__(self) -> bool:
        return bool(self._rows)

    def open(self) -> bool:
        """True while more may join: nothing staged yet, or the window is not over."""
        return not self._rows or time.monotonic() < self._at + BATCH_WINDOW

    def due_in(self) -> float | None:
        """Seconds until the staged checkpoints are due to be written; None when none wait."""
        if not self._rows:
            return None
        return max(self._at + BATCH_WINDOW - time.monotonic(), 0.0)

    def add(self, batch: dict[str, Checkpoint], parts: dict[str, RunRows]) -> None:
        """Stage a batch's checkpoints and their rows."""
        if not self._rows:
            self._at = time.monotonic()
        for run_id, rows in parts.items():
            if run_id in self._rows:
                self._rows[run_id].absorb(rows)
            else:
                self._rows[run_id] = rows
        self._checkpoints.update(batch)

    def take(
        self, batch: dict[str, Checkpoint], parts: dict[str, RunRows]
    ) -> tuple[dict[str, Checkpoint], dict[str, RunRows]]:
        """Empty the stage into a batch written now: the staged rows first, then ``parts``."""
        staged, self._checkpoints = self._checkpoints, {}
        rows, self._rows = self._rows, {}
        for run_id, later in parts.items():
            if run_id in rows:
                rows[run_id].absorb(later)
            else:
                rows[run_id] = later
        return {**staged, **batch}, rows
