"""Typed activity outputs: a pydantic model as an activity's return annotation, and reading an
earlier step's output as a model.

``def charge(ctx) -> Receipt:`` (or ``-> Receipt | None``) declares what the activity returns.
The annotation is resolved once, when the activity is registered (:func:`output_type_of`), and
every attempt's return value is fitted to it (:func:`fit_output`): a ``Receipt`` is stored as its
JSON, a dict is validated against ``Receipt`` and stored as the model's JSON, anything else fails
the attempt with the fields that do not fit, in words. :func:`read_output` is
``ctx.output(node_id, Model)``: an earlier step's output, by loop cell inside for_each loops.
"""

from __future__ import annotations

import inspect
import logging
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import networkx as nx
from pydantic import BaseModel, ValidationError

from wfkit.definition.graph import iter_nodes
from wfkit.definition.kinds import Node
from wfkit.errors import UsageError

__all__ = [
    "OutputType",
    "describe_validation",
    "fit_output",
    "loop_scopes",
    "output_type_of",
    "read_output",
]

log = logging.getLogger("wfkit.activity")

M = TypeVar("M", bound=BaseModel)

MAX_ERRORS = 5  # field errors named in one message (the rest are counted)


@dataclass(frozen=True)
class OutputType:
    """What an activity's return annotation declares: a model, and whether ``None`` fits."""

    model: type[BaseModel]
    optional: bool = False

    @property
    def name(self) -> str:
        """``Receipt`` or ``Receipt | None``."""
        return self.model.__name__ + (" | None" if self.optional else "")


class Unresolved(Exception):
    """The return annotation names something that is not defined (yet)."""


def output_type_of(function: Callable[..., Any], name: str) -> OutputType | None:
    """The model ``function``'s return annotation declares, or None (no annotation, or not a
    model). Only the return annotation is read; a string annotation (``from __future__ import
    annotations``) is resolved in the function's module, and :class:`Unresolved` is raised for a
    name that module does not define."""
    target = inspect.unwrap(function)
    annotation = (getattr(target, "__annotations__", None) or {}).get("return")
    if annotation is None:
        return None
    globalns = getattr(target, "__globals__", None)
    if globalns is None:
        module = sys.modules.get(getattr(target, "__module__", "") or "")
        globalns = vars(module) if module is not None else {}
    holder = types.SimpleNamespace(__annotations__={"return": annotation})
    try:
        hints = typing.get_type_hints(holder, globalns=globalns)
    except NameError as exc:
        raise Unresolved(str(exc)) from None
    except Exception as exc:  # an annotation typing cannot evaluate: the output is untyped
        log.debug("activity %r: its return annotation cannot be read (%s); untyped", name, exc)
        return None
    return _model_of(hints.get("return"))


