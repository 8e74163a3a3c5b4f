"""Every notebook in notebooks/ runs top to bottom in a fresh kernel of this Python; Run All
leaves its widgets and engine open unless clean-up is asked for; re-running a cell that opens an
engine on the same file works."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import nbformat
import pytest
from ipykernel.kernelspec import RESOURCES, get_kernel_dict
from jupyter_client.kernelspec import NATIVE_KERNEL_NAME, KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from traitlets import default

pytestmark = pytest.mark.notebook

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
WHERE_AM_I = "import sys; print(sys.executable, end='')"


class ThisPythonKernelSpecs(KernelSpecManager):
    """``python3`` always means ipykernel in the Python running the tests (the project's venv).

    Without this a ``python3`` kernelspec in the user's or the system's Jupyter folders could
    start another interpreter, one without wfkit.
    """

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        if kernel_name == NATIVE_KERNEL_NAME:
            return KernelSpec(resource_dir=RESOURCES, **get_kernel_dict())
        return super().get_kernel_spec(kernel_name)


class ThisPythonKernelManager(AsyncKernelManager):
    @default("kernel_spec_manager")
    def _this_python_specs(self) -> KernelSpecManager:
        return ThisPythonKernelSpecs(data_dir=self.data_dir)


def client_for(nb: nbformat.NotebookNode, folder: Path = NOTEBOOKS) -> NotebookClient:
    return NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,
        resources={"metadata": {"path": str(folder)}},
        kernel_manager_class=ThisPythonKernelManager,
    )


def execute(path: Path) -> nbformat.NotebookNode:
    """Run the notebook (plus a last cell reporting the kernel's interpreter) and return it."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(WHERE_AM_I))
    client_for(nb).execute()  # raises CellExecutionError naming the cell when one fails
    return nb


def outputs(nb: nbformat.NotebookNode) -> list[Any]:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]


def test_there_are_notebooks() -> None:
    assert "01-define-and-draw.ipynb" in [p.name for p in PATHS]


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_notebook_is_saved_clean(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "a notebook without code"
    assert all(not c.outputs and c.execution_count is None for c in code), "clear outputs first"


CLOSES = re.compile(r"\.close\(\)|shutil\.rmtree\(")


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_run_all_leaves_the_widgets_and_the_engine_open(path: Path) -> None:
    """Only the last cell closes anything, and only when CLEAN_UP is set (off by default)."""
    nb = nbformat.read(path, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    closing = [i for i, source in enumerate(code) if CLOSES.search(source)]
    if path.name == "02-run-durably.ipynb":  # closes and reopens its engine on purpose
        closing = [i for i in closing if "engine.close()\n" not in code[i].split("if CLEAN_UP")[0]]
    if not closing:
        return
    assert closing == [len(code) - 1], f"cells {closing} close something before the end"
    assert code[-1].startswith("if CLEAN_UP:\n"), code[-1]
    assert 'CLEAN_UP = os.environ.get("WFKIT_CLEAN_UP") == "1"' in code[0]
    assert nb.cells[-2].cell_type == "markdown" and "CLEAN_UP" in nb.cells[-2].source


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WFKIT_CLEAN_UP", "1")  # the kernel inherits it: no temp folders left
    nb = execute(path)
    produced = outputs(nb)
    assert not [o for o in produced if o.output_type == "error"]
    assert not [o.text for o in produced if o.get("name") == "stderr"], "warnings in the kernel"
    assert produced[-1].text == sys.executable, "the notebook ran in another Python"
    if path.name.startswith("01-"):
        mimes = [m for o in produced for m in o.get("data", {})]
        assert mimes.count("image/svg+xml") >= 3, mimes  # built, broken, fixed
        assert "image/png" in mimes
        broken = [
            o.data["image/svg+xml"]
            for o in produced
            if "image/svg+xml" in o.get("data", {}) and "problem error" in o.data["image/svg+xml"]
        ]
        assert broken, "the broken workflow is not drawn with its problems"
        assert any("text/html" in o.get("data", {}) for o in produced)  # the problem table


RERUN = [
    """
    import os
    import wfkit as wf
    from wfkit.widgets import Dashboard
    """,
    """
    engine = wf.Engine("runs.duckdb")  # a fixed file, as in the README
    engine.register(wf.Workflow("w", 1).start_with())
    first = engine.start("w", {})
    engine.run_until_idle()
    board = Dashboard(engine)
    print(board.message.text)
    """,
]
LOOK = """
try:
    old.runs()
except wf.StoreError as exc:
    print("old:", exc)
print("new:", engine.run(first.id).status.value, len(engine.runs()))
"""


@pytest.mark.slow
def test_running_the_engine_cell_again_replaces_the_engine(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nb.cells = [nbformat.v4.new_code_cell(textwrap.dedent(c).strip()) for c in RERUN]
    nb.cells += [nbformat.v4.new_code_cell("old = engine"), nbformat.v4.new_code_cell(LOOK)]
    client = client_for(nb, tmp_path)
    with client.setup_kernel():
        for index in (0, 1, 2, 1, 3):  # the engine cell runs again after `old = engine`
            client.execute_cell(nb.cells[index], index)
    look = nb.cells[3]
    assert nb.cells[1].outputs[-1].text == "2 runs\n"  # the new engine sees the first run
    text = "".join(o.get("text", "") for o in look.outputs)
    assert not [o for o in look.outputs if o.output_type == "error"], look.outputs
    assert "old: this engine's DuckDB file 'runs.duckdb' is closed: a newer" in text
    assert "new: completed 2" in text
