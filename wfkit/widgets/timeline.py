"""The timeline of a run: one row per node, one bar per attempt, drawn as plain SVG.

Bars come from the run's history: an attempt runs from its ``started_at`` to the time of the
event that ended it (``step.completed``, ``step.failed``, ``compensation.*``), coloured by
outcome. Waits and delays are drawn as thin amber spans; attempts still in flight run to "now".
Parallel attempts of one node (for_each items) are stacked in lanes.

SVG hooks: every attempt bar is a ``<rect class="wfkit-attempt wfkit-attempt-<outcome>">`` with
``data-node`` and ``data-attempt``; waits are ``<rect class="wfkit-wait ...">``; row names are
``<text class="wfkit-timeline-row">``, the title ``wfkit-timeline-title``, tick labels
``wfkit-timeline-tick``.

Text and lines follow the front end's theme: each carries a plain colour as its ``fill`` or
``stroke`` attribute and, in its ``style``, JupyterLab's CSS variable with that colour as the
fallback (``fill:var(--jp-ui-font-color1,#222222)``), so JupyterLab's dark theme draws light
text, other front ends the plain colour, and a renderer without CSS variables the attribute.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from wfkit.engine import Event
from wfkit.engine.vocabulary import EventKind, NodeStatus

__all__ = ["COLOURS", "Span", "short_span", "spans_of", "timeline_svg"]

COLOURS: dict[str, str] = {
    NodeStatus.SUCCEEDED.value: "#43a047",
    NodeStatus.FAILED.value: "#e53935",
    NodeStatus.COMPENSATED.value: "#8e24aa",
    "compensation-failed": "#ad1457",
    NodeStatus.RUNNING.value: "#1e88e5",
    NodeStatus.WAITING.value: "#ffb300",
    "waited": "#ffe082",
}
"""Fill colour of a bar by outcome."""

_ENDS: dict[str, tuple[str, str]] = {
    EventKind.STEP_COMPLETED: ("attempt", NodeStatus.SUCCEEDED.value),
    EventKind.STEP_FAILED: ("attempt", NodeStatus.FAILED.value),
    EventKind.COMPENSATION_COMPLETED: ("attempt", NodeStatus.COMPENSATED.value),
    EventKind.COMPENSATION_FAILED: ("attempt", "compensation-failed"),
}
_WAIT_STARTS = (
    EventKind.SIGNAL_WAITING,
    EventKind.APPROVAL_WAITING,
    EventKind.DELAY_STARTED,
    EventKind.CALL_STARTED,
    EventKind.RUN_RETRYING,  # the failed run waits for its next attempt
)
_WAIT_ENDS = (
    EventKind.CALL_COMPLETED,
    EventKind.CALL_FAILED,
    EventKind.SIGNAL_RECEIVED,
    EventKind.SIGNAL_ELAPSED,
    EventKind.APPROVAL_APPROVED,
    EventKind.APPROVAL_REJECTED,
    EventKind.APPROVAL_EXPIRED,
    EventKind.TIMER_FIRED,
    EventKind.RUN_RETRIED,
)
_RUN_ENDS = (EventKind.RUN_COMPLETED, EventKind.RUN_FAILED, EventKind.RUN_CANCELLED)

INK = ("--jp-ui-font-color1", "#222222")
"""Row names and the title: the theme's main text colour."""
INK_SOFT = ("--jp-ui-font-color2", "#555555")
"""Tick labels and the empty picture's words."""
RULE = ("--jp-border-color2", "#dddddd")
"""Tick lines."""
RULE_SOFT = ("--jp-border-color3", "#eeeeee")
"""The line under each row."""

LABEL_WIDTH = 150
LANE_HEIGHT = 16
ROW_GAP = 6
MAX_LANES = 6
AXIS_HEIGHT = 26


@dataclass(frozen=True)
class Span:
    """One bar: an attempt (``kind="attempt"``) or a wait (``kind="wait"``) of one node."""

    node_id: str
    kind: str
    outcome: str
    start: datetime
    end: datetime
    attempt: int | None = None
    loop_index: int | None = None
    error: str | None = None
    loop_path: tuple[int, ...] = ()  # every enclosing for_each index, outermost first

    @property
    def seconds(self) -> float:
        """How long the bar lasts."""
        return max((self.end - self.start).total_seconds(), 0.0)


