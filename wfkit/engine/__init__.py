"""The engine: scheduler, writer, node semantics (one module per family), clock and handles.

It imports the definition and store layers, never the API or widgets.
"""

from __future__ import annotations

from wfkit.engine.admission import DefinitionInfo
from wfkit.engine.artifacts import Artifact, ArtifactRef
from wfkit.engine.attempts import AttemptInfo
from wfkit.engine.cancellation import CancelResult
from wfkit.engine.clock import Clock, ManualClock, SystemClock
from wfkit.engine.engine import Engine
from wfkit.engine.handles import Run
from wfkit.engine.logs import LogLine
from wfkit.engine.records import Event, RunInfo, RunStatus, RunView, TokenView, WaitInfo
from wfkit.engine.replay import StoredCheckpoint
from wfkit.engine.retention import ArchiveReport, Retention
from wfkit.engine.transactions import Transaction
from wfkit.engine.vocabulary import EventKind, NodeStatus, TokenState, WaitKind

__all__ = [
    "ArchiveReport",
    "Artifact",
    "ArtifactRef",
    "AttemptInfo",
    "CancelResult",
    "Clock",
    "DefinitionInfo",
    "Engine",
    "Event",
    "EventKind",
    "LogLine",
    "ManualClock",
    "NodeStatus",
    "Retention",
    "Run",
    "RunInfo",
    "RunStatus",
    "RunView",
    "StoredCheckpoint",
    "SystemClock",
    "TokenState",
    "TokenView",
    "Transaction",
    "WaitInfo",
    "WaitKind",
]
