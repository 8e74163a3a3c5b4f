"""Hypothesis strategies: valid workflows built with the builder, outcome plans and schedules.

A case is a workflow, its input, a :class:`~tests.model.plan.Plan` and a schedule of external
events. Node ids are short and unique (``s1`` actions, ``d1`` decisions by activity, ``w1``
waits, ``a1`` approvals); every activity is named after its node, every compensation
``undo.<node>``.
Waits stay outside for_each bodies (their bookmarks would share a signal name and key, and a
signal goes to the oldest); approvals inside them are decided per item (``loop_path``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

import wfkit as wf
from tests.model.plan import PROFILES, Plan

Event = tuple[Any, ...]


@dataclass
class Case:
    """One generated example."""

    workflow: wf.Workflow
    data: dict[str, Any]
    plan: Plan
    schedule: list[Event]
    activities: list[str] = field(default_factory=list)
    compensations: list[str] = field(default_factory=list)
    waits: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """A readable reproduction: the graph's edges, plan, input and schedule."""
        G = self.workflow.graph
        lines = [f"workflow {self.workflow.id}: {len(G)} nodes"]
        for n, attrs in G.nodes(data=True):
            extra = {k: v for k, v in attrs.items() if k not in ("kind",)}
            lines.append(f"  {n} [{attrs['kind']}] {extra}")
        lines += [f"  {u} -{k}-> {v}" for u, v, k in G.edges(keys=True)]
        lines.append(f"  sagas: {G.graph.get('sagas')}")
        lines.append(f"input {self.data}")
        lines.append(f"plan {self.plan}")
        lines.append(f"schedule {self.schedule}")
        return "\n".join(lines)


@dataclass
class _Ctx:
    draw: Any
    case_no: int
    plan: Plan
    counter: int = 0
    activities: list[str] = field(default_factory=list)
    compensations: list[str] = field(default_factory=list)
    waits: list[str] = field(default_factory=list)
    approvals: list[str] = field(default_factory=list)

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"


_KINDS = (
    "action",
    "action",
    "if",
    "decide",
    "parallel",
    "for_each",
    "delay",
    "wait",
    "approval",
    "saga",
    "saga",
    "loop",
)


def _policy(draw: Any) -> dict[str, Any]:
    delay = draw(st.sampled_from([0, 0, 10]))
    return {"max_attempts": draw(st.integers(1, 3)), "retry_delay": delay, "jitter": 0}


def _action(
    c: _Ctx,
    b: wf.Steps,
    where: dict[str, Any],
    depth: int,
    profile: str | None = None,
    **policy: Any,
) -> str:
    draw = c.draw
    node = c.name("s")
    c.activities.append(node)
    c.plan.profiles[node] = profile or draw(st.sampled_from(PROFILES))
    b.then(node, id=node, **_policy(draw), **policy)
    if where["saga"] and draw(st.integers(0, 3)):  # three in four saga steps are compensable
        b.compensate_with(
            "undo." + node,
            policy={"max_attempts": draw(st.integers(1, 2)), "retry_delay": 0, "jitter": 0},
        )
        c.compensations.append(node)
        c.plan.comp_profiles[node] = draw(st.sampled_from(("ok", "ok", "ok", "flaky", "fail")))
    choice = (
        "none"
        if profile
        else draw(st.sampled_from(("none",) * 4 + ("suspend", "terminate", "failed", "fallback")))
    )
    if choice in ("suspend", "terminate"):
        b.on_failure(choice)
    elif choice == "failed" and depth < 3:
        b.on_failed(lambda s: _blocks(c, s, where, depth + 1, 0, 1))
    elif choice == "fallback" and depth < 3:
        b.on_fallback(lambda s: _blocks(c, s, where, depth + 1, 0, 1))
    return node


def _join(draw: Any, branches: int) -> Any:
    mode = draw(st.sampled_from(("all", "all", "any", "at_least")))
    return wf.at_least(draw(st.integers(1, max(branches, 1)))) if mode == "at_least" else mode


