"""``wfkit worker``: one of many engine processes advancing the runs of a shared PostgreSQL store.

A worker imports the modules that define activities and workflows (like ``wfkit serve``),
registers every module-level :class:`~wfkit.Workflow` it finds (the same graph again is a no-op),
and runs engine workers until SIGTERM or SIGINT. Runs are shared out through leases (see
:mod:`wfkit.engine.leases`): each worker claims runs nobody advances, and takes over the runs of a
worker that died once its lease runs out. On a signal the worker stops gracefully: attempts in
flight finish and are checkpointed, then its runs are given back so the others take them at once.

A DuckDB file has a single owner process, so a worker refuses one: serve it with ``wfkit serve``
or drive it from a notebook.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

from wfkit.definition.durations import parse_duration
from wfkit.engine import Engine
from wfkit.engine.logformat import configure_logging
from wfkit.engine.metrics import enable_metrics
from wfkit.engine.queues import served_queues
from wfkit.errors import UsageError

__all__ = ["MetricsServer", "is_shared_url", "run_worker", "safe_url", "serve_metrics"]

_SCHEMES = ("postgresql://", "postgres://")


def is_shared_url(db: str) -> bool:
    """True when ``db`` names a database that many engine processes may share (PostgreSQL)."""
    return db.startswith(_SCHEMES)


def safe_url(db: str) -> str:
    """The URL without its password (for messages and logs)."""
    from wfkit.store.postgres import _safe

    return _safe(db)


def run_worker(
    db: str,
    modules: Sequence[str],
    threads: int = 4,
    lease: str = "30s",
    *,
    queues: Sequence[str] | None = None,
    stop: threading.Event | None = None,
    echo: Callable[[str], None] | None = None,
    metrics_port: int | None = None,
    metrics_addr: str = "127.0.0.1",
    log_format: str = "text",
) -> str:
    """Advance the runs of the PostgreSQL database ``db`` until SIGTERM/SIGINT (or ``stop``).

    Parameters
    ----------
    db : str
        A ``postgresql://`` URL; DuckDB paths are refused.
    modules : sequence of str
        Module names or ``.py`` files defining activities and workflows.
    threads : int
        Worker threads of this process's engine.
    lease : str
        How long a run stays this process's after its last renewal (e.g. ``"30s"``): the time
        the other workers wait before taking over the runs of a worker that died.
    queues : sequence of str, optional
        Run only the steps of these activity queues (``wfkit worker --queue gpu``); runs whose
        next steps belong to other queues are handed over to the workers serving those. Every
        queue by default.
    stop : threading.Event, optional
        Set it to stop the worker (as a signal would); signals are handled only when the worker
        runs on the main thread.
    echo : callable, optional
        Where the start and stop lines go (stdout, flushed, by default; with
        ``log_format="json"``, log records of the ``wfkit.worker`` logger).
    metrics_port : int, optional
        Serve the engine's Prometheus metrics over HTTP on this port (0: a free one, named in
        the start line); needs ``prometheus_client`` (``wfkit[metrics]``).
    metrics_addr : str
        The address the metrics port listens on (loopback by default).
    log_format : str
        ``text`` or ``json`` (one JSON object per line on stderr, see
        :mod:`wfkit.engine.logformat`).

    Returns
    -------
    str
        This worker's owner id (``host:pid:nonce``), as recorded in ``wf_instances.owner``.

    Raises
    ------
    UsageError
        For a DuckDB path, a bad lease, threads below 1, a bad queue name, or a module that
        cannot be imported.
    """
    if not is_shared_url(db):
        raise UsageError(
            f"wfkit worker needs a PostgreSQL database (postgresql://user@host:port/db), not "
            f"{db!r}: a DuckDB file has a single owner process, so many workers cannot share it; "
            f"serve it with 'wfkit serve --db {db}' or drive it from a notebook"
        )
    if threads < 1:
        raise UsageError(f"--threads must be 1 or more, got {threads}")
    try:
        lease_for = parse_duration(lease)
    except ValueError as exc:
        raise UsageError(f"--lease: {exc}") from None
    if lease_for.total_seconds() <= 0:
        raise UsageError(f"--lease must be longer than zero, got {lease!r}")
    served = served_queues(list(queues) if queues else None)

    from wfkit.api.server import (  # how `wfkit serve` imports modules and tunes the process
        _workflows,
        load_modules,
        tune_gc,
    )

    configure_logging(log_format)
    if log_format == "json":
        echo = _log_line
    echo = echo or _print
    loaded = load_modules(modules)
    stop = stop if stop is not None else threading.Event()
    with _stop_on_signals(stop) as received:
        engine = Engine(db, lease=lease_for)
        exposer: MetricsServer | None = None
        try:
            for flow in _workflows(loaded):
                engine.register(flow)
            owner = _owner(engine)
            flows = ", ".join(f"{w} v{max(v)}" for w, v in engine.workflows().items()) or "none"
            scrape = ""
            if metrics_port is not None:
                exposer = serve_metrics(engine, metrics_port, metrics_addr)
                scrape = f"; metrics at {exposer.url}"
            engine.start_workers(threads, queues=served)
            tune_gc()
            serving = "every queue" if served is None else "queues " + ", ".join(sorted(served))
            echo(
                f"wfkit worker {owner} started on {safe_url(db)}: {threads} threads "
                f"({serving}), lease {lease}; workflows: {flows}{scrape}"
            )
            stop.wait()
            engine.stop()  # attempts in flight finish and are checkpointed; runs are released
        finally:
            if exposer is not None:
                exposer.close()
            engine.close()
    why = f"on {received[0]}" if received else "as asked"
    echo(f"wfkit worker {owner} stopped {why}; its runs are released")
    return owner


def _print(line: str) -> None:
    print(line, flush=True)


def _log_line(line: str) -> None:
    logging.getLogger("wfkit.worker").info(line)


class MetricsServer:
    """prometheus_client's HTTP server of one engine's metrics, on a daemon thread."""

    def __init__(self, server: Any) -> None:
        self._server = server
        host, port = server.server_address[:2]
        self.url = f"http://{host}:{port}/metrics"

    def close(self) -> None:
        """Stop listening."""
        self._server.shutdown()
        self._server.server_close()


def serve_metrics(engine: Engine, port: int, addr: str = "127.0.0.1") -> MetricsServer:
    """Serve ``engine``'s metrics at ``http://addr:port/metrics`` (port 0: a free one).

    Raises
    ------
    UsageError
        When the port cannot be bound, or prometheus_client is not installed.
    """
    metrics = enable_metrics(engine.runtime)
    from prometheus_client import start_http_server

    try:
        server, _ = start_http_server(port, addr, registry=metrics.registry)
    except OSError as exc:
        raise UsageError(
            f"cannot serve metrics on {addr}:{port} ({exc.strerror or exc}); pick another "
            "--metrics-port (0 takes a free one) or stop what listens there"
        ) from exc
    return MetricsServer(server)


def _owner(engine: Engine) -> str:
    """The engine's lease owner id (``host:pid:nonce``)."""
    return engine.runtime.writer.owner.name


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[list[str]]:
    """Set ``stop`` on SIGTERM/SIGINT while inside (main thread only); yields the signal names
    received."""
    received: list[str] = []
    if sys.platform == "win32" or threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
