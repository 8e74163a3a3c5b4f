"""Workflow pictures as notebook output: inline SVG that fits the output area and keeps tooltips.

JupyterLab, Notebook 7 and VS Code show an ``image/svg+xml`` output as an ``<img>``: drawn at
the size Graphviz wrote (a long workflow runs past the output area) and without the hover
tooltips the picture carries. A ``text/html`` output holding the ``<svg>`` element itself keeps
every ``<title>`` and ``xlink:title`` and scales with CSS, so that is what :func:`picture_html`
writes: the picture at its natural size, scaled down to the output width
(``max-width: 100%; height: auto``, the ``viewBox`` kept), and a click on it toggles between
that fit and its natural size with a horizontal scrollbar, so a large graph stays legible.

:func:`static_picture` also writes node status as CSS classes on the node groups (the classes a
live :class:`~wfkit.widgets.surface.GraphSurface` uses) with the style sheet that colours them,
so a run's picture can be saved in a notebook and read without a kernel.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from importlib import resources

__all__ = ["PICTURE_CSS", "inline_svg", "picture_html", "static_picture"]

PICTURE_CSS = resources.files("wfkit.definition").joinpath("picture.css").read_text("utf-8")
"""Styles of a picture shown in HTML: fit and full size, and the status colours of its nodes."""

_EMBEDDED_CSS = re.sub(
    r"\s*\n\s*", " ", re.sub(r"/\*.*?\*/", "", PICTURE_CSS, flags=re.DOTALL)
).strip()
"""The style sheet as written into each output: comments and line breaks dropped."""
_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
_SVG_TAG = re.compile(r"<svg\b[^>]*>")
_HEIGHT = re.compile(r'\sheight="[^"]*"')
_NODE_GROUP = re.compile(r'<g id="node&#45;(?P<id>[^"]*)" class="(?P<cls>[^"]*)"')
_IDS = re.compile(r'\sid="[^"]*"')


def inline_svg(svg: str) -> str:
    """Graphviz SVG ready to sit inside HTML and shrink to the width it is given.

    The XML prolog, doctype and comments before ``<svg>`` go; the ``height`` attribute goes, so
    the height follows the width through the ``viewBox``; the ``width`` stays as the largest
    size (a small graph is never blown up) and ``max-width: 100%; height: auto`` fit it.

    Examples
    --------
    >>> inline_svg('<?xml version="1.0"?><svg width="90pt" height="30pt" viewBox="0 0 90 30">'
    ...            '</svg>')
    '<svg width="90pt" viewBox="0 0 90 30" style="max-width: 100%; height: auto"></svg>'
    """
    body = _PROLOG.sub("", svg, count=1).strip()

    def opening(match: re.Match[str]) -> str:
        tag = _HEIGHT.sub("", match.group(0), count=1)
        return tag[:-1].rstrip() + ' style="max-width: 100%; height: auto">'

    return _SVG_TAG.sub(opening, body, count=1)


def static_picture(
    svg: str,
    status: Mapping[str, str] | None = None,
    *,
    fallback_for: str = "",
) -> str:
    """HTML of ``svg`` with each node's ``status`` as a class, for a picture saved in a notebook.

    Element ids are dropped (the live picture on the same page uses them). ``fallback_for``
    marks it as the stand-in of a widget view (``data-wfkit-fallback``), which that view hides
    once it is live.
    """
    status = status or {}

    def classes(match: re.Match[str]) -> str:
        node = html.unescape(match.group("id")).replace("&#45;", "-")
        state = status.get(node, "")
        extra = f" {html.escape(state)}" if state else ""
        return f'<g id="node&#45;{match.group("id")}" class="{match.group("cls")}{extra}"'

    marked = _NODE_GROUP.sub(classes, svg)
    return picture_html(_IDS.sub("", marked), fallback_for=fallback_for)


def picture_html(svg: str, *, fallback_for: str = "") -> str:
    """The notebook output of a picture: inline SVG that fits, click to toggle natural size.

    Parameters
    ----------
    svg : str
        SVG text as Graphviz writes it.
    fallback_for : str
        When given, the picture stands in for the widget view with this key.

    Returns
    -------
    str
        An HTML fragment with its style sheet (``.wfkit-picture``).
    """
    marker = f' data-wfkit-fallback="{html.escape(fallback_for)}"' if fallback_for else ""
    caption = (
        '<div class="wfkit-picture-caption">Picture saved with the notebook: run the cell for '
        "the live widget.</div>"
        if fallback_for
        else ""
    )
    return (
        f'<div class="wfkit-picture wfkit-graph"{marker}><style>{_EMBEDDED_CSS}</style>'
        '<label class="wfkit-picture-frame" title="click: fit to width / natural size">'
        '<input type="checkbox" class="wfkit-picture-toggle">'
        f'<div class="wfkit-picture-view">{inline_svg(svg)}</div></label>{caption}</div>'
    )
