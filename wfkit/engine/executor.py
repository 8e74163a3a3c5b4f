"""Running one attempt of an activity: build its context, call it, diff its data, time it out."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import threading
import traceback
from collections import ChainMap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jsonpatch
from pydantic import BaseModel, ValidationError

from wfkit.definition.activities import ActivityContext, CancelFlag, Cancelled, Fallback
from wfkit.definition.typed_outputs import OutputType, fit_output
from wfkit.definition.values import depth_problem, json_problem, printable
from wfkit.engine.artifact_records import ArtifactRecord, CarriedRecords, IssuedRecords
from wfkit.engine.artifacts import AttemptArtifacts, contains_artifact, load_artifact
from wfkit.engine.logs import AttemptLines, AttemptLogger
from wfkit.engine.tracing import attached
from wfkit.errors import ArtifactError

__all__ = ["AttemptResult", "AttemptThreads", "Job", "failed_result", "run_attempt"]

log = logging.getLogger("wfkit.engine")


class AttemptThreads:
    """Attempts with an ``attempt_timeout`` run on a thread of their own each.

    An attempt that does not return in time is abandoned: the engine stops waiting for it and
    moves on, and its thread is left to finish (or to hang) on its own. It holds no slot that
    another attempt needs, so hung activities never turn the timeouts of others into failures
    without a run. Python cannot kill a thread: abandoned threads that never end are counted
    (:attr:`hung`) and logged as they pile up, because they still hold whatever they hold.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._abandoned: list[threading.Thread] = []
        self._warned = 0

    @property
    def hung(self) -> int:
        """Abandoned attempts whose threads are still running."""
        with self._lock:
            self._abandoned = [t for t in self._abandoned if t.is_alive()]
            return len(self._abandoned)

    def call(self, job: Job, ctx: ActivityContext[Any]) -> Any:
        """Run the attempt, waiting ``job.timeout`` seconds at most (raises TimeoutError)."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def attempt() -> None:
            try:
                box["value"] = _call(job, ctx)
            except BaseException as exc:  # handed to the caller, which records it
                box["error"] = exc
            finally:
                done.set()

        thread = threading.Thread(target=attempt, name=f"wfkit-attempt-{job.node_id}", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # the interpreter is exiting: no new threads; run it here
            return _call(job, ctx)
        if not done.wait(job.timeout):
            job.cancel.set()
            self._abandon(thread, job)
            raise TimeoutError(
                f"attempt {job.attempt} of {job.node_id!r} timed out after {job.timeout:g}s"
            )
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def _abandon(self, thread: threading.Thread, job: Job) -> None:
        with self._lock:
            self._abandoned = [t for t in self._abandoned if t.is_alive()]
            self._abandoned.append(thread)
            count = len(self._abandoned)
            if count < 2 * max(self._warned, 1) and self._warned:
                return
            self._warned = count
        log.warning(
            "%d timed-out attempts are still running (the latest: %r of run %s, activity %r); "
            "their threads cannot be killed: make the activity check ctx.cancelled or use "
            "timeouts of its own (sockets, subprocesses)",
            count,
            job.node_id,
            job.run_id,
            job.activity,
        )


@dataclass
class Job:
    """One attempt to run, handed to a worker once its checkpoint is durable."""

    run_id: str
    token_id: str
    node_id: str
    attempt: int
    function: Callable[..., Any]
    activity: str
    definition_id: str
    version: int
    data_json: str
    data_version: int
    model: type[BaseModel] | None
    outputs_json: str  # the run's outputs; every attempt decodes its own copy
    loop_path: tuple[int, ...] = ()
    item_json: str | None = None  # the for_each item as JSON (its own copy per attempt)
    own_output: tuple[Any, ...] = ()  # (output,) a compensation sees as outputs[node_id]
    timeout: float | None = None
    max_data: int | None = None  # bytes of JSON the data document may grow to
    cancel: CancelFlag = field(default_factory=CancelFlag)
    heartbeat: Callable[[], None] | None = None
    input_json: str | None = None  # the run's input (every attempt decodes its own copy)
    output_type: OutputType | None = None  # the model the activity declares it returns
    loop_scopes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # by node
    artifacts: str | None = None  # the artifact root URL (wfkit.engine.artifacts)
    trace_parent: str | None = None  # the run span's W3C traceparent (engine/tracing.py)
    # what ctx.load resolves references through: the engine's records (its own threads), or
    # those carried to another process (see travelling); None refuses every reference
    records: IssuedRecords | CarriedRecords | None = None

    @property
    def loop_index(self) -> int | None:
        """The innermost for_each index (None outside any)."""
        return self.loop_path[-1] if self.loop_path else None

    def load_artifact(self, ref: Any) -> Any:
        """``ctx.load(ref)``: an artifact the engine issued to this run or its family."""
        issued = self.records if self.records is not None else _NOTHING_CARRIED
        return load_artifact(ref, self.artifacts, issued, self.run_id)

    def travelling(self) -> Job:
        """The job as it goes to another process: without what lives in the engine (the
        heartbeat callback, the cancel flag), and carrying the records of the artifacts it may
        load instead of the engine's store: those of the references in its data, outputs,
        input, item and the output it undoes, resolved now (none for a job with none)."""
        records = self.records
        if isinstance(records, IssuedRecords):
            texts = [self.data_json, self.outputs_json, self.input_json, self.item_json]
            records = records.carry(texts, self.own_output, self.run_id)
        return dataclasses.replace(self, heartbeat=None, cancel=CancelFlag(), records=records)


_NOTHING_CARRIED = CarriedRecords()


@dataclass
class AttemptResult:
    """What came of an attempt."""

    run_id: str
    token_id: str
    node_id: str
    attempt: int
    started_at: datetime
    ended_at: datetime
    ok: bool
    output: Any = None
    patch: list[dict[str, Any]] = field(default_factory=list)
    base: Any = None
    base_version: int = 0
    error: str | None = None
    fallback: bool = False
    # the return value cannot be stored, so its node cannot use it: the step leaves through
    # `fallback` where that outlet is connected (else it is an ordinary failed attempt)
    unusable: bool = False
    cancelled: bool = False
    crashed: bool = False  # the engine process died during the attempt (found at recovery)
    logs: AttemptLines | None = None  # the lines it logged through ctx.logger (INFO and up)
    # the artifacts a successful attempt stored, recorded with the checkpoint that records it
    artifacts: tuple[ArtifactRecord, ...] = ()


def failed_result(
    job: Job, error: str, now: datetime, *, crashed: bool = False, cancelled: bool = False
) -> AttemptResult:
    """The result of an attempt that did not get to (or through) its activity: the worker caught
    what it threw, its Dask worker died, it was cancelled before it answered."""
    return AttemptResult(
        job.run_id,
        job.token_id,
        job.node_id,
        job.attempt,
        now,
        now,
        ok=False,
        error=error,
        base_version=job.data_version,
        crashed=crashed,
        cancelled=cancelled,
    )


class _Outputs(Mapping[str, Any]):
    """``ctx.outputs``: a read-only mapping over this attempt's own copy of the run's outputs,
    decoded the first time the activity reads it."""

    __slots__ = ("_job", "_value")

    def __init__(self, job: Job) -> None:
        self._job = job
        self._value: dict[str, Any] | None = None

    def _decoded(self) -> dict[str, Any]:
        if self._value is None:
            value = json.loads(self._job.outputs_json)
            if self._job.own_output:
                value[self._job.node_id] = self._job.own_output[0]
            self._value = value
        return self._value

    def __getitem__(self, key: str) -> Any:
        return self._decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())

    def __repr__(self) -> str:
        return repr(self._decoded())


def _call(job: Job, ctx: ActivityContext[Any]) -> Any:
    result = job.function(ctx)
    if inspect.isawaitable(result):
        return asyncio.run(_await(result))
    return result


async def _await(awaitable: Any) -> Any:
    return await awaitable


def run_attempt(
    job: Job, now: Callable[[], datetime], threads: AttemptThreads | None = None
) -> AttemptResult:
    """Run one attempt and describe the outcome; never raises for the activity's errors."""
    base = json.loads(job.data_json)
    started = now()
    result = AttemptResult(
        job.run_id,
        job.token_id,
        job.node_id,
        job.attempt,
        started,
        started,
        ok=False,
        base=base,
        base_version=job.data_version,
    )
    if job.cancel.is_set():  # its token was removed while the job was queued: do not start
        result.cancelled = True
        result.error = f"Cancelled: attempt {job.attempt} of {job.node_id!r} was never started"
        return result
    try:
        data: Any = (
            job.model.model_validate_json(job.data_json) if job.model else json.loads(job.data_json)
        )
    except ValidationError as exc:
        result.error = f"the data document no longer fits its model: {exc}"
        return result
    logger = AttemptLogger(job, now)
    scopes: Mapping[str, tuple[str, ...]] = job.loop_scopes
    if job.own_output:  # a compensation reads the output of the visit it undoes, not cells
        scopes = ChainMap({job.node_id: ()}, dict(scopes))
    ctx = ActivityContext(
        data=data,
        instance_id=job.run_id,
        node_id=job.node_id,
        definition_id=job.definition_id,
        version=job.version,
        attempt=job.attempt,
        outputs=_Outputs(job),
        loop_index=job.loop_index,
        loop_path=job.loop_path,
        item=json.loads(job.item_json) if job.item_json is not None else None,
        idempotency_key=f"{job.run_id}:{job.token_id}:{job.node_id}",
        logger=logger,
        cancel_event=job.cancel,
        on_heartbeat=job.heartbeat,
        input_json=job.input_json,
        data_model=job.model,
        loop_scopes=scopes,
        loader=job.load_artifact,
    )
    try:
        with attached(job.trace_parent):  # spans the activity makes join the run's trace
            _attempt(job, ctx, data, base, threads, result)
    finally:
        result.logs = logger.finish()
    result.ended_at = now()
    return result


