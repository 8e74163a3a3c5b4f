"""Callers' commands share one group commit: what one round of several commands guarantees.

Each test holds the writer's lock while its caller threads queue their commands, so that one
caller then runs them all in one round (the way concurrent callers meet under load), and checks
what every caller got and what the store holds.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pydantic
import pytest

import wfkit as wf
from tests.engine.conftest import Activities
from wfkit.engine.state import RunState


class Order(pydantic.BaseModel):
    key: str
    amount: int = pydantic.Field(ge=0)


def _one_round(
    engine: wf.Engine, calls: list[Callable[[], Any]], early: frozenset[int] = frozenset()
) -> list[Any]:
    """Run ``calls`` on threads whose commands all queue before any of them runs; return what
    each returned or raised, in order. ``early``: calls refused before they queue anything."""
    scheduler = engine.runtime.scheduler
    out: list[Any] = [None] * len(calls)

    def call(i: int) -> None:
        try:
            out[i] = calls[i]()
        except Exception as exc:  # the caller's own answer
            out[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
    with engine.runtime.writer.lock:
        queued = 0
        for i, thread in enumerate(threads):
            thread.start()
            if i in early:
                thread.join(10)
                continue
            queued += 1
            deadline = time.monotonic() + 10
            while len(scheduler.commands) < queued:  # queued in this order
                assert time.monotonic() < deadline, "a caller never queued its command"
                time.sleep(0.001)
    for thread in threads:
        thread.join(30)
    return out


def test_a_signal_finds_a_wait_opened_by_a_start_in_the_same_round(
    engine: wf.Engine, acts: Activities
) -> None:
    acts.add("gc.after")
    engine.register(
        wf.Workflow("gc.wait", 1)
        .start_with()
        .wait_for_signal("go", correlate="key")
        .then("gc.after")
    )
    started, delivered = _one_round(
        engine,
        [lambda: engine.start("gc.wait", {"key": "k1"}), lambda: engine.signal("go", "k1")],
    )
    assert isinstance(started, wf.Run)
    assert delivered is True
    engine.run_until_idle()
    assert started.status == wf.RunStatus.COMPLETED
    kinds = [e.kind for e in started.history()]
    assert kinds.count("signal.received") == 1
    assert not engine.waiting()


def test_a_refused_command_writes_nothing_and_the_others_of_its_round_commit(
    engine: wf.Engine, acts: Activities
) -> None:
    acts.add("gc.step")
    engine.register(wf.Workflow("gc.orders", 1, data=Order).start_with("gc.step"))
    answers = _one_round(
        engine,
        [
            lambda: engine.start("gc.orders", {"key": "a", "amount": 1}),
            lambda: engine.start("gc.orders", {"key": "b", "amount": -1}),  # refused
            lambda: engine.cancel("no-such-run"),  # refused inside the round
            lambda: engine.start("gc.orders", {"key": "c", "amount": 3}),
        ],
        early=frozenset({1}),
    )
    assert isinstance(answers[0], wf.Run) and isinstance(answers[3], wf.Run)
    assert isinstance(answers[1], wf.AdmissionError)
    assert isinstance(answers[2], wf.UsageError)
    engine.run_until_idle()
    keys = sorted(r[0] for r in engine.sql("SELECT input FROM wf_instances").fetchall())
    assert [k for k in keys if '"b"' in k] == []
    assert len(keys) == 2
    assert {answers[0].status, answers[3].status} == {wf.RunStatus.COMPLETED}


def test_a_command_that_raises_after_making_a_run_leaves_no_trace(
    engine: wf.Engine, acts: Activities
) -> None:
    """A command's new runs leave the batch with it when it raises (the others commit)."""
    acts.add("gc.step")
    engine.register(wf.Workflow("gc.plain", 1).start_with("gc.step"))

    def half_done(writer: Any) -> None:
        flow = writer.flow(*next(iter(writer.flows)))
        run = RunState("half-made-run", flow, {})
        writer.add_instance(run, "{}", None)
        writer.checkpoint(run).event("run.started")
        raise RuntimeError("changed its mind")

    answers = _one_round(
        engine,
        [
            lambda: engine.start("gc.plain", {}),
            lambda: engine.runtime.scheduler.submit(half_done),
        ],
    )
    assert isinstance(answers[0], wf.Run)
    assert isinstance(answers[1], RuntimeError)
    ids = [r[0] for r in engine.sql("SELECT run_id FROM wf_instances").fetchall()]
    assert ids == [answers[0].id]
    events = engine.sql("SELECT count(*) FROM wf_events WHERE run_id = 'half-made-run'")
    assert events.fetchall()[0][0] == 0