def _model_of(annotation: Any) -> OutputType | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return OutputType(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(members) < len(typing.get_args(annotation))
        if len(members) == 1 and isinstance(members[0], type):
            if issubclass(members[0], BaseModel):
                return OutputType(members[0], optional)
    return None


def describe_validation(exc: ValidationError, limit: int = MAX_ERRORS) -> str:
    """Pydantic's field errors in words, without its links: ``amount: Input should be a valid
    number (got 'x'); currency: Field required``."""
    parts = []
    errors = exc.errors(include_url=False)
    for error in errors[:limit]:
        where = ".".join(str(p) for p in error.get("loc", ())) or "the value"
        text = f"{where}: {error.get('msg', 'does not fit')}"
        if error.get("type") != "missing" and "input" in error:
            text += f" (got {_clip(repr(error['input']))})"
        parts.append(text)
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more")
    return "; ".join(parts)


def fit_output(value: Any, declared: OutputType, activity: str) -> tuple[Any, str | None]:
    """The return value as it is stored (the model's JSON) and None; or the value unchanged and
    why it does not fit the declared model.

    Examples
    --------
    >>> class Receipt(BaseModel):
    ...     amount: float
    >>> fit_output({"amount": "2"}, OutputType(Receipt), "billing.charge")
    ({'amount': 2.0}, None)
    >>> print(fit_output({"amount": "x"}, OutputType(Receipt), "billing.charge")[1][:66])
    output of 'billing.charge' does not fit Receipt: amount: Input sho
    """
    model = declared.model
    if value is None:
        if declared.optional:
            return None, None
        return value, (
            f"output of {activity!r} does not fit {model.__name__}: the activity returned None; "
            f"return a {model.__name__} (or annotate it -> {model.__name__} | None)"
        )
    try:
        if isinstance(value, model):
            return value.model_dump(mode="json"), None
        if isinstance(value, BaseModel):  # another model: its fields must fit this one
            value = value.model_dump()
        return model.model_validate(value).model_dump(mode="json"), None
    except ValidationError as exc:
        return value, (
            f"output of {activity!r} does not fit {model.__name__}: {describe_validation(exc)}; "
            f"return a {model.__name__} or a dict that fits it"
        )


def read_output(
    outputs: Mapping[str, Any],
    node_id: str,
    model: type[M] | None,
    *,
    reader: str,
    loop_path: Sequence[int],
    scopes: Mapping[str, tuple[str, ...]],
    cell: str | int | None = None,
) -> Any:
    """``ctx.output(node_id, model)``: the output of an earlier step, read by step ``reader``.

    ``scopes`` gives every node's enclosing for_each nodes, outermost first (a node inside a
    loop keeps one output per cell, ``"2"`` or ``"1.0"``). A node whose loops all enclose the
    reader is read in the reader's own cell (``loop_path``); a node in a loop the reader is not
    in has a map of cells: the cells inside the reader's own (all of them outside any loop),
    or the one ``cell`` names.
    """
    if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise UsageError(
            f"ctx.output({node_id!r}, {model!r}): the model must be a pydantic model class "
            "(a BaseModel subclass); leave it out to read the JSON value"
        )
    if scopes and node_id not in scopes:
        known = ", ".join(sorted(scopes)[:20])
        raise UsageError(
            f"ctx.output({node_id!r}): the workflow has no node {node_id!r} (nodes: {known}); "
            "name the id of a node that ran before this step"
        )
    if node_id not in outputs:
        recorded = ", ".join(sorted(outputs)) or "none"
        raise UsageError(
            f"ctx.output({node_id!r}): node {node_id!r} has no output yet (it has not completed, "
            f"or it returned None; nodes with an output: {recorded}); read it in a step that "
            "runs after it, or check ctx.outputs first"
        )
    value = outputs[node_id]
    loops = scopes.get(node_id, ())
    if cell is not None and not loops:
        raise UsageError(
            f"ctx.output({node_id!r}, cell={cell!r}): node {node_id!r} is not inside a for_each, "
            "so it keeps one output, not one per cell; leave cell out"
        )
    where = repr(node_id)
    if isinstance(cell, int) and not isinstance(cell, bool):
        cell = str(cell)
    if loops:
        cells = value if isinstance(value, dict) else {}
        shared = _shared(loops, scopes.get(reader, ()), len(loop_path))
        key = cell
        if key is None and shared == len(loops):
            key = ".".join(str(i) for i in loop_path[:shared])
        if key is None:
            prefix = "".join(f"{i}." for i in loop_path[:shared])
            inside = {k: v for k, v in cells.items() if k.startswith(prefix)}
            if model is not None:
                raise UsageError(
                    f"ctx.output({node_id!r}, {model.__name__}): node {node_id!r} is inside a "
                    f"for_each this step is not in, and keeps one output per cell "
                    f"({_cells(inside)}); name one with cell='...', or read them all untyped "
                    f"with ctx.output({node_id!r})"
                )
            return inside
        if key not in cells:
            raise UsageError(
                f"ctx.output({node_id!r}): node {node_id!r} has no output yet in cell {key!r} "
                f"(cells with an output: {_cells(cells)}); read it in a step that runs after it "
                "in the same item"
            )
        value, where = cells[key], f"{node_id!r} (cell {key})"
    if model is None:
        return value
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise UsageError(
            f"output of {where} does not fit {model.__name__}: {describe_validation(exc)}; "
            f"read it with the model its activity returns, or untyped with "
            f"ctx.output({node_id!r})"
        ) from None


def _shared(loops: tuple[str, ...], around_reader: tuple[str, ...], depth: int) -> int:
    """How many of a node's loops (outermost first) also enclose the reader."""
    shared = 0
    for mine, theirs in zip(loops, around_reader, strict=False):
        if mine != theirs or shared >= depth:
            break
        shared += 1
    return shared


def loop_scopes(
    G: nx.MultiDiGraph, nodes: Mapping[str, Node] | None = None
) -> dict[str, tuple[str, ...]]:
    """Every node's enclosing for_each nodes, outermost first (``()`` outside any loop).

    A for_each's body is what its ``each`` outlet reaches before its join; a node in the bodies
    of nested loops is enclosed by all of them. ``nodes`` are the graph's validated nodes when
    the caller has them already.

    Examples
    --------
    >>> import wfkit as wf
    >>> flow = wf.Workflow("w").start_with().for_each("xs", lambda b: b.then("a.ship"))
    >>> loop_scopes(flow.graph)["a.ship"]
    ('for_each-1',)
    """
    nodes = dict(iter_nodes(G)) if nodes is None else nodes
    joins = {node.config.fork: n for n, node in nodes.items() if node.spec.gathers}
    inside: dict[str, list[str]] = {n: [] for n in G.nodes}
    for fork, node in nodes.items():
        if not node.spec.loops:
            continue
        stop = {fork, joins.get(fork)}
        stack = [v for _, v, k in G.out_edges(fork, keys=True) if k in node.outlets]
        seen: set[str] = set()
        while stack:
            n = stack.pop()
            if n in seen or n in stop:
                continue
            seen.add(n)
            inside[n].append(fork)
            stack += list(G.successors(n))
    depth = {n: len(forks) for n, forks in inside.items()}  # an outer loop encloses fewer
    return {n: tuple(sorted(forks, key=lambda f: depth[f])) for n, forks in inside.items()}


def _cells(cells: Mapping[str, Any]) -> str:
    keys = sorted(cells, key=lambda k: [int(p) if p.isdigit() else 0 for p in k.split(".")])
    shown = ", ".join(keys[:10]) + (f" and {len(keys) - 10} more" if len(keys) > 10 else "")
    return shown or "none"


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
