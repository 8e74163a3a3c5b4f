"""Concurrent callers: what many threads calling the engine's caller-facing writes at once
(start, start_many, signal, post_signal, approve, cancel) and reading runs meanwhile can rely on.

Each caller gets its own outcome (its run, its True or False, its error) and nothing else; a
refused call writes nothing and does not disturb the calls committed beside it; of callers racing
for one wait or one approval exactly one wins; a run read while it advances shows a state it
really had. Every test runs on a DuckDB file and on PostgreSQL, with background workers and
driven inline, and releases its callers together behind a barrier.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel, Field

import wfkit as wf
from tests.engine.conftest import Activities

JOIN = 60.0
"""Seconds a caller thread may take before the test calls it hung (never reached when green)."""


class Order(BaseModel):
    """The data model of the ``typed`` workflow: admission refuses a negative amount."""

    order_id: str
    amount: int = Field(ge=0)


class Payment(BaseModel):
    """The payload model of the ``paid`` wait in :func:`test_a_refused_payload_...`."""

    amount: int = Field(gt=0)
    ref: str


@dataclass
class Outcome:
    """What one call returned or raised."""

    value: Any = None
    error: BaseException | None = None


def race(callers: int, rounds: int, call: Callable[[int, int], Any]) -> list[list[Outcome]]:
    """Run ``call(caller, round)`` on ``callers`` threads, every round released to all of them
    at once by a barrier; ``outcomes[round][caller]`` is what that call returned or raised."""
    barrier = threading.Barrier(callers)
    outcomes = [[Outcome() for _ in range(callers)] for _ in range(rounds)]

    def body(caller: int) -> None:
        for round_ in range(rounds):
            try:
                barrier.wait(JOIN)
                outcomes[round_][caller] = Outcome(value=call(caller, round_))
            except BaseException as exc:  # kept for the test to look at
                outcomes[round_][caller] = Outcome(error=exc)

    threads = [
        threading.Thread(target=body, args=(c,), name=f"caller-{c}", daemon=True)
        for c in range(callers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN)
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"callers still blocked after {JOIN}s: {hung}"
    return outcomes


class Driver:
    """Inline driving on a thread of its own while callers race (no worker threads)."""

    def __init__(self, engine: wf.Engine) -> None:
        self.engine = engine
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._loop, name="driver", daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.engine.run_until_idle()
            except BaseException as exc:
                self.errors.append(exc)
                return

    def __enter__(self) -> Driver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(JOIN)
        assert not self.thread.is_alive(), "run_until_idle did not return"


@pytest.fixture(params=[False, True], ids=["inline", "workers"])
def workers(request: pytest.FixtureRequest, engine: wf.Engine) -> bool:
    """True: four worker threads and the writer thread run in the background (stopped when the
    engine closes); False: nothing runs steps but ``run_until_idle`` on the test's threads."""
    if request.param:
        engine.start_workers(threads=4)
    return bool(request.param)


def settle(engine: wf.Engine) -> None:
    """Drive (inline) or wait for the workers (background) until nothing is left to do."""
    engine.run_until_idle(timeout=JOIN)


def statuses(engine: wf.Engine) -> dict[str, wf.RunStatus]:
    return {info.run_id: info.status for info in engine.runs(limit=100_000)}


def rows(engine: wf.Engine, sql: str) -> list[tuple[Any, ...]]:
    return engine.sql(sql).fetchall()


def kinds(run: wf.Run, kind: str) -> list[wf.Event]:
    return [e for e in run.history() if e.kind == kind]


def calls_by_run(acts: Activities) -> Counter[tuple[str, str]]:
    """(run id, activity) -> how often it ran (the idempotency key starts with the run id)."""
    with acts.lock:
        return Counter((c.key.split(":")[0], c.name) for c in acts.calls)


def errors_of(outcomes: list[list[Outcome]]) -> list[BaseException]:
    return [o.error for row in outcomes for o in row if o.error is not None]


