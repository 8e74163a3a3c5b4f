"""The ``Store`` protocol: what the engine needs from a database, and nothing more.

Domain logic stays in the engine. A store opens and migrates its schema, runs a list of
statements atomically (retrying write conflicts, which never count against an activity's
attempts), answers named queries, and runs a user's SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from wfkit.errors import StoreError
from wfkit.store.results import StatementResult

if TYPE_CHECKING:
    from wfkit.store.sessions import Session

__all__ = [
    "TERMINAL_STATUSES",
    "InTransaction",
    "LeaseLost",
    "LostCommits",
    "Statement",
    "Store",
    "StoreBroken",
    "ValueRefused",
]

TERMINAL_STATUSES = ("completed", "failed", "cancelled")

T = TypeVar("T")


@dataclass
class Statement:
    """One named statement and its rows; several rows of an INSERT go in one statement.

    ``expect`` is the number of rows a single-row statement must touch; when it touches fewer the
    whole transaction is rolled back with :class:`LeaseLost` (a run changed hands).

    ``claim`` makes every row remove exactly one row (its first value names it): on a store that
    engine processes share, a row another process removed first rolls the whole transaction
    back with :class:`AlreadyTaken` naming the rows (one DuckDB file has one writer, so there
    it cannot happen).
    """

    name: str
    rows: list[Any] = field(default_factory=list)
    returning: bool = False
    expect: int | None = None
    claim: bool = False


class LeaseLost(StoreError):
    """A run this engine meant to write is now held by another engine process."""


class AlreadyTaken(StoreError):
    """Rows a checkpoint meant to take (posted signals) were taken by another engine process
    first; ``keys`` names them. Nothing of the transaction was written."""

    def __init__(self, message: str, keys: Sequence[Any]) -> None:
        super().__init__(message)
        self.keys = list(keys)


class ValueRefused(StoreError):
    """The store refused a value in the rows written (bad text, a number out of range...): a
    problem of those rows, not of the store, which takes other rows as usual."""


class StoreBroken(StoreError):
    """The store can no longer keep what is written (its DuckDB file was deleted or replaced
    while the engine had it open): every later write is refused, and retrying cannot help."""


class LostCommits(StoreError):
    """A DuckDB file holds less than its engine committed to it (its write-ahead log was cut
    short or lost, or the file was replaced by an older copy): ``expected`` is the count the
    engine reached, ``held`` what the file holds (see :mod:`wfkit.store.marks`)."""

    def __init__(self, message: str, expected: int, held: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.held = held

    @property
    def missing(self) -> int:
        """How many of the counted changes are missing."""
        return self.expected - self.held


class InTransaction(Protocol):
    """Named statements run inside one open transaction (see :meth:`Store.atomically`)."""

    def execute(self, name: str, params: Sequence[Any] = ()) -> int:
        """Run the named statement; the number of rows it changed."""

    def returning(self, name: str, params: Sequence[Any] = ()) -> tuple[list[str], list[Any]]:
        """Run the named statement; the names of its columns and its rows."""


class Store(Protocol):
    """A backend that keeps wfkit's tables."""

    url: str
    shared: bool  # True where many engine processes may share the database (leases apply)

    def close(self) -> None:
        """Release the database (and its file lock)."""

    def check(self) -> None:
        """Raise :class:`StoreError` when the store cannot keep what is written now: closed,
        not answering a query, or (DuckDB) its file deleted or replaced since it was opened."""

    def write(self, statements: Sequence[Statement]) -> list[list[tuple[Any, ...]]]:
        """Run ``statements`` in one transaction; return the rows of ``returning`` ones."""

    def query(self, name: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of the named query."""

    def sql(self, text: str, params: Sequence[Any] | None = None) -> StatementResult:
        """Run a user's SQL: its rows, the same type on every backend."""

    def atomically(self, work: Callable[[InTransaction], T]) -> T:
        """Run ``work`` in one transaction: committed when it returns, rolled back (and its
        exception raised) when it raises."""

    def session(self) -> Session:
        """Open a caller's transaction on the store (see :mod:`wfkit.store.sessions`)."""

    def adopt(self, connection: Any) -> Session:
        """A session on the caller's own open connection (refused where the backend has none
        to offer: DuckDB)."""
