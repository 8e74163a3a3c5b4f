"""The ``wfkit`` command line."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

import typer
from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs shipped

from wfkit.definition.problems import Severity
from wfkit.definition.rendering import RenderingUnavailable
from wfkit.definition.workflow import Workflow
from wfkit.engine import Engine, ManualClock, Run, RunStatus
from wfkit.errors import WfkitError

app = typer.Typer(
    help="wfkit: durable workflows defined as networkx graphs.",
    no_args_is_help=True,
    add_completion=False,
)

Target = Annotated[
    str,
    typer.Argument(
        help="The workflow: 'module:attr', 'path/to/file.py:attr' or a workflow .json file."
    ),
]


F = TypeVar("F", bound=Callable[..., Any])


def _friendly(command: F) -> F:
    """Turn a wfkit error into one readable line on stderr and exit code 1, not a traceback."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except WfkitError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None

    return cast(F, run)


def load_workflow(target: str) -> Workflow:
    """Load a workflow from ``module:attr``, ``file.py:attr`` or a JSON file.

    ``attr`` may also name a function taking no arguments that returns the workflow.
    """
    if "" not in sys.path:  # like `python -m`: modules in the current folder can be named
        sys.path.insert(0, "")
    if target.endswith(".json"):
        return _load_json(Path(target))
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise typer.BadParameter(
            f"{target!r} does not name a workflow; write it as module:attr (e.g. "
            "my_flows:onboarding), path/to/file.py:attr, or give a .json file"
        )
    module = _import(module_name)
    try:
        value: Any = module
        for part in attr.split("."):
            value = getattr(value, part)
    except AttributeError:
        raise typer.BadParameter(f"{module_name!r} has no attribute {attr!r}") from None
    if inspect.isfunction(value) or inspect.ismethod(value):
        value = _call_factory(target, value)
    if not isinstance(value, Workflow):
        what = f"the class {value.__name__}" if isinstance(value, type) else None
        raise typer.BadParameter(
            f"{target!r} is {what or 'a ' + type(value).__name__}, not a wfkit.Workflow; "
            "point at a Workflow (or a function taking no arguments that returns one)"
        )
    return value


