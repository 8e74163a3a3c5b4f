"""Operating runs: signals, approvals, cancellation, suspension and saga recovery.

These are the engine's commands that come from people and other systems rather than from the
workflow itself. Each takes the writer lock, changes one run through a checkpoint and commits it
(the same path as steps), so of two concurrent commands on one wait exactly one wins.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from wfkit.definition.durations import parse_duration
from wfkit.definition.kinds import NodeKind
from wfkit.definition.values import json_problem, text_problem
from wfkit.engine import run_retries, sagas
from wfkit.engine.admission import refusal
from wfkit.engine.cancellation import CancelResult
from wfkit.engine.handles import Run
from wfkit.engine.leases import RunBusy
from wfkit.engine.loops import loop_path as frames_path
from wfkit.engine.nodes.wait import bound_patch, fit_payload
from wfkit.engine.records import RunStatus, WaitInfo
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import EventKind, Recovery, TokenState, WaitKind
from wfkit.errors import SignalError, UsageError
from wfkit.store.base import Statement

if TYPE_CHECKING:
    from wfkit.engine.runtime import Runtime
    from wfkit.engine.writer import Writer

__all__ = ["Operations"]

T = TypeVar("T")

_RECOVERIES = tuple(Recovery)  # what recover_compensation accepts (a tuple: `in` never hashes)
_BUSY_WAIT = 5.0  # seconds a command waits for another engine to let go of a run


def refuse_unstorable(error: type[Exception], action: str, **values: Any) -> None:
    """Raise ``error`` naming the first value that cannot be stored (text with a NUL or a lone
    surrogate, a payload that is not JSON): nothing is written, and a wait stays in place."""
    for what, value in values.items():
        if value is None:
            continue
        if isinstance(value, str):
            problem = text_problem(value)
            problem = None if problem is None else f"the {what} {problem}"
        else:
            problem = json_problem(value, what)
        if problem is not None:
            raise error(f"{action} refused: {problem}; nothing was changed")


def _signal_key(name: str, key: Any, actor: str | None, payload: dict[str, Any]) -> str | None:
    """The correlation key as stored, once the signal's parts are known to be storable."""
    key_text = None if key is None else str(key)
    refuse_unstorable(
        SignalError, f"signal {name!r}", name=name, key=key_text, actor=actor, payload=payload
    )
    return key_text


