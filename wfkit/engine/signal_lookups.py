"""Where a signal goes: the open wait it resumes, or a signal posted before its wait.

A round's signals are looked up together (two queries per signal name, not two per signal); a
wait opened in the batch being built (its checkpoint not written yet) takes a signal too. Posted
signals are taken at most once: the batch remembers those it took until its commit settles.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.ownership import Ownership
from wfkit.store.base import Store
from wfkit.store.rows import BookmarkRow, PostedSignal, RunRow, SignalWait

__all__ = ["SignalLookups"]

SignalKey = tuple[str, str | None]  # (name, key)


class SignalLookups:
    """The open waits of this round's signals and the posted signals the batch took."""

    def __init__(self, store: Store, owner: Ownership) -> None:
        self.store = store
        self.owner = owner
        # (name, key) of signals posted before their wait: only these waits query the table
        self.posted: set[SignalKey] = set()
        self.refresh_posted()
        self.taken: list[str] = []  # posted signals the batch being built took
        # the open waits of the signals in this round's commands: (name, key) -> row or None
        self.waits: dict[SignalKey, tuple[Any, ...] | None] = {}

    def refresh_posted(self) -> None:
        """Read again which (name, key) have posted signals waiting."""
        self.posted = {(n, k) for n, k in self.store.query("posted_keys")}

    def find_waits(self, keys: Iterable[SignalKey]) -> None:
        """Read the open waits of many signals at once, with their runs' summary rows."""
        wanted = {k for k in keys if k[1] is not None and k not in self.waits}
        if not wanted:
            return
        self.waits.update(dict.fromkeys(wanted))
        found: dict[SignalKey, SignalWait] = {}
        for name in sorted({name for name, _ in wanted}):
            name_keys = sorted(str(key) for n, key in wanted if n == name)
            for row in self.store.query("find_signal_waits", [name, name_keys]):
                wait = SignalWait._make(row)
                found.setdefault((name, wait.key), wait)  # the oldest
        run_ids = sorted({wait.run_id for wait in found.values()})
        found_rows = self.store.query("run_rows", [run_ids]) if run_ids else []
        rows = {row.run_id: row for row in map(RunRow._make, found_rows)}
        for key, wait in found.items():
            head = (wait.run_id, wait.token, wait.node_id)
            summary = rows.get(wait.run_id)
            self.waits[key] = (*head, *summary) if summary is not None else head

    def wait(
        self, name: str, key: str | None, batch: Iterable[Checkpoint]
    ) -> tuple[Any, ...] | None:
        """The oldest open wait for signal (name, key): run, token, node, then the run's summary
        row when it was read with it; ``batch``: the checkpoints not written yet."""
        if (name, key) in self.waits:
            found = self.waits.pop((name, key))
            if found is not None:
                return found
        else:
            rows = self.find_bookmark("signal", name, key)
            if rows:
                return (rows[0].run_id, rows[0].token, rows[0].node_id)
        # a wait opened in this round (its checkpoint is not written yet) takes it too
        for cp in batch:
            for token_id, node_id, kind, b_name, b_key, *_ in cp.bookmarks_add:
                if kind == "signal" and b_name == name and b_key == key:
                    return (cp.run.run_id, token_id, node_id)
        return None

    def find_bookmark(self, kind: str, name: str, key: str | None) -> list[BookmarkRow]:
        """The oldest open bookmark of (kind, name, key), as a list of at most one row."""
        if key is None:
            rows = self.store.query("find_bookmark_keyless", [kind, name])
        else:
            rows = self.store.query("find_bookmark", [kind, name, key])
        return [BookmarkRow._make(row) for row in rows]

    def take_posted(
        self, cp: Checkpoint, name: str, key: str | None, now: Callable[[], datetime]
    ) -> tuple[dict[str, Any], str | None] | None:
        """The oldest unexpired signal posted for (name, key) and its sender, taken in ``cp``."""
        if not self.owner.may_have_posted(name, key, self.posted):
            return None
        for row in self.store.query("first_posted_signal", [name, key, now()]):
            signal = PostedSignal._make(row)
            if signal.signal_id not in self.taken:
                self.taken.append(signal.signal_id)
                cp.posted_taken.append(signal.signal_id)
                return dict(json.loads(signal.payload)), signal.actor
        return None

    def give_back(self, signal_ids: Iterable[str]) -> None:
        """Signals a checkpoint left out of the transaction took: they are not taken."""
        gone = set(signal_ids)
        self.taken = [s for s in self.taken if s not in gone]

    def settle(self) -> None:
        """After a commit: the signals it took are gone from the table."""
        if self.taken:
            self.taken = []
            self.refresh_posted()
