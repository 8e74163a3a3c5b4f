"""Group commit: callers' writes, each a :class:`Command` run under the writer lock by whichever
thread commits next, with every other command queued so far, in one transaction; and the retry
loop of a commit the store failed.

A caller hands its command over and waits for its own outcome: ``fn``'s value once the
transaction holding its changes is durable, or the exception ``fn`` raised (its new runs are then
left out), or the store's error when the transaction failed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from wfkit.engine.writer import Released, Writer
from wfkit.errors import StoreError, UsageError
from wfkit.store.base import StoreBroken

__all__ = ["Command", "CommandQueue", "commit_with_retry", "run_commands"]

T = TypeVar("T")

# signals in one round from which two queries find all their waits and runs (one: a point
# lookup of each is faster; measured here 1.4 ms for one, 1.75 ms for eight together)
SIGNALS_TOGETHER = 2


class Command(Generic[T]):
    """One caller's write: run under the writer lock by whichever thread commits next.

    ``fn`` changes runs through the writer's checkpoints (it never commits); the caller waits
    until the transaction holding its changes is durable and gets ``fn``'s value, or the
    exception ``fn`` raised (its new runs are then left out: a refused command writes nothing),
    or the store's error when the transaction failed. An ``alone`` command commits on its own
    (it reads the store for rows the same batch could still be writing).
    """

    __slots__ = ("_claim", "alone", "done", "error", "fn", "notify", "signal", "value")

    def __init__(
        self,
        fn: Callable[[Writer], T],
        alone: bool = False,
        signal: tuple[str, str | None] | None = None,
    ) -> None:
        self.fn = fn
        self.alone = alone
        self.signal = signal  # the (name, key) of the wait it looks up, if any
        self.notify: Callable[[], None] | None = None  # called once when it is done
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self._claim = threading.Lock()

    def finish(self) -> None:
        """Mark it done (its value or error is set) and tell an asyncio caller."""
        if self.done.is_set():
            return
        self.done.set()
        if self.notify is not None:
            self.notify()

    def claim(self) -> bool:
        """True for the one thread that runs this command."""
        return self._claim.acquire(blocking=False)

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value


class CommandQueue:
    """The callers' commands not yet run, and who may not queue one."""

    def __init__(self) -> None:
        self.waiting: deque[Command[Any]] = deque()  # callers' commands not yet run
        # threads inside an `engine.transaction()` block: their own commands are refused
        self.blocks: set[int] = set()
        self.closed_reason: str | None = None  # set by engine.close(): what its callers are told

    def __len__(self) -> int:
        return len(self.waiting)

    def put(self, command: Command[Any]) -> None:
        """Queue a command for the next group commit."""
        self.waiting.append(command)

    def refuse_closed(self) -> None:
        """Raise UsageError, saying why, once the engine is closed."""
        if self.closed_reason is not None:
            raise UsageError(self.closed_reason)

    def refuse_in_block(self, what: str) -> None:
        """Raise UsageError on a thread inside an ``engine.transaction()`` block: the engine's
        own writes would commit outside the block's transaction, or wait for the writer the
        block holds."""
        if threading.get_ident() in self.blocks:
            raise UsageError(
                f"{what} cannot run inside a `with engine.transaction() as tx:` block on the "
                "same thread: it would commit outside the block's transaction (or wait for the "
                "writer the block holds). Start runs with tx.start(...) / tx.start_many(...) "
                "inside the block; make other engine calls after it"
            )

    def take(self) -> list[Command[Any]]:
        """The commands queued so far that no other thread has taken."""
        taken: list[Command[Any]] = []
        while self.waiting:
            try:
                command = self.waiting.popleft()
            except IndexError:
                break
            if command.claim():
                taken.append(command)
        return taken


def run_commands(
    commands: list[Command[Any]], writer: Writer, commit: Callable[[bool], Released]
) -> Released:
    """Run ``commands`` into the batch and commit it with ``commit(force)`` (under the writer
    lock); each one learns its outcome once the commit is durable."""
    released = Released()
    pending: list[Command[Any]] = []
    signals = [c.signal for c in commands if c.signal is not None and not c.alone]
    try:
        if len(signals) >= SIGNALS_TOGETHER:  # one query finds them all
            writer.find_signal_waits(signals)
    except StoreError as exc:
        for command in commands:
            command.error = exc
            command.finish()
        return released
    for command in commands:
        if command.alone:
            released.merge(_commit(pending, writer, commit))
            pending = []
            writer.clear_signal_waits()  # its commit may move those runs on
            _run_one(command, writer)
            released.merge(_commit([command], writer, commit))
        else:
            _run_one(command, writer)
            pending.append(command)
    writer.clear_signal_waits()
    released.merge(_commit(pending, writer, commit))
    return released


def _run_one(command: Command[Any], writer: Writer) -> None:
    before = set(writer.batch_runs())
    try:
        command.value = command.fn(writer)
    except BaseException as exc:  # the caller gets it; its new runs are not written
        command.error = exc
        writer.forget_new(set(writer.batch_runs()) - before)
        command.finish()


def _commit(
    commands: list[Command[Any]], writer: Writer, commit: Callable[[bool], Released]
) -> Released:
    """Commit the batch; the commands whose changes it holds learn whether it stuck."""
    failures = writer.failures
    try:
        released = commit(bool(commands))
    except BaseException as exc:
        for command in commands:
            command.error = exc
            command.finish()
        raise
    if writer.failures != failures:  # a failed try dropped their changes
        for command in commands:
            command.error = StoreError(
                "the store refused the transaction holding this change, so it was not "
                f"made ({writer.last_failure}); nothing changed: try again"
            )
            command.finish()
    for command in commands:
        command.finish()
    return released


def commit_with_retry(
    writer: Writer, force: bool, reload_lost: Callable[[], None], log: logging.Logger
) -> Released:
    """``writer.commit(force)``, tried again after a store error (six times in all, waiting
    0.05 s, then twice as long each time); ``reload_lost`` after each failure brings back the
    runs it dropped from memory. A store whose file is gone is not tried again."""
    delay = 0.05
    for attempt in range(6):
        try:
            return writer.commit(force)
        except StoreBroken:
            raise  # its file is gone: trying again cannot help
        except StoreError:
            if attempt == 5:
                raise
            log.warning("store write failed; the steps will run again", exc_info=True)
            time.sleep(delay)
            delay *= 2
            reload_lost()
    raise AssertionError("unreachable")
