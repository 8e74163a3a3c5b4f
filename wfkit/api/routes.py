"""The routes of ``/api/v1``: signals, approvals, runs, recovery and waits, over the engine.

Routes are plain ``def`` functions: FastAPI runs them on its thread pool, so blocking engine calls
(which take the engine's writer lock) never stall the event loop.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse

import wfkit
from wfkit.api.auth import require_token
from wfkit.api.errors import PROBLEM_JSON, ApiProblem
from wfkit.api.models import (
    ApprovalRequest,
    CancelOutcome,
    CancelRequest,
    EventOut,
    Health,
    RecoverRequest,
    RestartRequest,
    ResumeRequest,
    RetryRequest,
    RunChange,
    RunDetail,
    RunList,
    RunSummary,
    SignalRequest,
    SignalResult,
    StartedRun,
    StartRequest,
    VersionOut,
    WaitList,
    WaitOut,
    WorkflowVersions,
)
from wfkit.definition.rendering import to_svg
from wfkit.engine import Engine, Run
from wfkit.engine.vocabulary import NodeStatus
from wfkit.errors import SignalError, UsageError
from wfkit.store.base import StoreBroken

__all__ = ["NODE_COLOURS", "public", "secured"]

log = logging.getLogger("wfkit.api")

NODE_COLOURS = {
    NodeStatus.SUCCEEDED.value: "#c8e6c9",
    NodeStatus.FAILED.value: "#ffcdd2",
    NodeStatus.RUNNING.value: "#bbdefb",
    NodeStatus.WAITING.value: "#fff9c4",
    NodeStatus.RETRYING.value: "#ffe0b2",
    NodeStatus.COMPENSATING.value: "#f3e5f5",
    NodeStatus.COMPENSATED.value: "#e1bee7",
    NodeStatus.SKIPPED.value: "#f5f5f5",
    NodeStatus.BLOCKED.value: "#eceff1",
    NodeStatus.CANCELLING.value: "#e0e0e0",
    NodeStatus.SUSPENDED.value: "#fff3e0",
}
"""Fill colour of a node in a run's picture, by its status in that run (the widgets' colours)."""


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


Responses = dict[int | str, dict[str, Any]]

_UNAUTHORIZED: Responses = {401: _problem("No bearer token, or the wrong one.")}
_INVALID: Responses = {422: _problem("The request does not fit the schema.")}
_BODY: Responses = {
    400: _problem("The body cannot be read: not UTF-8 JSON, or a malformed Content-Length."),
    413: _problem("The request body, or the payload in it, is over the server's limit."),
}
_NO_RUN: Responses = {404: _problem("There is no such run.")}
_CONFLICT: Responses = {409: _problem("The run is not in a state that allows this.")}
_UNAVAILABLE: Responses = {503: _problem("The store or the picture renderer is unavailable.")}

public = APIRouter(prefix="/api/v1", responses={**_UNAVAILABLE})
secured = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(require_token)],
    responses={**_UNAUTHORIZED, **_INVALID, **_UNAVAILABLE},
)


async def engine_of(request: Request) -> Engine:
    """The engine the app serves (async: no thread of the pool for a dictionary lookup)."""
    engine: Engine = request.app.state.engine
    return engine


EngineDep = Annotated[Engine, Depends(engine_of)]
RunId = Annotated[str, Path(min_length=1, max_length=100, description="The run's id.")]
Name = Annotated[str, Path(min_length=1, max_length=200, description="The signal's name.")]
Key = Annotated[str, Path(min_length=1, max_length=200, description="The correlation key.")]
NodeId = Annotated[str, Path(min_length=1, max_length=200, description="The approval's node id.")]
WorkflowId = Annotated[str, Path(min_length=1, max_length=200, description="The workflow id.")]
Version = Annotated[int, Path(ge=1, description="The workflow version.")]


def _run(engine: Engine, run_id: str) -> Run:
    """The run, or a 404 problem (the engine raises ``UsageError`` for unknown runs)."""
    try:
        return engine.run(run_id)
    except UsageError:
        raise ApiProblem(
            404,
            "unknown-run",
            f"there is no run {run_id!r} on this server; list runs with GET /api/v1/runs",
        ) from None


def _change(run: Run) -> RunChange:
    return RunChange(run_id=run.id, status=run.status, explain=run.explain())


def _created(started: StartedRun) -> JSONResponse:
    return JSONResponse(
        started.model_dump(mode="json"),
        status_code=201,
        headers={"Location": f"/api/v1/runs/{started.run_id}"},
    )


def _started(engine: Engine, run: Run, restart_of: str | None = None) -> StartedRun:
    view = run.view()
    return StartedRun(
        run_id=run.id,
        workflow=view.workflow_id,
        version=view.version,
        status=view.status,
        restart_of=restart_of,
    )


# --- health ----------------------------------------------------------------------------------


@public.get("/health", summary="Is the server up and its store reachable (no token needed)")
def health(engine: EngineDep, request: Request) -> Health:
    """The server is up and its store can keep what is written; names the workflows it serves
    and the random id of this server process (which its ``<db>.server.json`` holds too).

    A 503 problem when the store does not answer (a closed connection, a database gone), or
    when its DuckDB file was deleted or replaced while the server ran (every write is refused
    then): the server's log says why.
    """
    try:
        engine.runtime.store.check()  # the file is still the one opened, and answers a query
    except StoreBroken as exc:
        log.error("health check: %s", exc)
        raise ApiProblem(
            503,
            "store-unavailable",
            "the server is up but its database file was deleted or replaced while it ran, so "
            "it refuses every write (the server's log says more): stop the server and restore "
            "the file from a backup",
        ) from None
    except Exception as exc:  # whatever the backend raises, the store is not answering
        log.error("health check: the store does not answer: %s", exc)
        raise ApiProblem(
            503,
            "store-unavailable",
            "the server is up but its store is unavailable: a query on it failed (the server's "
            "log says why); check the database (disk space, the file, the PostgreSQL server), "
            "then restart the server",
        ) from None
    return Health(
        version=wfkit.__version__,
        workflows=engine.workflows(),
        server_id=request.app.state.server_id,
    )


def _check_payload(engine: Engine, what: str, value: Any) -> None:
    """A 413 problem when ``value`` is over the engine's payload limit, measured as it does."""
    size = len(json.dumps(value, default=str).encode())
    if size > engine.max_payload:
        raise ApiProblem(
            413,
            "payload-too-large",
            f"the {what} is {size:,} bytes of JSON; this server accepts at most "
            f"{engine.max_payload:,} bytes (the engine's max_payload); keep large documents "
            "elsewhere and pass a reference",
        )


