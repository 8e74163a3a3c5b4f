"""Activities the tracing tests run on Dask worker processes (importable there by name)."""

from __future__ import annotations

import os
from typing import Any

from opentelemetry import trace

import wfkit as wf


def seen_trace(ctx: wf.ActivityContext[Any]) -> dict[str, Any]:
    """The trace and span the attempt runs under, as the worker process sees them."""
    span = trace.get_current_span().get_span_context()
    return {
        "trace_id": f"{span.trace_id:032x}",
        "span_id": f"{span.span_id:016x}",
        "pid": os.getpid(),
    }
