"""The guard of a DuckDB file: nothing is acknowledged that is not in the file.

One :class:`FileGuard` per open DuckDB file (none for ``:memory:``) answers two questions:

- **When the store opens:** does the file hold what its engine committed? It compares the
  file's count with the commit mark (:mod:`wfkit.store.marks`) and refuses a file that holds
  less (:class:`~wfkit.store.base.LostCommits`), unless the loss is accepted explicitly.
- **After every commit, before its callers are answered:** is the file at the path still the
  one that was opened (:class:`~wfkit.store.faults.FileIdentity`)? If not, the store is
  broken for good (:class:`~wfkit.store.base.StoreBroken`): the commit just made, and every later
  one, would land in a file no path names. Then the mark moves on.

The identity check costs one ``stat`` per commit (~3 us, and the mark's rewrite ~2 us more,
measured here, against the 0.5-5 ms of a commit), so it is made after every commit rather than
every few seconds: a check on a timer would leave a window in which commits into a deleted file
are acknowledged. ``/health`` makes the same check.
"""

from __future__ import annotations

import logging
import os

from wfkit.store.base import LostCommits, StoreBroken
from wfkit.store.faults import FileIdentity, replaced_message
from wfkit.store.marks import CommitMark, gone_message, lost_message

__all__ = ["FileGuard"]

log = logging.getLogger("wfkit.store")


class FileGuard:
    """The identity and the commit mark of one DuckDB file.

    Parameters
    ----------
    url : str
        The database file, as the store was given it.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.path = os.path.abspath(url)  # the engine may change its working folder later
        self.mark = CommitMark(url)
        self.identity: FileIdentity | None = None
        self.broken: str | None = None  # why every write is refused, once the file went
        self.expected: int | None = None  # what the mark said when the store opened

    def before_open(self, accept: bool) -> None:
        """Read the mark; refuse a file that is gone while its mark says it held commits (before
        DuckDB creates an empty one in its place)."""
        self.expected = self.mark.read()
        if self.expected and not os.path.lexists(self.path) and not accept:
            raise LostCommits(
                gone_message(self.url, self.expected, self.mark.path), self.expected, 0
            )

    def opened(self, held: int, accept: bool) -> bool:
        """DuckDB opened the file, which holds ``held``: remember its identity; True when it
        holds less than its mark says and ``accept`` lets the store open it anyway.

        Raises
        ------
        LostCommits
            When it holds less and the loss is not accepted.
        """
        self.identity = FileIdentity.of(self.path)
        expected = self.expected
        if expected is None or held >= expected:
            return False
        if not accept:
            raise LostCommits(
                lost_message(self.url, expected, held, self.mark.path), expected, held
            )
        return True

    def start(self, held: int) -> None:
        """The store is open and holds ``held``: the mark says so from now on."""
        self.mark.start(held)

    def refuse_broken(self) -> None:
        """Raise :class:`StoreBroken` once the file went."""
        if self.broken is not None:
            raise StoreBroken(self.broken)

    def check(self, uncounted: int = 0) -> None:
        """Raise :class:`StoreBroken` when the path no longer names the file that was opened;
        ``uncounted``: commits made since the last check (they went to that file)."""
        self.refuse_broken()
        now = FileIdentity.of(self.path)
        if now == self.identity:
            return
        self.broken = replaced_message(self.url, now is None, uncounted)
        log.error("%s", self.broken)
        raise StoreBroken(self.broken)

    def committed(self, changes: int) -> None:
        """A commit of ``changes`` went through: check the file before its callers hear of it,
        then move the mark on."""
        self.check(uncounted=1)
        self.mark.advance(changes)

    def close(self) -> None:
        """Release the mark file."""
        self.mark.close()