# --- signals and approvals -----------------------------------------------------------------------


def _signal(engine: Engine, name: str, key: str | None, body: SignalRequest) -> SignalResult:
    _check_payload(engine, "signal payload", body.payload)
    if body.post_if_absent:
        delivered = engine.post_signal(
            name, key, body.payload, expires=body.expires, actor=body.actor
        )
        return SignalResult(delivered=delivered, kept=not delivered)
    delivered = engine.signal(name, key, body.payload, actor=body.actor)
    return SignalResult(delivered=delivered, kept=False)


@secured.post(
    "/signals/{name}/{key}",
    summary="Send a signal to the wait on name and key",
    responses={**_BODY},
)
def send_signal(
    engine: EngineDep,
    name: Name,
    key: Key,
    body: Annotated[SignalRequest, Body()],
) -> SignalResult:
    """Resume the run waiting for signal ``name`` with correlation ``key``.

    ``delivered`` is true for exactly one sender per wait. A payload that does not fit the wait's
    model is refused with a 422 and the wait stays open. With ``post_if_absent`` a signal that
    finds no wait is kept (until ``expires``) for the next matching wait.
    """
    return _signal(engine, name, key, body)


@secured.post(
    "/signals/{name}",
    summary="Send a signal to an uncorrelated wait on name",
    responses={**_BODY},
)
def send_uncorrelated_signal(
    engine: EngineDep, name: Name, body: Annotated[SignalRequest, Body()]
) -> SignalResult:
    """Like the route with a key, for waits that declare no correlation key."""
    return _signal(engine, name, None, body)