class Operations:
    """The engine's operator and signalling commands, over its :class:`Runtime` (``Engine``
    and ``Run`` delegate to them)."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime

    @property
    def max_payload(self) -> int:
        return self._rt.config.max_payload

    def cancel(self, run_id: str, actor: str | None = None, reason: str = "") -> CancelResult:
        """Cancel a run: its steps stop, its waits and timers go, and the actor is recorded.

        Returns a :class:`~wfkit.engine.cancellation.CancelResult`: how many pending steps,
        waits and timers were cancelled, how many attempts in flight were asked to stop (the
        run is cancelled once they have), and the run's status after the call. A run that had
        already ended is left as it is (``already_ended=True``, nothing written).

        Raises
        ------
        UsageError
            For an unknown run, or an actor or reason that cannot be stored.
        """
        refuse_unstorable(UsageError, f"cancelling run {run_id}", actor=actor, reason=reason)

        def cancel(writer: Writer) -> CancelResult:
            with self.holding(run_id) as run:
                status = RunStatus(run.status)
                if status.terminal:
                    return CancelResult(run_id, 0, 0, True, status)
                # its child runs (and theirs) are cancelled with it, in this commit: take
                # them all first (RunBusy while another engine holds one: nothing changed)
                writer.subruns.family(run)
                pending = len(run.tokens)
                writer.checkpoint(run, actor).cancel_run(reason)
                stopping = len(run.tokens)  # what is left: attempts the end waits for
                return CancelResult(
                    run_id, pending - stopping, stopping, False, RunStatus(run.status)
                )

        return self.command(cancel)

    # --- waits --------------------------------------------------------------------------------

    def signal(
        self,
        name: str,
        key: Any = None,
        payload: dict[str, Any] | None = None,
        *,
        actor: str | None = None,
    ) -> bool:
        """Resume the wait for signal ``name`` with correlation ``key``.

        Returns True when a wait was resumed, False when nothing waits (the payload is then not
        applied anywhere). Of concurrent senders to one wait exactly one gets True.
        """
        payload = payload or {}
        if not isinstance(payload, dict):
            raise SignalError(
                f"a signal payload must be a JSON object, got {type(payload).__name__}"
            )
        key_text = _signal_key(name, key, actor, payload)
        return self.command(
            lambda writer: self._deliver(writer, name, key_text, payload, actor),
            signal=(name, key_text),
        )

    def _deliver(
        self,
        writer: Writer,
        name: str,
        key_text: str | None,
        payload: dict[str, Any],
        actor: str | None,
    ) -> bool:
        """Resume the wait for (name, key) in the batch being built; False when none waits."""
        found = writer.signal_wait(name, key_text)
        if found is None:
            return False
        run_id, token_id, node_id, row = found[0], found[1], found[2], found[3:] or None
        try:
            with self.holding(run_id, row) as run:
                token = run.tokens.get(token_id)
                if token is None or token["node"] != node_id or token["st"] != TokenState.WAIT:
                    return False  # another sender's signal took this wait first
                node = run.flow.nodes[node_id]
                payload = self._check_payload(node, name, key_text, payload)
                # before the checkpoint: a command that fails leaves the run's changes in it
                ops = bound_patch(node, run.data, payload, writer.binder)
                cp = writer.checkpoint(run, actor)
                cp.drop_bookmark(token_id)
                handler: Any = writer.handlers[NodeKind.WAIT]
                handler.on_signal(cp, token_id, node_id, node, payload, ops=ops)
        except RunBusy:
            # another engine holds the run: if it took this wait meanwhile, we lost the race
            if not writer.find_bookmark("signal", name, key_text):
                return False
            raise
        return True

    def _check_payload(
        self, node: Any, name: str, key: str | None, payload: dict[str, Any]
    ) -> dict[str, Any]:
        """Validate a payload against the wait's model; ``SignalError`` leaves the wait as it is."""
        size = len(json.dumps(payload, default=str).encode())
        if size > self.max_payload:
            raise SignalError(
                f"signal {name!r} (key {key}) refused: payload is {size:,} bytes, over the "
                f"{self.max_payload:,}-byte limit; the wait is left in place"
            )
        try:
            return fit_payload(node, payload)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'payload'}: {e['msg']}" for e in exc.errors()
            )
            raise SignalError(
                f"signal {name!r} (key {key}) refused: the payload does not fit {exc.title} "
                f"({problems}); the wait is left in place — fix the payload and send it again"
            ) from None
        except (TypeError, ValueError) as exc:
            raise SignalError(
                f"signal {name!r} (key {key}) refused: payload is not JSON ({exc}); "
                "the wait is left in place"
            ) from None

    def check_payload(self, run_id: str, node_id: str, payload: Any) -> dict[str, Any]:
        """The payload as the wait ``node_id`` of run ``run_id`` would take it.

        Raises ``SignalError`` (saying what does not fit) without touching the wait.
        """
        with self._rt.writer.lock:
            run = self.live(run_id)
            if node_id not in run.flow.nodes:
                raise UsageError(f"run {run_id} has no node {node_id!r}")
            node = run.flow.nodes[node_id]
        name = getattr(node.config, "signal", node_id)
        refuse_unstorable(SignalError, f"signal {name!r}", payload=payload)
        return self._check_payload(node, name, None, payload)

    def post_signal(
        self,
        name: str,
        key: Any = None,
        payload: dict[str, Any] | None = None,
        *,
        expires: str | timedelta | None = "1d",
        actor: str | None = None,
    ) -> bool:
        """Deliver a signal now if its wait is open, else keep it for the next matching wait.

        Kept signals are taken first-in first-out and dropped after ``expires``. Returns True
        when a waiting run took it at once, False when it was kept.
        """
        payload = payload or {}
        key_text = _signal_key(name, key, actor, payload)
        size = len(json.dumps(payload, default=str).encode())
        if size > self.max_payload:
            raise SignalError(
                f"signal {name!r} (key {key}) refused: payload is {size:,} bytes, over the "
                f"{self.max_payload:,}-byte limit; send a smaller payload (keep large content "
                "elsewhere and pass a reference)"
            )
        until_delta = parse_duration(expires) if expires is not None else None

        def post(writer: Writer) -> bool:
            if self._deliver(writer, name, key_text, payload, actor):
                return True
            now = self._rt.clock.now()
            until = now + until_delta if until_delta is not None else None
            signal_id = _posted_id()
            self._rt.store.write(
                [
                    Statement("delete_expired_signals", [(now,)]),
                    Statement(
                        "insert_posted_signal",
                        [(signal_id, name, key_text, json.dumps(payload), now, until, actor)],
                    ),
                ]
            )
            writer.posted.add((name, key_text))
            return False

        # alone: the batch before it is durable, so a wait it opened is found in the store
        return self.command(post, alone=True)

    def approve(
        self,
        run_id: str,
        node: str,
        approved: bool = True,
        *,
        actor: str | None = None,
        comment: str | None = None,
        loop_path: Sequence[int] | None = None,
    ) -> None:
        """Decide the open approval ``node`` of run ``run_id``; records actor, comment and time.

        Inside a for_each each item has its approval: ``loop_path`` (the item's indexes,
        outermost first, as ``WaitInfo.loop_path`` gives them) names the one decided; without
        it the oldest open approval of the node is.
        """
        refuse_unstorable(SignalError, f"deciding approval {node!r}", actor=actor, comment=comment)
        wanted = _loop_path(loop_path)

        def decide(writer: Writer) -> None:
            if wanted is None:
                rows = writer.find_bookmark(WaitKind.APPROVAL, node, run_id)
            else:
                rows = self._rt.store.query("find_bookmarks", [WaitKind.APPROVAL, node, run_id])
            if not rows:
                open_ = [w.node_id for w in self.waiting() if w.run_id == run_id]
                raise SignalError(
                    f"run {run_id} has no open approval {node!r} "
                    f"(open: {', '.join(open_) or 'none'}); check engine.waiting()"
                )
            token_id = rows[0][1]
            with self.holding(run_id) as run:
                if wanted is not None:  # the item's approval, by where its token stands
                    token_id = _approval_of_item(run, run_id, node, wanted, rows)
                token = run.tokens.get(token_id)
                if token is None or token["node"] != node or token["st"] != TokenState.WAIT:
                    raise SignalError(
                        f"approval {node!r} of run {run_id} was decided meanwhile; "
                        "check engine.waiting() and the run's history"
                    )
                cp = writer.checkpoint(run, actor)
                cp.drop_bookmark(token_id)
                approval: Any = writer.handlers[NodeKind.APPROVAL]
                approval.decide(cp, token_id, node, approved, comment)

        self.command(decide)

    # --- recovery -----------------------------------------------------------------------------

    def live(self, run_id: str) -> RunState:
        run = self._rt.writer.get_run(run_id)
        if run is None:
            raise UsageError(f"there is no run {run_id!r}; list runs with engine.runs()")
        return run

    def command(
        self,
        fn: Callable[[Writer], T],
        *,
        alone: bool = False,
        signal: tuple[str, str | None] | None = None,
    ) -> T:
        """Run ``fn`` in the writer's next group commit; wait while another engine process
        holds a run it needs (shared stores), outside the writer lock. ``signal``: the (name,
        key) whose wait ``fn`` looks up (one query finds those of every command in a round)."""
        deadline = time.monotonic() + _BUSY_WAIT
        while True:
            try:
                return self._rt.scheduler.submit(fn, alone=alone, signal=signal)
            except RunBusy:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    @contextmanager
    def holding(self, run_id: str, row: tuple[Any, ...] | None = None) -> Iterator[RunState]:
        """The run, held by this engine while a command changes it (under the writer lock).

        On a shared store the run is claimed first (``RunBusy`` while another engine holds it);
        if the command leaves it without a checkpoint the run is given back.
        """
        writer = self._rt.writer
        had = run_id in writer.runs
        run = writer.take(run_id, row)
        if run is None:
            raise UsageError(f"there is no run {run_id!r}; list runs with engine.runs()")
        try:
            yield run
        finally:
            if not had and not writer.in_batch(run_id) and writer.runs.get(run_id) is run:
                writer.runs.pop(run_id, None)
                writer.owner.release([run_id])

    def resume(self, run_id: str, *, actor: str | None = None) -> None:
        """Continue a suspended run: its parked step gets a fresh set of attempts."""
        refuse_unstorable(UsageError, f"resuming run {run_id}", actor=actor)

        def resume(writer: Writer) -> None:
            with self.holding(run_id) as run:
                stuck = [t for t, tok in run.tokens.items() if tok["st"] == TokenState.SUSPENDED]
                if run.status != RunStatus.SUSPENDED.value or not stuck:
                    raise UsageError(
                        f"run {run_id} is {run.status}, not suspended; nothing to resume"
                    )
                if any("comp" in run.tokens[t] for t in stuck):
                    raise UsageError(
                        f"run {run_id} is suspended on a failed compensation; choose "
                        "engine.recover_compensation(run_id, action='retry'|'skip'|'abandon')"
                    )
                cp = writer.checkpoint(run, actor)
                run.set_status(RunStatus.RUNNING.value)
                steps = [run.tokens[t]["node"] for t in stuck]
                cp.event(EventKind.RUN_RESUMED, detail={"steps": steps})
                for token_id in stuck:
                    cp.ready(token_id, attempt=1)

        self.command(resume)

    def recover_compensation(
        self, run_id: str, action: str = "retry", *, actor: str | None = None
    ) -> None:
        """Decide a failed compensation: ``retry`` it, ``skip`` it (recorded as a decision), or
        ``abandon`` the unwind (the run fails as it stands)."""
        refuse_unstorable(UsageError, f"recovering run {run_id}", actor=actor)
        if action not in _RECOVERIES:
            raise UsageError(f"action must be 'retry', 'skip' or 'abandon', not {action!r}")
        decision = Recovery(action)

        def recover(writer: Writer) -> None:
            with self.holding(run_id) as run:
                if not any(
                    t.get("comp") and t["st"] == TokenState.SUSPENDED for t in run.tokens.values()
                ):
                    raise UsageError(
                        f"run {run_id} ({run.status}) has no failed compensation to recover; "
                        "use engine.resume for a suspended step"
                    )
                sagas.recover(writer.checkpoint(run, actor), decision)

        self.command(recover)

    def retry(self, run_id: str, *, actor: str | None = None) -> None:
        """Try a failed run again now, from where it failed (docs/semantics.md §16).

        Steps that completed are not run again; the step that failed gets a fresh set of
        attempts (after a saga unwind, the run goes on from the first step of the saga it
        undid). It is one more run attempt, with or without a ``wf.RunRetry`` on the workflow,
        and is recorded ``run.retried`` with the actor.

        Raises
        ------
        UsageError
            When the run is unknown or not ``failed`` (a run waiting for its next attempt
            included), or failed where it cannot go on (say, a strict merge conflict or an
            abandoned compensation): nothing is changed.

        Examples
        --------
        >>> import wfkit as wf
        >>> down = {"mail": True}
        >>> @wf.activity("docs.mail-once")
        ... def mail(ctx):
        ...     if down["mail"]:
        ...         raise RuntimeError("mail server down")
        >>> engine = wf.Engine(":memory:")
        >>> _ = engine.register(wf.Workflow("mailer").start_with("docs.mail-once", max_attempts=1))
        >>> run = engine.start("mailer")
        >>> engine.run_until_idle()
        >>> run.explain()
        'failed: RuntimeError: mail server down'
        >>> down["mail"] = False
        >>> engine.retry(run.id, actor="ops")
        >>> engine.run_until_idle()
        >>> run.status.value, run.view().run_attempt
        ('completed', 2)
        """
        refuse_unstorable(UsageError, f"retrying run {run_id}", actor=actor)

        def retry(writer: Writer) -> None:
            with self.holding(run_id) as run:
                if run.status != RunStatus.FAILED.value:
                    waiting = any(t["st"] == TokenState.RUN_RETRY for t in run.tokens.values())
                    why = (
                        "it failed and waits for its next run attempt (its RunRetry timer); "
                        "let the timer fire, or cancel it"
                        if waiting
                        else "only a failed run can be retried (a suspended one: engine.resume)"
                    )
                    raise UsageError(f"run {run_id} is {run.status}, not failed; {why}")
                if not run_retries.resumable(run):
                    raise UsageError(
                        f"run {run_id} failed where it cannot go on ({run.error or 'failed'}: a "
                        "strict merge conflict, an abandoned compensation, a terminate inside a "
                        "branch, or a run that failed before run retries existed); start it "
                        f"afresh with engine.restart_as_new({run_id!r})"
                    )
                run_retries.retry_by_hand(writer.checkpoint(run, actor))

        self.command(retry)
        self._rt.scheduler.wake()  # on a shared store the run waits to be claimed

    def restart_as_new(self, run_id: str, *, actor: str | None = None) -> Run:
        """Start a fresh run of the same definition with the original input; lineage both ways."""
        refuse_unstorable(UsageError, f"restarting run {run_id}", actor=actor)
        rows = self._rt.store.query("instance_origin", [run_id])
        if not rows:
            raise UsageError(f"there is no run {run_id!r}; list runs with engine.runs()")
        workflow_id, version, digest, input_json, status = rows[0]
        if not RunStatus(status).terminal:
            raise UsageError(f"run {run_id} is {status}; cancel it first, then restart it as new")
        flow = self._rt.writer.flow(workflow_id, version, digest)
        self._rt.definitions.gate.check_active(flow, reload=self._rt.store.shared)
        reasons = self._rt.definitions.gate.reasons(flow.workflow, json.loads(input_json), actor)
        if reasons:
            raise refusal(flow, reasons, f"restart of run {run_id} as a new run")

        def restart(writer: Writer) -> str:
            self._rt.definitions.gate.check_active(
                flow
            )  # a deactivate committed since the check above wins
            with self.holding(run_id) as old:
                new = RunState(uuid.uuid4().hex[:16], flow, json.loads(input_json))
                writer.add_instance(new, input_json, actor, parent=run_id)
                cp = writer.checkpoint(new, actor)
                cp.event(
                    EventKind.RUN_STARTED,
                    detail={"restart_of": run_id, "workflow": flow.id, "version": flow.version},
                )
                cp.spawn(flow.start, [])
                restarted = {"new_run": new.run_id}
                writer.checkpoint(old, actor).event(EventKind.RUN_RESTARTED, detail=restarted)
                return new.run_id

        new_id = self.command(restart)
        self._rt.scheduler.wake()  # on a shared store the new run waits to be claimed
        return Run(self._rt, new_id)

    def waiting(self) -> list[WaitInfo]:
        """Every open wait and approval: run, node, key, since, deadline and, inside a
        for_each, the item it belongs to (``loop_path``)."""
        waits = []
        for r in self._rt.store.query("bookmarks"):
            detail = json.loads(r[8] or "{}")
            path = tuple(int(i) for i in detail.get("loop_path", ()))  # park() writes it
            waits.append(WaitInfo(r[0], r[2], WaitKind(r[3]), r[4], r[5], r[6], r[7], detail, path))
        return waits


