"""Request and response bodies of the HTTP API (pydantic models; the OpenAPI schema is theirs)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, field_validator

from wfkit.definition.durations import parse_duration
from wfkit.engine import Event, RunInfo, RunStatus, WaitInfo

__all__ = [
    "ApprovalRequest",
    "CancelOutcome",
    "CancelRequest",
    "EventOut",
    "FieldError",
    "Health",
    "Problem",
    "RecoverRequest",
    "RestartRequest",
    "ResumeRequest",
    "RetryRequest",
    "RunChange",
    "RunDetail",
    "RunList",
    "RunSummary",
    "SignalRequest",
    "SignalResult",
    "StartRequest",
    "StartedRun",
    "VersionOut",
    "WaitList",
    "WaitOut",
    "WorkflowVersions",
]

Actor = Annotated[
    str, Field(min_length=1, max_length=200, description="Who did it; recorded in the history.")
]
OptionalActor = Annotated[
    str | None, Field(default=None, max_length=200, description="Who did it, if known.")
]


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


Moment = Annotated[datetime, AfterValidator(_utc)]
"""A time the engine recorded (naive UTC), sent with its zone as RFC 3339 requires."""


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- errors --------------------------------------------------------------------------------------


class FieldError(BaseModel):
    """One invalid part of a request."""

    loc: list[str | int] = Field(description="Where: e.g. ['body', 'payload', 'amount'].")
    msg: str = Field(description="What is wrong with it.")
    type: str = Field(description="A short code for the kind of error.")


class Problem(BaseModel):
    """An RFC 9457 problem document: every error response has this shape."""

    type: str = Field(
        default="about:blank", description="Names the kind of problem (urn:wfkit:problem:...)."
    )
    title: str = Field(description="The HTTP status phrase.")
    status: int = Field(description="The HTTP status code.")
    detail: str = Field(description="What happened and what to do next.")
    instance: str | None = Field(default=None, description="The request path.")
    errors: list[FieldError] | None = Field(default=None, description="Each invalid field.")
    reasons: list[str] | None = Field(default=None, description="Each reason a run was refused.")


# --- requests -----------------------------------------------------------------------------------


class SignalRequest(_Request):
    """A signal for the wait on ``name`` (and ``key``)."""

    payload: dict[str, Any] = Field(
        default_factory=dict, description="JSON object; checked against the wait's model."
    )
    actor: OptionalActor = None
    post_if_absent: bool = Field(
        default=False,
        description="When nothing waits yet, keep the signal for the next matching wait.",
    )
    expires: str | None = Field(
        default="1d",
        max_length=40,
        description="How long a kept signal is kept ('90s', '7d', '1h30m'); null for ever.",
    )

    @field_validator("expires")
    @classmethod
    def _a_duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)  # ValueError says how to write one
        return value


class ApprovalRequest(_Request):
    """The decision on an open approval."""

    approved: bool = Field(description="True continues the run; false takes 'rejected'.")
    actor: Actor
    comment: str | None = Field(default=None, max_length=2000)
    # strict: JSON true or "0" is refused, not read as 1 or 0 (another item's approval)
    loop_path: list[Annotated[StrictInt, Field(ge=0)]] | None = Field(
        default=None,
        max_length=64,
        description="Inside a for_each: the item whose approval is decided (its indexes, "
        "outermost first, as /waiting shows them: whole numbers of 0 or more, not text or "
        "true/false); null decides the oldest open one.",
    )


class CancelRequest(_Request):
    """Who cancels a run, and why."""

    actor: Actor
    reason: str = Field(default="", max_length=2000)


class ResumeRequest(_Request):
    """Who resumes a suspended run."""

    actor: Actor


class RecoverRequest(_Request):
    """The operator's decision on a failed compensation."""

    action: Literal["retry", "skip", "abandon"] = Field(
        description="retry the compensation, skip it (recorded as a decision), or abandon the "
        "unwind (the run fails as it stands)."
    )
    actor: Actor


class RetryRequest(_Request):
    """Who tries a failed run again (from where it failed)."""

    actor: Actor


class RestartRequest(_Request):
    """Who restarts a finished run as a new one."""

    actor: Actor


class StartRequest(_Request):
    """A new run of a registered workflow."""

    workflow: str = Field(min_length=1, max_length=200, description="The workflow id.")
    version: int | None = Field(
        default=None, ge=1, description="The version; the latest when left out."
    )
    data: dict[str, Any] = Field(default_factory=dict, description="The data document.")
    actor: OptionalActor = None


# --- responses ----------------------------------------------------------------------------------


