"""The commit mark: how much a DuckDB file must hold, kept outside the file.

DuckDB opens a database whose write-ahead log was cut short, deleted or replaced by an older copy
as if the lost transactions had never happened (a log cut to half opened with 36 of 80 runs, a
missing one as an empty store). The store therefore keeps, next to the database, the count that
the file reached with the engine's last commit, and refuses to open a file that holds less.

**What is counted.** The *count* of a file is the number of rows in ``wf_events`` plus the tally
in ``wf_store_tally`` (migration 13), and every commit raises it by at least one:

- a commit that records events raises it by their number (the statements of ``EVENT_INSERTS``);
- a commit that records none adds one to the tally (one ``UPDATE``);
- a purge deletes events (``EVENT_DELETES``) and adds as many to the tally: the count stays.

A lost suffix of commits therefore always lowers the count, and purges never do, although they
delete rows. Counting rows the commits write anyway costs no statement in the commits that
matter (the writer's rounds all record events); a sequence advanced in every commit, measured
here, cost 250-400 us per commit (a third of a small commit), an extra ``SELECT`` 60-130 us. The
unit is a *change* (an event, or a commit without one), and messages say so.

**The mark file** ``<file>.commits`` holds the count after the last commit, as one fixed-size
record overwritten in place (``pwrite`` at offset 0) with a CRC-32 of its own:

- one system call per commit (a few microseconds), where writing a new file and renaming it
  over the old one costs tens and an inode per commit;
- the record never grows, so rewriting it never needs a new block: a full disk cannot refuse it;
- no fsync: it is written once DuckDB's commit is durable, so after a power cut it may lag the
  file (a loss of the very last commits then goes unnoticed) but never claims more than the file
  held; a torn or foreign record fails its checksum and is ignored with a warning.

It is owner-only (0600) and opened without following a symbolic link. Deleting the database,
its log and the mark together leaves nothing to compare with: that is a new, empty store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wfkit.store.base import Statement

__all__ = [
    "EVENT_DELETES",
    "EVENT_INSERTS",
    "CommitMark",
    "events_in",
    "gone_message",
    "lost_message",
    "tally",
]

log = logging.getLogger("wfkit.store")

EVENT_INSERTS = frozenset({"insert_event", "copy_wf_events"})
"""Named statements that add rows to ``wf_events`` (one per row they carry)."""
EVENT_DELETES = frozenset({"retention_delete_wf_events", "retention_take_wf_events"})
"""Named statements that delete rows of ``wf_events`` (purges and archives)."""

_HEAD = b"wfkit-commits "
_SIZE = len(_HEAD) + 20 + 1 + 8 + 1  # head, the count (20 digits), space, CRC-32 (hex), newline


def events_in(statements: Iterable[Statement]) -> int:
    """How many events ``statements`` add to ``wf_events``."""
    return sum(len(s.rows) for s in statements if s.name in EVENT_INSERTS)


def tally(inserted: int, deleted: int) -> tuple[int, int]:
    """What a commit adds to the tally, and to the count, given the events it inserted and
    deleted: a commit without new events adds one, and deleted events are made up for."""
    extra = 0 if inserted else 1
    return deleted + extra, inserted + extra


class CommitMark:
    """The mark file of one DuckDB file: read once when the store opens, then rewritten after
    every commit with ``expected``, the count the file must hold.

    Parameters
    ----------
    database : str
        The DuckDB file's path; the mark is ``<database>.commits``.
    """

    def __init__(self, database: str) -> None:
        self.path = f"{os.path.abspath(database)}.commits"
        self.expected = 0
        self._fd: int | None = None
        self._failed = False  # a write failed once (warned): try again at every commit

    def read(self) -> int | None:
        """The count the mark holds; None when there is none, or it is unreadable (warned)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            try:
                record = os.read(fd, _SIZE + 1)
            finally:
                os.close(fd)
        except FileNotFoundError:
            return None
        except OSError as exc:  # a link, a folder, no permission...
            log.warning("cannot read %s (%s): the file is opened without it", self.path, exc)
            return None
        count = _parse(record)
        if count is None:
            log.warning(
                "%s is not a commit mark wfkit wrote (torn by a crash, or changed by hand): the "
                "file is opened without it, and the mark starts again from what the file holds",
                self.path,
            )
        return count

    def start(self, held: int) -> None:
        """The store opened holding ``held``: the mark says so from now on."""
        self.expected = held
        self._write()

    def advance(self, changes: int) -> None:
        """A commit of ``changes`` went through."""
        if changes:
            self.expected += changes
            self._write()

    def close(self) -> None:
        """Release the file."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _write(self) -> None:
        body = _HEAD + b"%020d " % self.expected
        record = body + b"%08x\n" % zlib.crc32(body)
        try:
            if self._fd is None:
                flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                self._fd = os.open(self.path, flags | getattr(os, "O_CLOEXEC", 0), 0o600)
            _write_at_start(self._fd, record)
        except OSError as exc:
            # the commit is durable; only its loss would go unnoticed: say so once
            if not self._failed:
                log.warning(
                    "cannot write the commit mark %s (%s): a later loss of this file's last "
                    "commits would not be noticed when it is opened",
                    self.path,
                    exc,
                )
            self._failed = True
            self.close()
            return
        self._failed = False


def _write_at_start(fd: int, record: bytes) -> None:
    if hasattr(os, "pwrite"):
        os.pwrite(fd, record, 0)
    else:  # (Windows)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, record)


def _parse(record: bytes) -> int | None:
    if len(record) != _SIZE or not record.startswith(_HEAD) or not record.endswith(b"\n"):
        return None
    body, _, crc = record[:-1].rpartition(b" ")
    body += b" "
    try:
        if int(crc, 16) != zlib.crc32(body):
            return None
        return int(body[len(_HEAD) :])
    except ValueError:
        return None


def lost_message(url: str, expected: int, held: int, mark: str) -> str:
    """What to say about a file that holds less than its engine committed to it."""
    name = os.path.basename(url)
    return (
        f"the DuckDB file {url!r} holds {held:,} of the {expected:,} changes its engine "
        f"committed to it ({mark} says so): {expected - held:,} are missing (events of runs, "
        f"and commits without one). Its write-ahead log {name}.wal was cut short, deleted or "
        "replaced by an older copy, or the file itself was replaced; nothing was changed. "
        f"Restore {name} and {name}.wal from a backup; or, to go on with what the file holds "
        f"now and record the loss, run `wfkit store accept-loss --db {url}` (or open it with "
        f"wf.Engine({url!r}, accept_lost_commits=True))"
    )


def gone_message(url: str, expected: int, mark: str) -> str:
    """What to say about a file that is gone while its mark is not."""
    name = os.path.basename(url)
    return (
        f"the DuckDB file {url!r} does not exist, but {mark} says its engine committed "
        f"{expected:,} changes to it: it was deleted or moved; nothing was created. Restore "
        f"{name} (and {name}.wal) from a backup; or, to start afresh with an empty store and "
        f"record the loss, run `wfkit store accept-loss --db {url}` (or open it with "
        f"wf.Engine({url!r}, accept_lost_commits=True))"
    )