def _block(c: _Ctx, b: wf.Steps, where: dict[str, Any], depth: int) -> None:
    draw = c.draw
    kinds = [k for k in _KINDS if depth < 3 or k in ("action", "delay", "if")]
    if where["each"]:
        kinds = [k for k in kinds if k not in ("wait", "loop")]
    if where["each"] >= 2 or where["flat_each"]:
        kinds = [k for k in kinds if k != "for_each"]
    kind = draw(st.sampled_from(kinds + ["action"] * 5 * where["saga"]))
    sub = lambda lo, hi, **w: lambda s: _blocks(c, s, {**where, **w}, depth + 1, lo, hi)  # noqa: E731
    optional = lambda lo, hi, **w: sub(lo, hi, **w) if draw(st.booleans()) else None  # noqa: E731
    if kind == "action":
        _action(c, b, where, depth)
    elif kind == "if":
        b.if_(
            draw(st.sampled_from(("fa", "fb", "not fa"))),
            then=optional(1, 2),
            otherwise=optional(1, 2),
        )
    elif kind == "decide":
        node = c.name("d")
        c.activities.append(node)
        c.plan.profiles[node] = draw(st.sampled_from(("ok", "ok", "flaky", "mixed")))
        c.plan.branches[node] = ("x", "y")
        branches = {"x": optional(1, 2), "y": optional(1, 2)}
        if draw(st.booleans()):  # a declared `fallback` branch takes unknown names (§17.2)
            branches["fallback"] = optional(1, 2)
        b.decide(node, id=node, branches=branches)
        b.with_policy(max_attempts=2, retry_delay=0, jitter=0)
    elif kind == "parallel":
        n = draw(st.integers(1, 3))
        b.parallel(*[sub(1, 2) for _ in range(n)], join=_join(draw, n), on_partial=optional(0, 1))
    elif kind == "for_each":
        nested = draw(st.booleans()) and not where["each"]
        items = "item" if where["each"] else ("xss" if nested else "xs")
        b.for_each(
            items,
            sub(1, 2, each=where["each"] + 1, flat_each=not nested and not where["each"]),
            max_parallelism=draw(st.sampled_from((None, 1, 2))),
            join=_join(draw, 2),
            on_partial=optional(0, 1),
        )
    elif kind == "delay":
        b.delay(f"{draw(st.sampled_from((5, 20)))}s")
    elif kind == "wait":
        node = c.name("w")
        c.waits.append(node)
        timeout = draw(st.sampled_from((None, "20s")))
        b.wait_for_signal(
            node,
            correlate="key",
            bind={"v": "got_" + node},
            timeout=timeout,
            on_timeout=optional(1, 1) if timeout else None,
        )
    elif kind == "approval":
        node = c.name("a")
        c.approvals.append(node)
        timeout = draw(st.sampled_from((None, "20s")))
        b.approval(
            node,
            timeout=timeout,
            on_reject=optional(0, 1),
            on_expire=optional(0, 1) if timeout else None,
        )
    elif kind == "saga":
        policy = draw(st.sampled_from(("unwind", "keep"))) if where["saga"] else None
        ends_badly = draw(st.booleans())

        def body(s: wf.Steps) -> None:
            _blocks(c, s, {**where, "saga": True}, depth + 1, 1, 3)
            if ends_badly:  # a saga whose last step fails for good unwinds
                _action(c, s, {**where, "saga": True}, depth, profile="fail")

        b.saga(body, policy=policy)
    else:  # a loop back to an action, bounded by max_visits
        head = _action(c, b, where, depth, max_visits=draw(st.integers(2, 3)))
        rounds = draw(st.integers(1, 4))
        b.if_(f"n['{head}'] < {rounds}", then=lambda s: s.goto(head))


def _blocks(c: _Ctx, b: wf.Steps, where: dict[str, Any], depth: int, lo: int, hi: int) -> None:
    for _ in range(c.draw(st.integers(lo, hi))):
        _block(c, b, where, depth)


@st.composite
def cases(draw: Any, case_no: int = 0) -> Case:
    """A valid workflow with its input, outcome plan and schedule of external events."""
    plan = Plan(draw(st.integers(0, 2**16)))
    c = _Ctx(draw, case_no, plan)
    flow = wf.Workflow(f"model-{case_no}", version=1).start_with()
    _blocks(c, flow, {"saga": False, "each": 0, "flat_each": False}, 0, 1, 4)
    flow.check(registry=None)
    xs = draw(st.lists(st.integers(0, 9), min_size=1, max_size=3))
    xss = draw(st.lists(st.lists(st.integers(0, 9), max_size=2), min_size=1, max_size=2))
    data = {
        "key": f"k{case_no}",
        "fa": draw(st.booleans()),
        "fb": draw(st.booleans()),
        "xs": xs,
        "xss": xss,
        "w": {},
        "n": {},
    }
    event = st.one_of(
        st.tuples(st.just("advance"), st.sampled_from((5, 15, 30))),
        st.tuples(st.just("signal"), st.integers(0, 9)),
        st.tuples(st.just("post"), st.integers(0, 9)),
        st.tuples(st.just("approve"), st.integers(0, 9), st.booleans()),
        st.tuples(st.just("restart")),
        st.tuples(st.just("resume")),
        st.tuples(st.just("recover"), st.sampled_from(("retry", "skip", "abandon"))),
    )
    schedule = draw(st.lists(event, max_size=8))
    schedule += [("advance", 30), ("signal", 0), ("approve", 0, True)] * draw(st.integers(0, 3))
    return Case(flow, data, plan, schedule, c.activities, c.compensations, c.waits)
