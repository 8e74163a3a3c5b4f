"""``Run``: a handle on one run — status, data, outputs, history, result, explain."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from wfkit.definition import pictures, rendering
from wfkit.definition.kinds import Node
from wfkit.engine import replay
from wfkit.engine.attempts import AttemptInfo, attempts_of
from wfkit.engine.cancellation import CancelResult
from wfkit.engine.cursor import Ending, Token
from wfkit.engine.logs import LogLine
from wfkit.engine.queues import handed_over_words, step_activity, unserved_queue, unserved_words
from wfkit.engine.records import Event, RunView, TokenView
from wfkit.engine.replay import (
    StoredCheckpoint,
    event_statuses,
    statuses_at,
    token_status,
    token_views,
)
from wfkit.engine.run_retries import budget, resumable, run_attempt, waiting_error
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import EndKind, NodeStatus, RunStatus, TokenState, WaitKind
from wfkit.errors import UsageError, VisitLimitExceeded, WorkflowFailed

if TYPE_CHECKING:
    from wfkit.definition.workflow import Workflow
    from wfkit.engine.runtime import Runtime

__all__ = ["Run", "humanize"]


class Run:
    """A handle on one run of a workflow; cheap to create, reads the engine on every access.

    ``engine.start(...)`` and ``engine.run(run_id)`` return one.
    """

    def __init__(self, runtime: Runtime, run_id: str) -> None:
        self._rt = runtime
        self.id = run_id

    def __repr__(self) -> str:
        return f"Run({self.id!r}, status={self.status.value!r})"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        # in a notebook: the graph with each node reached coloured by its status, and where the
        # run stands (the colours are the RunMonitor's; wfkit/definition/picture.css)
        bundle = {"text/plain": repr(self)}
        flow = self.workflow
        title = f"{flow.id} v{flow.version} — run {self.id}"
        try:
            svg = rendering.to_svg(flow.graph, title=title)
        except rendering.RenderingUnavailable:
            return bundle
        caption = html.escape(self.explain())
        bundle["text/html"] = pictures.static_picture(svg, self.node_statuses()) + (
            f'<div class="wfkit-picture-caption">{caption}</div>'
        )
        return bundle

    @property
    def status(self) -> RunStatus:
        """Where the run stands now."""
        return self._rt.status(self.id)

    @property
    def data(self) -> Any:
        """The data document: a model instance when the workflow declares a model."""
        state = self._rt.state(self.id)
        model = state.flow.data_model
        return model.model_validate(state.data) if model else state.data

    @property
    def input(self) -> Any:
        """The data document the run was admitted with (a model instance when the workflow
        declares a model), whatever the document became since: a fresh copy on every read."""
        state = self._rt.state(self.id)
        if state.input_json is None:  # not reachable for runs the engine admitted
            raise UsageError(f"run {self.id} has no recorded input")
        model = state.flow.data_model
        if model is not None:
            return model.model_validate_json(state.input_json)
        return json.loads(state.input_json)

    def logs(self, node_id: str | None = None, attempt: int | None = None) -> list[LogLine]:
        """The lines its activities logged through ``ctx.logger`` (INFO and above), in the order
        their attempts were recorded: time, level, node, attempt, message (and the activity,
        token and loop cell). ``node_id`` and ``attempt`` narrow them down.

        Raises
        ------
        UsageError
            ``node_id`` is not a node of the run's workflow, or ``attempt`` is not a positive
            integer.

        Examples
        --------
        >>> import wfkit as wf
        >>> reg = wf.ActivityRegistry()
        >>> reg.register("docs.greet", lambda ctx: ctx.logger.info("hi %s", ctx.input["name"]))
        >>> engine = wf.Engine(":memory:", registry=reg)
        >>> _ = engine.register(wf.Workflow("greet", 1).start_with("docs.greet"))
        >>> run = engine.start("greet", {"name": "ana"})
        >>> engine.run_until_idle()
        >>> [(line.node_id, line.level, line.attempt, line.message) for line in run.logs()]
        [('docs.greet', 'INFO', 1, 'hi ana')]
        >>> run.input
        {'name': 'ana'}
        >>> engine.close()
        """
        if node_id is not None and node_id not in self._rt.state(self.id).flow.nodes:
            raise UsageError(
                f"run {self.id} has no node {node_id!r}; pass one of its node ids "
                "(run.workflow.graph.nodes) or None for every node"
            )
        if attempt is not None and (
            isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1
        ):
            raise UsageError(f"attempt must be a positive integer or None, not {attempt!r}")
        return self._rt.logs(self.id, node_id, attempt)

    @property
    def outputs(self) -> dict[str, Any]:
        """Recorded outputs by node id (by item index inside a for_each)."""
        return dict(self._rt.state(self.id).outputs)

    def load(self, ref: Any) -> Any:
        """The value of an artifact reference found in this run's data or outputs (what
        ``ctx.load`` returns in its activities): one this run or a run of its family (linked
        to it by calls and restarts) stored, unless the engine has ``artifacts_shared=True``;
        see ``Engine.load_artifact``."""
        return self._rt.load_for(self.id, ref)

    def view(self) -> RunView:
        """Status, data, outputs and where each token stands, read together at one moment."""
        state = self._rt.state(self.id)
        return RunView(
            self.id,
            state.flow.id,
            state.flow.version,
            RunStatus(state.status),
            state.error,
            state.data,
            dict(state.outputs),
            state.seq,
            token_views(state.flow, state.tokens, state.saga),
            run_attempt(state),
            state.status == RunStatus.FAILED.value and resumable(state),
        )

    def node(self, node_id: str) -> Node:
        """The validated node ``node_id`` of the definition this run follows."""
        nodes = self._rt.state(self.id).flow.nodes
        if node_id not in nodes:
            raise UsageError(f"run {self.id} has no node {node_id!r}")
        return nodes[node_id]

    @property
    def version(self) -> int:
        """The workflow version this run was admitted with."""
        return self._rt.state(self.id).flow.version

    @property
    def workflow(self) -> Workflow:
        """The workflow definition (the exact version and graph) this run follows: the one it
        was admitted with, or its own grown graph once ``engine.append`` grew it."""
        return self._rt.state(self.id).flow.workflow

    @property
    def workflow_id(self) -> str:
        """The workflow this run belongs to."""
        return self._rt.state(self.id).flow.id

    @property
    def parent(self) -> Run | None:
        """The run whose call node started this one (None for a run started otherwise)."""
        caller = self._rt.state(self.id).caller.get("run")
        return Run(self._rt, caller["run"]) if caller else None

    def children(self) -> list[Run]:
        """The child runs this run's call nodes started, oldest first."""
        rows = self._rt.store.query("call_children", [self.id])
        return [Run(self._rt, json.loads(detail)["child_run"]) for (detail,) in rows]

    def history(self) -> list[Event]:
        """Every event of the run, oldest first."""
        return self._rt.history(self.id)

    def attempts(self, node_id: str | None = None) -> list[AttemptInfo]:
        """Every ended attempt of the run's steps and compensations (of ``node_id`` only, when
        given), in the order their ends were recorded: number, start, end, status, error text
        with its traceback, output, for_each cell and ``input_seq`` (``run.data_at(input_seq)``
        is the data document the attempt started from).

        Raises
        ------
        UsageError
            ``node_id`` is not a node of the run's workflow.
        """
        if node_id is not None and node_id not in self._rt.state(self.id).flow.nodes:
            raise UsageError(
                f"run {self.id} has no node {node_id!r}; pass one of its node ids "
                "(run.workflow.graph.nodes) or None for every node"
            )
        return attempts_of(self.history(), self.checkpoints(), node_id)

    def checkpoints(self) -> list[StoredCheckpoint]:
        """The run's stored checkpoints, oldest first: each is the events one store transaction
        recorded for the run (``seq`` is its last event's number), for stepping through its
        history with :meth:`data_at`.

        Examples
        --------
        >>> import wfkit as wf
        >>> reg = wf.ActivityRegistry()
        >>> reg.register("docs.count", lambda ctx: ctx.data.update(n=ctx.data["n"] + 1))
        >>> engine = wf.Engine(":memory:", registry=reg)
        >>> _ = engine.register(wf.Workflow("count", 1).start_with("docs.count"))
        >>> run = engine.start("count", {"n": 1})
        >>> engine.run_until_idle()
        >>> [c.label for c in run.checkpoints()]
        ['#1 run.started', '#3 run.completed (+1 more)']
        >>> [run.data_at(c.seq) for c in run.checkpoints()]
        [{'n': 1}, {'n': 2}]
        >>> engine.close()
        """
        return replay.checkpoints(self._rt, self.id)

    def data_at(self, seq: int) -> dict[str, Any]:
        """The data document as the engine had it after the checkpoint that recorded event
        ``seq`` (0: the run's input), rebuilt from the stored JSON Patches: a plain JSON
        document, a fresh copy on every call. Only what is stored counts: with a ``durability``
        other than ``"step"``, checkpoints not written yet are not there.

        Raises
        ------
        UsageError
            ``seq`` is not an integer between 0 and the run's last event.
        """
        return replay.data_at(self._rt, self.id, seq)

    def tokens_at(self, seq: int) -> dict[str, TokenView]:
        """Where each token stood after the checkpoint that recorded event ``seq``: token id ->
        :class:`~wfkit.TokenView` (node, state, attempt, loop path...).

        Raises
        ------
        UsageError
            ``seq`` is not an integer between 0 and the run's last event.
        """
        return replay.tokens_at(self._rt, self.id, seq)

    def node_statuses_at(self, seq: int) -> dict[str, NodeStatus]:
        """The status of the run's nodes as it was after the checkpoint that recorded event
        ``seq``, from the events up to it and the tokens then (never ``blocked`` or
        ``skipped``: those depend on the processes running now and on the run's end).

        Raises
        ------
        UsageError
            ``seq`` is not an integer between 0 and the run's last event.
        """
        tokens = self.tokens_at(seq)
        return statuses_at([e for e in self.history() if e.seq <= seq], tokens)

    def result(self, timeout: float | None = 30.0) -> Any:
        """Wait until the run ends and return its data; raise ``WorkflowFailed`` if it failed.

        Without background workers, this drives the engine on the calling thread.
        """
        status = self._rt.wait_terminal(self.id, timeout)
        if status == RunStatus.COMPLETED:
            return self.data
        state = self._rt.state(self.id)
        if status in (RunStatus.FAILED, RunStatus.CANCELLED):
            error = state.error or status.value
            kind = VisitLimitExceeded if error.startswith("VisitLimitExceeded") else WorkflowFailed
            raise kind(
                f"run {self.id} of {state.flow.id!r} v{state.flow.version} {status.value}: "
                f"{_last_line(error)}; see run.history() for every attempt",
                run_id=self.id,
                error=error,
            )
        raise TimeoutError(
            f"run {self.id} did not finish within {timeout}s; "
            f"it is {status.value}: {self.explain()}"
        )

    def explain(self) -> str:
        """One sentence on where the run stands."""
        return self._rt.explain(self.id)

    # --- commands (each is the engine's command of the same name, for this run) ---------------

    def cancel(self, actor: str | None = None, reason: str = "") -> CancelResult:
        """Cancel the run: what ``engine.cancel(run.id, actor, reason)`` does.

        Returns
        -------
        CancelResult
            Steps, waits and timers cancelled, attempts asked to stop, and the run's status.
        """
        return self._rt.operations.cancel(self.id, actor, reason)

    def approve(
        self,
        node: str,
        approved: bool = True,
        *,
        actor: str | None = None,
        comment: str | None = None,
        loop_path: Sequence[int] | None = None,
    ) -> None:
        """Decide the run's open approval ``node``: what ``engine.approve(run.id, node, ...)``
        does (``loop_path`` names the for_each item whose approval is decided)."""
        self._rt.operations.approve(
            self.id, node, approved, actor=actor, comment=comment, loop_path=loop_path
        )

    def retry(self, *, actor: str | None = None) -> None:
        """Try the failed run again from where it failed: ``engine.retry(run.id)``."""
        self._rt.operations.retry(self.id, actor=actor)

    def resume(self, *, actor: str | None = None) -> None:
        """Continue the suspended run: ``engine.resume(run.id)``."""
        self._rt.operations.resume(self.id, actor=actor)

    def recover_compensation(self, action: str = "retry", *, actor: str | None = None) -> None:
        """Decide the run's failed compensation (``"retry"``, ``"skip"`` or ``"abandon"``):
        ``engine.recover_compensation(run.id, action)``."""
        self._rt.operations.recover_compensation(self.id, action, actor=actor)

    def node_statuses(self) -> dict[str, NodeStatus]:
        """Status of the run's nodes: succeeded, failed, running, waiting, retrying, blocked
        (its activity is not registered in this process, or its queue is not served by this
        engine's workers), cancelling, compensating, compensated or skipped (an operator skipped
        its compensation).

        Once the run has ended (completed, failed or cancelled), every node it never reached
        is ``skipped`` too; while it is in flight, nodes not reached yet are absent. Nodes it
        reached that have no status of their own (start, end) are absent.
        """
        statuses, named = event_statuses(self.history())
        state = self._rt.state(self.id)
        if RunStatus(state.status).terminal:
            for node in _unreached(state, named):
                statuses.setdefault(node, NodeStatus.SKIPPED)
        for token in state.tokens.values():
            if unregistered_activity(self._rt, state, token) is not None or (
                engine_unserved(self._rt, state, token) is not None
            ):
                statuses[token["node"]] = NodeStatus.BLOCKED
                continue
            node = token["node"]
            statuses[node] = token_status(token["st"], "comp" in token, statuses.get(node))
        return statuses


