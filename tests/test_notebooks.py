"""Every notebook in notebooks/ runs top to bottom in a fresh kernel of this Python."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from ipykernel.kernelspec import RESOURCES, get_kernel_dict
from jupyter_client.kernelspec import NATIVE_KERNEL_NAME, KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from traitlets import default

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


def execute(path: Path) -> nbformat.NotebookNode:
    """Run the notebook (plus a last cell reporting the kernel's interpreter) and return it."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(WHERE_AM_I))
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
        kernel_manager_class=ThisPythonKernelManager,
    )
    client.execute()  # raises CellExecutionError naming the cell when one fails
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


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_notebook_runs(path: Path) -> None:
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