@pytest.mark.parametrize("workers", [0, 2])
def test_many_signals_in_one_round_each_get_their_own_answer(
    engine: wf.Engine, acts: Activities, workers: int
) -> None:
    """Four or more signals in a round are looked up together: every caller still gets True
    for its own wait and False for a key nobody waits on."""
    acts.add("gc.after")
    engine.register(
        wf.Workflow("gc.many", 1)
        .start_with()
        .wait_for_signal("go", correlate="key")
        .then("gc.after")
    )
    runs = engine.start_many("gc.many", [{"key": f"k{i}"} for i in range(6)])
    engine.run_until_idle()
    if workers:
        engine.start_workers(workers)
    sends: list[Callable[[], Any]] = [
        (lambda i=i: engine.signal("go", f"k{i}", {"n": i})) for i in range(6)
    ]
    sends.append(lambda: engine.signal("go", "nobody"))
    sends.append(lambda: engine.signal("go", "k0"))  # the same wait twice: one wins
    answers = _one_round(engine, sends)
    assert answers[:6] == [True] * 6
    assert answers[6] is False
    assert answers[7] is False
    engine.run_until_idle()
    for i, run in enumerate(runs):
        assert run.status == wf.RunStatus.COMPLETED
        received = [e for e in run.history() if e.kind == "signal.received"]
        assert len(received) == 1 and received[0].output == {"n": i}, received


@pytest.mark.parametrize("workers", [0, 2])
def test_start_async_awaits_the_durable_commit(
    engine: wf.Engine, acts: Activities, workers: int
) -> None:
    """asyncio callers (the HTTP API) await their start without holding a thread; a refused
    start raises in the caller and writes nothing."""
    acts.add("gc.step")
    engine.register(wf.Workflow("gc.async", 1, data=Order).start_with("gc.step"))
    if workers:
        engine.start_workers(workers)

    async def main() -> list[Any]:
        calls = [engine.start_async("gc.async", {"key": f"k{i}", "amount": i}) for i in range(20)]
        calls.append(engine.start_async("gc.async", {"key": "bad", "amount": -1}))
        return await asyncio.gather(*calls, return_exceptions=True)

    answers = asyncio.run(main())
    assert all(isinstance(a, wf.Run) for a in answers[:20])
    assert isinstance(answers[20], wf.AdmissionError)
    engine.run_until_idle()
    assert len({a.id for a in answers[:20]}) == 20
    assert all(a.status == wf.RunStatus.COMPLETED for a in answers[:20])
    count = engine.sql("SELECT count(*) FROM wf_instances").fetchall()[0][0]
    assert count == 20


def test_commands_queued_when_the_workers_stop_still_run(
    engine: wf.Engine, acts: Activities
) -> None:
    acts.add("gc.step")
    engine.register(wf.Workflow("gc.stop", 1).start_with("gc.step"))
    engine.start_workers(2)
    started: list[wf.Run] = []
    go = threading.Barrier(5)

    def call() -> None:
        go.wait()
        for _ in range(10):
            started.append(engine.start("gc.stop", {}))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    go.wait()
    engine.stop()
    for thread in threads:
        thread.join(30)
    assert len(started) == 40
    engine.run_until_idle()
    assert all(run.status == wf.RunStatus.COMPLETED for run in started)
