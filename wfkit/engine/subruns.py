"""Child runs: how a call node starts one, and how the child's end reaches its caller.

The writer hands every checkpoint a :class:`Subruns` port. A call node asks it to resolve the
called workflow (the latest registered version unless pinned), to admit the input against the
child's data model, and to start the child: the child's first checkpoint joins the batch of
the checkpoint that parks the caller, so both are one transaction and a child is never
half-started.

Before each commit the writer calls :meth:`Subruns.settle`. For every run of the batch that
ends and has a caller, the caller's waiting token is resumed in the same batch (the caller is
taken into memory if it was parked): one transaction ends the child and moves the caller on.
For every calling token removed (the caller was cancelled, failed or moved on without it), the
child is cancelled in the same batch, and so on down to grandchildren. Resuming is at most once:
the caller's token must still wait for that very child, and the change is one checkpoint.

On a shared store (PostgreSQL) the caller may be held by another engine process at that moment.
The child's transaction then adds a due timer row of kind ``call`` for the caller's token; the
engine that holds the caller fires it, reads the child's outcome from its summary row and
resumes the caller the same way.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wfkit.definition.kinds import NodeKind
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Caller
from wfkit.engine.flows import CompiledFlow
from wfkit.engine.leases import RunBusy
from wfkit.engine.loading import run_row
from wfkit.engine.nodes.call import ChildOutcome, call_lineage
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import EndKind, EventKind, RunStatus

if TYPE_CHECKING:
    from wfkit.engine.writer import Writer

__all__ = ["Subruns"]

log = logging.getLogger("wfkit.engine")

Resolve = Callable[[str, int | None], CompiledFlow]
Admit = Callable[[CompiledFlow, Any], dict[str, Any]]


class Subruns:
    """Starts child runs for call nodes and carries their ends back to the callers."""

    def __init__(self, writer: Writer, resolve: Resolve, admit: Admit) -> None:
        self.writer = writer
        self.resolve = resolve  # raises AdmissionError for an unknown workflow or version
        self.admit = admit  # raises AdmissionError with the data model's reasons

    # --- what a call node asks ------------------------------------------------------------------

    def start(
        self, cp: Checkpoint, token_id: str, node_id: str, flow: CompiledFlow, document: Any
    ) -> str:
        """Start a child run of ``flow`` with ``document``, called by ``cp``'s run."""
        writer = self.writer
        parent = cp.run
        child = RunState(uuid.uuid4().hex[:16], flow, document)
        calling = parent.caller.get("run")
        depth = (calling["depth"] if calling is not None else 0) + 1
        caller: Caller = {
            "run": parent.run_id,
            "token": token_id,
            "node": node_id,
            "depth": depth,
            "lineage": call_lineage(parent),
        }
        child.put("caller", "run", caller)
        text = json.dumps(document, separators=(",", ":"))
        writer.add_instance(child, text, cp.actor, parent=parent.run_id)
        child_cp = writer.checkpoint(child, cp.actor)
        child_cp.event(
            EventKind.RUN_STARTED,
            detail={
                "workflow": flow.id,
                "version": flow.version,
                "called_by": {"run": parent.run_id, "node": node_id},
            },
        )
        child_cp.spawn(flow.start, [])
        return child.run_id

    def outcome(self, run_id: str | None) -> ChildOutcome | None:
        """How the child ``run_id`` stands in the store (its summary row)."""
        if not run_id:
            return None
        row = run_row(self.writer.store, run_id)
        if row is None:
            return None
        return ChildOutcome(run_id, row.status, json.loads(row.data or row.input), row.error)

    # --- before each commit -----------------------------------------------------------------

    def settle(self) -> None:
        """Settle the statuses of the batch; carry each child's end to its caller and each
        removed call to its child, until nothing more follows."""
        ended: set[str] = set()
        changed = True
        while changed:
            changed = False
            for cp in self.writer.batch_checkpoints():
                cp.settle_status()
                while cp.orphans:
                    self._cancel_child(cp, cp.orphans.pop(0))
                    changed = True
                run = cp.run
                if (
                    "run" in run.caller
                    and run.run_id not in ended
                    and RunStatus(run.status).terminal
                    and not RunStatus(cp.start_status).terminal
                ):
                    ended.add(run.run_id)
                    self._resume_caller(cp)
                    changed = True

    def _resume_caller(self, child_cp: Checkpoint) -> None:
        child = child_cp.run
        caller = child.caller["run"]
        writer = self.writer
        try:
            parent = writer.take(caller["run"])
        except RunBusy:  # another engine process holds the caller: wake it through the store
            child_cp.wakes.append((caller["run"], caller["token"], caller["node"], child_cp.now))
            return
        if parent is None:
            log.warning("run %s ended; its caller %s is gone", child.run_id, caller["run"])
            return
        token = parent.tokens.get(caller["token"])
        if token is None or token.get("child") != child.run_id:
            return  # the caller moved on (cancelled, failed, or already resumed)
        node_id = caller["node"]
        handler: Any = writer.handlers[NodeKind.CALL]
        outcome = ChildOutcome(child.run_id, child.status, child.data, child.error)
        cp = writer.checkpoint(parent)
        handler.child_ended(cp, caller["token"], node_id, parent.flow.nodes[node_id], outcome)

    def _cancel_child(self, cp: Checkpoint, child_id: str) -> None:
        writer = self.writer
        try:
            child = writer.take(child_id)
        except RunBusy:
            log.warning(
                "run %s no longer waits for its child run %s, which another engine process "
                "holds now; cancel the child with engine.cancel(%r)",
                cp.run.run_id,
                child_id,
                child_id,
            )
            return
        if child is None or RunStatus(child.status).terminal:
            return
        ending = cp.run.ending.get("run")
        cancelled = cp.run.status == RunStatus.CANCELLED.value or (
            ending is not None and ending["end"] == EndKind.CANCELLED
        )
        reason = f"its calling run {cp.run.run_id} " + (
            "was cancelled" if cancelled else "no longer waits for it"
        )
        writer.checkpoint(child, cp.actor).cancel_run(reason)

    def family(self, run: RunState) -> list[RunState]:
        """The live descendants of ``run`` (children of its waiting calls, theirs...), each
        taken into this engine's memory; ``RunBusy`` (nothing kept) when another engine holds
        one."""
        writer = self.writer
        found: list[RunState] = []
        taken: list[str] = []
        todo = [t["child"] for t in run.tokens.values() if t.get("child")]
        try:
            while todo:
                child_id = todo.pop(0)
                had = child_id in writer.runs or writer.in_batch(child_id)
                child = writer.take(child_id)
                if child is None:
                    continue
                if not had:
                    taken.append(child_id)
                if RunStatus(child.status).terminal:
                    continue
                found.append(child)
                todo += [t["child"] for t in child.tokens.values() if t.get("child")]
        except RunBusy:
            for run_id in taken:
                writer.runs.pop(run_id, None)
            writer.owner.release(taken)
            raise
        return found
