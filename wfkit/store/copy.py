"""Copy a whole wfkit store into another: a DuckDB file into PostgreSQL, and back.

Every wfkit table is copied (definitions, runs with their in-flight state, events, jobs,
bookmarks, timers, saga steps, posted signals, activity log lines and the records of the
artifacts the runs stored), in that order and in ONE transaction on the destination, so an
interrupted copy leaves nothing behind. Artifact files are not copied: an engine on the
destination loads them only under the same artifact root (give it ``artifacts=`` as the source's
engine had it, on a root it reaches). Each side keeps its own schema version (both are migrated
to this wfkit's schema when opened). A run in flight needs nothing more than its summary row
(state snapshot as of ``seq``) and its events: the destination's engine restores it from those,
its waits from ``wf_bookmarks`` and its timers from ``wf_timers``.

The column lists come from the ``copy_<table>`` blocks of ``sql/queries.sql`` and are checked
against both databases first: a column this code does not know stops the copy rather than being
lost. Afterwards the rows of the copied runs are counted on both sides; any difference raises.

Stop the engines of both stores first: a copy is a snapshot, and runs must not go on advancing
on the source once they live in the destination.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from wfkit.errors import StoreError, UsageError
from wfkit.store import open_store
from wfkit.store.base import Statement, Store
from wfkit.store.queries import query

__all__ = ["NOT_COPIED", "TABLES", "CopyReport", "TableCount", "TableSpec", "copy_store"]

Progress = Callable[[str], object]

CHUNK = 10_000
"""Rows per column-wise INSERT (all of them still go in one transaction)."""


@dataclass(frozen=True)
class TableSpec:
    """How one table is copied: its identity columns (what ``merge`` compares and what the
    counts are grouped by) and the order its rows are read in."""

    name: str
    key: tuple[str, ...]
    order: str

    @property
    def by_run(self) -> bool:
        """True for the tables whose rows belong to a run (skipped with their run)."""
        return self.key == ("run_id",)


TABLES: tuple[TableSpec, ...] = (
    TableSpec("wf_definitions", ("workflow_id", "version", "hash"), "workflow_id, version, hash"),
    TableSpec("wf_instances", ("run_id",), "created_at, run_id"),
    TableSpec("wf_events", ("run_id",), "run_id, seq"),
    TableSpec("wf_jobs", ("run_id",), "run_id, token, node_id"),
    TableSpec("wf_bookmarks", ("run_id",), "run_id, token, since"),
    TableSpec("wf_timers", ("run_id",), "run_id, token, kind, due_at"),
    TableSpec("wf_saga_steps", ("run_id",), "run_id, position"),
    TableSpec("wf_signals", ("signal_id",), "posted_at, signal_id"),
    TableSpec("wf_logs", ("run_id",), "run_id, seq, token, attempt, line"),
    TableSpec("wf_artifacts", ("run_id",), "run_id, uri"),
)
"""Every table a copy moves, in dependency order (``wf_schema_version`` stays on each side)."""

NOT_COPIED: dict[str, frozenset[str]] = {
    # Run leases belong to the engine processes of the source database: copied runs arrive
    # unowned, and the destination's engines claim them (so does the queue a run was handed
    # over for: any engine of the destination may take it).
    "wf_instances": frozenset({"owner", "lease_until", "wants_queue", "handed_by"}),
}
"""Columns deliberately left at their defaults in the destination."""

# each side keeps its own: its schema version, and its commit count and store-level events
_OWN_TABLES = frozenset({"wf_schema_version", "wf_store_tally", "wf_store_events"})
_INSERT = re.compile(r"INSERT\s+INTO\s+(\w+)\s*\(([^)]*)\)", re.IGNORECASE)


@dataclass(frozen=True)
class TableCount:
    """Rows of one table: in the source, written, skipped (merge), in the destination after."""

    table: str
    source: int
    copied: int
    skipped: int
    destination: int


@dataclass
class CopyReport:
    """What :func:`copy_store` did: per-table counts, what a merge skipped, how long it took."""

    source: str
    destination: str
    merge: bool
    tables: dict[str, TableCount] = field(default_factory=dict)
    skipped_runs: list[str] = field(default_factory=list)
    skipped_definitions: list[tuple[Any, ...]] = field(default_factory=list)
    skipped_signals: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def runs(self) -> int:
        """Runs copied."""
        return self.tables["wf_instances"].copied

    @property
    def definitions(self) -> int:
        """Workflow definitions copied."""
        return self.tables["wf_definitions"].copied

    def lines(self) -> list[str]:
        """A plain-text table of the counts, then one summary line."""
        headers = ("TABLE", "SOURCE", "COPIED", "SKIPPED", "DESTINATION")
        rows = [
            (t.table, str(t.source), str(t.copied), str(t.skipped), str(t.destination))
            for t in self.tables.values()
        ]
        widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
        out = [
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
            for row in [headers, *rows]
        ]
        return [*out, self.summary()]

    def summary(self) -> str:
        """One line: what was copied where, what was skipped, that the counts match."""
        events = self.tables["wf_events"].copied
        text = (
            f"copied {_plural(self.runs, 'run')}, {_plural(self.definitions, 'definition')} and "
            f"{_plural(events, 'event')} from {self.source} to {self.destination} in "
            f"{self.seconds:.2f} s; counts match"
        )
        skipped = [
            _plural(len(self.skipped_runs), "run"),
            _plural(len(self.skipped_definitions), "definition"),
            _plural(len(self.skipped_signals), "posted signal"),
        ]
        if self.merge:
            text += f" (skipped, already there: {', '.join(skipped)})"
        return text

    def __str__(self) -> str:
        return "\n".join(self.lines())


def copy_store(
    src: str | Path, dst: str | Path, *, merge: bool = False, progress: Progress | None = None
) -> CopyReport:
    """Copy every run, event, wait and definition of the store ``src`` into ``dst``.

    Parameters
    ----------
    src, dst : str or Path
        A DuckDB file path or a ``postgresql://`` URL each (either direction).
    merge : bool
        Add to a destination that already holds runs or definitions, skipping those it has
        (definitions by ``(workflow_id, version, hash)``, runs by id with all their rows, posted
        signals by id). Without it a non-empty destination is refused and nothing is written.
    progress : callable, optional
        Called with a line of text as the copy goes.

    Returns
    -------
    CopyReport
        Per-table counts (source, copied, skipped, destination) and what a merge skipped.

    Raises
    ------
    UsageError
        The destination is not empty (without ``merge``), ``src`` and ``dst`` are the same
        store, ``src`` does not exist, or either is ``:memory:``. Nothing is written.
    StoreError
        A store cannot be opened (e.g. a DuckDB file held by a running engine), a table has
        columns this wfkit cannot copy, writing failed (nothing is written), or the counts
        after the copy differ.
    """
    say: Progress = progress or (lambda _line: None)
    started = time.perf_counter()
    src, dst = str(src), str(dst)
    _check_targets(src, dst)
    report = CopyReport(_display(src), _display(dst), merge)
    source = open_store(src)
    try:
        destination = open_store(dst)
        try:
            snapshot = _is_postgres(src)
            if snapshot:  # a consistent view of every table, and of the counts afterwards
                source.sql("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            _copy(source, destination, report, say)
            if snapshot:
                source.sql("COMMIT")
        finally:
            destination.close()
    finally:
        source.close()
    report.seconds = time.perf_counter() - started
    say(f"done in {report.seconds:.2f} s")
    return report


# --- the copy -----------------------------------------------------------------------------------


def _copy(source: Store, destination: Store, report: CopyReport, say: Progress) -> None:
    columns = {spec.name: _copy_columns(spec.name) for spec in TABLES}
    for store, label in ((source, report.source), (destination, report.destination)):
        _check_schema(store, label, columns)

    before = {spec.name: _counts(destination, spec) for spec in TABLES}
    if not report.merge:
        held = {name: sum(c.values()) for name, c in before.items() if c}
        if held:
            listed = ", ".join(f"{_plural(n, 'row')} in {t}" for t, n in held.items())
            raise UsageError(
                f"the destination {report.destination} is not empty ({listed}); nothing was "
                "copied. Pass --merge (merge=True) to add the source's runs next to them, "
                "skipping those already there, or copy into an empty database"
            )
    taken_runs = {k[0] for spec in TABLES if spec.by_run for k in before[spec.name]}
    taken_definitions = set(before["wf_definitions"])
    taken_signals = {k[0] for k in before["wf_signals"]}

    statements: list[Statement] = []
    written: dict[str, set[tuple[Any, ...]]] = {}  # identity keys of the rows written
    counts: dict[str, tuple[int, int, int]] = {}  # rows read, written, skipped
    for spec in TABLES:
        names = columns[spec.name]
        say(f"reading {spec.name} from {report.source}")
        rows = source.sql(
            f"SELECT {', '.join(names)} FROM {spec.name} ORDER BY {spec.order}"
        ).fetchall()
        where = [names.index(c) for c in spec.key]
        keep: list[tuple[Any, ...]] = []
        keys: set[tuple[Any, ...]] = set()
        for row in rows:
            key = tuple(row[i] for i in where)
            if spec.by_run:
                taken = key[0] in taken_runs
            elif spec.name == "wf_definitions":
                taken = key in taken_definitions
            else:
                taken = key[0] in taken_signals
            if taken:
                continue
            keep.append(tuple(row))
            keys.add(key)
        counts[spec.name] = (len(rows), len(keep), len(rows) - len(keep))
        written[spec.name] = keys
        for start in range(0, len(keep), CHUNK):
            statements.append(Statement(f"copy_{spec.name}", keep[start : start + CHUNK]))
        if spec.name == "wf_instances":
            mine = {row[where[0]] for row in rows}
            report.skipped_runs = sorted(mine & taken_runs)
        elif spec.name == "wf_definitions":
            report.skipped_definitions = sorted(
                {tuple(row[i] for i in where) for row in rows} & taken_definitions
            )
        elif spec.name == "wf_signals":
            report.skipped_signals = sorted({row[where[0]] for row in rows} & taken_signals)

    total = sum(len(s.rows) for s in statements)
    say(f"writing {total} rows to {report.destination} in one transaction")
    destination.write(statements)

    say("counting the rows on both sides")
    problems: list[str] = []
    for spec in TABLES:
        keys = written[spec.name]
        read, copied, skipped = counts[spec.name]
        in_source = _counts(source, spec)
        after = _counts(destination, spec)
        ours_src = sum(in_source.get(k, 0) for k in keys)
        ours_dst = sum(after.get(k, 0) for k in keys)
        grown = sum(after.values()) - sum(before[spec.name].values())
        if not ours_src == ours_dst == copied == grown:
            problems.append(
                f"{spec.name}: {copied} rows written, {ours_src} in the source and {ours_dst} in "
                f"the destination for the copied keys, the destination grew by {grown}"
            )
        report.tables[spec.name] = TableCount(spec.name, read, copied, skipped, sum(after.values()))
    if problems:
        raise StoreError(
            f"the copy from {report.source} to {report.destination} does not add up: "
            + "; ".join(problems)
            + ". Is an engine writing to either store? Stop it, then copy into an empty database"
        )


def _copy_columns(table: str) -> list[str]:
    """The column list of the ``copy_<table>`` block (and its ``_many`` form, which must agree)."""
    found = []
    for name in (f"copy_{table}", f"copy_{table}_many"):
        match = _INSERT.search(query(name))
        if match is None or match.group(1) != table:
            raise StoreError(f"the SQL block {name!r} does not insert into {table}")
        found.append([c.strip() for c in match.group(2).split(",")])
    if found[0] != found[1]:
        raise StoreError(f"copy_{table} and copy_{table}_many list different columns")
    return found[0]


def _check_schema(store: Store, where: str, columns: dict[str, list[str]]) -> None:
    """Refuse a store whose wfkit tables or columns this copy does not know: they'd be lost."""
    tables = {
        r[0]
        for r in store.sql(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_catalog = current_database() "
            "AND table_type = 'BASE TABLE' AND table_name LIKE 'wf%'"
        ).fetchall()
        if str(r[0]).startswith("wf_")
    }
    unknown = tables - set(columns) - _OWN_TABLES
    if unknown:
        raise StoreError(
            f"{where} has wfkit tables this copy does not know ({', '.join(sorted(unknown))}); "
            "nothing was copied: upgrade wfkit on this side, or teach wfkit.store.copy about them"
        )
    have: dict[str, set[str]] = {}
    for table, column in store.sql(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_catalog = current_database() "
        "AND table_name LIKE 'wf%'"
    ).fetchall():
        have.setdefault(str(table), set()).add(str(column))
    problems = []
    for table, names in columns.items():
        present = have.get(table, set())
        missing = [c for c in names if c not in present]
        extra = sorted(present - set(names) - NOT_COPIED.get(table, frozenset()))
        if missing:
            problems.append(f"{table} lacks {', '.join(missing)}")
        if extra:
            problems.append(f"{table} has {', '.join(extra)}, which this copy does not know")
    if problems:
        raise StoreError(
            f"the tables of {where} do not match what this wfkit copies ({'; '.join(problems)}); "
            "nothing was copied: open both stores with the same wfkit version"
        )


