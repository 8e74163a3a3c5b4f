"""OpenTelemetry traces of runs: one trace per run, a span per attempt, wait and compensation.

Only used when ``opentelemetry-api`` can be imported (the ``wfkit[otel]`` extra); otherwise
:func:`open_tracing` returns None, the writer holds no tracing and nothing here is imported.

The design (docs/semantics.md §27):

* A run's trace is chosen when it is admitted: its *run span* starts then (its parent is the
  caller's current span, or the calling run's span for a child run) and its W3C ``traceparent``
  is written with the run's first checkpoint (``wf_instances.trace_context``). Every other span
  of the run is a child of that span, whichever engine process writes it, so a restart or
  another PostgreSQL worker continues the same trace.
* Spans are emitted when the checkpoint that records their end is committed, with the start and
  end times the engine's clock recorded: an attempt from its start to the moment it returned
  (else the checkpoint of its outcome), a wait (signal, approval, timer, call) from the
  checkpoint that parked it to the one that resumed it. Nothing is emitted for changes that
  were not written.
* A span cannot be held across processes. The run span is ended when the run ends if the engine
  that admitted it ends it; an engine that closes while the run is still going ends it there
  (attribute ``wfkit.run.open`` true), and the engine that finally ends the run emits a second
  span ``run <workflow> (end)`` under the first, from the run's creation to its end, carrying
  the final status.
* An attempt runs with the run span as its current context (``Job.trace_parent``), so spans an
  activity makes are part of the run's trace too.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from wfkit.engine.vocabulary import ATTEMPT_OUTCOMES, EventKind
from wfkit.errors import UsageError
from wfkit.store.base import Statement

if TYPE_CHECKING:
    from wfkit.engine.rows import RunRows
    from wfkit.engine.state import RunState
    from wfkit.store.base import Store

__all__ = ["Tracing", "attached", "open_tracing"]

SCOPE = "wfkit"

_COMPENSATIONS = {EventKind.COMPENSATION_COMPLETED, EventKind.COMPENSATION_FAILED}
_FAILED = {
    EventKind.STEP_FAILED,
    EventKind.STEP_CRASHED,
    EventKind.STEP_ABANDONED,
    EventKind.COMPENSATION_FAILED,
}
# a wait parks on one of these events and resumes on one of the others (same token)
PARKS: dict[str, str] = {
    EventKind.SIGNAL_WAITING: "signal",
    EventKind.APPROVAL_WAITING: "approval",
    EventKind.DELAY_STARTED: "timer",
    EventKind.CALL_STARTED: "call",
}
_RESUMES = {
    EventKind.SIGNAL_RECEIVED,
    EventKind.SIGNAL_ELAPSED,
    EventKind.SIGNAL_REFUSED,
    EventKind.APPROVAL_APPROVED,
    EventKind.APPROVAL_REJECTED,
    EventKind.APPROVAL_EXPIRED,
    EventKind.TIMER_FIRED,
    EventKind.CALL_COMPLETED,
    EventKind.CALL_FAILED,
}
_RUN_ENDS: dict[str, str] = {
    EventKind.RUN_COMPLETED: "completed",
    EventKind.RUN_FAILED: "failed",
    EventKind.RUN_CANCELLED: "cancelled",
}


def _ns(at: datetime) -> int:
    """Nanoseconds since the epoch of an engine time (UTC without zone)."""
    return int(at.replace(tzinfo=UTC).timestamp() * 1_000_000_000)


def open_tracing(
    provider: Any = None,
    store: Store | None = None,
    queue_of: Callable[[str], str] | None = None,
) -> Tracing | None:
    """The engine's tracing: ``provider`` (a ``TracerProvider``), or OpenTelemetry's global one;
    None when ``opentelemetry-api`` cannot be imported and no provider was passed. ``store``
    answers for runs another process started; ``queue_of`` names an activity's queue."""
    try:
        from opentelemetry import trace
    except ImportError:
        if provider is not None:
            raise UsageError(
                "Engine(tracer_provider=...) needs opentelemetry-api: pip install 'wfkit[otel]'"
            ) from None
        return None
    source = provider if provider is not None else trace.get_tracer_provider()
    return Tracing(source.get_tracer(SCOPE), store, queue_of)


def attached(trace_parent: str | None) -> contextlib.AbstractContextManager[Any]:
    """Make the run span ``trace_parent`` the current span while an attempt runs (in any
    process: only the ``traceparent`` text travels in the job)."""
    if not trace_parent:
        return contextlib.nullcontext()
    return _attach(trace_parent)


@contextlib.contextmanager
def _attach(trace_parent: str) -> Iterator[None]:
    try:
        from opentelemetry import context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:  # a worker process without OpenTelemetry: the attempt runs untraced
        yield
        return
    token = context.attach(TraceContextTextMapPropagator().extract({"traceparent": trace_parent}))
    try:
        yield
    finally:
        context.detach(token)


