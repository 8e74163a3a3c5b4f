"""The ``wfkit`` command line."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import logging
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

import typer

from wfkit.definition.problems import Severity
from wfkit.definition.rendering import RenderingUnavailable
from wfkit.definition.workflow import Workflow
from wfkit.demo import count_runs as _count_runs
from wfkit.demo import run_demo
from wfkit.demo import table as _table
from wfkit.engine import Engine, RunStatus
from wfkit.errors import WfkitError

app = typer.Typer(
    help="wfkit: durable workflows defined as networkx graphs.",
    no_args_is_help=True,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        from wfkit import __version__

        typer.echo(f"wfkit {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print wfkit's version and exit",
        ),
    ] = False,
) -> None:
    """wfkit: durable workflows defined as networkx graphs."""


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


@app.command()
@_friendly
def demo(
    out: Annotated[Path, typer.Option(help="Folder for the pictures")] = Path("wfkit-demo"),
    db: Annotated[
        Path,
        typer.Option(help="DuckDB file the runs are written to; new runs are added to it"),
    ] = Path("demo.duckdb"),
) -> None:
    """Define, validate and draw the example workflows, then run them durably on a DuckDB file:
    a signal, an approval, a saga unwind and a failed compensation, driven on a manual clock."""
    raise typer.Exit(run_demo(db, out, typer.echo))


runs_app = typer.Typer(
    help="List the runs stored in a DuckDB file, newest first; 'purge' and 'archive' take ended "
    "runs away.",
)
app.add_typer(runs_app, name="runs")


@runs_app.callback(invoke_without_command=True)
def runs(
    ctx: typer.Context,
    db: Annotated[Path, typer.Option(help="The DuckDB file to read")] = Path("demo.duckdb"),
    status: Annotated[
        RunStatus | None, typer.Option(case_sensitive=False, help="Only runs with this status")
    ] = None,
    workflow: Annotated[str | None, typer.Option(help="Only runs of this workflow id")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many, newest first")] = 50,
) -> None:
    """List the runs stored in a DuckDB file, newest first.

    'wfkit runs purge' and 'wfkit runs archive' delete ended runs older than a duration.
    """
    if ctx.invoked_subcommand is not None:
        return
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


# --- HTTP API: serve, and operator commands that use the file or its server -----------------
# `wfkit serve` owns a DuckDB file (or shares a PostgreSQL database) and exposes wfkit.api over
# HTTP. `signal`, `approve`, `recover` and `cancel` open the database directly when they can,
# and send their request to the server (URL and token from `<db>.server.json`, once checked:
# wfkit/api/discovery.py) when a running server holds the DuckDB file.

Db = Annotated[
    str,
    typer.Option(
        help="The DuckDB file (or the server that holds it), or a postgresql:// URL of a "
        "shared database"
    ),
]
LogFormat = Annotated[
    str, typer.Option(help="Log lines as 'text' or 'json' (one JSON object per line, on stderr)")
]
Actor = Annotated[
    str | None, typer.Option(help="Who does it, recorded in the history [default: your login]")
]


def _oneline(command: F) -> F:
    """Like ``_friendly``, keeping the error on one line."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except WfkitError as exc:
            typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
            raise typer.Exit(1) from None

    return cast(F, run)