def spans_of(
    history: Sequence[Event],
    now: datetime,
    in_flight: Mapping[str, tuple[str, int]] | None = None,
) -> list[Span]:
    """The bars of a run's history, in the order they started.

    Parameters
    ----------
    history : list of Event
        ``run.history()``, oldest first.
    now : datetime
        Where open bars (attempts in flight, open waits) end.
    in_flight : mapping, optional
        ``token id -> (node id, attempt)`` of steps ready or running now; each gets a
        ``running`` bar from the token's last event.
    """
    spans: list[Span] = []
    open_waits: dict[str | None, tuple[Event, str]] = {}
    last_at: dict[str | None, datetime] = {}
    end_of_run = None
    for e in history:
        if e.kind in _ENDS and e.node_id is not None and (e.attempt or e.started_at):
            kind, outcome = _ENDS[e.kind]
            spans.append(
                Span(
                    e.node_id,
                    kind,
                    outcome,
                    e.started_at or e.at,
                    e.at,
                    e.attempt,
                    (e.detail or {}).get("loop_index"),
                    _last_line(e.error),
                    tuple((e.detail or {}).get("loop_path") or ()),
                )
            )
        elif e.kind in _WAIT_STARTS and e.node_id is not None:
            open_waits[e.token] = (e, e.node_id)
        elif e.kind in _WAIT_ENDS and e.token in open_waits:
            began, node = open_waits.pop(e.token)
            spans.append(Span(node, "wait", "waited", began.at, e.at))
        elif e.kind in _RUN_ENDS:
            end_of_run = e.at
        last_at[e.token] = e.at
    for began, node in open_waits.values():
        spans.append(Span(node, "wait", NodeStatus.WAITING.value, began.at, end_of_run or now))
    for token, (node, attempt) in (in_flight or {}).items():
        start = last_at.get(token, history[0].at if history else now)
        spans.append(
            Span(node, "attempt", NodeStatus.RUNNING.value, start, max(now, start), attempt)
        )
    return sorted(spans, key=lambda s: s.start)


def _last_line(text: str | None) -> str | None:
    if not text:
        return None
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else None


def short_span(seconds: float) -> str:
    """A duration in few characters: ``'0.25s'``, ``'12s'``, ``'3m20s'``, ``'2h5m'``, ``'1d2h'``.

    Examples
    --------
    >>> [short_span(s) for s in (0.25, 12, 200, 7500, 93600)]
    ['0.25s', '12s', '3m20s', '2h5m', '1d2h']
    """
    if seconds < 10:
        return f"{seconds:.3g}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"


def _lanes(spans: Iterable[Span], x: dict[int, tuple[float, float]]) -> dict[int, int]:
    """A lane per bar so that bars of one row do not overlap (at most ``MAX_LANES``)."""
    ends: list[float] = []
    lane_of: dict[int, int] = {}
    for i, _span in sorted(((id(s), s) for s in spans), key=lambda p: x[p[0]][0]):
        left, right = x[i]
        free = [n for n, end in enumerate(ends) if end <= left + 0.5]  # touching is fine
        if free:
            lane = free[0]
        elif len(ends) < MAX_LANES:
            ends.append(0.0)
            lane = len(ends) - 1
        else:
            lane = min(range(len(ends)), key=ends.__getitem__)
        ends[lane] = right
        lane_of[i] = lane
    return lane_of