def _loop_path(value: Sequence[int] | None) -> tuple[int, ...] | None:
    """``loop_path=`` as given to approve: None, or a sequence of item indexes."""
    if value is None:
        return None
    if (
        not isinstance(value, Sequence)
        or isinstance(value, (str, bytes))
        or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
    ):
        raise UsageError(
            f"loop_path={value!r}: give the item's for_each indexes as a list of integers, "
            "outermost first, as engine.waiting() shows them (e.g. loop_path=[2]); nothing was "
            "decided"
        )
    return tuple(value)


def _approval_of_item(
    run: RunState, run_id: str, node: str, wanted: tuple[int, ...], rows: list[Any]
) -> str:
    """The token of the open approval ``node`` of the for_each item ``wanted``, among the
    bookmark ``rows``; the item is read from the token's frames (bookmarks written before
    their detail named it are found too)."""
    items: dict[str, tuple[int, ...]] = {}
    for row in rows:
        token = run.tokens.get(row[1])
        if token is not None:
            items[row[1]] = frames_path(run.flow, token["fr"])
    for token_id, path in items.items():
        if path == wanted:
            return token_id
    listed = ", ".join(str(list(path)) for path in sorted(items.values())) or "none"
    raise SignalError(
        f"run {run_id} has no open approval {node!r} for item {list(wanted)} (open for items: "
        f"{listed}); check engine.waiting()"
    )


_posted = itertools.count()


def _posted_id() -> str:
    """Ids of posted signals sort in posting order (the clock may stand still)."""
    return f"{time.time_ns():020d}-{next(_posted):08d}"