def _unreached(state: RunState, named: set[str]) -> list[str]:
    """Nodes of the run's graph that no token ever arrived at (every arrival but a join's
    counts a visit) and that no event names (a join is named once it decided or heard of a
    failed branch)."""
    nodes = state.flow.nodes
    reached = set(named)
    for scope in state.visits:
        reached.add(scope if scope in nodes else scope.rpartition("|")[0])
    return [node for node in nodes if node not in reached]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else text


def humanize(delta: timedelta) -> str:
    """``timedelta`` as rough words: ``'2 days'``, ``'3 hours'``, ``'45 seconds'``.

    Examples
    --------
    >>> humanize(timedelta(days=2, hours=1))
    '2 days'
    """
    seconds = abs(delta.total_seconds())  # callers word the sign (see in_words)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = round(seconds / size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    count = round(seconds)
    return f"{count} second{'s' if count != 1 else ''}"


def in_words(delta: timedelta) -> str:
    """``'in 2 days'`` for a time ahead, ``'overdue by 5 seconds'`` for one already past.

    Examples
    --------
    >>> in_words(timedelta(seconds=-5))
    'overdue by 5 seconds'
    """
    return (
        f"in {humanize(delta)}" if delta.total_seconds() >= 0 else f"overdue by {humanize(delta)}"
    )