def timeline_svg(spans: Sequence[Span], *, width: int = 760, title: str = "") -> str:
    """The Gantt picture of ``spans`` as SVG text (no external resources).

    Examples
    --------
    >>> from datetime import datetime, timedelta
    >>> t = datetime(2026, 1, 1)
    >>> svg = timeline_svg([Span("ship", "attempt", "failed", t, t + timedelta(seconds=2), 1),
    ...                     Span("ship", "attempt", "succeeded", t + timedelta(seconds=3),
    ...                          t + timedelta(seconds=4), 2)])
    >>> svg.count('class="wfkit-attempt ')
    2
    """
    if not spans:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="wfkit-timeline-svg" width="{width}" '
            f'height="30"><text x="4" y="20" font-family="sans-serif" font-size="12" '
            f"{_paint('fill', INK_SOFT)}>no attempts yet</text></svg>"
        )
    t0 = min(s.start for s in spans)
    seconds = max((max(s.end for s in spans) - t0).total_seconds(), 1e-3)
    plot = width - LABEL_WIDTH - 10

    def px(at: datetime) -> float:
        return LABEL_WIDTH + (at - t0).total_seconds() / seconds * plot

    x = {id(s): (px(s.start), max(px(s.end), px(s.start) + 3)) for s in spans}
    rows: dict[str, list[Span]] = {}
    for s in spans:
        rows.setdefault(s.node_id, []).append(s)
    parts: list[str] = []
    y = AXIS_HEIGHT
    for node, row in rows.items():
        lanes = _lanes(row, x)
        height = (max(lanes.values()) + 1) * LANE_HEIGHT
        parts.append(
            f'<text class="wfkit-timeline-row" x="4" y="{y + min(height, LANE_HEIGHT) - 4}" '
            f'font-size="11" {_paint("fill", INK)}>{html.escape(_clip(node, 22))}'
            f"<title>{html.escape(node)}</title></text>"
        )
        parts.append(
            f'<line x1="{LABEL_WIDTH}" x2="{width - 10}" y1="{y + height + ROW_GAP / 2}" '
            f'y2="{y + height + ROW_GAP / 2}" {_paint("stroke", RULE_SOFT)}/>'
        )
        for s in row:
            parts.append(_bar(s, x[id(s)], y + lanes[id(s)] * LANE_HEIGHT))
        y += height + ROW_GAP
    axis = _axis(t0, seconds, plot, y)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="wfkit-timeline-svg" width="{width}" '
        f'height="{y + 4}" font-family="DejaVu Sans, sans-serif">'
    )
    label = f"{title} · " if title else ""
    caption = (
        f'<text class="wfkit-timeline-title" x="4" y="12" font-size="11" '
        f"{_paint('fill', INK)}>{html.escape(label)}"
        f"from {t0:%Y-%m-%d %H:%M:%S} · {short_span(seconds)}</text>"
    )
    return head + caption + axis + "".join(parts) + "</svg>"


def _paint(attribute: str, colour: tuple[str, str]) -> str:
    """``fill="#222222" style="fill:var(--jp-ui-font-color1,#222222)"`` (see the module doc)."""
    variable, plain = colour
    return f'{attribute}="{plain}" style="{attribute}:var({variable},{plain})"'


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _axis(t0: datetime, seconds: float, plot: float, bottom: int) -> str:
    ticks = []
    for i in range(5):
        frac = i / 4
        xpos = LABEL_WIDTH + frac * plot
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        ticks.append(
            f'<line x1="{xpos:.1f}" x2="{xpos:.1f}" y1="{AXIS_HEIGHT - 4}" y2="{bottom}" '
            f"{_paint('stroke', RULE)}/>"
            f'<text class="wfkit-timeline-tick" x="{xpos:.1f}" y="{AXIS_HEIGHT - 6}" '
            f'font-size="9" {_paint("fill", INK_SOFT)} '
            f'text-anchor="{anchor}">+{short_span(frac * seconds)}</text>'
        )
    return "".join(ticks)


def _bar(s: Span, x: tuple[float, float], y: float) -> str:
    left, right = x
    if s.kind == "wait":
        cls, top, height = f"wfkit-wait wfkit-wait-{s.outcome}", y + 5, LANE_HEIGHT - 10
    else:
        cls, top, height = f"wfkit-attempt wfkit-attempt-{s.outcome}", y + 2, LANE_HEIGHT - 4
    what = f"{s.node_id} attempt {s.attempt}" if s.attempt else s.node_id
    if len(s.loop_path) > 1:  # nested for_each: the whole cell, "1.0"
        what += f" (item {'.'.join(map(str, s.loop_path))})"
    elif s.loop_index is not None:
        what += f" (item {s.loop_index})"
    tip = f"{what}: {s.outcome} after {short_span(s.seconds)}"
    if s.error:
        tip += f" — {s.error}"
    return (
        f'<rect class="{cls}" data-node="{html.escape(s.node_id)}" '
        f'data-attempt="{s.attempt or ""}" x="{left:.1f}" y="{top:.1f}" '
        f'width="{right - left:.1f}" height="{height}" rx="2" fill="{COLOURS[s.outcome]}">'
        f"<title>{html.escape(tip)}</title></rect>"
    )
