"""The engine: scheduler, writer, node semantics (one module per family), clock and handles.

It imports the definition and store layers, never the API or widgets.
"""

from __future__ import annotations

from wfkit.engine.clock import Clock, ManualClock, SystemClock
from wfkit.engine.engine import Engine
from wfkit.engine.handles import Run
from wfkit.engine.records import Event, RunInfo, RunStatus, RunView, WaitInfo
from wfkit.engine.transactions import Transaction

__all__ = [
    "Clock",
    "Engine",
    "Event",
    "ManualClock",
    "Run",
    "RunInfo",
    "RunStatus",
    "RunView",
    "SystemClock",
    "Transaction",
    "WaitInfo",
]
