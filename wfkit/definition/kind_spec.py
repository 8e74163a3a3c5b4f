"""What an entry of the node-kinds table says: the shape of :class:`KindSpec` and its values.

Each node kind is declared once, in :data:`wfkit.definition.kinds.KINDS`, as a
:class:`KindSpec`: its config model, its outlets and what each means when it has no edge, how
it is drawn, which fields its form shows, what it takes part in (frames, child runs) and the
validation rules of its own. Everything else (validation, rendering, splicing, the editor, the
engine's outlet rules) reads the table instead of asking which kind a node is. The engine half
of a kind, what it does with a token, is its handler in ``wfkit/engine/nodes/``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from wfkit.definition.policy import Policy

if TYPE_CHECKING:
    from wfkit.definition.kinds import Node, NodeKind
    from wfkit.definition.problems import Problem
    from wfkit.definition.rule_context import RuleContext

__all__ = [
    "ActivityUse",
    "Drawing",
    "Frame",
    "KindSpec",
    "Outlet",
    "PolicyUse",
    "Rules",
    "Unconnected",
    "clip",
]


class Unconnected(StrEnum):
    """What happens to a token that leaves through an outlet with no edge (docs/semantics.md §3)."""

    END = "end"  # the path ends: the ordinary end of a sequence (a main outlet)
    END_RECORDED = "end_recorded"  # the path ends, recorded as a `path.ended` event
    NEXT = "next"  # the token goes on along the node's `next` outlet
    FAIL = "fail"  # the step fails for good; the failure rules apply
    REFUSED = "refused"  # never happens: validation refuses the graph (a fork's branches)

    @property
    def ends_path(self) -> bool:
        """True where the path ends there: such an outlet is an *open end* (§14.1)."""
        return self in (Unconnected.END, Unconnected.END_RECORDED)


class ActivityUse(StrEnum):
    """Whether a node of the kind names a registered activity."""

    NONE = "none"  # it takes no activity
    REQUIRED = "required"  # it runs its activity (an action)
    OR_EXPRESSION = "or_expression"  # an activity or its config's `expression`, exactly one


class PolicyUse(StrEnum):
    """Which policy fields mean something for a node of the kind (the form shows those)."""

    NONE = "none"  # no policy: the node neither runs nor fails (start, end)
    PASSAGE = "passage"  # `max_visits` and `on_failure`: a node a token passes through
    STEP = "step"  # every field: the node runs attempts of an activity (retries, timeouts)

    def fields(self) -> tuple[str, ...]:
        """The names of those :class:`~wfkit.definition.policy.Policy` fields, in model order.

        Examples
        --------
        >>> PolicyUse.PASSAGE.fields()
        ('max_visits', 'on_failure')
        """
        if self is PolicyUse.NONE:
            return ()
        if self is PolicyUse.STEP:
            return tuple(Policy.model_fields)
        return tuple(n for n in Policy.model_fields if n in ("max_visits", "on_failure"))


class Frame(StrEnum):
    """The part a node of the kind plays in frames, the fan-outs that a join gathers."""

    NONE = "none"  # none
    BRANCHES = "branches"  # opens a frame, one branch per outlet (parallel)
    ITEMS = "items"  # opens a frame, one branch per item, each a loop cell (for_each)
    GATHER = "gather"  # gathers the frame of the node its `config.fork` names (join)


@dataclass(frozen=True)
class Outlet:
    """One outlet a kind declares, and what it means when it has no edge."""

    name: str
    unconnected: Unconnected = Unconnected.END


@dataclass(frozen=True)
class Drawing:
    """How rendering draws a node of the kind.

    ``attrs`` are fixed Graphviz node attributes (shape, style, colours, size); ``text`` gives
    the ``label``/``xlabel`` of a node from its id and validated node (its ``label`` first,
    where the kind shows one).
    """

    attrs: Mapping[str, str]
    text: Callable[[str, Node], dict[str, str]]


Rules = Callable[["RuleContext", str, "Node"], Iterator["Problem"]]
"""A kind's own validation rules: problems of one valid node of the kind in its graph."""