@app.command()
@_oneline
def serve(
    db: Db = "runs.duckdb",
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port; 0 picks a free one")] = 8000,
    module: Annotated[
        list[str] | None,
        typer.Option(help="Module or .py file defining activities and workflows (repeatable)"),
    ] = None,
    threads: Annotated[int, typer.Option(min=1, help="Engine worker threads")] = 4,
    queue: Annotated[
        list[str] | None,
        typer.Option(
            help="Run only the steps of this activity queue (repeatable) [default: all]; steps "
            "of other queues wait (on PostgreSQL, for the workers that serve them)"
        ),
    ] = None,
    max_body: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Largest request body accepted, in bytes [default: the 256 KiB payload limit "
            "+ 64 KiB for the JSON around it]",
            show_default=False,
        ),
    ] = None,
    access_log: Annotated[bool, typer.Option(help="Log every request")] = True,
    docs: Annotated[
        bool,
        typer.Option(
            help="Serve Swagger UI at /api/v1/docs (it loads from a CDN: the browser needs "
            "internet); the OpenAPI document is always at /api/v1/openapi.json"
        ),
    ] = False,
    metrics_public: Annotated[
        bool, typer.Option(help="Serve GET /metrics (Prometheus) without the token")
    ] = False,
    log_format: LogFormat = "text",
) -> None:
    """Serve the HTTP API (/api/v1) over a DuckDB file or a PostgreSQL database until Ctrl-C.

    The token comes from WFKIT_API_TOKEN (16 characters or more, at least 8 different ones,
    printable ASCII), or is generated and printed once. While serving a DuckDB file,
    <db>.server.json (owner-only) holds the URL, pid, token and server id for the other
    commands; a PostgreSQL database needs none: the other commands open it directly.
    """
    from wfkit.api.server import serve as serve_api

    serve_api(
        db,
        host,
        port,
        None,
        module or (),
        threads,
        queues=queue,
        max_body=max_body,
        access_log=access_log,
        docs=docs,
        metrics_public=metrics_public,
        log_format=log_format,
    )


@app.command("signal")
@_oneline
def signal_command(
    name: Annotated[str, typer.Argument(help="The signal's name")],
    key: Annotated[
        str | None, typer.Argument(help="The correlation key (leave out for uncorrelated waits)")
    ] = None,
    payload: Annotated[str, typer.Option(help="The payload, a JSON object")] = "{}",
    db: Db = "runs.duckdb",
    actor: Actor = None,
    post_if_absent: Annotated[
        bool, typer.Option(help="Keep the signal for a wait not reached yet")
    ] = False,
    expires: Annotated[str, typer.Option(help="How long a kept signal is kept")] = "1d",
) -> None:
    """Send a signal to the run waiting on NAME (and KEY)."""
    from wfkit.api.operate import operate, parse_payload, whoami

    body = parse_payload(payload)
    what = f"signal {name!r}" + (f" (key {key})" if key is not None else "")
    with operate(db) as (target, via):
        if post_if_absent:
            delivered = target.post_signal(name, key, body, expires=expires, actor=whoami(actor))
        else:
            delivered = target.signal(name, key, body, actor=whoami(actor))
    if delivered:
        typer.echo(f"{what} delivered: the waiting run resumed{via}")
    elif post_if_absent:
        typer.echo(f"{what} kept for the next matching wait for {expires}{via}")
    else:
        typer.echo(
            f"{what} not delivered: no run waits for it (pass --post-if-absent to keep it "
            f"for a wait not reached yet){via}"
        )


@app.command("approve")
@_oneline
def approve_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="The run's id")],
    node: Annotated[str, typer.Argument(help="The approval's node id")],
    approved: Annotated[bool, typer.Option("--approve/--reject", help="The decision")] = True,
    comment: Annotated[str | None, typer.Option(help="Why, recorded with the decision")] = None,
    item: Annotated[
        str | None,
        typer.Option(
            "--item",
            metavar="I[,J...]",
            help="Inside a for_each: the item whose approval is decided, its indexes "
            "outermost first ('2', or '0,2' nested), as engine.waiting() and GET /waiting "
            "show them (the Inbox too); "
            "without it the oldest open approval of NODE",
            show_default=False,
        ),
    ] = None,
    actor: Actor = None,
    db: Db = "runs.duckdb",
) -> None:
    """Approve (or --reject) the open approval NODE of run RUN."""
    from wfkit.api.operate import operate, run_status, whoami

    who = whoami(actor)
    path = _item(item)
    with operate(db) as (target, via):
        target.approve(run_id, node, approved=approved, actor=who, comment=comment, loop_path=path)
        status = run_status(target, run_id)
    decision = "approved" if approved else "rejected"
    which = f" (item {','.join(map(str, path))})" if path is not None else ""
    typer.echo(f"run {run_id}: {node!r}{which} {decision} by {who}; the run is {status}{via}")


_DIGITS = re.compile(r"[0-9]{1,18}")  # an index; int() of 5,000 digits would raise