class Tracing:
    """Turns committed checkpoints into spans (used by the writer, under its lock)."""

    def __init__(
        self,
        tracer: Any,
        store: Store | None = None,
        queue_of: Callable[[str], str] | None = None,
    ) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self._context = context
        self._propagator = TraceContextTextMapPropagator()
        self.tracer = tracer
        self.store = store
        self.queue_of = queue_of
        # run -> its traceparent ("" when the run has none); read from the store on a miss
        self._parents: dict[str, str] = {}
        self._created: dict[str, datetime] = {}
        self._live: dict[str, Any] = {}  # run spans this process started and has not ended
        self._new: dict[str, str] = {}  # traceparents to write with the runs' first checkpoint
        self._parked: dict[tuple[str, str], tuple[str, datetime]] = {}  # (run, token) -> wait
        # when attempts returned, by (run, token, attempt): a span ends there rather than at
        # the checkpoint that records it (the attempt may have waited for the writer)
        self._ended: dict[tuple[str, str, int], datetime] = {}

    def ended(self, run_id: str, token_id: str, attempt: int, at: datetime) -> None:
        """An attempt's result reached the writer: remember when the attempt returned (not for
        a run known to have no trace: nothing would take it back)."""
        if self._parents.get(run_id) != "":
            self._ended[(run_id, token_id, attempt)] = at

    # --- admission ------------------------------------------------------------------------------

    def current(self) -> Any:
        """The caller's current context (taken where ``engine.start`` is called)."""
        return self._context.get_current()

    def admitted(
        self, run: RunState, now: datetime, parent_run: str | None = None, caller: Any = None
    ) -> None:
        """A run was admitted: start its run span and choose its trace."""
        parent = caller
        if parent_run is not None:
            text = self.parent_of(parent_run)
            if text:
                parent = self._propagator.extract({"traceparent": text})
        attributes = {
            "wfkit.run_id": run.run_id,
            "wfkit.workflow_id": run.flow.id,
            "wfkit.version": run.flow.version,
        }
        if parent_run is not None:
            attributes["wfkit.parent_run_id"] = parent_run
        span = self.tracer.start_span(
            f"run {run.flow.id}", context=parent, start_time=_ns(now), attributes=attributes
        )
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        text = carrier.get("traceparent", "")
        self._parents[run.run_id] = text
        self._created[run.run_id] = now
        if text:
            self._live[run.run_id] = span
            self._new[run.run_id] = text

    def statements(self, parts: Iterable[RunRows]) -> list[Statement]:
        """The statement that stores the trace of the new runs among ``parts`` (after their
        summary rows, in the same transaction)."""
        rows = [
            (self._new[p.run_id], p.run_id) for p in parts if p.instance and p.run_id in self._new
        ]
        return [Statement("set_trace_context", rows)] if rows else []

    def parent_of(self, run_id: str) -> str:
        """The run's ``traceparent`` ("" when it has none: admitted without tracing)."""
        text = self._parents.get(run_id)
        if text is None:
            text, created = "", None
            if self.store is not None:
                found = self.store.query("run_trace_context", [run_id])
                if found:
                    text, created = found[0][0] or "", found[0][1]
            self._parents[run_id] = text
            if created is not None:
                self._created[run_id] = created
        return text

    # --- commits --------------------------------------------------------------------------------

    def committed(self, parts: Iterable[RunRows], runs: dict[str, RunState]) -> None:
        """The checkpoints ``parts`` are durable: emit the spans they end."""
        for rows in parts:
            self._new.pop(rows.run_id, None)
            if not rows.events:
                continue
            text = self.parent_of(rows.run_id)
            run = runs.get(rows.run_id)
            if not text or run is None:  # no spans: still forget an ended run (no leak)
                if any(event[3] in _RUN_ENDS for event in rows.events):
                    self._forget(rows.run_id)
                    self._created.pop(rows.run_id, None)
                continue
            parent = self._propagator.extract({"traceparent": text})
            for event in rows.events:
                try:
                    self._event(run, parent, event)
                except Exception:  # tracing must never stop the engine
                    continue

    def _event(self, run: RunState, parent: Any, event: tuple[Any, ...]) -> None:
        run_id, _seq, at, kind, node_id, token, attempt, started_at = event[:8]
        error = event[9]
        if kind in PARKS and token is not None:
            self._parked[(run_id, token)] = (PARKS[kind], at)
        elif kind in _RESUMES and token is not None:
            self._wait(run, parent, token, node_id, at, kind)
        elif kind in ATTEMPT_OUTCOMES and node_id is not None and attempt is not None:
            end = self._ended.pop((run_id, token, attempt), None) or at
            detail = json.loads(event[13]) if event[13] else {}
            self._attempt(
                run, parent, kind, node_id, attempt, started_at or end, end, error, detail
            )
        elif kind in _RUN_ENDS:
            self._run_end(run, parent, _RUN_ENDS[kind], at, error)

    def _base(self, run: RunState, node_id: str | None = None) -> dict[str, Any]:
        found: dict[str, Any] = {
            "wfkit.run_id": run.run_id,
            "wfkit.workflow_id": run.flow.id,
            "wfkit.version": run.flow.version,
        }
        if node_id is not None:
            found["wfkit.node_id"] = node_id
        return found

    def _attempt(
        self,
        run: RunState,
        parent: Any,
        kind: str,
        node_id: str,
        attempt: int,
        start: datetime,
        end: datetime,
        error: str | None,
        detail: dict[str, Any],
    ) -> None:
        node = run.flow.nodes.get(node_id)
        compensation = kind in _COMPENSATIONS
        activity = (node.compensation if compensation else node.activity) if node else None
        activity = activity or node_id
        attributes = self._base(run, node_id)
        attributes["wfkit.attempt"] = attempt
        attributes["wfkit.activity"] = activity
        attributes["wfkit.outcome"] = ATTEMPT_OUTCOMES[kind]
        if compensation:
            attributes["wfkit.compensation"] = True
        if self.queue_of is not None:
            with contextlib.suppress(Exception):
                attributes["wfkit.queue"] = self.queue_of(activity)
        path = detail.get("loop_path")
        if path is None and detail.get("loop_index") is not None:
            path = [detail["loop_index"]]
        if path:
            attributes["wfkit.loop_index"] = int(path[-1])
            attributes["wfkit.loop_path"] = [int(i) for i in path]
        if "retry_in_s" in detail:
            attributes["wfkit.retried"] = True
        name = f"compensate {activity}" if compensation else activity
        span = self.tracer.start_span(
            name, context=parent, start_time=_ns(min(start, end)), attributes=attributes
        )
        if kind in _FAILED:
            self._failed(span, error or ATTEMPT_OUTCOMES[kind], end)
        span.end(end_time=_ns(end))

    def _failed(self, span: Any, error: str, at: datetime) -> None:
        """Error status and an ``exception`` event (OpenTelemetry's semantic conventions) from
        the error text the history stored (the exception itself is gone by the time the
        checkpoint that records it is durable, and may have been raised in another process)."""
        last = error.strip().splitlines()[-1] if error.strip() else error
        kind, _, message = last.partition(": ")
        if not message or " " in kind:
            kind, message = "Error", last
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, last[:500]))
        span.add_event(
            "exception",
            {
                "exception.type": kind,
                "exception.message": message,
                "exception.stacktrace": error,
                "exception.escaped": False,
            },
            timestamp=_ns(at),
        )

    def _wait(
        self, run: RunState, parent: Any, token: str, node_id: str | None, at: datetime, kind: str
    ) -> None:
        parked = self._parked.pop((run.run_id, token), None)
        if parked is None and self.store is not None:  # parked by another process
            found = self.store.query("trace_parked_at", [run.run_id, token, list(PARKS)])
            if found:
                parked = (PARKS[found[0][1]], found[0][0])
        if parked is None:
            return
        what, since = parked
        attributes = self._base(run, node_id)
        attributes["wfkit.wait"] = what
        attributes["wfkit.outcome"] = kind
        span = self.tracer.start_span(
            f"wait {what} {node_id}", context=parent, start_time=_ns(since), attributes=attributes
        )
        if kind in (EventKind.CALL_FAILED, EventKind.APPROVAL_REJECTED):
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, kind))
        span.end(end_time=_ns(max(at, since)))

    def _run_end(
        self, run: RunState, parent: Any, status: str, at: datetime, error: str | None
    ) -> None:
        self._forget(run.run_id)
        since = self._created.pop(run.run_id, at)
        span = self._live.pop(run.run_id, None)
        if span is None:  # started by another process, or ended once already (then retried)
            span = self.tracer.start_span(
                f"run {run.flow.id} (end)",
                context=parent,
                start_time=_ns(min(since, at)),
                attributes=self._base(run),
            )
        span.set_attribute("wfkit.status", status)
        if status == "failed":
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, (error or "")[:500]))
        span.end(end_time=_ns(at))

    def _forget(self, run_id: str) -> None:
        """The run ended: drop what this process kept of it (a run tried again reads its trace
        from the store again)."""
        self._parents.pop(run_id, None)
        for key in [k for k in self._parked if k[0] == run_id]:
            del self._parked[key]
        for ended in [k for k in self._ended if k[0] == run_id]:
            del self._ended[ended]

    def close(self, now: datetime) -> None:
        """The engine closes: end the run spans it holds of runs still going."""
        for span in self._live.values():
            span.set_attribute("wfkit.run.open", True)
            span.end(end_time=_ns(now))
        self._live.clear()