def _load_json(path: Path) -> Workflow:
    if not path.is_file():
        raise typer.BadParameter(f"no such file: {path}")
    try:
        return Workflow.from_json(path.read_text(encoding="utf-8"))
    except WfkitError as exc:  # e.g. its data model cannot be imported; the message says why
        raise typer.BadParameter(f"{path}: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        # ValueError covers malformed JSON and a malformed graph
        raise typer.BadParameter(
            f"{path} is not a readable wfkit workflow ({exc}); write it with flow.to_json()"
        ) from None


def _call_factory(target: str, factory: Any) -> Any:
    try:
        inspect.signature(factory).bind()
    except TypeError:
        raise typer.BadParameter(
            f"{target!r} is a function that needs arguments; point at a Workflow or a "
            "function taking none"
        ) from None
    except ValueError:  # no signature available: just try it
        pass
    return factory()


def _import(name: str) -> Any:
    if name.endswith(".py"):
        path = Path(name)
        if not path.is_file():
            raise typer.BadParameter(f"no such file: {name}")
        module_name = path.stem
        loaded = sys.modules.get(module_name)
        if loaded is not None and getattr(loaded, "__file__", None) != str(path.resolve()):
            module_name = f"_wfkit_target_{path.stem}"  # never shadow an imported module
        spec = importlib.util.spec_from_file_location(module_name, path.resolve())
        if spec is None or spec.loader is None:
            raise typer.BadParameter(f"cannot import {name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        folder = str(path.resolve().parent)
        if folder not in sys.path:  # like `python file.py`: its neighbours can be imported
            sys.path.insert(0, folder)
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise typer.BadParameter(f"cannot import module {name!r}: {exc}") from None


@app.command()
@_friendly
def validate(target: Target) -> None:
    """Validate a workflow and list every problem; exit 1 when there are errors."""
    flow = load_workflow(target)
    problems = flow.validate()
    errors = [p for p in problems if p.severity == Severity.ERROR]
    for p in problems:
        typer.echo(str(p), err=p.severity == Severity.ERROR)
    warnings = len(problems) - len(errors)
    summary = f"{flow.id} v{flow.version}: {len(errors)} errors, {warnings} warnings"
    typer.echo(summary if problems else f"{flow.id} v{flow.version}: valid, no problems")
    raise typer.Exit(1 if errors else 0)


@app.command()
@_friendly
def render(
    target: Target,
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write: .svg/.png/.pdf")],
    problems: Annotated[bool, typer.Option(help="Draw validation problems on the picture")] = True,
) -> None:
    """Draw a workflow to an SVG, PNG or PDF file."""
    flow = load_workflow(target)
    try:
        path = flow.render(output, problems=problems)
    except RenderingUnavailable as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {path}")


@dataclass(frozen=True)
class DemoRun:
    """One run the demo starts: which workflow, its data, and the status it must end in."""

    workflow: str
    data: dict[str, Any]
    story: str
    expected: str = "completed"


DEMO_RUNS = (
    DemoRun(
        "onboarding",
        {"customer_id": "demo-c-1", "email": "ana@example.com"},
        "no approval needed: open the account, send the welcome mail",
    ),
    DemoRun(
        "fulfilment",
        {
            "order_id": "demo-o-1",
            "lines": [{"sku": "A-100"}, {"sku": "BROKEN-7"}, {"sku": "C-300", "quantity": 2}],
        },
        "line BROKEN-7 fails every attempt; the partial shipment waits for approval 'review'",
    ),
    DemoRun(
        "checkout",
        {"order_id": "demo-o-2", "amount": 42.5},
        "saga happy path: reserve, charge, book the courier, send the receipt",
    ),
    DemoRun(
        "trip",
        {"traveller": "ana", "budget": 800.0},
        "nested saga happy path: flight, then hotel and car, then capture the payment",
    ),
)
"""The runs ``wfkit demo`` starts, in order."""

DEMO_ACTOR = "demo"
_DEMO_TICK = "1s"  # how far the demo moves the manual clock when a run waits on a timer
_DEMO_MAX_TICKS = 600  # ten simulated minutes without progress: give up on the run


@app.command()
@_friendly
def demo(
    out: Annotated[Path, typer.Option(help="Folder for the pictures")] = Path("wfkit-demo"),
    db: Annotated[
        Path,
        typer.Option(help="DuckDB file the runs are written to; new runs are added to it"),
    ] = Path("demo.duckdb"),
) -> None:
    """Define, validate and draw the example workflows, then run them durably on a DuckDB file."""
    from wfkit.examples import all_workflows

    out.mkdir(parents=True, exist_ok=True)
    flows = all_workflows()
    failed = False
    for flow in flows.values():
        problems = flow.validate()
        status = "valid" if not problems else f"{len(problems)} problems"
        failed |= any(p.severity == Severity.ERROR for p in problems)
        try:
            svg = flow.render(out / f"{flow.id}.svg")
            png = flow.render(out / f"{flow.id}.png")
        except RenderingUnavailable as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from None
        nodes = flow.graph.number_of_nodes()
        typer.echo(f"{flow.id:<12} v{flow.version}  {nodes:>2} nodes  {status:<12} {svg}  {png}")
    typer.echo(f"pictures are in {out.resolve()}")
    if failed:
        typer.echo("error: an example workflow is invalid; not running the examples", err=True)
        raise typer.Exit(1)

    began = time.perf_counter()
    clock = ManualClock(datetime.now(UTC))
    existed = db.exists()
    db.parent.mkdir(parents=True, exist_ok=True)
    with Engine(db, clock=clock) as engine:
        earlier = _count_runs(engine)
        ((latest,),) = engine.sql("SELECT max(occurred_at) FROM wf_events").fetchall()
        if latest is not None and latest >= clock.now():
            # an earlier demo moved its clock ahead of the real one: start after it, keep order
            clock.advance(latest - clock.now() + timedelta(milliseconds=1))
        zero = clock.now()
        if existed:
            typer.echo(
                f"{db} already holds {earlier} runs from before; this demo adds "
                f"{len(DEMO_RUNS)} more (the table shows this demo's runs; "
                f"wfkit runs --db {db} lists them all)"
            )
        else:
            typer.echo(f"runs are written to {db.resolve()} (a new file)")
        typer.echo(
            "clock: a wf.ManualClock that the demo moves past retry delays by hand, so the demo "
            "takes a second, not minutes"
        )
        for flow in flows.values():
            engine.register(flow)
        started: list[tuple[DemoRun, Run]] = []
        with tqdm(total=len(DEMO_RUNS), desc="running the examples", unit="run") as bar:
            for plan in DEMO_RUNS:
                bar.set_postfix_str(plan.workflow)
                flow = flows[plan.workflow]
                run = engine.start(flow.id, plan.data, version=flow.version, actor=DEMO_ACTOR)
                tqdm.write(f"{plan.workflow} {run.id}: {plan.story}", file=sys.stdout)
                for note in _drive(engine, clock, run):
                    tqdm.write(f"{plan.workflow} {run.id}: {note}", file=sys.stdout)
                started.append((plan, run))
                bar.update(1)
        rows = [
            (run.id, plan.workflow, flows[plan.workflow].version, run.status.value, run.explain())
            for plan, run in started
        ]
        moved = clock.now() - zero
    typer.echo("")
    for line in _table(("RUN", "WORKFLOW", "VERSION", "STATUS", "EXPLAIN"), rows):
        typer.echo(line)
    typer.echo("")
    wrong = [
        (plan, row) for (plan, _), row in zip(started, rows, strict=True) if row[3] != plan.expected
    ]
    for plan, row in wrong:
        typer.echo(
            f"error: run {row[0]} of {plan.workflow} is {row[3]}, expected {plan.expected}: "
            f"{row[4]}",
            err=True,
        )
    if wrong:
        raise typer.Exit(1)
    typer.echo(
        f"all {len(rows)} runs reached their expected status in "
        f"{time.perf_counter() - began:.1f} s (the manual clock moved "
        f"{moved.total_seconds():.0f} s); list them with: wfkit runs --db {db}"
    )


def _drive(engine: Engine, clock: ManualClock, run: Run) -> Iterator[str]:
    """Drive ``run`` to its end: run what is ready, approve open approvals, move the clock.

    Yields a sentence for everything a reader of the demo should know about.
    """
    ticks = 0
    while ticks < _DEMO_MAX_TICKS:
        engine.run_until_idle()
        status = run.status
        if status.terminal or status == RunStatus.SUSPENDED:
            return
        approvals = [w for w in engine.waiting() if w.run_id == run.id and w.kind == "approval"]
        if not approvals:
            clock.advance(_DEMO_TICK)  # retries and timers fire once their due time has passed
            ticks += 1
            continue
        failures = [e for e in run.history() if e.kind == "step.failed"]
        if failures:
            last = failures[-1]
            why = (last.error or "").strip().splitlines()[-1:] or ["no error text"]
            why[0] = re.sub(r"^[\w.]*\.(?=\w+: )", "", why[0])  # drop the exception's module
            yield (
                f"{last.node_id!r} failed {len(failures)} times, retried on the manual clock "
                f"({why[0]}); the join is partial, so the run is {run.explain()}"
            )
        for wait in approvals:
            engine.approve(
                run.id,
                wait.node_id,
                approved=True,
                actor=DEMO_ACTOR,
                comment="approved by wfkit demo",
            )
            yield f"the demo approves {wait.node_id!r} as actor {DEMO_ACTOR!r}, so the run goes on"
    yield f"gave up after {ticks} clock moves: {run.explain()}"


def _count_runs(engine: Engine) -> int:
    ((count,),) = engine.sql("SELECT count(*) FROM wf_instances").fetchall()
    return int(count)


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Plain-text lines of a table with left-aligned columns two spaces apart."""
    cells = [[str(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


@app.command()
def runs(
    db: Annotated[Path, typer.Option(help="The DuckDB file to read")] = Path("demo.duckdb"),
    status: Annotated[
        RunStatus | None, typer.Option(case_sensitive=False, help="Only runs with this status")
    ] = None,
    workflow: Annotated[str | None, typer.Option(help="Only runs of this workflow id")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many, newest first")] = 50,
) -> None:
    """List the runs stored in a DuckDB file, newest first."""
    if not db.exists():
        typer.echo(
            f"error: no such file: {db}; run 'wfkit demo --db {db}' first, or point --db at "
            "an existing wfkit DuckDB file",
            err=True,
        )
        raise typer.Exit(1)
    if not db.is_file():
        typer.echo(f"error: {db} is not a file; point --db at a wfkit DuckDB file", err=True)
        raise typer.Exit(1)
    quiet = logging.getLogger("wfkit.engine")
    level = quiet.level
    # Listing never needs a run's data model: don't warn when one cannot be imported here.
    quiet.setLevel(logging.ERROR)
    try:
        with Engine(db) as engine:
            found = engine.runs(status=status, workflow=workflow, limit=limit)
            rows = [
                (
                    r.run_id,
                    r.workflow_id,
                    r.version,
                    r.status.value,
                    f"{r.created_at:%Y-%m-%d %H:%M:%S}",
                    engine.run(r.run_id).explain(),
                )
                for r in found
            ]
            total = _count_runs(engine)
    except WfkitError as exc:
        typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(1) from None
    finally:
        quiet.setLevel(level)
    if not rows:
        which = " and ".join(
            part
            for part in (
                f"status {status.value}" if status else "",
                f"workflow {workflow!r}" if workflow else "",
            )
            if part
        )
        typer.echo(f"no runs{' with ' + which if which else ''} in {db} ({total} runs in all)")
        return
    headers = ("RUN", "WORKFLOW", "VERSION", "STATUS", "STARTED (UTC)", "EXPLAIN")
    for line in _table(headers, rows):
        typer.echo(line)
    more = " (the newest; raise --limit to see more)" if len(rows) == limit else ""
    typer.echo(f"{len(rows)} of {total} runs in {db}{more}")


def main() -> None:
    """Entry point that turns wfkit errors into one readable line and exit code 1."""
    try:
        app()
    except WfkitError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)
