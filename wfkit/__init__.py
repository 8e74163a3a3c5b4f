"""wfkit: durable workflows for Jupyter, defined as networkx graphs.

Build a workflow with the builder verbs or as a ``networkx.MultiDiGraph``, validate it, and draw
it with Graphviz::

    import wfkit as wf

    flow = (wf.Workflow("onboarding", version=1, data=OnboardingData)
            .start_with("accounts.create")
            .if_("needs_approval",
                 then=lambda b: b.wait_for_signal("approval", correlate="customer_id",
                                                  bind={"approved": "is_approved"},
                                                  timeout="3d"))
            .then("mail.welcome"))
    flow.validate()
    flow.render("onboarding.svg")
"""

from __future__ import annotations

from wfkit.definition.activities import (
    ActivityContext,
    ActivityRegistry,
    Cancelled,
    Fallback,
    activity,
    default_registry,
)
from wfkit.definition.builder import AtLeast, Steps, at_least
from wfkit.definition.durations import Duration, format_duration, parse_duration
from wfkit.definition.kinds import Node, NodeKind, outlets_of
from wfkit.definition.policy import OnFailure, Policy, SagaPolicy
from wfkit.definition.problems import Problem, Severity
from wfkit.definition.rendering import RenderingUnavailable
from wfkit.definition.run_retry import RunRetry
from wfkit.definition.validation import DEFAULT_MAX_PAYLOAD, validate, validate_data
from wfkit.definition.workflow import Workflow
from wfkit.engine import (
    ArchiveReport,
    Artifact,
    ArtifactRef,
    AttemptInfo,
    CancelResult,
    DefinitionInfo,
    Engine,
    Event,
    EventKind,
    LogLine,
    ManualClock,
    NodeStatus,
    Retention,
    Run,
    RunInfo,
    RunStatus,
    RunView,
    StoredCheckpoint,
    TokenState,
    TokenView,
    Transaction,
    WaitInfo,
    WaitKind,
)
from wfkit.engine.dask_executor import DaskExecutor
from wfkit.errors import (
    AdmissionError,
    ArtifactError,
    DefinitionError,
    ExpressionError,
    SignalError,
    StoreError,
    UsageError,
    VisitLimitExceeded,
    WfkitError,
    WorkflowFailed,
)
from wfkit.store.results import StatementResult

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # the notebook widgets load ipywidgets and anywidget: only when first used (wf.widgets.X)
    if name == "widgets":
        import importlib

        return importlib.import_module("wfkit.widgets")
    raise AttributeError(f"module 'wfkit' has no attribute {name!r}")


__all__ = [
    "DEFAULT_MAX_PAYLOAD",
    "ActivityContext",
    "ActivityRegistry",
    "AdmissionError",
    "ArchiveReport",
    "Artifact",
    "ArtifactError",
    "ArtifactRef",
    "AtLeast",
    "AttemptInfo",
    "CancelResult",
    "Cancelled",
    "DaskExecutor",
    "DefinitionError",
    "DefinitionInfo",
    "Duration",
    "Engine",
    "Event",
    "EventKind",
    "ExpressionError",
    "Fallback",
    "LogLine",
    "ManualClock",
    "Node",
    "NodeKind",
    "NodeStatus",
    "OnFailure",
    "Policy",
    "Problem",
    "RenderingUnavailable",
    "Retention",
    "Run",
    "RunInfo",
    "RunRetry",
    "RunStatus",
    "RunView",
    "SagaPolicy",
    "Severity",
    "SignalError",
    "StatementResult",
    "Steps",
    "StoreError",
    "StoredCheckpoint",
    "TokenState",
    "TokenView",
    "Transaction",
    "UsageError",
    "VisitLimitExceeded",
    "WaitInfo",
    "WaitKind",
    "WfkitError",
    "Workflow",
    "WorkflowFailed",
    "activity",
    "at_least",
    "default_registry",
    "format_duration",
    "outlets_of",
    "parse_duration",
    "validate",
    "validate_data",
]
