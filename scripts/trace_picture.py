"""Render a run's exported OpenTelemetry spans as a waterfall picture (plain SVG).

    python scripts/trace_picture.py [OUT.svg]

Runs a small order workflow (a step that fails once and is retried, an approval wait, a
for_each of three parcels) on a scratch DuckDB engine whose spans go to the
SDK's in-memory exporter, then draws one row per span, indented under its parent, on a common
time axis. The README's trace picture (docs/images/trace.svg) is made with it; ``waterfall``
renders any list of finished spans.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import wfkit as wf

ROW = 22
LABEL = 260
WIDTH = 900
COLOURS = {"run": "#4c72b0", "wait": "#c0c0c0", "compensate": "#dd8452", "error": "#c44e52"}


def _kind(span: ReadableSpan) -> str:
    if span.status.status_code == StatusCode.ERROR:
        return "error"
    return next((k for k in ("run", "wait", "compensate") if span.name.startswith(k)), "step")


def _ordered(spans: Sequence[ReadableSpan]) -> list[tuple[int, ReadableSpan]]:
    """(depth, span) in start order, each span right under its parent."""
    ids = {s.context.span_id for s in spans if s.context is not None}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent if parent in ids else None, []).append(span)
    found: list[tuple[int, ReadableSpan]] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: (s.start_time or 0, s.name)):
            found.append((depth, span))
            if span.context is not None:
                walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return found


def waterfall(spans: Sequence[ReadableSpan], title: str = "") -> str:
    """An SVG waterfall of ``spans``: one bar per span on a common time axis."""
    rows = _ordered(spans)
    start = min(s.start_time or 0 for _, s in rows)
    end = max(s.end_time or 0 for _, s in rows)
    scale = (WIDTH - LABEL - 60) / max(end - start, 1)
    height = ROW * (len(rows) + 2) + 10
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        'font-family="Helvetica, Arial, sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="8" y="16" font-weight="bold">{escape(title)}</text>',
    ]
    for i, (depth, span) in enumerate(rows):
        y = ROW * (i + 1) + 6
        x = LABEL + ((span.start_time or start) - start) * scale
        w = max(((span.end_time or end) - (span.start_time or start)) * scale, 2)
        ms = ((span.end_time or end) - (span.start_time or start)) / 1e6
        attributes = span.attributes or {}
        attempt, cell = attributes.get("wfkit.attempt"), attributes.get("wfkit.loop_index")
        label = span.name + (f" [{cell}]" if cell is not None else "")
        label += f" #{attempt}" if attempt and attempt != 1 else ""
        out.append(
            f'<text x="{8 + 14 * depth}" y="{y + 14}">{escape(label)}</text>'
            f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{ROW - 8}" rx="2" '
            f'fill="{COLOURS.get(_kind(span), "#55a868")}"/>'
            f'<text x="{x + w + 4:.1f}" y="{y + 14}" fill="#555">{ms:.0f} ms</text>'
        )
    trace_id = next(s.context.trace_id for _, s in rows if s.context is not None)
    out.append(
        f'<text x="8" y="{height - 8}" fill="#777">trace {trace_id:032x} · {len(rows)} spans · '
        f"{(end - start) / 1e6:.0f} ms</text>"
    )
    out.append("</svg>")
    return "\n".join(out)


def demo_spans() -> list[ReadableSpan]:
    """The spans of one run of a small order workflow, as the in-memory exporter got them."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reg = wf.ActivityRegistry()
    tries = {"charge": 0}

    def pause(seconds: float) -> Any:
        def body(ctx: wf.ActivityContext[Any]) -> None:
            time.sleep(seconds)

        return body

    def charge(ctx: wf.ActivityContext[Any]) -> None:
        time.sleep(0.03)
        tries["charge"] += 1
        if tries["charge"] == 1:
            raise ConnectionError("payment gateway timed out")

    reg.register("order.validate", pause(0.02))
    reg.register("order.charge", charge)
    reg.register("order.pack", pause(0.04))
    reg.register("order.ship", pause(0.03))
    flow = (
        wf.Workflow("order", 1)
        .start_with("order.validate")
        .then("order.charge", max_attempts=3, retry_delay="0s", jitter=0)
        .approval("review")
        .for_each("parcels", lambda b: b.then("order.pack"))
        .then("order.ship")
    )
    with tempfile.TemporaryDirectory() as tmp:
        engine = wf.Engine(Path(tmp) / "runs.duckdb", registry=reg, tracer_provider=provider)
        engine.register(flow)
        run = engine.start("order", {"parcels": ["p1", "p2", "p3"]})
        engine.run_until_idle()
        time.sleep(0.15)  # someone looks at the order
        engine.approve(run.id, "review", actor="ana")
        engine.run_until_idle()
        assert run.status == wf.RunStatus.COMPLETED, run.status
        engine.close()
    return list(exporter.get_finished_spans())


def main(argv: list[str]) -> None:
    out = Path(argv[0] if argv else "docs/images/trace.svg")
    out.write_text(waterfall(demo_spans(), "A run of 'order' v1, as its spans were exported"))
    print(out)


if __name__ == "__main__":
    main(sys.argv[1:])
