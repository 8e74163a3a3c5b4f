"""The engines open in this process: closed at interpreter exit, and replaced by a newer one
on the same DuckDB file (a notebook cell that opens an engine runs again).

The registries hold anything with ``runtime`` and ``close()`` (an :class:`~wfkit.Engine`),
so that this module needs no engine type.
"""

from __future__ import annotations

import atexit
import logging
import time
import weakref
from typing import TYPE_CHECKING, Protocol

from wfkit.store.duckdb import holder as duckdb_holder

if TYPE_CHECKING:
    from wfkit.engine.runtime import Runtime

__all__ = ["forget", "opened", "replace_older", "working"]

log = logging.getLogger("wfkit.engine")


class Closable(Protocol):
    """An open engine, as these registries see it."""

    @property
    def runtime(self) -> Runtime: ...

    def close(self) -> None: ...


_OPEN: weakref.WeakSet[Closable] = weakref.WeakSet()
"""Engines not closed yet, closed at interpreter exit (a weak set: it keeps none alive)."""
_WORKING: set[Closable] = set()
"""Engines whose workers run: held until they stop, so that an engine the caller no longer
references (a script's local variable) is still closed at exit rather than torn down under its
writer thread."""


def _close_at_exit() -> None:
    """The interpreter exits (a script ended or raised, ``sys.exit``, a notebook kernel or
    ``wfkit serve`` stops): stop every engine's workers after their current attempts and close
    its store, before the interpreter tears down the threads that still use it."""
    for engine in {*_OPEN, *_WORKING}:
        try:
            engine.close()
        except Exception:  # the process is ending: say what went wrong, close the others
            log.warning("closing %r at exit failed", engine, exc_info=True)


def replace_older(target: str) -> None:
    """Close the engine of this process that holds the DuckDB file ``target``, if one does.

    A notebook cell that opens an engine runs again: the new engine replaces the old one rather
    than fail, and two live engines never write one file. The old engine's workers stop after
    their current attempts first, as on ``close()``; later calls on it say it was replaced.
    """
    if target.startswith(("postgresql://", "postgres://")):
        return  # engines share a PostgreSQL database through leases
    held = duckdb_holder(target)
    older = next((e for e in list(_OPEN) if e.runtime.store is held and not e.runtime.closed), None)
    if held is None or older is None:
        return  # free, or held by something that is no engine: the store says so
    log.info("a new engine on %r replaces the one this process had open on it", target)
    held.closed_reason = (
        f"a newer wf.Engine({target!r}) replaced this engine at "
        f"{time.strftime('%H:%M:%S')} (the cell that opens it ran again?); use the newer "
        "engine, and make the widgets that held this one again with it"
    )
    older.close()


def opened(engine: Closable) -> None:
    """Count ``engine`` among the open ones, closed at exit; exit hooks run last registered
    first: registered again after the store is open, so that the engine closes before the
    database client's own exit hook (DuckDB's interrupts the queries still running, which the
    writer thread may be in)."""
    _OPEN.add(engine)
    atexit.unregister(_close_at_exit)
    atexit.register(_close_at_exit)


def working(engine: Closable) -> None:
    """Hold ``engine`` while its workers run, so that it is closed at exit."""
    _WORKING.add(engine)


def forget(engine: Closable, *, closed: bool) -> None:
    """Its workers stopped (``closed``: it was closed, too)."""
    _WORKING.discard(engine)
    if closed:
        _OPEN.discard(engine)