class Health(BaseModel):
    """The server is up."""

    status: Literal["ok"] = "ok"
    version: str = Field(description="The wfkit version serving.")
    workflows: dict[str, list[int]] = Field(description="Registered workflow ids and versions.")
    server_id: str = Field(
        description="A random id this server process chose when it started (no secret): "
        "'wfkit serve' writes it into '<db>.server.json' too, and the command line checks that "
        "the server at the file's address answers with it before it sends the token."
    )


class VersionOut(BaseModel):
    """One registered version of a workflow."""

    version: int
    active: bool = Field(description="False once deactivated: new runs are refused.")


class WorkflowVersions(BaseModel):
    """The registered versions of one workflow and which take new runs."""

    workflow: str
    versions: list[VersionOut]


class SignalResult(BaseModel):
    """What happened to a signal."""

    delivered: bool = Field(description="A waiting run took it now.")
    kept: bool = Field(description="Nothing waited, so it was kept for the next matching wait.")


class RunSummary(BaseModel):
    """A run's summary row."""

    run_id: str
    workflow: str
    version: int
    status: RunStatus
    created_at: Moment
    updated_at: Moment
    ended_at: Moment | None = None
    error: str | None = None
    parent_run_id: str | None = None

    @classmethod
    def of(cls, info: RunInfo) -> RunSummary:
        """From the engine's record."""
        return cls(
            run_id=info.run_id,
            workflow=info.workflow_id,
            version=info.version,
            status=info.status,
            created_at=info.created_at,
            updated_at=info.updated_at,
            ended_at=info.ended_at,
            error=info.error,
            parent_run_id=info.parent_run_id,
        )


class RunList(BaseModel):
    """Run summaries, newest first."""

    runs: list[RunSummary]


class EventOut(BaseModel):
    """One event of a run's history."""

    seq: int
    at: Moment
    kind: str
    node_id: str | None = None
    token: str | None = None
    attempt: int | None = None
    started_at: Moment | None = None
    actor: str | None = None
    error: str | None = None
    output: Any = None
    detail: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, event: Event) -> EventOut:
        """From the engine's record."""
        return cls(
            seq=event.seq,
            at=event.at,
            kind=event.kind,
            node_id=event.node_id,
            token=event.token,
            attempt=event.attempt,
            started_at=event.started_at,
            actor=event.actor,
            error=event.error,
            output=event.output,
            detail=event.detail,
        )


class RunDetail(BaseModel):
    """Everything about one run."""

    run_id: str
    workflow: str
    version: int
    status: RunStatus
    explain: str = Field(description="One sentence on where the run stands.")
    data: dict[str, Any] = Field(description="The data document.")
    outputs: dict[str, Any] = Field(description="Recorded outputs by node id.")
    nodes: dict[str, str] = Field(
        description="Status of each node reached: succeeded, failed, running, waiting, "
        "retrying, compensated or skipped."
    )
    history: list[EventOut] = Field(description="Every event, oldest first.")


class RunChange(BaseModel):
    """Where a run stands after an operator's action."""

    run_id: str
    status: RunStatus
    explain: str


class CancelOutcome(RunChange):
    """What cancelling a run did, and where it stands after."""

    pending_cancelled: int = Field(
        description="Steps, waits, approvals and timers that were pending and are now cancelled."
    )
    attempts_stopping: int = Field(
        description="Attempts in flight asked to stop; the run is cancelled once they have."
    )
    already_ended: bool = Field(
        description="The run had ended before the request: nothing was changed."
    )


class StartedRun(BaseModel):
    """A run that was just admitted."""

    run_id: str
    workflow: str
    version: int
    status: RunStatus
    restart_of: str | None = Field(default=None, description="The run this one restarts.")


class WaitOut(BaseModel):
    """An open wait or approval."""

    run_id: str
    node_id: str
    kind: str = Field(description="'signal', 'approval' or 'call' (waits for a child run).")
    name: str
    key: str | None = None
    since: Moment
    deadline: Moment | None = None
    detail: dict[str, Any] = Field(default_factory=dict)
    loop_path: list[int] = Field(
        default_factory=list,
        description="Inside a for_each: the item the wait belongs to (indexes, outermost first).",
    )

    @classmethod
    def of(cls, wait: WaitInfo) -> WaitOut:
        """From the engine's record."""
        return cls(
            run_id=wait.run_id,
            node_id=wait.node_id,
            kind=wait.kind,
            name=wait.name,
            key=wait.key,
            since=wait.since,
            deadline=wait.deadline,
            detail=wait.detail,
            loop_path=list(wait.loop_path),
        )


class WaitList(BaseModel):
    """Every open wait and approval, oldest first."""

    waits: list[WaitOut]