@secured.post(
    "/runs/{run_id}/approvals/{node}",
    summary="Approve or reject an open approval",
    responses={**_BODY, **_NO_RUN, **_CONFLICT},
)
def decide_approval(
    engine: EngineDep, run_id: RunId, node: NodeId, body: ApprovalRequest
) -> RunChange:
    """Decide the open approval ``node`` of the run; records the actor and the comment."""
    run = _run(engine, run_id)
    try:
        engine.approve(
            run_id,
            node,
            approved=body.approved,
            actor=body.actor,
            comment=body.comment,
            loop_path=body.loop_path,
        )
    except SignalError as exc:
        raise ApiProblem(409, "no-open-approval", " ".join(str(exc).split())) from None
    return _change(run)


# --- runs ----------------------------------------------------------------------------------------


@secured.get("/runs", summary="List runs, newest first")
def list_runs(
    engine: EngineDep,
    status: Annotated[wfkit.RunStatus | None, Query(description="Only this status.")] = None,
    workflow: Annotated[
        str | None, Query(max_length=200, description="Only this workflow id.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many.")] = 100,
) -> RunList:
    """Run summaries, newest first, optionally filtered by status and workflow."""
    found = engine.runs(status=status, workflow=workflow, limit=limit)
    return RunList(runs=[RunSummary.of(info) for info in found])


@secured.post(
    "/runs",
    summary="Start a run",
    status_code=201,
    response_model=StartedRun,
    responses={
        **_BODY,
        400: _problem("The run was refused ('reasons' says why), or the body cannot be read."),
    },
)
async def start_run(engine: EngineDep, body: StartRequest) -> JSONResponse:
    """Admit a run of a registered workflow (its latest version unless one is given)."""
    _check_payload(engine, "data document", body.data)
    # awaits the writer's group commit without holding a thread of the pool
    run = await engine.start_async(body.workflow, body.data, version=body.version, actor=body.actor)
    return _created(_started(engine, run))


@secured.get("/runs/{run_id}", summary="One run: status, data, outputs, history", responses=_NO_RUN)
def get_run(engine: EngineDep, run_id: RunId) -> RunDetail:
    """Everything about one run."""
    run = _run(engine, run_id)
    state = run.view()
    return RunDetail(
        run_id=run_id,
        workflow=state.workflow_id,
        version=state.version,
        status=state.status,
        explain=run.explain(),
        data=state.data,
        outputs=state.outputs,
        nodes=run.node_statuses(),
        history=[EventOut.of(e) for e in run.history()],
    )


@secured.get(
    "/runs/{run_id}/graph.svg",
    summary="The run's workflow graph, nodes coloured by status",
    response_class=Response,
    responses={
        200: {
            "description": "An SVG picture.",
            "content": {"image/svg+xml": {"schema": {"type": "string"}}},
        },
        **_NO_RUN,
    },
)
def get_graph(engine: EngineDep, run_id: RunId) -> Response:
    """The workflow graph the run follows, each node it reached filled by its status."""
    run = _run(engine, run_id)
    workflow = run.workflow
    colours = {node: NODE_COLOURS.get(st, "#ffffff") for node, st in run.node_statuses().items()}
    title = f"{workflow.id} v{workflow.version} — run {run_id}"
    svg = to_svg(workflow.graph, title=title, status=colours)
    return Response(svg, media_type="image/svg+xml")


@secured.post(
    "/runs/{run_id}/cancel",
    summary="Cancel a run (an ended run is left as it is)",
    responses={**_BODY, **_NO_RUN},
)
def cancel_run(engine: EngineDep, run_id: RunId, body: CancelRequest) -> CancelOutcome:
    """Cancel a run: its steps stop and its waits and timers go.

    Says how many pending steps, waits and timers were cancelled and how many attempts in
    flight were asked to stop (the run is cancelled once they have). A run that had already
    ended is left as it is: ``already_ended`` is true and nothing was changed.
    """
    run = _run(engine, run_id)
    done = engine.cancel(run_id, actor=body.actor, reason=body.reason)
    return CancelOutcome(
        run_id=run.id,
        status=done.status,
        explain=run.explain(),
        pending_cancelled=done.pending_cancelled,
        attempts_stopping=done.attempts_stopping,
        already_ended=done.already_ended,
    )


