"""The repository's notebooks in Notebook 7 (the ``notebook`` package's classic-style interface),
at 1280x800: Run All, then the same checks as in JupyterLab (tests/browser/test_lab_notebooks.py):
nothing fails, every picture fits its output area, the widget views are there, and no button,
label, form field or table cell of a widget is clipped, breaks a word or is too faint to read.

Notebook 7 is served by a Lab server of this module's own (``lab`` below; the session's one
in conftest.py, once the Lab tests have used it, makes Notebook 7 restore state it cannot load:
"Command 'filebrowser:open-path' not registered"): the ``notebook`` package is a server
extension of the same Jupyter server and serves ``/notebooks/<path>``. Its
page is a JupyterLab application too (``window.jupyterapp``), so Run All is the same command
(``notebook:run-all-cells``, the menu's Run > Run All Cells). The notebooks with pictures (01) and
with widgets (04, 05) are checked in the light theme, the editor's notebook (04) in the dark one
too; each runs on its own copy of the notebooks, apart from the Lab tests' copies.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.browser.conftest import ConsoleLog, checked_page, serving_lab
from tests.browser.jupyterlab import NOTEBOOKS, THEMES, LabPage, LabServer
from tests.browser.test_lab_notebooks import VIEWPORT, run_all_problems

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Error, Page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CASES = [
    ("01-define-and-draw.ipynb", "light"),
    ("04-visual-editor.ipynb", "light"),
    ("05-operate.ipynb", "light"),
    ("04-visual-editor.ipynb", "dark"),
]


class Notebook7Console(ConsoleLog):
    """The page's log, less one error of Notebook 7's own start-up: its application core reads
    the settings schema of a plugin it does not have ("Cannot read properties of undefined
    (reading 'schema')" in ``notebook_core``). It is thrown on loading the page before any cell
    runs, with or without wfkit's extensions (anywidget, sidecar) and Voila's enabled, so it is
    not wfkit's; every other error still fails the test."""

    def on_page_error(self, error: Error) -> None:
        if "reading 'schema'" in error.message and "/static/notebook/notebook_core." in (
            error.stack or ""
        ):
            self.ignored.append(f"[uncaught, Notebook 7] {error.message}")
            return
        super().on_page_error(error)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[LabServer]:
    """A fresh Jupyter server for Notebook 7 alone (no state left by the Lab tests)."""
    yield from serving_lab(tmp_path_factory.mktemp("notebook7"))


@pytest.fixture
def console() -> ConsoleLog:
    return Notebook7Console()


@pytest.fixture
def notebook7_page(browser: Browser, console: ConsoleLog) -> Iterator[Page]:
    """A fresh 1280x800 page; fails the test on errors the page logged."""
    yield from checked_page(browser, console, VIEWPORT, timeout_ms=30_000, local_only=False)


def copy_of(lab: LabServer, theme: str) -> str:
    """The folder (relative to the server's root) of this module's copy of the notebooks."""
    folder = f"notebook7-{theme}"
    if not (lab.root / folder).exists():
        shutil.copytree(NOTEBOOKS, lab.root / folder, ignore=shutil.ignore_patterns("out"))
    return folder


@pytest.mark.parametrize(("name", "theme"), CASES)
def test_run_all_in_notebook_7(lab: LabServer, notebook7_page: Page, name: str, theme: str) -> None:
    path = f"{copy_of(lab, theme)}/{name}"
    notebook = LabPage(lab, notebook7_page, path, interface="notebook")
    try:
        notebook.open(theme)
        assert notebook7_page.locator("#main-panel .jp-NotebookPanel").count() == 1, (
            "not Notebook 7's single-document page"
        )
        problems = run_all_problems(notebook, name)
        assert not problems, (
            f"{name} in Notebook 7 ({THEMES[theme]}, 1280x800) has {len(problems)} problems:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
    finally:
        lab.shut_down_kernels(path)
