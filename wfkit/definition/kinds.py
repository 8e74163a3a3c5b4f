"""Node kinds, their configuration models and the outlets the engine gives meaning to.

A node of the workflow graph is a dict of plain attributes (see :mod:`wfkit.definition.keys`);
:class:`Node` is the pydantic model that validates it. Each kind has its own config model, so a
form (or a person) editing a node sees exactly the fields that kind accepts.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from wfkit.definition.durations import Duration
from wfkit.definition.field_errors import field_errors
from wfkit.definition.policy import Policy

__all__ = [
    "ACTIVITY_KINDS",
    "COMPENSATION_KINDS",
    "KIND_CONFIGS",
    "ActionConfig",
    "ApprovalConfig",
    "CallConfig",
    "DecisionConfig",
    "DelayConfig",
    "EndConfig",
    "ForEachConfig",
    "JoinConfig",
    "Node",
    "NodeKind",
    "ParallelConfig",
    "StartConfig",
    "WaitConfig",
    "outlets_of",
]


class NodeKind(StrEnum):
    """The kinds of node a workflow graph may hold."""

    START = "start"  # entry; the run begins here with the data document
    ACTION = "action"  # runs a registered activity
    DECISION = "decision"  # an expression or a registered function picks an outlet
    PARALLEL = "parallel"  # forks one token per branch
    JOIN = "join"  # gathers the branches of one parallel or for_each
    FOR_EACH = "for_each"  # one branch per item of a list in the data
    DELAY = "delay"  # durable timer
    WAIT = "wait"  # parks on a named signal with a correlation key
    APPROVAL = "approval"  # parks for a person to approve or reject
    CALL = "call"  # starts another registered workflow as a child run and waits for it
    END = "end"  # explicit end


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StartConfig(_Config):
    """The start node takes no configuration."""


class EndConfig(_Config):
    """The end node takes no configuration."""


class ActionConfig(_Config):
    """An action runs the node's ``activity``; it needs no further configuration."""


class DecisionConfig(_Config):
    """Picks one outlet: by a safe ``expression`` over the data, or by the node's activity.

    A boolean result leaves through ``true``/``false``; a string result names the outlet.
    """

    expression: str | None = Field(None, description="safe expression over the data document")
    branches: tuple[str, ...] = Field(("true", "false"), min_length=1, description="outlets")


class ParallelConfig(_Config):
    """Forks one token per branch; the branch names are the outlets."""

    branches: tuple[str, ...] = Field(..., min_length=1, description="outlet per branch")


class JoinConfig(_Config):
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


class ForEachConfig(_Config):
    """Runs the ``each`` path once per item of the list the ``items`` expression yields."""

    items: str = Field(..., min_length=1, description="expression yielding a list")
    max_parallelism: int | None = Field(None, ge=1, description="items in flight at once")


class DelayConfig(_Config):
    """Durable timer: a row with a due time, not a sleep."""

    duration: Duration


class WaitConfig(_Config):
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


class ApprovalConfig(_Config):
    """Parks for a person to approve or reject; optional expiry."""

    timeout: Duration | None = Field(None, description="leave through `expired` after this")
    assignees: tuple[str, ...] = Field((), description="people or groups who may decide")


class CallConfig(_Config):
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


KIND_CONFIGS: dict[NodeKind, type[_Config]] = {
    NodeKind.START: StartConfig,
    NodeKind.ACTION: ActionConfig,
    NodeKind.DECISION: DecisionConfig,
    NodeKind.PARALLEL: ParallelConfig,
    NodeKind.JOIN: JoinConfig,
    NodeKind.FOR_EACH: ForEachConfig,
    NodeKind.DELAY: DelayConfig,
    NodeKind.WAIT: WaitConfig,
    NodeKind.APPROVAL: ApprovalConfig,
    NodeKind.CALL: CallConfig,
    NodeKind.END: EndConfig,
}