def go_flow() -> wf.Workflow:
    """before -> wait for 'go' (key = data.key; payload 'by' bound to 'winner') -> after."""
    return (
        wf.Workflow("go")
        .start_with("before")
        .wait_for_signal("go", correlate="key", bind={"by": "winner"})
        .then("after")
    )


def parked_go_runs(engine: wf.Engine, acts: Activities, count: int) -> list[wf.Run]:
    """``count`` runs of :func:`go_flow`, each parked on its wait (keys k0, k1, ...)."""
    acts.noop("before", "after")
    engine.register(go_flow())
    runs = [engine.start("go", {"key": f"k{i}"}) for i in range(count)]
    settle(engine)
    assert [r.status for r in runs] == [wf.RunStatus.WAITING] * count
    assert len(engine.waiting()) == count
    return runs


# --- 1. starts ----------------------------------------------------------------------------------


def test_many_threads_starting_at_once_each_get_their_own_run(engine, acts, workers) -> None:
    acts.noop("one", "two")
    engine.register(wf.Workflow("count").start_with("one").then("two"))
    callers, rounds = 8, 50

    outcomes = race(callers, rounds, lambda c, r: engine.start("count", {"caller": c, "round": r}))
    settle(engine)

    assert errors_of(outcomes) == []
    started = {(c, r): outcomes[r][c].value for r in range(rounds) for c in range(callers)}
    ids = [run.id for run in started.values()]
    assert len(set(ids)) == callers * rounds  # every call has a run of its own
    stored = {
        run_id: json.loads(doc)
        for run_id, doc in rows(engine, "SELECT run_id, input FROM wf_instances")
    }
    assert set(stored) == set(ids)  # exactly those runs, no more
    for (c, r), run in started.items():
        assert stored[run.id] == {"caller": c, "round": r}  # the run of this caller's document
    assert statuses(engine) == dict.fromkeys(ids, wf.RunStatus.COMPLETED)
    first = rows(
        engine,
        "SELECT e.run_id, e.kind FROM wf_events e WHERE e.seq = "
        "(SELECT min(f.seq) FROM wf_events f WHERE f.run_id = e.run_id)",
    )
    assert dict(first) == dict.fromkeys(ids, "run.started")
    once = rows(
        engine, "SELECT run_id, count(*) FROM wf_events WHERE kind = 'run.started' GROUP BY run_id"
    )
    assert dict(once) == dict.fromkeys(ids, 1)
    assert calls_by_run(acts) == Counter({(i, n): 1 for i in ids for n in ("one", "two")})
    sample = started[(callers - 1, rounds - 1)]
    assert sample.history()[0].kind == "run.started"
    assert sample.result(timeout=JOIN) == {"caller": callers - 1, "round": rounds - 1}


