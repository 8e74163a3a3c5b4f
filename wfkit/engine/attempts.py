"""The attempts of a run's steps, read from its history: number, start, end, outcome, error text
with its traceback, output, loop cell, and which checkpoint's data was the attempt's input."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from wfkit.engine.records import Event
from wfkit.engine.replay import StoredCheckpoint
from wfkit.engine.vocabulary import ATTEMPT_OUTCOMES

__all__ = ["AttemptInfo", "attempts_of"]


@dataclass(frozen=True)
class AttemptInfo:
    """One ended attempt of a node's step (or of its compensation), as its history recorded it.

    ``status`` is ``succeeded``, ``failed``, ``crashed``, ``cancelled``, ``abandoned``,
    ``compensated`` or ``compensation-failed``; ``retried`` is True for a failure after which
    another attempt was scheduled. ``seq`` is the event that recorded its end; ``input_seq`` the
    checkpoint whose data document the attempt started from (pass it to ``run.data_at``): the
    last one stored before the attempt's end that is not later than its start (exact with
    ``run_until_idle``; with worker threads a parallel branch's checkpoint committed while the
    attempt waited for a free worker is counted in). ``loop_path`` is
    its for_each cell (outermost index first), ``()`` outside a for_each.
    """

    node_id: str
    attempt: int
    status: str
    seq: int
    input_seq: int
    token: str | None
    ended_at: datetime
    started_at: datetime | None = None
    loop_path: tuple[int, ...] = ()
    error: str | None = None
    output: Any = None
    retried: bool = False

    @property
    def seconds(self) -> float | None:
        """How long the attempt ran (None when its start was not recorded)."""
        if self.started_at is None:
            return None
        return max((self.ended_at - self.started_at).total_seconds(), 0.0)

    @property
    def cell(self) -> str:
        """The for_each cell as text: ``"2"``, ``"1.0"``; ``""`` outside a for_each."""
        return ".".join(str(i) for i in self.loop_path)


def attempts_of(
    history: Sequence[Event], points: Sequence[StoredCheckpoint], node_id: str | None = None
) -> list[AttemptInfo]:
    """Every ended attempt in ``history`` (of ``node_id`` only, when given), in the order their
    ends were recorded; ``points`` are the run's checkpoints (for ``input_seq``)."""
    found = []
    for event in history:
        outcome = ATTEMPT_OUTCOMES.get(event.kind)
        if outcome is None or event.node_id is None or event.attempt is None:
            continue
        if node_id is not None and event.node_id != node_id:
            continue
        detail = event.detail or {}
        path = detail.get("loop_path")
        if path is None and detail.get("loop_index") is not None:
            path = [detail["loop_index"]]
        found.append(
            AttemptInfo(
                event.node_id,
                event.attempt,
                outcome,
                event.seq,
                _input_seq(points, event),
                event.token,
                event.at,
                event.started_at,
                tuple(int(i) for i in path or ()),
                event.error,
                event.output,
                "retry_in_s" in detail,
            )
        )
    return found


def _input_seq(points: Sequence[StoredCheckpoint], event: Event) -> int:
    """The last checkpoint before the one holding ``event`` that the attempt could have seen."""
    chosen = 0
    for point in points:
        if point.seq >= event.seq:  # the checkpoint that recorded the attempt's end
            break
        if event.started_at is None or point.at <= event.started_at:
            chosen = point.seq
    return chosen
