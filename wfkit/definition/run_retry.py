"""Whole-run retries: a run that fails for good is tried again, from where it failed.

``wf.Workflow(..., retry=wf.RunRetry(max_attempts=3, delay="1m", backoff=2.0))`` stores the
budget as the graph attribute ``run_retry`` (so it is part of the workflow's JSON and of its
``content_hash``). docs/semantics.md §16 says what a run retry does.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wfkit.definition import keys
from wfkit.definition.durations import MAX_DURATION, Duration, format_duration

__all__ = ["RunRetry", "run_retry_of", "run_retry_problem"]


class RunRetry(BaseModel):
    """How often a failed run is tried again, and how long it waits before each new attempt.

    A run that fails for good (after any saga unwind its failure triggered) is tried again
    after ``delay`` (then ``delay * backoff``, ``delay * backoff**2``...), from the step that
    failed, until it has made ``max_attempts`` run attempts in all. Steps that completed are
    not run again.

    Parameters
    ----------
    max_attempts : int
        Run attempts in all, the first included (1 means no retry); 1 to 1,000.
    delay : duration
        Wait before the second run attempt (``"1m"``, ``timedelta``, seconds); at most
        36,500 days.
    backoff : float
        Multiplier of the delay per further attempt, 1 (constant) to 100.

    Examples
    --------
    >>> retry = RunRetry(max_attempts=3, delay="1m", backoff=2.0)
    >>> retry.delay_before(2), retry.delay_before(3)
    (datetime.timedelta(seconds=60), datetime.timedelta(seconds=120))
    >>> retry.describe()
    'run retry: 3 attempts, 1m apart, backoff x2'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(3, ge=1, le=1000, description="run attempts in all, the first too")
    delay: Duration = Field(timedelta(minutes=1), description="wait before the 2nd run attempt")
    backoff: float = Field(2.0, ge=1.0, le=100.0, description="delay multiplier per attempt")

    def delay_before(self, attempt: int) -> timedelta:
        """The wait before run attempt ``attempt`` (2 is the first retry), at most 36,500 days."""
        cap = MAX_DURATION.total_seconds()
        try:
            seconds = min(self.delay.total_seconds() * self.backoff ** max(attempt - 2, 0), cap)
        except OverflowError:  # backoff 100 at the 1,000th attempt: past any float
            seconds = cap
        return timedelta(seconds=seconds)

    def describe(self) -> str:
        """Words for the picture's title: attempts, delay and backoff."""
        backoff = f"{self.backoff:g}"
        then = "" if self.backoff == 1 else f", backoff x{backoff}"
        return f"run retry: {self.max_attempts} attempts, {format_duration(self.delay)} apart{then}"


def run_retry_of(G: nx.MultiDiGraph) -> RunRetry | None:
    """The run retry budget stored in ``G.graph['run_retry']``, or None.

    Raises ``ValueError`` (a ``pydantic.ValidationError`` included) when it is malformed.
    """
    raw: Any = G.graph.get(keys.RUN_RETRY)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"G.graph['run_retry'] must be a mapping like {{'max_attempts': 3, 'delay': '1m'}}, "
            f"got {type(raw).__name__}"
        )
    return RunRetry.model_validate(dict(raw))


def run_retry_problem(G: nx.MultiDiGraph) -> str | None:
    """What is wrong with ``G.graph['run_retry']``, or None when it is absent or valid."""
    try:
        run_retry_of(G)
    except ValidationError as exc:
        fields = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'run_retry'}: {e['msg']}" for e in exc.errors()
        )
        return f"G.graph['run_retry'] is malformed ({fields}); write it with wf.RunRetry(...)"
    except ValueError as exc:
        return f"{exc}; write it with wf.RunRetry(...)"
    return None
