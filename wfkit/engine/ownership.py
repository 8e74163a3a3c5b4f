"""How an engine owns the runs it advances: alone on its database, or leased on a shared one.

The writer and the scheduler talk to one :class:`Ownership` handed in at construction and never
ask which kind it is:

- :class:`SoleOwnership` (a DuckDB file, or any store one process owns): every live run is this
  engine's; at start-up it loads them all, timers live in an in-memory heap, and nothing is
  claimed, renewed or released.
- :class:`LeasedOwnership` (PostgreSQL shared by many engine processes): a run is this engine's
  while it holds the run's lease (:mod:`wfkit.engine.leases`); runs are claimed as they become
  free, due timers are read from the table (any engine may have made them), every checkpoint
  renews and checks the leases it writes, runs that only wait are given back, and LISTEN/NOTIFY
  wakes the engine when another one made work.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from wfkit.engine.leases import Leases
from wfkit.engine.timers import TimerHeap
from wfkit.engine.vocabulary import IN_FLIGHT
from wfkit.store.base import Statement, Store
from wfkit.store.rows import DueTimer

if TYPE_CHECKING:
    from wfkit.engine.checkpoint import Checkpoint

__all__ = ["LeasedOwnership", "Ownership", "SoleOwnership", "TimerRow"]

TimerRow = tuple[datetime, str, str, str]  # due, run_id, token_id, kind
Summary = Callable[[Any, datetime], tuple[Any, ...]]  # a run's wf_instances row


class Ownership(Protocol):
    """What the writer and scheduler need to know about owning runs."""

    name: str  # who this engine is, as other processes see it
    shared: bool  # other engine processes advance runs of the same database

    def claim(self, run_id: str) -> bool | None:
        """Take one run to change it: None when another engine holds it, else whether it was
        orphaned (taken from an engine whose lease ran out: its steps may have been running)."""
        ...

    def claim_free(self, limit: int) -> list[tuple[str, bool]]:
        """Take up to ``limit`` runs that have work and that nobody advances: (run, orphaned)."""
        ...

    def release(self, run_ids: list[str]) -> None:
        """Give runs back so that other engines may take them."""
        ...

    def back_off(self, run_ids: list[str]) -> None:
        """Give runs back and leave them to other engines for a while (their steps wait for
        activities this process does not have)."""
        ...

    def forget_back_off(self) -> None:
        """Claim runs given back by :meth:`back_off` again (activities were registered)."""
        ...

    def serve(self, queues: frozenset[str] | None) -> None:
        """Claim only runs this engine's workers can advance: those not handed over for a
        queue, and those handed over for one of ``queues`` (None: every queue)."""
        ...

    def hand_over(self, runs: list[tuple[str, str]]) -> None:
        """Give ``(run, queue)`` back to the engines that serve ``queue``: its ready steps
        belong to a queue this engine does not serve."""
        ...

    def take_granted(self) -> set[str]:
        """The runs claimed since the last call that were handed over for a queue served here
        (their steps run here even where this process's registry files them elsewhere)."""
        ...

    def renew(self, held: list[str]) -> set[str]:
        """Renew what this engine holds when due; return the runs that changed hands."""
        ...

    def lost(self, run_ids: list[str]) -> set[str]:
        """Those of ``run_ids`` that this engine no longer holds (another engine took them)."""
        ...

    def startup_runs(self) -> bool:
        """True when this engine takes up every live run of the database at start-up."""
        ...

    def guard(
        self, batch: list[Checkpoint], new_runs: dict[str, Any], summary: Summary
    ) -> list[Statement]:
        """Statements that open a batch's transaction (renew, release, wake other engines)."""
        ...

    def may_have_posted(self, name: str, key: str | None, known: set[Any]) -> bool:
        """Whether a signal may have been posted for ``(name, key)`` (worth a query)."""
        ...

    def add_timers(self, rows: Iterable[TimerRow]) -> None:
        """Timers this engine committed."""
        ...

    def due_timers(self, now: datetime, limit: int) -> list[TimerRow]:
        """Timers due by ``now`` (taken: each is returned once)."""
        ...

    def next_due(self) -> datetime | None:
        """When the next timer is due, if any."""
        ...

    def wake_every(self) -> float | None:
        """Seconds after which an idle engine must look again (None: only when woken)."""
        ...

    def listen(self, wake: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``wake`` when another engine makes work; returns how to stop listening."""
        ...


class SoleOwnership:
    """One engine owns every run of its database."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.name = f"pid {os.getpid()}"
        self.shared = False
        self.timers = TimerHeap()
        for run_id, token_id, _node, kind, due in store.query("timers"):
            self.timers.push(due, run_id, token_id, kind)

    def claim(self, run_id: str) -> bool | None:
        return False  # its runs are taken up at start-up (Writer.recover), never orphaned later

    def claim_free(self, limit: int) -> list[tuple[str, bool]]:
        return []

    def release(self, run_ids: list[str]) -> None:
        return None

    def back_off(self, run_ids: list[str]) -> None:
        return None

    def forget_back_off(self) -> None:
        return None

    def serve(self, queues: frozenset[str] | None) -> None:
        return None

    def hand_over(self, runs: list[tuple[str, str]]) -> None:
        return None  # the only engine of its database keeps its runs

    def take_granted(self) -> set[str]:
        return set()

    def renew(self, held: list[str]) -> set[str]:
        return set()

    def lost(self, run_ids: list[str]) -> set[str]:
        return set()

    def startup_runs(self) -> bool:
        return True

    def guard(
        self, batch: list[Checkpoint], new_runs: dict[str, Any], summary: Summary
    ) -> list[Statement]:
        return []

    def may_have_posted(self, name: str, key: str | None, known: set[Any]) -> bool:
        return (name, key) in known

    def add_timers(self, rows: Iterable[TimerRow]) -> None:
        for due, run_id, token_id, kind in rows:
            self.timers.push(due, run_id, token_id, kind)

    def due_timers(self, now: datetime, limit: int) -> list[TimerRow]:
        return self.timers.pop_due(now)

    def next_due(self) -> datetime | None:
        return self.timers.next_due()

    def wake_every(self) -> float | None:
        return None

    def listen(self, wake: Callable[[], None]) -> Callable[[], None] | None:
        return None


class LeasedOwnership:
    """Runs are this engine's while it holds their leases on a shared database."""

    def __init__(self, store: Store, now: Callable[[], datetime], lease: timedelta) -> None:
        self.store = store
        self.leases = Leases(store, now, lease)
        self.name = self.leases.owner
        self.shared = True

    def claim(self, run_id: str) -> bool | None:
        return self.leases.claim(run_id)

    def claim_free(self, limit: int) -> list[tuple[str, bool]]:
        return self.leases.claim_many(limit) if limit > 0 else []

    def release(self, run_ids: list[str]) -> None:
        self.leases.release(run_ids)

    def back_off(self, run_ids: list[str]) -> None:
        self.leases.back_off(run_ids)

    def forget_back_off(self) -> None:
        self.leases.backoff.clear()

    def serve(self, queues: frozenset[str] | None) -> None:
        self.leases.queues = queues

    def hand_over(self, runs: list[tuple[str, str]]) -> None:
        self.leases.hand_over(runs)

    def take_granted(self) -> set[str]:
        granted, self.leases.granted = self.leases.granted, set()
        return granted

    def renew(self, held: list[str]) -> set[str]:
        return self.leases.renew(held) if self.leases.renewal_due() else set()

    def lost(self, run_ids: list[str]) -> set[str]:
        held = {r[0] for r in self.store.query("owned_runs", [self.name])}
        return set(run_ids) - held

    def startup_runs(self) -> bool:
        return False  # runs are claimed as they become free

    def guard(
        self, batch: list[Checkpoint], new_runs: dict[str, Any], summary: Summary
    ) -> list[Statement]:
        """Renew the leases of the runs written (the transaction fails if one changed hands),
        release the runs that leave memory, and wake the other engines when there is new work.

        A run that a signal, approval, timer or ``resume`` wakes from waiting or suspended is
        handed back like a new run: its summary row says ``running`` at once (engines claim by
        that status; waiting for the deferred summaries could strand it) and it is released, so
        whichever engine runs workers claims it — not the process that happened to send the
        signal (it may run none, and keep the run until its lease ran out).
        """
        old = [cp for cp in batch if cp.run.run_id not in new_runs]
        woken = [cp for cp in old if cp.woke]
        leaving = [
            cp.run.run_id
            for cp in old
            if cp.woke or not any(t["st"] in IN_FLIGHT for t in cp.run.tokens.values())
        ]
        wake = bool(new_runs) or bool(woken) or any(cp.timers_add or cp.wakes for cp in batch)
        statements = self.leases.guard([cp.run.run_id for cp in old], leaving, wake)
        if woken:
            rows = [summary(cp.run, cp.now) for cp in woken]
            statements.append(Statement("update_instance", rows))
        return statements

    def may_have_posted(self, name: str, key: str | None, known: set[Any]) -> bool:
        return True  # another engine may have kept one: always look

    def add_timers(self, rows: Iterable[TimerRow]) -> None:
        return None  # the table is the heap: every engine reads due timers from it

    def due_timers(self, now: datetime, limit: int) -> list[TimerRow]:
        due = [DueTimer._make(row) for row in self.store.query("due_timers", [now, limit])]
        return [(row.due_at, row.run_id, row.token, row.kind) for row in due]

    def next_due(self) -> datetime | None:
        row = self.store.query("next_timer")
        return row[0][0] if row and row[0][0] is not None else None

    def wake_every(self) -> float | None:
        # wake to renew leases and to take over the runs of an engine that died
        return self.leases.lease.total_seconds() / 3

    def listen(self, wake: Callable[[], None]) -> Callable[[], None] | None:
        listen = getattr(self.store, "listen", None)
        return listen("wfkit_work", wake) if listen is not None else None