def _item(text: str | None) -> list[int] | None:
    """``--item 0,2`` as a loop path."""
    if text is None:
        return None
    parts = [part.strip() for part in text.split(",")]
    # ASCII digits only: int() would also read '+1', '1_0' and other scripts' digits
    path = [int(part) for part in parts if _DIGITS.fullmatch(part)]
    if len(path) != len(parts):
        raise typer.BadParameter(
            f"{text!r} is not an item: give its for_each indexes, outermost first, e.g. 2 or 0,2",
            param_hint="--item",
        )
    return path


@app.command("recover")
@_oneline
def recover_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="The run's id")],
    action: Annotated[
        str, typer.Option(help="retry the compensation, skip it, or abandon the unwind")
    ] = "retry",
    actor: Actor = None,
    db: Db = "runs.duckdb",
) -> None:
    """Decide the failed compensation of a suspended run: retry, skip or abandon."""
    from wfkit.api.operate import operate, run_status, whoami
    from wfkit.errors import UsageError

    if action not in ("retry", "skip", "abandon"):
        raise UsageError(f"--action must be retry, skip or abandon, not {action!r}")
    who = whoami(actor)
    with operate(db) as (target, via):
        target.recover_compensation(run_id, action, actor=who)
        status = run_status(target, run_id)
    typer.echo(f"run {run_id}: compensation {action} by {who}; the run is {status}{via}")


@app.command("cancel")
@_oneline
def cancel_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="The run's id")],
    reason: Annotated[str, typer.Option(help="Why, recorded in the history")] = "",
    actor: Actor = None,
    db: Db = "runs.duckdb",
) -> None:
    """Cancel a run (one that had already ended is left as it is)."""
    from wfkit.api.operate import operate, whoami

    who = whoami(actor)
    with operate(db) as (target, via):
        done = target.cancel(run_id, actor=who, reason=reason)
    if done.already_ended:
        typer.echo(f"run {run_id} had already ended ({done.status.value}); nothing to cancel{via}")
        return
    stopping = (
        f", {done.attempts_stopping} attempt(s) in flight asked to stop"
        if done.attempts_stopping
        else ""
    )
    typer.echo(
        f"run {run_id}: cancelled by {who} ({done.pending_cancelled} pending step(s) "
        f"cancelled{stopping}); the run is {done.status.value}{via}"
    )


def _set_active(workflow_id: str, version: int, db: str, active: bool) -> None:
    from wfkit.api.operate import active_versions, operate

    with operate(db) as (target, via):
        (target.activate if active else target.deactivate)(workflow_id, version)
        takes = active_versions(target, workflow_id)
    listed = ", ".join(f"v{v}" for v in takes) or "none"
    done = "takes new runs again" if active else "takes no new runs (its runs in flight finish)"
    typer.echo(f"workflow {workflow_id!r} v{version} {done}; active versions: {listed}{via}")


WorkflowArg = Annotated[str, typer.Argument(metavar="ID", help="The workflow id")]
VersionArg = Annotated[int, typer.Argument(metavar="VERSION", min=1, help="The version")]


@app.command("deactivate")
@_oneline
def deactivate_command(
    workflow_id: WorkflowArg, version: VersionArg, db: Db = "runs.duckdb"
) -> None:
    """Refuse new runs of workflow ID VERSION; its runs in flight finish."""
    _set_active(workflow_id, version, db, False)


@app.command("activate")
@_oneline
def activate_command(workflow_id: WorkflowArg, version: VersionArg, db: Db = "runs.duckdb") -> None:
    """Take new runs of a deactivated workflow ID VERSION again."""
    _set_active(workflow_id, version, db, True)


@app.command("retry")
@_oneline
def retry_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="The run's id")],
    actor: Actor = None,
    db: Db = "runs.duckdb",
) -> None:
    """Try a failed run again from where it failed (completed steps are not run again)."""
    from wfkit.api.operate import operate, run_status, whoami

    who = whoami(actor)
    with operate(db) as (target, via):
        target.retry(run_id, actor=who)
        status = run_status(target, run_id)
    typer.echo(f"run {run_id}: retried by {who}; the run is {status}{via}")


