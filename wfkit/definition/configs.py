"""Each node kind's configuration: the model of its ``config``, and rules that check it further.

A node's ``config`` is plain data in the graph; the model of its kind (named by the kind's entry
in :data:`~wfkit.definition.kinds.KINDS`) validates it, and the editor's form shows its fields.
A kind that takes no configuration still has a model, with no fields. What one node's config
cannot tell alone (a binding against the data model, a call's target among the registered
workflows) its kind's ``rules`` check, written here beside the model and run by
:func:`~wfkit.definition.validation.validate` for each valid node of the kind.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from wfkit.definition import keys
from wfkit.definition.durations import Duration
from wfkit.definition.problems import Problem
from wfkit.definition.rule_context import Registered, RuleContext, field_names, listed

if TYPE_CHECKING:
    from wfkit.definition.kinds import Node

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
    "call_rules",
    "wait_rules",
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


# --- rules beyond one node's config ----------------------------------------------------------


def wait_rules(ctx: RuleContext, n: str, node: Node) -> Iterator[Problem]:
    """A wait binds the payload into fields the data model has, or through a registered
    binder."""
    bind = node.config.bind
    if isinstance(bind, str):
        if ctx.registry is not None and bind not in ctx.registry:
            yield Problem(
                code="unknown-activity",
                node=n,
                message=f"binder {bind!r} is not registered; decorate a function with "
                f"@wf.activity({bind!r}) or give bind as a mapping",
            )
    elif isinstance(bind, dict) and ctx.fields is not None:
        for target in bind.values():
            top = target.split(".")[0]
            if top not in ctx.fields:
                yield Problem(
                    code="unknown-name",
                    node=n,
                    message=f"bind writes {target!r}, which the data model does not have; "
                    "bind to an existing field or add it to the model",
                )


def call_rules(ctx: RuleContext, n: str, node: Node) -> Iterator[Problem]:
    """A call starts another registered workflow, takes no retry policy, and maps fields that
    both data models have."""
    config = node.config
    target = config.workflow_id
    if ctx.workflow_id is not None and target == ctx.workflow_id:
        yield Problem(
            code="self-call",
            node=n,
            message=f"call {n!r} starts {target!r}, the workflow it is in: a workflow may not "
            "call itself; loop back with goto() and max_visits instead",
        )
    yield from _call_policy(ctx, n, node)
    for what, mapping in (("input", config.input), ("bind", config.bind)):
        for source, dest in (mapping or {}).items():
            if not source or not dest or not all(source.split(".")):
                yield Problem(
                    code="bad-config",
                    node=n,
                    message=f"call {n!r}: {what} {source!r} -> {dest!r} names an empty field; "
                    "map child fields to non-empty names",
                )
    if ctx.fields is not None:
        for dest in (config.bind or {}).values():
            if dest.split(".")[0] not in ctx.fields:
                yield Problem(
                    code="unknown-name",
                    node=n,
                    message=f"call {n!r}: bind writes {dest!r}, which the data model does not "
                    "have; bind to an existing field or add it to the model",
                )
    if ctx.workflows is not None and target != ctx.workflow_id:
        yield from _call_target(ctx.workflows, n, node)


def _call_policy(ctx: RuleContext, n: str, node: Node) -> Iterator[Problem]:
    policy = ctx.G.nodes[n].get(keys.POLICY) or {}
    allowed = set(node.spec.policy.fields())
    extra = sorted(set(policy) - allowed) if isinstance(policy, Mapping) else []
    if extra:
        yield Problem(
            code="call-policy",
            node=n,
            message=f"call {n!r} sets {', '.join(extra)}, which a call does not use: a call is "
            "never retried (its child's steps have their own policies); remove them",
        )
    if node.policy.on_failure.value == "suspend":
        yield Problem(
            code="call-policy",
            node=n,
            message=f"call {n!r} has on_failure='suspend', which a call cannot honour (resuming "
            "would need a new child run); connect its failed outlet or use 'terminate'",
        )


def _call_target(workflows: Registered, n: str, node: Node) -> Iterator[Problem]:
    config = node.config
    target = config.workflow_id
    versions = workflows.get(target)
    if not versions or (config.version is not None and config.version not in versions):
        known = (
            f"versions {', '.join(map(str, sorted(versions)))}"
            if versions
            else "registered: " + (listed(sorted(workflows)) or "none")
        )
        yield Problem(
            code="unknown-workflow",
            node=n,
            message=f"call {n!r} starts workflow {target!r}"
            + (f" v{config.version}" if config.version is not None and versions else "")
            + f", which is not registered ({known}); register it before the workflow that "
            "calls it",
        )
        return
    version = config.version if config.version is not None else max(versions)
    model = versions[version]
    if model is None or model.model_config.get("extra") == "allow":
        return
    fields = field_names(model)
    for what, names in (("input", config.input or {}), ("bind", config.bind or {})):
        for source in names:
            if source.split(".")[0] not in fields:
                yield Problem(
                    code="unknown-name",
                    node=n,
                    message=f"call {n!r}: {what} names child field {source!r}, which "
                    f"{model.__name__} ({target!r} v{version}) does not have (fields: "
                    f"{listed(sorted(fields))}); fix the name",
                )
