"""The reference model itself, on small workflows whose outcome docs/semantics.md spells out."""

from __future__ import annotations

import copy
from typing import Any

import wfkit as wf
from tests.model.model import Model
from tests.model.plan import Plan

NOW: dict[str, Any] = {"retry_delay": 0, "jitter": 0, "max_attempts": 1}
DATA = {"key": "k", "w": {}, "n": {}, "xss": [[1, 2], [3]], "xs": [1, 2]}


def run(flow: wf.Workflow, profiles: dict[str, str], **kw: Any) -> Model:
    model = Model(flow, copy.deepcopy(DATA), Plan(0, profiles, kw.get("comps", {})))
    model.run_until_idle()
    return model


def steps(model: Model) -> list[str]:
    return [c[1] for c in model.calls if c[0] == "step"]


def test_a_wait_that_times_out_without_on_timeout_goes_on_along_next() -> None:  # §3
    flow = wf.Workflow("m", 1).start_with().wait_for_signal("w", timeout="20s").then("s1", **NOW)
    model = run(flow, {"s1": "ok"})
    assert model.status == "waiting"
    model.advance_clock(30)
    model.run_until_idle()
    assert (model.status, steps(model)) == ("completed", ["s1"])


def test_a_rejected_approval_without_on_reject_fails_the_run() -> None:  # §3
    model = run(wf.Workflow("m", 1).start_with().approval("a").then("s1", **NOW), {})
    assert model.approve("a", False, "ana", "no")
    model.run_until_idle()
    assert (model.status, steps(model)) == ("failed", [])


def test_a_saga_unwinds_newest_first_and_the_run_fails() -> None:  # §6.3
    flow = (
        wf.Workflow("m", 1)
        .start_with()
        .saga(
            lambda s: (
                s.then("s1", **NOW)
                .compensate_with("undo.s1", policy=NOW)
                .for_each(
                    "xs", lambda b: b.then("s2", **NOW).compensate_with("undo.s2", policy=NOW)
                )
                .then("s3", **NOW)
            )
        )
    )
    model = run(flow, {"s1": "ok", "s2": "ok", "s3": "fail"})
    assert model.status == "failed"
    assert model.compensated == ["s2", "s2", "s1"]
    assert [c[3] for c in model.calls if c[0] == "comp"] == [(1,), (0,), ()]


def test_nested_for_each_keeps_every_cell() -> None:  # §2.4, §10.3
    flow = (
        wf.Workflow("m", 1)
        .start_with()
        .for_each("xss", lambda b: b.for_each("item", lambda c: c.then("s1", **NOW)))
    )
    model = run(flow, {"s1": "ok"})
    assert sorted(c[3] for c in model.calls) == [(0, 0), (0, 1), (1, 0)]
    assert set(model.data["w"]) == {"s1@0.0", "s1@0.1", "s1@1.0"}


def test_a_terminating_branch_drains_its_sibling_first() -> None:  # §7.1
    flow = (
        wf.Workflow("m", 1)
        .start_with()
        .parallel(
            lambda b: b.then("s1", **NOW).on_failure("terminate"),
            lambda b: b.then("s2", **NOW).then("s3", **NOW),
        )
    )
    model = run(flow, {"s1": "fail", "s2": "ok", "s3": "ok"})
    assert model.status == "failed"
    assert steps(model) == ["s1", "s2"]  # s3 never starts
    assert model.data["w"] == {"s2": "s2#1.1"}  # the drained outcome is recorded


def test_a_loop_goes_round_as_its_most_generous_node_allows() -> None:  # §9.1
    flow = (
        wf.Workflow("m", 1)
        .start_with()
        .then("s1", **NOW, max_visits=2)
        .if_("n['s1'] < 3", then=lambda b: b.goto("s1"))
    )
    model = run(flow, {"s1": "ok"})
    assert (model.status, steps(model)) == ("failed", ["s1", "s1"])  # the third visit fails
