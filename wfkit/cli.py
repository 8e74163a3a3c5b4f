"""The ``wfkit`` command line."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

import typer

from wfkit.definition.problems import Severity
from wfkit.definition.rendering import RenderingUnavailable
from wfkit.definition.workflow import Workflow
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


@app.command()
@_friendly
def demo(
    out: Annotated[Path, typer.Option(help="Folder for the pictures")] = Path("wfkit-demo"),
) -> None:
    """Define the example workflows, validate them and draw them (SVG and PNG)."""
    from wfkit.examples import all_workflows

    out.mkdir(parents=True, exist_ok=True)
    failed = False
    for flow in all_workflows().values():
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
    raise typer.Exit(1 if failed else 0)


def main() -> None:
    """Entry point that turns wfkit errors into one readable line and exit code 1."""
    try:
        app()
    except WfkitError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)