def test_a_refused_start_among_concurrent_good_ones_writes_nothing(engine, acts, workers) -> None:
    assert "AdmissionError" in wf.__all__
    acts.noop("a")
    engine.register(wf.Workflow("typed", data=Order).start_with("a"))
    good, bad, callers, rounds = 8, 3, 12, 10  # the last caller calls start_many

    def call(c: int, r: int) -> Any:
        if c < good:
            return engine.start("typed", {"order_id": f"good-{c}-{r}", "amount": r})
        if c < good + bad:
            return engine.start("typed", {"order_id": f"bad-{c}-{r}", "amount": -1})
        batch = [{"order_id": f"many-{r}-{i}", "amount": i} for i in range(3)]
        if r % 2:  # one document of the batch does not fit: the whole batch is refused
            batch[1] = {"order_id": f"bad-many-{r}", "amount": -1}
        return engine.start_many("typed", batch)

    outcomes = race(callers, rounds, call)
    settle(engine)

    admitted: dict[str, str] = {}  # run id -> the order id its caller sent
    for r in range(rounds):
        for c in range(good):
            assert outcomes[r][c].error is None, outcomes[r][c].error
            admitted[outcomes[r][c].value.id] = f"good-{c}-{r}"
        for c in range(good, good + bad):
            refused = outcomes[r][c]
            assert isinstance(refused.error, wf.AdmissionError), refused
            assert "nothing was written" in str(refused.error)
            assert refused.error.reasons
        many = outcomes[r][callers - 1]
        if r % 2:
            assert isinstance(many.error, wf.AdmissionError), many
        else:
            assert many.error is None, many.error
            assert len(many.value) == 3
            for i, run in enumerate(many.value):
                admitted[run.id] = f"many-{r}-{i}"
    assert len(admitted) == good * rounds + 3 * ((rounds + 1) // 2)

    stored = {
        run_id: json.loads(doc)["order_id"]
        for run_id, doc in rows(engine, "SELECT run_id, input FROM wf_instances")
    }
    assert stored == admitted  # not one row for a refused document
    event_runs = {r[0] for r in rows(engine, "SELECT DISTINCT run_id FROM wf_events")}
    assert event_runs == set(admitted)  # and not one event
    assert rows(engine, "SELECT count(*) FROM wf_instances WHERE input LIKE '%bad-%'") == [(0,)]
    assert statuses(engine) == dict.fromkeys(admitted, wf.RunStatus.COMPLETED)
    assert calls_by_run(acts) == Counter({(i, "a"): 1 for i in admitted})
    for run_id, order_id in list(admitted.items())[:: len(admitted) // 8]:
        assert engine.run(run_id).data.order_id == order_id


# --- 2. waits and approvals ---------------------------------------------------------------------


def test_of_simultaneous_senders_to_each_wait_exactly_one_wins(engine, acts, workers) -> None:
    runs = parked_go_runs(engine, acts, 12)
    callers = 8

    outcomes = race(
        callers,
        len(runs),
        lambda c, r: engine.signal("go", f"k{r}", {"by": c}, actor=f"sender-{c}"),
    )
    settle(engine)

    assert errors_of(outcomes) == []
    calls = calls_by_run(acts)
    for r, run in enumerate(runs):
        answers = [o.value for o in outcomes[r]]
        assert all(isinstance(a, bool) for a in answers), answers
        winners = [c for c, ok in enumerate(answers) if ok]
        assert len(winners) == 1, (r, answers)
        winner = winners[0]
        assert run.status == wf.RunStatus.COMPLETED
        assert run.data == {"key": f"k{r}", "winner": winner}  # the True went to whose payload won
        received = kinds(run, "signal.received")
        assert [(e.actor, e.output) for e in received] == [(f"sender-{winner}", {"by": winner})]
        assert calls[(run.id, "after")] == 1
        assert len(kinds(run, "step.completed")) == 2  # before, after: each once
    assert engine.waiting() == []


def test_of_simultaneous_decisions_on_one_approval_exactly_one_counts(
    engine, acts, workers
) -> None:
    acts.noop("prepare", "publish", "notify")
    engine.register(
        wf.Workflow("review")
        .start_with("prepare")
        .approval("review", on_reject=lambda b: b.then("notify").end())
        .then("publish")
    )
    runs = [engine.start("review", {"doc": i}) for i in range(8)]
    settle(engine)
    assert len(engine.waiting()) == len(runs)
    callers = 4  # even callers approve, odd ones reject

    outcomes = race(
        callers,
        len(runs),
        lambda c, r: engine.approve(
            runs[r].id, "review", approved=c % 2 == 0, actor=f"p{c}", comment=f"by p{c}"
        ),
    )
    settle(engine)

    calls = calls_by_run(acts)
    for r, run in enumerate(runs):
        winners = [c for c, o in enumerate(outcomes[r]) if o.error is None]
        assert len(winners) == 1, (r, outcomes[r])
        winner = winners[0]
        for c, o in enumerate(outcomes[r]):
            if c != winner:  # the approval is no longer open: decided by the winner
                assert isinstance(o.error, wf.SignalError), o.error
                assert "approval 'review'" in str(o.error)
        approved = winner % 2 == 0
        assert run.status == wf.RunStatus.COMPLETED
        decision = run.outputs["review"]
        assert (decision["approved"], decision["actor"], decision["comment"]) == (
            approved,
            f"p{winner}",
            f"by p{winner}",
        )
        decided = kinds(run, "approval.approved") + kinds(run, "approval.rejected")
        assert [(e.kind, e.actor) for e in decided] == [
            ("approval.approved" if approved else "approval.rejected", f"p{winner}")
        ]
        assert (calls[(run.id, "publish")], calls[(run.id, "notify")]) == (
            (1, 0) if approved else (0, 1)
        )
    assert engine.waiting() == []


def test_a_refused_payload_keeps_its_wait_while_other_runs_resume(engine, acts, workers) -> None:
    acts.noop("invoice", "ship")
    engine.register(
        wf.Workflow("pay")
        .start_with("invoice")
        .wait_for_signal(
            "paid", correlate="order_id", payload=Payment, bind={"amount": "amount", "ref": "ref"}
        )
        .then("ship")
    )
    good, bad, same, rounds = 8, 4, 2, 3
    # per round: good callers 0..7 each resume their own wait g<r>-<c>; bad callers 8..11 send
    # a payload Payment refuses to their own wait b<r>-<c>; the last two send a refused payload
    # to the same waits as good callers 0 and 1
    good_keys = [[f"g{r}-{c}" for c in range(good)] for r in range(rounds)]
    bad_keys = [[f"b{r}-{c}" for c in range(good, good + bad)] for r in range(rounds)]
    runs = {k: engine.start("pay", {"order_id": k}) for ks in good_keys + bad_keys for k in ks}
    settle(engine)
    assert len(engine.waiting()) == len(runs)

    def call(c: int, r: int) -> Any:
        if c < good:
            return engine.signal("paid", f"g{r}-{c}", {"amount": c + 1, "ref": f"tx-{r}-{c}"})
        if c < good + bad:
            return engine.signal("paid", f"b{r}-{c}", {"amount": -1})
        return engine.signal("paid", f"g{r}-{c - good - bad}", {"amount": 0, "ref": "no"})

    outcomes = race(good + bad + same, rounds, call)
    settle(engine)

    for r in range(rounds):
        for c in range(good):
            assert outcomes[r][c].error is None and outcomes[r][c].value is True, outcomes[r][c]
        for c in range(good, good + bad):
            refused = outcomes[r][c].error
            assert isinstance(refused, wf.SignalError), outcomes[r][c]
            assert "wait is left in place" in str(refused)
        for c in range(good + bad, good + bad + same):
            # refused while the wait was open, or found it taken by the good payload already
            o = outcomes[r][c]
            assert isinstance(o.error, wf.SignalError) or o.value is False, o
    open_keys = sorted(w.key for w in engine.waiting())
    assert open_keys == sorted(k for ks in bad_keys for k in ks)
    for r in range(rounds):
        for c, key in enumerate(good_keys[r]):
            run = runs[key]
            assert run.status == wf.RunStatus.COMPLETED, key
            assert run.data == {"order_id": key, "amount": c + 1, "ref": f"tx-{r}-{c}"}
            assert len(kinds(run, "signal.received")) == 1
        for key in bad_keys[r]:
            run = runs[key]
            assert run.status == wf.RunStatus.WAITING, key
            assert run.data == {"order_id": key}
            assert kinds(run, "signal.received") == []

    # the waits left in place take a payload that fits
    for ks in bad_keys:
        for key in ks:
            assert engine.signal("paid", key, {"amount": 5, "ref": f"fix-{key}"}) is True
    settle(engine)
    assert statuses(engine) == dict.fromkeys((r.id for r in runs.values()), wf.RunStatus.COMPLETED)
    assert engine.waiting() == []
    assert runs[bad_keys[0][0]].data == {"order_id": bad_keys[0][0], "amount": 5, "ref": "fix-b0-8"}
    calls = calls_by_run(acts)
    assert all(calls[(run.id, "ship")] == 1 for run in runs.values())


def test_post_signal_racing_the_wait_is_taken_exactly_once(engine, acts, workers) -> None:
    acts.noop("invoice", "ship")
    # 'direct' reaches its wait in the commit of engine.start; 'first' after a step
    for workflow_id, first in (("direct", None), ("first", "invoice")):
        engine.register(
            wf.Workflow(workflow_id)
            .start_with(first)
            .wait_for_signal("paid", correlate="order_id", bind={"n": "n"})
            .then("ship")
        )
    pairs, rounds = 4, 10  # caller c < 4 starts run o-c-r, caller c + 4 posts its signal

    def call(c: int, r: int) -> Any:
        if c < pairs:
            return engine.start("direct" if r % 2 else "first", {"order_id": f"o-{c}-{r}"})
        key = f"o-{c - pairs}-{r}"
        return engine.post_signal("paid", key, {"n": key}, actor=f"poster-{c}")

    if workers:
        outcomes = race(2 * pairs, rounds, call)
    else:
        with Driver(engine) as driver:  # runs reach their waits while the signals are posted
            outcomes = race(2 * pairs, rounds, call)
        assert driver.errors == []
    settle(engine)

    assert errors_of(outcomes) == []
    calls = calls_by_run(acts)
    for r in range(rounds):
        for c in range(pairs):
            key, run = f"o-{c}-{r}", outcomes[r][c].value
            assert isinstance(outcomes[r][c + pairs].value, bool)
            assert run.status == wf.RunStatus.COMPLETED, (key, run.explain())
            assert run.data == {"order_id": key, "n": key}
            received = kinds(run, "signal.received")
            assert [(e.actor, e.output) for e in received] == [(f"poster-{c + pairs}", {"n": key})]
            assert calls[(run.id, "ship")] == 1
            assert calls[(run.id, "invoice")] == (0 if r % 2 else 1)
    assert rows(engine, "SELECT count(*) FROM wf_signals") == [(0,)]  # none kept, none left
    assert engine.waiting() == []


# --- 3. cancel --------------------------------------------------------------------------------


def test_cancel_racing_a_signal_leaves_one_consistent_ending(engine, acts, workers) -> None:
    runs = parked_go_runs(engine, acts, 12)

    def call(c: int, r: int) -> Any:
        if c == 0:
            return engine.cancel(runs[r].id, actor="op", reason="raced")
        return engine.signal("go", f"k{r}", {"by": c}, actor="sender")

    outcomes = race(2, len(runs), call)
    settle(engine)

    calls = calls_by_run(acts)
    endings: Counter[str] = Counter()
    for r, run in enumerate(runs):
        cancel, signal = outcomes[r]
        assert signal.error is None, signal.error
        assert isinstance(signal.value, bool)
        history = run.history()
        names = [e.kind for e in history]
        terminal = [k for k in names if k in ("run.completed", "run.cancelled", "run.failed")]
        assert len(terminal) == 1, names  # never both cancelled and completed
        assert names[-1] == terminal[0], names  # nothing happens after the run ended
        status = run.status
        assert status.value == terminal[0].removeprefix("run."), (status, names)
        received = names.count("signal.received")
        assert received == (1 if signal.value else 0), names
        ran = calls[(run.id, "after")]
        outcomes_after = [
            e
            for e in history
            if e.node_id == "after" and e.kind in ("step.completed", "step.cancelled")
        ]
        assert ran <= 1 and len(outcomes_after) >= ran, (ran, names)  # every attempt recorded
        assert cancel.error is None, cancel.error
        if cancel.value.already_ended:
            # the cancel came after the run had ended: only a signal that won can have ended it
            assert cancel.value.status == wf.RunStatus.COMPLETED
            assert (status, signal.value, ran) == (wf.RunStatus.COMPLETED, True, 1)
            endings["signal, then completed, then cancel left it"] += 1
        else:
            assert status == wf.RunStatus.CANCELLED, names
            assert (history[-1].actor, history[-1].detail) == ("op", {"reason": "raced"})
            if signal.value:
                assert names.index("signal.received") < names.index("run.cancelled")
                endings["signal, then cancelled"] += 1
            else:
                assert ran == 0 and "after" not in {e.node_id for e in history}
                endings["cancelled, then signal found no wait"] += 1
    assert sum(endings.values()) == len(runs), endings
    assert engine.waiting() == []


# --- 4. reads -----------------------------------------------------------------------------------

STEPS = 4


def test_reads_during_concurrent_starts_see_states_the_run_really_had(engine, acts) -> None:
    seen_live = threading.Event()  # the reader has read runs in the middle of their steps

    def step(n: int) -> Callable[[Any], None]:
        def body(ctx: Any) -> None:
            if n == STEPS - 1:
                seen_live.wait(JOIN)  # keep runs live until the reader has caught some
            ctx.data["n"] = n

        return body

    flow = wf.Workflow("steps").start_with("s1", policy={"max_attempts": 1})
    for n in range(1, STEPS + 1):
        acts.add(f"s{n}", step(n))
        if n > 1:
            flow = flow.then(f"s{n}", max_attempts=1)
    engine.register(flow)
    engine.start_workers(threads=4)
    starters, rounds = 8, 8
    live: list[tuple[wf.Run, int]] = []  # (run, the seed its caller sent)
    done = threading.Event()
    problems: list[str] = []
    reads = Counter[str]()

    def read_loop() -> None:
        rank = {"pending": 0, "running": 1, "completed": 2}
        last: dict[str, tuple[int, int, int]] = {}  # run -> (status rank, n, seq) last read
        try:
            while not done.is_set() or reads["after-done"] < 1:
                after = done.is_set()
                for run, seed in list(live):
                    status = run.status
                    data = run.data
                    view = run.view()
                    reads["reads"] += 1
                    reads["after-done"] += after
                    if not all(
                        isinstance(s, wf.RunStatus) and s.value in rank
                        for s in (status, view.status)
                    ):
                        problems.append(f"{run.id}: status {status!r}, view {view.status!r}")
                        return
                    for doc in (data, view.data):
                        if doc.get("seed") != seed or doc.get("n") not in range(STEPS + 1):
                            problems.append(f"{run.id}: data {doc} (seed {seed})")
                            return
                    # read in this order (status, data, view), each no older than the one
                    # before it, and none older than the previous reads of the run
                    n, was = data["n"], last.get(run.id, (0, 0, 0))
                    now = (rank[view.status.value], view.data["n"], view.seq)
                    if not (
                        was[0] <= rank[status.value] <= now[0]
                        and was[1] <= n <= now[1]
                        and was[2] <= now[2]
                    ):
                        problems.append(f"{run.id}: went back: {was}, {status}, n={n}, {view}")
                    if status == wf.RunStatus.COMPLETED and n != STEPS:
                        problems.append(f"{run.id}: read n={n} after it completed")
                    if view.status == wf.RunStatus.COMPLETED and view.data["n"] != STEPS:
                        problems.append(f"{run.id}: a view completed with n={view.data['n']}")
                    last[run.id] = now
                    if 0 < n < STEPS and status == wf.RunStatus.RUNNING:
                        reads["live"] += 1
                        if reads["live"] >= 20:
                            seen_live.set()
        except BaseException as exc:
            problems.append(f"reader raised {exc!r}")
        finally:
            seen_live.set()

    def start(c: int, r: int) -> wf.Run:
        seed = c * rounds + r
        run = engine.start("steps", {"seed": seed, "n": 0})
        live.append((run, seed))
        return run

    reader = threading.Thread(target=read_loop, name="reader", daemon=True)
    reader.start()
    outcomes = race(starters, rounds, start)
    for run, _ in live:
        run.result(timeout=JOIN)
    done.set()
    reader.join(JOIN)

    assert not reader.is_alive()
    assert errors_of(outcomes) == []
    assert problems == []
    assert reads["live"] >= 20, reads  # reads really happened while runs were advancing
    assert len(live) == starters * rounds
    for run, seed in live:
        assert run.status == wf.RunStatus.COMPLETED
        assert run.data == {"seed": seed, "n": STEPS}