def describe_wait(row: tuple[Any, ...], timers: dict[str, datetime], now: datetime) -> str:
    """Words for one open bookmark row."""
    _, token, node_id, kind, name, key, since, deadline, detail = row
    due = deadline or timers.get(token)
    when = f" since {since:%H:%M}"
    if kind == WaitKind.SIGNAL:
        text = f"waiting for signal {name!r}" + (f" (key {key})" if key else "") + when
        return text + (f"; times out {in_words(due - now)}" if due else "")
    if kind == WaitKind.CALL:
        return f"waiting at {node_id!r} for child run {key} of {name!r}{when}"
    assignees = json.loads(detail or "{}").get("assignees") or []
    who = f" by {', '.join(assignees)}" if assignees else ""
    text = f"waiting for approval {node_id!r}{who}{when}"
    return text + (f"; expires {in_words(due - now)}" if due else "")


def explain(runtime: Runtime, run_id: str) -> str:
    """The sentence behind :meth:`Run.explain`."""
    state = runtime.state(run_id)
    status = RunStatus(state.status)
    now = runtime.clock.now()
    if status == RunStatus.COMPLETED:
        return "completed"
    if status == RunStatus.FAILED and budget(state.flow) is not None:
        attempt, most, error = waiting_error(state)
        return f"failed (run attempt {attempt} of {most}): {error}"
    if status in (RunStatus.FAILED, RunStatus.CANCELLED):
        return f"{status.value}: {_last_line(state.error or '')}".rstrip(": ")
    if status == RunStatus.SUSPENDED:
        stuck = [t for t in state.tokens.values() if t["st"] == TokenState.SUSPENDED]
        nodes = [t["node"] for t in stuck]
        at = f" at {nodes[0]!r}" if nodes else ""
        if any("comp" in t for t in stuck):
            return f"suspended: {_last_line(state.error or '')}"
        return (
            f"suspended{at}: {_last_line(state.error or 'an operator must decide')}; "
            f"resume it with engine.resume({run_id!r}) or cancel it"
        )
    if state.ending:
        return _ending(state.ending["run"], state.tokens)
    parts: list[str] = []
    marks = runtime.store.query("run_bookmarks", [run_id])
    timers = {row[1]: row[4] for row in runtime.store.query("run_timers", [run_id])}
    parts += [describe_wait(row, timers, now) for row in marks]
    wanted = handed_over_for(runtime, run_id)
    for _token_id, token in sorted(state.tokens.items()):
        node, due_at = token["node"], token.get("due")
        missing = unregistered_activity(runtime, state, token)
        queue = engine_unserved(runtime, state, token) if missing is None else None
        if queue is not None:
            parts.append(unserved_words(state, token, queue))
        elif wanted is not None and _on_queue(runtime, state, token, wanted):
            parts.append(handed_over_words(state, token, wanted))
        elif missing is not None:
            parts.append(
                f"step {node!r} waits for activity {missing!r}, which is not registered in this "
                f"process; register it (@wf.activity({missing!r}) or engine.registry.register) "
                "and run the engine again (run_until_idle or start_workers)"
            )
        elif token["st"] == TokenState.READY and not runtime.driving:
            parts.append(
                f"{node!r} is ready (attempt {token['att']}) but no worker is running in this "
                "process: call engine.start_workers() or engine.run_until_idle()"
            )
        elif token["st"] == TokenState.READY:
            parts.append(f"running {node!r} (attempt {token['att']})")
        elif token["st"] == TokenState.CANCELLING:  # its join no longer needs it
            parts.append(f"waiting for {node!r} (attempt {token['att']}) to stop")
        elif token["st"] == TokenState.RETRY and due_at:
            due = datetime.fromisoformat(due_at)
            what = f"{node!r}"
            if "comp" in token:
                entry = state.saga.get(token["entry"])
                undo = entry["comp"] if entry is not None else "?"
                what = f"compensation {undo!r} of {node!r}"
            parts.append(f"retrying {what} (attempt {token['att']}) {in_words(due - now)}")
        elif token["st"] == TokenState.RUN_RETRY and due_at:
            due = datetime.fromisoformat(due_at)
            attempt, most, error = waiting_error(state)
            of = f" of {most}" if most is not None else ""
            parts.append(
                f"failed (run attempt {attempt}{of}): {error}; tried again at {due:%H:%M} "
                f"({in_words(due - now)}) from {node!r}"
            )
        elif token["st"] == TokenState.TIMER and due_at:
            due = datetime.fromisoformat(due_at)
            parts.append(
                f"waiting on a delay at {node!r} until {due:%Y-%m-%d %H:%M} ({in_words(due - now)})"
            )
    if not parts:
        return status.value
    if len(parts) > 3:
        parts = [*parts[:3], f"and {len(parts) - 3} more"]
    return "; ".join(parts)


