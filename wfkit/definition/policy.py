"""Per-node policies: retries with backoff, attempt timeout, visit limit, failure handling."""

from __future__ import annotations

import random
from datetime import timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from wfkit.definition.durations import Duration

__all__ = ["OnFailure", "Policy", "SagaPolicy"]


class OnFailure(StrEnum):
    """What a node does once it has failed for good (after its retries)."""

    RETRY = "retry"  # retry up to max_attempts, then fail through `failed` or the run
    COMPENSATE = "compensate"  # unwind the enclosing saga
    SUSPEND = "suspend"  # park the run for an operator; undo nothing
    TERMINATE = "terminate"  # fail the run at once; undo nothing


class SagaPolicy(StrEnum):
    """What an outer saga does with a nested saga that already committed."""

    UNWIND = "unwind"  # an outer unwind undoes the inner saga too, innermost first
    KEEP = "keep"  # a committed inner saga stands


class Policy(BaseModel):
    """Retry and failure policy of one node.

    Defaults: 3 attempts, first retry after 1 s doubling up to 5 min with 20 % jitter, no attempt
    timeout, one visit per run, ``on_failure="retry"``.

    Examples
    --------
    >>> Policy(max_attempts=5, retry_delay="2s").delay_before(attempt=3, jitter=False)
    datetime.timedelta(seconds=4)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(3, ge=1, le=1000, description="attempts before the node fails")
    attempt_timeout: Duration | None = Field(None, description="cancel an attempt after this")
    retry_delay: Duration = Field(timedelta(seconds=1), description="delay before the 2nd attempt")
    backoff: float = Field(2.0, ge=1.0, le=100.0, description="delay multiplier per attempt")
    max_delay: Duration = Field(timedelta(minutes=5), description="cap on the retry delay")
    jitter: float = Field(0.2, ge=0.0, le=1.0, description="fraction of the delay randomised")
    max_visits: int = Field(1, ge=1, le=1_000_000, description="visits per run (bounds loops)")
    on_failure: OnFailure = Field(OnFailure.RETRY, description="what failing for good does")

    def delay_before(
        self, attempt: int, *, jitter: bool = True, rng: random.Random | None = None
    ) -> timedelta:
        """Delay to wait before ``attempt`` (2 is the first retry), capped at ``max_delay``."""
        steps = max(attempt - 2, 0)
        cap = self.max_delay.total_seconds()
        try:
            seconds = min(self.retry_delay.total_seconds() * self.backoff**steps, cap)
        except OverflowError:  # e.g. backoff 100 at the 1,000th attempt: past any float
            seconds = cap
        if jitter and self.jitter:
            seconds *= 1.0 - self.jitter * (rng or random).random()
        return timedelta(seconds=seconds)
