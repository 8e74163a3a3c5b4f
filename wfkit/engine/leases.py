"""Run leases: many engine processes advancing the runs of one shared database.

On a shared store (PostgreSQL) an engine owns the runs it holds in memory through a lease on the
run's row (``wf_instances.owner`` / ``lease_until``). It claims runs nobody holds — new runs, and
runs whose owner stopped renewing (a process that died) — with ``FOR UPDATE SKIP LOCKED``, so two
engines never claim the same run; every checkpoint renews the leases of the runs it writes and is
rolled back if one of them changed hands; runs that only wait are released. A crash therefore
re-runs at most the attempts that were in flight, on another engine, once the lease runs out.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from wfkit.errors import StoreError
from wfkit.store.base import Statement, Store

__all__ = ["Leases", "RunBusy"]


class RunBusy(StoreError):
    """Another engine process holds the run right now; try again shortly."""

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"run {run_id} is being advanced by another engine process; try again in a moment "
            "(its lease is renewed while it works and released when the run waits)"
        )
        self.run_id = run_id


class Leases:
    """This engine's identity and its lease operations on a shared store."""

    def __init__(self, store: Store, now: Callable[[], datetime], lease: timedelta) -> None:
        self.store = store
        self.now = now
        self.lease = lease
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.renewed_at: datetime | None = None
        # runs given back because this process lacks an activity they wait for: not claimed
        # again before the time given, so that engines that have it take them
        self.backoff: dict[str, datetime] = {}
        # the queues this engine's workers serve (None: every queue); the runs held here that
        # were handed over for a queue (see hand_over), and those claimed since the scheduler
        # last asked
        self.queues: frozenset[str] | None = None
        self.wanted: dict[str, str] = {}
        self.granted: set[str] = set()

    def until(self) -> datetime:
        """When a lease taken now runs out."""
        return self.now() + self.lease

    def claim(self, run_id: str) -> bool | None:
        """Take one run if nobody (alive) holds it: None when another engine holds it, else
        whether it was orphaned (taken from an owner whose lease ran out)."""
        now = self.now()
        rows = self.store.write(
            [
                Statement(
                    "claim_run",
                    [(run_id, self.owner, now, self.owner, now + self.lease, self.owner)],
                    returning=True,
                )
            ]
        )
        if not rows or not rows[0]:
            return None
        return bool(rows[0][0][1])

    def claim_many(self, limit: int, skip: list[str] | None = None) -> list[tuple[str, bool]]:
        """Take up to ``limit`` runs with work that nobody (alive) holds, but those in ``skip``.

        Returns ``(run_id, orphaned)`` pairs: ``orphaned`` is True for a run taken from an
        owner whose lease ran out (its process died or stalled), False for a free run.
        """
        now = self.now()
        self.backoff = {r: until for r, until in self.backoff.items() if until > now}
        skip = [*(skip or ()), *self.backoff]
        every = self.queues is None
        queues = sorted(self.queues or ())
        me = self.owner
        row = (now, every, queues, skip, me, limit, me, now + self.lease, me)
        rows = self.store.write([Statement("claim_runs", [row], returning=True)])
        found = rows[0] if rows else []
        for r in found:
            if r[2] is not None:
                self.wanted[r[0]] = r[2]
                self.granted.add(r[0])
        return [(r[0], bool(r[1])) for r in found]

    def hand_over(self, runs: list[tuple[str, str]]) -> None:
        """Give runs back for the engines that serve the queue named with each: only those
        claim it (``claim_runs``), so a run handed over is taken by an engine that runs it."""
        if runs:
            for run_id, _ in runs:
                self.wanted.pop(run_id, None)
            rows = [(queue, self.owner, run_id) for run_id, queue in runs]
            self.store.write(
                [
                    Statement("hand_over_run", rows),
                    Statement("notify_work", [("work",)], returning=True),
                ]
            )

    def guard(self, mine: list[str], leaving: list[str], wake: bool) -> list[Statement]:
        """Statements that go first in a checkpoint's transaction (see module docstring)."""
        statements = []
        for run_id in leaving:
            self.wanted.pop(run_id, None)
        if mine:
            statements.append(
                Statement("renew_leases", [(self.until(), self.owner, mine)], expect=len(mine))
            )
        if leaving:
            statements.append(Statement("release_runs", [(self.owner, leaving)]))
        if wake:
            statements.append(Statement("notify_work", [("work",)], returning=True))
        return statements

    def renew(self, run_ids: list[str]) -> set[str]:
        """Renew the leases of runs held in memory; return those that changed hands."""
        self.renewed_at = self.now()
        if not run_ids:
            return set()
        self.store.write([Statement("renew_leases", [(self.until(), self.owner, run_ids)])])
        held = {r[0] for r in self.store.query("owned_runs", [self.owner])}
        return set(run_ids) - held

    def release(self, run_ids: list[str]) -> None:
        """Give runs back (an engine that stops lets the others take them at once)."""
        if run_ids:
            for run_id in run_ids:
                self.wanted.pop(run_id, None)
            self.store.write([Statement("release_runs", [(self.owner, run_ids)])])

    def back_off(self, run_ids: list[str]) -> None:
        """Give runs back and leave them to other engines for one lease period.

        A run that was handed over for a queue keeps that queue: only engines serving it may
        claim it, so it never goes back to the engine that handed it over for lack of a
        worker (two engines would pass it back and forth)."""
        if not run_ids:
            return
        until = self.now() + self.lease
        for run_id in run_ids:
            self.backoff[run_id] = until
        kept = [(self.wanted.pop(r), self.owner, r) for r in run_ids if r in self.wanted]
        plain = [r for r in run_ids if r not in {k[2] for k in kept}]
        statements = [Statement("release_runs", [(self.owner, plain)])] if plain else []
        if kept:
            statements.append(Statement("hand_over_run", kept))
        statements.append(Statement("notify_work", [("work",)], returning=True))
        self.store.write(statements)

    def renewal_due(self) -> bool:
        """True when a third of the lease has passed since the last renewal."""
        return self.renewed_at is None or self.now() - self.renewed_at >= self.lease / 3
