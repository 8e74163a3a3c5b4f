"""The run monitor's tables: the event log (the current checkpoint's rows marked while stepping
through history) and the lines activities logged."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

from wfkit.engine import Event, LogLine

__all__ = ["events_html", "logs_html"]

_AFTER_CURRENT = 5  # events shown after the current checkpoint while stepping through history


def events_html(
    history: Sequence[Event],
    limit: int = 50,
    node: str | None = None,
    current: tuple[int, int] | None = None,
) -> str:
    """The last ``limit`` events (of ``node`` only, when given) as an HTML table, newest last.

    ``current`` (first and last seq of a checkpoint) marks its rows ``wfkit-event-current``;
    the table then ends a few events after it.
    """
    chosen = [e for e in history if node is None or e.node_id == node]
    if current is not None:
        chosen = [e for e in chosen if e.seq <= current[1]] + [
            e for e in chosen if e.seq > current[1]
        ][:_AFTER_CURRENT]
    chosen = chosen[-limit:]
    head = "".join(
        f"<th>{h}</th>" for h in ("#", "at", "event", "node", "attempt", "actor", "error / detail")
    )
    rows = []
    for e in chosen:
        error = (e.error or "").strip()
        last = error.splitlines()[-1] if error else ""
        detail = last or (json.dumps(e.detail, default=str) if e.detail else "")
        cells = (
            str(e.seq),
            f"{e.at:%H:%M:%S}",
            e.kind,
            e.node_id or "",
            "" if e.attempt is None else str(e.attempt),
            e.actor or "",
        )
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        mark = ""
        if current is not None and current[0] <= e.seq <= current[1]:
            mark = ' wfkit-event-current" aria-current="true'
        rows.append(
            f'<tr class="wfkit-event{mark}" data-kind="{html.escape(e.kind)}" data-seq="{e.seq}">'
            f"{tds}"
            f'<td class="wfkit-event-detail" title="{html.escape(error)}">'
            f"{html.escape(_clip(detail, 120))}</td></tr>"
        )
    scope = f" of {html.escape(node)}" if node else ""
    caption = f"<caption style='text-align:left'>last {len(chosen)} events{scope}</caption>"
    return (
        "<style>.wfkit-events td,.wfkit-events th{padding:1px 6px;text-align:left;line-height:1.35;"
        "white-space:nowrap;vertical-align:top}"
        ".wfkit-events td.wfkit-event-detail{white-space:normal;min-width:16em;"
        "overflow-wrap:anywhere}"
        ".wfkit-events tr.wfkit-event-current td{background:var(--jp-brand-color3,#bbdefb);"
        "color:var(--jp-ui-inverse-font-color0,#000)}"
        ".wfkit-events tr.wfkit-event-current td:first-child{box-shadow:inset 3px 0 0 "
        "var(--jp-brand-color1,#1565c0)}</style>"
        '<table class="wfkit-events" style="font-size:12px;border-collapse:collapse">'
        f"{caption}<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def logs_html(lines: Sequence[LogLine], limit: int = 50, node: str | None = None) -> str:
    """The last ``limit`` log lines (of ``node`` only, when given) as an HTML table, newest
    last; a long message is clipped, its whole text in the row's tooltip."""
    chosen = [line for line in lines if node is None or line.node_id == node][-limit:]
    head = "".join(f"<th>{h}</th>" for h in ("at", "level", "node", "attempt", "message"))
    rows = []
    for line in chosen:
        cell = ".".join(str(i) for i in line.loop_path)
        where = line.node_id + (f" [{cell}]" if cell else "")
        if line.activity and line.activity != line.node_id:
            where += f" ({line.activity})"
        cells = (f"{line.at:%H:%M:%S}", line.level, where, str(line.attempt))
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        rows.append(
            f'<tr class="wfkit-log" data-level="{html.escape(line.level)}" '
            f'data-node="{html.escape(line.node_id)}">{tds}'
            f'<td title="{html.escape(line.message)}" style="white-space:pre-wrap">'
            f"{html.escape(_clip(line.message, 300))}</td></tr>"
        )
    scope = f" of {html.escape(node)}" if node else ""
    caption = f"<caption style='text-align:left'>last {len(chosen)} log lines{scope}</caption>"
    return (
        "<style>.wfkit-logs td,.wfkit-logs th{padding:1px 6px;text-align:left;line-height:1.35;"
        "vertical-align:top}</style>"
        '<table class="wfkit-logs" style="font-size:12px;border-collapse:collapse">'
        f"{caption}<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