@secured.post(
    "/runs/{run_id}/resume",
    summary="Resume a suspended run",
    responses={**_BODY, **_NO_RUN, **_CONFLICT},
)
def resume_run(engine: EngineDep, run_id: RunId, body: ResumeRequest) -> RunChange:
    """Continue a suspended run: its parked step gets a fresh set of attempts."""
    run = _run(engine, run_id)
    engine.resume(run_id, actor=body.actor)
    return _change(run)


@secured.post(
    "/runs/{run_id}/recover",
    summary="Retry, skip or abandon a failed compensation",
    responses={**_BODY, **_NO_RUN, **_CONFLICT},
)
def recover_run(engine: EngineDep, run_id: RunId, body: RecoverRequest) -> RunChange:
    """Decide a failed compensation of a suspended run."""
    run = _run(engine, run_id)
    engine.recover_compensation(run_id, action=body.action, actor=body.actor)
    return _change(run)


@secured.post(
    "/runs/{run_id}/retry",
    summary="Try a failed run again from where it failed",
    responses={**_BODY, **_NO_RUN, **_CONFLICT},
)
def retry_run(engine: EngineDep, run_id: RunId, body: RetryRequest) -> RunChange:
    """Go on with a failed run from the step that failed (completed steps are not run again);
    refused for a run that is not failed."""
    run = _run(engine, run_id)
    engine.retry(run_id, actor=body.actor)
    return _change(run)


@secured.post(
    "/runs/{run_id}/restart",
    summary="Restart a finished run as a new run",
    status_code=201,
    response_model=StartedRun,
    responses={**_BODY, **_NO_RUN, **_CONFLICT},
)
def restart_run(engine: EngineDep, run_id: RunId, body: RestartRequest) -> JSONResponse:
    """Start a fresh run of the same definition with the original input; lineage both ways."""
    _run(engine, run_id)
    new = engine.restart_as_new(run_id, actor=body.actor)
    return _created(_started(engine, new, restart_of=run_id))


# --- workflow versions ---------------------------------------------------------------------------

_NO_WORKFLOW: Responses = {404: _problem("There is no such workflow or version.")}


def _versions(engine: Engine, workflow: str) -> WorkflowVersions:
    found = [d for d in engine.definitions() if d.workflow_id == workflow]
    if not found:
        known = ", ".join(sorted(engine.workflows())) or "none"
        raise ApiProblem(
            404,
            "unknown-workflow",
            f"no workflow {workflow!r} is registered on this server (registered: {known})",
        )
    return WorkflowVersions(
        workflow=workflow, versions=[VersionOut(version=d.version, active=d.active) for d in found]
    )


@secured.get(
    "/workflows/{workflow}",
    summary="A workflow's versions and which take new runs",
    responses=_NO_WORKFLOW,
)
def get_workflow(engine: EngineDep, workflow: WorkflowId) -> WorkflowVersions:
    """Every registered version of the workflow; deactivated ones refuse new runs."""
    return _versions(engine, workflow)


def _set_active(engine: Engine, workflow: str, version: int, active: bool) -> WorkflowVersions:
    try:
        (engine.activate if active else engine.deactivate)(workflow, version)
    except UsageError as exc:
        raise ApiProblem(404, "unknown-workflow", " ".join(str(exc).split())) from None
    return _versions(engine, workflow)


@secured.post(
    "/workflows/{workflow}/{version}/deactivate",
    summary="Refuse new runs of a workflow version (its runs in flight finish)",
    responses=_NO_WORKFLOW,
)
def deactivate_version(
    engine: EngineDep, workflow: WorkflowId, version: Version
) -> WorkflowVersions:
    """New runs of this version are refused; a start without a version takes the latest
    active one. Kept in the store."""
    return _set_active(engine, workflow, version, False)


@secured.post(
    "/workflows/{workflow}/{version}/activate",
    summary="Take new runs of a deactivated workflow version again",
    responses=_NO_WORKFLOW,
)
def activate_version(engine: EngineDep, workflow: WorkflowId, version: Version) -> WorkflowVersions:
    """The opposite of deactivate."""
    return _set_active(engine, workflow, version, True)


# --- waits ---------------------------------------------------------------------------------------


@secured.get("/waiting", summary="Every open wait and approval")
def list_waiting(engine: EngineDep) -> WaitList:
    """Every open wait and approval, oldest first."""
    return WaitList(waits=[WaitOut.of(w) for w in engine.waiting()])
