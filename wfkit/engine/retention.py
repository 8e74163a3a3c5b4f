"""Retention: ended runs older than a cutoff leave the store, optionally archived to Parquet.

A purge deletes, in one transaction, the summary rows of the ended runs (completed, failed,
cancelled) whose ``ended_at`` is older than the cutoff, then every row keyed by their run ids
(:data:`RUN_TABLES`). The runs are chosen by the statement that deletes them, so the rows that
go are exactly those of the runs counted; a run in flight is never chosen, whatever is asked.
An archive writes the deleted rows to Parquet (``wfkit.engine.archive``) before the transaction
commits; when writing fails the transaction rolls back and nothing is purged.

Purges are commands of the writer (its lock, between its transactions): the engine forgets the
purged runs it keeps in memory in the same step, so a handle on one then says it does not exist.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wfkit.definition.durations import parse_duration
from wfkit.engine.archive import ArchiveFiles, prepare_directory
from wfkit.engine.artifacts import ArtifactStore
from wfkit.engine.records import RunStatus
from wfkit.errors import UsageError
from wfkit.store.base import TERMINAL_STATUSES, InTransaction, Store
from wfkit.store.copy import TABLES

if TYPE_CHECKING:
    from wfkit.engine.clock import Clock
    from wfkit.engine.runtime import Runtime
    from wfkit.engine.writer import Writer

__all__ = ["RUN_TABLES", "ArchiveReport", "Retaining", "Retention", "RetentionChore"]

log = logging.getLogger("wfkit.engine")

RUN_TABLES: tuple[str, ...] = tuple(spec.name for spec in TABLES if spec.by_run)
"""The tables whose rows belong to a run (keyed by ``run_id``), ``wf_instances`` first."""

EVERYTHING = 2**62  # "no limit" for a purge asked for by a caller
# runs per transaction of the periodic retention, so that no round waits long (measured here
# with runs of 3 steps: a purge of 500 takes 20-50 ms, an archive of 100 75-150 ms)
CHUNK = 500
ARCHIVE_CHUNK = 100


@dataclass(frozen=True, init=False)
class Retention:
    """Ended runs older than ``older_than`` are purged (or archived) while the engine runs.

    Parameters
    ----------
    older_than : str or timedelta
        How long after it ended a run is kept (``"30d"``), on the engine's clock.
    archive_to : str or Path, optional
        Archive the runs to Parquet files in this directory before they are purged.
    every : str or timedelta
        How often the writer looks for runs to purge (``"1h"`` by default); also once when the
        engine opens.

    Examples
    --------
    >>> Retention("30d", every="6h").every
    datetime.timedelta(seconds=21600)
    """

    older_than: timedelta
    archive_to: Path | None
    every: timedelta

    def __init__(
        self,
        older_than: str | timedelta,
        archive_to: str | Path | None = None,
        every: str | timedelta = "1h",
    ) -> None:
        then = "give a duration like '30d' to wf.Retention"
        object.__setattr__(self, "older_than", _duration("older_than", older_than, then))
        object.__setattr__(self, "every", _duration("every", every, then))
        if self.every <= timedelta(0):
            raise UsageError(f"Retention every={every!r} must be longer than zero; give e.g. '1h'")
        object.__setattr__(self, "archive_to", None if archive_to is None else Path(archive_to))

    @classmethod
    def of(cls, value: str | timedelta | Retention) -> Retention:
        """``value`` as a policy: a duration means ``Retention(older_than=value)``."""
        return value if isinstance(value, Retention) else cls(value)


@dataclass(frozen=True)
class ArchiveReport:
    """What :meth:`Engine.archive` did: runs archived then purged, files written, rows per table."""

    runs: int
    directory: Path
    files: tuple[Path, ...] = ()
    rows: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        rows = sum(self.rows.values())
        return (
            f"archived and purged {self.runs} run{'s' if self.runs != 1 else ''} ({rows} rows) "
            f"into {len(self.files)} file{'s' if len(self.files) != 1 else ''} in {self.directory}"
        )


def _duration(name: str, value: Any, then: str = "nothing was purged") -> timedelta:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}; {then}") from None


def ended_statuses(status: Any) -> list[str]:
    """The ended statuses a purge may take (all three when ``status`` is None)."""
    if status is None:
        return list(TERMINAL_STATUSES)
    given = [status] if isinstance(status, str) else list(status)
    if not given:
        raise UsageError(
            "status= is an empty list; name an ended status or leave it out. Nothing was purged"
        )
    chosen: list[str] = []
    for value in given:
        try:
            found = RunStatus(value.lower() if isinstance(value, str) else value)
        except ValueError:
            raise UsageError(
                f"{value!r} is not a run status; a purge takes ended runs: "
                f"{', '.join(TERMINAL_STATUSES)}. Nothing was purged"
            ) from None
        if not found.terminal:
            raise UsageError(
                f"runs that are {found.value} have not ended and are never purged; give "
                f"{', '.join(TERMINAL_STATUSES)} (or leave status out for all three). "
                "Nothing was purged"
            )
        chosen.append(found.value)
    return sorted(set(chosen))


def purge_rows(
    store: Store,
    cutoff: datetime,
    statuses: list[str],
    limit: int,
    archive: ArchiveFiles | None = None,
) -> tuple[list[str], dict[str, int]]:
    """Delete the chosen runs and their rows in one transaction (writing ``archive`` first);
    the purged run ids and the rows deleted per table."""

    def work(tx: InTransaction) -> tuple[list[str], dict[str, int]]:
        head = [statuses, cutoff, limit]
        if archive is None:
            ids = [row[0] for row in tx.returning("retention_delete_wf_instances", head)[1]]
            rows = {"wf_instances": len(ids)}
            for table in RUN_TABLES[1:]:
                rows[table] = tx.execute(f"retention_delete_{table}", [ids]) if ids else 0
            return ids, rows
        columns, found = tx.returning("retention_take_wf_instances", head)
        ids = [row[columns.index("run_id")] for row in found]
        archive.add("wf_instances", columns, found)
        rows = {"wf_instances": len(found)}
        for table in RUN_TABLES[1:]:
            taken: list[Any] = []
            if ids:
                columns, taken = tx.returning(f"retention_take_{table}", [ids])
                archive.add(table, columns, taken)
            rows[table] = len(taken)
        archive.keep()  # the files are durable before the rows go
        return ids, rows

    try:
        return store.atomically(work)
    except BaseException:
        if archive is not None:
            archive.discard()
        raise


def run_purge(
    writer: Writer,
    clock: Clock,
    older_than: timedelta,
    statuses: list[str],
    directory: Path | None,
    limit: int = EVERYTHING,
    artifacts: str | None = None,
) -> tuple[list[str], ArchiveReport | None]:
    """One purge (or archive) under the writer lock, between its transactions; the memory of
    the purged runs goes with their rows."""
    cutoff = clock.now() - older_than
    files = None if directory is None else ArchiveFiles(directory, RUN_TABLES)
    try:
        ids, rows = purge_rows(writer.store, cutoff, statuses, limit, files)
    finally:
        if files is not None:
            files.close()
    writer.forget(ids)
    if artifacts is not None and directory is None:  # an archive keeps them: its refs point there
        ArtifactStore(artifacts).delete_runs(ids)  # after the commit; failures are only logged
    report = None
    if files is not None and directory is not None:
        written = {table: n for table, n in rows.items() if n}
        report = ArchiveReport(len(ids), directory, tuple(files.written), written)
    return ids, report


class RetentionChore:
    """The periodic retention of an engine: checked by the writer in every round, runs at most
    every ``policy.every`` (on the engine's clock), :data:`CHUNK` runs per transaction
    (:data:`ARCHIVE_CHUNK` when archiving)."""

    def __init__(
        self, policy: Retention, writer: Writer, clock: Clock, artifacts: str | None = None
    ) -> None:
        self.policy = policy
        self.artifacts = artifacts
        self.writer = writer
        self.clock = clock
        self.next_at: datetime | None = clock.now()  # due at once: the pass at open
        self.directory = None if policy.archive_to is None else prepare_directory(policy.archive_to)
        self.purged = 0  # runs purged since the engine opened

    def tick(self) -> bool:
        """Purge one chunk if the retention is due (call under the writer lock, with no
        transaction of the writer open); True when more runs may wait for the next round."""
        now = self.clock.now()
        if self.next_at is None or now < self.next_at:
            return False
        began = time.perf_counter()
        chunk = CHUNK if self.directory is None else ARCHIVE_CHUNK
        try:
            ids, _ = run_purge(
                self.writer,
                self.clock,
                self.policy.older_than,
                list(TERMINAL_STATUSES),
                self.directory,
                chunk,
                self.artifacts,
            )
        except Exception:  # housekeeping never stops the engine: it tries again next time
            log.exception(
                "retention: purging runs ended over %s ago failed; it is tried again in %s",
                self.policy.older_than,
                self.policy.every,
            )
            self.next_at = now + self.policy.every
            return False
        self.purged += len(ids)
        if ids:
            log.info(
                "retention: %s %d runs ended before %s in %.1f ms",
                "archived and purged" if self.directory else "purged",
                len(ids),
                now - self.policy.older_than,
                (time.perf_counter() - began) * 1000,
            )
        if len(ids) == chunk:
            return True  # more may wait: the next round takes the next chunk
        self.next_at = now + self.policy.every
        return False

    def run_all(self) -> None:
        """Every chunk now (at open, before anything else runs)."""
        while self.tick():
            pass


class Retaining:
    """The engine's retention commands, over the engine's :class:`Runtime`."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime

    def keep(self, policy: Retention) -> None:
        """Apply ``policy`` once now (``Engine(retention=)``), then from the scheduler's
        rounds."""
        writer = self._rt.writer
        chore = RetentionChore(policy, writer, self._rt.clock, self._rt.config.artifacts)
        with writer.lock:
            chore.run_all()
        self._rt.scheduler.bind(chore)

    def purge(
        self,
        older_than: str | timedelta = "30d",
        status: str | RunStatus | Iterable[str | RunStatus] | None = None,
    ) -> int:
        """Delete ended runs older than ``older_than`` with every row that belongs to them.

        Parameters
        ----------
        older_than : str or timedelta
            Runs whose ``ended_at`` lies more than this before the engine's clock's now
            (``"30d"``; ``"0s"`` takes every ended run).
        status : str, RunStatus or list of them, optional
            Only runs that ended so: ``completed``, ``failed``, ``cancelled`` (all three when
            left out). A status of runs in flight is refused.

        Returns
        -------
        int
            How many runs were purged.

        Raises
        ------
        UsageError
            A duration or status it cannot take; nothing is purged.

        Examples
        --------
        >>> import wfkit as wf
        >>> engine = wf.Engine(":memory:")
        >>> engine.purge(older_than="30d")
        0
        """
        age = _duration("older_than", older_than)
        statuses = ended_statuses(status)
        ids, _ = self._rt.scheduler.submit(
            lambda writer: run_purge(
                writer, self._rt.clock, age, statuses, None, artifacts=self._rt.config.artifacts
            ),
            alone=True,
        )
        return len(ids)

    def archive(
        self,
        directory: str | Path,
        older_than: str | timedelta = "30d",
        status: str | RunStatus | Iterable[str | RunStatus] | None = None,
    ) -> ArchiveReport:
        """Write ended runs older than ``older_than`` to Parquet files in ``directory``, one per
        table, then purge them as :meth:`purge` does (in the transaction that read them).

        The first archive into a directory writes ``wf_instances.parquet``,
        ``wf_events.parquet``, ... (for each table with rows); later ones ``wf_events-2.parquet``,
        ``-3``, ...: an archive never overwrites a file. When writing fails nothing is purged.

        Returns
        -------
        ArchiveReport
            Runs archived, the files written and the rows per table.

        Raises
        ------
        UsageError
            A duration or status it cannot take, or a directory it cannot create or write;
            nothing is archived or purged.
        """
        age = _duration("older_than", older_than)
        statuses = ended_statuses(status)
        folder = prepare_directory(directory)
        _, report = self._rt.scheduler.submit(
            lambda writer: run_purge(writer, self._rt.clock, age, statuses, folder), alone=True
        )
        assert report is not None
        return report