_STATIC_OUTLETS: dict[NodeKind, tuple[str, ...]] = {
    NodeKind.START: ("next",),
    NodeKind.ACTION: ("next", "failed", "fallback"),
    NodeKind.JOIN: ("completed", "partial"),
    NodeKind.FOR_EACH: ("each",),
    NodeKind.DELAY: ("next",),
    NodeKind.WAIT: ("next", "elapsed"),
    NodeKind.APPROVAL: ("approved", "rejected", "expired"),
    NodeKind.CALL: ("next", "failed"),
    NodeKind.END: (),
}

_NEEDS_ACTIVITY = {NodeKind.ACTION}
ACTIVITY_KINDS = frozenset({NodeKind.ACTION, NodeKind.DECISION})
"""Kinds whose node may name an activity (an action must; a decision may, instead of an
expression)."""
COMPENSATION_KINDS = frozenset({NodeKind.ACTION})
"""Kinds whose node may have a compensation (and a compensation policy)."""


class Node(BaseModel):
    """The validated attributes of one graph node.

    Examples
    --------
    >>> Node.model_validate({"kind": "delay", "config": {"duration": "7d"}}).config.duration.days
    7
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: NodeKind
    activity: str | None = Field(None, description="registered activity name")
    config: Any = Field(default_factory=dict, description="the kind's config model")
    policy: Policy = Field(default_factory=Policy)
    label: str | None = None
    saga: str | None = Field(None, description="id of the innermost saga scope")
    compensation: str | None = Field(None, description="activity that undoes this step")
    compensation_policy: Policy | None = None

    @model_validator(mode="after")
    def _check_kind(self) -> Node:
        model = KIND_CONFIGS[self.kind]
        if not isinstance(self.config, model):
            raw = self.config if self.config is not None else {}
            if isinstance(raw, BaseModel):
                raw = raw.model_dump()
            try:
                object.__setattr__(self, "config", model.model_validate(raw))
            except ValidationError as exc:
                lines = "; ".join(field_errors(exc, model))
                raise ValueError(f"config does not fit kind {self.kind.value!r}: {lines}") from exc
        if self.kind in _NEEDS_ACTIVITY and not self.activity:
            raise ValueError(f"a {self.kind.value} node needs an activity name")
        if self.activity and self.kind not in ACTIVITY_KINDS:
            raise ValueError(f"a {self.kind.value} node takes no activity ({self.activity!r})")
        if self.kind == NodeKind.DECISION:
            has_expr = self.config.expression is not None
            if has_expr == bool(self.activity):
                raise ValueError("a decision needs exactly one of an expression or an activity")
        if self.compensation and self.kind not in COMPENSATION_KINDS:
            raise ValueError("only action nodes can have a compensation")
        return self

    @property
    def outlets(self) -> tuple[str, ...]:
        """The outlet names this node declares."""
        return outlets_of(self.kind, self.config)

    def to_attrs(self) -> dict[str, Any]:
        """Plain JSON-friendly attributes, leaving out defaults (what the graph stores)."""
        data = self.model_dump(mode="json", exclude_defaults=True)
        data["kind"] = self.kind.value
        config = self.config.model_dump(mode="json", exclude_defaults=True)
        if config:
            data["config"] = config
        else:
            data.pop("config", None)
        for key in ("policy", "compensation_policy"):
            if key in data and not data[key]:
                del data[key]
        return data


def outlets_of(kind: NodeKind | str, config: Any = None) -> tuple[str, ...]:
    """Outlets a node of ``kind`` with ``config`` declares."""
    kind = NodeKind(kind)
    if kind in (NodeKind.DECISION, NodeKind.PARALLEL):
        branches = getattr(config, "branches", None)
        if branches is None and isinstance(config, dict):
            branches = config.get("branches")
        if branches is None and kind == NodeKind.DECISION:
            branches = ("true", "false")
        return tuple(branches or ())
    return _STATIC_OUTLETS[kind]