def _counts(store: Store, spec: TableSpec) -> dict[tuple[Any, ...], int]:
    """Rows of ``spec``'s table per identity key."""
    key = ", ".join(spec.key)
    rows: Iterable[tuple[Any, ...]] = store.sql(
        f"SELECT {key}, count(*) FROM {spec.name} GROUP BY {key}"
    ).fetchall()
    return {tuple(r[:-1]): int(r[-1]) for r in rows}


# --- targets --------------------------------------------------------------------------------------


def _check_targets(src: str, dst: str) -> None:
    for text, role in ((src, "source"), (dst, "destination")):
        if text.strip() == ":memory:":
            raise UsageError(
                f"the {role} cannot be ':memory:' (it vanishes when closed); give a DuckDB file "
                "path or a postgresql:// URL"
            )
    if not _is_postgres(src) and not os.path.isfile(src):
        raise UsageError(
            f"no such DuckDB file: {src}; give an existing wfkit DuckDB file or a postgresql:// "
            "URL as the source"
        )
    if _identity(src) == _identity(dst):
        raise UsageError(
            f"{_display(src)} and {_display(dst)} are the same store; copy into another DuckDB "
            "file or PostgreSQL database"
        )


def _is_postgres(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def _identity(target: str) -> tuple[str, ...]:
    """What tells two spellings of one store apart from two stores."""
    if not _is_postgres(target):
        return ("duckdb", os.path.realpath(target))
    try:
        import psycopg

        info: dict[str, Any] = dict(psycopg.conninfo.conninfo_to_dict(target))
    except (ImportError, ValueError):  # no driver (open_store says so) or a malformed URL
        parts = urlsplit(target)
        info = {
            "host": parts.hostname,
            "port": parts.port,
            "dbname": parts.path.lstrip("/"),
            "user": parts.username,
        }
    host = str(info.get("host") or "localhost")
    if host in ("127.0.0.1", "::1") or host.startswith("/"):
        host = "localhost"
    user = str(info.get("user") or os.environ.get("PGUSER") or "")
    dbname = str(info.get("dbname") or user)
    return ("postgres", host, str(info.get("port") or 5432), dbname)


def _display(target: str) -> str:
    """The target as shown in messages: a URL without its password."""
    if not _is_postgres(target):
        return target
    parts = urlsplit(target)
    if parts.password is None:
        return target
    netloc = parts.netloc.rsplit("@", 1)[-1]
    user = f"{parts.username}@" if parts.username else ""
    return parts._replace(netloc=f"{user}{netloc}").geturl()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
