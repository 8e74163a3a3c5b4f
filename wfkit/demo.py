"""What ``wfkit demo`` does: draw the example workflows, then run them durably on a DuckDB file.

The demo drives every run to its end on a :class:`~wfkit.engine.ManualClock`, playing the people
and systems around it: it sends a signal a run waits for, approves a partial shipment, and decides
a failed compensation (skip). It narrates each run from its history and ``run.explain()``, prints a
table of the runs, and returns 0 only when every run ended as planned.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs shipped

from wfkit.definition.problems import Severity
from wfkit.definition.rendering import RenderingUnavailable
from wfkit.engine import Engine, Event, ManualClock, Run, RunStatus
from wfkit.errors import UsageError

__all__ = [
    "DEMO_ACTOR",
    "DEMO_RUNS",
    "DemoRun",
    "Echo",
    "count_runs",
    "run_demo",
    "table",
]


class Echo(Protocol):
    """Writes one line to stdout, or to stderr with ``err=True`` (``typer.echo`` fits)."""

    def __call__(self, message: str, *, err: bool = False) -> object: ...


def _print(message: str, *, err: bool = False) -> None:
    print(message, file=sys.stderr if err else sys.stdout)


@dataclass(frozen=True)
class DemoRun:
    """One run the demo starts, how the demo answers it, and how it must end.

    ``signal`` is ``(name, key, payload)``: sent (as :data:`DEMO_ACTOR`) once the run waits for
    that signal. ``recover`` is the demo's decision (``"retry"``, ``"skip"`` or ``"abandon"``)
    when a compensation fails for good. The run must end in ``expected`` and its history must
    hold every event kind in ``must_see``.
    """

    workflow: str
    data: dict[str, Any]
    story: str
    expected: str = "completed"
    signal: tuple[str, str, dict[str, Any]] | None = None
    recover: str | None = None
    must_see: tuple[str, ...] = ()


DEMO_RUNS = (
    DemoRun(
        "onboarding",
        {"customer_id": "demo-c-1", "email": "ana@example.com"},
        "no approval needed: open the account, send the welcome mail",
    ),
    DemoRun(
        "onboarding",
        {"customer_id": "demo-c-2", "email": "bo@example.com", "needs_approval": True},
        "approval needed: the run waits for signal 'approval' keyed by its customer id",
        signal=("approval", "demo-c-2", {"approved": True}),
        must_see=("signal.waiting", "signal.received"),
    ),
    DemoRun(
        "fulfilment",
        {
            "order_id": "demo-o-1",
            "lines": [{"sku": "A-100"}, {"sku": "BROKEN-7"}, {"sku": "C-300", "quantity": 2}],
        },
        "line BROKEN-7 fails every attempt; the partial shipment waits for approval 'review'",
        must_see=("join.partial", "approval.approved"),
    ),
    DemoRun(
        "checkout",
        {"order_id": "demo-o-2", "amount": 42.5},
        "saga happy path: reserve, charge, book the courier, send the receipt",
    ),
    DemoRun(
        "checkout",
        {"order_id": "demo-o-3", "amount": 19.9, "card_ok": False},
        "the card is declined: the saga undoes what completed (the reservation; no charge was "
        "made, so there is nothing to refund) and the run fails",
        expected="failed",
        must_see=("saga.unwinding", "compensation.completed", "saga.compensated"),
    ),
    DemoRun(
        "checkout",
        {"order_id": "demo-o-4", "amount": 7.0, "card_ok": False, "inventory_down": True},
        "the card is declined and the inventory service is down: releasing the reservation "
        "fails, so the run is suspended for an operator",
        expected="failed",
        recover="skip",
        must_see=("compensation.failed", "run.suspended", "compensation.skipped"),
    ),
    DemoRun(
        "trip",
        {"traveller": "ana", "budget": 800.0},
        "nested saga happy path: flight, then hotel and car, then capture the payment",
    ),
    DemoRun(
        "trip",
        {"traveller": "bo", "budget": 50.0},
        "nested saga over budget: capturing the payment fails, so car, hotel and flight are "
        "cancelled, newest first",
        expected="failed",
        must_see=("saga.unwinding", "compensation.completed", "saga.compensated"),
    ),
)
"""The runs ``wfkit demo`` starts, in order."""

DEMO_ACTOR = "demo"
_DEMO_TICK = "1s"  # how far the demo moves the manual clock when a run waits on a timer
_DEMO_MAX_TICKS = 600  # ten simulated minutes without progress: give up on the run


def run_demo(
    db: Path, out: Path, echo: Echo = _print, runs: Sequence[DemoRun] | None = None
) -> int:
    """Draw the examples into ``out``, run ``runs`` (:data:`DEMO_RUNS`) on ``db``; exit code.

    Returns 0 when every run reached its expected status, 1 when one did not (or an example is
    invalid), 2 when the pictures cannot be drawn. Engine errors (a locked file, say) propagate.
    """
    from wfkit.examples import all_workflows

    plans = DEMO_RUNS if runs is None else tuple(runs)
    out.mkdir(parents=True, exist_ok=True)
    flows = all_workflows()
    invalid = False
    for flow in flows.values():
        problems = flow.validate()
        status = "valid" if not problems else f"{len(problems)} problems"
        invalid |= any(p.severity == Severity.ERROR for p in problems)
        try:
            svg = flow.render(out / f"{flow.id}.svg")
            png = flow.render(out / f"{flow.id}.png")
        except RenderingUnavailable as exc:
            echo(str(exc), err=True)
            return 2
        nodes = flow.graph.number_of_nodes()
        echo(f"{flow.id:<12} v{flow.version}  {nodes:>2} nodes  {status:<12} {svg}  {png}")
    echo(f"pictures are in {out.resolve()}")
    if invalid:
        echo("error: an example workflow is invalid; not running the examples", err=True)
        return 1

    began = time.perf_counter()
    clock = ManualClock(datetime.now(UTC))
    existed = db.exists()
    db.parent.mkdir(parents=True, exist_ok=True)
    with Engine(db, clock=clock) as engine:
        earlier = count_runs(engine)
        ((latest,),) = engine.sql("SELECT max(occurred_at) FROM wf_events").fetchall()
        if latest is not None and latest >= clock.now():
            # an earlier demo moved its clock ahead of the real one: start after it, keep order
            clock.advance(latest - clock.now() + timedelta(milliseconds=1))
        zero = clock.now()
        if existed:
            echo(
                f"{db} already holds {earlier} runs from before; this demo adds "
                f"{len(plans)} more (the table shows this demo's runs; "
                f"wfkit runs --db {db} lists them all)"
            )
        else:
            echo(f"runs are written to {db.resolve()} (a new file)")
        echo(
            "clock: a wf.ManualClock that the demo moves past retry delays by hand, so the demo "
            "takes a second, not minutes"
        )
        for flow in flows.values():
            engine.register(flow)
        started: list[tuple[DemoRun, Run]] = []

        def say(line: str) -> None:
            with tqdm.external_write_mode(file=sys.stdout):  # keep the progress bar intact
                echo(line)

        with tqdm(total=len(plans), desc="running the examples", unit="run") as bar:
            for plan in plans:
                bar.set_postfix_str(plan.workflow)
                flow = flows[plan.workflow]
                run = engine.start(flow.id, plan.data, version=flow.version, actor=DEMO_ACTOR)
                say(f"{plan.workflow} {run.id}: {plan.story}")
                for note in _drive(engine, clock, run, plan):
                    say(f"{plan.workflow} {run.id}:   {note}")
                started.append((plan, run))
                bar.update(1)
        rows = [
            (run.id, plan.workflow, flows[plan.workflow].version, run.status.value, run.explain())
            for plan, run in started
        ]
        missing = [
            sorted(set(plan.must_see) - {e.kind for e in run.history()}) for plan, run in started
        ]
        moved = clock.now() - zero
    echo("")
    for line in table(("RUN", "WORKFLOW", "VERSION", "STATUS", "EXPLAIN"), rows):
        echo(line)
    echo("")
    wrong = 0
    for (plan, _), row, lacks in zip(started, rows, missing, strict=True):
        if row[3] != plan.expected:
            wrong += 1
            echo(
                f"error: run {row[0]} of {plan.workflow} is {row[3]}, expected {plan.expected}: "
                f"{row[4]}",
                err=True,
            )
        elif lacks:
            wrong += 1
            echo(
                f"error: run {row[0]} of {plan.workflow} is {row[3]} as expected, but its history "
                f"lacks {', '.join(lacks)}: {plan.story}",
                err=True,
            )
    if wrong:
        return 1
    echo(
        f"all {len(rows)} runs reached their expected status in "
        f"{time.perf_counter() - began:.1f} s (the manual clock moved "
        f"{moved.total_seconds():.0f} s); list them with: wfkit runs --db {db}"
    )
    return 0


def _drive(engine: Engine, clock: ManualClock, run: Run, plan: DemoRun) -> Iterator[str]:
    """Drive ``run`` to its end: run what is ready, answer waits and failed compensations the
    way ``plan`` says, move the clock past retry delays.

    Yields a sentence for everything a reader of the demo should know about, as it happens.
    """
    seen = 0
    ticks = 0
    while ticks < _DEMO_MAX_TICKS:
        engine.run_until_idle()
        history = run.history()
        yield from _narrate(history[seen:], history)
        seen = len(history)
        status = run.status
        if status.terminal:
            yield f"the run is {run.explain()}"
            return
        if status == RunStatus.SUSPENDED:
            yield f"the run is {run.explain()}"
            if plan.recover is None:
                return  # the demo has no decision to make: the table reports it suspended
            try:
                engine.recover_compensation(run.id, action=plan.recover, actor=DEMO_ACTOR)
            except UsageError as exc:  # suspended on a step, not on a compensation
                yield f"the demo cannot decide {plan.recover!r}: {exc}"
                return
            yield (
                f"the demo decides {plan.recover!r} as actor {DEMO_ACTOR!r} "
                "(engine.recover_compensation)"
            )
            ticks += 1
            continue
        waits = [w for w in engine.waiting() if w.run_id == run.id]
        approvals = [w for w in waits if w.kind == "approval"]
        if plan.signal is not None and any(
            w.kind == "signal" and w.name == plan.signal[0] for w in waits
        ):
            name, key, payload = plan.signal
            yield f"the run is {run.explain()}"
            delivered = engine.signal(name, key, payload, actor=DEMO_ACTOR)
            outcome = "it resumed the wait" if delivered else "nothing waited for it"
            yield (
                f"the demo sends signal {name!r} (key {key}) {payload} as actor "
                f"{DEMO_ACTOR!r}: {outcome}"
            )
            ticks += 1
            continue
        if approvals:
            failures = [e for e in history if e.kind == "step.failed"]
            if failures:
                last = failures[-1]
                yield (
                    f"{last.node_id!r} failed {len(failures)} times, retried on the manual clock "
                    f"({_why(last)}); the join is partial, so the run is {run.explain()}"
                )
            else:
                yield f"the run is {run.explain()}"
            for wait in approvals:
                engine.approve(
                    run.id,
                    wait.node_id,
                    approved=True,
                    actor=DEMO_ACTOR,
                    comment="approved by wfkit demo",
                )
                yield (
                    f"the demo approves {wait.node_id!r} as actor {DEMO_ACTOR!r}, so the run "
                    "goes on"
                )
            ticks += 1
            continue
        clock.advance(_DEMO_TICK)  # retries and timers fire once their due time has passed
        ticks += 1
    yield f"gave up after {ticks} clock moves: {run.explain()}"


def _narrate(new: Sequence[Event], history: Sequence[Event]) -> Iterator[str]:
    """Sentences on the saga events among ``new`` (``history`` is the run's whole history)."""
    for event in new:
        activity = event.detail.get("activity")
        if event.kind == "saga.unwinding":
            tries = sum(
                1 for e in history if e.kind == "step.failed" and e.node_id == event.node_id
            )
            steps = event.detail.get("steps") or []
            undo = ", ".join(repr(s) for s in steps) or "nothing"
            yield (
                f"{event.node_id!r} failed {tries} times ({_why(event)}); the saga compensates "
                f"its completed steps newest first: {undo}"
            )
        elif event.kind == "compensation.completed":
            yield f"compensation {activity!r} undid {event.node_id!r}"
        elif event.kind == "compensation.failed":
            yield (
                f"compensation {activity!r} of {event.node_id!r} failed "
                f"(attempt {event.attempt}): {_why(event)}"
            )
        elif event.kind == "compensation.skipped":
            yield (
                f"compensation of {event.node_id!r} skipped by {event.actor}: recorded as a "
                "decision, the engine did not undo the step"
            )
        elif event.kind == "saga.compensated":
            count = event.detail.get("steps", 0)
            yield f"the saga is unwound ({count} step{'s' if count != 1 else ''})"


def _why(event: Event) -> str:
    """The last line of an event's error, without the exception's module."""
    lines = (event.error or "").strip().splitlines()[-1:] or ["no error text"]
    return re.sub(r"^[\w.]*\.(?=\w+: )", "", lines[0])


def count_runs(engine: Engine) -> int:
    """How many runs the engine's file holds."""
    ((count,),) = engine.sql("SELECT count(*) FROM wf_instances").fetchall()
    return int(count)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Plain-text lines of a table with left-aligned columns two spaces apart."""
    cells = [[str(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