def _attempt(
    job: Job,
    ctx: ActivityContext[Any],
    data: Any,
    base: Any,
    threads: AttemptThreads | None,
    result: AttemptResult,
) -> None:
    """Call the activity and fill ``result`` with what came of it."""
    files = AttemptArtifacts(
        job.artifacts,
        job.run_id,
        job.node_id,
        job.attempt,
        job.loop_path,
        job.activity,
        undo=bool(job.own_output),
    )
    try:
        if job.timeout is not None and threads is not None:
            output = threads.call(job, ctx)
        else:
            output = _call(job, ctx)
        output = files.replace(output, "return value")
        problem = None
        if job.output_type is not None or isinstance(output, BaseModel):
            problem = _deep_output_problem(job, output)  # before pydantic walks it
        if job.output_type is not None and problem is None:
            output, problem = fit_output(output, job.output_type, job.activity)
        after, data_problem = _dumped(job, data)
        patch = _patch(base, after) if data_problem is None else []
        if patch is None or (patch and contains_artifact([op.get("value") for op in patch])):
            after = files.replace(after, "ctx.data")  # only a changed document may hold one
            patch = _patch(base, after)
        if problem is None:
            problem = _output_problem(job, output)
            result.unusable = problem is not None
        problem = problem or data_problem or _stored_problem(job, after, patch)
        if problem is not None:
            result.error = problem
        else:
            result.output = output
            result.patch = patch or []
            result.ok = True
            result.artifacts = files.records()
    except ArtifactError as exc:
        result.error = str(exc)
    except Fallback as exc:
        result.fallback = True
        result.error = f"Fallback: {exc}"
    except Cancelled as exc:
        result.cancelled = True
        result.error = f"Cancelled: {exc}"
    except (TypeError, ValueError) as exc:
        result.error = _describe(exc, job)
    except (Exception, SystemExit):  # an activity calling sys.exit() fails its attempt
        result.error = traceback.format_exc()
    if result.error is not None:  # an exception's text may hold anything: keep it storable
        result.error = printable(result.error)
    if not result.ok:
        files.discard()  # nothing refers to the files of a failed attempt


