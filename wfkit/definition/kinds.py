"""Node kinds: the one table that says what each kind is, and the model of a node.

A node of the workflow graph is a dict of plain attributes (see :mod:`wfkit.definition.keys`);
:class:`Node` is the pydantic model that validates it. Each kind is declared once, as a
:class:`~wfkit.definition.kind_spec.KindSpec` in :data:`KINDS`: its config model (in
:mod:`wfkit.definition.configs`), outlets and what an unconnected one means, drawing, form
fields and rules. Validation, rendering, splicing, the editor and the engine's outlet rules read
this table; the engine's handler of each kind lives in ``wfkit/engine/nodes/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from wfkit.definition.configs import (
    ActionConfig,
    ApprovalConfig,
    CallConfig,
    DecisionConfig,
    DelayConfig,
    EndConfig,
    ForEachConfig,
    JoinConfig,
    ParallelConfig,
    StartConfig,
    WaitConfig,
    call_rules,
    wait_rules,
)
from wfkit.definition.durations import format_duration
from wfkit.definition.field_errors import field_errors
from wfkit.definition.kind_spec import (
    ActivityUse,
    Drawing,
    Frame,
    KindSpec,
    Outlet,
    PolicyUse,
    Unconnected,
    clip,
)
from wfkit.definition.policy import Policy

__all__ = [
    "DEFAULT_KIND",
    "KINDS",
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
    "spec_for",
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


DEFAULT_KIND = NodeKind.ACTION
"""The kind the editor offers first, and shows for a node whose kind is not one."""

# --- drawing: BPMN-like shapes; the text a node shows ----------------------------------------

_BAR = {
    "shape": "box",
    "style": "filled",
    "fillcolor": "#37474f",
    "color": "#37474f",
    "label": "",
    "width": "0.12",
    "height": "0.7",
    "fixedsize": "true",
}
_EVENT = {
    "shape": "doublecircle",
    "width": "0.45",
    "fixedsize": "true",
    "fontsize": "12",
    "style": "filled",
    "fillcolor": "#fff8e1",
    "color": "#8d6e00",
}
_TASK = {"shape": "box", "style": "rounded,filled"}


def _title_below(n: str, node: Node) -> dict[str, str]:
    return {"xlabel": node.label or ""}


def _no_text(n: str, node: Node) -> dict[str, str]:
    return {}


def _action_text(n: str, node: Node) -> dict[str, str]:
    return {"label": node.label or node.activity or n}


def _decision_text(n: str, node: Node) -> dict[str, str]:
    text = node.config.expression or f"{node.activity}()"
    return {"label": node.label or clip(text, 24)}


def _join_text(n: str, node: Node) -> dict[str, str]:
    mode, count = node.config.mode, node.config.count
    shown = "" if mode == "all" else "any" if mode == "any" else f"≥{count}"
    return {"xlabel": node.label or shown}


def _for_each_text(n: str, node: Node) -> dict[str, str]:
    limit = node.config.max_parallelism
    shown = f"for each {clip(node.config.items, 20)}{f' ×{limit}' if limit else ''}"
    return {"xlabel": node.label or shown}


def _delay_text(n: str, node: Node) -> dict[str, str]:
    return {"xlabel": node.label or format_duration(node.config.duration)}


def _wait_text(n: str, node: Node) -> dict[str, str]:
    timeout = node.config.timeout
    shown = f"{node.config.signal}{f' ({format_duration(timeout)})' if timeout else ''}"
    return {"xlabel": node.label or shown}


def _approval_text(n: str, node: Node) -> dict[str, str]:
    timeout = node.config.timeout
    expiry = "\n≤ " + format_duration(timeout) if timeout else ""
    return {"label": f"♙ {node.label or n}{expiry}"}


def _call_text(n: str, node: Node) -> dict[str, str]:  # a BPMN call activity: a '+' marker
    version = node.config.version
    pinned = f" v{version}" if version is not None else ""
    return {"label": f"{node.label or clip(node.config.workflow_id + pinned, 28)}\n⊞"}


# --- the table --------------------------------------------------------------------------------

_SPECS = (
    KindSpec(
        NodeKind.START,
        StartConfig,
        Drawing(
            {
                "shape": "circle",
                "label": "",
                "width": "0.35",
                "style": "filled",
                "fillcolor": "#e8f5e9",
                "color": "#2e7d32",
            },
            _title_below,
        ),
        outlets=(Outlet("next", Unconnected.END),),
        policy=PolicyUse.NONE,
        entry=True,
        numbered_ids=False,
    ),
    KindSpec(
        NodeKind.ACTION,
        ActionConfig,
        Drawing({**_TASK, "fillcolor": "#e3f2fd", "color": "#1565c0"}, _action_text),
        outlets=(
            Outlet("next", Unconnected.END),
            Outlet("failed", Unconnected.FAIL),
            Outlet("fallback", Unconnected.FAIL),
        ),
        activity=ActivityUse.REQUIRED,
        compensable=True,
        policy=PolicyUse.STEP,
    ),
    KindSpec(
        NodeKind.DECISION,
        DecisionConfig,
        Drawing(
            {
                "shape": "diamond",
                "style": "filled",
                "fillcolor": "#fffde7",
                "color": "#f9a825",
            },
            _decision_text,
        ),
        branches=Unconnected.END_RECORDED,
        activity=ActivityUse.OR_EXPRESSION,
        policy=PolicyUse.STEP,
        expressions=("expression",),
        id_base="if",
    ),
    KindSpec(
        NodeKind.PARALLEL,
        ParallelConfig,
        Drawing(_BAR, _title_below),
        branches=Unconnected.REFUSED,
        frame=Frame.BRANCHES,
    ),
    KindSpec(
        NodeKind.JOIN,
        JoinConfig,
        Drawing(_BAR, _join_text),
        outlets=(Outlet("completed", Unconnected.END), Outlet("partial", Unconnected.FAIL)),
        frame=Frame.GATHER,
    ),
    KindSpec(
        NodeKind.FOR_EACH,
        ForEachConfig,
        Drawing(_BAR, _for_each_text),
        outlets=(Outlet("each", Unconnected.REFUSED),),
        frame=Frame.ITEMS,
        expressions=("items",),
    ),
    KindSpec(
        NodeKind.DELAY,
        DelayConfig,
        Drawing({**_EVENT, "label": "◷"}, _delay_text),
        outlets=(Outlet("next", Unconnected.END),),
    ),
    KindSpec(
        NodeKind.WAIT,
        WaitConfig,
        Drawing({**_EVENT, "label": "✉"}, _wait_text),
        outlets=(Outlet("next", Unconnected.END), Outlet("elapsed", Unconnected.NEXT)),
        expressions=("correlate",),
        rules=wait_rules,
    ),
    KindSpec(
        NodeKind.APPROVAL,
        ApprovalConfig,
        Drawing({**_TASK, "fillcolor": "#f3e5f5", "color": "#6a1b9a"}, _approval_text),
        outlets=(
            Outlet("approved", Unconnected.END),
            Outlet("rejected", Unconnected.FAIL),
            Outlet("expired", Unconnected.FAIL),
        ),
    ),
    KindSpec(
        NodeKind.CALL,
        CallConfig,
        Drawing(
            {**_TASK, "penwidth": "3", "fillcolor": "#e0f2f1", "color": "#00695c"},
            _call_text,
        ),
        outlets=(Outlet("next", Unconnected.END), Outlet("failed", Unconnected.FAIL)),
        child_run=True,
        expressions=("input",),
        rules=call_rules,
    ),
    KindSpec(
        NodeKind.END,
        EndConfig,
        Drawing(
            {
                "shape": "circle",
                "label": "",
                "width": "0.35",
                "penwidth": "3",
                "style": "filled",
                "fillcolor": "#ffebee",
                "color": "#b71c1c",
            },
            _no_text,
        ),
        policy=PolicyUse.NONE,
        numbered_ids=False,
    ),
)

KINDS: Mapping[NodeKind, KindSpec] = MappingProxyType({spec.kind: spec for spec in _SPECS})
"""Every node kind's :class:`~wfkit.definition.kind_spec.KindSpec`, in :class:`NodeKind` order.

