"""Parquet archives of purged runs: one file per table, never overwriting an earlier archive.

The rows come from the statements that delete them (``DELETE ... RETURNING *``), inside the
purge's transaction, whatever the backend: an in-memory DuckDB connection writes them, each
column cast to its type in wfkit's schema (as its migrations make it). Files
are written under temporary names, flushed to disk, and only then linked to their final names;
a link never replaces a file, so two archives into one directory cannot overwrite each other.
Anything that fails removes what this archive wrote, and the purge's transaction rolls back.

Naming: the first archive into a directory writes ``wf_instances.parquet``,
``wf_events.parquet``, ...; the next ones ``wf_instances-2.parquet``, ``-3``, ..., one number per
archive, the lowest that none of the tables' files holds. ``read_parquet('DIR/wf_events*.parquet')``
reads every archive's events.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb

from wfkit.errors import UsageError
from wfkit.store.queries import migrations

__all__ = ["ArchiveFiles", "archive_names", "prepare_directory"]


def prepare_directory(directory: str | Path) -> Path:
    """The archive directory, created when missing; ``UsageError`` when it cannot be."""
    path = Path(directory).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"{str(path)!r} is not a directory; nothing was archived or purged: give a "
            "directory (it is created when missing)"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot use {str(path)!r} as an archive directory ({exc.strerror or exc}); nothing "
            "was archived or purged: give a directory this process can create and write"
        ) from None
    return path.resolve()


def archive_names(directory: Path, tables: Sequence[str]) -> dict[str, Path]:
    """The final file of each table for the next archive into ``directory``."""
    number = 1
    while True:
        suffix = "" if number == 1 else f"-{number}"
        names = {table: directory / f"{table}{suffix}.parquet" for table in tables}
        if not any(os.path.lexists(path) for path in names.values()):
            return names
        number += 1


class ArchiveFiles:
    """The files of one archive, written table by table, kept or removed as a whole."""

    def __init__(self, directory: Path, tables: Sequence[str]) -> None:
        self.directory = directory
        self.final = archive_names(directory, tables)
        self.written: list[Path] = []  # final names, in the order written
        self._temporary: dict[str, Path] = {}  # table -> its file not yet given its name
        self._db = duckdb.connect(":memory:")

    def add(self, table: str, columns: list[str], rows: list[Any]) -> None:
        """Write the rows of ``table`` (as the store returned them) to a temporary file."""
        if not rows:
            return
        try:
            self._write(table, columns, rows)
        except (OSError, duckdb.Error) as exc:
            raise UsageError(
                f"writing {self.final[table].name} in {self.directory} failed "
                f"({' '.join(str(exc).split())}); nothing was archived or purged: free some "
                "space or give a directory this process can write"
            ) from None

    def _write(self, table: str, columns: list[str], rows: list[Any]) -> None:
        types = column_types()[table]
        unknown = [c for c in columns if c not in types]
        if unknown:
            raise UsageError(
                f"{table} has columns this wfkit does not know ({', '.join(unknown)}); nothing "
                "was archived or purged: open the store with the wfkit version that wrote it"
            )
        # identifiers and types come from wfkit's own schema, checked above; values are bound
        names = ", ".join(f'"{c}"' for c in columns)
        typed = ", ".join(f'"{c}" {types[c]}' for c in columns)
        values = ", ".join(f"unnest(CAST(? AS {types[c]}[]))" for c in columns)
        self._db.execute(f"CREATE OR REPLACE TABLE rows ({typed})")
        self._db.execute(
            f"INSERT INTO rows ({names}) SELECT {values}",
            [list(column) for column in zip(*rows, strict=True)],
        )
        final = self.final[table]
        temporary = final.with_name(f".{final.name}.{uuid.uuid4().hex[:12]}.tmp")
        self._temporary[table] = temporary
        self._db.table("rows").write_parquet(str(temporary))
        _flush(temporary)

    def keep(self) -> list[Path]:
        """Give every file its final name (never replacing one); the final names."""
        for table, temporary in self._temporary.items():
            final = self.final[table]
            try:
                os.link(temporary, final)
            except FileExistsError:
                raise UsageError(
                    f"{final} appeared while this archive was written (another archive into "
                    f"{self.directory} at the same time?); nothing was archived or purged: run "
                    "it again"
                ) from None
            except OSError as exc:
                raise UsageError(
                    f"naming {final} failed ({exc}); nothing was archived or purged: give a "
                    "directory this process can write"
                ) from None
            self.written.append(final)
        _flush(self.directory)
        _remove(self._temporary.values())
        self._temporary.clear()
        return list(self.written)

    def discard(self) -> None:
        """Remove everything this archive wrote (its transaction did not commit)."""
        _remove([*self._temporary.values(), *self.written])
        self._temporary.clear()
        self.written = []

    def close(self) -> None:
        """Release the in-memory database and any temporary file left."""
        _remove(self._temporary.values())
        self._temporary.clear()
        self._db.close()


def _remove(paths: Iterable[Path]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@functools.cache
def column_types() -> dict[str, dict[str, str]]:
    """Each wfkit table's columns and their types, as wfkit's migrations make them."""
    with duckdb.connect(":memory:") as db:
        for _, text in migrations():
            db.execute(text)
        found: dict[str, dict[str, str]] = {}
        for table, column, kind in db.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "ORDER BY table_name, ordinal_position"
        ).fetchall():
            found.setdefault(str(table), {})[str(column)] = str(kind)
        return found


def _flush(path: Path) -> None:
    """Make a written file (or a directory's new entries) durable before the rows go."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