def _patch(base: Any, after: Any) -> list[dict[str, Any]] | None:
    """The JSON Patch from ``base`` to ``after``: [] when unchanged, None when the change cannot
    be expressed as one (a key that is not a string, a value JSON cannot encode)."""
    try:
        if after == base:
            return []
        ops: list[dict[str, Any]] = jsonpatch.make_patch(base, after).patch
    except (TypeError, ValueError, RecursionError):  # RecursionError: nested thousands deep
        return None
    return ops


def _dumped(job: Job, data: Any) -> tuple[Any, str | None]:
    """The data document as plain JSON (a model's dump); or why it cannot be stored."""
    if not isinstance(data, BaseModel):
        return data, None
    try:
        return data.model_dump(mode="json"), None
    except (ValueError, RecursionError):
        problem = depth_problem(data, "ctx.data")  # pydantic gives up on deep values
        if problem is None:
            raise
        return data, _unstorable_write(job, problem)


def _deep_output_problem(job: Job, output: Any) -> str | None:
    problem = depth_problem(output, "return value")
    return None if problem is None else _unstorable_output(job, problem)


def _patch_problem(patch: list[dict[str, Any]]) -> str | None:
    """Why a value the patch writes cannot be stored: only what changed is looked at."""
    for op in patch:
        if "value" not in op:
            continue
        path = op["path"]
        where = "ctx.data" + "".join(
            f".{p}" if p.isidentifier() else f"[{p}]" for p in path.split("/")[1:]
        )
        problem = json_problem(op["value"], where, depth=path.count("/") + 1)
        if problem is not None:
            return problem
    return None


