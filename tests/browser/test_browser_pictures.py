"""Workflow pictures as a notebook front end shows their HTML output, in a real browser: the SVG
fits an 850 px output area, keeps its tooltips, and a click toggles its natural size; a saved
static picture (what a notebook opened without its kernel shows) reads the same way.

No server is needed: the page is the output HTML itself, inside a box as wide as JupyterLab's
output area at 1280x800.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

import wfkit as wf
from wfkit.definition.pictures import static_picture

pytestmark = [pytest.mark.browser, pytest.mark.slow]

OUTPUT_AREA = 848  # px: JupyterLab 4's output area at 1280x800 with the file browser open


def show(page: Page, html: str) -> None:
    page.set_content(f'<div id="output" style="width:{OUTPUT_AREA}px">{html}</div>')


def long_flow() -> wf.Workflow:
    flow = wf.Workflow("long", 1).start_with("s0")
    for i in range(1, 20):
        flow = flow.then(f"s{i}")
    return flow


def width(page: Page) -> float:
    return float(page.locator("#output svg").evaluate("s => s.getBoundingClientRect().width"))


def test_a_long_workflow_fits_the_output_area_keeps_tooltips_and_zooms_on_click(
    page: Page,
) -> None:
    show(page, long_flow()._repr_mimebundle_()["text/html"])

    assert width(page) <= OUTPUT_AREA
    assert page.locator("#output").evaluate("o => o.scrollWidth") <= OUTPUT_AREA
    tips = page.locator("#output svg g.node a").evaluate_all(
        "links => links.map(a => a.getAttributeNS('http://www.w3.org/1999/xlink', 'title'))"
    )
    assert "start (start)" in tips and len(tips) == 20 + 1  # 20 steps and the start
    ratio = page.locator("#output svg").evaluate(
        "s => s.clientWidth / s.clientHeight"  # inside its 1 px border
    )
    box = page.locator("#output svg").evaluate(
        "s => s.viewBox.baseVal.width / s.viewBox.baseVal.height"
    )
    assert ratio == pytest.approx(box, rel=0.02)  # scaled, not squeezed

    page.locator("#output svg").click()
    assert width(page) > 1.5 * OUTPUT_AREA  # its natural size, scrolled sideways
    view = page.locator(".wfkit-picture-view")
    assert view.evaluate("v => v.scrollWidth > v.clientWidth && v.clientWidth <= 848")
    page.locator("#output svg").click()
    assert width(page) <= OUTPUT_AREA


def test_a_small_workflow_keeps_its_natural_size(page: Page) -> None:
    show(page, wf.Workflow("tiny", 1).start_with("a")._repr_mimebundle_()["text/html"])
    assert 100 < width(page) < OUTPUT_AREA / 2


def test_a_saved_static_picture_shows_status_colours_without_a_kernel(page: Page) -> None:
    flow = wf.Workflow("orders", 1).start_with("orders.check").then("card.charge")
    html = static_picture(flow.to_svg(), {"orders.check": "succeeded"}, fallback_for="k1")
    show(page, html)

    node = page.locator("#output g.node.succeeded")
    expect(node).to_have_count(1)
    fill = node.locator("path, polygon, ellipse").first.evaluate("e => getComputedStyle(e).fill")
    assert fill == "rgb(200, 230, 201)"  # the RunMonitor's succeeded colour, #c8e6c9
    expect(page.locator(".wfkit-picture-caption")).to_contain_text("run the cell")
    assert width(page) <= OUTPUT_AREA