Examples
--------
>>> KINDS[NodeKind.WAIT].unconnected("elapsed")
<Unconnected.NEXT: 'next'>
"""


def spec_for(kind: object) -> KindSpec | None:
    """The table's entry for a kind given as a :class:`NodeKind` or its name; None for anything
    else (graph attributes may hold any value).

    Examples
    --------
    >>> spec_for("join").gathers, spec_for("teleport"), spec_for(["start"])
    (True, None, None)
    """
    return KINDS[NodeKind(kind)] if isinstance(kind, str) and kind in _NAMES else None


_NAMES = frozenset(k.value for k in NodeKind)


def outlets_of(kind: NodeKind | str, config: Any = None) -> tuple[str, ...]:
    """Outlets a node of ``kind`` with ``config`` declares.

    Examples
    --------
    >>> outlets_of("approval"), outlets_of("parallel", {"branches": ["a", "b"]})
    (('approved', 'rejected', 'expired'), ('a', 'b'))
    """
    return KINDS[NodeKind(kind)].outlet_names(config)


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
        spec = self.spec
        model = spec.config
        if not isinstance(self.config, model):
            raw = self.config if self.config is not None else {}
            if isinstance(raw, BaseModel):
                raw = raw.model_dump()
            try:
                object.__setattr__(self, "config", model.model_validate(raw))
            except ValidationError as exc:
                lines = "; ".join(field_errors(exc, model))
                raise ValueError(f"config does not fit kind {self.kind.value!r}: {lines}") from exc
        kind = self.kind.value
        if spec.activity is ActivityUse.REQUIRED and not self.activity:
            raise ValueError(f"a {kind} node needs an activity name")
        if self.activity and spec.activity is ActivityUse.NONE:
            raise ValueError(f"a {kind} node takes no activity ({self.activity!r})")
        if spec.activity is ActivityUse.OR_EXPRESSION:
            has_expr = self.config.expression is not None
            if has_expr == bool(self.activity):
                raise ValueError(f"a {kind} needs exactly one of an expression or an activity")
        if self.compensation and not spec.compensable:
            undone = ", ".join(k.value for k, s in KINDS.items() if s.compensable)
            raise ValueError(f"only {undone} nodes can have a compensation")
        return self

    @property
    def spec(self) -> KindSpec:
        """The entry of the node's kind in :data:`KINDS`."""
        return KINDS[self.kind]

    @property
    def outlets(self) -> tuple[str, ...]:
        """The outlet names this node declares."""
        return self.spec.outlet_names(self.config)

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