def _output_problem(job: Job, output: Any) -> str | None:
    """Why the attempt's return value cannot be recorded, or None."""
    problem = json_problem(output, "return value")
    return None if problem is None else _unstorable_output(job, problem)


def _unstorable_output(job: Job, problem: str) -> str:
    return (
        f"activity {job.activity!r} returned a value that is not JSON or cannot be "
        f"stored ({problem}); return a dict of plain values (or None)"
    )


def _unstorable_write(job: Job, problem: str) -> str:
    return (
        f"activity {job.activity!r} wrote a value into ctx.data that cannot be stored: "
        f"{problem}; the change is not recorded"
    )


def _stored_problem(job: Job, data: Any, patch: list[dict[str, Any]] | None) -> str | None:
    """Why the attempt's data change cannot be recorded, or None."""
    if patch == []:
        return None  # the document did not change
    problem = json_problem(data, "ctx.data") if patch is None else _patch_problem(patch)
    if problem is not None:
        return _unstorable_write(job, problem)
    if job.max_data is not None:
        size = len(json.dumps(data).encode())
        if size > job.max_data:
            return (
                f"activity {job.activity!r} grew the data document to {size:,} bytes of JSON, "
                f"over the {job.max_data:,}-byte limit; the change is not recorded — return "
                "large results as wf.Artifact(value) (stored as a file, referenced in the "
                "document), or keep them elsewhere and store a reference"
            )
    return None


def _describe(exc: Exception, job: Job) -> str:
    text = traceback.format_exc()
    if "is not JSON serializable" in str(exc):
        return (
            f"{text}\nactivity {job.activity!r} returned a value that is not JSON; return a dict "
            "of plain values (or None)"
        )
    return text
