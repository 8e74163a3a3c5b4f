"""The configuration model of each node kind: the fields its ``config`` attribute takes.

A node's ``config`` is plain data in the graph; the model of its kind (named by the kind's entry
in :data:`~wfkit.definition.kinds.KINDS`) validates it, and the editor's form shows its fields.
A kind that takes no configuration still has a model, with no fields.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from wfkit.definition.durations import Duration

__all__ = [
    "ActionConfig",
    "ApprovalConfig",
    "CallConfig",
    "DecisionConfig",
    "DelayConfig",
    "EndConfig",
    "ForEachConfig",
    "JoinConfig",
    "KindConfig",
    "ParallelConfig",
    "StartConfig",
    "WaitConfig",
]


class KindConfig(BaseModel):
    """Base of the config models: frozen, and no field a kind does not declare."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class StartConfig(KindConfig):
    """The start node takes no configuration."""


class EndConfig(KindConfig):
    """The end node takes no configuration."""


class ActionConfig(KindConfig):
    """An action runs the node's ``activity``; it needs no further configuration."""


class DecisionConfig(KindConfig):
    """Picks one outlet: by a safe ``expression`` over the data, or by the node's activity.

    A boolean result leaves through ``true``/``false``; a string result names the outlet.
    """

    expression: str | None = Field(None, description="safe expression over the data document")
    branches: tuple[str, ...] = Field(("true", "false"), min_length=1, description="outlets")


class ParallelConfig(KindConfig):
    """Forks one token per branch; the branch names are the outlets."""

    branches: tuple[str, ...] = Field(..., min_length=1, description="outlet per branch")


class JoinConfig(KindConfig):
    """Gathers the branches of the parallel or for_each named by ``fork``."""

    fork: str = Field(..., description="id of the parallel or for_each node this join gathers")
    mode: Literal["all", "any", "at_least"] = "all"
    count: int | None = Field(None, ge=1, description="branches needed when mode is at_least")

    @model_validator(mode="after")
    def _count_matches_mode(self) -> JoinConfig:
        if self.mode == "at_least" and self.count is None:
            raise ValueError("mode 'at_least' needs a count, e.g. wf.at_least(2)")
        if self.mode != "at_least" and self.count is not None:
            raise ValueError(f"count is only meaningful with mode 'at_least', not {self.mode!r}")
        return self


class ForEachConfig(KindConfig):
    """Runs the ``each`` path once per item of the list the ``items`` expression yields."""

    items: str = Field(..., min_length=1, description="expression yielding a list")
    max_parallelism: int | None = Field(None, ge=1, description="items in flight at once")


class DelayConfig(KindConfig):
    """Durable timer: a row with a due time, not a sleep."""

    duration: Duration


class WaitConfig(KindConfig):
    """Parks on the signal named ``signal`` whose key equals the ``correlate`` expression."""

    signal: str = Field(..., min_length=1, description="signal name")
    correlate: str | None = Field(None, description="expression giving the correlation key")
    bind: dict[str, str] | str | None = Field(
        None, description="payload field -> data field, or a registered binder's name"
    )
    timeout: Duration | None = Field(None, description="leave through `elapsed` after this")
    payload: str | None = Field(
        None, description="'module:Model' of the pydantic model a payload must fit"
    )


class ApprovalConfig(KindConfig):
    """Parks for a person to approve or reject; optional expiry."""

    timeout: Duration | None = Field(None, description="leave through `expired` after this")
    assignees: tuple[str, ...] = Field((), description="people or groups who may decide")


class CallConfig(KindConfig):
    """Starts the registered workflow ``workflow_id`` as a child run and waits for it to end.

    ``input`` maps child data fields to safe expressions over the caller's data (without it
    the caller's whole document is passed); ``bind`` maps child fields to caller fields, copied
    back when the child completes (without it nothing is copied back). ``version`` pins the
    child's version; by default the latest registered when the call starts.
    """

    workflow_id: str = Field(..., min_length=1, description="id of the registered workflow")
    version: int | None = Field(None, ge=1, description="pinned version; latest if empty")
    input: dict[str, str] | None = Field(
        None, description="child field -> expression over the caller's data"
    )
    bind: dict[str, str] | None = Field(
        None, description="child field -> caller field, copied back when the child completes"
    )
