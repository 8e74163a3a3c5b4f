"""The details of one node of a run, as HTML: its attempts (number, start, end, status, duration),
each with the data document it started from, its output, its error with the whole traceback and
the lines it logged — grouped per attempt, and per cell for the body of a for_each.

HTML hooks: ``div.wfkit-node-details`` (``data-node``), one ``details.wfkit-attempt-details`` per
attempt (``data-attempt``, ``data-status``, ``data-cell``), inside it ``pre.wfkit-node-input``,
``pre.wfkit-node-output``, ``pre.wfkit-node-error`` and ``div.wfkit-node-log`` lines; cells are
``div.wfkit-node-cell`` (``data-cell``); attempts under way are ``div.wfkit-attempt-running``.
Colours come from JupyterLab's CSS variables with plain fallbacks.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from wfkit.engine import AttemptInfo, LogLine
from wfkit.widgets.timeline import short_span

__all__ = ["node_details_html"]

_STATUS_COLOURS = {
    "succeeded": "var(--jp-success-color1, #2e7d32)",
    "failed": "var(--jp-error-color1, #c62828)",
    "crashed": "var(--jp-error-color1, #c62828)",
    "compensation-failed": "var(--jp-error-color1, #c62828)",
    "cancelled": "var(--jp-ui-font-color2, #616161)",
    "abandoned": "var(--jp-warn-color1, #ef6c00)",
    "compensated": "#8e24aa",
    "running": "var(--jp-brand-color1, #1565c0)",
}
_STYLE = (
    "<style>"
    ".wfkit-node-details{font-size:12px;line-height:1.4;color:var(--jp-ui-font-color1,#222);"
    "border:1px solid var(--jp-border-color2,#ddd);border-radius:4px;padding:4px 8px;"
    "background:var(--jp-layout-color1,#fff);max-width:100%;box-sizing:border-box}"
    ".wfkit-node-details summary{cursor:pointer;line-height:1.6}"
    ".wfkit-node-details pre{font-family:var(--jp-code-font-family,monospace);font-size:12px;"
    "white-space:pre;overflow:auto;max-height:18em;margin:2px 0 6px 0;padding:4px 6px;"
    "background:var(--jp-layout-color2,#f5f5f5);color:var(--jp-content-font-color1,#222);"
    "border:1px solid var(--jp-border-color2,#ddd);border-radius:3px;line-height:1.35}"
    ".wfkit-node-details pre.wfkit-node-error{border-left:3px solid "
    "var(--jp-error-color1,#c62828)}"
    ".wfkit-node-io{display:flex;flex-wrap:wrap;gap:8px}"
    ".wfkit-node-io>div{flex:1 1 240px;min-width:0}"
    ".wfkit-node-details .wfkit-node-label{color:var(--jp-ui-font-color2,#555);font-weight:600}"
    ".wfkit-node-logs{display:grid;grid-template-columns:auto auto minmax(0,1fr);"
    "column-gap:10px;margin:2px 0 6px 0}"
    ".wfkit-node-log{display:contents}"
    ".wfkit-node-log .wfkit-node-message{white-space:pre-wrap;overflow-wrap:anywhere;"
    "font-family:var(--jp-code-font-family,monospace)}"
    ".wfkit-node-cell{margin:4px 0 4px 0}"
    "</style>"
)


def _json(value: Any) -> str:
    return html.escape(json.dumps(value, indent=2, default=str, ensure_ascii=False), quote=False)


def _time(at: Any) -> str:
    return f"{at:%H:%M:%S}.{at.microsecond // 1000:03d}"


def _summary(a: AttemptInfo) -> str:
    colour = _STATUS_COLOURS.get(a.status, "inherit")
    status = a.status + (", retried" if a.retried else "")
    when = (
        f"{_time(a.started_at)} → {_time(a.ended_at)}"
        if a.started_at is not None
        else f"ended {_time(a.ended_at)}"
    )
    took = f" ({short_span(a.seconds)})" if a.seconds is not None else ""
    return (
        f"<b>attempt {a.attempt}</b> · "
        f'<span class="wfkit-attempt-status" style="color:{colour};font-weight:600">'
        f"{html.escape(status)}</span> · {when}{took}"
    )


def _logs(lines: Sequence[LogLine]) -> str:
    if not lines:
        return ""
    rows = "".join(
        f'<div class="wfkit-node-log" data-level="{html.escape(line.level)}">'
        f"<span>{_time(line.at)}</span><span>{html.escape(line.level)}</span>"
        f'<span class="wfkit-node-message">{html.escape(line.message)}</span></div>'
        for line in lines
    )
    return f'<div class="wfkit-node-label">Logs</div><div class="wfkit-node-logs">{rows}</div>'


def _attempt(
    a: AttemptInfo, inputs: Mapping[int, Any], lines: Sequence[LogLine], is_open: bool
) -> str:
    parts = ['<div class="wfkit-node-io">']
    if a.input_seq in inputs:
        parts.append(
            f'<div><div class="wfkit-node-label">Input (data after event #{a.input_seq})</div>'
            f'<pre class="wfkit-node-input">{_json(inputs[a.input_seq])}</pre></div>'
        )
    if a.output is not None:
        parts.append(
            '<div><div class="wfkit-node-label">Output</div>'
            f'<pre class="wfkit-node-output">{_json(a.output)}</pre></div>'
        )
    parts.append("</div>")
    if a.error:
        parts.append(
            '<div class="wfkit-node-label">Error</div>'
            f'<pre class="wfkit-node-error">{html.escape(a.error.rstrip(), quote=False)}</pre>'
        )
    parts.append(_logs(lines))
    return (
        f'<details class="wfkit-attempt-details" data-attempt="{a.attempt}" '
        f'data-status="{html.escape(a.status)}" data-cell="{a.cell}"'
        f"{' open' if is_open else ''}><summary>{_summary(a)}</summary>{''.join(parts)}</details>"
    )


def _lines_of(a: AttemptInfo, logs: Sequence[LogLine]) -> list[LogLine]:
    return [line for line in logs if line.seq == a.seq and line.attempt == a.attempt]


def node_details_html(
    node_id: str,
    title: str,
    attempts: Sequence[AttemptInfo],
    logs: Sequence[LogLine],
    inputs: Mapping[int, Any],
    running: Sequence[tuple[int, tuple[int, ...]]] = (),
    *,
    limit: int = 20,
) -> str:
    """The details panel of ``node_id``.

    Parameters
    ----------
    node_id, title : str
        The node, and a line that names it (kind, activity).
    attempts : list of AttemptInfo
        Its ended attempts, oldest first (``run.attempts(node_id)``).
    logs : list of LogLine
        Its log lines (``run.logs(node_id)``); each goes with the attempt that recorded it.
    inputs : mapping
        ``input_seq -> data document`` for the attempts' inputs (``run.data_at``).
    running : list of (attempt, loop path)
        Its attempts ready or under way.
    limit : int
        How many of the latest attempts are shown (a line says how many were left out).
    """
    shown = list(attempts)[-limit:]
    cells: dict[str, list[AttemptInfo]] = {}
    for a in shown:
        cells.setdefault(a.cell, []).append(a)
    body: list[str] = []
    for cell, group in cells.items():
        items = "".join(
            _attempt(a, inputs, _lines_of(a, logs), a is group[-1] or a.status != "succeeded")
            for a in group
        )
        if cell:
            body.append(
                f'<div class="wfkit-node-cell" data-cell="{cell}">'
                f'<div class="wfkit-node-label">cell {cell}</div>{items}</div>'
            )
        else:
            body.append(items)
    for attempt, path in running:
        cell = ".".join(str(i) for i in path)
        where = f" (cell {cell})" if cell else ""
        body.append(
            f'<div class="wfkit-attempt-running" data-attempt="{attempt}" data-cell="{cell}">'
            f"<b>attempt {attempt}</b>{where} · "
            f'<span style="color:{_STATUS_COLOURS["running"]};font-weight:600">'
            "ready or running</span></div>"
        )
    if not body:
        body.append("<i>no attempts recorded for this node at this point</i>")
    left_out = len(attempts) - len(shown)
    more = f" · showing the last {len(shown)} of {len(attempts)} attempts" if left_out else ""
    return (
        f'{_STYLE}<div class="wfkit-node-details" data-node="{html.escape(node_id)}">'
        f"<div><b>{html.escape(node_id)}</b> · {html.escape(title)}{more}</div>"
        f"{''.join(body)}</div>"
    )