# --- worker: one of many engine processes on a shared PostgreSQL database ---------------------


@app.command("worker")
@_oneline
def worker_command(
    db: Annotated[
        str,
        typer.Option(help="The shared database: postgresql://user@host:port/db (not DuckDB)"),
    ],
    module: Annotated[
        list[str],
        typer.Option(help="Module or .py file defining activities and workflows (repeatable)"),
    ],
    threads: Annotated[int, typer.Option(min=1, help="Engine worker threads")] = 4,
    lease: Annotated[
        str,
        typer.Option(help="How long a dead worker's runs wait before the others take them"),
    ] = "30s",
    queue: Annotated[
        list[str] | None,
        typer.Option(help="Run only the steps of this activity queue (repeatable) [default: all]"),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="Serve Prometheus metrics on this port (0: any free)"),
    ] = None,
    metrics_addr: Annotated[
        str, typer.Option(help="The address the metrics port listens on")
    ] = "127.0.0.1",
    log_format: LogFormat = "text",
) -> None:
    """Advance the runs of a PostgreSQL database until SIGTERM or Ctrl-C; run several anywhere.

    Registers every module-level workflow of the modules, claims runs nobody advances (and those
    of workers that died, once their lease runs out), and on a signal finishes the attempts in
    flight and gives its runs back.
    """
    from wfkit.worker import run_worker

    run_worker(
        db,
        module,
        threads,
        lease,
        queues=queue,
        echo=lambda line: typer.echo(line),
        metrics_port=metrics_port,
        metrics_addr=metrics_addr,
        log_format=log_format,
    )


# --- store: whole stores, e.g. a DuckDB file moved into PostgreSQL ------------------------------

store_app = typer.Typer(
    help="Work on whole stores: copy a DuckDB file into PostgreSQL (and back); accept a loss.",
    no_args_is_help=True,
)
app.add_typer(store_app, name="store")


@store_app.command("copy")
@_oneline
def store_copy_command(
    src: Annotated[
        str,
        typer.Argument(metavar="SRC", help="What to read: a DuckDB file or postgresql:// URL"),
    ],
    dst: Annotated[
        str,
        typer.Argument(metavar="DST", help="Where to write: a DuckDB file or postgresql:// URL"),
    ],
    merge: Annotated[
        bool,
        typer.Option(
            "--merge", help="Add to a destination that holds runs, skipping those it already has"
        ),
    ] = False,
) -> None:
    """Copy every definition, run (in flight included), event and wait from SRC into DST.

    Stop the engines of both stores first. DST must be empty unless --merge is given.
    """
    from wfkit.store.copy import copy_store

    report = copy_store(src, dst, merge=merge, progress=lambda line: typer.echo(line, err=True))
    for line in report.lines():
        typer.echo(line)


@store_app.command("accept-loss")
@_oneline
def store_accept_loss_command(
    db: Annotated[Path, typer.Option(help="The DuckDB file (its engine stopped)")] = Path(
        "runs.duckdb"
    ),
    actor: Actor = None,
) -> None:
    """Go on with a DuckDB file that holds less than its engine committed to it.

    wfkit refuses to open such a file (its write-ahead log was cut short or deleted, an older
    copy was restored, or the file was deleted) and says how much is missing. Restore it from a
    backup if you can; otherwise this records the loss in wf_store_events (who, how many
    changes) and lets engines open the file again with what it holds.
    """
    from wfkit.api.operate import whoami
    from wfkit.store.duckdb import DuckDBStore

    store = DuckDBStore(db, accept_lost_commits=True, actor=whoami(actor))
    accepted = store.accepted
    store.close()
    if accepted is None:
        typer.echo(f"{db} holds every change its engine committed: there is no loss to accept")
        return
    expected, held = accepted
    typer.echo(
        f"{db}: the loss of {expected - held:,} of {expected:,} changes is recorded in "
        "wf_store_events; engines open it again with what it holds"
    )


# --- retention: ended runs leave the store ------------------------------------------------------