def _ending(end: Ending, tokens: dict[str, Token]) -> str:
    """Words for a run whose end waits for its attempts in flight to stop."""
    stopping = [t for t in tokens.values() if t["st"] == TokenState.CANCELLING]
    what = ", ".join(f"{t['node']!r} attempt {t['att']}" for t in stopping[:3])
    if len(stopping) > 3:
        what += f" and {len(stopping) - 3} more"
    then = {
        EndKind.FAILED: f"then it fails: {_last_line(end.get('error') or '')}",
        EndKind.CANCELLED: "then it is cancelled",
        EndKind.UNWIND: f"then its saga unwinds: {_last_line(end.get('error') or '')}",
    }[end["end"]]
    count = len(stopping)
    return (
        f"ending: waiting for {count} attempt{'s' if count != 1 else ''} in flight to stop "
        f"({what}); {then}"
    )


def unregistered_activity(runtime: Runtime, state: RunState, token: Token) -> str | None:
    """The activity a ready step waits for when it is not registered in this process (the
    engine's registry), else None. On a shared store another process may have it."""
    if token["st"] != TokenState.READY:
        return None
    node = state.flow.nodes[token["node"]]
    name = node.compensation if "comp" in token else node.activity
    if not name or name in runtime.registry:
        return None
    return str(name)


def engine_unserved(runtime: Runtime, state: RunState, token: Token) -> str | None:
    """The queue a ready step waits for when this engine's workers do not serve it."""
    return unserved_queue(runtime.registry, runtime.scheduler.queues, state, token)


def handed_over_for(runtime: Runtime, run_id: str) -> str | None:
    """The queue a run was handed over for and that no engine has claimed it for yet (shared
    stores), else None."""
    if not runtime.writer.owner.shared or run_id in runtime.writer.runs:
        return None
    rows = runtime.store.query("run_wants_queue", [run_id])
    return str(rows[0][0]) if rows and rows[0][0] is not None else None


def _on_queue(runtime: Runtime, state: RunState, token: Token, queue: str) -> bool:
    if token["st"] != TokenState.READY:
        return False
    name = step_activity(state, token)
    return name in runtime.registry and runtime.registry.queue_of(name) == queue


def check_known(runtime: Runtime, run_id: str) -> None:
    """Raise ``UsageError`` for an unknown run id."""
    if runtime.writer.get_run(run_id) is None:
        raise UsageError(
            f"there is no run {run_id!r} in {runtime.target!r}; list runs with engine.runs()"
        )
