"""``Dashboard.show_in_sidebar()`` in a real JupyterLab 4 at 1280x800: the dashboard opens in a
side panel (sidecar's panel in Lab's main area, beside the notebook), not in the notebook's
output; it works there (its tabs switch, the Inbox shows the run's approval), nothing of it is
clipped at the panel's width, light and dark; and calling it again replaces the panel instead of
opening a second one.

The notebook is written by the test into the session's Lab server folder (``lab`` in
conftest.py), on its own engine under a temporary folder; its kernel is shut down afterwards.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import TYPE_CHECKING

import nbformat
import pytest

from tests.browser.conftest import ConsoleLog, checked_page
from tests.browser.jupyterlab import THEMES, LabPage, LabServer
from tests.browser.test_lab_notebooks import VIEWPORT, layout

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CELLS = [
    """
    import tempfile
    from pathlib import Path

    import wfkit as wf
    from wfkit.widgets import Dashboard

    folder = Path(tempfile.mkdtemp(prefix="wfkit-sidebar-"))
    registry = wf.ActivityRegistry()
    registry.register("orders.reserve", lambda ctx: None)
    engine = wf.Engine(folder / "runs.duckdb", registry=registry)
    flow = wf.Workflow("order").start_with("orders.reserve").approval("ship-it")
    engine.register(flow)
    runs = [engine.start("order", {"order": f"o-{i}", "amount": 10 * i}) for i in range(3)]
    engine.run_until_idle()
    board = Dashboard(engine, actor="ana")
    """,
    "board.show_in_sidebar()",  # as a user types it: the panel it returns is the cell's value
    "board.show_in_sidebar()  # again",
]

PANEL = ".jupyterlab-sidecar"


@pytest.fixture
def lab_page(browser: Browser, console: ConsoleLog) -> Iterator[Page]:
    yield from checked_page(browser, console, VIEWPORT, timeout_ms=30_000, local_only=False)


def write_notebook(lab: LabServer, theme: str) -> str:
    path = f"sidebar-{theme}.ipynb"
    book = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(textwrap.dedent(c).strip()) for c in CELLS]
    )
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(book, lab.root / path)
    return path


@pytest.mark.parametrize("theme", list(THEMES))
def test_show_in_sidebar_opens_one_working_side_panel(
    lab: LabServer, lab_page: Page, theme: str
) -> None:
    path = write_notebook(lab, theme)
    notebook = LabPage(lab, lab_page, path)
    try:
        notebook.open(theme)
        progress = notebook.run_all()
        assert not progress.errors and not progress.unrun, progress
        lab_page.wait_for_selector(f"{PANEL} .wfkit-dashboard", timeout=30_000, state="attached")
        lab_page.wait_for_timeout(800)  # the second call's panel, if any, lays out

        # one panel, in Lab's shell beside the notebook, holding the dashboard
        where = lab_page.evaluate(
            """(panel) => [...document.querySelectorAll(panel)].map(p => ({
                 inNotebook: !!p.closest('.jp-Notebook'),
                 inMainArea: !!p.closest('#jp-main-dock-panel'),
                 width: Math.round(p.getBoundingClientRect().width),
                 dashboards: p.querySelectorAll('.wfkit-dashboard').length}))""",
            PANEL,
        )
        assert len(where) == 1, f"show_in_sidebar() twice left {len(where)} panels: {where}"
        assert where[0]["dashboards"] == 1 and not where[0]["inNotebook"], where
        assert where[0]["inMainArea"], where
        tabs = lab_page.locator("#jp-main-dock-panel .lm-DockPanel-tabBar .lm-TabBar-tab")
        titles = [t.strip() for t in tabs.all_inner_texts()]
        assert titles.count("wfkit dashboard") == 1, titles
        assert lab_page.locator(".jp-Notebook .wfkit-dashboard").count() == 0  # not in the output

        # it works there: the tabs switch, the Inbox lists the runs' approvals
        side = LabPage(lab, lab_page, path, scope=PANEL)
        problems = [f"[in the panel, {where[0]['width']} px] {p}" for p in layout(side, "")]
        for index in range(side.tab_count()):
            label = side.select_tab(index)
            current = lab_page.locator(f"{PANEL} .lm-TabBar-tab.lm-mod-current").first
            assert current.inner_text().strip() == label
            problems += layout(side, f"[in the panel, tab {label}] ")
        inbox = lab_page.locator(f"{PANEL} .lm-TabBar-tab", has_text="Inbox").first
        inbox.click()
        lab_page.wait_for_timeout(800)
        shown = lab_page.locator(f"{PANEL} .wfkit-dashboard").inner_text()
        assert "ship-it" in shown, shown[:600]
        assert not problems, (
            f"the dashboard in its side panel ({THEMES[theme]}, 1280x800) has {len(problems)} "
            "problems:\n" + "\n".join(f"  - {p}" for p in problems)
        )
    finally:
        lab.shut_down_kernels(path)
