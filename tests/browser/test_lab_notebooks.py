"""The repository's notebooks in a real JupyterLab 4, light and dark, at 1280x800: Run All, then
nothing fails, every picture fits its output area, the widget views are there and live, and no
button, label, form field or table cell of a widget is clipped or breaks a word mid-way.

One Lab server for the session (``lab`` in conftest.py); one page per notebook, on its own copy
of the notebook, so outputs never reach the repository. Run All runs once, in the light theme;
then the page switches to the dark theme, as a user does from the Settings menu, and every check
runs again on the same outputs (the widgets must follow a theme chosen after they were drawn).
Every offender is collected and reported at once. With ``WFKIT_SCREENSHOTS=1`` the runs of
notebooks 04 and 05 write the README's JupyterLab screenshots to docs/images/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.browser.conftest import ConsoleLog, checked_page
from tests.browser.jupyterlab import NOTEBOOKS, THEMES, LabPage, LabServer

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

VIEWPORT = {"width": 1280, "height": 800}
PATHS = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
WIDGETS = {  # notebook -> (widget views, graph surfaces) it shows after Run All, at least
    "04-visual-editor.ipynb": (3, 3),  # the editor (shown twice) and the run monitor
    "05-operate.ipynb": (1, 1),  # the dashboard, its monitor tab with a surface
}
SHOTS: dict[tuple[str, str], list[tuple[int, str | None, str]]] = {
    # (notebook, theme) -> (widget view index, tab to select first or None, file name)
    ("04-visual-editor.ipynb", "light"): [
        (0, None, "lab-editor.png"),
        (2, None, "lab-monitor.png"),
    ],
    ("04-visual-editor.ipynb", "dark"): [
        (0, None, "lab-editor-dark.png"),
        (2, None, "lab-monitor-dark.png"),
    ],
    ("05-operate.ipynb", "light"): [
        (0, "Inbox", "lab-inbox.png"),
        (0, "Recovery", "lab-recovery.png"),
    ],
}


@pytest.fixture
def lab_page(browser: Browser, console: ConsoleLog) -> Iterator[Page]:
    """A fresh 1280x800 page; fails the test on errors the page logged."""
    yield from checked_page(browser, console, VIEWPORT, timeout_ms=30_000, local_only=False)


def widget_views(page: Page) -> Any:
    return page.locator(".jp-Notebook .jp-OutputArea-output").filter(
        has=page.locator(".jupyter-widgets")
    )


def shoot(page: Page, target: Any, name: str, screenshot: Callable[[Any, str], Path]) -> None:
    """An element screenshot of ``target``, with the page made tall enough to show it whole (the
    width, so the layout, stays 1280 px); the viewport is 1280x800 again afterwards."""
    height = int(target.evaluate("el => el.getBoundingClientRect().height"))
    page.set_viewport_size(
        {"width": VIEWPORT["width"], "height": max(VIEWPORT["height"], height + 300)}
    )
    page.wait_for_timeout(400)
    target.scroll_into_view_if_needed()
    screenshot(target, name)
    page.set_viewport_size(VIEWPORT)
    page.wait_for_timeout(200)


def run_all_problems(notebook: LabPage, name: str) -> list[str]:
    """Run All in ``notebook`` (notebook file ``name``), then every problem found: error outputs,
    cells never run, missing widget views, and the layout problems of every tab in turn."""
    progress = notebook.run_all()
    problems = [f"error output: {e}" for e in progress.errors]
    if progress.unrun:
        problems.append(f"code cells never ran: {progress.unrun}")
    views, surfaces = WIDGETS.get(name, (0, 0))
    seen = notebook.wait_for_widgets(views, surfaces)
    problems += [f"widget failed to display: {text}" for text in seen["failed"]]
    if seen["views"] < views or seen["surfaces"] < surfaces:
        problems.append(
            f"after Run All {seen['views']} widget views and {seen['surfaces']} graph "
            f"surfaces show; expected at least {views} and {surfaces}"
        )
    problems += layout(notebook, "")
    for index in range(notebook.tab_count()):  # every tab of every tab widget, in turn
        label = notebook.select_tab(index)
        problems += layout(notebook, f"[tab {label}] ")
    return problems


def layout(notebook: LabPage, where: str) -> list[str]:
    """Every picture wider than its output area, clipped control, word broken mid-way, and text
    too faint to read against its background."""
    return (
        [f"{where}picture wider than its output area: {p}" for p in notebook.oversized_pictures()]
        + [f"{where}clipped: {c}" for c in notebook.clipped()]
        + [f"{where}word broken mid-way: {w}" for w in notebook.broken_words()]
        + [f"{where}faint text: {t}" for t in notebook.faint_text()]
    )


def theme_problems(notebook: LabPage, theme: str) -> list[str]:
    """The layout problems of the outputs, and of every tab in turn, once switched to ``theme``."""
    notebook.set_theme(theme)
    problems = layout(notebook, f"[{theme}] ")
    for index in range(notebook.tab_count()):
        label = notebook.select_tab(index)
        problems += layout(notebook, f"[{theme}] [tab {label}] ")
    return problems


@pytest.mark.parametrize("name", PATHS)
def test_run_all_in_jupyterlab(
    lab: LabServer,
    lab_page: Page,
    name: str,
    screenshot: Callable[[Any, str], Path],
) -> None:
    path = f"light/{name}"
    notebook = LabPage(lab, lab_page, path)
    try:
        problems: list[str] = []
        for theme in THEMES:  # light first: Run All once, then the same outputs in the dark
            if theme == next(iter(THEMES)):
                notebook.open(theme)
                problems += run_all_problems(notebook, name)
            else:
                problems += theme_problems(notebook, theme)
            for view, tab, file_name in SHOTS.get((name, theme), []):
                if tab is not None:
                    lab_page.locator(".lm-TabBar-tab", has_text=tab).first.click()
                    lab_page.wait_for_timeout(600)
                shoot(lab_page, widget_views(lab_page).nth(view), file_name, screenshot)
        assert not problems, (
            f"{name} in JupyterLab (light, then dark, at 1280x800) has {len(problems)} "
            "problems:\n" + "\n".join(f"  - {p}" for p in problems)
        )
    finally:
        lab.shut_down_kernels(path)
