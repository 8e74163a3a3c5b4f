"""What can go wrong with a DuckDB file under a running engine, and what to say about it.

- **Deleted or replaced.** DuckDB keeps writing to the file it opened, through its open file
  descriptor, whatever happens to the path: after ``rm runs.duckdb runs.duckdb.wal`` every
  commit lands in a file that is gone once the process ends. The store records the file's
  identity (device, inode) when it opens it and compares it with what the path names after every
  commit, before the callers waiting on the commit are answered (one ``stat``, ~3 us against
  the ~0.5-2 ms of a commit), and whenever ``/health`` asks.
- **Full.** A write refused for want of space (``ENOSPC``, ``EDQUOT``) or a file size limit
  (``EFBIG``) is said to be that, once, not retried as a write conflict.
- **Damaged.** A file cut short or overwritten: DuckDB's read and checksum errors.
- **A commit durable, then a fatal error.** DuckDB 2 commits, then checkpoints when its log is
  long enough; when the checkpoint fails (a full disk) it reports the commit as durable and
  invalidates the database until it is opened again: the write stands, and the store opens the
  database again before its next use. Where DuckDB checkpoints as part of the commit instead and
  that fails, its fatal error does not say "durable": the write is refused (and was not made),
  and the database is opened again all the same.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

__all__ = [
    "FileIdentity",
    "damaged",
    "damaged_message",
    "durable_commit",
    "full_message",
    "full_reason",
    "held_by_another_process",
    "replaced_message",
]

_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_FULL_TEXTS = {code: os.strerror(code) for code in _FULL}  # as DuckDB quotes them
_DAMAGE = (
    "not a valid DuckDB database file",
    "Corrupt database file",
    "Could not read enough bytes",
    "checksum",
)


@dataclass(frozen=True)
class FileIdentity:
    """Which file a path names: its device and inode."""

    device: int
    inode: int

    @classmethod
    def of(cls, path: str) -> FileIdentity | None:
        """The identity of the file at ``path`` (symbolic links followed); None when none is
        there (or it cannot be looked at)."""
        try:
            found = os.stat(path)
        except OSError:
            return None
        return cls(found.st_dev, found.st_ino)


def full_reason(exc: BaseException) -> str | None:
    """The operating system's words when ``exc`` says the disk is full (or a file size limit
    was reached); None otherwise."""
    code = exc.errno if isinstance(exc, OSError) else None
    if code not in _FULL:
        text = str(exc)
        code = next((c for c, words in _FULL_TEXTS.items() if words in text), None)
    if code is None:
        return None
    if code == errno.EFBIG:
        return f"{_FULL_TEXTS[code]}: a file size limit was reached (ulimit -f, or the disk's)"
    return _FULL_TEXTS[code]


def damaged(exc: BaseException) -> bool:
    """True when ``exc`` says the database file is cut short or overwritten."""
    text = str(exc)
    return any(words in text for words in _DAMAGE)


def durable_commit(exc: BaseException) -> bool:
    """True when DuckDB reports a fatal error after a commit it says is durable."""
    return "COMMIT succeeded and is durable" in str(exc)


def held_by_another_process(exc: BaseException) -> bool:
    """True when DuckDB could not lock the file because another process holds it."""
    text = str(exc).lower()
    return "could not set lock" in text or "conflicting lock" in text


def full_message(url: str, reason: str) -> str:
    """What to say when a write to ``url`` found its disk full."""
    return (
        f"the disk holding {url!r} is full ({reason}): this write was not made. Free space "
        "there: the engine tries again and goes on, and nothing it acknowledged was lost"
    )


def damaged_message(url: str, exc: BaseException) -> str:
    """What to say about a damaged database file."""
    name = os.path.basename(url)
    return (
        f"the DuckDB file {url!r} is damaged: {exc}. It was cut short or overwritten; stop "
        f"its engine and restore {name} (and {name}.wal) from a backup"
    )


def replaced_message(url: str, gone: bool, lost: int) -> str:
    """What to say once the file an engine opened is no longer at its path."""
    name = os.path.basename(url)
    what = "deleted" if gone else "replaced by another file"
    since = ""
    if lost:
        commits = "1 commit" if lost == 1 else f"{lost} commits"
        was = "was" if lost == 1 else "were"
        since = f" ({commits} made since then went to that file and {was} refused to its callers)"
    return (
        f"the DuckDB file {url!r} was {what} while this engine had it open: what it wrote now "
        f"would land in a file no path names, lost when the process ends, so it refuses every "
        f"write from now on{since}. Stop the engine (wfkit serve: stop the server) and restore "
        f"{name} from a backup, with its {name}.wal if the backup has one (else remove any "
        f"{name}.wal left beside it): the runs acknowledged before that are only there"
    )
