"""Workflow pictures in notebook output: inline SVG that fits the output area, keeps tooltips."""

from __future__ import annotations

import re

import wfkit as wf
from wfkit.definition.pictures import inline_svg, picture_html, static_picture


def long_flow(steps: int = 20) -> wf.Workflow:
    flow = wf.Workflow("long", 1).start_with("s0")
    for i in range(1, steps):
        flow = flow.then(f"s{i}")
    return flow


def test_a_workflow_displays_as_html_first_with_the_svg_inline() -> None:
    bundle = long_flow()._repr_mimebundle_()

    assert list(bundle) == ["text/plain", "text/html", "image/svg+xml"]
    html = bundle["text/html"]
    opening = re.search(r"<svg\b[^>]*>", html)
    assert opening is not None
    tag = opening.group(0)
    assert "viewBox=" in tag and "height=" not in tag.replace("height: auto", "")
    assert 'style="max-width: 100%; height: auto"' in tag
    assert "<?xml" not in html and "<!DOCTYPE" not in html
    # the tooltips a reader hovers: every node's <a xlink:title> survives
    assert html.count("xlink:title=") == bundle["image/svg+xml"].count("xlink:title=")
    assert 'xlink:title="start (start)"' in html


def test_the_natural_width_stays_the_largest_so_a_small_graph_is_not_blown_up() -> None:
    svg = wf.Workflow("tiny", 1).start_with("a").to_svg()
    width = re.search(r'<svg width="([0-9.]+)pt"', svg)
    assert width is not None
    assert f'<svg width="{width.group(1)}pt"' in inline_svg(svg)


def test_the_picture_toggles_between_fit_and_natural_size_without_script() -> None:
    html = picture_html(long_flow(3).to_svg())
    assert "<script" not in html
    assert 'class="wfkit-picture-toggle"' in html
    assert ".wfkit-picture-toggle:checked + .wfkit-picture-view svg" in html


def test_a_static_picture_marks_status_on_ids_with_dashes_and_dots() -> None:
    flow = wf.Workflow("ids", 1).start_with("card.charge-2")
    html = static_picture(flow.to_svg(), {"card.charge-2": "failed", "start": "succeeded"})
    assert len(re.findall(r'class="node[^"]* failed"', html)) == 1
    assert len(re.findall(r'class="node succeeded"', html)) == 1
    assert "data-wfkit-fallback" not in html
