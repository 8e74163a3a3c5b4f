"""How far the items of each for_each node of a run got (``37/50, 2 failed``), from its history."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from wfkit.definition.workflow import Workflow
from wfkit.engine import Event
from wfkit.engine.records import TokenView
from wfkit.engine.replay import SUCCEEDED
from wfkit.engine.vocabulary import EventKind

__all__ = ["LoopProgress", "loop_progress", "progress_html"]


@dataclass(frozen=True)
class LoopProgress:
    """How far the items of one for_each node got: ``37/50, 2 failed``."""

    node_id: str
    total: int
    done: int
    failed: int
    in_progress: int = 0
    steps: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per body node: (items that completed it, items that failed it for good)."""

    @property
    def text(self) -> str:
        """``"37/50, 2 failed"`` (and ``", 3 in progress"`` while items are under way)."""
        return _count_text(self.done, self.total, self.failed, self.in_progress)


def _count_text(done: int, total: int, failed: int, in_progress: int = 0) -> str:
    text = f"{done}/{total}"
    if failed:
        text += f", {failed} failed"
    if in_progress:
        text += f", {in_progress} in progress"
    return text


def _body(workflow: Workflow, fork: str, join: str | None) -> tuple[set[str], set[str]]:
    """The nodes of a for_each body, and those of them that lead into its join."""
    G = workflow.graph
    outlets = workflow.node(fork).outlets  # the loop's body starts at them
    stack = [v for _, v, k in G.out_edges(fork, keys=True) if k in outlets]
    body: set[str] = set()
    while stack:
        n = stack.pop()
        if n in body or n in (fork, join):
            continue
        body.add(n)
        stack += list(G.successors(n))
    lasts = {n for n in body if join is not None and G.has_edge(n, join)}
    return body, lasts


def _joins(workflow: Workflow) -> dict[str, str]:
    joins: dict[str, str] = {}
    for n in workflow.graph.nodes:
        node = workflow.node(n)
        if node.spec.gathers:
            joins[node.config.fork] = n
    return joins


def loop_progress(
    workflow: Workflow,
    history: Sequence[Event],
    tokens: Mapping[str, TokenView] | None = None,
) -> list[LoopProgress]:
    """Item progress of every for_each node the run has started, from its history.

    The total is the ``items`` of the node's ``for_each.started`` events; an item is done when
    its branch completed a step that leads into the join, failed when the join recorded its
    ``branch.failed``; per body node, ``step.completed`` and final ``step.failed`` events (those
    that schedule no retry) count items. ``tokens`` (where each token stands) adds the items
    in flight.
    """
    joins = _joins(workflow)
    result = []
    for fork in [n for n in workflow.graph.nodes if workflow.node(n).spec.loops]:
        starts = [e for e in history if e.kind == EventKind.FOR_EACH_STARTED and e.node_id == fork]
        if not starts:
            continue
        join = joins.get(fork)
        body, lasts = _body(workflow, fork, join)
        total = sum(int((e.detail or {}).get("items", 0)) for e in starts)
        done: set[str | None] = set()
        failed = 0
        completed: dict[str, set[str | None]] = {n: set() for n in body}
        failures: dict[str, set[str | None]] = {n: set() for n in body}
        for e in history:
            if e.node_id in body:
                if e.kind == EventKind.STEP_COMPLETED:
                    completed[e.node_id].add(e.token)
                elif e.kind == EventKind.STEP_FAILED and "retry_in_s" not in (e.detail or {}):
                    failures[e.node_id].add(e.token)
                if e.kind in SUCCEEDED and e.node_id in lasts:
                    done.add(e.token)
            elif e.kind == EventKind.BRANCH_FAILED and e.node_id == join and join is not None:
                failed += 1
        in_progress = sum(
            1 for t in (tokens or {}).values() if t.node_id in body and not t.compensation
        )
        steps = {n: (len(completed[n]), len(failures[n])) for n in sorted(body)}
        result.append(LoopProgress(fork, total, len(done), failed, in_progress, steps))
    return result


def progress_html(progress: Sequence[LoopProgress]) -> str:
    """The progress lines as HTML (empty when the run has no for_each)."""
    lines = []
    for p in progress:
        steps = "".join(
            f'<li class="wfkit-progress-step" data-node="{html.escape(n)}">'
            f"{html.escape(n)}: {_count_text(c, p.total, f)}</li>"
            for n, (c, f) in p.steps.items()
        )
        lines.append(
            f'<div class="wfkit-progress" data-node="{html.escape(p.node_id)}">'
            f"<b>for_each {html.escape(p.node_id)}</b>: "
            f'<span class="wfkit-progress-text">{html.escape(p.text)}</span>'
            f'<ul style="margin:0">{steps}</ul></div>'
        )
    return "".join(lines)