@dataclass(frozen=True)
class KindSpec:
    """Everything wfkit knows about one node kind, apart from its engine handler.

    Attributes
    ----------
    kind : NodeKind
        The kind.
    config : type of BaseModel
        The model of the node's ``config`` (its form shows these fields).
    drawing : Drawing
        How the node is drawn.
    outlets : tuple of Outlet
        The outlets every node of the kind declares, in order.
    branches : Unconnected or None
        Set where the outlets are the names in the node's ``config.branches`` (the model's
        default where the node gives none): what an unconnected one of them means.
    activity : ActivityUse
        Whether the node names an activity.
    compensable : bool
        Whether the node may have a compensation (and a compensation policy).
    policy : PolicyUse
        Which policy fields mean something for it.
    frame : Frame
        The part it plays in the frames joins gather.
    entry : bool
        The run begins at it (a graph has exactly one).
    child_run : bool
        It starts a child run of the registered workflow its ``config.workflow_id`` names.
    expressions : tuple of str
        Config fields that hold safe expressions over the data (a mapping: each of its values).
    id_base : str
        The first part of generated node ids (the kind's name where empty).
    numbered_ids : bool
        Generated ids carry a number (``delay-1``); without, the first is the bare base.
    rules : callable or None
        The kind's own validation rules (:data:`Rules`).
    """

    kind: NodeKind
    config: type[BaseModel]
    drawing: Drawing
    outlets: tuple[Outlet, ...] = ()
    branches: Unconnected | None = None
    activity: ActivityUse = ActivityUse.NONE
    compensable: bool = False
    policy: PolicyUse = PolicyUse.PASSAGE
    frame: Frame = Frame.NONE
    entry: bool = False
    child_run: bool = False
    expressions: tuple[str, ...] = ()
    id_base: str = ""
    numbered_ids: bool = True
    rules: Rules | None = None

    def outlet_names(self, config: Any = None) -> tuple[str, ...]:
        """The outlets a node of the kind with ``config`` (a model or plain data) declares."""
        if self.branches is None:
            return tuple(o.name for o in self.outlets)
        branches = getattr(config, "branches", None)
        if branches is None and isinstance(config, dict):
            branches = config.get("branches")
        if branches is None:
            default = self.config.model_fields["branches"].default
            branches = default if isinstance(default, tuple) else ()
        return tuple(branches or ())

    def unconnected(self, outlet: str) -> Unconnected:
        """What ``outlet`` means with no edge; an outlet the kind does not name ends the path,
        recorded, so that no token ever vanishes without a record."""
        for declared in self.outlets:
            if declared.name == outlet:
                return declared.unconnected
        return self.branches or Unconnected.END_RECORDED

    @property
    def opens_frame(self) -> bool:
        """It forks branches that one join gathers (parallel, for_each)."""
        return self.frame in (Frame.BRANCHES, Frame.ITEMS)

    @property
    def loops(self) -> bool:
        """Its branches are loop cells, with an index and an item (for_each)."""
        return self.frame is Frame.ITEMS

    @property
    def gathers(self) -> bool:
        """It gathers the branches of the fork its ``config.fork`` names (join)."""
        return self.frame is Frame.GATHER

    @property
    def counts_visits(self) -> bool:
        """Arriving at it counts a visit (§1.3): everywhere but where branches gather."""
        return self.frame is not Frame.GATHER

    def expressions_of(self, config: Any) -> list[str]:
        """The expressions a node's validated ``config`` holds, in field order."""
        found: list[str] = []
        for name in self.expressions:
            value = getattr(config, name, None)
            if isinstance(value, str):
                found.append(value)
            elif isinstance(value, Mapping):
                found += [v for v in value.values() if isinstance(v, str)]
        return found

    def node_id_base(self) -> str:
        """The first part of the ids generated for its nodes."""
        return self.id_base or self.kind.value


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last an ellipsis where it was longer.

    Examples
    --------
    >>> clip("amount > 100", 8)
    'amount …'
    """
    return text if len(text) <= limit else text[: limit - 1] + "…"
