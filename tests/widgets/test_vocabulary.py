"""One vocabulary for engine, API and widgets: every event kind the engine writes is an
``EventKind``, every status ``node_statuses()`` returns is a ``NodeStatus``, and ``surface.css``
(with the status colours it shares with static pictures) has a rule for each ``NodeStatus``."""

from __future__ import annotations

import re
from typing import Any

import pytest

import wfkit as wf
from wfkit.engine.vocabulary import EventKind, NodeStatus
from wfkit.widgets.surface import STATUS_CLASSES, GraphSurface

from .conftest import Acts

NO_WAIT = {"retry_delay": "0s", "jitter": 0}


@pytest.mark.parametrize("status", list(NodeStatus))
def test_every_node_status_has_a_rule_in_the_surface_css(status: NodeStatus) -> None:
    css = str(GraphSurface._css)  # what the page gets: picture.css, then surface.css

    assert re.search(rf"\.wfkit-graph g\.node\.{status.value}\b[^{{]*\{{", css), status
    assert status.value in STATUS_CLASSES


def flows() -> list[wf.Workflow]:
    """A step, a step that fails before it succeeds, a saga that unwinds, a signal wait that
    times out, an approval, a delay, a parallel split and a for_each."""

    def checkout(s: wf.Steps) -> None:
        s.then("reserve").compensate_with("release")
        s.then("charge", max_attempts=2, **NO_WAIT).compensate_with("refund")

    return [
        wf.Workflow("steps").start_with("ok").then("flaky", retry_delay="10s", jitter=0),
        wf.Workflow("saga").start_with().saga(checkout, id="checkout").then("receipt"),
        (
            wf.Workflow("waits")
            .start_with("ok")
            .wait_for_signal("go", correlate="order", timeout="1h")
            .approval("review", timeout="1d")
            .delay("1m")
            .parallel(lambda b: b.then("ok"), lambda b: b.then("flaky", **NO_WAIT))
            .for_each("items", lambda b: b.then("ok"))
        ),
        wf.Workflow("expires").start_with("ok").approval("sign", timeout="1h"),
    ]


def test_the_engine_writes_only_event_kinds_and_node_statuses_of_the_vocabulary(
    engine: wf.Engine, acts: Acts, clock: wf.ManualClock
) -> None:
    def flaky(ctx: wf.ActivityContext[Any]) -> None:
        if ctx.attempt < 3:
            raise RuntimeError(f"flaky (attempt {ctx.attempt})")

    def charge(ctx: wf.ActivityContext[Any]) -> None:
        raise RuntimeError("card declined")

    acts.noop("ok", "reserve", "release", "refund", "receipt")
    acts.add("flaky", flaky)
    acts.add("charge", charge)
    for flow in flows():
        engine.register(flow)
    runs = [
        engine.start("steps", {}),
        engine.start("saga", {}),
        engine.start("waits", {"order": "o-1", "items": [1, 2]}),
        engine.start("expires", {}),
    ]

    seen: set[str] = set()

    def look() -> None:
        for run in runs:
            seen.update(run.node_statuses().values())

    def settle() -> None:
        engine.run_until_idle()
        look()

    look()  # the first steps are ready: running
    settle()
    assert engine.signal("go", "o-1") is True
    settle()
    engine.approve(runs[2].id, "review", actor="ann")
    settle()
    for _ in range(2):  # retries come due, the delay ends, the other approval expires
        clock.advance("2h")
        settle()

    assert [run.status for run in runs] == [
        wf.RunStatus.COMPLETED,
        wf.RunStatus.FAILED,
        wf.RunStatus.COMPLETED,
        wf.RunStatus.FAILED,
    ]
    kinds = {e.kind for run in runs for e in run.history()}
    for kind in kinds:
        EventKind(kind)  # raises ValueError for a kind outside the vocabulary
    assert {
        EventKind.STEP_RETRYING,
        EventKind.SAGA_UNWINDING,
        EventKind.COMPENSATION_COMPLETED,
        EventKind.SIGNAL_WAITING,
        EventKind.SIGNAL_RECEIVED,
        EventKind.APPROVAL_APPROVED,
        EventKind.APPROVAL_EXPIRED,
        EventKind.TIMER_FIRED,
        EventKind.PARALLEL_FORKED,
        EventKind.FOR_EACH_STARTED,
        EventKind.JOIN_COMPLETED,
    } <= kinds
    for status in seen:
        NodeStatus(status)
    assert {
        NodeStatus.SUCCEEDED,
        NodeStatus.FAILED,
        NodeStatus.RUNNING,
        NodeStatus.WAITING,
        NodeStatus.RETRYING,
        NodeStatus.COMPENSATED,
    } <= seen


def test_the_api_picture_has_a_colour_for_every_node_status() -> None:
    from wfkit.api.routes import NODE_COLOURS
    from wfkit.engine.vocabulary import NodeStatus

    assert set(NODE_COLOURS) == {status.value for status in NodeStatus}
