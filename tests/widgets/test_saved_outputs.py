"""What a notebook saves when it displays a wfkit widget, read from a notebook run in a real
kernel (nbclient, this venv's ipykernel): each widget view comes with a static picture of its
graph, so that a front end without the widget's model (the notebook reopened without its kernel,
a code-hosting site, VS Code before its kernel runs) still has a picture to show.

Every widget that holds a graph (GraphSurface, Editor, RunMonitor, Dashboard) is displayed with
``display(...)`` as a user does; the saved outputs are then read from the executed notebook: a
``display_data`` with the widget-view mime type naming a widget model, followed by one with
``text/html`` holding the picture as scalable inline SVG (``viewBox``) marked as the view's
stand-in. A later cell moves the run on; the saved picture follows (``update_display_data``
through its display id), so what is saved is the run as it last stood.
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path
from typing import Any

import nbformat
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.notebook]

REPO = Path(__file__).resolve().parents[2]
VIEW = "application/vnd.jupyter.widget-view+json"
WIDGETS = ["surface", "editor", "monitor", "dashboard"]

SETUP = """
import wfkit as wf
from IPython.display import display
from wfkit.widgets import Dashboard, Editor, GraphSurface, RunMonitor

registry = wf.ActivityRegistry()
registry.register("reserve", lambda ctx: None)
registry.register("charge", lambda ctx: None)
engine = wf.Engine("runs.duckdb", registry=registry)
flow = wf.Workflow("order").start_with("reserve").then("charge")
engine.register(flow)
run = engine.start("order", {})
"""

SHOWN = {
    "surface": "surface = GraphSurface()\nsurface.draw(flow.graph)\ndisplay(surface)",
    "editor": "editor = Editor(flow)\ndisplay(editor)",
    "monitor": "monitor = RunMonitor(engine, run, autostart=False)\ndisplay(monitor)",
    "dashboard": (
        "dashboard = Dashboard(engine, actor='ana', refresh_every=None)\n"
        "dashboard.show_run(run.id)\n"
        "display(dashboard)"
    ),
}

MOVE_ON = """
engine.run_until_idle()
monitor.refresh()
dashboard.monitor.refresh()
assert run.status == wf.RunStatus.COMPLETED, run.explain()
"""

CLOSE = """
for widget in (surface, editor, monitor, dashboard):
    widget.close()
engine.close()
"""


def statuses(picture: str) -> dict[str, str]:
    """node id -> status class of each node of a static picture."""
    found = re.findall(
        r'<g class="node ([a-z]+)"[^>]*>\s*<title>[^<]*</title>\s*<g><a xlink:title="([^" ]+) ',
        picture,
    )
    return {node: status for status, node in found}


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The notebook as saved after it ran in a kernel, outputs and widget state included."""
    from nbclient import NotebookClient

    cells = [SETUP, *(SHOWN[name] for name in WIDGETS), MOVE_ON, CLOSE]
    book = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(textwrap.dedent(c).strip()) for c in cells]
    )
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    folder = tmp_path_factory.mktemp("saved")
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    client = NotebookClient(
        book,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
        store_widget_state=True,
    )
    env = dict(os.environ, PYTHONPATH=path)
    client.execute(env=env, cwd=str(folder))
    nbformat.write(book, folder / "saved.ipynb")
    saved = nbformat.read(folder / "saved.ipynb", as_version=4)  # what the file holds
    return saved


def outputs(book: Any, name: str) -> list[dict[str, Any]]:
    """The outputs the cell displaying widget ``name`` saved."""
    return list(book.cells[1 + WIDGETS.index(name)].outputs)


@pytest.mark.parametrize("name", WIDGETS)
def test_each_widget_saves_its_view_then_a_static_picture_of_its_graph(
    executed: Any, name: str
) -> None:
    saved = outputs(executed, name)
    kinds = [o["output_type"] for o in saved]
    assert kinds == ["display_data", "display_data"], [dict(o) for o in saved]
    view, picture = (o["data"] for o in saved)

    assert VIEW in view and view[VIEW]["model_id"]  # what a live front end renders
    assert "text/plain" in view
    html = picture["text/html"]  # what a front end without the model shows
    svg = re.search(r"<svg\b[^>]*>", html)
    assert svg is not None, html[:400]
    assert "viewBox=" in svg[0]  # scales to the output's width
    assert "data-wfkit-fallback=" in html  # hidden by the live view, so shown once
    assert "run the cell for the live widget" in html
    assert statuses(html) or name in ("surface", "editor")


@pytest.mark.parametrize("name", ["monitor", "dashboard"])
def test_the_saved_picture_shows_the_run_as_it_last_stood(executed: Any, name: str) -> None:
    picture = outputs(executed, name)[1]["data"]["text/html"]
    assert statuses(picture) == {"reserve": "succeeded", "charge": "succeeded"}


def test_the_widget_state_is_saved_with_the_notebook(executed: Any) -> None:
    """The widget models' state lands in the notebook's metadata (as Lab's "Save Widget State"
    does): a front end that renders widgets from saved state finds the surface's model."""
    state = executed.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    for name in WIDGETS:
        assert outputs(executed, name)[0]["data"][VIEW]["model_id"] in state
