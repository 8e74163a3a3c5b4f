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

    def until(self) -> datetime:
        """When a lease taken now runs out."""
        return self.now() + self.lease

    def claim(self, run_id: str) -> bool:
        """Take one run if nobody (alive) holds it."""
        now = self.now()
        rows = self.store.write(
            [
                Statement(
                    "claim_run",
                    [(self.owner, now + self.lease, run_id, self.owner, now)],
                    returning=True,
                )
            ]
        )
        return bool(rows and rows[0])

    def claim_many(self, limit: int) -> list[str]:
        """Take up to ``limit`` runs with work that nobody (alive) holds."""
        now = self.now()
        rows = self.store.write(
            [
                Statement(
                    "claim_runs",
                    [(self.owner, now + self.lease, now, limit)],
                    returning=True,
                )
            ]
        )
        return [r[0] for r in rows[0]] if rows else []

    def guard(self, mine: list[str], leaving: list[str], wake: bool) -> list[Statement]:
        """Statements that go first in a checkpoint's transaction (see module docstring)."""
        statements = []
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
            self.store.write([Statement("release_runs", [(self.owner, run_ids)])])

    def renewal_due(self) -> bool:
        """True when a third of the lease has passed since the last renewal."""
        return self.renewed_at is None or self.now() - self.renewed_at >= self.lease / 3
