"""Validation rules that belong to one node kind, named by its entry in the kinds table.

:func:`~wfkit.definition.validation.validate` runs the rules every graph must meet, then, for
each valid node, the ``rules`` of its kind's :class:`~wfkit.definition.kind_spec.KindSpec`:
a wait's binding, a call's target workflow and mappings. They read the graph and what
validation was given through one :class:`RuleContext`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import networkx as nx
from pydantic import BaseModel

from wfkit.definition import keys
from wfkit.definition.problems import Problem

if TYPE_CHECKING:
    from wfkit.definition.activities import ActivityRegistry
    from wfkit.definition.kinds import Node

__all__ = ["Registered", "RuleContext", "call_rules", "field_names", "listed", "wait_rules"]

Registered = Mapping[str, Mapping[int, type[BaseModel] | None]]
"""Workflows a call may name: id -> version -> data model (None where it declares none)."""

_LISTED = 10
"""Names listed in one message before the rest are counted ("and 5 more")."""


def listed(items: Iterable[object], sep: str = ", ") -> str:
    """At most ``_LISTED`` names joined, then how many more: messages stay short.

    Examples
    --------
    >>> listed(range(12))
    '0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more'
    """
    names = list(items)
    text = sep.join(str(x) for x in names[:_LISTED])
    return text + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


def field_names(model: type[BaseModel]) -> set[str]:
    """The field names of a data model, aliases included."""
    names = set(model.model_fields)
    names |= {f.alias for f in model.model_fields.values() if f.alias}
    return names


class RuleContext:
    """What the rules share: the graph, its valid nodes, and the data model's field names."""

    def __init__(
        self,
        G: nx.MultiDiGraph,
        registry: ActivityRegistry | None,
        model: type[BaseModel] | None,
        workflows: Registered | None = None,
        workflow_id: str | None = None,
    ) -> None:
        self.G = G
        self.registry = registry
        self.workflows = workflows
        self.workflow_id = workflow_id
        self.fields: set[str] | None = field_names(model) if model is not None else None
        self.nodes: dict[str, Node] = {}
        self.broken: set[str] = set()


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