OlderThan = Annotated[
    str,
    typer.Option(
        "--older-than",
        help="Runs that ended more than this long ago: 30d, 12h, 90m",
        show_default=False,
    ),
]
EndedStatus = Annotated[
    list[str] | None,
    typer.Option(
        "--status",
        metavar="STATUS",
        help="Only runs that ended so: completed, failed or cancelled (repeatable) "
        "[default: all three]",
        show_default=False,
    ),
]
StoreOption = Annotated[
    str, typer.Option("--db", help="The DuckDB file, or a postgresql:// URL of a shared database")
]


@runs_app.command("purge")
@_oneline
def runs_purge_command(
    older_than: OlderThan,
    status: EndedStatus = None,
    db: StoreOption = "runs.duckdb",
    artifacts: Annotated[
        str | None,
        typer.Option(
            help="The engine's artifact root, whose artifacts of purged runs are deleted too "
            "[default: the engine's default, e.g. runs.duckdb.artifacts/]",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Delete the ended runs older than --older-than, with every row and artifact of theirs."""
    with _retention_engine(db, artifacts) as engine:
        purged = engine.purge(older_than=older_than, status=status)
    which = f"{'/'.join(s.lower() for s in status)} " if status else ""
    typer.echo(
        f"purged {purged} {which}run{'s' if purged != 1 else ''} that ended more than "
        f"{older_than} ago from {_shown(db)}"
    )


@runs_app.command("archive")
@_oneline
def runs_archive_command(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="Where the Parquet files go (created if missing)")
    ],
    older_than: OlderThan,
    status: EndedStatus = None,
    db: StoreOption = "runs.duckdb",
) -> None:
    """Write the ended runs older than --older-than to Parquet files in DIR (one per table,
    never overwriting a file), then delete them from the store."""
    with _retention_engine(db) as engine:
        report = engine.archive(directory, older_than=older_than, status=status)
    if not report.runs:
        typer.echo(f"no ended runs older than {older_than} in {_shown(db)}: nothing was archived")
        return
    for path in report.files:  # wf_events.parquet, wf_events-2.parquet: the table's rows
        count = report.rows[path.name.split(".")[0].split("-")[0]]
        typer.echo(f"wrote {path} ({count} row{'s' if count != 1 else ''})")
    typer.echo(
        f"archived {report.runs} run{'s' if report.runs != 1 else ''} into {report.directory} "
        f"and purged {'them' if report.runs != 1 else 'it'} from {_shown(db)}"
    )


@contextlib.contextmanager
def _retention_engine(db: str, artifacts: str | None = None) -> Iterator[Engine]:
    """The engine on ``db``; a DuckDB file held by ``wfkit serve`` is refused: stop it first.

    Only a server that proves it wrote ``<db>.server.json`` counts (wfkit/api/discovery.py); a
    file that fails the checks is named in a warning and ignored.
    """
    from wfkit.api.discovery import Discovery
    from wfkit.errors import UsageError

    found: Discovery | None = None
    if not db.startswith(("postgresql://", "postgres://")):
        from wfkit.api.discovery import discover

        found = discover(db)
        server = found.server
        if server is not None:
            raise UsageError(
                f"a wfkit server (process {server.pid}, {server.url}) holds {db}; purging and "
                "archiving work on the file itself, not through the server: stop the server "
                f"(Ctrl-C, or 'kill -TERM {server.pid}'), run this command again, then start it "
                "again"
            )
        if not Path(db).is_file():
            raise UsageError(f"no such file: {db}; point --db at a wfkit DuckDB file")
    quiet = logging.getLogger("wfkit.engine")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # no run's data model is needed to purge it
    try:
        if found is None:
            engine = Engine(db, artifacts=artifacts)
        else:
            from wfkit.api.operate import open_file

            engine = open_file(Path(db), found, lambda: Engine(db, artifacts=artifacts))
        with engine:
            yield engine
    finally:
        quiet.setLevel(level)


def _shown(db: str) -> str:
    """The store as shown: a URL without its password."""
    from urllib.parse import urlsplit

    parts = urlsplit(db)
    if parts.password is None:
        return db
    return parts._replace(netloc=f"{parts.username}:***@{parts.netloc.rsplit('@', 1)[-1]}").geturl()
